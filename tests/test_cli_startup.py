"""The command line starts without its heavy dependencies: `--help`, `CMD --help` and argument
errors never import torch, TransformerLens, pandas or matplotlib (each command imports them in its
`run`); the names its help lists are the ones the configs accept (test_names.py)."""

import subprocess
import sys

import pytest

from eagle_probe import cli

HEAVY = ("torch", "transformer_lens", "pandas", "matplotlib")
PROBE = """
import sys
HEAVY = sys.argv.pop().split(",")
from eagle_probe.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print("CODE", code, "HEAVY", ",".join(heavy) or "-")
"""


def _run(argv: list[str]) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv, ",".join(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1], done.stderr


@pytest.mark.parametrize(
    "argv",
    [["--help"], *([name, "--help"] for name in cli.COMMANDS), ["--version"]],
    ids=lambda argv: " ".join(argv),
)
def test_help_imports_nothing_heavy(argv):
    last, _ = _run(argv)
    assert last == "CODE 0 HEAVY -"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["extract"], "required: model"),
        (["train", "--regime", "centralized"], "required: -o/--out"),
        (["evaluate", "m.pt", "--batch", "0"], "positive integer"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_argument_errors_import_nothing_heavy(argv, words):
    last, err = _run(argv)
    assert last == "CODE 2 HEAVY -"
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_command_that_runs_imports_torch():
    # the probe can see a heavy import: a command's run brings torch in
    last, _ = _run(["evaluate", "does-not-exist.pt"])
    assert last.startswith("CODE 2 HEAVY ") and "torch" in last.split()[-1].split(",")


WHOLE = """
import gc, sys
from eagle_probe.cli import main
try:
    code = main(sys.argv[1:], whole_process=True)
except SystemExit as exit:
    code = exit.code
heavy = "torch" in sys.modules
print("CODE", code, "TORCH", heavy, "FROZEN", gc.get_freeze_count() > 0, "GC", gc.isenabled())
"""


@pytest.mark.parametrize(
    "argv, last",
    [
        (["extract", "--help"], "CODE 0 TORCH False FROZEN False GC True"),
        (["evaluate", "m.pt", "--batch", "0"], "CODE 2 TORCH False FROZEN False GC True"),
        (["evaluate", "does-not-exist.pt"], "CODE 2 TORCH True FROZEN False GC True"),
    ],
)
def test_the_console_script_leaves_the_collector_as_it_is(argv, last):
    done = subprocess.run(
        [sys.executable, "-c", WHOLE, *argv], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == last


def test_a_library_caller_keeps_its_collector_as_it_is():
    import gc

    frozen = gc.get_freeze_count()
    assert cli.main(["evaluate", "does-not-exist.pt"]) == 2
    assert gc.get_freeze_count() == frozen and gc.isenabled()


def test_every_command_module_has_its_three_names():
    for name in cli.COMMANDS:
        module = cli._module(name)
        assert isinstance(module.HELP, str) and module.HELP
        assert callable(getattr(module, f"add_{name}")) and callable(module.run)
        assert getattr(cli, f"cmd_{name}") is module.run
