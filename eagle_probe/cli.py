"""The `eagle-probe` command line.

User errors (bad arguments, bad files) print one line and exit with code 2; internal failures exit
with code 1. `--debug` shows the full traceback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from eagle_probe import __version__
from eagle_probe.errors import EagleProbeError

EXIT_USER, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 1, 130


class UsageError(EagleProbeError):
    """Raised by the argument parser instead of printing usage and exiting."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def build_parser() -> Parser:
    from eagle_probe.model import NORMALIZE, READOUTS, REGIMES, TOKEN_MASKS
    from eagle_probe.tasks import TASKS
    from eagle_probe.train import SCHEDULES

    parser = Parser(prog="eagle-probe", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"eagle-probe {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    train = sub.add_parser("train", help="train a model and write a checkpoint")
    train.add_argument("--regime", required=True, help=f"one of {', '.join(REGIMES)}")
    train.add_argument("--task", default="paper", help=f"one of {', '.join(TASKS)}")
    train.add_argument("--layers", type=_positive_int, default=4, help="attention layers (4)")
    train.add_argument(
        "--heads",
        type=_positive_int,
        default=None,
        help="heads per layer (1; distributed: one per machine)",
    )
    train.add_argument(
        "--machines",
        type=_positive_int,
        default=3,
        help="distributed: machines M, must divide n (3)",
    )
    train.add_argument(
        "--rank", type=_positive_int, default=5, help="constrained: query/key width r <= n (5)"
    )
    # --columns/--rows: aliases that torchrun's own option parser does not mistake for its own
    train.add_argument("--n", "--columns", type=_positive_int, default=18, help="columns of A (18)")
    train.add_argument("--d", "--rows", type=_positive_int, default=18, help="rows of A (18)")
    train.add_argument("--n-prime", type=_positive_int, default=2, help="columns of C, D (2)")
    train.add_argument("--d-prime", type=_positive_int, default=2, help="rows of B, D (2)")
    train.add_argument(
        "--task-rank", type=_positive_int, default=10, help="rank s of the prompt matrices X (10)"
    )
    train.add_argument(
        "--alpha",
        type=_finite_float,
        default=0.7,
        help="anisotropy α of the paper distribution (0.7)",
    )
    train.add_argument(
        "--kappa",
        type=_finite_float,
        default=None,
        help="prescribe the condition number of A instead",
    )
    train.add_argument("--noise", type=_finite_float, default=0.0, help="noise variance σ² (0)")
    train.add_argument("--token-mask", default="visible", help=f"one of {', '.join(TOKEN_MASKS)}")
    train.add_argument("--readout", default="negate", help=f"one of {', '.join(READOUTS)}")
    train.add_argument(
        "--normalize",
        default="spectral",
        help=f"one of {', '.join(NORMALIZE)}; divide each prompt by that norm of A "
        "(spectral; none is the paper's plain model, unstable to train)",
    )
    train.add_argument("--init", default="normal", help="normal or orthogonal_half")
    train.add_argument(
        "--tokens", default="features", help="token layout: features (d + d' rows) or samples"
    )
    train.add_argument(
        "--init-std", type=_finite_float, default=0.02, help="std of the random initialisation"
    )
    train.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help="optimiser steps (20000; with --resume: the checkpoint's)",
    )
    train.add_argument("--batch", type=_positive_int, default=1024, help="prompts per step")
    train.add_argument("--lr", type=_finite_float, default=1e-3, help="Adam learning rate")
    train.add_argument("--schedule", default="constant", help=f"one of {', '.join(SCHEDULES)}")
    train.add_argument(
        "--warmup", type=_finite_float, default=0.1, help="warm-up fraction for warmup_cosine"
    )
    train.add_argument("--clip", type=_finite_float, default=0.1, help="gradient-norm clip")
    train.add_argument(
        "--weight-decay",
        type=_finite_float,
        default=0.0,
        help="decoupled AdamW weight decay (0: plain Adam, the paper's)",
    )
    train.add_argument(
        "--clip-qk",
        type=_finite_float,
        default=0.0,
        help="separate clip for W_Q/W_K gradients (0: off)",
    )
    train.add_argument(
        "--freeze-values-last",
        type=_finite_float,
        default=0.0,
        help="fraction of steps at the end with W_V, W_P frozen",
    )
    train.add_argument("--curriculum", action="store_true", help="grow difficulty from α = 1")
    train.add_argument("--skip-spikes", action="store_true", help="skip loss-spike updates")
    train.add_argument(
        "--data-shards",
        type=_positive_int,
        default=None,
        help="draw each batch as this many seeded chunks, a multiple of the torchrun processes "
        "(default: one per process, so 1 without torchrun)",
    )
    train.add_argument("--eval-every", type=_positive_int, default=250, help="validation period")
    train.add_argument(
        "--eval-batch", type=_positive_int, default=8192, help="held-out validation prompts"
    )
    train.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (0)")
    train.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads")
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.add_argument("--force", action="store_true", help="overwrite an existing output")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run stored in --out (its configs; --steps may extend)",
    )
    train.add_argument("-o", "--out", required=True, help="checkpoint to write (model.pt)")
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("evaluate", help="test MSE of a checkpoint on fresh prompts")
    ev.add_argument("model", help="checkpoint file (.pt)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--seed", type=_nonneg_int, default=12345, help="seed of the test prompts")
    ev.add_argument("--batch", type=_positive_int, default=8192, help="number of test prompts")
    ev.set_defaults(func=cmd_evaluate)

    ex = sub.add_parser("extract", help="recover the algorithm a checkpoint runs")
    ex.add_argument("model", help="checkpoint file (.pt)")
    ex.add_argument("--out", default=None, help="write DIR/extraction.json (and more) here")
    ex.add_argument(
        "--probe-batch", type=_positive_int, default=256, help="prompts in the probe batch (256)"
    )
    ex.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the probe prompts (0)")
    ex.add_argument("--no-control", action="store_true", help="skip the untrained-model control")
    ex.add_argument("--force", action="store_true", help="write into an existing --out")
    ex.set_defaults(func=cmd_extract)

    pl = sub.add_parser("plant", help="write a model whose weights run given EAGLE steps")
    pl.add_argument("--n", type=_positive_int, default=18, help="columns of A (18)")
    pl.add_argument("--d", type=_positive_int, default=18, help="rows of A (18)")
    pl.add_argument("--n-prime", type=_positive_int, default=2, help="columns of C, D (2)")
    pl.add_argument("--d-prime", type=_positive_int, default=2, help="rows of B, D (2)")
    pl.add_argument("--a-steps", required=True, help="comma-separated a_0,…,a_{L-1}")
    pl.add_argument("--c-steps", required=True, help="comma-separated c_0,…,c_{L-1}")
    pl.add_argument("--heads", type=_positive_int, default=1, help="heads per layer (1)")
    pl.add_argument("--dtype", default="float32", help="float32 or float64")
    pl.add_argument("--force", action="store_true", help="overwrite an existing output")
    pl.add_argument("-o", "--out", required=True, help="checkpoint to write")
    pl.set_defaults(func=cmd_plant)

    im = sub.add_parser("import", help="convert another codebase's weights into a checkpoint")
    im.add_argument("weights", help="weights file (.pt, .npz or .safetensors)")
    im.add_argument("--layout", required=True, help="eagle-probe, samples or ahn")
    im.add_argument("--n", type=_positive_int, required=True, help="samples n of the prompts")
    im.add_argument("--n-prime", type=_positive_int, default=1, help="queries n' (1)")
    im.add_argument("--d", type=_positive_int, default=None, help="feature layout: rows d of A")
    im.add_argument("--d-prime", type=_positive_int, default=None, help="outputs d' (1)")
    im.add_argument("--dtype", default="float32", help="float32 or float64 (float32)")
    im.add_argument("--force", action="store_true", help="overwrite an existing output")
    im.add_argument("-o", "--out", required=True, help="checkpoint to write")
    im.set_defaults(func=cmd_import)

    sw = sub.add_parser("sweep", help="train and extract a grid of seeds x regimes in parallel")
    sw.add_argument(
        "--regimes", default="centralized,distributed,constrained", help="comma-separated regimes"
    )
    sw.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, or a count like 10")
    sw.add_argument("--steps", type=_positive_int, default=500, help="steps per run (500)")
    sw.add_argument("--batch", type=_positive_int, default=256, help="batch per run (256)")
    sw.add_argument(
        "--parallel", type=_positive_int, default=None, help="runs at a time (the CPU count)"
    )
    sw.add_argument("--out", default="sweep-out", help="directory for checkpoints and sweep.csv")
    sw.add_argument("--force", action="store_true", help="write into an existing --out")
    sw.set_defaults(func=cmd_sweep)

    be = sub.add_parser("bench", help="benchmark the recovered solver against classical ones")
    be.add_argument("--suite", default="quick", help="quick, paper or real (quick)")
    be.add_argument("--out", default="bench-out", help="directory for CSV, PNG and summary.md")
    be.add_argument("--json", action="store_true", help="print the tables as one JSON object")
    be.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the problems (0)")
    be.add_argument("--force", action="store_true", help="write into an existing --out")
    be.set_defaults(func=cmd_bench)
    return parser


def _check_output(path: Path, force: bool) -> None:
    if path.is_dir():
        raise EagleProbeError(f"output {path} is a directory; give a file name like {path}/m.pt")
    if path.exists() and not force:
        raise EagleProbeError(f"output {path} already exists; pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise EagleProbeError(f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise EagleProbeError(f"output directory {parent} is not writable")


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig
    from eagle_probe.train import TrainConfig

    out = Path(args.out)
    resume = None
    if args.resume:
        if not out.is_file():
            raise EagleProbeError(f"--resume needs an existing checkpoint at {out}")
        model, task, previous = checkpoint.load(out)
        if "train_config" not in previous:
            raise EagleProbeError(f"{out} holds no training record to resume from")
        fields = dict(previous["train_config"])
        if args.steps is not None:
            fields["steps"] = args.steps
        train_cfg = TrainConfig.from_dict(fields)
        model_cfg = model.cfg
        resume = (model.state_dict(), previous)
    else:
        _check_output(out, args.force)
    if args.threads:
        torch.set_num_threads(args.threads)
    if resume is not None:
        return _run_training(args, out, model_cfg, task, train_cfg, resume)
    task = TaskConfig(
        task=args.task,
        n=args.n,
        d=args.d,
        n_prime=args.n_prime,
        d_prime=args.d_prime,
        noise=args.noise,
        rank=args.task_rank,
        alpha=args.alpha,
        kappa=args.kappa,
    )
    model_cfg = ModelConfig(
        regime=args.regime,
        n=args.n,
        d=args.d,
        n_prime=args.n_prime,
        d_prime=args.d_prime,
        n_layers=args.layers,
        n_heads=args.heads,
        machines=args.machines,
        rank=args.rank,
        token_mask=args.token_mask,
        readout=args.readout,
        normalize=args.normalize,
        init=args.init,
        init_std=args.init_std,
        tokens=args.tokens,
    )
    train_cfg = TrainConfig(
        steps=TrainConfig.steps if args.steps is None else args.steps,
        batch=args.batch,
        lr=args.lr,
        schedule=args.schedule,
        warmup=args.warmup,
        clip=args.clip,
        clip_qk=args.clip_qk,
        weight_decay=args.weight_decay,
        freeze_values_last=args.freeze_values_last,
        curriculum=args.curriculum,
        skip_spikes=args.skip_spikes,
        data_shards=args.data_shards,
        eval_every=args.eval_every,
        eval_batch=args.eval_batch,
        seed=args.seed,
    )
    return _run_training(args, out, model_cfg, task, train_cfg, None)


def _run_training(args, out, model_cfg, task, train_cfg, resume) -> int:
    from eagle_probe import checkpoint
    from eagle_probe.evaluate import evaluate
    from eagle_probe.train import train

    argv = " ".join(sys.argv[1:]) if sys.argv else ""
    provenance = {
        "command": f"eagle-probe {argv}".strip(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "eagle_probe": __version__,
    }

    def write(model, metrics: dict[str, Any]) -> None:
        checkpoint.save(out, model, task, checkpoint.jsonable(metrics | provenance))

    def on_sigterm(signum, frame) -> NoReturn:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        model, metrics = train(
            model_cfg,
            task,
            train_cfg,
            progress=not args.no_progress,
            on_validate=write,
            resume=resume,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if metrics.get("processes", 1) > 1:
        import torch.distributed as tdist

        if tdist.get_rank() != 0:
            return 0  # rank 0 writes the checkpoint and reports
    metrics["test"] = evaluate(model, task)
    write(model, metrics)
    summary = {k: v for k, v in metrics.items() if k not in ("history", "spikes")} | provenance
    checkpoint.atomic_write_text(
        out.with_suffix(".json"), json.dumps(checkpoint.jsonable(summary), indent=2) + "\n"
    )
    test = metrics["test"]
    status = "interrupted, best weights so far" if metrics["interrupted"] else "done"
    print(
        f"{status}: wrote {out} | test MSE {test['mse']:.3e} (zero predictor "
        f"{test['zero_mse']:.3e}, {test['improvement']:.1f}x) | worst prompt "
        f"{test['worst_mse']:.2e} | {metrics['wall_seconds']:.0f} s"
    )
    return EXIT_INTERRUPTED if metrics["interrupted"] else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint
    from eagle_probe.evaluate import evaluate

    model, task, _ = checkpoint.load(args.model)
    result = evaluate(model, task, batch=args.batch, seed=args.seed)
    result = {"model": str(args.model), "regime": model.cfg.regime, "task": task.task} | result
    if args.json:
        print(json.dumps(checkpoint.jsonable(result)))
        return 0
    print(
        f"{args.model}: {model.cfg.regime}, {model.cfg.n_layers} layers, "
        f"{model.cfg.heads} head(s), task {task.task} (n={task.n}, d={task.d}, "
        f"n'={task.n_prime}, d'={task.d_prime}), {result['prompts']} fresh prompts"
    )
    rows = [
        ("test MSE", result["mse"]),
        ("zero predictor MSE", result["zero_mse"]),
        ("optimal B A+ C MSE", result["optimal_mse"]),
        ("median prompt MSE", result["median_mse"]),
        ("worst prompt MSE", result["worst_mse"]),
    ]
    for name, value in rows:
        print(f"  {name:<22}{value:.3e}")
    print(f"  {'improvement':<22}{result['improvement']:.1f}x below the zero predictor")
    print(
        f"  {'worst prompt ‖A‖₂':<22}{result['worst_norm_a']:.2f} "
        f"(largest seen {result['max_norm_a']:.2f})"
    )
    return 0


def _steps(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise EagleProbeError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise EagleProbeError(f"{name} must be one or more finite numbers, got {text!r}")
    return values


def cmd_plant(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint
    from eagle_probe.model import DTYPES, LinearTransformer, ModelConfig, eagle_weights
    from eagle_probe.tasks import TaskConfig

    a_steps, c_steps = _steps(args.a_steps, "--a-steps"), _steps(args.c_steps, "--c-steps")
    if len(a_steps) != len(c_steps):
        raise EagleProbeError(
            f"--a-steps has {len(a_steps)} values but --c-steps has {len(c_steps)}; give one "
            "of each per layer"
        )
    if args.dtype not in DTYPES:
        raise EagleProbeError(f"unknown dtype {args.dtype!r}; choose from {', '.join(DTYPES)}")
    out = Path(args.out)
    _check_output(out, args.force)
    cfg = ModelConfig(
        regime="centralized",
        n=args.n,
        d=args.d,
        n_prime=args.n_prime,
        d_prime=args.d_prime,
        n_layers=len(a_steps),
        n_heads=args.heads,
        normalize="none",  # the planted steps act on the prompt itself
        dtype=args.dtype,
    )
    task = TaskConfig(
        n=args.n, d=args.d, n_prime=args.n_prime, d_prime=args.d_prime, rank=min(10, args.n, args.d)
    )
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, a_steps, c_steps))
    checkpoint.save(out, model, task, {"planted": {"a_steps": a_steps, "c_steps": c_steps}})
    print(f"wrote {out}: {len(a_steps)} planted EAGLE layers, {args.heads} head(s), {args.dtype}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint
    from eagle_probe.layouts import import_file

    out = Path(args.out)
    _check_output(out, args.force)
    model, task = import_file(
        args.layout,
        args.weights,
        n=args.n,
        n_prime=args.n_prime,
        d=args.d,
        d_prime=args.d_prime,
        dtype=args.dtype,
    )
    cfg = model.cfg
    checkpoint.save(out, model, task, {"imported": {"layout": args.layout, "from": args.weights}})
    print(
        f"wrote {out}: {cfg.tokens} layout, {cfg.n_layers} layers x {cfg.heads} head(s), "
        f"d = {cfg.d}, d' = {cfg.d_prime}, n = {cfg.n}, n' = {cfg.n_prime}, {cfg.dtype}"
    )
    return 0


def _prepare_dir(path: Path, force: bool) -> None:
    if path.exists() and not path.is_dir():
        raise EagleProbeError(f"--out {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise EagleProbeError(f"--out {path} already exists and is not empty; pass --force")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise EagleProbeError(f"--out {path} lies under {existing}, which is not a directory")
    if not os.access(existing, os.W_OK):
        raise EagleProbeError(f"--out {path} is not writable ({existing} is read-only)")


def cmd_extract(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe import checkpoint
    from eagle_probe.export import write_solver
    from eagle_probe.extract import extract

    out = Path(args.out) if args.out else None
    if out is not None:
        _prepare_dir(out, args.force)
    model, task, _ = checkpoint.load(args.model)
    result = extract(
        model, task, probe_batch_size=args.probe_batch, seed=args.seed, control=not args.no_control
    )
    print(result.render(str(args.model)))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        payload = result.to_json()
        payload["model"]["checkpoint"] = str(args.model)
        payload["model"]["sha256"] = checkpoint.sha256(args.model)
        payload["timings"]["total"] = time.perf_counter() - start
        checkpoint.atomic_write_text(out / "extraction.json", json.dumps(payload, indent=2) + "\n")
        if "eagle" not in result.views:  # sample layout: no EAGLE steps, no exported solver
            print(f"wrote {out / 'extraction.json'}")
            return 0
        write_solver(out / "solver.py", payload, result.projectors)
        print(f"wrote {out / 'extraction.json'} and {out / 'solver.py'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from eagle_probe.model import REGIMES
    from eagle_probe.sweep import run_sweep, spread

    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    for r in regimes:
        if r not in REGIMES:
            raise EagleProbeError(f"unknown regime {r!r}; choose from {', '.join(REGIMES)}")
    text = args.seeds.strip()
    try:
        seeds = list(range(int(text))) if text.isdigit() else [int(s) for s in text.split(",")]
    except ValueError:
        raise EagleProbeError(
            f"--seeds must be a count or comma-separated integers, got {text!r}"
        ) from None
    if not seeds or not regimes or any(s < 0 for s in seeds):
        raise EagleProbeError("give at least one regime and non-negative seeds")
    out = Path(args.out)
    _prepare_dir(out, args.force)
    table = run_sweep(
        regimes, seeds, out, steps=args.steps, batch=args.batch, parallel=args.parallel
    )
    import pandas as pd

    with pd.option_context("display.width", 200, "display.precision", 3):
        print(spread(table).to_string())
    print(f"wrote {out / 'sweep.csv'}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from eagle_probe.bench import SUITES, run_bench

    if args.suite not in SUITES:
        raise EagleProbeError(f"unknown suite {args.suite!r}; choose from {', '.join(SUITES)}")
    out = Path(args.out)
    _prepare_dir(out, args.force)
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    tables = run_bench(args.suite, out, seed=args.seed, log=log)
    if args.json:
        payload = {
            name: json.loads(t.to_json(orient="records"))
            for name, t in tables.items()
            if not name.endswith("history")
        }
        print(json.dumps(payload))
    else:
        print(f"wrote {out}/summary.md, {len(tables)} CSV tables and plots")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USER
        return args.func(args)
    except (EagleProbeError, ValueError) as exc:
        if debug:
            raise
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"eagle-probe: error: {message}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("eagle-probe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the CLI is the one place that turns bugs into a line
        if debug:
            raise
        print(
            f"eagle-probe: internal error: {type(exc).__name__}: {exc} (rerun with --debug "
            "for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
