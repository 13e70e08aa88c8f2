"""The `eagle-probe` command line.

User errors (bad arguments, bad files) print one line and exit with code 2; internal failures exit
with code 1. `--debug` shows the full traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
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
EXPORT_GAP = 0.05  # extract warns when the faithful export is further than this from the network


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


SEED_LIMIT = 2**32  # seeds are combined into generator seeds; larger ones overflow there


def _seed(text: str) -> int:
    value = _nonneg_int(text)
    if value >= SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected a seed below 2**32, got {text!r}")
    return value


def _gib(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB, got {text!r}")
    return value


def _init_std(text: str) -> float:
    value = _finite_float(text)
    if not 0.0 < value <= MAX_INIT_STD:
        raise argparse.ArgumentTypeError(
            f"expected a standard deviation in (0, {MAX_INIT_STD:g}], got {text!r} (larger "
            "initialisations overflow in the first forward pass)"
        )
    return value


MAX_INIT_STD = 10.0


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
    from eagle_probe.train import SCHEDULES, TrainConfig

    DEFAULT_STEPS = TrainConfig.__dataclass_fields__["steps"].default  # noqa: N806
    parser = Parser(prog="eagle-probe", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"eagle-probe {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    # Accepted before or after the command: `eagle-probe --debug train …`, `… train --debug`.
    common = Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    common.add_argument(
        "--max-memory",
        type=_gib,
        default=4.0,
        metavar="GIB",
        help="memory budget checked before allocating (4 GiB)",
    )
    # Commands that compute also take the thread count and the torch device.
    compute = Parser(add_help=False)
    compute.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="CPU threads for torch and NumPy (their default)",
    )
    compute.add_argument(
        "--device",
        default="cpu",
        help="torch device of the forwards: cpu, cuda, cuda:1, mps (cpu)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    _add_parser = sub.add_parser
    computing = {"train", "evaluate", "extract", "import", "sweep", "bench"}

    def add_parser(name: str, **kwargs):
        parents = [common, compute] if name in computing else [common]
        return _add_parser(name, parents=parents, **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

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
        "--init-std", type=_init_std, default=0.02, help="std of the random initialisation"
    )
    train.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help=f"optimiser steps ({DEFAULT_STEPS}; with --resume: the checkpoint's)",
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
        "--select",
        default="mean",
        help="validation number that picks the kept weights: mean, median or trimmed (mean over "
        "the best 99%% of prompts)",
    )
    train.add_argument(
        "--gain-lr",
        type=_finite_float,
        default=0.0,
        help="learning rate of a trained log-gain per layer and head, folded into W_P (0: off)",
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
    train.add_argument("--seed", type=_seed, default=0, help="random seed (0)")
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
    ev.add_argument("--seed", type=_seed, default=12345, help="seed of the test prompts")
    ev.add_argument("--batch", type=_positive_int, default=8192, help="number of test prompts")
    ev.set_defaults(func=cmd_evaluate)

    ex = sub.add_parser("extract", help="recover the algorithm a checkpoint runs")
    ex.add_argument("model", help="checkpoint file (.pt)")
    ex.add_argument("--out", default=None, help="write DIR/extraction.json (and more) here")
    ex.add_argument(
        "--probe-batch",
        type=_positive_int,
        default=None,
        help="prompts in the probe batch (256; fewer for prompts above 2^22 / 256 entries)",
    )
    ex.add_argument(
        "--probe-chunk",
        type=_positive_int,
        default=None,
        help="prompts captured at once, with their query probes (sized to about 256 MiB)",
    )
    ex.add_argument("--no-progress", action="store_true", help="hide progress reports")
    ex.add_argument("--seed", type=_seed, default=0, help="seed of the probe prompts (0)")
    ex.add_argument("--no-control", action="store_true", help="skip the untrained-model control")
    ex.add_argument(
        "--force", action="store_true", help="write into an existing --out (its files replaced)"
    )
    ex.set_defaults(func=cmd_extract)

    pl = sub.add_parser("plant", help="write a model whose weights run given EAGLE steps")
    pl.add_argument("--n", type=_positive_int, default=18, help="columns of A (18)")
    pl.add_argument("--d", type=_positive_int, default=18, help="rows of A (18)")
    pl.add_argument("--n-prime", type=_positive_int, default=2, help="columns of C, D (2)")
    pl.add_argument("--d-prime", type=_positive_int, default=2, help="rows of B, D (2)")
    pl.add_argument("--a-steps", required=True, help="comma-separated a_0,…,a_{L-1}")
    pl.add_argument("--c-steps", required=True, help="comma-separated c_0,…,c_{L-1}")
    pl.add_argument(
        "--regime",
        default="centralized",
        help="centralized (eagle), distributed (eagle-distributed, one head per machine) or "
        "constrained (eagle-sketched, a random rank-r sketch per layer)",
    )
    pl.add_argument("--machines", type=_positive_int, default=3, help="distributed: machines M (3)")
    pl.add_argument("--rank", type=_positive_int, default=5, help="constrained: sketch rank r (5)")
    pl.add_argument(
        "--sketch-seed", type=_nonneg_int, default=0, help="constrained: seed of the sketches (0)"
    )
    pl.add_argument(
        "--heads",
        type=_positive_int,
        default=None,
        help="heads per layer (1; distributed: one per machine)",
    )
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
    sw.add_argument("--normalize", default="spectral", help="prompt normalisation (spectral)")
    sw.add_argument("--schedule", default="warmup_cosine", help="learning-rate schedule")
    sw.add_argument("--lr", type=_finite_float, default=1e-3, help="Adam learning rate (1e-3)")
    sw.add_argument(
        "--gain-lr", type=_finite_float, default=0.0, help="rate of the head log-gains (0: off)"
    )
    sw.add_argument("--select", default="mean", help="mean, median or trimmed (mean)")
    sw.add_argument(
        "--eval-batch", type=_positive_int, default=2048, help="held-out validation prompts"
    )
    sw.add_argument(
        "--name", default="{regime}_seed{seed}", help="checkpoint file stem ({regime}_seed{seed})"
    )
    sw.add_argument("--out", default="sweep-out", help="directory for checkpoints and sweep.csv")
    sw.add_argument("--force", action="store_true", help="write into an existing --out")
    sw.set_defaults(func=cmd_sweep)

    be = sub.add_parser("bench", help="benchmark the recovered solver against classical ones")
    be.add_argument("--suite", default="quick", help="quick, paper or real (quick)")
    be.add_argument("--out", default="bench-out", help="directory for CSV, PNG and summary.md")
    be.add_argument("--json", action="store_true", help="print the tables as one JSON object")
    be.add_argument("--seed", type=_seed, default=0, help="seed of the problems (0)")
    be.add_argument("--force", action="store_true", help="write into an existing --out")
    be.set_defaults(func=cmd_bench)
    return parser


DEVICE_COMMANDS = ("extract", "evaluate")  # the commands whose torch work follows --device


def torch_device(text: str):
    """The torch device `text` names, checked against this machine (one-line errors)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise EagleProbeError(
            f"--device {text!r} is not a torch device; use cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EagleProbeError(
                f"--device {text}: CUDA is not available on this machine; use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise EagleProbeError(
                f"--device {text}: this machine has {count} CUDA device(s), cuda:0 to "
                f"cuda:{count - 1}"
            )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise EagleProbeError(f"--device {text}: MPS is not available on this machine")
    elif device.type != "cpu":
        raise EagleProbeError(f"--device {text}: use cpu, cuda, cuda:N or mps")
    return device


def set_threads(count: int) -> None:
    """Use `count` CPU threads in torch, in NumPy's OpenBLAS (where it can be reached) and in
    child processes."""
    import ctypes
    import glob

    import numpy as np
    import torch

    torch.set_num_threads(count)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(count)
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*"))
    for path in libs:
        if "openblas" not in os.path.basename(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for fn in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            if hasattr(lib, fn):
                getattr(lib, fn)(count)
                break


def _apply_compute(args: argparse.Namespace) -> None:
    """--threads and --device of a computing command, checked before any work."""
    if getattr(args, "threads", None):
        set_threads(args.threads)
    if hasattr(args, "device"):
        args.device = torch_device(args.device)
        if args.device.type != "cpu" and args.command not in DEVICE_COMMANDS:
            raise EagleProbeError(
                f"{args.command} runs on the CPU; --device {args.device} applies to "
                f"{' and '.join(DEVICE_COMMANDS)}"
            )


def _budget(args: argparse.Namespace) -> float:
    from eagle_probe.budget import GIB

    return args.max_memory * GIB


def _train_outputs(out: Path) -> list[Path]:
    """The checkpoint and the run summary beside it: the two files `train` writes."""
    summary = out.with_suffix(".json")
    if summary == out:
        raise EagleProbeError(
            f"-o {out}: the run summary is written beside the checkpoint as {summary}; give the "
            f"checkpoint another name, like {out.with_suffix('.pt')}"
        )
    return [out, summary]


def _training_record(out: Path, previous: dict[str, Any]) -> dict[str, Any]:
    """The training record of a checkpoint to resume, checked (a bad one is a user error)."""
    record = previous.get("train_config")
    if not isinstance(record, dict):
        raise EagleProbeError(f"{out} holds no training record to resume from")
    bad = [
        key
        for key, kind in (("history", list), ("spikes", list))
        if key in previous and not isinstance(previous[key], kind)
    ]
    if "history" in previous and isinstance(previous["history"], list):
        if not all(isinstance(r, dict) for r in previous["history"]):
            bad.append("history")
    steps_done = previous.get("steps_done", 0)
    if not isinstance(steps_done, int) or isinstance(steps_done, bool) or steps_done < 0:
        bad.append("steps_done")
    for key in ("best_val_mse", "best_val_selected"):
        value = previous.get(key)
        if value is not None and not isinstance(value, int | float):
            bad.append(key)
    if bad:
        raise EagleProbeError(f"{out} holds an invalid training record ({', '.join(bad)})")
    return dict(record)


def _lead_process() -> bool:
    """False in the extra processes of a torchrun launch (rank 0 owns the outputs)."""
    return int(os.environ.get("WORLD_SIZE", "1")) <= 1 or os.environ.get("RANK", "0") == "0"


def cmd_train(args: argparse.Namespace) -> int:

    from eagle_probe import budget, checkpoint, files
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig
    from eagle_probe.train import TrainConfig

    out = files.as_path(args.out, "-o/--out")
    outputs = _train_outputs(out)
    lead = _lead_process()
    resume = None
    if args.resume:
        if not out.is_file():
            raise EagleProbeError(f"--resume needs an existing checkpoint at {out}")
        model, task, previous = checkpoint.load(out, max_bytes=_budget(args))
        fields = _training_record(out, previous)
        if args.steps is not None:
            fields["steps"] = args.steps
        try:
            train_cfg = TrainConfig.from_dict(fields)
        except (TypeError, ValueError) as exc:
            raise EagleProbeError(f"{out} holds an invalid training record: {exc}") from None
        model_cfg = model.cfg
        resume = (model.state_dict(), previous)
    else:
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
            steps=args.steps if args.steps is not None else TrainConfig().steps,
            batch=args.batch,
            lr=args.lr,
            schedule=args.schedule,
            warmup=args.warmup,
            clip=args.clip,
            clip_qk=args.clip_qk,
            weight_decay=args.weight_decay,
            gain_lr=args.gain_lr,
            select=args.select,
            freeze_values_last=args.freeze_values_last,
            curriculum=args.curriculum,
            skip_spikes=args.skip_spikes,
            data_shards=args.data_shards,
            eval_every=args.eval_every,
            eval_batch=args.eval_batch,
            seed=args.seed,
        )
    limit = _budget(args)
    budget.check_model(model_cfg, limit)
    budget.check(budget.forward_bytes(model_cfg, train_cfg.batch, training=True), "--batch", limit)
    budget.check(
        budget.forward_bytes(model_cfg, max(train_cfg.eval_batch, 8192)), "--eval-batch", limit
    )
    if not lead:
        return _run_training(args, out, model_cfg, task, train_cfg, resume, None)
    replace = outputs if resume is not None else []
    claim = _claim(args, files.output_files(outputs, force=args.force, replace=replace))
    return _run_training(args, out, model_cfg, task, train_cfg, resume, claim)


def _run_training(args, out, model_cfg, task, train_cfg, resume, claim) -> int:
    """Train and publish through `claim` (None: a torchrun worker that writes nothing)."""
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
        # Nothing is published before a validation has given finite numbers.
        if claim is None or metrics.get("best_val_selected") is None:
            return
        payload = checkpoint.jsonable(metrics | provenance)
        claim.write(out, lambda handle: checkpoint.dump(handle, model, task, payload))

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
    # the number the kept weights were selected by must be finite on the test prompts too
    decisive = "mse" if train_cfg.select == "mean" else "median_mse"
    if not math.isfinite(metrics["test"][decisive]) or metrics.get("best_val_selected") is None:
        raise EagleProbeError(
            f"training diverged (test {decisive.replace('_', ' ')} {metrics['test'][decisive]}); "
            "nothing written - lower --lr or --init-std"
        )
    write(model, metrics)
    summary = {k: v for k, v in metrics.items() if k not in ("history", "spikes")} | provenance
    claim.write_text(
        out.with_suffix(".json"), json.dumps(checkpoint.jsonable(summary), indent=2) + "\n"
    )
    _publish(args)
    test = metrics["test"]
    status = "interrupted, best weights so far" if metrics["interrupted"] else "done"
    print(
        f"{status}: wrote {out} | test MSE {test['mse']:.3e} (zero predictor "
        f"{test['zero_mse']:.3e}, {test['improvement']:.1f}x) | worst prompt "
        f"{test['worst_mse']:.2e} | {metrics['wall_seconds']:.0f} s"
    )
    return EXIT_INTERRUPTED if metrics["interrupted"] else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from eagle_probe import budget, checkpoint
    from eagle_probe.evaluate import evaluate

    model, task, _ = checkpoint.load(args.model, max_bytes=_budget(args))
    budget.check(budget.forward_bytes(model.cfg, args.batch), "--batch", _budget(args))
    result = evaluate(model.to(args.device), task, batch=args.batch, seed=args.seed)
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
    from eagle_probe import budget, checkpoint, files
    from eagle_probe.layouts import plant
    from eagle_probe.model import DTYPES, REGIMES, ModelConfig
    from eagle_probe.tasks import TaskConfig

    a_steps, c_steps = _steps(args.a_steps, "--a-steps"), _steps(args.c_steps, "--c-steps")
    if len(a_steps) != len(c_steps):
        raise EagleProbeError(
            f"--a-steps has {len(a_steps)} values but --c-steps has {len(c_steps)}; give one "
            "of each per layer"
        )
    if args.dtype not in DTYPES:
        raise EagleProbeError(f"unknown dtype {args.dtype!r}; choose from {', '.join(DTYPES)}")
    if args.regime not in REGIMES:
        raise EagleProbeError(f"unknown regime {args.regime!r}; choose from {', '.join(REGIMES)}")
    if args.regime == "distributed" and args.n % args.machines:
        raise EagleProbeError(f"--machines {args.machines} must divide --n {args.n}")
    if args.regime == "constrained" and args.rank > args.n:
        raise EagleProbeError(f"--rank {args.rank} must lie in [1, --n = {args.n}]")
    out = files.check_file(files.as_path(args.out, "-o/--out"), force=args.force)
    try:
        cfg = ModelConfig(
            regime=args.regime,
            n=args.n,
            d=args.d,
            n_prime=args.n_prime,
            d_prime=args.d_prime,
            n_layers=len(a_steps),
            n_heads=args.heads,
            machines=args.machines,
            rank=args.rank,
            normalize="none",  # the planted steps act on the prompt itself
            dtype=args.dtype,
        )
    except ValueError as err:
        raise EagleProbeError(str(err)) from None
    task = TaskConfig(
        n=args.n, d=args.d, n_prime=args.n_prime, d_prime=args.d_prime, rank=min(10, args.n, args.d)
    )
    budget.check_model(cfg, _budget(args))
    claim = _claim(args, files.output_files([out], force=args.force))
    model = plant(cfg, a_steps, c_steps, sketch_seed=args.sketch_seed)
    from eagle_probe.fit.families import FOR_REGIME

    family = FOR_REGIME[cfg.regime][0]
    planted = {"a_steps": a_steps, "c_steps": c_steps, "family": family}
    if cfg.regime == "constrained":
        planted["sketch_seed"] = args.sketch_seed
    metrics = {"planted": planted}
    claim.write(out, lambda handle: checkpoint.dump(handle, model, task, metrics))
    _publish(args)
    print(f"wrote {out}: {len(a_steps)} planted {family} layers, {cfg.heads} head(s), {args.dtype}")
    return 0


def _out_dir(text: str | None, force: bool) -> Path | None:
    """`--out` of a command that writes a directory, checked before any work (None: none)."""
    from eagle_probe import files

    if text is None:
        return None
    return files.check_dir(files.as_path(text, "--out"), force=force)


def cmd_import(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint, files
    from eagle_probe.layouts import import_file

    out = files.check_file(files.as_path(args.out, "-o/--out"), force=args.force)
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
    claim = _claim(args, files.output_files([out], force=args.force))
    metrics = {"imported": {"layout": args.layout, "from": str(args.weights)}}
    claim.write(out, lambda handle: checkpoint.dump(handle, model, task, metrics))
    _publish(args)
    print(
        f"wrote {out}: {cfg.tokens} layout, {cfg.n_layers} layers x {cfg.heads} head(s), "
        f"d = {cfg.d}, d' = {cfg.d_prime}, n = {cfg.n}, n' = {cfg.n_prime}, {cfg.dtype}"
    )
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe import budget, checkpoint, files
    from eagle_probe.capture import default_probe_batch
    from eagle_probe.export import faithful_gap, write_solver
    from eagle_probe.extract import extract, extract_bytes
    from eagle_probe.files import jsonable
    from eagle_probe.progress import reporter
    from eagle_probe.report import write_report

    out = _out_dir(args.out, args.force)
    model, task, _ = checkpoint.load(args.model, max_bytes=_budget(args))
    probes = args.probe_batch if args.probe_batch is not None else default_probe_batch(model.cfg)
    if probes < 2:
        raise EagleProbeError(f"--probe-batch must be at least 2, got {probes}")
    budget.check(
        extract_bytes(model.cfg, probes, args.probe_chunk),
        f"extracting this {model.cfg.n_layers}-layer, {model.cfg.heads}-head model "
        f"(n = {model.cfg.n}, d = {model.cfg.d}) with --probe-batch {probes}",
        _budget(args),
    )
    tmp = _claim(args, files.output_dir(out, force=args.force)) if out is not None else None
    result = extract(
        model,
        task,
        probe_batch_size=probes,
        seed=args.seed,
        control=not args.no_control,
        chunk=args.probe_chunk,
        device=args.device,
        progress=None if args.no_progress else reporter(),
    )
    print(result.render(str(args.model)))
    if out is not None:
        payload = result.to_json()
        payload["model"]["checkpoint"] = str(args.model)
        payload["model"]["sha256"] = checkpoint.sha256(args.model)
        payload["timings"]["total"] = time.perf_counter() - start
        if model.cfg.tokens == "samples":  # the exported solver runs EAGLE, not GD++
            payload["export"] = {
                "solver": None,
                "reason": "the exported solver runs EAGLE; a sample-layout model runs GD, GD++ "
                "or preconditioned GD (see views.verdict)",
            }
            (tmp / "extraction.json").write_text(json.dumps(jsonable(payload), indent=2) + "\n")
            write_report(result, tmp, str(args.model))
            _publish(args)
            print(f"wrote {out / 'extraction.json'} and {out / 'report.html'}")
            return 0
        write_solver(tmp / "solver.py", payload, result.projectors)
        gap = faithful_gap(
            tmp / "solver.py", result.held_out.z0, result.network_pred, d=task.d, n=task.n
        )
        payload["export"] = {"faithful_gap": gap, "prompts": min(256, len(result.held_out.z0))}
        print(
            f"exported solver, faithful mode, against the network on "
            f"{payload['export']['prompts']} held-out prompts: relative gap {gap:.3g}"
        )
        if not gap <= EXPORT_GAP:
            warning = (
                f"the faithful export differs from the network by {gap:.1%} (> {EXPORT_GAP:.0%}): "
                "its constant EAGLE steps do not reproduce the network"
            )
            payload["warnings"].append(warning)
            print(f"warning: {warning}")
        (tmp / "extraction.json").write_text(json.dumps(jsonable(payload), indent=2) + "\n")
        write_report(result, tmp, str(args.model))
        _publish(args)
        print(f"wrote {out / 'extraction.json'}, {out / 'solver.py'} and {out / 'report.html'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
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


def cmd_bench(args: argparse.Namespace) -> int:
    from eagle_probe import files
    from eagle_probe.bench import SUITES, run_bench

    if args.suite not in SUITES:
        raise EagleProbeError(f"unknown suite {args.suite!r}; choose from {', '.join(SUITES)}")
    out = _out_dir(args.out, args.force)
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    tmp = _claim(args, files.output_dir(out, force=args.force))
    tables = run_bench(args.suite, tmp, seed=args.seed, log=log, max_bytes=_budget(args))
    _publish(args)
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


class _Failed(Exception):
    """A command returned a failure code: its claimed outputs are discarded."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _claim(args: argparse.Namespace, claim):
    """Enter an output claim (`files.output_dir` / `output_files`) for the running command.

    `main` holds every claim of a command: `_publish(args)` moves them into place when the work
    is done; if the command fails or is interrupted first, `main` discards them (nothing is
    left behind)."""
    return args.outputs.enter_context(claim)


def _publish(args: argparse.Namespace) -> None:
    args.outputs.close()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = False
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False))
        if args.command is None:
            parser.print_help()
            return EXIT_USER
        _apply_compute(args)
        with contextlib.ExitStack() as outputs:  # the command's output claims, see _claim
            args.outputs = outputs
            code = args.func(args)
            if code not in (0, EXIT_INTERRUPTED):
                raise _Failed(code)  # leaving the block with an exception discards the claims
        return code
    except _Failed as failed:
        return failed.code
    except UsageError as exc:  # a usage error never needs a traceback, --debug or not
        print(f"eagle-probe: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USER
    except (EagleProbeError, ValueError) as exc:
        if debug:
            raise
        print(f"eagle-probe: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USER
    except MemoryError:
        if debug:
            raise
        print(
            "eagle-probe: error: out of memory; pass smaller sizes (or a lower --max-memory "
            "so the budget check catches it first)",
            file=sys.stderr,
        )
        return EXIT_USER
    except OSError as exc:
        if debug:
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"eagle-probe: error: {exc.strerror or _one_line(exc)}{where}", file=sys.stderr)
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
