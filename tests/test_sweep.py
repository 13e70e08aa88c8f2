import os

import pandas as pd
import pytest

from eagle_probe.cli import main
from eagle_probe.sweep import run_sweep, spread


@pytest.mark.slow
def test_sweep_trains_in_parallel_and_collects_a_table(tmp_path):
    table = run_sweep(
        ["centralized"], [0, 1], tmp_path, steps=20, batch=64, parallel=2, log=lambda m: None
    )
    assert (tmp_path / "sweep.csv").exists()
    assert set(table.seed) == {0, 1} and (table.status == "ok").all()
    assert len(table) == 2 * 4  # two seeds, four layers
    s = spread(table)
    assert isinstance(s, pd.DataFrame) and ("eta", "std") in s.columns


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


@pytest.mark.slow
def test_sweep_names_files_and_passes_training_options(tmp_path):
    table = run_sweep(
        ["centralized"],
        [3],
        tmp_path,
        steps=8,
        batch=32,
        parallel=1,
        extra=["--normalize", "none", "--schedule", "constant", "--select", "median"],
        name="plain_seed{seed}",
        published=tmp_path / "final",
        log=lambda m: None,
    )
    import json

    from eagle_probe import checkpoint

    recorded = json.loads((tmp_path / "plain_seed3.json").read_text())["command"]
    assert recorded.endswith(f"-o {tmp_path / 'final' / 'plain_seed3.pt'}")
    model, _, metrics = checkpoint.load(tmp_path / "plain_seed3.pt")
    assert model.cfg.normalize == "none"
    assert metrics["train_config"]["schedule"] == "constant"
    assert metrics["train_config"]["select"] == "median"
    assert metrics["command"] == recorded
    assert set(table.model) == {"plain_seed3.pt"}
    assert {"median_mse", "worst_mse", "fidelity_one_step", "fidelity"} <= set(table.columns)


def test_sweep_out_below_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("data\n")
    assert main(["sweep", "--seeds", "1", "--out", str(tmp_path / "taken" / "seeds")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert (tmp_path / "taken").read_text() == "data\n"
