"""Which weight blocks carry the function: zero one block of W_QK or W_VP in one layer and head
and measure the held-out MSE.

Blocks are named by the features they connect: A for the n sample columns (A and B tokens' left
part), C for the n' query columns. W_QK's block X×Y pairs the query token's X features with the
key token's Y features; W_VP's block X×Y reads the value's X features and writes the Y features.
Only the layers from the ablated one onward are recomputed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe.fit.base import Context, ViewResult, register

BLOCKS = ("AA", "AC", "CA", "CC")


def _slices(n: int, block: str) -> tuple[slice, slice]:
    part = {"A": slice(0, n), "C": slice(n, None)}
    return part[block[0]], part[block[1]]


@register("attribution")
def attribution_view(ctx: Context) -> ViewResult:
    geo, held = ctx.geometry, ctx.held_out
    s = geo.prompt_scale(held.z0)[:, None, None]
    stream = geo.stream(held.z0, ctx.qk, ctx.vp)  # (L + 1, b, T, E)
    base = held.mse(geo.readout_of(stream[-1], held.z0))
    rows = []
    L, H = ctx.qk.shape[:2]
    for layer in range(L):
        for head in range(H):
            for product in ("W_QK", "W_VP"):
                for block in BLOCKS:
                    src = ctx.qk if product == "W_QK" else ctx.vp
                    rs, cs = _slices(geo.n, block)
                    if not np.any(src[layer, head][rs, cs]):
                        continue
                    qk, vp = ctx.qk[layer].copy(), ctx.vp[layer].copy()
                    (qk if product == "W_QK" else vp)[head][rs, cs] = 0.0
                    with np.errstate(over="ignore", invalid="ignore"):
                        Z = geo.layer(stream[layer], qk, vp)
                        for later in range(layer + 1, L):
                            Z = geo.layer(Z, ctx.qk[later], ctx.vp[later])
                    mse = held.mse(geo.readout * Z[:, geo.d :, geo.n :] * s)
                    rows.append(
                        {
                            "layer": layer,
                            "head": head,
                            "product": product,
                            "block": block,
                            "mse": mse,
                            "ratio": mse / base if base > 0 else float("inf"),
                        }
                    )
    table = pd.DataFrame(rows, columns=["layer", "head", "product", "block", "mse", "ratio"])
    return ViewResult(
        "attribution",
        {
            "ablation": "zero the block in one layer and head; held-out MSE",
            "network_mse": base,
            "blocks": table.to_dict("records"),
        },
        {"attribution": table},
    )
