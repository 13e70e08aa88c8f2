"""The sparse optimizers (`fit/sparse.py`): minimum-norm normal solves, QR refits, greedy gains,
STLSQ and forward paths on grouped problems with a known support, bags and frequencies."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import RTOL, assert_close

from eagle_probe.fit import sparse


def grouped_problem(seed=0, m=400, sizes=(1, 1, 3, 5, 4), true=(0, 2)):
    rng = np.random.default_rng(seed)
    Phi = [rng.standard_normal((m, s)) for s in sizes]
    coef = [rng.standard_normal(s) if i in true else np.zeros(s) for i, s in enumerate(sizes)]
    y = sum(P @ c for P, c in zip(Phi, coef, strict=True))
    problem = sparse.NormalProblem(
        sizes=list(sizes),
        gram_block=lambda i, j: Phi[i].T @ Phi[j],
        rhs_block=lambda i: Phi[i].T @ y,
        yy=float(y @ y),
    )
    return problem, Phi, coef, y


def test_solve_normal_is_the_minimum_norm_solution_of_the_scaled_columns():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 6)) @ rng.standard_normal((6, 9))  # rank 6, 9 columns
    y = rng.standard_normal(50)
    theta = sparse.solve_normal(X.T @ X, X.T @ y)
    norms = np.linalg.norm(X, axis=0)
    want = np.linalg.pinv(X / norms) @ y / norms
    assert_close(theta, want)
    full = rng.standard_normal((50, 5))
    coef = rng.standard_normal(5)
    got = sparse.solve_normal(full.T @ full, full.T @ (full @ coef))
    np.testing.assert_allclose(got, coef, rtol=RTOL)


def test_refit_qr_is_exact_and_honours_priority():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 4)) * np.array([1e-3, 1.0, 1e3, 1.0])
    coef = np.array([2.0, -1.0, 3e-3, 0.5])
    np.testing.assert_allclose(sparse.refit_qr(X, X @ coef), coef, rtol=RTOL)
    # a second level that repeats the first column: the first level keeps the shared direction
    Y = np.concatenate([X[:, :1], X[:, :1] + X[:, 1:2]], axis=1)
    y = 2.0 * X[:, 0]
    assert_close(sparse.refit_qr(Y, y, [1, 1]), [2.0, 0.0])


def test_fit_levels_keep_the_shared_direction_first():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(200)
    Phi = [a[:, None], np.stack([a, rng.standard_normal(200)], axis=1)]
    y = 3.0 * a
    problem = sparse.NormalProblem(
        sizes=[1, 2],
        gram_block=lambda i, j: Phi[i].T @ Phi[j],
        rhs_block=lambda i: Phi[i].T @ y,
        yy=float(y @ y),
    )
    coefs, res = problem.fit([0, 1], [1, 1], exact=True)
    np.testing.assert_allclose(coefs[0], [3.0], rtol=RTOL)
    np.testing.assert_allclose(coefs[1], [0.0, 0.0], atol=RTOL)
    assert res < 1e-7


def test_gain_is_the_drop_of_the_residual():
    problem, Phi, _, y = grouped_problem()
    support = [1, 3]
    coefs, _ = problem.fit(support)
    for g in (0, 2, 4):
        A = np.concatenate([Phi[i] for i in support], axis=1)
        B = np.concatenate([A, Phi[g]], axis=1)
        r1 = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
        r2 = y - B @ np.linalg.lstsq(B, y, rcond=None)[0]
        want = (r1 @ r1 - r2 @ r2) / (y @ y)
        assert problem.gain(support, coefs, g) == pytest.approx(want, rel=RTOL, abs=RTOL)


def test_stlsq_and_forward_path_find_the_planted_groups():
    problem, _, coef, _ = grouped_problem(sizes=(1, 1, 1, 3, 5, 4), true=(0, 4))
    support, coefs = sparse.stlsq(problem, list(range(6)), threshold=1e-3)
    assert support == [0, 4]
    np.testing.assert_allclose(coefs[1], coef[4], rtol=RTOL)
    path, residuals = sparse.forward_groups(
        problem, [0], [1, 2, 3, 4, 5], tol=1e-10, min_gain=0.1, max_groups=3
    )
    assert path == [0, 4]
    assert residuals[-1] < 1e-10  # the tol the path was asked to stop at
    fitted, _ = problem.fit(path, exact=True)
    np.testing.assert_allclose(fitted[1], coef[4], rtol=RTOL)


def test_bags_and_frequencies():
    rng = np.random.default_rng(6)
    subsets = sparse.bags(100, 5, 0.5, rng)
    assert len(subsets) == 5
    for s in subsets:
        assert len(s) == 50 and len(set(s.tolist())) == 50 and s.max() < 100
    freq = sparse.inclusion_frequency([["a", "b"], ["a"], ["a", "c"], []], ["a", "b", "c", "d"])
    assert freq == {"a": 0.75, "b": 0.25, "c": 0.25, "d": 0.0}
    with pytest.raises(ValueError):
        sparse.bags(10, 2, 0.0, rng)
