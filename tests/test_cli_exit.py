"""How the `eagle-probe` command ends: its exit status, its streams flushed, and quietly when
the reader of its output has left."""

import os
import subprocess
import sys

import pytest

# the console script with a command that prints `out` (unflushed) and returns CODE
ENTRY = (
    "from eagle_probe import cli; "
    "cli.main = lambda **kw: print('out', flush=False) or {code}; cli.entry()"
)


@pytest.mark.parametrize(
    ("code", "status", "err"),
    [("0", 0, ""), ("3", 3, ""), ("None", 0, ""), ("'bad input'", 1, "bad input\n")],
)
def test_the_console_script_exits_as_python_would(code, status, err):
    script = ENTRY.format(code=code)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "out\n", err)


def test_the_console_script_with_stdout_closed():
    script = "from eagle_probe import cli; cli.main = lambda **kw: 0; cli.entry()"
    closed = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "{script}" >&-'], capture_output=True, timeout=60
    )
    assert closed.returncode == 0 and closed.stderr == b""


@pytest.mark.parametrize(
    "start",
    [["-c", "from eagle_probe.cli import entry; entry()"], ["-m", "eagle_probe"]],
    ids=["console script", "python -m"],
)
@pytest.mark.parametrize("argv", [["evaluate", "MODEL", "--batch", "64"], ["extract", "--help"]])
def test_a_reader_that_left_ends_the_command_quietly(start, argv):
    # `eagle-probe evaluate m.pt | head -1` where head has gone: no "Broken pipe" error line,
    # the status of a process that SIGPIPE stopped (141), whichever write meets the closed pipe
    # (stdout to a pipe is block-buffered: most of it meets the pipe at the exit's flush)
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "trained_models" / "centralized.pt"
    argv = [str(model) if a == "MODEL" else a for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, *start, *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=env | {"HF_HUB_OFFLINE": "1"},
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
