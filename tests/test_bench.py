import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, RTOL, TRAINED, numpy_eagle, prompt_norm

from eagle_probe import checkpoint, solvers
from eagle_probe.bench import SUITES, run_bench
from eagle_probe.capture import float64_copy, probe_batch
from eagle_probe.extract import extract


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
    assert c.loc[(1e4, "eagle"), "error"] < 1e-9  # certified to rtol 1e-10 by the solver itself
    assert c.loc[(1e4, "cg"), "iterations"] > 10 * c.loc[(1e4, "eagle"), "iterations"]
    d = t["distributed"]
    eagle = d[d.method == "eagle"]
    gd = d[d.method == "distributed_gd"]
    assert eagle.reached.all() and (eagle.rounds.values < gd.rounds.values).all()
    div = t["diversity"].sort_values("diversity")
    assert div.rounds.iloc[0] > div.rounds.iloc[-1], "fewer rounds with more diversity"


# Table 1 of the paper, ×1e-4, layers 1–4 (written out here, not read from the package)
PAPER_TABLE1 = {
    "centralized": [2.36, 5.27, 3.70, 2.16],
    "distributed": [0.62, 1.40, 1.28, 1.32],
    "constrained": [0.01, 0.02, 0.13, 0.14],
}


def _stream(A, B, C, D):
    """The residual stream [[A, C], [B, -D]] (the network's D slot carries -D)."""
    return np.concatenate([np.concatenate([A, C], -1), np.concatenate([B, -D], -1)], -2)


@pytest.mark.slow
def test_quick_suite_fidelity_values(quick):
    fid = quick[1]["fidelity"]
    assert set(fid.model) == set(PAPER_TABLE1)
    assert set(fid.reading) == {"one_step", "end_to_end"}
    for (name, _), rows in fid.groupby(["model", "reading"]):
        rows = rows.sort_values("layer")
        assert rows.layer.tolist() == [0, 1, 2, 3]  # 0-based
        np.testing.assert_allclose(rows.paper, np.array(PAPER_TABLE1[name]) * 1e-4, rtol=RTOL)
        assert (rows.better_than_paper == (rows.fidelity <= rows.paper)).all()
        assert np.isfinite(rows.fidelity).all() and (rows.fidelity > 0).all()
    # The centralized rows, recomputed here: EAGLE in NumPy with the steps the extraction reads
    # from the probes (256 prompts, seed 0), against the network's stream from the hooks on the
    # held-out prompts (512, seed 1); squared gaps in prompt units (× s², s = ‖A‖₂ per prompt),
    # mean over entries. End to end: EAGLE from the prompt; one step: from the network's Z_l.
    model, task, _ = checkpoint.load(TRAINED / "centralized.pt")
    ex = extract(
        model, task, probe_batch_size=256, seed=0, control=False, views=("eagle", "fidelity")
    )
    a, c = ex.layers.a_step.to_numpy(), ex.layers.c_step.to_numpy()
    p = probe_batch(task, 512, 1)
    A, B, C = (t.numpy() for t in (p.A, p.B, p.C))
    s = prompt_norm(A, model.cfg.normalize)[:, None, None]
    iterates = numpy_eagle(A / s, B / s, C / s, a, c)
    with torch.no_grad():
        _, cache = float64_copy(model).run_with_cache(p.z0())
    Z = [cache["blocks.0.hook_resid_pre"].numpy()]
    Z += [cache[f"blocks.{layer}.hook_resid_post"].numpy() for layer in range(4)]
    d, n = task.d, task.n
    want = {"end_to_end": [], "one_step": []}
    for layer in range(4):
        want["end_to_end"].append(
            float(np.mean((Z[layer + 1] - _stream(*iterates[layer + 1])) ** 2 * s**2))
        )
        Zl = Z[layer]
        Al, Bl, Cl, slot = Zl[:, :d, :n], Zl[:, d:, :n], Zl[:, :d, n:], Zl[:, d:, n:]
        A1, B1, C1, dD = numpy_eagle(Al, Bl, Cl, a[layer : layer + 1], c[layer : layer + 1])[1]
        step = _stream(A1, B1, C1, -slot + dD)
        want["one_step"].append(float(np.mean((Z[layer + 1] - step) ** 2 * s**2)))
    for reading, values in want.items():
        rows = fid[(fid.model == "centralized") & (fid.reading == reading)].sort_values("layer")
        np.testing.assert_allclose(rows.fidelity, values, rtol=1e-6, err_msg=reading)


def test_suites_are_parameter_grids():
    for name, suite in SUITES.items():
        for field in ("kappas", "sizes", "machines"):
            grid = getattr(suite, field)
            assert isinstance(grid, tuple) and list(grid) == sorted(set(grid)), (name, field)
        assert all(k >= 1 for k in suite.kappas) and all(m >= 1 for m in suite.machines)
        assert set(suite.baselines) <= set(solvers.SOLVERS), name
        assert suite.centralized == bool(suite.kappas and suite.sizes), name
    assert SUITES["paper"].sizes == (240, 2000) and SUITES["paper"].kappas[-1] == 1e8


@pytest.mark.slow
def test_quick_suite_covers_its_whole_grid(quick):
    _, t = quick
    suite = SUITES["quick"]
    solvers_run = ("eagle", "eagle_fast") + suite.baselines
    grid = {(n, k, s) for n in suite.sizes for k in suite.kappas for s in solvers_run}
    c = t["centralized"]
    assert set(zip(c.n, c.kappa, c.solver, strict=True)) == grid and len(c) == len(grid)
    d = t["distributed"]
    assert sorted(set(d.machines)) == list(suite.machines)
    assert len(d) == len(suite.machines) * len(set(d.method)) and len(set(d.method)) == 3


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


def test_seed_table_reads_every_seed_and_averages_table1(tmp_path):
    """Planted EAGLE models saved as seeds: every fidelity is round-off, the test numbers are
    evaluate's, and the summary is the mean and sd over the files."""
    from plants import eagle as planted_model

    from eagle_probe.bench import seed_summary, seeds
    from eagle_probe.evaluate import evaluate

    steps = {0: ([0.4, 0.3], [0.9, 0.7]), 1: ([0.5, 0.2], [0.8, 0.6])}
    for k, (a, c) in steps.items():
        model, task = planted_model(a, c, normalize="spectral", n=6, d=6)
        checkpoint.save(tmp_path / f"planted_seed{k}.pt", model, task, {})
    (tmp_path / "notes.pt").write_bytes(b"not a seed")  # ignored: not {recipe}_seed{k}.pt
    tests, fid = seeds(tmp_path, batch=300, seed=5)
    assert sorted(tests.seed) == [0, 1] and set(tests.recipe) == {"planted"}
    model, task = planted_model(*steps[1], normalize="spectral", n=6, d=6)
    want = evaluate(model, task, batch=300, seed=5)
    row = tests[tests.seed == 1].iloc[0]
    assert row.mse == pytest.approx(want["mse"], rel=RTOL)
    assert row.below_zero_median == pytest.approx(want["zero_mse"] / want["median_mse"], rel=RTOL)
    # a mean squared gap over entries of order one: RTOL² is an rms gap of RTOL
    assert fid.fidelity.max() < RTOL**2, "planted EAGLE: the fitted steps reproduce every layer"
    table = seed_summary(fid)
    assert set(table["count"]) == {2} and len(table) == 2 * 2  # two readings × two layers
    one = fid[(fid.reading == "one_step") & (fid.layer == 1)].fidelity
    got = table[(table.reading == "one_step") & (table.layer == 1)].iloc[0]
    assert got["mean"] == pytest.approx(one.mean()) and got["std"] == pytest.approx(one.std())
    alone, none = seeds(tmp_path, batch=300, seed=5, fidelity=False)  # the test numbers alone
    assert none is None and alone.equals(tests)  # exact: the same files through the same ops
    with pytest.raises(ValueError, match="no"):
        seeds(tmp_path / "missing", batch=10)


def test_seed_algorithm1_reads_every_seed_fits_both_readings_and_averages_them(tmp_path):
    """Planted constant-step seeds (spectral: ρ = 1 on every prompt entering layer 0, so that
    layer's per-layer constants are its steps and its one-step gap is round-off); the summary
    splits the two readings of the constants and averages over the files."""
    from plants import eagle as planted_model

    from eagle_probe.bench import seed_algorithm1, seed_summary

    steps = {0: ([0.4, 0.3], [0.9, 0.7]), 1: ([0.5, 0.2], [0.8, 0.6])}
    for k, (a, c) in steps.items():
        model, task = planted_model(a, c, normalize="spectral", n=6, d=6)
        checkpoint.save(tmp_path / f"planted_seed{k}.pt", model, task, {})
        checkpoint.save(tmp_path / f"other_seed{k}.pt", model, task, {})  # left out below
    rows = seed_algorithm1(tmp_path, recipes={"planted"})
    assert set(rows.recipe) == {"planted"} and sorted(set(rows.seed)) == [0, 1]
    assert len(rows) == 2 * 2 * 2 * 2  # seeds × constants × layers × readings
    for k, (a, c) in steps.items():
        first = rows[(rows.seed == k) & (rows.constants == "per_layer") & (rows.layer == 0)]
        assert first.eta.to_numpy() == pytest.approx([a[0]] * 2, rel=RTOL)
        assert first.gamma.to_numpy() == pytest.approx([c[0]] * 2, rel=RTOL)
        # a mean squared gap over entries of order one: RTOL² is an rms gap of RTOL
        assert first[first.reading == "one_step"].fidelity.iloc[0] < RTOL**2
        both = rows[(rows.seed == k) & (rows.constants == "global")]
        assert both.eta.nunique() == 1 and both.gamma.nunique() == 1  # one pair for every layer
        mine = rows[rows.seed == k].iloc[0]
        assert mine.network_over_algorithm == pytest.approx(mine.network_mse / mine.mse, rel=RTOL)
    table = seed_summary(rows)
    assert len(table) == 2 * 2 * 2 and set(table["count"]) == {2}  # constants × readings × layers
    part = rows[(rows.constants == "global") & (rows.reading == "end_to_end") & (rows.layer == 1)]
    got = table[
        (table.constants == "global") & (table.reading == "end_to_end") & (table.layer == 1)
    ].iloc[0]
    assert got["mean"] == pytest.approx(part.fidelity.mean(), rel=RTOL)
    assert got["std"] == pytest.approx(part.fidelity.std(), rel=RTOL)
    assert got["eta_mean"] == pytest.approx(part.eta.mean(), rel=RTOL)
    assert got["gamma_std"] == pytest.approx(part.gamma.std(), rel=RTOL)
    with pytest.raises(ValueError, match="no"):
        seed_algorithm1(tmp_path, recipes={"missing"})
