"""What the commands share: the parser class, argument types, --threads/--device, memory budget
and output claims. Imports nothing heavy at module level (the parsers are built from here)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from eagle_probe.errors import EagleProbeError, Terminated, signal_name, signal_of
from eagle_probe.names import MAX_MORE_STEPS, MAX_SEEDS, MAX_STEPS, PARENT_VARIABLE

EXIT_USER, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 1, 130, 143
EXIT_PIPE = 141  # the reader of stdout left (`… | head`): as a process that SIGPIPE stopped
# Signals that stop a command as SIGINT does (Python raises KeyboardInterrupt for SIGINT itself):
# its claimed outputs are discarded, one line is printed, the exit code is 128 + the signal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
EXIT_STOPPED = {128 + s for s in (signal.SIGINT, *STOP_SIGNALS)}


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While the block runs, each of STOP_SIGNALS raises `Terminated` in the main thread, so a
    command unwinds from it as from SIGINT: every output claim is discarded on the way out. A
    signal this process ignores (SIGHUP under nohup) stays ignored; the handlers before are
    restored afterwards. Elsewhere than in the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame) -> NoReturn:
        raise Terminated(signum)

    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, stop)
    try:
        _watch_parent()
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopLatch:
    """The stop signals of a command that must finish its files once it has been stopped
    (`first_stop_only`): the first one raises as usual; every later one, and any after `hold()`,
    is held in `held` (the signal numbers, in order) and raises nothing."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.holding = False

    def hold(self) -> None:
        """From now on every stop signal is held."""
        self.holding = True

    def handle(self, signum: int, frame) -> None:
        if self.holding:
            self.held.append(signum)
            return
        self.holding = True  # the first stop raises; the files it leads to are then finished
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)


@contextlib.contextmanager
def first_stop_only() -> Iterator[StopLatch]:
    """While the block runs, SIGINT and STOP_SIGNALS go to a `StopLatch`: the first one stops
    the work as ever, and the ones after it wait until the block ends, so a second Ctrl-C or
    SIGTERM cannot cut short the writing of what the first one left to write. A signal this
    process ignores stays ignored (a background job's SIGINT); the handlers are restored
    afterwards. Elsewhere than in the main thread nothing changes."""
    latch = StopLatch()
    if threading.current_thread() is not threading.main_thread():
        yield latch
        return
    previous = {}
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, latch.handle)
    try:
        yield latch
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


PARENT_POLL = 0.5  # seconds between two looks at whether that process still runs


def _watch_parent() -> None:
    """A command started by a sweep (PARENT_VARIABLE names the sweep's process) stops as on
    SIGTERM once the sweep is gone, even killed by SIGKILL: a daemon thread looks every
    PARENT_POLL seconds whether this process's parent is still the sweep."""
    parent = os.environ.get(PARENT_VARIABLE, "")
    if not parent.isdigit() or os.getppid() != int(parent):
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(PARENT_POLL)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="eagle-probe-parent", daemon=True).start()


def stopped_line(stop: KeyboardInterrupt) -> tuple[str, int]:
    """The line and the exit code of a command stopped by a signal (128 + the signal)."""
    signum = signal_of(stop)
    text = str(stop).strip()
    if not text:
        name = signal_name(signum)
        text = "interrupted" if signum == signal.SIGINT else f"terminated ({name}); nothing written"
    return f"eagle-probe: {text}", 128 + signum


class UsageError(EagleProbeError):
    """Raised by the argument parser instead of printing usage and exiting."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, raising `UsageError` instead of exiting, and recording in the
    namespace's `given` the destinations of the options given on the command line (a command
    can then tell an option passed at its default value from one left out)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def parse_known_args(self, args=None, namespace=None):
        self._given: set[str] = set()
        namespace, extras = super().parse_known_args(args, namespace)
        # a subcommand's parser has already set its own (`given` is copied up like any value)
        namespace.given = set(getattr(namespace, "given", ())) | self._given
        return namespace, extras

    def _get_values(self, action, arg_strings):  # argparse calls it for each argument given
        self._given.add(action.dest)
        return super()._get_values(action, arg_strings)


def _int_at_least(text: str, low: int, what: str) -> int:
    """An integer argument of at least `low` (`what` names the kind in the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def _at_most(high: int, unit: str, why: str) -> Callable[[str], int]:
    """An argument type: a positive integer of at most `high` `unit` (`why`: what more would
    mean), for the options whose size is work or time rather than memory."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(
                f"expected at most {high:,} {unit}, got {text!r} ({why})"
            )
        return value

    return parse


MAX_THREADS = 1024  # more CPU threads than this is a typo (OpenMP aborts on a million)
thread_count = _at_most(MAX_THREADS, "threads", "more is a typo, not a machine")
step_count = _at_most(MAX_STEPS, "steps", "a longer run is months of computing")
seed_count = _at_most(MAX_SEEDS, "seeds", "the seeds one process trains together")
# compare's extra run of the algorithm, per unit of --more-steps and layer of the model, over the
# default sweeps (1000 units of a one-layer model: 60 s more, measured on 2 CPU cores)
SECONDS_PER_MORE_STEP = 0.06


def more_steps(text: str) -> int:
    """compare --more-steps: at most MAX_MORE_STEPS, a refusal saying how long more would run."""
    value = positive_int(text)
    if value > MAX_MORE_STEPS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_MORE_STEPS:,}, got {text!r}: the algorithm would run "
            f"{value:,} × its layers steps on every prompt of every sweep point, about "
            f"{_duration(value * SECONDS_PER_MORE_STEP)} per layer"
        )
    return value


def _duration(seconds: float) -> str:
    """ "40 s", "3.2 hours", "694 days"."""
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def nonneg_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


SEED_LIMIT = 2**32  # seeds are combined into generator seeds; larger ones overflow there


def seed_value(text: str) -> int:
    value = nonneg_int(text)
    if value >= SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected a seed below 2**32, got {text!r}")
    return value


def gib(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB, got {text!r}")
    return value


def init_std(text: str) -> float:
    value = finite_float(text)
    if not 0.0 < value <= MAX_INIT_STD:
        raise argparse.ArgumentTypeError(
            f"expected a standard deviation in (0, {MAX_INIT_STD:g}], got {text!r} (larger "
            "initialisations overflow in the first forward pass)"
        )
    return value


MAX_INIT_STD = 10.0


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32


def finite_float32(text: str) -> float:
    """A finite number within float32's range: what the options the training loop reads may
    hold (the model trains in float32; a larger rate overflows inside the first update)."""
    value = finite_float(text)
    if not abs(value) <= FLOAT32_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a number within float32's range (at most {FLOAT32_MAX:.3g} in size, "
            f"the dtype training computes in), got {text!r}"
        )
    return value


DEVICE_COMMANDS = ("extract", "evaluate", "bench")  # the commands whose torch work follows --device


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
    """Use `count` CPU threads in torch, in the OpenBLAS libraries NumPy and SciPy bundle (the
    loaded ones through threadpoolctl; those loaded later read the environment) and in child
    processes."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(count)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(count)
    threadpool_limits(limits=count, user_api="blas")


def apply_compute(args: argparse.Namespace) -> None:
    """--threads and --device of a computing command, checked before any work."""
    if getattr(args, "threads", None):
        set_threads(args.threads)
    if getattr(args, "device", None) is not None:  # bench: None unless --device is given
        args.device = torch_device(args.device)
        if args.device.type != "cpu" and args.command not in DEVICE_COMMANDS:
            raise EagleProbeError(
                f"{args.command} runs on the CPU; --device {args.device} applies to "
                f"{', '.join(DEVICE_COMMANDS[:-1])} and {DEVICE_COMMANDS[-1]}"
            )


PROBE_PROMPTS = 8  # prompts a model is run on before `plant` writes it or `extract` fits it


def finite_outputs(model, task, what: str, advice: str) -> None:
    """Raise unless `model`'s error on a few prompts of `task` is finite (its outputs do not
    overflow), before any work builds on them."""
    from eagle_probe.evaluate import evaluate

    probe = evaluate(model, task, batch=PROBE_PROMPTS, seed=0)
    if not all(math.isfinite(probe[k]) for k in ("mse", "worst_mse")):
        raise EagleProbeError(
            f"{what}: the model's error on {PROBE_PROMPTS} prompts is not finite in "
            f"{model.cfg.dtype} (worst prompt MSE {probe['worst_mse']}); {advice}"
        )


def memory_budget(args: argparse.Namespace) -> float:
    from eagle_probe.budget import GIB

    return args.max_memory * GIB


def out_dir(text: str | None, force: bool) -> Path | None:
    """`--out` of a command that writes a directory, checked before any work (None: none)."""
    from eagle_probe import files

    if text is None:
        return None
    return files.check_dir(files.as_path(text, "--out"), force=force)


def enter_claim(args: argparse.Namespace, claim):
    """Enter an output claim (`files.output_dir` / `output_files`) for the running command.

    `main` holds every claim of a command: `publish(args)` moves them into place when the work
    is done; if the command fails or is interrupted first, `main` discards them (nothing is
    left behind)."""
    return args.outputs.enter_context(claim)


def claim_dir(args: argparse.Namespace, out: Path) -> Path:
    """Claim the output directory `out` (checked by `out_dir`): the temporary directory to
    write into, published as `out` by `publish`."""
    from eagle_probe import files

    return enter_claim(args, files.output_dir(out, force=args.force))


def load_model(args: argparse.Namespace) -> tuple:
    """The model and task of the checkpoint `args.model`, within the --max-memory budget."""
    from eagle_probe import checkpoint

    model, task, _ = checkpoint.load(args.model, max_bytes=memory_budget(args))
    return model, task


def publish(args: argparse.Namespace) -> None:
    args.outputs.close()


def add_model(parser: Parser) -> None:
    parser.add_argument("model", help="checkpoint file (.pt)")


def add_seed(parser: Parser, default: int, what: str) -> None:
    parser.add_argument(
        "--seed", type=seed_value, default=default, help=f"seed of {what} ({default})"
    )


def add_results_out(parser: Parser, name: str) -> None:
    """The required `--out DIR` of a command that writes DIR/`name`.json and its figures."""
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help=f"write DIR/{name}.json and its figures (PNG) here",
    )


def add_force(parser: Parser) -> None:
    parser.add_argument(
        "--force", action="store_true", help="write into an existing --out (its files replaced)"
    )


def publish_results(
    args: argparse.Namespace,
    out: Path,
    tmp: Path,
    name: str,
    result,
    figures: Callable[[dict], dict],
    start: float,
) -> None:
    """Finish a command that writes `name`.json and its figures into the claimed `tmp` (published
    as `out`): the total time since `start` into the JSON, the files written and published, then
    `result`'s report and the files' names printed."""
    import time

    payload = result.json
    payload["timings"]["total"] = time.perf_counter() - start
    written = _write_results(tmp, name, payload, figures(payload))
    publish(args)
    print(result.render())
    print(f"wrote {out / f'{name}.json'} and {', '.join(written)}")


def _write_results(tmp: Path, name: str, payload: dict, figures: dict) -> list[str]:
    """Write `name`.json (data only) and one PNG per figure into a claimed directory `tmp`;
    returns the figure files' names."""
    import json

    from eagle_probe import files
    from eagle_probe.report import png_bytes

    (tmp / f"{name}.json").write_text(json.dumps(files.jsonable(payload), indent=2) + "\n")
    names = []
    for key, fig in figures.items():
        (tmp / f"{key}.png").write_bytes(png_bytes(fig))
        names.append(f"{key}.png")
    return names
