"""The solver registry (`solvers.py`): every solver's answer, its refusals, its x0 and its scale,
on one set of named problems."""

import numpy as np
import pytest
from problems import problem

from eagle_probe import eagle
from eagle_probe.solvers import SOLVERS, run, solver

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
    # exact: inputs not written to
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
        # certified to max(rtol, 100 κ̂ eps) (2.2e-8 at κ = 1e6), the reference good to κ eps
        assert r.info == 0 and r.error < max(1e-8, 1e3 * kappa * np.finfo(float).eps)
        counts[kappa] = r.iterations
    assert counts[1e6] - counts[1e4] <= 20 and counts[1e6] < 60
    A, b = problem(60, 60, 1e4)
    cg = run("cg", A, b, reference=np.linalg.lstsq(A, b, rcond=None)[0], maxiter=100000)
    assert cg.iterations > 10 * counts[1e4]


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


def test_unknown_solver():
    with pytest.raises(ValueError, match="unknown solver 'magic'"):
        solver("magic")


def test_registry_names():
    assert set(SOLVERS) >= {"eagle", "lstsq", "cg", "lsqr", "lsmr", "gd", "lbfgs", "newton_schulz"}


def test_lstsq_keeps_the_null_space_part_of_x0():
    A, b = problem(20, 30, 1e2, rank=12)
    x0 = np.random.default_rng(1).standard_normal(30)
    P = np.linalg.pinv(A, rcond=1e-10)
    want = x0 + P @ (b - A @ x0)
    for name in ("eagle", "lstsq", "cg", "lsqr", "lsmr", "newton_schulz"):
        x, info = solver(name)(A, b, x0, rtol=1e-12, maxiter=100000)
        assert info == 0, name
        tol = 1e-4 if name in ("lsqr", "lsmr", "gd") else 1e-8
        assert np.linalg.norm(x - want) <= tol * np.linalg.norm(want), name
        null = x0 - P @ (A @ x0)  # x0's component in the null space of A
        assert np.linalg.norm((x - P @ (A @ x)) - null) <= tol * np.linalg.norm(null), name
    x, info = eagle.lstsq(A, b, x0)
    assert info == 0 and np.linalg.norm(x - P @ b) > 0.5 * np.linalg.norm(null)


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize(
    "sa, sb", [(1e-300, 1e-300), (1e300, 1e300), (1e-150, 1e150), (1e200, 1.0)]
)
def test_every_solver_is_scale_free_or_says_so(name, sa, sb):
    A, b = problem(12, 8, 10.0)
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # L-BFGS-B's line search stalls near 1e-9 relative gradient on this problem (where
        # depends on how the scaled entries round), gd near 1e-10: each is asked for what it
        # reaches
        rtol = {"gd": 1e-10, "lbfgs": 1e-8}.get(name, 1e-12)
        x, info = solver(name)(A * sa, b * sb, rtol=rtol, maxiter=20000)
    with np.errstate(over="ignore", under="ignore"):
        want = ref * (sb / sa)
    if np.all(np.isfinite(want)) and np.max(np.abs(want)) > 1e-290:
        assert info == 0, (name, info)
        tol = 1e-3 if name in ("lsqr", "lsmr", "lbfgs", "gd") else 1e-8
        assert np.linalg.norm(x / (sb / sa) - ref) <= tol * np.linalg.norm(ref)
    else:
        assert info == eagle.UNREPRESENTABLE
