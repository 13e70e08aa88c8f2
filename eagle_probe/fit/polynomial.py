"""The design's polynomial update, shown as what it is: a spectral filter.

In card notation (A_card = Aᵀ, b = Bᵀ, x = wᵀ, G = A Aᵀ) each layer's update of the implicit
iterate is fitted as

    x_{l+1} = x_l − Σ_p α_p G^p A_cardᵀ (b − A_card x_l) = x_l + f_l(G) r_l,
    f_l(λ) = −Σ_p α_p λ^p,

per layer and head (`fit_polynomial`, Chebyshev basis on [0, λ_max], degree by BIC). EAGLE implies
f_l(λ) = c_l m_l(λ)² with m_0 = 1, m_{l+1} = m_l (1 − a_l λ m_l²) (`eagle_expansion`), so the two
filters are compared on the probe spectrum. Coefficients go to JSON in the stable bases only:
Chebyshev on [0, λ_max] and monomials scaled by λ_max^p (the value each order contributes at the
top of the spectrum). Orders are listed only where the fit is sparse: an order is kept if dropping
it raises the relative residual by more than `ORDER_THRESHOLD`.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import Polynomial
from numpy.polynomial import chebyshev as cheb

from eagle_probe.fit._legacy import (
    PolyFit,
    dynamic_steps,
    eagle_expansion,
    fit_polynomial,
    residual_direction,
)
from eagle_probe.fit._legacy import (
    polynomial_view as _fits,
)
from eagle_probe.fit.base import Context, ViewResult, register

ORDER_THRESHOLD = 1e-3  # an order is essential if dropping it raises the relative residual by this
SPECTRUM_POINTS = 64  # points of the filter curves stored for figures

__all__ = ["PolyFit", "dynamic_steps", "eagle_expansion", "fit_polynomial", "polynomial_view"]


def essential_orders(
    G: np.ndarray, r: np.ndarray, dx: np.ndarray, fit: PolyFit
) -> list[int] | None:
    """Orders whose removal (refit on the rest, monomial basis scaled by λ_max) raises the relative
    residual by more than ORDER_THRESHOLD; None when the fit is not sparse (every order needed)."""
    K = fit.degree
    if K == 0:
        return [0]
    lam = max(fit.lam_max, 1e-300)
    feats, v = [], r / 1.0
    for _ in range(K + 1):
        feats.append(v.reshape(-1))
        v = (G / lam) @ v
    X = np.stack(feats, axis=1)
    y = dx.reshape(-1)
    ny = float(np.linalg.norm(y))
    base = fit.rel_residual
    keep = []
    for p in range(K + 1):
        cols = [q for q in range(K + 1) if q != p]
        coef = np.linalg.lstsq(X[:, cols], y, rcond=None)[0]
        rel = float(np.linalg.norm(y - X[:, cols] @ coef)) / ny if ny else 0.0
        if rel - base > ORDER_THRESHOLD:
            keep.append(p)
    return keep if len(keep) < K + 1 or K < 3 else None


def polynomial_view_fits(cap):
    """Per (layer, head) fits of the design's form (head −1 is the whole layer)."""
    return _fits(cap)


@register("polynomial")
def polynomial_view(ctx: Context) -> ViewResult:
    """Design-form filters per layer against EAGLE's implied filter."""
    cap = ctx.cap
    fits, terms = _fits(cap)
    # EAGLE's implied filter, where the eagle view ran (the feature layout); None otherwise
    eagle = ctx.results.get("eagle")
    expansions = (
        eagle_expansion(eagle.tables["eagle"].a_step, eagle.tables["eagle"].c_step)
        if eagle is not None
        else [None] * cap.layers
    )
    G = cap.normal_matrix()
    eig = np.linalg.eigvalsh(G).reshape(-1)
    lam_top = float(eig.max())
    grid = np.linspace(0.0, lam_top, SPECTRUM_POINTS)
    present = eig[eig > 1e-12 * max(lam_top, 1e-300)]
    layers, curves = [], []
    for layer in range(cap.layers):
        r = residual_direction(cap, layer)
        dx = cap.x[layer + 1] - cap.x[layer]
        row = fits[(fits.layer == layer) & (fits["head"] == -1)].iloc[0]
        fit = fit_polynomial(G, r, dx, max_degree=max(int(row["degree"]), 0))
        f_fit = fit.filter(grid)
        f_eagle, gap = None, None
        if expansions[layer] is not None:
            implied = Polynomial(expansions[layer])
            f_eagle = implied(grid)
            gap_scale = max(float(np.abs(implied(present)).max()), 1e-300)
            gap = float(np.abs(fit.filter(present) - implied(present)).max() / gap_scale)
        t = cheb.poly2cheb(Polynomial(fit.beta)(Polynomial([lam_top / 2, lam_top / 2])).coef)
        scaled = fit.beta * lam_top ** np.arange(fit.beta.size)
        orders = essential_orders(G, r, dx, fit)
        heads = fits[(fits.layer == layer) & (fits["head"] >= 0)]
        layers.append(
            {
                "layer": layer,
                "degree": fit.degree,
                "r2": fit.r2,
                "rel_residual": fit.rel_residual,
                "orders": orders,
                "sparse": orders is not None,
                "chebyshev": [float(v) for v in t],
                "scaled_monomial": [float(v) for v in scaled],
                "lambda_max": lam_top,
                "eagle_filter_gap": gap,
                "linearity_deviation": float(cap.linearity_deviation[layer + 1]),
                "heads": [
                    {"head": int(h.head), "degree": int(h.degree), "r2": h.r2, "share": h.share}
                    for h in heads.itertuples()
                ],
            }
        )
        curves.append({"fitted": f_fit, "eagle": f_eagle})
    warnings = [
        f"layer {lay['layer']}: the design form explains only R² = {lay['r2']:.2f} of the update"
        for lay in layers
        if lay["r2"] < 0.9
    ]
    dyn = dynamic_steps(cap)
    return ViewResult(
        "polynomial",
        {
            "basis": "Chebyshev T_k(2λ/λ_max − 1) on [0, λ_max]; scaled monomials β_p λ_max^p",
            "order_threshold": ORDER_THRESHOLD,
            "layers": layers,
            "dynamic": dyn.to_dict("records"),
        },
        {"fits": fits, "terms": terms, "dynamic": dyn},
        warnings,
        extra={"grid": grid, "curves": curves, "spectrum": present},
    )
