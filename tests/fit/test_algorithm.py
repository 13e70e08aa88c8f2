"""Naming a layer's algorithm (`fit/algorithm.py`): on updates Δx built here from a known rule
(GD, a GD++ filter through I − γG, a full preconditioner Γ, another filter), the three fits read
their coefficients back and the first rule that holds names the layer."""

import numpy as np
import pytest
from conftest import RTOL, assert_close

from eagle_probe.fit import algorithm

B, D, DP = 30, 4, 1


def problem(seed=0):
    """G = A Aᵀ (b, d, d) positive semi-definite and r (b, d, d')."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((B, D, 8)) / np.sqrt(8)
    return A @ A.transpose(0, 2, 1), rng.standard_normal((B, D, DP))


def fits(G, r, dx):
    """The three fits as `layer_fits` makes them (the polynomial on its essential orders)."""
    from eagle_probe.fit.polynomial import essential_orders, fit_polynomial

    full = fit_polynomial(G, r, dx, max_degree=algorithm.MAX_DEGREE)
    orders = essential_orders(G, r, dx, full) or list(range(full.degree + 1))
    return (
        algorithm.scalar_fit(r, dx),
        algorithm.support_fit(G, r, dx, orders),
        algorithm.matrix_fit(r, dx),
    )


def test_a_gradient_step_is_gd_with_its_step():
    G, r = problem()
    scalar, poly, matrix = fits(G, r, 0.3 * r)  # Δx = η r, η = 0.3: α_0 = −0.3
    assert scalar["alpha_0"] == pytest.approx(-0.3, rel=RTOL) and scalar["r2"] == pytest.approx(1)
    assert algorithm.name_layer(scalar, poly, matrix) == "GD"


def test_a_step_through_a_preconditioning_of_the_data_is_gd_plus_plus():
    G, r = problem(1)
    eta, gamma = 0.3, 0.4
    dx = eta * (r - gamma * G @ r)  # α_0 = −η, α_1 = ηγ
    scalar, poly, matrix = fits(G, r, dx)
    assert algorithm.name_layer(scalar, poly, matrix) == "GD++"
    assert poly["orders"] == [0, 1]
    np.testing.assert_allclose(poly["alpha"], [-eta, eta * gamma], rtol=RTOL)
    assert algorithm.label_alpha0({"label": "GD++", "polynomial": poly}) == pytest.approx(-eta)


def test_a_free_preconditioner_is_preconditioned_gd_with_its_matrix():
    G, r = problem(2)
    Gamma = np.diag([0.1, 0.5, 1.0, 2.0]) + 0.05
    scalar, poly, matrix = fits(G, r, Gamma @ r)
    assert algorithm.name_layer(scalar, poly, matrix) == "preconditioned GD"
    assert_close(matrix["gamma"], Gamma)
    assert matrix["departure_from_scalar"] > algorithm.SCALAR_TOL
    assert algorithm.label_alpha0({"label": "preconditioned GD", "matrix": matrix}) == (
        pytest.approx(-np.trace(Gamma) / D)
    )


def test_a_filter_without_order_one_is_a_polynomial():
    G, r = problem(3)
    scalar, poly, matrix = fits(G, r, 0.2 * r + 0.5 * G @ G @ r)
    assert poly["orders"] == [0, 2]
    assert algorithm.name_layer(scalar, poly, matrix) == "polynomial"


def test_noise_is_unrecognised():
    G, r = problem(4)
    dx = np.random.default_rng(9).standard_normal(r.shape)
    assert algorithm.name_layer(*fits(G, r, dx)) == "unrecognised"


def test_one_preconditioning_on_both_sides_is_a_square():
    # α ∝ (1 − γλ)² = 1 − 2γλ + γ²λ², γ = 0.25
    poly = {"orders": [0, 1, 2], "alpha": [-1.0, 0.5, -0.0625]}
    out = algorithm.squared_preconditioner(poly)
    assert out["gamma"] == pytest.approx(0.25) and out["square_gap"] == pytest.approx(0.0)
    assert algorithm.squared_preconditioner({"orders": [0, 1], "alpha": [-1.0, 0.5]}) is None
