import numpy as np
import pytest
from conftest import run_numpy_only

from eagle_probe import solver_template as eagle
from eagle_probe.solvers import SOLVERS, run, solver

RNG_SEED = 0


def problem(m, n, kappa, *, rank=None, seed=RNG_SEED, consistent=False):
    rng = np.random.default_rng(seed)
    k = min(m, n) if rank is None else rank
    U, _ = np.linalg.qr(rng.standard_normal((m, k)))
    V, _ = np.linalg.qr(rng.standard_normal((n, k)))
    A = (U * np.logspace(0, -np.log10(kappa), k)) @ V.T
    b = A @ rng.standard_normal(n) if consistent else rng.standard_normal(m)
    return A, b


CASES = {
    "square_k1e2": problem(40, 40, 1e2),
    "tall_k1e3": problem(60, 30, 1e3),
    "wide_k10": problem(20, 35, 10.0),
    "rank_deficient": problem(40, 30, 1e2, rank=12),
    "consistent_k1e4": problem(30, 30, 1e4, consistent=True),
}
FAST = ["eagle", "lstsq", "cg", "lsqr", "lsmr", "newton_schulz"]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", FAST)
def test_solvers_reach_the_minimum_norm_solution(case, name):
    A, b = CASES[case]
    A0, b0 = A.copy(), b.copy()
    ref = np.linalg.pinv(A, rcond=1e-12) @ b
    x, info = solver(name)(A, b, rtol=1e-12, maxiter=20000)
    assert info == 0
    assert np.array_equal(A, A0) and np.array_equal(b, b0), "inputs must not change"
    tol = 1e-3 if name in ("lsqr", "lsmr", "lbfgs") else 1e-7
    assert np.linalg.norm(x - ref) <= tol * np.linalg.norm(ref)


@pytest.mark.parametrize("name", ["gd", "lbfgs"])
def test_first_order_methods_converge_on_a_well_conditioned_problem(name):
    A, b = problem(40, 20, 3.0)
    x, info = solver(name)(A, b, rtol=1e-8)  # L-BFGS stops at f's round-off, ~1e-9 here
    assert info == 0
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.linalg.norm(x - ref) <= 1e-6 * np.linalg.norm(ref)


def test_eagle_iterations_grow_like_log_kappa_and_beat_cg():
    counts = {}
    for kappa in (1e2, 1e4, 1e6):
        A, b = problem(60, 60, kappa)
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        r = run("eagle", A, b, reference=ref)
        assert r.info == 0 and r.error < 1e-8
        counts[kappa] = r.iterations
    assert counts[1e6] - counts[1e4] <= 20 and counts[1e6] < 60
    A, b = problem(60, 60, 1e4)
    cg = run("cg", A, b, reference=np.linalg.lstsq(A, b, rcond=None)[0], maxiter=100000)
    assert cg.iterations > 10 * counts[1e4]


def test_eagle_stops_and_stays_on_rank_deficient_problems():
    A, b = problem(30, 30, 1e3, rank=8)
    ref = np.linalg.pinv(A, rcond=1e-10) @ b
    iterates = []
    x, info = eagle.lstsq(A, b, maxiter=400, callback=iterates.append)
    assert info == 0 and len(iterates) < 100
    assert np.linalg.norm(x - ref) < 1e-8 * np.linalg.norm(ref)
    # ask for an unreachable tolerance: the iterate still does not drift away
    far, _ = eagle.lstsq(A, b, rtol=1e-300, maxiter=300)
    assert np.linalg.norm(far - ref) < 1e-8 * np.linalg.norm(ref)


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_eagle_is_scale_free(scale):
    A, b = problem(25, 20, 1e3)
    x, info = eagle.lstsq(A * scale, b)
    assert info == 0
    np.testing.assert_allclose(x * scale, np.linalg.lstsq(A, b, rcond=None)[0], rtol=1e-8)


@pytest.mark.parametrize(
    "A, b, match",
    [
        (np.full((3, 3), np.nan), np.ones(3), "NaN or Inf"),
        (np.ones((3, 3)), np.array([1.0, np.inf, 0.0]), "NaN or Inf"),
        (np.ones((3, 2)), np.ones(4), "rows"),
        (np.ones((0, 2)), np.ones(0), "empty"),
        (np.ones(3), np.ones(3), "2-d"),
    ],
)
@pytest.mark.parametrize("name", ["eagle", "cg", "gd"])
def test_bad_input_raises(A, b, match, name):
    with pytest.raises(ValueError, match=match):
        solver(name)(A, b)


def test_zero_matrix_gives_zero_solution():
    x, info = eagle.lstsq(np.zeros((4, 3)), np.ones(4))
    assert info == 0 and np.array_equal(x, np.zeros(3))


def test_unknown_solver():
    with pytest.raises(ValueError, match="unknown solver 'magic'"):
        solver("magic")


def test_block_completion_modes_and_regimes():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((14, 5)) @ rng.standard_normal((5, 16))
    A, B, C, D = X[:12, :12], X[12:, :12], X[:12, 12:], X[12:, 12:]
    assert np.allclose(eagle.complete(A, B, C), D, atol=1e-8)
    Dd, stats = eagle.complete_distributed(A, B, C, 3)
    assert np.allclose(Dd, D, atol=1e-7) and stats["info"] == 0
    assert stats["floats_per_machine_round"] == (12 + 2) * 4
    Ds, st = eagle.complete_sketched(A, B, C, 6, np.random.default_rng(0), maxiter=2000)
    assert st["info"] == 0 and np.allclose(Ds, D, atol=1e-6)


def test_registry_names():
    assert set(SOLVERS) >= {"eagle", "lstsq", "cg", "lsqr", "lsmr", "gd", "lbfgs", "newton_schulz"}


def test_template_imports_only_numpy():
    out = run_numpy_only(
        eagle.__file__, "x, info = m.lstsq(np.eye(3), np.ones(3)); assert info == 0"
    )
    assert out.stdout.strip() == "ok", out.stderr
