"""`eagle-probe sweep` (`cli/sweep.py`): wrong arguments and unusable output directories are one
line and exit 2 with nothing written. The grid it runs is `test_sweep.py`'s, its cluster plans
`test_plan.py`'s."""

import os

import pytest

from eagle_probe.cli import main


@pytest.mark.parametrize(
    "argv, match",
    [
        (["sweep", "--regimes", "federated"], "unknown regime"),
        (["sweep", "--seeds", "a,b"], "comma-separated integers"),
        (["sweep", "--seeds", "0"], "a count of at least 1"),
        (["sweep", "--normalize", "l1"], "unknown --normalize 'l1'"),
        (["sweep", "--schedule", "step"], "unknown --schedule"),
        (["sweep", "--select", "best"], "unknown --select"),
        (["sweep", "--name", "{model}"], "only {regime} and {seed}"),
        (["sweep", "--name", "plain", "--seeds", "2"], "same file name"),
        (["sweep", "--name", "../x{seed}"], "plain file name"),
    ],
)
def test_sweep_user_errors(argv, match, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_sweep_into_a_directory_that_cannot_be_written(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running with permissions that ignore the mode")
        assert main(["sweep", "--seeds", "1", "--out", str(locked / "seeds")]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    finally:
        locked.chmod(0o700)


def test_sweep_out_below_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("data\n")
    assert main(["sweep", "--seeds", "1", "--out", str(tmp_path / "taken" / "seeds")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert (tmp_path / "taken").read_text() == "data\n"


def test_cli_sweep_save_every_does_not_combine_with_ensemble(tmp_path, capsys):
    argv = ["sweep", "--regimes", "centralized", "--seeds", "2", "--ensemble", "2"]
    argv += ["--save-every", "10", "--out", str(tmp_path / "sw")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--save-every" in err[0] and "--ensemble" in err[0]
    assert not (tmp_path / "sw").exists()
