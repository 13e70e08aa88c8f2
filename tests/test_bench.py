import numpy as np
import pytest
import torch
from conftest import TRAINED, numpy_eagle, prompt_norm

from eagle_probe import checkpoint, solvers
from eagle_probe.bench import SUITES, run_bench
from eagle_probe.capture import float64_copy, probe_batch
from eagle_probe.cli import main
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
    assert c.loc[(1e4, "eagle"), "error"] < 1e-9
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


@pytest.mark.slow
def test_quick_suite_fidelity_values(quick):
    fid = quick[1]["fidelity"]
    assert set(fid.model) == set(PAPER_TABLE1)
    for name, rows in fid.groupby("model"):
        rows = rows.sort_values("layer")
        assert rows.layer.tolist() == [1, 2, 3, 4]
        np.testing.assert_allclose(rows.paper, np.array(PAPER_TABLE1[name]) * 1e-4, rtol=1e-12)
        assert (rows.better_than_paper == (rows.fidelity <= rows.paper)).all()
        assert np.isfinite(rows.fidelity).all() and (rows.fidelity > 0).all()
    # The centralized row, recomputed here: EAGLE in NumPy with the steps the extraction reads
    # from the probes (256 prompts, seed 0), against the network on the held-out prompts (512,
    # seed 1), squared gaps in prompt units (× s², s = ‖A‖₂ per prompt), mean over entries.
    model, task, _ = checkpoint.load(TRAINED / "centralized.pt")
    ex = extract(model, task, probe_batch_size=256, seed=0, control=False, test_batch=64)
    p = probe_batch(task, 512, 1)
    A, B, C = (t.numpy() for t in (p.A, p.B, p.C))
    s = prompt_norm(A, model.cfg.normalize)[:, None, None]
    iterates = numpy_eagle(A / s, B / s, C / s, ex.layers.a_step, ex.layers.c_step)
    with torch.no_grad():
        _, cache = float64_copy(model).run_with_cache(p.z0())
    want = []
    for layer in range(4):
        Al, Bl, Cl, Dl = iterates[layer + 1]
        eagle = np.concatenate([np.concatenate([Al, Cl], -1), np.concatenate([Bl, -Dl], -1)], -2)
        net = cache[f"blocks.{layer}.hook_resid_post"].numpy()
        want.append(float(np.mean((net - eagle) ** 2 * s**2)))
    got = fid[fid.model == "centralized"].sort_values("layer").fidelity
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_unknown_suite_is_a_user_error(tmp_path, capsys):
    assert main(["bench", "--suite", "huge", "--out", str(tmp_path / "b")]) == 2
    assert "unknown suite 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


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
