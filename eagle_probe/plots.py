"""Figures for the notebooks and reports. Each function returns a matplotlib Figure (built
without pyplot, so any backend, Agg included, works); callers decide where to save it. The helpers
they share with the views' figures, and the one place matplotlib is loaded, are `drawing`.

The figures of an extraction are each view's own (`fit/<view>.py`, registered with the view):
the report draws, for every view an extraction ran, the figures of that view, in
`fit.FIGURE_ORDER` (`figure_views`, `view_figures`, `extraction_figures`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe import drawing as draw
from eagle_probe import fit
from eagle_probe.fit.base import Extraction
from eagle_probe.model import LinearTransformer

draw.load_matplotlib()  # quietly, before matplotlib's own imports below
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import NullFormatter, NullLocator  # noqa: E402


def _panel_row(count: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure of `count` panels side by side, `width` inches each and `height` high."""
    fig = Figure(figsize=(width * count, height))
    return fig, fig.subplots(1, count, squeeze=False)[0]


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
            draw.diverging(ax, W)
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


# --- the figures of an extraction: each view's own (`fit/<view>.py`, `fit.VIEWS`) -----------------


def figure_views(ex: Extraction) -> list[str]:
    """The views of `ex` that have figures, in `fit.FIGURE_ORDER`."""
    return [view for view in fit.shown("figures") if view in ex.views]


def view_figures(ex: Extraction, view: str) -> dict[str, Figure]:
    """The figures of one view of `ex` (`fit.VIEWS[view].figures`)."""
    drawn = fit.VIEWS[view].figures(ex)
    return {name: draw.without_minor_log_ticks(fig) for name, fig in drawn.items()}


TRAINING_CURVES = (  # history key, label, style
    ("train_loss", "training batch loss (mean)", dict(color="0.6", lw=1.0)),
    ("val_mse", "held-out MSE, mean", dict(color="C0", lw=1.2)),
    ("val_trimmed", "held-out MSE, 0.1%-trimmed mean", dict(color="C0", lw=1.2, ls="--")),
    ("val_median", "held-out MSE, median", dict(color="C2", lw=1.6)),
)


def training_curve(training: dict[str, Any]) -> Figure:
    """The stored training curve of a checkpoint (`extract.training_record`): the evaluations'
    held-out mean, trimmed mean and median MSE and the training loss against the step (log y),
    the loss spikes marked where they happened, and the step whose weights were kept."""
    history = pd.DataFrame(training["history"])
    fig = draw.figure(8.0, 3.6)
    ax = fig.subplots()
    for key, label, style in TRAINING_CURVES:
        if key in history and np.isfinite(history[key].to_numpy(float)).any():
            ax.plot(history.step, draw.positive(history[key], 1e-12), label=label, **style)
    # a spike's loss is None where it was not finite (the checkpoint stores data as JSON does)
    every = training.get("spikes") or []
    spikes = [s for s in every if s.get("loss") is not None and np.isfinite(s["loss"])]
    if every:
        lost = len(every) - len(spikes)
        ax.plot(
            [s["step"] for s in spikes],
            [s["loss"] for s in spikes],
            "x",
            color="C3",
            ms=4,
            label=f"loss spikes, batch loss ({len(spikes)}"
            + (f"; {lost} not finite, not drawn)" if lost else ")"),
        )
    kept = training.get("best_step")
    if kept is not None:
        ax.axvline(kept, color="k", ls=":", lw=1.2, label=f"weights kept (step {kept})")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("MSE (prompt units)")
    ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "Training: the held-out error over the steps, and where the loss spiked", fontsize=10
    )
    return draw.without_minor_log_ticks(fig)


def extraction_figures(ex: Extraction) -> dict[str, Figure]:
    """Every figure of an extraction, in `fit.FIGURE_ORDER`, for the views it ran."""
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
    twin.plot(x, draw.positive(gaps, GAP_FLOOR), style, ms=ms, label=label)
    _decades(twin)
    twin.set_ylabel(ylabel, **ylabel_kw)
    return twin


def _sweep_panels(count: int, height: float, extra: float) -> tuple[Figure, np.ndarray]:
    """One panel per sweep, three to a row and 4.2 inches wide each (room for the sweeps' axis
    labels), `height` inches a row plus `extra`; the unused panels of the last row hidden."""
    cols = min(3, max(1, count))
    rows = -(-max(1, count) // cols)
    fig = draw.figure(4.2 * cols, height * rows + extra)
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
        floor = max(draw.floor(every), 1e-6 * draw.floor(net) * 10)
        for key, (colour, ls, label) in _ALGORITHM_STYLE.items():
            if key in sweep["points"][0]["mse"]:
                y = draw.positive([p["mse"][key] for p in sweep["points"]], floor)
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
    handles, labels = draw.handles(axes[0])
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
            # no cosine (null) where a gradient is exactly 0, as for a network predicting 0
            cos = [p["sensitivity_cosine"][block] for p in sweep["points"]]
            y = [np.nan if c is None else 1.0 - c for c in cos]
            ax.plot(x, draw.positive(y, GAP_FLOOR), color=colour, marker=".", label=f"∂D̂/∂{block}")
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
    fig = draw.figure(5.0, 3.2)
    ax = fig.subplots()
    t = np.asarray(path["t"], dtype=float)
    family = result.get("model", {}).get("family") or "family"
    # a log axis: a path that blows up midway reads in decades, not as one tick "3e+33"
    ax.plot(t, draw.positive(path["mse"], draw.floor(path["mse"])), "C0.-", label="MSE")
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
    fig = draw.figure(10.0, 0.5 * len(next(iter(maps.values()))["distance"]) + 2.4)
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    titles = {"eagle": "exact EAGLE (η = 1/3, γ = 1)", "gd": "gradient descent (1/‖A‖²)"}
    for ax, (name, m) in zip(axes, maps.items(), strict=True):
        dist = np.asarray(m["distance"], dtype=float)
        img = np.log10(draw.positive(dist, 1e-32))
        im = ax.imshow(img, aspect="auto", cmap="viridis_r", interpolation="nearest")
        ax.plot(m["closest"], np.arange(len(dist)), "rx", ms=6)
        draw.layer_axis(ax, range(len(dist)), "y")
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
    fig = draw.figure(7.0, 6.0)
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
            draw.positive(gaps, GAP_FLOOR),
            ".-",
            color=draw.layer_colour(layer),
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
        fig = draw.figure(10.0, 3.4)
        axes = fig.subplots(1, 2, sharex=True).reshape(-1)
    else:
        keys = {k: k for k in ("a_step", "c_step", "eta", "gamma")}
        fig = draw.figure(10.0, 6.0)
        axes = fig.subplots(2, 2, sharex=True).reshape(-1)
    for ax, (key, name) in zip(axes, keys.items(), strict=True):
        top = 0.0
        for layer in range(L):
            y = [p["layers"][layer][key] for p in points]
            y = np.array([np.nan if v is None else v for v in y], dtype=float)
            if np.isfinite(y).any():
                ax.plot(steps, y, ".-", color=draw.layer_colour(layer), label=f"layer {layer}")
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
    fig = draw.figure(max(6.0, 0.25 * len(points) + 2.5), 0.5 * L + 2.0)
    ax = fig.subplots()
    cmap = ListedColormap(list(colours.values()))
    ax.imshow(
        codes, aspect="auto", cmap=cmap, vmin=0, vmax=len(colours) - 1, interpolation="nearest"
    )
    steps = [p["step"] for p in points]
    every = max(1, len(steps) // 12)
    ax.set_xticks(range(0, len(steps), every), [f"{s:,}" for s in steps[::every]], fontsize=7)
    draw.layer_axis(ax, range(L), "y")
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
