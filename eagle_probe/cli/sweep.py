"""`eagle-probe sweep`: train and extract a grid of seeds x regimes in parallel."""

from __future__ import annotations

import argparse

from eagle_probe.cli.common import (
    SEED_LIMIT,
    Parser,
    _claim,
    _finite_float,
    _out_dir,
    _positive_int,
    _publish,
)
from eagle_probe.errors import EagleProbeError

HELP = "train and extract a grid of seeds x regimes in parallel"


def _add_sweep(parser: Parser) -> None:
    parser.add_argument(
        "--regimes", default="centralized,distributed,constrained", help="comma-separated regimes"
    )
    parser.add_argument(
        "--seeds", default="0,1,2", help="comma-separated seeds, or a count like 10"
    )
    parser.add_argument("--steps", type=_positive_int, default=500, help="steps per run (500)")
    parser.add_argument("--batch", type=_positive_int, default=256, help="batch per run (256)")
    parser.add_argument(
        "--parallel", type=_positive_int, default=None, help="runs at a time (the CPU count)"
    )
    parser.add_argument("--normalize", default="spectral", help="prompt normalisation (spectral)")
    parser.add_argument("--schedule", default="warmup_cosine", help="learning-rate schedule")
    parser.add_argument("--lr", type=_finite_float, default=1e-3, help="Adam learning rate (1e-3)")
    parser.add_argument(
        "--gain-lr", type=_finite_float, default=0.0, help="rate of the head log-gains (0: off)"
    )
    parser.add_argument("--select", default="mean", help="mean, median or trimmed (mean)")
    parser.add_argument(
        "--eval-batch", type=_positive_int, default=2048, help="held-out validation prompts"
    )
    parser.add_argument(
        "--name", default="{regime}_seed{seed}", help="checkpoint file stem ({regime}_seed{seed})"
    )
    parser.add_argument(
        "--out", default="sweep-out", help="directory for checkpoints and sweep.csv"
    )
    parser.add_argument("--force", action="store_true", help="write into an existing --out")


def run(args: argparse.Namespace) -> int:
    from eagle_probe import files
    from eagle_probe.budget import MAX_RUNS
    from eagle_probe.model import REGIMES
    from eagle_probe.sweep import run_sweep, spread

    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    for r in regimes:
        if r not in REGIMES:
            raise EagleProbeError(f"unknown regime {r!r}; choose from {', '.join(REGIMES)}")
    from eagle_probe.model import NORMALIZE
    from eagle_probe.sweep import run_name
    from eagle_probe.train import SCHEDULES, SELECTIONS

    for option, value, known in (
        ("--normalize", args.normalize, NORMALIZE),
        ("--schedule", args.schedule, SCHEDULES),
        ("--select", args.select, SELECTIONS),
    ):
        if value not in known:
            raise EagleProbeError(f"unknown {option} {value!r}; choose from {', '.join(known)}")
    if not args.lr > 0 or args.gain_lr < 0:
        raise EagleProbeError("--lr must be positive and --gain-lr non-negative")
    text = args.seeds.strip()
    count = int(text) if text.isdigit() else None
    if count == 0:
        raise EagleProbeError("--seeds 0 asks for no run: give a count of at least 1 or a list")
    if count is not None and count * len(regimes) > MAX_RUNS:
        raise EagleProbeError(
            f"--seeds {text} with {len(regimes)} regime(s) asks for more than {MAX_RUNS} runs"
        )
    try:
        seeds = list(range(count)) if count is not None else [int(s) for s in text.split(",")]
    except ValueError:
        raise EagleProbeError(
            f"--seeds must be a count or comma-separated integers, got {text!r}"
        ) from None
    if not seeds or not regimes or any(not 0 <= s < SEED_LIMIT for s in seeds):
        raise EagleProbeError("give at least one regime and seeds in [0, 2**32)")
    if len(seeds) * len(regimes) > MAX_RUNS:
        raise EagleProbeError(f"the sweep asks for more than {MAX_RUNS} runs")
    for r in regimes:
        for seed in seeds:
            run_name(args.name, r, seed)
    extra = [
        "--normalize",
        args.normalize,
        "--schedule",
        args.schedule,
        "--lr",
        repr(args.lr),
        "--gain-lr",
        repr(args.gain_lr),
        "--select",
        args.select,
        "--eval-batch",
        str(args.eval_batch),
    ]
    out = _out_dir(args.out, args.force)
    tmp = _claim(args, files.output_dir(out, force=args.force))
    table = run_sweep(
        regimes,
        seeds,
        tmp,
        steps=args.steps,
        batch=args.batch,
        parallel=args.parallel,
        extra=extra + (["--threads", str(args.threads)] if args.threads else []),
        name=args.name,
        published=out,
    )
    _publish(args)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.precision", 3):
        print(spread(table).to_string())
    print(f"wrote {out / 'sweep.csv'}")
    return 0
