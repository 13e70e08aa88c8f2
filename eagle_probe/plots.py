"""Figures for the notebooks and reports. Each function returns a matplotlib Figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from eagle_probe.model import LinearTransformer


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
            lim = max(float(np.abs(W).max()), 1e-12)
            ax.imshow(W, cmap="RdBu_r", vmin=-lim, vmax=lim)
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
    fig = Figure(figsize=(3.3 * len(layers), 3.2))
    axes = fig.subplots(1, len(layers), squeeze=False)[0]
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
    fig = Figure(figsize=(4.4 * len(groups), 3.4))
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, ((n, kappa), g) in zip(axes, groups, strict=True):
        for solver, s in g.groupby("solver"):
            ax.loglog(s[x], s.error.clip(lower=1e-17), label=solver)
        ax.set(title=f"n = {n}, κ = {kappa:.0e}", xlabel=x, ylabel="relative error")
    axes[0].legend(fontsize=7)
    return fig


def fidelity_bars(table: pd.DataFrame) -> Figure:
    """Our Table 1 fidelity per layer beside the paper's, one panel per regime."""
    models = list(dict.fromkeys(table.model))
    fig = Figure(figsize=(3.6 * len(models), 3.2))
    axes = fig.subplots(1, len(models), squeeze=False)[0]
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
    fig = Figure(figsize=(3.2 * len(layers), 3))
    axes = fig.subplots(1, len(layers), squeeze=False)[0]
    for ax, layer in zip(axes, layers, strict=True):
        s = spectrum[spectrum.layer == layer]
        ax.plot(s["index"], s.network, "o-", ms=3, label="network W_QK")
        ax.plot(s["index"], s.random_sketch, "s-", ms=3, label="random S Sᵀ")
        ax.set(title=f"layer {layer}", xlabel="eigenvalue index", ylabel="|λ| / max")
    axes[0].legend(fontsize=7)
    return fig
