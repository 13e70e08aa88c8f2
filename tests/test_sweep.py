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
    ],
)
def test_sweep_user_errors(argv, match, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
