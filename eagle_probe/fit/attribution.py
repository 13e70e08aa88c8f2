"""Which weight blocks carry the function: zero one block of W_QK or W_VP and measure the
held-out MSE.

Blocks are named by the features they connect: A for the n sample columns, C for the n' query
columns. W_QK's block X×Y pairs the query token's X features with the key token's Y features;
W_VP's block X×Y reads the value's X features and writes the Y features. Two ablations:

- per layer and head (`blocks`): one block of one head in one layer. A layer's output is the sum
  of its heads' contributions and each contribution is linear in each product, so the ablated
  layer is the full layer minus that block's part; only the later layers are recomputed.
- everywhere (`everywhere`): the same block zeroed in every layer and head at once — the decisive
  test for a block the algorithm family does not have (e.g. W_QK's A×C block).

Scored on the first `PROMPTS` held-out prompts, fewer where the ablations' layer passes (about
layers² × heads × blocks / 2 per prompt) would exceed the views' flops budget (`Context.scoring`).
Scored on the first `PROMPTS` held-out prompts (the cost grows with layers² × heads² otherwise).

Sample layout: the coordinates are the d features X and the d' labels Y of the rows [x, y]
(`Geometry.coords`), so the blocks are XX, XY, YX, YY: W_QK's X×X block is the score x_qᵀ Γ x_j
of (preconditioned) GD, W_VP's Y×Y block writes the labels' values into the labels (the step).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe.fit.base import Context, ViewResult, register

BLOCKS = ("AA", "AC", "CA", "CC")
PROMPTS = 512


def _slices(n: int, block: str) -> tuple[slice, slice]:
    part = {"A": slice(0, n), "C": slice(n, None), "X": slice(0, n), "Y": slice(n, None)}
    return part[block[0]], part[block[1]]


def _only(W: np.ndarray, n: int, block: str) -> np.ndarray:
    """W (E × E) with everything but `block` zeroed."""
    out = np.zeros_like(W)
    rs, cs = _slices(n, block)
    out[rs, cs] = W[rs, cs]
    return out


def block_names(geo) -> tuple[str, ...]:
    """The four blocks of a product in this layout: AA, AC, CA, CC or XX, XY, YX, YY."""
    a, c = geo.coords
    return (a + a, a + c, c + a, c + c)


def layer_passes(ctx: Context) -> int:
    """Layer passes per prompt: the stream, each nonzero block's ablation with the layers after
    it, and each block zeroed everywhere."""
    L, H = ctx.qk.shape[:2]
    split = ctx.geometry.split[0]
    blocks = block_names(ctx.geometry)
    passes = L
    for layer in range(L):
        for W in (ctx.qk[layer], ctx.vp[layer]):
            for block in blocks:
                rs, cs = _slices(split, block)
                passes += int(np.count_nonzero(np.any(W[:, rs, cs] != 0, axis=(-1, -2)))) * (
                    L - layer
                )
    return passes + len(blocks) * 2 * L


@register("attribution")
def attribution_view(ctx: Context) -> ViewResult:
    geo = ctx.geometry
    held, _ = ctx.scoring(layer_passes(ctx), limit=PROMPTS)
    stream = geo.stream(held.z0, ctx.qk, ctx.vp)  # (L + 1, b, T, E)
    base = held.mse(geo.readout_of(stream[-1], held.z0))
    L, H = ctx.qk.shape[:2]
    split, blocks = geo.split[0], block_names(geo)

    def finish(Z: np.ndarray, layer: int) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            for later in range(layer + 1, L):
                Z = geo.layer(Z, ctx.qk[later], ctx.vp[later])
            return held.mse(geo.readout_of(Z, held.z0))

    rows = []
    for layer in range(L):
        Z = stream[layer]
        done: dict[tuple[int, str, str], float] = {}  # (head, product, block) -> its MSE
        for head in range(H):
            qk, vp = ctx.qk[layer, head], ctx.vp[layer, head]
            # a head with the same products as an earlier one of the layer (a planted layer's
            # heads) has the same ablations: the same numbers, computed once
            twin = next(
                (
                    k
                    for k in range(head)
                    if np.array_equal(ctx.qk[layer, k], qk) and np.array_equal(ctx.vp[layer, k], vp)
                ),
                None,
            )
            for product, W in (("W_QK", qk), ("W_VP", vp)):
                for block in blocks:
                    part = _only(W, split, block)
                    if not np.any(part):
                        continue
                    if twin is not None:
                        mse = done[(twin, product, block)]
                    else:
                        pair = (part, vp) if product == "W_QK" else (qk, part)
                        with np.errstate(over="ignore", invalid="ignore"):
                            # the block's own contribution to the layer's update, removed
                            delta = geo.layer(Z, pair[0][None], pair[1][None]) - Z
                        mse = finish(stream[layer + 1] - delta, layer)
                    done[(head, product, block)] = mse
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
    everywhere = []
    for product in ("W_QK", "W_VP"):
        for block in blocks:
            qk, vp = ctx.qk.copy(), ctx.vp.copy()
            target = qk if product == "W_QK" else vp
            rs, cs = _slices(split, block)
            if not np.any(target[..., rs, cs]):
                continue
            target[..., rs, cs] = 0.0
            mse = held.mse(geo.predict(held.z0, qk, vp))
            everywhere.append(
                {
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
            "ablation": "zero the block; held-out MSE on the first "
            f"{held.z0.shape[0]} held-out prompts",
            "prompts": int(held.z0.shape[0]),
            "network_mse": base,
            "blocks": table.to_dict("records"),
            "everywhere": everywhere,
        },
        {"attribution": table, "everywhere": pd.DataFrame(everywhere)},
    )
