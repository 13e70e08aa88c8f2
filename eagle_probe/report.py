"""What an extraction looks like to a reader: the text the CLI prints, the figures, the HTML page.

Everything loops over the views: a view with a renderer in `TEXT` adds lines to the text report; a
view with a figure function in `eagle_probe.plots.VIEW_FIGURES` adds figures to the page.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from eagle_probe.errors import EagleProbeError
from eagle_probe.evaluate import against_zero, readout_text
from eagle_probe.wording import plural

# what `eagle_probe.extract.extract` returns (an `Extraction`): this module reads its views,
# geometry and tables and never imports the extraction
Extraction = Any


def _g(x, digits: int = 3) -> str:
    """A number for the screen: never more than ~9 characters, never above 1e6 unscaled."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, str):
        return x
    x = float(x) + 0.0  # −0.0 prints as 0
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e6:  # the table never shows a number above 1e6; JSON keeps the value
        return ">1e6" if x > 0 else "<-1e6"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _change(mse: float, net: float) -> str:
    """How much `mse` differs from the network's `net`, in percent ("+3.2%"; "+nan%" without a
    positive `net`)."""
    return f"{(mse / net - 1) * 100 if net > 0 else math.nan:+.1f}%"


def _steps(values) -> str:
    """A list of steps, each by `_g`: "[0.3, 0.33]"."""
    return f"[{', '.join(_g(v) for v in values)}]"


def _family(ex: Extraction) -> str:
    """The step family the views fit (`fit.families`), or GD++ in the sample layout."""
    from eagle_probe.fit.families import of_geometry

    return "GD++" if ex.geometry.samples else of_geometry(ex.geometry).name


def _projection(ex: Extraction) -> list[str]:
    p = ex.views["projection"].json
    net, pm = p["network_mse"], p["projected_mse"]
    family = "GD++ family" if ex.geometry.samples else f"{p['family']} family"
    lines = [
        f"projection onto the {family}: MSE {_g(net)} -> {_g(pm)} ({_change(pm, net)}); per "
        "layer alone: "
        + ", ".join(f"L{lay['layer']} {_change(lay['mse'], net)}" for lay in p["layers"])
    ]
    if "preconditioned_mse" in p and net > 0:
        pc = p["preconditioned_mse"]
        lines.append(
            f"projection onto preconditioned GD (W_QK's XX block free): MSE {_g(pc)} "
            f"({_change(pc, net)})"
        )
    return lines


def _optimum(ex: Extraction) -> list[str]:
    o = ex.views["optimum"].json
    net = o["network_mse"]
    lines = [
        f"best {_family(ex)} ({plural(len(o['optimal']['a_steps']), 'layer')}, steps by "
        "Levenberg-Marquardt, "
        f"{o['tuning_prompts']} tuning prompts; optimal: best of {len(o.get('starts', [])) or 1} "
        f"starts, median {_g(o.get('median', float('nan')))}, spread ×{_g(o.get('spread', 1.0))}; "
        "distilled: from the weight-read steps):",
    ]
    for name in ("optimal", "distilled"):
        f = o[name]
        lines.append(
            f"  {name:9s} MSE {_g(f['mse'])} ({f['mse'] / net:.2f}x network)  "
            f"a = {_steps(f['a_steps'])}  c = {_steps(f['c_steps'])}  "
            f"|grad| {_g(f['gradient_norm'])}, rel {_g(f['relative_gradient'])}, "
            f"{'converged' if f['converged'] else 'NOT converged'} in {f['iterations']} it."
        )
    return lines


def _terms(ex: Extraction) -> list[str]:
    t = ex.views["terms"].json
    lines = ["discovered terms (coefficient, inclusion frequency):"]
    for lay in t.get("layers", []):
        parts = []
        for term in lay.get("terms", []):
            coef = term.get("coefficient")
            text = (
                _g(coef) if isinstance(coef, (int, float)) else f"|W| {_g(term.get('frobenius'))}"
            )
            parts.append(f"{term['name']} {text} ({term.get('frequency', 1.0):.2f})")
        fid = lay.get("one_step_fidelity")
        lines.append(f"  L{lay['layer']}: " + "; ".join(parts) + f"   [1-step fid {_g(fid)}]")
    if "run_from_input_mse" in t:
        lines.append(f"  run from the input: MSE {_g(t['run_from_input_mse'])}")
    return lines


def _weights(ex: Extraction) -> list[str]:
    lines = ["weights (sparsified, tau = 1.5 |W|_1 / #entries):"]
    for h in ex.views["weights"].json["heads"]:
        lines.append(
            f"  layer {h['layer']} head {h['head']}: W_QK = {h['W_QK']}   W_VP = {h['W_VP']}"
        )
    return lines


TEXT = {"projection": _projection, "optimum": _optimum, "terms": _terms, "weights": _weights}


def _cell_format(column: str) -> Callable:
    """How a layer-table column is written: R² with the four decimals the verdict quotes (0.9999
    is not 1), everything else by `_g`."""
    if column == "R2":
        return lambda x: "" if x is None or not math.isfinite(x) else f"{x:.4f}"
    return _g


WIDTH = 100  # no printed line is longer


def wrap(lines: list[str], width: int = WIDTH) -> list[str]:
    """Every line at most `width` characters: a longer one continues on lines indented two more
    spaces than its own (tables are laid out to the width before)."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=indent + "  ",
            break_long_words=True,
            break_on_hyphens=False,
        )
    return out


def headline_lines(ex: Extraction) -> list[str]:
    """The verdict in one line (label, family, confidence), then the numbers it rests on."""
    v = ex.verdict
    if not v or "confidence" not in v:
        return []
    named = f"{v['label']} ({v['family']})" if v.get("family") not in (None, v["label"]) else ""
    named = named or v["label"]
    return [f"verdict: {named}, confidence {v['confidence']}", "  " + "; ".join(v["reasons"])]


def readout_lines(ex: Extraction) -> list[str]:
    """The readout the steps are stated in, and the flag when the other sign fits better."""
    info = ex.info
    if not isinstance(info.get("readout"), float):
        return []
    line = readout_text(info["readout"], ex.geometry.samples, info.get("readout_learned", False))
    flag = ex.verdict.get("readout_flag")
    return [line] + ([f"warning: {flag}"] if flag else [])


def render_text(ex: Extraction, name: str = "model") -> str:
    info, net = ex.info, ex.network
    layout = " (sample layout, tokens = rows [x, y])" if ex.geometry.samples else ""
    lines = headline_lines(ex) + readout_lines(ex)
    lines += [
        f"{name}: {info['regime']}{layout}, {plural(info['layers'], 'layer')} x "
        f"{plural(info['heads'], 'head')}, probe batch "
        f"{info['probe_batch']} (seed {info['seed']}); layers 0-based; steps in internal units, "
        "MSE and fidelity in prompt units",
        *([f"architecture: {info['architecture']}"] if info.get("architecture") else []),
        f"held-out MSE {_g(net['mse'])}, "
        f"{against_zero(net['mse'], net['zero_mse'], lambda r: f'{r:.1f}x')}",
        "",
    ]
    table = ex.table()
    with pd.option_context("display.width", WIDTH, "display.max_columns", 40):
        text = table.to_string(
            index=False,
            na_rep="",
            formatters={c: _cell_format(c) for c in table.columns},
            line_width=WIDTH,
        )
        lines += text.replace(" \\\n", "\n").splitlines()
    lines.append("")
    for view, fn in TEXT.items():
        if view in ex.views:
            lines += fn(ex)
            lines.append("")
    if "verdict" in ex.views:
        lines.append("verdict in full: " + ex.views["verdict"].json["model"]["text"])
    for w in ex.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(wrap(lines))


# --- the HTML page -----------------------------------------------------------------------------

UNITS = {  # per-layer table column -> unit shown under its header
    "layer": "0-based",
    "a (act.)": "internal units",
    "c (act.)": "internal units",
    "eta": "dimensionless",
    "gamma": "dimensionless",
    "a (wts)": "internal units",
    "c (wts)": "internal units",
    "fid 1-step": "prompt units",
    "rel 1-step": "ratio",
    "fid e2e": "prompt units",
    "proj. cost %": "% of MSE",
    "R2 design": "fraction",
    "alpha_0": "internal units",
    "gamma (act.)": "internal units",
    "eta (act.)": "internal units",
    "gamma (wts)": "internal units",
    "eta (wts)": "internal units",
    "R2": "fraction",
    "orders": "design form",
    "verdict": "label",
}

TABLE_NOTE = (
    "a, c: EAGLE's A- and C-step of each layer, read from the activations (act.) and from "
    "the weights' projection onto the EAGLE family (wts); eta, gamma: the same steps times the "
    "batch-max ‖A_l‖₂², the paper's normalisation; fid: the Table-1 metric "
    "‖Z_net − Z_EAGLE‖²_F / #entries, one step at a time (1-step) and with EAGLE run from the "
    "input (e2e); rel 1-step: the one-step gap over the layer's own update ‖Z_{l+1} − Z_l‖²; "
    "proj. cost: change of the held-out MSE with only this layer projected onto the EAGLE "
    "family; R2 design: the spectral-filter (design form) fit's R²."
)
SAMPLE_TABLE_NOTE = (
    "Sample layout, GD++'s names (von Oswald et al. 2023). gamma: the layer's data transform, "
    "A, C −= γ A Aᵀ(·) (0 for plain GD; blank in the last layer, whose data never reach the "
    "prediction); eta: its gradient step on the labels, B, D −= η B Aᵀ(·), positive downhill in "
    "the readout's frame (the sign the model reads its prediction with); both read from the "
    "activations (act.) and from the weights' projection onto the isotropic family (wts); rel "
    "1-step: the share of the layer's update one GD++ layer misses (the last layer's on the D "
    "slot, the only block the prediction reads); proj. cost: change of the held-out MSE with "
    "only this layer projected onto GD++; R2: the fit the layer's name rests on; alpha_0: the "
    "order-0 step of the implicit iterate (−η); orders: the design form's essential orders; "
    "verdict: GD, GD++ or preconditioned GD."
)


def _fidelity_note(ex: Extraction) -> str:
    layers = ex.views["fidelity"].json["layers"]
    worst = max(layers, key=lambda lay: lay["one_step"]["total"], default=None)
    if worst is None:
        return ""
    blocks = worst["one_step"]["blocks"]
    block = max(blocks, key=lambda k: blocks[k] if math.isfinite(blocks[k]) else -1.0)
    return (
        f"; here the largest one-step gap is layer {worst['layer']}'s "
        f"({_g(worst['one_step']['total'])}, mostly block {block})"
    )


def _projection_note(ex: Extraction) -> str:
    p = ex.views["projection"].json
    net = p["network_mse"]
    if not net > 0:
        return ""
    return f"; here projecting every layer changes the MSE by {_change(p['projected_mse'], net)}"


def _weights_caption(ex: Extraction) -> str:
    from eagle_probe.plots import network_products

    got = network_products(ex)
    if got is not None and got[2] == "projected":
        return (
            "The products projected onto the EAGLE family (this extraction does not carry the "
            "network's own products): compare the levels of the diagonal blocks across layers."
        )
    return (
        "EAGLE's shape is a scalar times the identity in each square block and zeros across the "
        "dashed A|C boundary: off-diagonal colour inside a block, or colour across the boundary, "
        "is structure EAGLE does not have." + _weights_here(ex)
    )


def _weights_here(ex: Extraction) -> str:
    """This model's heads whose sparsified products are not of EAGLE's plain shape."""
    if "weights" not in ex.views:
        return ""
    heads = ex.views["weights"].json["heads"]
    odd = [
        f"layer {h['layer']} head {h['head']} {name} = {h[name]}"
        for h in heads
        for name in ("W_QK", "W_VP")
        if "dense" in h[name] or "off-diag" in h[name] or h[name].startswith("[[")
    ]
    if not odd:
        return f" Here every head's W_QK and W_VP has that shape ({len(heads)} heads)."
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return " Here: " + "; ".join(odd[:3]) + more + "."


CAPTIONS: dict[str, Callable[[Extraction], str]] = {  # figure name (or its prefix) -> caption
    "weights": _weights_caption,
    "filters": lambda ex: (
        "Where the solid fitted filter and the dashed EAGLE filter part over the dense part of the "
        "eigenvalue rug, the layer does not filter the spectrum as an EAGLE step does; differences "
        "away from the rug are not seen by the data."
    ),
    "fidelity": lambda ex: (
        "Compare each layer's dark all-blocks bar with the black paper line, and read the "
        "one-step panel for which layer and block departs (end to end, one layer's gap is carried "
        "into every later layer)" + _fidelity_note(ex) + "."
    ),
    "attribution": lambda ex: (
        "Tall bars mark the blocks the function depends on; EAGLE uses only the AA block of W_QK "
        "and the AA and CC blocks of W_VP, so a tall bar in another block is computation beyond "
        "EAGLE."
    ),
    "projection_cost": lambda ex: (
        "Bars at the network's dotted line cost nothing, bars near the red zero-predictor line "
        "lose the whole function, and the green bars show what EAGLE itself reaches with fitted "
        "steps" + _projection_note(ex) + "."
    ),
    "verdict_gaps": lambda ex: (
        "A blue bar below the green line is an EAGLE step, and the grey untrained control must sit "
        "well above it for the label to count."
    ),
    "communication": lambda ex: (
        (
            "In the paper's distributed architecture each head reads only its own machine's "
            "block, so everything that crosses machines is a write of W_VP. eagle-distributed "
            "writes nothing into other machines' A/B columns (every red cell 0%) and sends its C/D "
            "result into every other machine's C/D copy (the blue cells); the row labels say how "
            "much the held-out MSE moves when that layer's writes of each kind are zeroed (sent: "
            "a head writes 5% of its ‖W_VP‖² into A/B columns, or zeroing them moves the MSE 2× "
            "or more)."
        )
        if "cross_cd_ablation" in ex.views["communication"].json
        else (
            "eagle-distributed writes nothing into other machines' A/B columns (every cell 0%): a "
            "red cell is a head sending A columns, and the row label says how much the held-out "
            "MSE moves when that layer's cross-machine A writes are zeroed, and when the values "
            "reading other machines' A/B columns are zeroed with them (the whole A channel; sent: "
            "a head reads or writes 5% of its ‖W_VP‖² there, or either ablation moves the MSE 2× "
            "or more). This is distributed-open, whose values read every machine: not the "
            "paper's architecture."
        )
    ),
    "sketch": lambda ex: (
        "A head on a learned sketch α S Sᵀ follows the dashed step (flat at 1 for r values, "
        "then 0); a sloping curve is a rank-r W_QK that is not a scaled projector, and a span of "
        "n means the heads together see every direction of A (the centralized family)."
    ),
    "terms": lambda ex: _terms_caption(ex),
}


def _terms_caption(ex: Extraction) -> str:
    """What the terms figure should show for this model: its families' own terms."""
    fams = ex.views["terms"].json.get("family_terms") or {
        "eagle": ["A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC"]
    }
    listed = "; ".join(f"{name}: {', '.join(terms)}" for name, terms in fams.items())
    text = (
        "Dark cells are terms selected in almost every bag, the number the refitted "
        "coefficient (matrix coefficients print none). A layer running one of the regime's "
        f"families has that family's terms dark and nothing else ({listed})"
    )
    if any("@local" in t for terms in fams.values() for t in terms):
        text += "; @local sums over machines with each machine's own Gram A^μ A^μᵀ"
    if any("@sketch" in t for terms in fams.values() for t in terms):
        text += "; @sketch puts the layer's sketch projector P on the A blocks"
    return text + "." + _terms_here(ex)


def _terms_here(ex: Extraction) -> str:
    """What this model's terms figure shows: the family's terms with scalar or matrix
    coefficients, and the terms beyond it, by layer."""
    if ex.geometry.samples:
        return ""
    from eagle_probe.fit import families
    from eagle_probe.fit.verdict import term_kinds

    fam = families.of_geometry(ex.geometry)
    extra, matrix = term_kinds(ex.views["terms"].json, fam)

    def where(items: list) -> str:
        shown = [f"{name} (layer {', '.join(map(str, ls))})" for name, ls in items[:4]]
        return ", ".join(shown) + (f" and {len(items) - 4} more" if len(items) > 4 else "")

    parts = []
    if matrix:
        parts.append(f"{fam.name}'s terms are selected with matrix coefficients: {where(matrix)}")
    if extra:
        parts.append(f"terms {fam.name} does not have: {where(extra)}")
    if not parts:
        return f" Here {fam.name}'s terms and nothing else are selected."
    return " Here " + "; ".join(parts) + "."


SAMPLE_CAPTIONS: dict[str, Callable[[Extraction], str]] = {  # the sample layout's own readings
    "weights": lambda ex: (
        "Rows [x, y] of the prompt: X the d features, Y the labels. GD is W_QK = diag(q I, 0) with "
        "W_VP's YY block the step η; GD++ adds a scalar XX block to W_VP (the data transform γ); "
        "preconditioned GD has a non-scalar XX block in W_QK."
    ),
    "filters": lambda ex: (
        "The solid filter fitted to each layer's update of the implicit iterate against the "
        "dashed η_l m_l(λ)² that GD++'s steps, read from the activations, imply; where the two "
        "part over the eigenvalue rug of the probes, the layer is not a GD++ step."
    ),
    "fidelity": lambda ex: (
        "The gap to one GD++ layer with the fitted steps, per block, one step at a time and run "
        "from the input (the paper has no numbers for this layout)" + _fidelity_note(ex) + "."
    ),
    "attribution": lambda ex: (
        "Tall bars mark the blocks the function depends on; GD and GD++ use W_QK's XX block and "
        "W_VP's YY block (GD++ also W_VP's XX block in every layer but the last, whose data "
        "never reach the prediction), so a tall bar in XY or YX is computation beyond them."
    ),
    "projection_cost": lambda ex: (
        "Bars at the network's dotted line cost nothing; the green bars show the best GD++ "
        "steps" + _projection_note(ex) + "."
    ),
    "verdict_gaps": lambda ex: (
        "How much of each layer's update one GD++ layer with the fitted steps misses (the last "
        "layer's on the D slot, the only block the prediction reads), against the untrained "
        "control; the label is the layer's name: GD, GD++ or preconditioned GD."
    ),
    "terms": lambda ex: (
        "Dark cells are terms selected in almost every bag, written in the blocks of Z: GD is "
        "B+=BAtA and D+=BAtC, GD++ adds A+=AAtA and C+=AAtC, preconditioned GD has "
        "B+=BAt*W*A and D+=BAt*W*C."
    ),
}


def caption(name: str, ex: Extraction) -> str:
    """The one-sentence caption of figure `name` (its longest registered prefix decides)."""
    table = SAMPLE_CAPTIONS if ex.geometry.samples else CAPTIONS
    keys = [k for k in table if name == k or name.startswith(k + "_") or name.startswith(k)]
    if not keys:
        return ""
    return table[max(keys, key=len)](ex)


def png_bytes(fig) -> bytes:
    """A matplotlib Figure as PNG bytes (no pyplot, any backend)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _draw(ex: Extraction, views: list[str]) -> dict[str, dict[str, bytes]]:
    """PNG bytes of the figures of `views`, built and drawn here: {view: {figure: PNG}}."""
    from eagle_probe.plots import view_figures

    return {v: {k: png_bytes(fig) for k, fig in view_figures(ex, v).items()} for v in views}


def figure_pngs(ex: Extraction) -> dict[str, bytes]:
    """Every figure of `ex` as PNG bytes, in the order of `plots.extraction_figures`, each view's
    figures built and drawn in turn."""
    from eagle_probe.plots import figure_views

    drawn = _draw(ex, figure_views(ex))
    return {name: png for figs in drawn.values() for name, png in figs.items()}


LABEL_CLASS = {"EAGLE": "eagle", "EAGLE-like": "eagle-like", "not EAGLE": "not-eagle"}

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1200px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
.meta { color: #555; margin-top: 0; }
.verdict { border-left: 6px solid #888; background: #f6f6f6; padding: 0.6em 1em; }
.verdict.eagle { border-color: #2a9d2a; } .verdict.eagle-like { border-color: #e69500; }
.verdict.not-eagle { border-color: #c62828; }
.label { font-weight: bold; }
.warnings li { color: #8a4b00; }
table { border-collapse: collapse; font-size: 0.88em; font-variant-numeric: tabular-nums; }
td.eagle { color: #1b7a1b; font-weight: bold; } td.eagle-like { color: #a86a00; font-weight: bold; }
td.not-eagle { color: #b71c1c; font-weight: bold; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.45em; text-align: right; white-space: nowrap; }
th { background: #eee; } th .unit { display: block; font-weight: normal; color: #666;
  font-size: 0.85em; }
.scroll { overflow-x: auto; } .note { font-size: 0.85em; color: #555; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto;
  border: 1px solid #ddd; }
figcaption { font-size: 0.92em; color: #333; margin-top: 0.3em; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
"""


def _table_html(ex: Extraction) -> str:
    e = html.escape
    table = ex.table()
    head = "".join(
        f'<th scope="col">{e(str(c))}<span class="unit">{e(UNITS.get(str(c), ""))}</span></th>'
        for c in table.columns
    )
    rows = []
    for record in table.itertuples(index=False):
        cells = []
        for column, v in zip(table.columns, record, strict=True):
            text = v if isinstance(v, str) else _cell_format(column)(v)
            css = f' class="{LABEL_CLASS[v]}"' if column == "verdict" and v in LABEL_CLASS else ""
            cells.append(f"<td{css}>{e(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def render_html(ex: Extraction, name: str, figures: dict[str, bytes]) -> str:
    """The report page: verdict, warnings, per-layer table, figures (PNG bytes, embedded)."""
    e = html.escape
    info, net = ex.info, ex.network
    verdict = ex.verdict
    label = verdict.get("label", "")
    css = LABEL_CLASS.get(label, "")
    below = against_zero(net["mse"], net["zero_mse"], lambda r: f"{r:.1f}×")
    meta = (
        f"{info['regime']} regime, {plural(info['layers'], 'layer')} "
        f"× {plural(info['heads'], 'head')}, "
        f"n = {info['n']}, d = {info['d']}, n′ = {info['n_prime']}, d′ = {info['d_prime']}; "
        f"probe batch {info['probe_batch']}, {info.get('held_out_prompts', '?')} held-out prompts, "
        f"seed {info['seed']}. Held-out MSE {_g(net['mse'])}, {below}. Layers are 0-based; "
        f"{info.get('units', '')}."
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>eagle-probe report: {e(name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Which algorithm does <code>{e(name)}</code> run?</h1>",
        f'<p class="meta">{e(meta)}</p>',
    ]
    if verdict:
        head = ""
        if "headline" in verdict:  # label, family, confidence and the numbers it rests on
            head = f'<p class="headline"><strong>{e(verdict["headline"])}</strong></p>'
        parts.append(
            f'<section class="verdict {e(css)}" id="verdict">{head}<p><span class="label">'
            f"Verdict: {e(label)}.</span> {e(verdict.get('text', ''))}</p></section>"
        )
    else:
        parts.append('<section class="verdict" id="verdict"><p>No verdict view ran.</p></section>')
    warnings = ex.warnings
    parts.append(f'<section id="warnings"><h2>Warnings ({len(warnings)})</h2>')
    if warnings:
        parts.append(
            '<ul class="warnings">' + "".join(f"<li>{e(w)}</li>" for w in warnings) + "</ul>"
        )
    else:
        parts.append("<p>None.</p>")
    parts.append("</section>")
    parts.append('<section id="layers"><h2>Per layer</h2>')
    parts.append(_table_html(ex))
    note = SAMPLE_TABLE_NOTE if ex.geometry.samples else TABLE_NOTE
    parts.append(f'<p class="note">{e(note)}</p></section>')
    parts.append('<section id="figures"><h2>Figures</h2>')
    for k, (fig_name, png) in enumerate(figures.items(), start=1):
        data = base64.b64encode(png).decode("ascii")
        text = caption(fig_name, ex)
        parts.append(
            f'<figure id="fig-{e(fig_name)}"><img src="data:image/png;base64,{data}" '
            f'alt="{e(fig_name)}"><figcaption><b>Figure {k} ({e(fig_name)}).</b> '
            f"{e(text)}</figcaption></figure>"
        )
    parts.append("</section>")
    parts.append(
        "<details><summary>The text report (as printed by <code>eagle-probe extract</code>)"
        f"</summary><pre>{e(render_text(ex, name))}</pre></details>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(ex: Extraction, out_dir: Path, name: str) -> list[Path]:
    """Write `out_dir/report.html` (self-contained: figures embedded as PNG data URIs, no external
    CSS or JavaScript) and each figure as `out_dir/<figure>.png`; return the paths written.

    `name` (e.g. the checkpoint path) only appears, escaped, in the page's text. `out_dir` must be
    an existing directory; nothing is written outside it."""
    from eagle_probe.checkpoint import atomic_write_bytes, atomic_write_text

    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise EagleProbeError(f"report directory {out_dir} does not exist or is not a directory")
    figures = figure_pngs(ex)
    written = []
    for fig_name, png in figures.items():
        path = out_dir / f"{fig_name}.png"
        atomic_write_bytes(path, lambda handle, png=png: handle.write(png))
        written.append(path)
    page = out_dir / "report.html"
    atomic_write_text(page, render_html(ex, name, figures))
    return [page, *written]
