"""Weight structure: what W_QK and W_VP look like after sparsification, per layer and head, and
what the sparsified ("simplified") model does in function."""

from __future__ import annotations

import numpy as np

from eagle_probe.fit._legacy import describe, simplified_products, sparsify, weight_view
from eagle_probe.fit.base import Context, ViewResult, register

__all__ = ["describe", "simplified_products", "sparsify", "weight_view"]


def block_norms(W: np.ndarray, n: int) -> dict[str, float]:
    """Frobenius norms of the four blocks of an E × E product and the off-diagonal/diagonal ratio
    of its A-block (0 for a scalar multiple of I)."""
    nn = W[:n, :n]
    off = nn - np.diag(np.diag(nn))
    diag = float(np.linalg.norm(np.diag(nn)))
    return {
        "AA": float(np.linalg.norm(nn)),
        "AC": float(np.linalg.norm(W[:n, n:])),
        "CA": float(np.linalg.norm(W[n:, :n])),
        "CC": float(np.linalg.norm(W[n:, n:])),
        "offdiag_ratio": float(np.linalg.norm(off)) / diag if diag else float("inf"),
    }


@register("weights")
def weights_view(ctx: Context) -> ViewResult:
    """Structure text, block norms and the simplified model's held-out MSE."""
    n = ctx.geometry.n
    table = weight_view(ctx.qk, ctx.vp, n)
    sqk, svp = simplified_products(ctx.qk, ctx.vp, n)
    simplified = ctx.held_out.mse(ctx.geometry.predict(ctx.held_out.z0, sqk, svp))
    heads = []
    for row in table.itertuples():
        heads.append(
            {
                "layer": int(row.layer),
                "head": int(row.head),
                "W_QK": row.W_QK,
                "W_VP": row.W_VP,
                "qk_blocks": block_norms(ctx.qk[row.layer, row.head], n),
                "vp_blocks": block_norms(ctx.vp[row.layer, row.head], n),
            }
        )
    warnings = []
    if not np.isfinite(simplified) or simplified > 10 * max(ctx.network_mse, ctx.zero_mse):
        warnings.append(
            f"the sparsified ('simplified') weights blow up: MSE {simplified:.3g} against the "
            f"network's {ctx.network_mse:.3g}; the structure text is not a model of this network"
        )
    return ViewResult(
        "weights",
        {
            "sparsify": "entries below 1.5 ‖W‖₁ / #entries set to 0",
            "simplified_mse": simplified,
            "heads": heads,
        },
        {"weights": table},
        warnings,
        extra={"qk": ctx.qk, "vp": ctx.vp},
    )
