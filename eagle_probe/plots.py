"""Figures for the notebooks and reports. Each function returns a matplotlib Figure (built
without pyplot, so any backend, Agg included, works); callers decide where to save it.

The figures of an extraction are registered per view in `VIEW_FIGURES`: the report draws, for
every view an extraction ran, the figures of that view.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe.model import LinearTransformer

# what `eagle_probe.extract.extract` returns (an `Extraction`): the figures read its views and
# geometry and never import the extraction
Extraction = Any


def load_matplotlib() -> ModuleType:
    """matplotlib, imported once without its notices on stderr. An MPLCONFIGDIR it cannot use
    (a file, a read-only or missing directory) makes it fall back to a temporary directory and
    log 2-4 lines about it, and about the font cache it then rebuilds: those are held back while
    it loads, and one warning of ours says what happened and what to do (the command line prints
    it as one line)."""
    import logging
    import os
    import sys
    import warnings

    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"]
    chosen = os.environ.get("MPLCONFIGDIR")
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 - reads or builds the font cache now
    finally:
        logger.setLevel(level)
    if chosen and os.path.realpath(matplotlib.get_configdir()) != os.path.realpath(chosen):
        warnings.warn(
            f"MPLCONFIGDIR={chosen} is not a writable directory, so matplotlib used a temporary "
            "one (its font cache rebuilt each run); point MPLCONFIGDIR at a writable directory, "
            "or unset it",
            UserWarning,
            stacklevel=2,
        )
    return matplotlib


load_matplotlib()
from matplotlib.figure import Figure  # noqa: E402 - after load_matplotlib
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import NullFormatter, NullLocator  # noqa: E402


def _panel_row(count: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure of `count` panels side by side, `width` inches each and `height` high."""
    fig = Figure(figsize=(width * count, height))
    return fig, fig.subplots(1, count, squeeze=False)[0]


def _diverging(ax, W: np.ndarray, **kwargs):
    """`W` as an image in diverging colours centred at 0 (blue below, red above); returns it."""
    lim = max(float(np.nanmax(np.abs(W))) if W.size else 0.0, 1e-12)
    return ax.imshow(W, cmap="RdBu_r", vmin=-lim, vmax=lim, **kwargs)


def _fraction_map(ax, values: np.ndarray, cmap: str, texts) -> Any:
    """`values` in [0, 1] as an image in `cmap`, each ((row, column), text) of `texts` written
    in its cell (white on the dark cells); returns the image."""
    im = ax.imshow(values, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for (i, j), text in texts:
        colour = "w" if values[i, j] > 0.6 else "k"
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    return im


def _layer_axis(ax, layers, axis: str = "x") -> None:
    """Tick the layers `layers` (0-based numbers) at positions 0, 1, … along `axis`."""
    ticks, label = (ax.set_xticks, ax.set_xlabel) if axis == "x" else (ax.set_yticks, ax.set_ylabel)
    ticks(range(len(layers)), [str(layer) for layer in layers])
    label("layer (0-based)")


def _layer_colour(layer: int) -> str:
    """The colour of layer (or head) `layer` in every per-layer line plot."""
    return f"C{layer % 10}"


def _handles(*axes) -> tuple[list, list[str]]:
    """The legend entries of `axes`, each label once, in order of appearance."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    return handles, labels


def weight_heatmaps(model: LinearTransformer, layer: int) -> Figure:
    """W_QK (top row) and W_VP (bottom row) of every head of one layer."""
    qk = model.W_QK(layer).to(torch.float64).numpy()
    vp = model.W_VP(layer).to(torch.float64).numpy()
    heads = qk.shape[0]
    fig = Figure(figsize=(1.9 * heads + 1, 4.2))
    axes = fig.subplots(2, heads, squeeze=False)
    for h in range(heads):
        for row, (W, name) in enumerate(((qk[h], "W_QK"), (vp[h], "W_VP"))):
            ax = axes[row][h]
            _diverging(ax, W)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{name} h{h}", fontsize=8)
    fig.suptitle(
        f"layer {layer}: products per head (n = {model.cfg.n}, last "
        f"{model.cfg.n_prime} rows/columns: the C/D column)",
        fontsize=9,
    )
    return fig


def head_shares(shares: pd.DataFrame) -> Figure:
    """Per layer, each head's share of the update, one bar group per problem type."""
    layers = sorted(shares.layer.unique())
    problems = list(dict.fromkeys(shares.problem))
    fig, axes = _panel_row(len(layers), 3.3, 3.2)
    width = 0.8 / len(problems)
    for ax, layer in zip(axes, layers, strict=True):
        part = shares[shares.layer == layer]
        for i, problem in enumerate(problems):
            p = part[part.problem == problem]
            ax.bar(p["head"] + i * width, p.share, width=width, label=problem)
        ax.set(title=f"layer {layer}", xlabel="head", ylabel="share of update")
    axes[0].legend(fontsize=7)
    return fig


def pruning_curve(pruning: pd.DataFrame, zero_mse: float | None = None) -> Figure:
    fig = Figure(figsize=(5, 3.4))
    ax = fig.subplots()
    ax.semilogy(pruning.heads_left, pruning.mse, "o-", label="network")
    if zero_mse is not None:
        ax.axhline(zero_mse, color="grey", ls="--", label="zero predictor")
    ax.invert_xaxis()
    ax.set(xlabel="heads left", ylabel="test MSE")
    ax.legend()
    return fig


def error_curves(history: pd.DataFrame, x: str = "iteration") -> Figure:
    """Error against iterations (or another column) per solver, one panel per (n, κ)."""
    groups = list(history.groupby(["n", "kappa"]))
    fig, axes = _panel_row(len(groups), 4.4, 3.4)
    for ax, ((n, kappa), g) in zip(axes, groups, strict=True):
        for solver, s in g.groupby("solver"):
            ax.loglog(s[x], s.error.clip(lower=1e-17), label=solver)
        ax.set(title=f"n = {n}, κ = {kappa:.0e}", xlabel=x, ylabel="relative error")
    axes[0].legend(fontsize=7)
    return fig


def fidelity_bars(table: pd.DataFrame) -> Figure:
    """Our Table 1 fidelity per layer beside the paper's, one panel per regime."""
    models = list(dict.fromkeys(table.model))
    fig, axes = _panel_row(len(models), 3.6, 3.2)
    for ax, name in zip(axes, models, strict=True):
        t = table[table.model == name]
        ax.bar(t.layer - 0.2, t.fidelity, width=0.4, label="eagle-probe")
        ax.bar(t.layer + 0.2, t.paper, width=0.4, label="paper")
        ax.set_yscale("log")
        ax.set(title=name, xlabel="layer", ylabel="‖Z_net − Z_EAGLE‖²/size")
    axes[0].legend(fontsize=7)
    return fig


def sketch_spectra(spectrum: pd.DataFrame) -> Figure:
    layers = sorted(spectrum.layer.unique())
    fig, axes = _panel_row(len(layers), 3.2, 3)
    for ax, layer in zip(axes, layers, strict=True):
        s = spectrum[spectrum.layer == layer]
        ax.plot(s["index"], s.network, "o-", ms=3, label="network W_QK")
        ax.plot(s["index"], s.random_sketch, "s-", ms=3, label="random S Sᵀ")
        ax.set(title=f"layer {layer}", xlabel="eigenvalue index", ylabel="|λ| / max")
    axes[0].legend(fontsize=7)
    return fig


# --- figures of an extraction, one function per view ---------------------------------------------
#
# Every function below takes an `Extraction` and returns {figure name: Figure}; `VIEW_FIGURES` maps
# a view's name to its function, and the report draws the figures of the views the extraction ran.

_DPI = 110
_TEXT_BOX = {"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8}
_BLOCK_COLOURS = {"A": "C0", "B": "C1", "C": "C2", "D": "C3", "total": "0.25"}


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _positive(values, floor: float) -> np.ndarray:
    """Values for a log axis: non-finite stays NaN (not drawn), zero and below go to `floor`."""
    v = np.asarray(values, dtype=float)
    return np.where(np.isfinite(v), np.maximum(v, floor), np.nan)


def _floor(*arrays) -> float:
    """A floor one decade below the smallest positive finite value (1e-12 if there is none)."""
    v = np.concatenate([np.asarray(a, dtype=float).reshape(-1) for a in arrays])
    v = v[np.isfinite(v) & (v > 0)]
    return float(v.min()) / 10 if v.size else 1e-12


def _note(ax, text: str, xy: tuple, offset: tuple, fontsize: float = 7, **kwargs) -> None:
    """`text` at `xy` (data coordinates) moved by `offset` points."""
    ax.annotate(text, xy, xytext=offset, textcoords="offset points", fontsize=fontsize, **kwargs)


def family_word(ex: Extraction) -> str:
    """The algorithm family a figure of `ex` names: GD++ in the sample layout (von Oswald et al.'s
    family, of which GD is the γ = 0 case), EAGLE in the feature layout."""
    return "GD++" if ex.geometry.samples else "EAGLE"


def _tex(name: str) -> str:
    """A family's name inside mathtext: GD++ as GD{+}{+} (a bare + is an operator there)."""
    return name.replace("+", "{+}")


def readable(x: float) -> str:
    """A number for a figure: 3 significant digits, a power of ten written out (3×10³³, not
    3e+33) where they need one."""
    if not np.isfinite(x):
        return "not finite"
    text = f"{x:.3g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa}×10{power}"


def network_products(ex: Extraction) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(W_QK, W_VP, source) of an extraction, each (L, h, E, E): the network's own products when
    the `weights` view carries them, else the products projected onto the EAGLE family."""
    w = ex.views.get("weights")
    if w is not None and "qk" in w.extra and "vp" in w.extra:
        return np.asarray(w.extra["qk"]), np.asarray(w.extra["vp"]), "network"
    p = ex.views.get("projection")
    if p is not None and "qk" in p.extra and "vp" in p.extra:
        return np.asarray(p.extra["qk"]), np.asarray(p.extra["vp"]), "projected"
    return None


def _block_axis(
    ax, n: int, width: int, xlabel: str, ylabel: str, coords: tuple[str, str] = ("A", "C")
) -> None:
    """Tick the A (first n) and C (last n') feature columns and draw the A|C boundary (sample
    layout: the X features and Y labels of the rows)."""
    centres = [(n - 1) / 2, n + (width - n - 1) / 2]
    a, c = coords
    ax.set_xticks(centres, [f"{a} 0–{n - 1}", c], fontsize=7)
    ax.set_yticks(centres, [f"{a} 0–{n - 1}", c], fontsize=7, rotation=90, va="center")
    for pos in (ax.axvline, ax.axhline):
        pos(n - 0.5, color="k", lw=0.8, ls="--")
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=7)


MAX_PANELS = 8  # (layer, head) pairs per heatmap figure
MAX_COLUMNS = 4  # pairs per line of a heatmap figure; each line is a W_QK row over a W_VP row


def extraction_heatmaps(ex: Extraction) -> dict[str, Figure]:
    """W_QK over W_VP for every layer and head, each panel with its colour bar, diverging colours
    centred at 0 and the A|C feature boundary dashed. Whole layers per figure, at most MAX_PANELS
    (layer, head) pairs, in lines of MAX_COLUMNS: one figure `weights` when everything fits, else
    `weights_layer{l}` (or `weights_layers{a}-{b}`)."""
    got = network_products(ex)
    if got is None:
        return {}
    qk, vp, source = got
    n, coords = ex.geometry.split[0], ex.geometry.coords
    width = qk.shape[-1]
    L, H = qk.shape[:2]
    per = max(1, MAX_PANELS // H)  # layers per figure
    chunks = [list(range(s, min(s + per, L))) for s in range(0, L, per)]
    what = "" if source == "network" else f", projected onto the {family_word(ex)} family"
    figs = {}
    for layers in chunks:
        pairs = [(layer, h) for layer in layers for h in range(H)]
        cols = min(MAX_COLUMNS, len(pairs))
        lines = -(-len(pairs) // cols)
        w, h = max(2.7 * cols + 0.4, 6.0), 2.75 * 2 * lines + 0.3
        # a fixed grid, not constrained layout: with dozens of colour bars that costs seconds
        fig = Figure(figsize=(w, h), dpi=_DPI)
        margins = {"left": 0.6 / w, "right": 1 - 0.55 / w, "bottom": 0.45 / h, "top": 1 - 0.6 / h}
        axes = fig.subplots(
            2 * lines, cols, squeeze=False, gridspec_kw={**margins, "wspace": 0.55, "hspace": 0.45}
        )
        for k, (layer, h) in enumerate(pairs):
            line, col = divmod(k, cols)
            for row, (W, name, xl, yl) in enumerate(
                (
                    (qk[layer, h], "W_QK", "key feature", "query feature"),
                    (vp[layer, h], "W_VP", "written feature", "value feature"),
                )
            ):
                ax = axes[2 * line + row][col]
                im = _diverging(ax, W, interpolation="nearest")
                _block_axis(ax, n, width, xl, yl, coords)
                ax.set_title(f"{name}, layer {layer}" + (f" head {h}" if H > 1 else ""), fontsize=8)
                cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
                cb.ax.tick_params(labelsize=6)
                if col == cols - 1:
                    cb.set_label("entry (dimensionless)", fontsize=7)
        for k in range(len(pairs), lines * cols):
            line, col = divmod(k, cols)
            axes[2 * line][col].set_visible(False)
            axes[2 * line + 1][col].set_visible(False)
        if len(chunks) == 1:
            key = "weights"
        elif len(layers) == 1:
            key = f"weights_layer{layers[0]}"
        else:
            key = f"weights_layers{layers[0]}-{layers[-1]}"
        fig.suptitle(
            f"Products per layer{' and head' if H > 1 else ''}{what}: "
            "W_QK = W_Q W_Kᵀ above W_VP = W_V W_Pᵀ",
            fontsize=10,
        )
        figs[key] = fig
    return figs


def extraction_filters(ex: Extraction) -> dict[str, Figure]:
    """Per layer the fitted design-form filter f_l(λ) against EAGLE's implied c_l m_l(λ)² on
    [0, λ_max] of the probe spectrum, with the probe eigenvalues as a rug."""
    extra = ex.views["polynomial"].extra
    grid, curves = np.asarray(extra["grid"]), extra["curves"]
    spectrum = np.asarray(extra.get("spectrum", []))
    L = len(curves)
    if L == 0:
        return {}
    cols = min(L, 4)
    rows = -(-L // cols)
    fig = _figure(3.3 * cols, 2.9 * rows + 0.5)
    axes = fig.subplots(rows, cols, squeeze=False).reshape(-1)
    layers = ex.views["polynomial"].json.get("layers", [])
    # the filter the family's steps imply: EAGLE's c_l m_l(λ)², GD++'s η_l m_l(λ)² (the same
    # recursion, `fit.geometry` module text)
    family = "GD++: η_l m_l(λ)²" if ex.geometry.samples else "EAGLE: c_l m_l(λ)²"
    for layer, (ax, c) in enumerate(zip(axes, curves, strict=False)):
        ax.plot(grid, c["fitted"], color="C0", lw=1.8, label="fitted f_l(λ) (design form)")
        if c.get("eagle") is not None:
            ax.plot(grid, c["eagle"], color="C3", lw=1.4, ls="--", label=family)
        if spectrum.size:
            ax.plot(
                spectrum,
                np.zeros_like(spectrum),
                "|",
                color="k",
                alpha=0.15,
                ms=8,
                transform=ax.get_xaxis_transform(),
                label="probe eigenvalues",
            )
        r2 = layers[layer].get("r2") if layer < len(layers) else None
        title = f"layer {layer}" + (f" (R² = {r2:.3f})" if r2 is not None else "")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("λ, eigenvalue of A Aᵀ (internal units)", fontsize=8)
        ax.set_ylabel("f_l(λ) (internal units)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[:L]:
        lo, hi = ax.get_ylim()
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # both filters on a scale that includes 0
        ax.set_ylim(lo - 0.04 * (hi - lo), hi + 0.08 * (hi - lo))
    for ax in axes[L:]:
        ax.set_visible(False)
    handles, labels = _handles(axes[0])
    if spectrum.size:  # the rug's own marks are faint; the legend shows a solid one
        handles[-1] = Line2D([], [], marker="|", ls="", color="k", ms=8)
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fig.suptitle(f"Spectral filter of each layer: fitted against {family_word(ex)}'s", fontsize=10)
    return {"filters": fig}


def extraction_fidelity(ex: Extraction) -> dict[str, Figure]:
    """The Table-1 metric per layer and block, one-step and end-to-end, against the paper's."""
    layers = ex.views["fidelity"].json["layers"]
    if not layers:
        return {}
    blocks = ("A", "B", "C", "D", "total")
    L = len(layers)
    fam = family_word(ex)
    readings = (
        ("one_step", rf"one step: {fam}($Z_l$) against $Z_{{l+1}}$"),
        ("end_to_end", rf"end to end: {fam} run from $Z_0$ against $Z_{{l+1}}$"),
    )
    values = {
        r: np.array(
            [[lay[r]["blocks"][b] for b in blocks[:-1]] + [lay[r]["total"]] for lay in layers]
        )
        for r, _ in readings
    }
    paper = np.array([lay.get("paper", np.nan) for lay in layers], dtype=float)
    floor = _floor(*values.values(), paper)
    fig = _figure(max(7.5, 2.2 * L + 2.5), 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    width = 0.8 / len(blocks)
    x = np.arange(L)
    for ax, (reading, title) in zip(axes, readings, strict=True):
        v = _positive(values[reading], floor)
        for i, b in enumerate(blocks):
            ax.bar(
                x + (i - (len(blocks) - 1) / 2) * width,
                v[:, i],
                width=width,
                color=_BLOCK_COLOURS[b],
                label=f"block {b}" if b != "total" else "all blocks",
            )
        if np.isfinite(paper).any():
            ax.hlines(
                paper, x - 0.45, x + 0.45, colors="k", lw=2.0, label="paper, Table 1 (all blocks)"
            )
        ax.set_yscale("log")
        _layer_axis(ax, x)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel(
        rf"$\|Z_{{\mathrm{{net}}}} - Z_{{\mathrm{{{_tex(fam)}}}}}\|_F^2\,/\,\#\mathrm{{entries}}$"
        "\n(prompt units)"
    )
    fig.legend(*_handles(axes[0]), loc="outside right center", fontsize=8)
    fig.suptitle(f"Fidelity to {fam} per layer and block (lower is closer)", fontsize=10)
    return {"fidelity": fig}


ATTRIBUTION_CAP = 1e4  # MSE ratios above this are drawn cut at it, their value printed


def _attribution_bars(ax, part, pos, low: float, top: float, flat: set, blocks: tuple) -> None:
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
                _note(
                    ax,
                    readable(v),
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


def extraction_attribution(ex: Extraction) -> dict[str, Figure]:
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
        fig = _figure(max(7.0, 0.9 * len(layers) + 3), 6.0)
        axes = fig.subplots(2, 1, sharex=True)
        for ax, product in zip(axes, products, strict=True):
            _attribution_bars(ax, t[t["product"] == product], pos, low, top, flat, blocks)
            ax.set_ylabel(f"{product}: {ylabel}", fontsize=8)
        _layer_axis(axes[-1], layers)
        grid = list(axes)
    else:
        layers = sorted(t.layer.unique())
        heads = sorted(t["head"].unique())
        pos = {(lay, h): i for lay in layers for i, h in enumerate(heads)}
        fig = _figure(max(8.0, 2 * (0.42 * len(heads) + 1.2)), 2.3 * len(layers) + 1.0)
        axes = fig.subplots(len(layers), 2, squeeze=False, sharex=True, sharey=True)
        for r, layer in enumerate(layers):
            for c, product in enumerate(products):
                ax = axes[r][c]
                sel = t[(t.layer == layer) & (t["product"] == product)]
                _attribution_bars(ax, sel, pos, low, top, flat, blocks)
                ax.set_title(f"{product}, layer {layer}", fontsize=8)
                if c == 0:
                    ax.set_ylabel(ylabel, fontsize=7)
        for ax in axes[-1]:
            ax.set_xticks(range(len(heads)), [str(h) for h in heads])
            ax.set_xlabel("head")
        grid = list(axes.reshape(-1))
    handles, labels = _handles(*grid)
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


def extraction_projection_cost(ex: Extraction) -> dict[str, Figure]:
    """Held-out MSE of the network, of its projection onto the EAGLE family (all layers, and each
    layer alone) and, when the optimum ran, of EAGLE with fitted steps; the zero predictor as a
    reference line."""
    p = ex.views["projection"].json
    bars = [("network", p["network_mse"], "0.35")]
    bars.append(("all layers projected", p["projected_mse"], "C0"))
    for lay in p["layers"]:
        bars.append((f"layer {lay['layer']} projected alone", lay["mse"], "C9"))
    fam = family_word(ex)
    if "optimum" in ex.views:
        o = ex.views["optimum"].json
        if "start_mse" in o:
            bars.append((f"{fam}, steps read from weights", o["start_mse"], "C2"))
        bars.append((f"{fam} closest to network (distilled)", o["distilled_mse"], "C2"))
        bars.append((f"best {fam}, same depth (optimal)", o["optimal_mse"], "C2"))
    labels = [b[0] for b in bars]
    vals = np.array([b[1] for b in bars], dtype=float)
    zero = float(ex.network.get("zero_mse", np.nan))
    floor = _floor(vals, [zero])
    shown = _positive(vals, floor)
    fig = _figure(7.5, 0.36 * len(bars) + 1.6)
    ax = fig.subplots()
    y = np.arange(len(bars))[::-1]
    ax.barh(y, shown, color=[b[2] for b in bars], height=0.7)
    for yi, v, s in zip(y, vals, shown, strict=True):
        _note(
            ax,
            readable(v),
            (s if np.isfinite(s) else floor, yi),
            (3, 0),
            va="center",
            bbox=_TEXT_BOX,
        )
    if np.isfinite(zero) and zero > 0:
        ax.axvline(zero, color="C3", ls="--", lw=1.2, label=f"zero predictor ({zero:.3g})")
    ax.axvline(p["network_mse"], color="0.35", ls=":", lw=1.0, label="network")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xscale("log")
    lo, hi = np.nanmin(np.append(shown, zero)), np.nanmax(np.append(shown, zero))
    ax.set_xlim(lo / 2, hi * 8)
    ax.set_xlabel("held-out MSE on D (prompt units, log scale)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"What the {fam} family costs in function", fontsize=10)
    return {"projection_cost": fig}


def extraction_gaps(ex: Extraction) -> dict[str, Figure]:
    """Per layer the relative one-step gap of the network and of its untrained control, with the
    verdict's thresholds."""
    v = ex.views["verdict"].json
    layers = v.get("layers", [])
    if not layers:
        return {}
    th = v.get("thresholds", {})
    fam = family_word(ex)
    last = len(layers) - 1
    # the sample layout reads its last layer on the D slot alone (the layer table's rel 1-step)
    key = {last: "one_step_relative_D"} if ex.geometry.samples else {}
    mine = np.array([lay[key.get(i, "one_step_relative")] for i, lay in enumerate(layers)])
    ctrl = np.array([lay.get("control_relative", np.nan) for lay in layers], dtype=float)
    floor = _floor(mine, ctrl, [th.get("eagle_gap", np.nan)])
    L = len(layers)
    fig = _figure(max(6.0, 1.2 * L + 3), 3.6)
    ax = fig.subplots()
    x = np.arange(L)
    has_ctrl = np.isfinite(ctrl).any()
    w = 0.38 if has_ctrl else 0.6
    ax.bar(
        x - (w / 2 if has_ctrl else 0), _positive(mine, floor), width=w, color="C0", label="network"
    )
    if has_ctrl:
        ax.bar(x + w / 2, _positive(ctrl, floor), width=w, color="0.7", label="untrained control")
    for name, colour, text in (("eagle_gap", "C2", "EAGLE"), ("like_gap", "C1", "EAGLE-like")):
        if name in th:
            ax.axhline(
                th[name], color=colour, ls="--", lw=1.0, label=f"{text} threshold ({th[name]:g})"
            )
    for xi, lay, m in zip(x, layers, _positive(mine, floor), strict=True):
        if np.isfinite(m):
            _note(
                ax,
                lay["label"],
                (xi - (w / 2 if has_ctrl else 0), m),
                (0, 3),
                ha="center",
                bbox=_TEXT_BOX,
            )
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)
    _layer_axis(ax, x)
    ax.set_ylabel(
        rf"$\|Z_{{l+1}} - \mathrm{{{_tex(fam)}}}(Z_l)\|^2\,/\,\|Z_{{l+1}} - Z_l\|^2$" "\n(ratio)",
        fontsize=8,
    )
    fig.legend(fontsize=7, loc="outside right center")
    step = "layer" if ex.geometry.samples else "step"
    ax.set_title(f"How much of each layer's update one {fam} {step} misses", fontsize=10)
    return {"verdict_gaps": fig}


def extraction_terms(ex: Extraction) -> dict[str, Figure]:
    """Inclusion frequency of every discovered term per layer (terms view), coefficients printed."""
    layers = ex.views["terms"].json.get("layers", [])
    names = list(dict.fromkeys(t["name"] for lay in layers for t in lay.get("terms", [])))
    if not names:
        return {}
    L = len(layers)
    freq = np.full((len(names), L), np.nan)
    coef: dict[tuple[int, int], str] = {}
    for j, lay in enumerate(layers):
        for t in lay.get("terms", []):
            i = names.index(t["name"])
            freq[i, j] = float(t.get("frequency", 1.0))
            c = t.get("coefficient")
            if isinstance(c, (int, float)):
                coef[(i, j)] = f"{c:.3g}"
    # wide enough for the title and the longest term name, whatever the layers
    fig = _figure(max(6.5, 1.1 * L + 3), 0.34 * len(names) + 1.8)
    ax = fig.subplots()
    im = _fraction_map(ax, freq, "Greens", coef.items())
    ax.set_yticks(range(len(names)), names, fontsize=8, family="monospace")
    _layer_axis(ax, range(L))
    fig.colorbar(im, ax=ax, label="inclusion frequency (fraction of bags)")
    ax.set_title("Discovered terms: inclusion frequency, scalar coefficients printed", fontsize=10)
    return {"terms": fig}


def extraction_communication(ex: Extraction) -> dict[str, Figure]:
    """Distributed models: per layer and head the share of ‖W_VP^μ‖²_F written into other
    machines' A/B columns (view `communication`), each layer labelled with what zeroing those
    writes does to the held-out MSE; with a C/D copy per machine (the paper's architecture) a
    second panel shows the share written into the other machines' C/D copies, labelled with
    what zeroing those does."""
    c = ex.views["communication"].json
    layers = c.get("layers", [])
    if not layers:
        return {}
    copies = "cross_cd_ablation" in c
    panels = [("cross_a_share", "Reds", "into other machines' A/B columns", "cross_a_ablation")]
    if copies:
        panels.append(
            ("cross_cd_share", "Blues", "into other machines' C/D copies", "cross_cd_ablation")
        )
    L, h = len(layers), len(layers[0]["heads"])
    fig = _figure(max(6.0, (0.7 * h + 3.4) * len(panels) + 1.2), 0.5 * L + 2.1)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, cmap, where, ablation) in zip(axes, panels, strict=True):
        share = np.array([[hd[key] for hd in lay["heads"]] for lay in layers])  # (L, h)
        im = _fraction_map(
            ax, share, cmap, ((ij, f"{100 * v:.0f}%") for ij, v in np.ndenumerate(share))
        )
        labels = [
            f"{lay['layer']}: ×{lay[ablation]:.3g}"
            + (
                f", with reads ×{lay['cross_a_any_ablation']:.3g}"
                if key == "cross_a_share" and not copies and "cross_a_any_ablation" in lay
                else ""
            )
            + (" (sent)" if key == "cross_a_share" and lay["a_columns_sent"] else "")
            for lay in layers
        ]
        ax.set_yticks(range(L), labels, fontsize=8)
        ax.set_xticks(range(h), [str(j) for j in range(h)])
        ax.set_xlabel("head = machine μ")
        ax.set_ylabel("layer: MSE with these\nwrites zeroed", fontsize=8)
        fig.colorbar(im, ax=ax, label="share of ‖W_VP^μ‖²_F", shrink=0.9)
        ax.set_title(
            f"W_VP^μ written {where}\n(every layer zeroed at once: MSE ×{c[ablation]:.3g})",
            fontsize=9,
        )
    if copies:
        fig.suptitle(
            f"A traffic: {100 * c['cross_a_fraction']:.3g}% of the cross-machine ‖W_VP‖²",
            fontsize=10,
        )
    return {"communication": fig}


def extraction_sketch(ex: Extraction) -> dict[str, Figure]:
    """Constrained models: per layer the singular values of every head's W_QK A-block over its
    largest (view `sketch`) against those of α S Sᵀ for a random orthogonal n × r S (r ones,
    then zeros)."""
    view = ex.views["sketch"]
    t = view.tables.get("spectra")
    if t is None or t.empty:
        return {}
    layers = sorted(t.layer.unique())
    spans = {lay["layer"]: lay["span"] for lay in view.json["layers"]}
    fig = _figure(2.6 * len(layers) + 1.5, 3.0)
    axes = fig.subplots(1, len(layers), squeeze=False, sharey=True)[0]
    for ax, layer in zip(axes, layers, strict=True):
        part = t[t.layer == layer]
        for k, (_, head) in enumerate(part.groupby("head")):
            ax.plot(
                head["index"],
                head.network,
                "o-",
                ms=2.5,
                lw=0.8,
                alpha=0.7,
                color=_layer_colour(k),
                label=f"head {int(head['head'].iloc[0])}",
            )
        ref = part[part["head"] == part["head"].min()]
        ax.step(
            ref["index"],
            ref.random_sketch,
            where="mid",
            color="k",
            ls="--",
            lw=1.2,
            label="α S Sᵀ, random S",
        )
        ax.set_title(f"layer {layer} (span {spans.get(layer, '?')})", fontsize=9)
        ax.set_xlabel("singular value index")
    axes[0].set_ylabel("σ_i / σ_1 of W_QK's A-block")
    fig.legend(*_handles(axes[0]), fontsize=7, loc="outside right center")
    fig.suptitle(
        "Each head's sketch: a scaled projector is flat at 1 for r values, then 0", fontsize=10
    )
    return {"sketch": fig}


VIEW_FIGURES: dict[str, Callable[[Extraction], dict[str, Figure]]] = {
    "weights": extraction_heatmaps,
    "communication": extraction_communication,
    "sketch": extraction_sketch,
    "polynomial": extraction_filters,
    "fidelity": extraction_fidelity,
    "attribution": extraction_attribution,
    "projection": extraction_projection_cost,
    "verdict": extraction_gaps,
    "terms": extraction_terms,
}


def _without_minor_log_ticks(fig: Figure, decades: float = 2.0) -> Figure:
    """`fig` with no minor ticks on its log axes that span at least `decades` decades (those
    carry labelled decade ticks; the unlabelled minor ticks are most of a figure's drawing time,
    laid out twice under constrained layout). Returns `fig`."""
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim), (ax.yaxis, ax.get_ylim)):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(limits())
            if lo > 0 and np.log10(hi / lo) >= decades:
                axis.set_minor_locator(NullLocator())
    return fig


def figure_views(ex: Extraction) -> list[str]:
    """The views of `ex` that have figures, in the order of `VIEW_FIGURES`."""
    return [view for view in VIEW_FIGURES if view in ex.views]


def view_figures(ex: Extraction, view: str) -> dict[str, Figure]:
    """The figures of one view of `ex`."""
    return {name: _without_minor_log_ticks(fig) for name, fig in VIEW_FIGURES[view](ex).items()}


def extraction_figures(ex: Extraction) -> dict[str, Figure]:
    """Every figure of an extraction, in the order of `VIEW_FIGURES`, for the views it ran."""
    out: dict[str, Figure] = {}
    for view in figure_views(ex):
        out.update(view_figures(ex, view))
    return out


# --- off the training distribution (eagle_probe.compare) and across training (timeline) --------

_ALGORITHM_STYLE = {
    "network": ("C0", "-", "network"),
    "faithful": ("C3", "--", "extracted (faithful)"),
    "optimum": ("C1", ":", "family at optimum steps"),
    "more": ("C2", "-.", "extracted, run longer"),
    "exact": ("0.2", "-", "B A⁺ C"),
    "cg": ("C4", "-", "CGLS, same products"),
    "gd": ("C5", "-", "GD, same products"),
}
_LOG_SWEEPS = {"scale", "kappa", "input_scale", "query_scale", "samples"}


def _sweep_axis(ax, name: str, sweep: dict) -> np.ndarray:
    x = np.array([p["value"] for p in sweep["points"]], dtype=float)
    if name in _LOG_SWEEPS:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        if name != "kappa":  # factors and counts, as numbers: the counts swept, the powers of 2
            whole = name == "samples"
            ticks = [v for v in x if v > 0 and (whole or float(np.log2(v)).is_integer())]
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
    elif name in ("noise", "task_noise"):
        ax.set_xscale("symlog", linthresh=1e-3)
    if sweep.get("training_value") is not None:
        ax.axvline(sweep["training_value"], color="0.6", lw=0.8, ls=":")
    ax.set_xlabel(f"{name}: {sweep['parameter']}", fontsize=7)
    return x


GAP_FLOOR = 1e-17  # relative gaps and 1 − cosines below this are drawn at it (log axes)


def _decades(ax, at_least: float = 2.0) -> None:
    """Put the y axis on a log scale spanning at least `at_least` decades around its data, so its
    ticks are labelled powers of ten (a narrower span labels minor ticks like 2.15×10⁻¹⁶)."""
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if lo > 0 and np.log10(hi / lo) < at_least:
        mid = np.sqrt(lo * hi)
        ax.set_ylim(mid / 10 ** (at_least / 2), mid * 10 ** (at_least / 2))


def _log_twin(ax, x, gaps, style: str, label: str, ylabel: str, ms=None, **ylabel_kw):
    """A right-hand log axis over `ax` with `gaps` (relative, floored at GAP_FLOOR) drawn in
    `style`, at least two decades tall; returns it."""
    twin = ax.twinx()
    twin.plot(x, _positive(gaps, GAP_FLOOR), style, ms=ms, label=label)
    _decades(twin)
    twin.set_ylabel(ylabel, **ylabel_kw)
    return twin


def _sweep_panels(count: int, height: float, extra: float) -> tuple[Figure, np.ndarray]:
    """One panel per sweep, three to a row and 4.2 inches wide each (room for the sweeps' axis
    labels), `height` inches a row plus `extra`; the unused panels of the last row hidden."""
    cols = min(3, max(1, count))
    rows = -(-max(1, count) // cols)
    fig = _figure(4.2 * cols, height * rows + extra)
    axes = fig.subplots(rows, cols, squeeze=False).reshape(-1)
    for ax in axes[count:]:
        ax.set_axis_off()
    return fig, axes


def compare_sweeps(result: dict) -> Figure:
    """One panel per sweep of compare.json: MSE of every algorithm (left axis) and the network's
    gap to its extracted algorithm (right axis, black dots); the training value dotted."""
    sweeps = result["sweeps"]
    fig, axes = _sweep_panels(len(sweeps), 3.2, 0.8)
    for ax, (name, sweep) in zip(axes, sweeps.items(), strict=False):
        x = _sweep_axis(ax, name, sweep)
        # round-off answers (B A⁺ C at 1e-30) would squash the rest: six decades below the
        # network's smallest MSE at most
        net = [p["mse"]["network"] for p in sweep["points"]]
        every = [p["mse"][k] for p in sweep["points"] for k in p["mse"]]
        floor = max(_floor(every), 1e-6 * _floor(net) * 10)
        for key, (colour, ls, label) in _ALGORITHM_STYLE.items():
            if key in sweep["points"][0]["mse"]:
                y = _positive([p["mse"][key] for p in sweep["points"]], floor)
                ax.plot(x, y, color=colour, ls=ls, lw=1.2, marker=".", label=label)
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor)
        ax.set_ylabel("MSE (prompt units)", fontsize=7)
        gaps = [p["gap"]["faithful"] for p in sweep["points"]]
        twin = _log_twin(
            ax, x, gaps, "ko", "gap network–extracted", "‖D_net − D_alg‖ / ‖D_net‖", 3, fontsize=7
        )
        f = sweep["follows"]
        ax.axvspan(f["low"], f["high"], color="C2", alpha=0.07)
        ax.set_title(name, fontsize=9)
        ax.tick_params(which="both", labelsize=7)
        twin.tick_params(which="both", labelsize=7)  # minor labels too: a log axis under 1 decade
    handles, labels = _handles(axes[0])
    handles.append(Line2D([], [], color="k", marker="o", ls="", ms=3))
    labels.append("gap network–extracted (right axis)")
    fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncols=4)
    fig.suptitle(
        "Off the training distribution: MSE per algorithm; shaded: the network follows its "
        "algorithm",
        fontsize=10,
    )
    return fig


def compare_sensitivity(result: dict) -> Figure:
    """Per sweep, 1 − cosine of the network's and the algorithm's ∂D̂/∂C and ∂D̂/∂A."""
    sweeps = result["sweeps"]
    fig, axes = _sweep_panels(len(sweeps), 3.0, 0.5)
    for ax, (name, sweep) in zip(axes, sweeps.items(), strict=False):
        x = _sweep_axis(ax, name, sweep)
        for block, colour in (("C", "C2"), ("A", "C0")):
            y = [1.0 - p["sensitivity_cosine"][block] for p in sweep["points"]]
            ax.plot(x, _positive(y, GAP_FLOOR), color=colour, marker=".", label=f"∂D̂/∂{block}")
        _decades(ax)
        ax.set_ylabel("1 − cosine", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.suptitle("Sensitivity of the network against its extracted algorithm", fontsize=10)
    return fig


def compare_interpolation(result: dict) -> Figure:
    """MSE and gap to the network along (1 − t) products_network + t products_family."""
    path = result["interpolation"]
    fig = _figure(5.0, 3.2)
    ax = fig.subplots()
    t = np.asarray(path["t"], dtype=float)
    family = result.get("model", {}).get("family") or "family"
    # a log axis: a path that blows up midway reads in decades, not as one tick "3e+33"
    ax.plot(t, _positive(path["mse"], _floor(path["mse"])), "C0.-", label="MSE")
    _decades(ax)
    ax.set_xlabel(f"t (0: network, 1: {family} at the faithful steps)")
    ax.set_ylabel("MSE (prompt units)", color="C0")
    _log_twin(
        ax, t, path["gap"], "C3.--", "gap to the network", "‖D_t − D_net‖ / ‖D_net‖", color="C3"
    )
    ax.set_title(f"Interpolating the network's products towards {family}", fontsize=10)
    return fig


def iteration_map(result: dict) -> Figure:
    """Layer → iteration heat maps (Fu et al.): log10 ‖D_layer − D_k‖² / ‖B A⁺ C‖² against k
    steps of exact EAGLE (η = 1/3, γ = 1) and of GD; the closest k per layer marked."""
    maps = result["iteration_map"]
    fig = _figure(10.0, 0.5 * len(next(iter(maps.values()))["distance"]) + 2.4)
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    titles = {"eagle": "exact EAGLE (η = 1/3, γ = 1)", "gd": "gradient descent (1/‖A‖²)"}
    for ax, (name, m) in zip(axes, maps.items(), strict=True):
        dist = np.asarray(m["distance"], dtype=float)
        img = np.log10(_positive(dist, 1e-32))
        im = ax.imshow(img, aspect="auto", cmap="viridis_r", interpolation="nearest")
        ax.plot(m["closest"], np.arange(len(dist)), "rx", ms=6)
        _layer_axis(ax, range(len(dist)), "y")
        ax.set_xlabel(f"steps of {titles.get(name, name)}", fontsize=8)
        fig.colorbar(im, ax=ax, label="log10 relative distance")
    fig.suptitle("Which step count each layer's D slot is closest to (x: closest)", fontsize=10)
    return fig


def compare_figures(result: dict) -> dict[str, Figure]:
    """Every figure of a compare.json."""
    out = {"compare_sweeps": compare_sweeps(result)} if result["sweeps"] else {}
    if result["sweeps"]:
        out["compare_sensitivity"] = compare_sensitivity(result)
    out["compare_interpolation"] = compare_interpolation(result)
    out["iteration_map"] = iteration_map(result)
    return out


# the feature layout's labels, least to most of EAGLE, and their colours
_EAGLE_LABELS = {"not EAGLE": "0.85", "EAGLE-like": "C1", "EAGLE": "C2"}


def _checkpoints(result: dict) -> tuple[list, np.ndarray, int]:
    """A timeline.json's checkpoints, their training steps and the model's layer count."""
    points = result["checkpoints"]
    return points, np.array([p["step"] for p in points], dtype=float), len(points[0]["layers"])


def _step_axis(ax, steps: np.ndarray) -> None:
    """Training step on a log axis that still shows step 0 (symlog, linear below the first
    positive step)."""
    positive = steps[steps > 0]
    ax.set_xscale("symlog", linthresh=float(positive.min()) if positive.size else 1.0)
    ax.set_xlim(left=min(0.0, float(steps.min())), right=float(steps.max()) * 1.05 or 1.0)
    ax.set_xlabel("training step (log scale; step 0 at the left)")


def _spike_lines(ax, result: dict) -> None:
    for i, spike in enumerate(result.get("spikes", [])):
        ax.axvline(
            spike["step"], color="r", lw=0.6, alpha=0.5, label="loss spike" if i == 0 else None
        )


def timeline_gaps(result: dict) -> Figure:
    """timeline.json: test MSE and each layer's relative one-step gap against training step,
    loss spikes marked."""
    points, steps, L = _checkpoints(result)
    fig = _figure(7.0, 6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(steps, [p["mse"] for p in points], "C0.-", label="test MSE")
    top.plot(steps, [p["zero_mse"] for p in points], color="0.6", ls=":", label="zero predictor")
    _decades(top)
    top.set_ylabel("MSE (prompt units)")
    _spike_lines(top, result)
    top.legend(fontsize=7)
    for layer in range(L):
        gaps = [p["layers"][layer]["one_step_gap"] for p in points]
        bottom.plot(
            steps,
            _positive(gaps, GAP_FLOOR),
            ".-",
            color=_layer_colour(layer),
            label=f"layer {layer}",
        )
    bottom.set_yscale("log")
    bottom.set_ylabel("relative one-step gap\nto the family read")
    _spike_lines(bottom, result)
    bottom.legend(fontsize=7, ncols=min(4, L))
    _step_axis(bottom, steps)
    fig.suptitle("Across training: test MSE and how far each layer is from one step", fontsize=10)
    return fig


def _samples(result: dict) -> bool:
    """A timeline.json (or compare.json) of a sample-layout model."""
    return result.get("model", {}).get("tokens") == "samples"


def timeline_steps(result: dict) -> Figure:
    """timeline.json: each layer's steps a_l, c_l (internal units) and η_l, γ_l against training
    step; sample layout: GD++'s γ_l (the data transform) and η_l (the gradient step)."""
    points, steps, L = _checkpoints(result)
    if _samples(result):
        keys = {"gamma": "γ_l, the data transform", "eta": "η_l, the gradient step"}
        fig = _figure(10.0, 3.4)
        axes = fig.subplots(1, 2, sharex=True).reshape(-1)
    else:
        keys = {k: k for k in ("a_step", "c_step", "eta", "gamma")}
        fig = _figure(10.0, 6.0)
        axes = fig.subplots(2, 2, sharex=True).reshape(-1)
    for ax, (key, name) in zip(axes, keys.items(), strict=True):
        top = 0.0
        for layer in range(L):
            y = [p["layers"][layer][key] for p in points]
            y = np.array([np.nan if v is None else v for v in y], dtype=float)
            if np.isfinite(y).any():
                ax.plot(steps, y, ".-", color=_layer_colour(layer), label=f"layer {layer}")
                top = max(top, float(np.nanmax(np.abs(y))))
        # linear within 1% of the panel's largest step, decades beyond: ticks at powers of ten
        linthresh = 10.0 ** np.floor(np.log10(top / 100)) if top > 0 else 1e-3
        ax.set_yscale("symlog", linthresh=linthresh)
        ax.set_ylabel(name)
        _spike_lines(ax, result)
        _step_axis(ax, steps)
    max(axes, key=lambda ax: len(ax.get_lines())).legend(fontsize=7)  # the panel with every layer
    fig.suptitle("Across training: the steps each layer runs", fontsize=10)
    return fig


def timeline_labels(result: dict) -> Figure:
    """timeline.json: the layer × checkpoint label map (not EAGLE / EAGLE-like / EAGLE), the
    step each layer becomes and stays EAGLE marked."""
    if _samples(result):
        return _sample_labels(result)
    fig, ax, steps = _label_map(result, _EAGLE_LABELS)
    for e in result["emergence"]:
        stay, like = e["eagle"]["stays_from"], e["eagle_like"]["stays_from"]
        if stay is not None:
            _mark(ax, steps, stay, e["layer"], 2)
        if like is not None and like != stay:
            _mark(ax, steps, like, e["layer"], 1, 0.5)
    marks = [("EAGLE from here on", 2, None), ("at least EAGLE-like from here on", 1, 0.5)]
    _label_legend(fig, _EAGLE_LABELS, marks)
    ax.set_title("Each layer's label across training", fontsize=10)
    return fig


def _label_map(result: dict, colours: dict[str, str]) -> tuple[Figure, Any, list]:
    """The layer × checkpoint map of a timeline.json's labels, label k of `colours` (least to
    most of an algorithm; an unknown one as the first) in its colour, the checkpoints ticked by
    their training step: (figure, its axes, the steps)."""
    from matplotlib.colors import ListedColormap

    points, _, L = _checkpoints(result)
    code = {label: k for k, label in enumerate(colours)}
    codes = np.array(
        [[code.get(p["layers"][layer]["label"], 0) for p in points] for layer in range(L)]
    )  # (L, checkpoints)
    fig = _figure(max(6.0, 0.25 * len(points) + 2.5), 0.5 * L + 2.0)
    ax = fig.subplots()
    cmap = ListedColormap(list(colours.values()))
    ax.imshow(
        codes, aspect="auto", cmap=cmap, vmin=0, vmax=len(colours) - 1, interpolation="nearest"
    )
    steps = [p["step"] for p in points]
    every = max(1, len(steps) // 12)
    ax.set_xticks(range(0, len(steps), every), [f"{s:,}" for s in steps[::every]], fontsize=7)
    _layer_axis(ax, range(L), "y")
    ax.set_xlabel("checkpoint (training step)")
    return fig, ax, steps


def _mark(ax, steps: list, step: int, layer: int, mew: float, alpha: float | None = None) -> None:
    """Mark on a label map the checkpoint of `step` in `layer`'s row (a black bar)."""
    ax.plot(steps.index(step), layer, "k|", ms=14, mew=mew, alpha=alpha)


def _label_legend(fig: Figure, colours: dict[str, str], marks: list) -> None:
    """The legend of a label map: a swatch per label of `colours`, then per (label, mew, alpha)
    of `marks` a black bar as `_mark` draws it."""
    handles = [
        Line2D([], [], color=c, marker="s", ls="", ms=8, label=lab) for lab, c in colours.items()
    ]
    handles += [
        Line2D([], [], color="k", marker="|", ls="", ms=10, mew=mew, alpha=alpha, label=lab)
        for lab, mew, alpha in marks
    ]
    fig.legend(handles=handles, fontsize=7, loc="outside right center")


# the sample layout's labels, least to most of a gradient-descent algorithm, and their colours
_SAMPLE_LABELS = {
    "unrecognised": "0.85",
    "polynomial": "C7",
    "GD": "C0",
    "GD++": "C2",
    "preconditioned GD": "C4",
}


def _sample_labels(result: dict) -> Figure:
    """`timeline_labels` of a sample-layout run: each layer's name (GD, GD++, preconditioned GD,
    polynomial, unrecognised) per checkpoint, the step it is named its final name from on
    marked."""
    points, _, L = _checkpoints(result)
    fig, ax, steps = _label_map(result, _SAMPLE_LABELS)
    for e in result["emergence"]:
        stay = e["final"]["stays_from"]
        if stay is not None and e["label"] in ("GD", "GD++", "preconditioned GD"):
            _mark(ax, steps, stay, e["layer"], 2)
    shown = {p["layers"][layer]["label"] for p in points for layer in range(L)}
    colours = {lab: c for lab, c in _SAMPLE_LABELS.items() if lab in shown}
    _label_legend(fig, colours, [("its final name from here on", 2, None)])
    ax.set_title("Each layer's name across training: when GD and GD++ appear", fontsize=10)
    return fig


def timeline_figures(result: dict) -> dict[str, Figure]:
    """Every figure of a timeline.json."""
    return {
        "timeline_gaps": timeline_gaps(result),
        "timeline_steps": timeline_steps(result),
        "timeline_labels": timeline_labels(result),
    }
