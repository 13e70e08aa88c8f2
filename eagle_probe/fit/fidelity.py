"""The paper's Table-1 metric, per layer and per block, one step at a time and end to end.

Table 1 of the paper reports ‖Z_transformer − Z_EAGLE‖²_F / #entries per layer. Two readings:

- one-step: the network's own Z_l through one EAGLE step, compared with Z_{l+1}. It says whether
  layer l *is* an EAGLE step, wherever the stream entering it came from.
- end-to-end: EAGLE run from the input for l + 1 steps, compared with Z_{l+1}. One layer's
  deviation is carried into every later layer, so it says where the trajectories part, not which
  layer departs.

Both are in prompt units (squared gaps times the per-prompt scale s²), split by block (A, B, C, D)
and overall, absolute and relative: the relative one-step gap divides by ‖Z_{l+1} − Z_l‖² (the
layer's own update), the relative end-to-end gap by ‖Z_{l+1} − Z_0‖² (the change so far). An
untrained model moves the stream very little, so an absolute gap alone makes it look best; the
relative numbers and the untrained control (`verdict`) are what decide.

In the sample layout the steps are those of its row-tied family (`Geometry.pairs`, view `eagle`),
so the metric says how far each layer is from one GD++ layer; the paper has no numbers for it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe import regimes
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register, table1_blocks
from eagle_probe.wording import number

BLOCKS = ("A", "B", "C", "D")
PAPER_TABLE1 = {  # ×1e-4 in the paper; layers 1–4
    "centralized": [2.36e-4, 5.27e-4, 3.70e-4, 2.16e-4],
    "distributed": [0.62e-4, 1.40e-4, 1.28e-4, 1.32e-4],
    "constrained": [0.01e-4, 0.02e-4, 0.13e-4, 0.14e-4],
}


def paper_table1(regime: str) -> list[float]:
    """The paper's Table 1 for a regime's setting: its own, or for a variant (distributed-open)
    the one of the paper's regime whose Gram reading it shares."""
    return PAPER_TABLE1[regimes.get(regime).reading]


def _split(ctx: Context, gap2: np.ndarray) -> dict[str, float]:
    """Table-1 metric of squared gaps (b, T, E) per block and in total."""
    return table1_blocks(gap2, ctx.cap, ctx.geometry)


def fidelity_table(ctx: Context, a_steps, c_steps) -> pd.DataFrame:
    """One row per layer and reading (one_step, end_to_end): gaps per block, total, relative."""
    cap, geo = ctx.cap, ctx.geometry
    eagle = cap.Z[0]  # EAGLE run from the input (`Geometry.run_eagle`), one layer at a time
    rows = []
    for layer in range(cap.layers):
        Z, Z1 = cap.Z[layer], cap.Z[layer + 1]
        stepped = geo.eagle_step(Z, layer, a_steps[layer], c_steps[layer])
        one = (Z1 - stepped) ** 2
        # layer 0: the run from the input is the one step from the input
        a, c = a_steps[layer], c_steps[layer]
        eagle = stepped if layer == 0 else geo.eagle_step(eagle, layer, a, c)
        with np.errstate(over="ignore", invalid="ignore"):
            e2e = (Z1 - eagle) ** 2
        for reading, gap2, ref in (
            ("one_step", one, (Z1 - Z) ** 2),
            ("end_to_end", e2e, (Z1 - cap.Z[0]) ** 2),
        ):
            row = {"layer": layer, "reading": reading, **_split(ctx, gap2)}
            denom = float(np.sum(ref))
            row["relative"] = float(np.sum(gap2)) / denom if denom > 0 else float("nan")
            for k, g, r in zip(BLOCKS, geo.blocks(gap2), geo.blocks(ref), strict=True):
                size = float(np.sum(r))
                row[f"relative_{k}"] = float(np.sum(g)) / size if size > 0 else float("nan")
            paper = [] if geo.samples else paper_table1(geo.regime)
            row["paper"] = paper[layer] if layer < len(paper) else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


# --- what the view shows: its figure and the figure's caption -------------------------------------
BLOCK_COLOURS = {"A": "C0", "B": "C1", "C": "C2", "D": "C3", "total": "0.25"}


def figures(ex: Extraction) -> Figures:
    """The Table-1 metric per layer and block, one-step and end-to-end, against the paper's."""
    layers = ex.views["fidelity"].json["layers"]
    if not layers:
        return {}
    blocks = ("A", "B", "C", "D", "total")
    L = len(layers)
    fam = draw.family_word(ex)
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
    floor = draw.floor(*values.values(), paper)
    fig = draw.figure(max(7.5, 2.2 * L + 2.5), 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    width = 0.8 / len(blocks)
    x = np.arange(L)
    for ax, (reading, title) in zip(axes, readings, strict=True):
        v = draw.positive(values[reading], floor)
        for i, b in enumerate(blocks):
            ax.bar(
                x + (i - (len(blocks) - 1) / 2) * width,
                v[:, i],
                width=width,
                color=BLOCK_COLOURS[b],
                label=f"block {b}" if b != "total" else "all blocks",
            )
        if np.isfinite(paper).any():
            ax.hlines(
                paper, x - 0.45, x + 0.45, colors="k", lw=2.0, label="paper, Table 1 (all blocks)"
            )
        ax.set_yscale("log")
        draw.layer_axis(ax, x)
        ax.set_title(title, fontsize=9)
    tex = draw.tex(fam)
    axes[0].set_ylabel(
        rf"$\|Z_{{\mathrm{{net}}}} - Z_{{\mathrm{{{tex}}}}}\|_F^2\,/\,\#\mathrm{{entries}}$"
        "\n(prompt units)"
    )
    fig.legend(*draw.handles(axes[0]), loc="outside right center", fontsize=8)
    fig.suptitle(f"Fidelity to {fam} per layer and block (lower is closer)", fontsize=10)
    return {"fidelity": fig}


def caption(ex: Extraction) -> str:
    layers = ex.views["fidelity"].json["layers"]
    worst = max(layers, key=lambda lay: lay["one_step"]["total"], default=None)
    here = ""
    if worst is not None:
        blocks = worst["one_step"]["blocks"]
        block = max(blocks, key=lambda k: blocks[k] if math.isfinite(blocks[k]) else -1.0)
        here = (
            f"; here the largest one-step gap is layer {worst['layer']}'s "
            f"({number(worst['one_step']['total'])}, mostly block {block})"
        )
    if ex.geometry.samples:
        return (
            "The gap to one GD++ layer with the fitted steps, per block, one step at a time and "
            f"run from the input (the paper has no numbers for this layout){here}."
        )
    return (
        "Compare each layer's dark all-blocks bar with the black paper line, and read the "
        "one-step panel for which layer and block departs (end to end, one layer's gap is carried "
        f"into every later layer){here}."
    )


@register("fidelity", figures=figures, captions={"fidelity": caption})
def fidelity_view(ctx: Context) -> ViewResult:
    """Table-1 fidelity of the activation-fitted EAGLE steps (view `eagle`)."""
    steps = ctx.results["eagle"].tables["eagle"]
    table = fidelity_table(ctx, steps.a_step.to_numpy(), steps.c_step.to_numpy())
    layers = []
    for layer in range(ctx.cap.layers):
        part = table[table.layer == layer].set_index("reading")
        layers.append(
            {
                "layer": layer,
                **{
                    reading: {
                        "blocks": {k: float(part.loc[reading, k]) for k in BLOCKS},
                        "total": float(part.loc[reading, "total"]),
                        "relative": float(part.loc[reading, "relative"]),
                        "relative_blocks": {
                            k: float(part.loc[reading, f"relative_{k}"]) for k in BLOCKS
                        },
                    }
                    for reading in ("one_step", "end_to_end")
                },
                "paper": float(part.loc["one_step", "paper"]),
            }
        )
    return ViewResult(
        "fidelity",
        {"units": "prompt units (squared gap × s², mean over entries)", "layers": layers},
        {"fidelity": table},
    )
