import json
import re
from pathlib import Path

import pytest
from conftest import ROOT

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


def test_suitesparse_matrices_ship_inside_the_package(monkeypatch):
    """The eight matrices are package data, match the sha256 in their README, and are found
    without any environment variable; $EAGLE_PROBE_SUITESPARSE still overrides."""
    import hashlib

    from eagle_probe import bench

    monkeypatch.delenv("EAGLE_PROBE_SUITESPARSE", raising=False)
    root = bench.suitesparse_dir()
    assert root == Path(bench.__file__).parent / "data" / "suitesparse"
    readme = (root / "README.md").read_text()
    listed = dict(re.findall(r"^\| (\S+\.mtx) \|.*\| ([0-9a-f]{64}) \|$", readme, re.M))
    files = sorted(root.glob("*.mtx"))
    assert len(files) == 8 and sorted(listed) == [f.name for f in files]
    for path in files:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == listed[path.name], path.name
    assert "CC BY 4.0" in (root / "LICENSE.md").read_text()
    monkeypatch.setenv("EAGLE_PROBE_SUITESPARSE", "/elsewhere")
    assert bench.suitesparse_dir() == Path("/elsewhere")


def test_package_data_and_licence_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)  # an SPDX expression, not a table
    data = project["tool"]["setuptools"]["package-data"]["eagle_probe"]
    assert "data/suitesparse/*.mtx" in data and "data/suitesparse/*.md" in data


def test_nothing_refers_to_a_folder_outside_the_repository():
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = re.compile(r"\.\./shared|parents?(\[\d\])? / \"shared\"")
    offenders = [
        name
        for name in tracked
        if name != "tests/test_bench.py"
        and (ROOT / name).is_file()
        and outside.search((ROOT / name).read_text(errors="ignore"))
    ]
    assert offenders == []


def _synthetic_tables():
    import pandas as pd

    hist = pd.DataFrame(
        [
            {"n": 8, "kappa": k, "solver": s, "iteration": i, "error": 10.0**-i}
            for k in (1e2, 1e4)
            for s in ("cg", "eagle")
            for i in range(1, 6)
        ]
        + [{"n": 8, "kappa": k, "solver": "lsmr", "iteration": 1, "error": 1.0} for k in (1e2, 1e4)]
    )
    final = pd.DataFrame(
        [
            {"n": 8, "kappa": k, "solver": s, "info": 0, "iterations": it, "error": e}
            for k in (1e2, 1e4)
            for s, it, e in (
                ("cg", 5, 1e-5),
                ("eagle", 5, 1e-5),
                ("lsmr", 7, 1e-6),
                ("lstsq", 1, 0),
            )
        ]
    )
    fidelity = pd.DataFrame(
        {
            "model": ["centralized", "centralized"],
            "layer": [1, 2],
            "fidelity": [1e-5, 1e-3],
            "paper": [2e-4, 5e-4],
            "better_than_paper": [True, False],
        }
    )
    return {"fidelity": fidelity, "centralized": final, "centralized_history": hist}


def test_error_figure_labels_only_visible_curves_and_one_y_label():
    from eagle_probe.bench import plots

    fig = plots(_synthetic_tables())["centralized_error_vs_iteration"]
    left, right = fig.axes
    assert left.get_ylabel() and not right.get_ylabel()  # shared y axis, labelled once
    labels = []
    for ax in fig.axes:
        for line in ax.get_lines():
            visible = len(line.get_xdata()) >= 2 or line.get_marker() not in ("None", "", None)
            assert visible, line.get_label()
            labels.append(line.get_label())
    assert {"cg", "eagle"} <= set(labels)
    assert any(label.startswith("lsmr") for label in labels)
    assert any(label.startswith("lstsq (direct") for label in labels)


def test_summary_explains_verdicts_and_links_figures():
    from eagle_probe.bench import summary

    text = summary("quick", _synthetic_tables(), [])
    assert "`better_than_paper`: True in 1 of 2 rows." in text
    assert "- `better_than_paper`: verdict: True when `fidelity` ≤ `paper`" in text
    assert "](centralized_error_vs_iteration.png)" in text
    assert "`info`: 0 (converged) in 8 of 8 rows." in text
