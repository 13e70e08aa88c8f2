"""The command line itself (`cli/__init__.py`): every command's user error is one line and exit
2, and `python -m eagle_probe` is the command. Each command's own tests are in `tests/cli/`; the
console script's exits in `test_cli_exit.py`, what `--help` imports in `test_cli_startup.py`."""

import subprocess
import sys

import pytest

from eagle_probe.cli import main


@pytest.mark.parametrize(
    "argv, match",
    [
        (["frobnicate"], "invalid choice"),
        (["train", "--regime", "federated", "-o", "x.pt"], "unknown regime 'federated'"),
        (["train", "--regime", "constrained", "--rank", "40", "-o", "x.pt"], "must not exceed"),
        (["train", "--regime", "distributed", "--machines", "4", "-o", "x.pt"], "must divide"),
        # an option of another regime is refused, given even at its default, not ignored
        (
            ["train", "--regime", "distributed", "--rank", "5", "-o", "x.pt"],
            "--rank (the query/key width r) applies to the constrained regime only, not to "
            "distributed",
        ),
        (
            ["train", "--regime", "centralized", "--machines", "3", "-o", "x.pt"],
            "--machines (the column blocks M) applies to the distributed and distributed-open "
            "regimes only, not to centralized",
        ),
        (
            ["plant", "--regime", "centralized", "--a-steps", "0.1", "--c-steps", "0.1"]
            + ["--rank", "5", "-o", "x.pt"],
            "--rank (the query/key width r) applies to the constrained regime only, not to "
            "centralized",
        ),
        (
            ["plant", "--regime", "constrained", "--a-steps", "0.1", "--c-steps", "0.1"]
            + ["--machines", "3", "-o", "x.pt"],
            "--machines (the column blocks M) applies to the distributed and distributed-open "
            "regimes only, not to constrained",
        ),
        (["train", "--regime", "centralized", "--steps", "0", "-o", "x.pt"], "positive integer"),
        (["train", "--regime", "centralized", "--task", "sudoku", "-o", "x.pt"], "unknown task"),
        (["evaluate", "missing.pt"], "does not exist"),
    ],
)
def test_user_errors_are_one_line_exit_2(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.pt").exists()


def test_python_dash_m_works_like_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "eagle_probe", "evaluate", "nope.pt"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "eagle-probe: error: checkpoint nope.pt does not exist"
