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

from eagle_probe import drawing as draw
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register

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


# --- what the view shows: its figure and the figure's caption -------------------------------------
ATTRIBUTION_CAP = 1e4  # MSE ratios above this are drawn cut at it, their value printed


def _bars(ax, part, pos, low: float, top: float, flat: set, blocks: tuple) -> None:
    """Bars of MSE ratios (rows of the attribution table) at x = pos[(layer, head)], one colour
    per block (`blocks`: AA, AC, CA, CC, or XX, XY, YX, YY in the sample layout), starting at 1
    (no change): up where zeroing the block hurts, down where it helps."""
    width = 0.8 / len(blocks)
    for i, block in enumerate(blocks):
        b = part[part.block == block]
        if b.empty:
            continue
        raw = b.ratio.to_numpy(dtype=float)
        r = np.clip(np.nan_to_num(raw, nan=np.inf), low, ATTRIBUTION_CAP)
        x = np.array([pos[(lay, h)] for lay, h in zip(b.layer, b["head"], strict=True)])
        x = x + (i - (len(blocks) - 1) / 2) * width
        label = f"block {block}" + (" (no effect: bars at 1)" if block in flat else "")
        ax.bar(x, r - 1.0, bottom=1.0, width=width, color=f"C{i}", label=label)
        for xi, v in zip(x, raw, strict=True):
            if not np.isfinite(v) or v > ATTRIBUTION_CAP:
                draw.note(
                    ax,
                    draw.readable(v),
                    (xi, ATTRIBUTION_CAP),
                    (0, 2),
                    6,
                    ha="center",
                    va="bottom",
                    rotation=90,
                )
    ax.set_yscale("log")
    ax.set_ylim(low, top)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.tick_params(labelsize=7)


def figures(ex: Extraction) -> Figures:
    """Held-out MSE with one weight block zeroed, over the network's MSE, per layer and head: one
    panel per product with the layers along x (one head), or one panel per layer and product with
    the heads along x (several heads)."""
    t = ex.views["attribution"].tables["attribution"]
    if t.empty:
        return {}
    ratio = t.ratio.to_numpy(dtype=float)
    finite = ratio[np.isfinite(ratio) & (ratio > 0)]
    low = min(float(finite.min()) / 1.5, 0.5) if finite.size else 0.5
    cut = finite.size < ratio.size or (finite.size and finite.max() > ATTRIBUTION_CAP)
    top = ATTRIBUTION_CAP * 30 if cut else max(float(finite.max()) * 2, 2.0)
    flat = {  # blocks whose every ablation leaves the MSE within 1%
        b for b, part in t.groupby("block") if np.all(np.abs(part.ratio.to_numpy() - 1) < 0.01)
    }
    products = ("W_QK", "W_VP")
    blocks = tuple(dict.fromkeys(t.block))  # the layout's four, in the view's order
    ylabel = "MSE ablated / MSE network\n(ratio)"
    if ex.geometry.heads == 1:
        layers = sorted(t.layer.unique())
        pos = {(lay, 0): i for i, lay in enumerate(layers)}
        fig = draw.figure(max(7.0, 0.9 * len(layers) + 3), 6.0)
        axes = fig.subplots(2, 1, sharex=True)
        for ax, product in zip(axes, products, strict=True):
            _bars(ax, t[t["product"] == product], pos, low, top, flat, blocks)
            ax.set_ylabel(f"{product}: {ylabel}", fontsize=8)
        draw.layer_axis(axes[-1], layers)
        grid = list(axes)
    else:
        layers = sorted(t.layer.unique())
        heads = sorted(t["head"].unique())
        pos = {(lay, h): i for lay in layers for i, h in enumerate(heads)}
        fig = draw.figure(max(8.0, 2 * (0.42 * len(heads) + 1.2)), 2.3 * len(layers) + 1.0)
        axes = fig.subplots(len(layers), 2, squeeze=False, sharex=True, sharey=True)
        for r, layer in enumerate(layers):
            for c, product in enumerate(products):
                ax = axes[r][c]
                sel = t[(t.layer == layer) & (t["product"] == product)]
                _bars(ax, sel, pos, low, top, flat, blocks)
                ax.set_title(f"{product}, layer {layer}", fontsize=8)
                if c == 0:
                    ax.set_ylabel(ylabel, fontsize=7)
        for ax in axes[-1]:
            ax.set_xticks(range(len(heads)), [str(h) for h in heads])
            ax.set_xlabel("head")
        grid = list(axes.reshape(-1))
    handles, labels = draw.handles(*grid)
    order = sorted(range(len(labels)), key=lambda k: labels[k])
    fig.legend(
        [handles[k] for k in order],
        [labels[k] for k in order],
        loc="outside right center",
        fontsize=8,
        title="block\n(rows × columns)",
    )
    title = "Held-out MSE with one weight block zeroed"
    fig.suptitle(title + (f" (bars cut at {ATTRIBUTION_CAP:g})" if cut else ""), fontsize=10)
    return {"attribution": fig}


def caption(ex: Extraction) -> str:
    if ex.geometry.samples:
        return (
            "Tall bars mark the blocks the function depends on; GD and GD++ use W_QK's XX block "
            "and W_VP's YY block (GD++ also W_VP's XX block in every layer but the last, whose "
            "data never reach the prediction), so a tall bar in XY or YX is computation beyond "
            "them."
        )
    return (
        "Tall bars mark the blocks the function depends on; EAGLE uses only the AA block of W_QK "
        "and the AA and CC blocks of W_VP, so a tall bar in another block is computation beyond "
        "EAGLE."
    )


@register("attribution", figures=figures, captions={"attribution": caption})
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
