"""The design-form fit (`fit/polynomial.py`): a known spectral filter Δx = Σ β_p G^p r recovered
with its degree, the EAGLE expansion's coefficients against its recursion written out by hand, the
orders a fit needs, the Chebyshev features against the matrix polynomials, the degenerate fits."""

import numpy as np
import pytest
from conftest import RTOL, assert_close
from numpy.polynomial import chebyshev

from eagle_probe.fit.polynomial import (
    PolyFit,
    chebyshev_features,
    eagle_expansion,
    essential_orders,
    fit_polynomial,
)


def problem(beta, b=40, d=6, dp=2, seed=0):
    """G (b, d, d) positive semi-definite, r (b, d, d') and Δx = Σ β_p G^p r."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((b, d, d))
    G = M @ M.transpose(0, 2, 1) / d
    r = rng.standard_normal((b, d, dp))
    dx, v = np.zeros_like(r), r
    for coef in beta:
        dx, v = dx + coef * v, G @ v
    return G, r, dx


def test_expansion_orders_follow_the_recursion():
    degrees = [len(b) - 1 for b in eagle_expansion([0.1] * 4, [0.2] * 4)]
    assert degrees == [0, 2, 8, 26]


def test_polynomial_fit_recovers_a_known_filter_and_picks_its_degree():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((40, 6, 6))
    G = M @ M.transpose(0, 2, 1) / 6
    r = rng.standard_normal((40, 6, 2))
    beta = np.array([-0.5, 0.2, -0.03])
    dx = beta[0] * r + beta[1] * G @ r + beta[2] * G @ G @ r
    fit = fit_polynomial(G, r, dx)
    assert fit.degree == 2 and fit.r2 > 1 - 1e-12
    np.testing.assert_allclose(fit.beta, beta, rtol=RTOL)


def test_the_expansion_of_two_layers_is_c_times_the_square_of_one_minus_a_lambda():
    # m_0 = 1, m_1(λ) = 1 − a_0 λ: layer 0 is c_0, layer 1 is c_1 (1 − a_0 λ)²
    a, c = [0.3, 0.2], [0.7, 0.5]
    out = eagle_expansion(a, c)
    np.testing.assert_allclose(out[0], [0.7])
    np.testing.assert_allclose(out[1], [0.5, -2 * 0.5 * 0.3, 0.5 * 0.3**2], rtol=RTOL)


def test_a_sparse_filter_keeps_only_its_orders():
    G, r, dx = problem([-0.5, 0.0, -0.03])
    fit = fit_polynomial(G, r, dx)
    assert fit.degree == 2
    assert essential_orders(G, r, dx, fit) == [0, 2]
    assert fit.orders() == [0, 2]
    assert_close(fit.alpha, [0.5, 0.0, 0.03])


def test_a_constant_filter_has_degree_zero():
    G, r, dx = problem([0.25])
    fit = fit_polynomial(G, r, dx)
    assert fit.degree == 0 and fit.beta == pytest.approx([0.25], rel=RTOL)
    assert essential_orders(G, r, dx, fit) == [0]
    np.testing.assert_allclose(fit.filter(np.array([0.0, 3.0])), [0.25, 0.25], rtol=RTOL)


def test_chebyshev_features_are_the_chebyshev_polynomials_of_the_shifted_matrix():
    G, r, _ = problem([1.0], b=3, d=4, dp=1)
    lam = float(np.linalg.eigvalsh(G).max())
    feats = chebyshev_features(G, r, 3, lam)
    w, V = np.linalg.eigh(G)  # T_k(2G/λ − I) r = V T_k(2w/λ − 1) Vᵀ r
    for k in range(4):
        T = chebyshev.Chebyshev.basis(k)(2 * w / lam - 1)  # (b, d)
        want = V @ (T[..., None] * (V.transpose(0, 2, 1) @ r))
        assert_close(feats[k], want)


def test_no_update_and_no_spectrum_give_an_empty_fit():
    G, r, _ = problem([1.0])
    still = fit_polynomial(G, r, np.zeros_like(r))
    assert (still.degree, still.r2, still.rel_residual) == (0, 1.0, 0.0)
    flat = fit_polynomial(np.zeros_like(G), r, r)
    assert (flat.degree, flat.r2, flat.rel_residual, flat.lam_max) == (0, 0.0, 1.0, 0.0)
    assert PolyFit(np.zeros(2), 1, 1.0, 0.0, 1.0).orders() == []
