import pandas as pd
import pytest

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
