"""`eagle-probe sweep`: train and extract a grid of seeds x regimes in parallel."""

from __future__ import annotations

import argparse
import sys

from eagle_probe.cli.common import (
    EXIT_USER,
    SEED_LIMIT,
    Parser,
    claim_dir,
    enter_claim,
    finite_float32,
    memory_budget,
    nonneg_int,
    out_dir,
    positive_int,
    publish,
    step_count,
)
from eagle_probe.errors import EagleProbeError

HELP = "train and extract seeds x regimes, or plan them for Slurm"


def add_sweep(parser: Parser) -> None:
    parser.add_argument(
        "--regimes",
        default="centralized,distributed,constrained",
        help="comma-separated regimes (all three)",
    )
    parser.add_argument(
        "--seeds",
        default="0,1,2",
        help="comma-separated seeds (one seed: 5,), or a count like 10 (0,1,2)",
    )
    parser.add_argument("--steps", type=step_count, default=500, help="steps per run (500)")
    parser.add_argument("--batch", type=positive_int, default=256, help="batch per run (256)")
    parser.add_argument(
        "--parallel", type=positive_int, default=None, help="runs at a time (the CPU count)"
    )
    parser.add_argument("--normalize", default="spectral", help="prompt normalisation (spectral)")
    parser.add_argument(
        "--schedule", default="warmup_cosine", help="learning-rate schedule (warmup_cosine)"
    )
    parser.add_argument("--lr", type=finite_float32, default=1e-3, help="Adam learning rate (1e-3)")
    parser.add_argument(
        "--gain-lr", type=finite_float32, default=0.0, help="rate of the head log-gains (0: off)"
    )
    parser.add_argument("--select", default="mean", help="mean, median or trimmed (mean)")
    parser.add_argument(
        "--eval-batch", type=positive_int, default=2048, help="held-out validation prompts (2048)"
    )
    parser.add_argument(
        "--name", default="{regime}_seed{seed}", help="checkpoint file stem ({regime}_seed{seed})"
    )
    parser.add_argument(
        "--out", default="sweep-out", help="directory for checkpoints and sweep.csv (sweep-out)"
    )
    parser.add_argument("--force", action="store_true", help="write into an existing --out")
    parser.add_argument(
        "--save-every",
        type=positive_int,
        default=None,
        metavar="K",
        help="each run keeps a checkpoint every K steps in NAME.steps/ (train --save-every)",
    )
    parser.add_argument(
        "--ensemble",
        type=positive_int,
        default=1,
        metavar="K",
        help="train up to K consecutive seeds of a regime together in one process (1)",
    )
    cluster = parser.add_argument_group("cluster (a plan of runs, one line each)")
    cluster.add_argument(
        "--plan", default=None, metavar="FILE", help="write the sweep's runs to FILE (JSON lines)"
    )
    cluster.add_argument("--run", default=None, metavar="FILE", help="run one line of a plan")
    cluster.add_argument(
        "--index", type=nonneg_int, default=None, metavar="I", help="the line --run runs"
    )
    cluster.add_argument(
        "--collect",
        default=None,
        metavar="FILE",
        help="extract the checkpoints a plan's runs wrote into --out/sweep.csv",
    )
    cluster.add_argument(
        "--slurm", default=None, metavar="FILE", help="with --plan: write an sbatch array script"
    )
    cluster.add_argument("--submit", action="store_true", help="with --slurm: sbatch FILE")
    cluster.add_argument("--slurm-time", default="04:00:00", help="time per task (04:00:00)")
    cluster.add_argument(
        "--slurm-cpus", type=positive_int, default=1, help="CPUs (threads) per task (1)"
    )
    cluster.add_argument("--slurm-mem", default="4G", help="memory per task (4G)")
    cluster.add_argument("--slurm-partition", default=None, help="partition (the default one)")
    cluster.add_argument(
        "--slurm-max-parallel", type=positive_int, default=None, help="tasks at once (no cap)"
    )
    cluster.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="a further #SBATCH line, e.g. --sbatch=--gres=gpu:1 (repeatable)",
    )
    cluster.add_argument("--job-name", default="eagle-probe", help="Slurm job name (eagle-probe)")


def run(args: argparse.Namespace) -> int:
    from eagle_probe.budget import MAX_RUNS
    from eagle_probe.regimes import REGIMES
    from eagle_probe.sweep import run_sweep

    if args.run is not None or args.index is not None:
        return _run_line(args)
    if args.collect is not None:
        return _collect(args)
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
        if count is not None:
            seeds = list(range(count))
        else:  # a list may end in a comma, so one seed S alone is `--seeds S,` (S is a count)
            seeds = [int(s) for s in text.removesuffix(",").split(",")]
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
    if args.save_every is not None:
        if args.ensemble > 1:
            raise EagleProbeError(
                "--save-every keeps one run's checkpoints: it does not combine with --ensemble"
            )
        extra += ["--save-every", str(args.save_every)]
    if args.ensemble > 1 and "{seed}" not in args.name:
        raise EagleProbeError("--ensemble needs {seed} in --name: each seed has its own file")
    if args.plan is not None:
        return _write_plan(args, regimes, seeds, extra)
    if args.slurm is not None or args.submit or args.sbatch:
        raise EagleProbeError("--slurm, --submit and --sbatch write a plan's script: add --plan")
    out = out_dir(args.out, args.force)
    tmp = claim_dir(args, out)
    table = run_sweep(
        regimes,
        seeds,
        tmp,
        steps=args.steps,
        batch=args.batch,
        parallel=args.parallel,
        extra=extra + (["--threads", str(args.threads)] if args.threads else []),
        name=args.name,
        ensemble=args.ensemble,
        published=out,
        max_bytes=memory_budget(args),
    )
    publish(args)
    return _report(table, out, len(seeds) * len(regimes))


def _train_parser() -> Parser:
    """The options of `eagle-probe train` (without the parents every command shares)."""
    from eagle_probe.cli.train import add_train

    parser = Parser(prog="eagle-probe train", add_help=False)
    add_train(parser)
    return parser


def _full_options(argv: list[str]) -> tuple[dict, list[str]]:
    """Every `train` option with its value for the command `argv` (defaults included), and the
    command line that states them all but those its regime does not take (`train` refuses
    --machines and --rank there: `foreign_options`)."""
    from eagle_probe.cli.train import foreign_options

    parser = _train_parser()
    options = vars(parser.parse_args(argv))
    options.pop("given")  # which options the command line named (`Parser`): not an option
    foreign = set(foreign_options(options["regime"]))
    full = ["train"]
    for action in parser._actions:
        if action.dest in foreign:
            continue
        value = options[action.dest]
        flag = next(o for o in action.option_strings if o.startswith("--"))
        if action.nargs == 0:  # a switch
            full += [flag] if value else []
        elif value is not None:
            full += [flag, repr(value) if isinstance(value, float) else str(value)]
    return options, full


def _write_plan(args: argparse.Namespace, regimes: list[str], seeds: list[int], extra) -> int:
    """`sweep … --plan FILE [--slurm FILE [--submit]]`: the runs written down, none trained."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from eagle_probe import files, plan
    from eagle_probe.sweep import run_name

    if (args.submit or args.sbatch) and not args.slurm:
        raise EagleProbeError("--submit and --sbatch go with --slurm FILE")
    out = files.as_path(args.out, "--out").resolve()
    lines = []
    for regime in regimes:
        for group in plan.group_seeds(seeds, args.ensemble):
            stem = run_name(args.name, regime, group[0])
            if len(group) > 1:
                stem = args.name.replace("{regime}", regime)  # train --seeds fills {seed}
            argv = ["--regime", regime, "--seed", str(group[0]), "--seeds", str(len(group))]
            argv += ["--steps", str(args.steps), "--batch", str(args.batch)]
            argv += ["--eval-every", str(max(1, args.steps // 8)), "--no-progress", "--force"]
            argv += [*extra, "-o", str(out / f"{stem}.pt")]
            options, full = _full_options(argv)
            outputs = [out / f"{run_name(args.name, regime, s)}.pt" for s in group]
            lines.append(plan.plan_line(len(lines), regime, group, outputs, options, full))
    plan_path = files.as_path(args.plan, "--plan")
    targets = [plan_path] + ([files.as_path(args.slurm, "--slurm")] if args.slurm else [])
    claim = enter_claim(args, files.output_files(targets, force=args.force))
    claim.write_text(plan_path, plan.plan_text(lines))
    if args.slurm:
        script = plan.slurm_script(
            plan_path.resolve(),
            len(lines),
            python=sys.executable,
            job_name=args.job_name,
            time=args.slurm_time,
            cpus=args.slurm_cpus,
            mem=args.slurm_mem,
            partition=args.slurm_partition,
            max_parallel=args.slurm_max_parallel,
            logs=out,
            sbatch=args.sbatch,
        )
        claim.write_text(targets[1], script)
        Path(targets[1]).chmod(0o755)
    publish(args)
    print(f"wrote {plan_path}: {len(lines)} runs, outputs in {out}")
    if args.slurm:
        print(f"wrote {args.slurm}: sbatch array 0-{len(lines) - 1}")
    if args.submit:
        sbatch = shutil.which("sbatch")
        if sbatch is None:
            raise EagleProbeError(f"no sbatch on PATH; submit it yourself: sbatch {args.slurm}")
        done = subprocess.run([sbatch, str(args.slurm)], capture_output=True, text=True)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise EagleProbeError(f"sbatch {args.slurm} failed ({done.returncode}): {reason}")
        print(done.stdout.strip() or f"submitted {args.slurm}")
    return 0


def _report(table, out, runs: int) -> int:
    """Print the spread across seeds and the file written; one line naming the failed runs."""
    import pandas as pd

    from eagle_probe.sweep import failures, spread

    with pd.option_context("display.width", 200, "display.precision", 3):
        print(spread(table).to_string())
    print(f"wrote {out / 'sweep.csv'}")
    failed = failures(table)
    if failed:  # the others are published; the exit code says the sweep is incomplete
        print(
            f"eagle-probe: error: {len(failed)} of {runs} runs failed ({'; '.join(failed[:3])}"
            f"{'; …' if len(failed) > 3 else ''}); the others are in {out / 'sweep.csv'}",
            file=sys.stderr,
        )
        return EXIT_USER
    return 0


def _collect(args: argparse.Namespace) -> int:
    """`sweep --collect FILE --out DIR`: the plan's checkpoints extracted into DIR/sweep.csv."""
    from eagle_probe import files, plan
    from eagle_probe.sweep import collect

    lines = plan.read_plan(args.collect, max_bytes=memory_budget(args))
    out = files.as_path(args.out, "--out")
    if (out / "sweep.csv").exists() and not args.force:
        files.check_file(out / "sweep.csv", force=False)  # one line before any work
    table = collect(lines)
    out.mkdir(parents=True, exist_ok=True)
    claim = enter_claim(args, files.output_files([out / "sweep.csv"], force=args.force))
    claim.write_text(out / "sweep.csv", table.to_csv(index=False))
    publish(args)
    return _report(table, out, sum(len(line["outputs"]) for line in lines))


def _run_line(args: argparse.Namespace) -> int:
    """`sweep --run FILE --index I`: line I of the plan, trained as its `train` command."""
    from pathlib import Path

    from eagle_probe import plan
    from eagle_probe.cli import build_parser
    from eagle_probe.cli.train import run as train

    if args.run is None or args.index is None:
        raise EagleProbeError("--run FILE and --index I go together")
    line = plan.select(
        plan.read_plan(args.run, max_bytes=memory_budget(args)), args.index, args.run
    )
    for output in line["outputs"]:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
    targs = build_parser().parse_args([*line["argv"], "--max-memory", repr(args.max_memory)])
    targs.outputs = args.outputs
    targs.threads, targs.device = args.threads, args.device
    return train(targs)
