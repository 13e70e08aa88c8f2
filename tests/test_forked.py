"""Work forked beside the process (`eagle_probe.forked`) and the command's quick exit."""

import os
import subprocess
import sys
import warnings

import pytest

from eagle_probe import forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_a_child_sends_its_bytes_and_the_warnings_it_raised():
    def work() -> bytes:
        warnings.warn("overflow in the child", RuntimeWarning, stacklevel=1)
        warnings.warn("overflow in the child", RuntimeWarning, stacklevel=1)  # sent once
        return b"x" * 200_000  # more than a pipe holds

    job = forked.Forked(work, nice=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = job.result(30)
    assert data == b"x" * 200_000
    assert [(str(w.message), w.category) for w in caught] == [
        ("overflow in the child", RuntimeWarning)
    ]


def test_a_child_that_fails_gives_none_and_is_collected():
    def fails() -> bytes:
        raise RuntimeError("in the child")

    job = forked.Forked(fails)
    assert job.result(30) is None
    with pytest.raises(ChildProcessError):
        os.waitpid(job.pid, os.WNOHANG)  # already collected


def test_a_child_runs_on_one_thread():
    def threads() -> bytes:
        import torch

        return f"{torch.get_num_threads()} {os.environ['OPENBLAS_NUM_THREADS']}".encode()

    assert forked.Forked(threads).result(30) == b"1 1"


def test_a_child_never_scans_what_it_inherited():
    import gc

    frozen = gc.get_freeze_count()
    inherited = len(gc.get_objects())  # tracked here at the fork, all frozen in the child
    got = forked.Forked(lambda: str(gc.get_freeze_count()).encode()).result(30)
    assert int(got) >= min(inherited, frozen + 1000) > frozen
    assert gc.get_freeze_count() == frozen  # this process's own collector is as it was


@pytest.mark.parametrize(
    ("code", "status", "err"),
    [("0", 0, ""), ("3", 3, ""), ("None", 0, ""), ("'bad input'", 1, "bad input\n")],
)
def test_exit_now_exits_as_python_would(code, status, err):
    script = f"from eagle_probe.cli import exit_now; print('out', flush=False); exit_now({code})"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "out\n", err)


def test_exit_now_with_stdout_closed():
    script = "from eagle_probe.cli import exit_now; exit_now(0)"
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
