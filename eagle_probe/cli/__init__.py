"""The `eagle-probe` command line.

User errors (bad arguments, bad files) print one line and exit with code 2; internal failures exit
with code 1. `--debug` shows the full traceback instead.

One module per command, each with three names: `HELP` (its one-line help), `add_<command>(parser)`
(its arguments) and `run(args) -> int` (the work). A command module imports only the standard
library and `eagle_probe.cli.common` at module level; torch, TransformerLens, pandas, matplotlib and
the eagle_probe modules that import them are imported inside `run`, so `eagle-probe --help`,
`eagle-probe CMD --help` and argument errors never load them.

To add a command `compare`: write `eagle_probe/cli/compare.py` with those three names, then add one
line to `COMMANDS` below (`"compare": "compare",`) and, if it computes on torch, its name to
`COMPUTING` (it then takes `--threads` and `--device`). Document its options in docs/cli.md.
`eagle_probe.cli.cmd_<command>` is that command's `run`, looked up when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType

from eagle_probe import __version__
from eagle_probe.cli.common import (
    EXIT_INTERNAL,
    EXIT_PIPE,
    EXIT_STOPPED,
    EXIT_USER,
    Parser,
    UsageError,
    apply_compute,
    gib,
    stop_signals,
    stopped_line,
    thread_count,
)
from eagle_probe.errors import EagleProbeError

# command name -> module in this package, in the order `--help` lists them
COMMANDS: dict[str, str] = {
    "train": "train",
    "evaluate": "evaluate",
    "extract": "extract",
    "plant": "plant",
    "import": "importer",
    "sweep": "sweep",
    "bench": "bench",
    "compare": "compare",
    "timeline": "timeline",
}
# the commands that take --threads and --device
COMPUTING = {"train", "evaluate", "extract", "import", "sweep", "bench", "compare", "timeline"}
# the computing commands whose --device has no default: bench runs its torch section only there
NO_DEFAULT_DEVICE = {"bench"}


def _module(command: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{COMMANDS[command]}")


def __getattr__(name: str) -> Callable:
    if name.startswith("cmd_") and name[4:] in COMMANDS:
        return _module(name[4:]).run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _compute_parent(device: str | None) -> Parser:
    """--threads and --device, the latter defaulting to `device` (None: not given)."""
    compute = Parser(add_help=False)
    compute.add_argument(
        "--threads",
        type=thread_count,
        default=None,
        help="CPU threads for torch and NumPy (their default)",
    )
    compute.add_argument(
        "--device",
        default=device,
        help="torch device of the forwards: cpu, cuda, cuda:1, mps (cpu)"
        if device
        else "torch device of the batched torch solvers: cpu, cuda, … (not run without it)",
    )
    return compute


def build_parser() -> Parser:
    parser = Parser(
        prog="eagle-probe",
        description="Train linear-attention transformers on masked low-rank completion prompts and "
        "recover the numerical algorithm they run (EAGLE and its distributed and sketched "
        "variants).",
        epilog="`eagle-probe COMMAND --help` lists a command's options; docs/cli.md describes "
        "every command and its outputs.",
    )
    parser.add_argument("--version", action="version", version=f"eagle-probe {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    # Accepted before or after the command: `eagle-probe --debug train …`, `… train --debug`.
    common = Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    common.add_argument(
        "--max-memory",
        type=gib,
        default=4.0,
        metavar="GIB",
        help="memory budget checked before allocating (4 GiB)",
    )
    # Commands that compute also take the thread count and the torch device.
    compute, optional = _compute_parent("cpu"), _compute_parent(None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS:
        module = _module(name)
        device = optional if name in NO_DEFAULT_DEVICE else compute
        parents = [common, device] if name in COMPUTING else [common]
        description = module.HELP[0].upper() + module.HELP[1:] + "."
        command = sub.add_parser(name, parents=parents, help=module.HELP, description=description)
        getattr(module, f"add_{name}")(command)
    return parser


class _Failed(Exception):
    """A command returned a failure code: its claimed outputs are discarded."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _replacing_streams() -> None:
    """Print what the terminal's encoding cannot show as replacement characters (an ASCII
    locale must not fail a command after its work is done)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError, AttributeError):
                stream.reconfigure(errors="replace")


@contextlib.contextmanager
def _warnings_as_lines(debug: bool):
    """Warnings raised during a command, printed after it as one line each (once per message);
    a command that fails prints only its error line. `--debug` leaves warnings as they are."""
    if debug:
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per place, so a loop's warning is kept once
        yield
    seen: set[str] = set()
    for item in caught:
        text = _one_line(item.message) if isinstance(item.message, Warning) else str(item.message)
        line = f"eagle-probe: warning: {text} ({item.category.__name__})"
        if line not in seen:
            seen.add(line)
            print(line, file=sys.stderr)


_ALLOCATION = ("can't allocate memory", "not enough memory", "out of memory")


def entry() -> None:
    """The `eagle-probe` console script: `main()`, then its exit code, once the standard streams
    are flushed (a reader of stdout that left ends the command quietly with EXIT_PIPE)."""
    try:
        code = main(whole_process=True)
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code
    sys.exit(_flushed(code))


def _flushed(code: int | str | None) -> int | str | None:
    """`code`, after flushing stdout and stderr: EXIT_PIPE (where `code` is 0) when stdout's reader
    has left, whose unwritten output then goes nowhere; 120, as Python, when a flush fails."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed before the start (`>&-`)
            continue
        try:
            stream.flush()
        except BrokenPipeError:
            quiet_stdout()
            code = code or EXIT_PIPE
        except (OSError, ValueError):
            code = code or 120
    return code


def stdout_gone() -> bool:
    """Whether stdout's reader has left (what is still buffered cannot be written)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError, AttributeError):
        return False
    return False


def quiet_stdout() -> None:
    """The reader of stdout has left (`eagle-probe evaluate m.pt | head -1`): what is still
    buffered goes nowhere, so the exit flushes nothing into the closed pipe and the command ends
    without a word, as one that SIGPIPE stopped (its files, if any, are already published)."""
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: Sequence[str] | None = None, *, whole_process: bool = False) -> int:
    """Run the command `argv` (default: this process's arguments) and return its exit code.
    `whole_process`: this process runs this one command and exits (the console script and
    `python -m eagle_probe`), so a reader of stdout that left ends it quietly (EXIT_PIPE)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = False
    _replacing_streams()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False))
        if args.command is None:
            parser.print_help()
            return EXIT_USER
        run = getattr(sys.modules[__name__], f"cmd_{args.command}")
        # SIGTERM and SIGHUP unwind like SIGINT: the claims below are discarded on the way out
        with stop_signals(), contextlib.ExitStack() as outputs:  # claims: see common.enter_claim
            args.outputs = outputs
            with _warnings_as_lines(debug):  # the imports' warnings too, one line each
                apply_compute(args)
                code = run(args)
            if code != 0 and code not in EXIT_STOPPED:  # a stopped run publishes what it kept
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
        if isinstance(exc, BrokenPipeError) and whole_process and stdout_gone():
            quiet_stdout()
            return EXIT_PIPE
        if debug:
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"eagle-probe: error: {exc.strerror or _one_line(exc)}{where}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt as stop:  # SIGINT, or SIGTERM/SIGHUP (`stop_signals`)
        line, code = stopped_line(stop)
        print(line, file=sys.stderr)
        return code
    except Exception as exc:  # noqa: BLE001 - the CLI is the one place that turns bugs into a line
        if debug:
            raise
        if isinstance(exc, RuntimeError) and any(w in str(exc) for w in _ALLOCATION):
            print(
                "eagle-probe: error: out of memory (an allocation failed); pass smaller sizes, or "
                "a lower --max-memory so the budget check refuses them first",
                file=sys.stderr,
            )
            return EXIT_USER
        print(
            f"eagle-probe: internal error: {type(exc).__name__}: {exc} (rerun with --debug "
            "for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
