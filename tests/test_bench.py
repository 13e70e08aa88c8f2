import json

import pytest

from eagle_probe.bench import SUITES, run_bench
from eagle_probe.cli import main


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    return out, run_bench("quick", out, log=lambda m: None)


@pytest.mark.slow
def test_quick_suite_writes_tables_plots_and_summary(quick):
    out, tables = quick
    for name in ("fidelity", "centralized", "distributed", "diversity", "constrained"):
        assert (out / f"{name}.csv").exists()
    assert (out / "centralized_error_vs_iteration.png").stat().st_size > 1000
    assert "## centralized" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_quick_suite_numbers_make_sense(quick):
    _, t = quick
    c = t["centralized"].set_index(["kappa", "solver"])
    assert c.loc[(1e4, "eagle"), "error"] < 1e-9
    assert c.loc[(1e4, "cg"), "iterations"] > 10 * c.loc[(1e4, "eagle"), "iterations"]
    d = t["distributed"]
    eagle = d[d.method == "eagle"]
    gd = d[d.method == "distributed_gd"]
    assert eagle.reached.all() and (eagle.rounds.values < gd.rounds.values).all()
    div = t["diversity"].sort_values("diversity")
    assert div.rounds.iloc[0] > div.rounds.iloc[-1], "fewer rounds with more diversity"
    assert set(t["fidelity"].model) == {"centralized", "distributed", "constrained"}


def test_unknown_suite_is_a_user_error(tmp_path, capsys):
    assert main(["bench", "--suite", "huge", "--out", str(tmp_path / "b")]) == 2
    assert "unknown suite 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_suites_are_parameter_grids():
    assert SUITES["paper"].sizes == (240, 2000) and SUITES["paper"].kappas[-1] == 1e8
    assert json.dumps(list(SUITES))


def test_movielens_completion_when_the_files_are_present():
    from eagle_probe.bench import movielens, movielens_file, movielens_note

    if movielens_file() is None:
        assert "skipped" in movielens_note()
        pytest.skip("recbole (MovieLens-100K files) not installed")
    table = movielens().set_index("method")
    assert table.loc["EAGLE, 3 steps", "rmse"] < table.loc["mean rating", "rmse"]
