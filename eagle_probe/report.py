"""What an extraction looks like to a reader: the text the CLI prints, the figures, the HTML page.

Everything loops over the views (`fit.VIEWS`): a view registered with a text renderer adds its
lines to the text report (in `fit.TEXT_ORDER`); a view registered with figures adds them to the
page (`eagle_probe.plots.view_figures`, in `fit.FIGURE_ORDER`), each under its caption.
"""

from __future__ import annotations

import base64
import html
import inspect
import io
import math
import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from eagle_probe import fit
from eagle_probe.errors import EagleProbeError
from eagle_probe.fit.base import Extraction
from eagle_probe.wording import against_zero, number, plural, readout_text, tails_text


def _cell_format(column: str) -> Callable:
    """How a layer-table column is written: R² with the four decimals the verdict quotes (0.9999
    is not 1), everything else by `wording.number`."""
    if column == "R2":
        return lambda x: "" if x is None or not math.isfinite(x) else f"{x:.4f}"
    return number


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


INTERVAL_COLUMNS = ("eta 95%", "gamma 95%")


def interval_line(table: pd.DataFrame) -> str:
    """The steps' 95% intervals over the probe prompts, one line: "95% intervals over the probe
    prompts: L0 eta 0.909 to 0.913, gamma 0.994 to 1; …" ("" without them)."""
    if not all(c in table for c in INTERVAL_COLUMNS):
        return ""
    parts = [
        f"L{int(r['layer'])} eta {r['eta 95%'] or 'none'}, gamma {r['gamma 95%'] or 'none'}"
        for r in table.to_dict("records")
    ]
    return "95% intervals over the probe prompts (bootstrap): " + "; ".join(parts)


def render_text(ex: Extraction, name: str = "model") -> str:
    info, net = ex.info, ex.network
    layout = " (sample layout, tokens = rows [x, y])" if ex.geometry.samples else ""
    lines = headline_lines(ex) + readout_lines(ex)
    tail = tails_text(net)  # its median, trimmed mean, share of prompts worse than zero
    lines += [
        f"{name}: {info['regime']}{layout}, {plural(info['layers'], 'layer')} x "
        f"{plural(info['heads'], 'head')}, probe batch "
        f"{info['probe_batch']} (seed {info['seed']}); layers 0-based; steps in internal units, "
        "MSE and fidelity in prompt units",
        *([f"architecture: {info['architecture']}"] if info.get("architecture") else []),
        f"held-out MSE {number(net['mse'])}{f' ({tail})' if tail else ''}, "
        f"{against_zero(net['mse'], net['zero_mse'], spec='.1f', mark='x')}",
        "",
    ]
    table = ex.table()
    # the steps' intervals as a line under the table: two more columns would wrap it
    intervals = interval_line(table)
    table = table.drop(columns=[c for c in INTERVAL_COLUMNS if c in table])
    with pd.option_context("display.width", WIDTH, "display.max_columns", 40):
        text = table.to_string(
            index=False,
            na_rep="",
            formatters={c: _cell_format(c) for c in table.columns},
            line_width=WIDTH,
        )
        lines += text.replace(" \\\n", "\n").splitlines()
    lines += [intervals] if intervals else []
    lines.append("")
    for view in fit.shown("text"):
        if view in ex.views:
            lines += fit.VIEWS[view].text(ex)
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
    "eta 95%": "over probe prompts",
    "gamma 95%": "over probe prompts",
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
    "batch-max ‖A_l‖₂², the paper's normalisation; eta 95%, gamma 95%: their 95% bootstrap "
    "intervals over the probe prompts (a resample's max ‖A_l‖₂ is never above the batch's, so "
    "an interval reaches little above its step); fid: the Table-1 metric "
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


def caption(name: str, ex: Extraction) -> str:
    """The caption of figure `name`: of the captions the views registered, that of the longest
    figure name (or start of names) `name` begins with. A caption that takes a second argument is
    given the figure's name, so that each of a view's figures (`weights_layer0`, …) has its own."""
    if name == "training":
        return training_caption(ex)
    table = {k: fn for spec in fit.VIEWS.values() for k, fn in spec.captions.items()}
    keys = [k for k in table if name.startswith(k)]
    if not keys:
        return ""
    fn = table[max(keys, key=len)]
    return fn(ex, name) if len(inspect.signature(fn).parameters) > 1 else fn(ex)


def training_caption(ex: Extraction) -> str:
    """The training figure's caption, with the kept step and the spikes of this checkpoint."""
    t = ex.training
    history = t["history"]
    last = history[-1]
    kept = next((h for h in history if h["step"] == t.get("best_step")), None)
    where = (
        f"; the weights kept are step {t['best_step']}'s (held-out mean {number(kept['val_mse'])}, "
        f"median {number(kept.get('val_median'))})"
        if kept is not None
        else ""
    )
    spikes = t.get("spike_count", len(t.get("spikes") or []))
    return (
        f"The checkpoint's own record of {t.get('steps_done', last['step'])} training steps: the "
        f"held-out mean, trimmed mean and median MSE at each evaluation and the training loss; "
        f"red crosses mark the {spikes} batches whose loss spiked (the paper ties spikes to "
        f"prompts with a large ‖A‖₂){where}."
    )


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
    out = {}
    if getattr(ex, "training", None):  # the training curve first, beside the verdict
        from eagle_probe.plots import training_curve

        out["training"] = png_bytes(training_curve(ex.training))
    return out | {name: png for figs in drawn.values() for name, png in figs.items()}


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


def _meta(ex: Extraction) -> str:
    """The model, the probes and the held-out MSE with its tail against the zero predictor, in one
    line."""
    info, net = ex.info, ex.network
    below = against_zero(net["mse"], net["zero_mse"], spec=".1f")
    tail = tails_text(net)  # the mean alone hides its tail
    return (
        f"{info['regime']} regime, {plural(info['layers'], 'layer')} "
        f"× {plural(info['heads'], 'head')}, "
        f"n = {info['n']}, d = {info['d']}, n′ = {info['n_prime']}, d′ = {info['d_prime']}; "
        f"probe batch {info['probe_batch']}, {info.get('held_out_prompts', '?')} held-out prompts, "
        f"seed {info['seed']}. Held-out MSE {number(net['mse'])}"
        f"{f' ({tail})' if tail else ''}, {below}. Layers are 0-based; "
        f"{info.get('units', '')}."
    )


def render_html(ex: Extraction, name: str, figures: dict[str, bytes]) -> str:
    """The report page: verdict, warnings, per-layer table, figures (PNG bytes, embedded)."""
    e = html.escape
    verdict = ex.verdict
    label = verdict.get("label", "")
    css = LABEL_CLASS.get(label, "")
    meta = _meta(ex)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>eagle-probe report: {e(name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Which algorithm does <code>{e(name)}</code> run?</h1>",
    ]
    # one screen: the verdict in three lines, the contents, the per-layer table; the verdict's
    # paragraph, the warnings and the figures after it
    warnings = ex.warnings
    if verdict:
        lines = headline_lines(ex)
        first = lines[0][:1].upper() + lines[0][1:] if lines else ""  # "Verdict: EAGLE (…), …"
        head = [f'<p class="headline"><strong>{e(first)}</strong></p>'] if lines else []
        if len(lines) > 1:
            head.append(f'<p class="reasons">{e(lines[1].strip())}</p>')
        if not head:
            head = [f'<p><span class="label">Verdict: {e(label)}.</span></p>']
    else:
        head = ["<p>No verdict view ran.</p>"]
    count = f'<a href="#warnings">{e(plural(len(warnings), "warning"))}</a>'
    head.append(f'<p class="meta">{e(meta)} {count}.</p>')
    parts.append(f'<section class="verdict {e(css)}" id="verdict">{"".join(head)}</section>')
    parts.append(_contents(figures, bool(verdict)))
    parts.append('<section id="layers"><h2>Per layer</h2>')
    parts.append(_table_html(ex))
    note = SAMPLE_TABLE_NOTE if ex.geometry.samples else TABLE_NOTE
    parts.append(f'<p class="note">{e(note)}</p></section>')
    if verdict:
        parts.append(
            '<section id="verdict-text"><h2>The verdict in full</h2><p><span class="label">'
            f"Verdict: {e(label)}.</span> {e(verdict.get('text', ''))}</p></section>"
        )
    parts.append(f'<section id="warnings"><h2>Warnings ({len(warnings)})</h2>')
    if warnings:
        parts.append(
            '<ul class="warnings">' + "".join(f"<li>{e(w)}</li>" for w in warnings) + "</ul>"
        )
    else:
        parts.append("<p>None.</p>")
    parts.append("</section>")
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
        '<details id="text"><summary>The text report (as printed by <code>eagle-probe extract'
        "</code>)"
        f"</summary><pre>{e(render_text(ex, name))}</pre></details>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _contents(figures: dict[str, bytes], verdict: bool) -> str:
    """The page's table of contents, one line: its sections and every figure by name."""
    e = html.escape
    links = [("layers", "Per layer")]
    links += [("verdict-text", "The verdict in full")] if verdict else []
    links += [("warnings", "Warnings"), ("figures", "Figures")]
    items = [f'<a href="#{k}">{e(t)}</a>' for k, t in links]
    items += [f'<a href="#fig-{e(n)}">{e(n)}</a>' for n in figures]
    items.append('<a href="#text">text report</a>')
    return f'<nav id="contents"><p><b>Contents:</b> {" · ".join(items)}</p></nav>'


# the page's look inside a notebook cell: every rule under the fragment's own class, so nothing
# of the notebook's own page changes
NOTEBOOK_STYLE = """
.eagle-probe .verdict { border-left: 6px solid #888; padding: 0.4em 0.8em; margin: 0.4em 0; }
.eagle-probe .verdict.eagle { border-color: #2a9d2a; }
.eagle-probe .verdict.eagle-like { border-color: #e69500; }
.eagle-probe .verdict.not-eagle { border-color: #c62828; }
.eagle-probe .meta, .eagle-probe .note { color: #555; font-size: 0.9em; }
.eagle-probe table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.eagle-probe th, .eagle-probe td { border: 1px solid #ccc; padding: 0.2em 0.4em;
  text-align: right; white-space: nowrap; }
.eagle-probe th .unit { display: block; font-weight: normal; color: #666; font-size: 0.85em; }
.eagle-probe td.eagle { color: #1b7a1b; font-weight: bold; }
.eagle-probe td.eagle-like { color: #a86a00; font-weight: bold; }
.eagle-probe td.not-eagle { color: #b71c1c; font-weight: bold; }
.eagle-probe .scroll { overflow-x: auto; }
.eagle-probe .warnings li { color: #8a4b00; }
"""


def notebook_html(ex: Extraction) -> str:
    """An extraction as Jupyter shows it (`Extraction._repr_html_`): the verdict's headline (the
    label, its family, the confidence and the numbers it rests on), the model and its held-out
    MSE, the warnings and the per-layer table with its units. An HTML fragment with its style
    scoped to it, no script and nothing loaded from outside; the figures are on the page
    `write_report` writes."""
    e = html.escape
    verdict = ex.verdict
    label = verdict.get("label", "")
    if not verdict:
        head = "No verdict view ran."
    elif "headline" in verdict:
        head = verdict["headline"]
    else:
        head = (headline_lines(ex) or [f"Verdict: {label}."])[0]
    parts = [
        f'<div class="eagle-probe"><style>{NOTEBOOK_STYLE}</style>',
        f'<div class="verdict {e(LABEL_CLASS.get(label, ""))}"><strong>{e(head)}</strong></div>',
        f'<p class="meta">{e(_meta(ex))}</p>',
    ]
    warnings = ex.warnings
    if warnings:
        items = "".join(f"<li>{e(w)}</li>" for w in warnings)
        parts.append(f"<details><summary>Warnings ({len(warnings)})</summary>")
        parts.append(f'<ul class="warnings">{items}</ul></details>')
    parts.append(_table_html(ex))
    note = SAMPLE_TABLE_NOTE if ex.geometry.samples else TABLE_NOTE
    parts.append(f'<details class="note"><summary>The columns</summary>{e(note)}</details>')
    parts.append("</div>")
    return "\n".join(parts)


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
