"""Name each layer's algorithm in the language of the in-context-learning literature.

Every layer's update of the implicit iterate (card notation: G = A Aᵀ, r_l = A Bᵀ − G x_l) is fitted
three ways on the probe batch:

  scalar      Δx ≈ β_0 r                          gradient descent with step −α_0 = β_0
  polynomial  Δx ≈ Σ_{p ∈ S} β_p G^p r            the design form, support S by `essential_orders`
  matrix      Δx ≈ Γ r, Γ a free d × d matrix      preconditioned GD (Ahn et al. 2023)

and named by the first rule that holds (R² is uncentred, 1 − ‖Δx − fit‖² / ‖Δx‖²):

  GD                 the scalar fit has R² ≥ R2_MIN                              (von Oswald et al.)
  GD++               the polynomial fit has R² ≥ R2_MIN and its support holds orders 0 and 1: a GD
                     step taken through a preconditioning of the data, I − γ G, which shows as
                     order 1 (and order 2 when the data were moved on both sides of the step)
  preconditioned GD  the matrix fit has R² ≥ R2_MIN and a relative residual at most MATRIX_GAIN
                     times the polynomial fit's, with Γ not a multiple of I (departure ≥ SCALAR_TOL)
  polynomial         the polynomial fit has R² ≥ R2_MIN but without order 1 (some other filter)
  unrecognised       none of these explains the update

Where orders 0, 1 and 2 are all kept, `squared_preconditioner` tests the GD++ signature of one
preconditioning on both sides of a step, α ∝ (1 − γλ)².

α_p = −β_p, so gradient descent from zero with step η has α_0 = −η (the design's sign).

Sample layout. A GD++ layer may take no step on the iterate at all and only transform the data
its successors step on (x ← (I − γ G) x for every row): its Δx is round-off, which none of the
fits above can name. A layer (not the last) that moves x by less than NO_STEP of the final
iterate (`step_share`) but moves the data (γ λ_max ≥ MOVES) is named from the stream instead:
"GD++" when one GD++ layer (view `eagle`: A, C −= γ A Aᵀ(·), B, D −= η B Aᵀ(·)) explains its
whole update with R² ≥ R2_MIN (`fit` = "stream"), "unrecognised" otherwise. Every layer also
carries GD++'s own numbers (`gdpp`): γ, the data transform, and η, the gradient step on the
labels, read from the activations (view `eagle`, the readout's frame), η again from the iterate
(−α_0 of the fit the name rests on: GD++ gives α_0 = −η exactly), and no γ for the last layer,
whose data transform never reaches the prediction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe.captured import Capture
from eagle_probe.fit.base import Context, ViewResult, register
from eagle_probe.fit.polynomial import essential_orders, fit_polynomial, residual_direction
from eagle_probe.fit.rules import MATRIX_GAIN, MOVES, NO_STEP, R2_MIN, SCALAR_TOL, decide

MAX_DEGREE = 6  # highest order the polynomial fit may use


def _score(y: np.ndarray, fit: np.ndarray) -> tuple[float, float]:
    """(R², relative residual) of a fit of y, both uncentred."""
    ny = float(np.linalg.norm(y))
    if ny == 0.0:
        return 1.0, 0.0
    rel = float(np.linalg.norm(y - fit)) / ny
    return 1.0 - rel**2, rel


def scalar_fit(r: np.ndarray, dx: np.ndarray) -> dict:
    """Δx ≈ β_0 r over the batch: r, dx (b, d, d')."""
    rr = float(np.sum(r * r))
    beta = float(np.sum(r * dx)) / rr if rr > 0 else 0.0
    r2, rel = _score(dx, beta * r)
    return {"alpha_0": -beta, "r2": r2, "rel_residual": rel}


def support_fit(
    G: np.ndarray, r: np.ndarray, dx: np.ndarray, orders: list[int], lam_max: float | None = None
) -> dict:
    """Δx ≈ Σ_{p ∈ orders} β_p G^p r by least squares in monomials scaled by λ_max^p (`lam_max`:
    λ_max(G) over the batch, if known)."""
    lam_max = float(np.linalg.eigvalsh(G).max()) if lam_max is None else lam_max
    lam = max(lam_max, 1e-300)
    top = max(orders) if orders else 0
    feats, v, scaled = [], r, G / lam  # (b, d, d), once for every order
    for _ in range(top + 1):
        feats.append(v.reshape(-1))
        v = scaled @ v
    X = np.stack([feats[p] for p in orders], axis=1) if orders else np.zeros((dx.size, 0))
    coef = np.linalg.lstsq(X, dx.reshape(-1), rcond=None)[0] if orders else np.zeros(0)
    r2, rel = _score(dx.reshape(-1), X @ coef)
    return {
        "orders": list(orders),
        "alpha": [-float(c) / lam**p for p, c in zip(orders, coef, strict=True)],
        "scaled_alpha": [-float(c) for c in coef],
        "lambda_max": lam,
        "r2": r2,
        "rel_residual": rel,
    }


def matrix_fit(r: np.ndarray, dx: np.ndarray) -> dict:
    """Δx ≈ Γ r with Γ a free (d, d) matrix shared by the batch: least squares on the columns."""
    d = r.shape[-2]
    R = r.swapaxes(0, 1).reshape(d, -1)  # (d, b·d')
    Y = dx.swapaxes(0, 1).reshape(d, -1)  # (d, b·d')
    gamma = np.linalg.lstsq(R.T, Y.T, rcond=None)[0].T  # Γ R ≈ Y
    r2, rel = _score(Y, gamma @ R)
    size = float(np.linalg.norm(gamma))
    iso = np.trace(gamma) / d * np.eye(d)
    departure = float(np.linalg.norm(gamma - iso)) / size if size > 0 else 0.0
    return {"gamma": gamma, "r2": r2, "rel_residual": rel, "departure_from_scalar": departure}


def name_layer(scalar: dict, poly: dict, matrix: dict) -> str:
    """The rule of the module text: the "fitted layer" rules of the verdict's rule table
    (`fit.rules.RULES`)."""

    facts = {
        "scalar_r2": scalar["r2"],
        "polynomial_r2": poly["r2"],
        "orders": poly["orders"],
        "matrix_r2": matrix["r2"],
        "matrix_residual": matrix["rel_residual"],
        "polynomial_residual": poly["rel_residual"],
        "departure": matrix["departure_from_scalar"],
    }
    return decide("fitted layer", facts).label


def squared_preconditioner(poly: dict) -> dict | None:
    """Where orders 0, 1, 2 are all kept: the GD++ signature α ∝ (1 − γ λ)² = 1 − 2γλ + γ²λ².

    γ = −α_1 / (2 α_0), and `square_gap` = |α_2/α_0 − γ²| / |α_2/α_0| (0 for an exact square)."""
    orders, alpha = poly["orders"], dict(zip(poly["orders"], poly["alpha"], strict=True))
    if not {0, 1, 2} <= set(orders) or alpha[0] == 0 or alpha[2] == 0:
        return None
    gamma = -alpha[1] / (2 * alpha[0])
    ratio = alpha[2] / alpha[0]
    return {"gamma": gamma, "square_gap": abs(ratio - gamma**2) / abs(ratio)}


def step_share(cap: Capture, layer: int) -> float:
    """‖x_{l+1} − x_l‖ / ‖x_L‖ over the probe batch: how much of the final iterate layer l
    moves (1 for a model whose x_L is zero, so every layer counts as stepping)."""
    final = float(np.linalg.norm(cap.x[-1]))
    dx = float(np.linalg.norm(cap.x[layer + 1] - cap.x[layer]))
    return dx / final if final > 0 else 1.0


FIT_OF_LABEL = {  # the fit each name rests on, unless named from the stream
    "GD": "scalar",
    "GD++": "polynomial",
    "polynomial": "polynomial",
    "preconditioned GD": "matrix",
    "unrecognised": "scalar",
}


def label_alpha0(lay: dict) -> float:
    """The order-0 step α_0 of the fit a layer's name rests on: the scalar fit's (GD), the
    polynomial fit's order-0 coefficient (GD++, polynomial), −tr Γ / d (preconditioned GD), −η of
    the stream's GD++ layer (a layer named from the stream)."""
    fit = lay.get("fit", FIT_OF_LABEL[lay["label"]])
    if fit == "stream":
        return -float(lay["gdpp"]["eta"])
    if fit == "scalar":
        return float(lay["scalar"]["alpha_0"])
    if fit == "polynomial":
        poly = lay["polynomial"]
        return float(poly["alpha"][poly["orders"].index(0)]) if 0 in poly["orders"] else np.nan
    gamma = np.asarray(lay["matrix"]["gamma"])
    return -float(np.trace(gamma)) / len(gamma)


def sample_layer(f: dict, step, last: bool, lam_max: float) -> dict:
    """A sample-layout layer's fits `f` with GD++'s numbers from its stream step (a row of
    `fit.eagle.fit_steps`), and named from the stream where it takes no step on x but moves the
    data (γ λ_max at least MOVES, λ_max the probes' largest eigenvalue of G; module text)."""
    stream_r2 = 1.0 - float(step.one_step_residual) ** 2
    f["gdpp"] = {
        "gamma": None if last else float(step.a_step),  # its data transform (none in the last)
        "eta": float(step.c_step),  # its step on the labels, the readout's frame
        "stream_r2": stream_r2,  # one GD++ layer against the layer's whole update
    }
    f["fit"] = FIT_OF_LABEL[f["label"]]
    moves = abs(float(step.a_step)) * lam_max >= MOVES
    if f["step_share"] < NO_STEP and not last and moves:
        f["label"] = decide("no-step layer", {"stream_r2": stream_r2}).label
        f["fit"] = "stream" if f["label"] == "GD++" else f["fit"]
    f["gdpp"]["eta_iterate"] = -label_alpha0(f)
    f["r2_label"] = stream_r2 if f["fit"] == "stream" else float(f[f["fit"]]["r2"])
    return f


def layer_fits(cap: Capture, layer: int) -> dict:
    """The three fits of one layer and its name."""
    G = cap.normal_matrix()
    r = residual_direction(cap, layer)
    dx = cap.x[layer + 1] - cap.x[layer]
    lam_max = float(cap.normal_eigenvalues().max())  # one eigendecomposition for every layer
    scalar = scalar_fit(r, dx)
    full = fit_polynomial(G, r, dx, max_degree=MAX_DEGREE, lam_max=lam_max)
    orders = essential_orders(G, r, dx, full)
    support = orders if orders is not None else list(range(full.degree + 1))
    poly = support_fit(G, r, dx, support, lam_max)
    matrix = matrix_fit(r, dx)
    return {
        "layer": layer,
        "label": name_layer(scalar, poly, matrix),
        "step_share": step_share(cap, layer),
        "scalar": scalar,
        "polynomial": poly,
        "matrix": matrix,
        "squared_preconditioner": squared_preconditioner(poly),
    }


@register("algorithm")
def algorithm_view(ctx: Context) -> ViewResult:
    """GD, GD++ or preconditioned GD, per layer, from the design-form fits."""
    cap = ctx.cap
    fits = [layer_fits(cap, layer) for layer in range(cap.layers)]
    if ctx.geometry.samples:
        from eagle_probe.fit.eagle import fit_steps

        steps = fit_steps(cap, ctx.geometry)  # view eagle's table (kept with the capture)
        lam_max = float(cap.normal_eigenvalues().max())
        fits = [
            sample_layer(f, step, f["layer"] == cap.layers - 1, lam_max)
            for f, step in zip(fits, steps.itertuples(), strict=True)
        ]
    rows, layers = [], []
    for f in fits:
        row = {
            "layer": f["layer"],
            "label": f["label"],
            "alpha_0": f["scalar"]["alpha_0"],
            "r2_scalar": f["scalar"]["r2"],
            "orders": f["polynomial"]["orders"],
            "r2_polynomial": f["polynomial"]["r2"],
            "r2_matrix": f["matrix"]["r2"],
            "gamma_departure": f["matrix"]["departure_from_scalar"],
            "step_share": f["step_share"],
        }
        if "gdpp" in f:
            row |= {"gamma": f["gdpp"]["gamma"], "eta": f["gdpp"]["eta"], "fit": f["fit"]}
        rows.append(row)
        matrix = dict(f["matrix"])
        matrix["gamma"] = matrix["gamma"].tolist()
        layers.append({**f, "matrix": matrix})
    warnings = [
        f"layer {f['layer']}: no gradient-descent step (GD, GD++ or preconditioned GD) explains "
        f"the update of x (best R² "
        f"{max(f['scalar']['r2'], f['polynomial']['r2'], f['matrix']['r2']):.4f} < {R2_MIN})"
        for f in fits
        if f["label"] == "unrecognised" and ctx.geometry.samples
    ]  # warned about where these families are the question: the sample layout's verdict
    return ViewResult(
        "algorithm",
        {
            "thresholds": {
                "r2_min": R2_MIN,
                "matrix_gain": MATRIX_GAIN,
                "scalar_tol": SCALAR_TOL,
                "max_degree": MAX_DEGREE,
            },
            "sign": "Δx = −Σ_p α_p G^p r, r = A Bᵀ − G x (GD from zero with step η: α_0 = −η)",
            "layers": layers,
        },
        {"algorithm": pd.DataFrame(rows)},
        warnings,
        extra={"gamma": [f["matrix"]["gamma"] for f in fits]},
    )
