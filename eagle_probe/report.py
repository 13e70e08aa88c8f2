"""What an extraction looks like to a reader: the text the CLI prints, the figures, the HTML page.

Everything loops over the views: a view with a renderer in `TEXT` adds lines to the text report; a
view with a figure function in `eagle_probe.plots.VIEW_FIGURES` adds figures to the page.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from eagle_probe.extract import Extraction


def _g(x, digits: int = 3) -> str:
    """A number for the screen: never more than ~9 characters, never above 1e6 unscaled."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, str):
        return x
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e6:  # the table never shows a number above 1e6; JSON keeps the value
        return ">1e6" if x > 0 else "<-1e6"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _projection(ex: Extraction) -> list[str]:
    p = ex.views["projection"].json
    net, pm = p["network_mse"], p["projected_mse"]
    change = (pm / net - 1) * 100 if net > 0 else math.nan
    return [
        f"projection onto the {p['family']} EAGLE family: MSE {_g(net)} -> {_g(pm)} "
        f"({change:+.1f}%); per layer alone: "
        + ", ".join(f"L{lay['layer']} {(lay['mse'] / net - 1) * 100:+.1f}%" for lay in p["layers"])
    ]


def _optimum(ex: Extraction) -> list[str]:
    o = ex.views["optimum"].json
    net = o["network_mse"]
    lines = [
        f"best EAGLE ({len(o['optimal']['a_steps'])} layers, steps by Levenberg-Marquardt from the "
        f"weight-read steps, {o['tuning_prompts']} tuning prompts):",
    ]
    for name in ("optimal", "distilled"):
        f = o[name]
        lines.append(
            f"  {name:9s} MSE {_g(f['mse'])} ({f['mse'] / net:.2f}x network)  "
            f"a = [{', '.join(_g(v) for v in f['a_steps'])}]  "
            f"c = [{', '.join(_g(v) for v in f['c_steps'])}]  "
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
            text = _g(coef) if isinstance(coef, (int, float)) else f"|W| {_g(term.get('norm'))}"
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


def render_text(ex: Extraction, name: str = "model") -> str:
    info, net = ex.info, ex.network
    lines = [
        f"{name}: {info['regime']}, {info['layers']} layers x {info['heads']} head(s), probe batch "
        f"{info['probe_batch']} (seed {info['seed']}); layers 0-based; steps in internal units, "
        "MSE and fidelity in prompt units",
        f"held-out MSE {_g(net['mse'])} (zero predictor {_g(net['zero_mse'])}, "
        f"{net['zero_mse'] / net['mse']:.1f}x below it)"
        if net["mse"] > 0
        else f"held-out MSE {_g(net['mse'])}",
        "",
    ]
    table = ex.table()
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        lines.append(
            table.to_string(index=False, na_rep="", formatters={c: _g for c in table.columns})
        )
    lines.append("")
    for view, fn in TEXT.items():
        if view in ex.views:
            lines += fn(ex)
            lines.append("")
    if "verdict" in ex.views:
        lines.append("verdict: " + ex.views["verdict"].json["model"]["text"])
    for w in ex.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
