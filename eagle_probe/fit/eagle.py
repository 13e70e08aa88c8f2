"""The EAGLE form (Algorithm 1 of the paper), fitted to the activations one layer at a time.

Per layer the coefficients a_l, c_l of

    A ← A − a A AᵀA,  B ← B − a B AᵀA,  C ← C − c A Aᵀ C,  D_slot ← D_slot − c B Aᵀ C

(the D slot carries −D_EAGLE; the readout negates it), each by least squares on the network's own
update Z_{l+1} − Z_l, jointly over the two blocks that share it and per block as a check.
η_l = a_l ‖A_l‖², γ_l = c_l ‖A_l‖² with ‖A_l‖₂ the batch-max spectral norm of the A block entering
layer l (internal units), the paper's normalisation of the steps. The one-step residual is
relative to the layer's own update.

Sample layout: the same four directions tied by row (`Geometry.pairs`): a from the feature rows
A, C (the data preconditioning of GD++), c from the label rows B, D (the gradient step), with the
per-block checks `a_from_A`, `a_from_C`, `c_from_B`, `c_from_D`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eagle_probe.capture import Capture
from eagle_probe.fit.base import Context, ViewResult, register
from eagle_probe.fit.geometry import Geometry


def _coef(delta: list[np.ndarray], feats: list[np.ndarray]) -> float:
    """The step s minimising Σ ‖Δ + s F‖² (EAGLE subtracts s F)."""
    num = sum(float(np.sum(dl * f)) for dl, f in zip(delta, feats, strict=True))
    den = sum(float(np.sum(f * f)) for f in feats)
    return -num / den if den > 0 else 0.0


def fit_steps(cap: Capture, geometry: Geometry) -> pd.DataFrame:
    """Per layer: a, c (joint and per block), η, γ and the one-step relative residual."""
    rows = []
    for layer in range(cap.layers):
        Z, Z1 = cap.Z[layer], cap.Z[layer + 1]
        delta = dict(zip("ABCD", geometry.blocks(Z1 - Z), strict=True))
        feats = dict(zip("ABCD", geometry.eagle_features(Z, layer), strict=True))
        (p, q), (r, s) = geometry.pairs  # blocks sharing a, blocks sharing c
        a = _coef([delta[p], delta[q]], [feats[p], feats[q]])
        c = _coef([delta[r], delta[s]], [feats[r], feats[s]])
        # Z1 − EAGLE(Z) from the features already at hand (geometry.eagle_step, unrecomputed)
        step = {p: a, q: a, r: c, s: c}
        with np.errstate(over="ignore", invalid="ignore"):
            gap2 = sum(float(np.sum((delta[x] + step[x] * feats[x]) ** 2)) for x in "ABCD")
        A = geometry.blocks(Z)[0]
        # a stream that overflowed (an untrained control at large sizes) has no spectral norm
        norm2 = (
            float(np.linalg.norm(A, ord=2, axis=(-2, -1)).max() ** 2)
            if np.isfinite(A).all()
            else float("inf")
        )
        update = float(np.linalg.norm(Z1 - Z))
        rows.append(
            {
                "layer": layer,
                "a_step": a,
                "c_step": c,
                f"a_from_{p}": _coef([delta[p]], [feats[p]]),
                f"a_from_{q}": _coef([delta[q]], [feats[q]]),
                f"c_from_{r}": _coef([delta[r]], [feats[r]]),
                f"c_from_{s}": _coef([delta[s]], [feats[s]]),
                "norm_a_max": math.sqrt(norm2),
                "eta": a * norm2,
                "gamma": c * norm2,
                "one_step_residual": math.sqrt(gap2) / update if update else 0.0,
            }
        )
    return pd.DataFrame(rows)


def choose_reading(cap: Capture, geometry: Geometry) -> Geometry:
    """Distributed models: heads see local blocks, but W_VP may write every block, and
    Σ_μ A^μ A^μᵀ A = A Aᵀ A is the centralized update. Keep the reading of the A/B update whose
    one-step residual is smaller; other regimes are returned unchanged."""
    if geometry.regime != "distributed" or cap.layers == 0:
        return geometry
    central = geometry.as_centralized()
    local_gap = fit_steps(cap, geometry).one_step_residual.mean()
    central_gap = fit_steps(cap, central).one_step_residual.mean()
    return central if central_gap < local_gap else geometry


@register("eagle")
def eagle_view(ctx: Context) -> ViewResult:
    """The EAGLE steps read from the activations."""
    table = fit_steps(ctx.cap, ctx.geometry)
    warnings = [
        f"layer {int(r.layer)}: negative {name} step {step:.3g} (EAGLE's steps are positive)"
        for r in table.itertuples()
        for name, step in (("A", r.a_step), ("C", r.c_step))
        if step < 0 and abs(step) > 1e-3 and not ctx.geometry.samples
    ]
    layers = table.to_dict(orient="records")
    family = (
        "sample layout, steps tied by row: A −= a A AᵀA, C −= a A AᵀC, B −= c B AᵀA, "
        "D_slot −= c B AᵀC (one GD++ layer: c the gradient step, a the data preconditioning)"
        if ctx.geometry.samples
        else "EAGLE: A −= a A AᵀA, B −= a B AᵀA, C −= c A AᵀC, D_slot −= c B AᵀC"
    )
    return ViewResult(
        "eagle",
        {"reading": ctx.geometry.reading, "family": family, "units": "internal", "layers": layers},
        {"eagle": table},
        warnings,
    )
