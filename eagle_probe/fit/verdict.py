"""The verdict: per layer a label from stated thresholds, per model one paragraph.

Every label below is a row of one rule table, `fit.rules.RULES` (the same table in
docs/extraction-schema.md): in each scope the first rule whose condition holds decides, the JSON
names it (`rule`) and the paragraph quotes it, so the label and every sentence read the same
numbers. Every ratio is stated with the network first (its MSE over its family's optimum's), and
every number is written by `eagle_probe.wording`.

A layer is
- "EAGLE" when it leaves the stream exactly as it was (one EAGLE step with a = c = 0; its
  relative gap is 0 / 0), or when one EAGLE step reproduces it (relative one-step gap ≤
  EAGLE_GAP) and the untrained control is clearly worse (its relative gap ≥ CONTROL_FACTOR × the
  layer's);
- "EAGLE-like" when the gap is ≤ LIKE_GAP, again with the control clearly worse: most of the
  layer's update is an EAGLE step, and the blocks that depart are named;
- "not EAGLE" otherwise.
Every layer is labelled in the family the views read (`fit.families`, chosen and reported by
view `eagle`: the paper's family of the regime unless another admitted family explains the
layers clearly better). The model is
- "EAGLE" when every layer is, or when every layer is at least EAGLE-like and projecting every
  layer's weights onto the family changes the held-out MSE by at most PROJECTION_COST;
- "EAGLE-like" when every layer is at least EAGLE-like and the projection at most doubles the
  MSE (LIKE_PROJECTION_COST);
- "not EAGLE" otherwise, and before any of these when the layers are co-adapted: a whole-model
  projection that is cheap (≤ LIKE_PROJECTION_COST) while a layer projected alone costs more is
  not running the family, whatever the layers' one-step gaps. Also "not EAGLE" whatever
  its layers when it is not clearly better than the zero predictor (its held-out MSE without
  the worst 0.1% of prompts above ZERO_FRACTION of the zero predictor's: `working`) or than its
  untrained control, and (distributed) when it reads as the
  paper's eagle-distributed while view `communication` finds it sending A columns between
  machines. `model.family` names the family a label claims (None for "not EAGLE"),
  `model.read_as` the family the views read.

Sample layout (`sample_verdict`): the algorithms of the in-context-learning literature instead.
Each layer takes the algorithm view's name ("GD", "GD++", "preconditioned GD", "polynomial" or
"unrecognised", fitted to the implicit iterate, or from the stream for a layer that only
transforms the data); the model is named by the most general layer: "preconditioned GD" if any
layer is, else "GD++" if any layer is, else "polynomial" if any layer is, else "GD";
"unrecognised" if any layer is unexplained or the model is not clearly better than the zero
predictor. Every layer carries GD++'s γ (data transform) and η (step, the readout's frame) read
from the activations and from the weights; where the two differ by more than AGREE the text says
which to trust and why. The confidence rests on the numbers the layer table prints (the R² of
each name's fit, the activations against the weights). The family's one-step gap (views `eagle`,
`fidelity`; the last layer's on the D slot), the projection's cost and the discovered terms that
carry at least TERM_SHARE of their block's update are quoted beside it. In both layouts the
readout sign is checked on the held-out prompts (`readout_check`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from eagle_probe import drawing as draw
from eagle_probe import regimes
from eagle_probe.fit import families
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register
from eagle_probe.fit.rules import (  # the rule table; its thresholds are the verdict's
    CONTROL_FACTOR,
    EAGLE_GAP,
    LIKE_GAP,
    LIKE_PROJECTION_COST,
    PROJECTION_COST,
    THRESHOLDS,
    USED_BLOCK,
    ZERO_FRACTION,
    Rule,
    decide,
)
from eagle_probe.wording import (
    BREAKS,  # a projection that raises the MSE more than 1000% breaks the model
    against_zero,
    change,
    percent,
    plural,
    ratio,
    readout_flag,
    readout_hint,
    times,
    value,
)

_fmt = value  # a number for a sentence ("skipped" for a view that did not run)


def _control_layers(ctx: Context) -> list[dict] | None:
    """The untrained control's fidelity per layer, or None where the control was skipped."""
    if ctx.control is None or "fidelity" not in ctx.control.results:
        return None
    return ctx.control.results["fidelity"].json["layers"]


def _control_gap(ctrl: list[dict] | None, layer: int) -> float | None:
    """The control's relative one-step gap at `layer`: None (null, "skipped") without a control."""
    return None if ctrl is None else ctrl[layer]["one_step"]["relative"]


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _cost(cost: float) -> str:
    """A relative MSE change as a percentage, or "breaks the model (×N)" above 1000%
    (`wording.change`)."""
    if not math.isfinite(cost):
        return "breaks the model (non-finite MSE)"
    if cost > BREAKS:
        return f"breaks the model ({times(cost + 1, prefix=True)})"
    return percent(cost)


def _share(x: float, digits: int = 1) -> str:
    """A non-negative fraction as a percentage ("0.42%"; `wording.percent` without a sign)."""
    return percent(x, digits=digits, signed=False)


def _costs(cost: float) -> str:
    """`_cost` as a predicate: "costs +3.0%" or "breaks the model (×N)"."""
    text = _cost(cost)
    return text if text.startswith("breaks") else f"costs {text}"


def layer_labels(ctx: Context) -> list[dict]:
    """Each layer's label by the "layer" rules of RULES, with the numbers they read."""
    fid = ctx.results["fidelity"].json["layers"]
    proj = ctx.results.get("projection")
    ctrl = _control_layers(ctx)
    out = []
    for layer, f in enumerate(fid):
        gap = f["one_step"]["relative"]
        cost = float("nan")
        if proj is not None and proj.json["network_mse"] > 0:
            # the projection's own prompts (fewer than all held-out ones for large models)
            cost = proj.json["layers"][layer]["mse"] / proj.json["network_mse"] - 1.0
        control_gap = _control_gap(ctrl, layer)
        separated = not _finite(control_gap) or control_gap >= CONTROL_FACTOR * gap
        # 0 / 0: the layer's update is exactly zero and so is the gap of EAGLE's fitted step
        idle = math.isnan(gap) and f["one_step"]["total"] == 0.0
        rule = decide("layer", {"idle": idle, "gap": gap, "separated": separated})
        blocks = f["one_step"]["relative_blocks"]
        off = [k for k, v in blocks.items() if math.isfinite(v) and v > 10 * EAGLE_GAP]
        out.append(
            {
                "layer": layer,
                "label": rule.label,
                "rule": rule.name,  # the row of RULES that gave the label
                "one_step_relative": gap,
                "projection_cost": cost,
                "control_relative": control_gap,
                "departing_blocks": off,
            }
        )
    return out


EAGLE_BLOCKS = {("W_QK", "AA"), ("W_VP", "AA"), ("W_VP", "CC")}
BLOCK_MEANING = {
    ("W_QK", "AC"): "query A/B features against key C features",
    ("W_QK", "CA"): "query C/D features against key A features",
    ("W_QK", "CC"): "query C/D features against key C features",
    ("W_VP", "AC"): "values' A features written into the C/D columns",
    ("W_VP", "CA"): "values' C features written into the A/B columns",
}


def off_family_blocks(ctx: Context) -> list[dict]:
    """Blocks outside EAGLE's (centralized) shape whose removal everywhere multiplies the MSE by
    at least USED_BLOCK, largest effect first."""
    att = ctx.results.get("attribution")
    if att is None or regimes.get(ctx.geometry.regime).families[0] != "eagle":
        return []
    used = [
        b
        for b in att.json["everywhere"]
        if (b["product"], b["block"]) not in EAGLE_BLOCKS
        and (not math.isfinite(b["ratio"]) or b["ratio"] >= USED_BLOCK)
    ]
    return sorted(used, key=lambda b: -b["ratio"] if math.isfinite(b["ratio"]) else -math.inf)


EAGLE_TERMS = ("A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC")


def base_name(name: str) -> str:
    """The block pattern of a term name without its free-matrix marks: A+=A*W*AtA → A+=AAtA."""
    return name.replace("W", "").replace("*", "")


def term_kinds(terms_json: dict, family: families.Family | None = None) -> tuple[list, list]:
    """(terms the family does not have, its terms with a matrix coefficient), each as
    [(name, [layers])] in order of first appearance; stable terms only (frequency ≥ 0.5).
    The family's terms are read per layer (`Family.terms` of the regime terms the layer's
    library held); default: EAGLE's four."""
    extra: dict[str, list[int]] = {}
    matrix: dict[str, list[int]] = {}
    for lay in terms_json.get("layers", []):
        own = family.terms(tuple(lay.get("regime_terms", ()))) if family else EAGLE_TERMS
        for t in lay.get("terms", []):
            if t.get("frequency", 1.0) < 0.5:
                continue
            name = t["name"]
            if base_name(name) not in own:
                extra.setdefault(name, []).append(lay["layer"])
            elif name not in own:
                matrix.setdefault(name, []).append(lay["layer"])
    return list(extra.items()), list(matrix.items())


def _below_zero(net: float, zero: float) -> str:
    """How far the MSE is below the zero predictor's, or that it is not below it
    (`wording.against_zero`)."""
    return against_zero(net, zero)


def working(ctx: Context) -> bool:
    """Whether the network is clearly better than the zero predictor (rule
    `no_better_than_zero`): its held-out MSE without the worst 0.1% of prompts
    (`Context.working_mse`) finite and at most ZERO_FRACTION × the zero predictor's. One prompt
    whose error explodes moves the mean by orders of magnitude (constrained.pt: one prompt of
    4,096 at 939 on `extract --seed 13`), never this."""
    mse = ctx.working_mse
    return math.isfinite(mse) and mse <= ZERO_FRACTION * ctx.zero_mse


def _zero_read(ctx: Context) -> tuple[float, str]:
    """The MSE the zero-predictor test is quoted with and its name: the mean ("MSE") where it
    falls on the same side of ZERO_FRACTION × the zero predictor's as the 0.1%-trimmed mean the
    test reads, else the trimmed one ("0.1%-trimmed MSE")."""
    net = ctx.network_mse
    same = (math.isfinite(net) and net <= ZERO_FRACTION * ctx.zero_mse) == working(ctx)
    return (net, "MSE") if same else (ctx.working_mse, "0.1%-trimmed MSE")


def _tail_sentence(ctx: Context) -> str | None:
    """A sentence where the worst prompts alone decide the zero-predictor test (the mean and the
    0.1%-trimmed mean on different sides of it); None elsewhere."""
    if _zero_read(ctx)[1] == "MSE":
        return None
    t = ctx.network_tails
    return (
        f"The 0.1%-trimmed held-out MSE, without its worst {plural(t['trimmed_prompts'], 'prompt')}"
        f" of {t['prompts']} (the worst at {_fmt(t['worst_mse'])}), is {_fmt(ctx.working_mse)} "
        f"({_below_zero(ctx.working_mse, ctx.zero_mse)}): the zero-predictor test reads it, as "
        "those prompts alone carry the mean across the test's bound."
    )


def _families_sentence(scored: dict[str, dict], fam) -> str | None:
    """The scores of every family the regime admits and why the views read `fam`; None when the
    regime admits one family."""
    others = [name for name in scored if name != fam.name]
    if not others:
        return None
    return (
        "Every family the regime admits was scored (prediction gap of the weight projection, "
        "mean one-step residual): "
        + "; ".join(
            f"{name} {_fmt(sc.get('prediction_gap', math.nan))}, {_fmt(sc['one_step_residual'])}"
            for name, sc in scored.items()
        )
        + f". The views read {fam.name}"
        + (
            " (the paper's family of the regime; no other reproduces the network clearly better)."
            if fam.name == next(iter(scored))
            else f", which reproduces the network clearly better than the paper's "
            f"{next(iter(scored))}; {fam.name} sends {fam.sends}."
        )
    )


def _layer_sentence(lay: dict) -> str:
    """A layer's label, one-step gap, control gap, projection cost and departing blocks."""
    where = ""
    if lay["departing_blocks"]:
        where = f"; departs in block(s) {', '.join(lay['departing_blocks'])}"
    if lay.get("rule") == "idle":
        return (
            f"Layer {lay['layer']}: {lay['label']} (it leaves the stream exactly as it was, one "
            "EAGLE step with a = c = 0; its relative one-step gap is not defined: both are 0)."
        )
    if not math.isfinite(lay["projection_cost"]):
        return (
            f"Layer {lay['layer']}: {lay['label']} (relative one-step gap "
            f"{_fmt(lay['one_step_relative'])}{where})."
        )
    return (
        f"Layer {lay['layer']}: {lay['label']} (relative one-step gap "
        f"{_fmt(lay['one_step_relative'])}, untrained control {_fmt(lay['control_relative'])}"
        f", projecting it alone {_costs(lay['projection_cost'])}{where})."
    )


def prompts_note(view_json: dict, held_out_prompts: int, key: str = "prompts") -> str:
    """ "" when a view scored the network on the same held-out prompts as the verdict's MSE;
    else where it scored and the network's MSE there (" on its 512 held-out prompts, where the
    network's is 0.0691"), so that no sentence sets MSEs of two prompt sets side by side."""
    k = view_json.get(key, held_out_prompts)
    if k == held_out_prompts:
        return ""
    return (
        f" on the first {plural(k, 'held-out prompt')}, where the network's is "
        f"{_fmt(view_json['network_mse'])}"
    )


def _optimum_text(opt, fam, held_out_prompts: int) -> str | None:
    """How the best and the closest fitted steps of `fam` compare with the network: the network's
    MSE over the optimum's, on the optimum's prompts (the headline's ratio)."""
    if opt is None or not math.isfinite(opt.json["network_mse"]):
        return None
    o = opt.json
    note = prompts_note(o, held_out_prompts, "held_out_prompts")
    return (
        f"The best {fam.name} with the same number of steps (fitted to the truth, best of "
        f"{len(o.get('starts', [])) or 1} starts, {o.get('within_1pct', 1)} within 1%, "
        "relative "
        f"gradient {_fmt(o['optimal']['relative_gradient'])}) reaches {_fmt(o['optimal_mse'])}"
        f"{note}: the network's MSE is {ratio(o['network_mse'], o['optimal_mse'])} that; the one "
        f"closest to the network reaches {_fmt(o['distilled_mse'])}."
    )


def family_terms_found(terms_json: dict, family: families.Family) -> list[tuple[int, list, list]]:
    """Per layer of term discovery (layer, the family's terms it selected (frequency ≥ 0.5, with
    a scalar or a matrix coefficient), the family's terms in that layer's library)."""
    out = []
    for lay in terms_json.get("layers", []):
        own = list(family.terms(tuple(lay.get("regime_terms", ()))))
        found = {
            base_name(t["name"])
            for t in lay.get("terms", [])
            if t.get("frequency", 1.0) >= 0.5 and base_name(t["name"]) in own
        }
        out.append((lay["layer"], [t for t in own if t in found], own))
    return out


def _terms_counted(counts: list[tuple[int, list, list]], fam) -> str:
    """How many of the family's terms discovery selected, from the terms view's layers: "eagle's
    4 terms in every layer", or the layers holding fewer, with the ones they hold."""
    sizes = {len(own) for _, _, own in counts}
    short = [(layer, found, own) for layer, found, own in counts if len(found) < len(own)]
    if not short:
        size = f"{next(iter(sizes))} " if len(sizes) == 1 else ""
        return f"{fam.name}'s {size}terms in every layer"
    held = [
        f"layer {layer} "
        + (f"{len(found)} of its {len(own)} ({', '.join(found)})" if found else "none of them")
        for layer, found, own in short
    ]
    return f"not all of {fam.name}'s terms ({'; '.join(held)})"


def _terms_text(terms, fam) -> list[str]:
    """What term discovery finds beside `fam`'s terms, and how many of its terms it finds (from
    the terms view's own layers; nothing without term discovery)."""
    if terms is None:
        return []
    extra, matrix = term_kinds(terms.json, fam)
    counts = family_terms_found(terms.json, fam)
    parts = []
    if extra:
        parts.append(
            f"Term discovery finds terms {fam.name} does not have: "
            + "; ".join(f"{name} (layer {', '.join(map(str, ls))})" for name, ls in extra)
            + "."
        )
    if matrix:
        parts.append(
            f"{fam.name}'s own terms with matrix instead of scalar coefficients: "
            + "; ".join(f"{name} (layer {', '.join(map(str, ls))})" for name, ls in matrix)
            + "."
        )
    if not counts:
        return parts
    if not extra and not any(found for _, found, _ in counts):
        parts.append("Term discovery finds no term in any layer.")
    elif not extra and not matrix:
        parts.append(f"Term discovery finds {_terms_counted(counts, fam)} and nothing else.")
    elif any(len(found) < len(own) for _, found, own in counts):
        parts.append(f"Of {fam.name}'s own terms it finds {_terms_counted(counts, fam)}.")
    return parts


def _projection_costs(ctx: Context, layers: list[dict]) -> tuple[float, list[dict]]:
    """(the whole-model projection's relative MSE change, the layers whose projection alone
    costs more than LIKE_PROJECTION_COST); (NaN, []) without the projection."""
    proj = ctx.results.get("projection")
    if proj is None or not proj.json["network_mse"] > 0:
        return math.nan, []
    whole = proj.json["projected_mse"] / proj.json["network_mse"] - 1.0
    alone = [lay for lay in layers if not lay["projection_cost"] <= LIKE_PROJECTION_COST]
    return whole, alone


def model_facts(ctx: Context, layers: list[dict]) -> dict[str, Any]:
    """What the "model" rules of RULES read: booleans of the held-out MSE, the control, the
    communication view, the projection and the layers' labels."""
    proj = ctx.results.get("projection")
    whole, alone = _projection_costs(ctx, layers)
    works = working(ctx)
    ctrl = _control_layers(ctx)
    control_as_good = ctrl is not None and all(
        c["one_step"]["relative"] < CONTROL_FACTOR * lay["one_step_relative"]
        for c, lay in zip(ctrl, layers, strict=True)
    )
    labels = {lay["label"] for lay in layers}
    return {
        "working": works,
        "control_as_good": control_as_good,
        "sends_a": works and communication_conflict(ctx) is not None,
        "coadapted": proj is not None and whole <= LIKE_PROJECTION_COST and bool(alone),
        "every_eagle": labels == {"EAGLE"},
        # a family is claimed only where every layer is at least like it
        "every_like": labels <= {"EAGLE", "EAGLE-like"},
        "cheap": proj is not None and whole <= PROJECTION_COST,
        "near": proj is None or whole <= LIKE_PROJECTION_COST,
    }


def _control_sentence(ctx: Context) -> str | None:
    """Which of the untrained control's layers were scaled down to keep its stream finite
    (`extract.Control.gains`); None when none was."""
    gains = getattr(ctx.control, "gains", None) or ()
    scaled = [layer for layer, g in enumerate(gains) if g < 1.0]
    if not scaled:
        return None
    return (
        f"The untrained control's layer {', '.join(map(str, scaled))} changed the stream by more "
        "than its own size and was scaled down to it (fresh weights of this size grow the stream "
        "without bound; one layer's relative one-step gap does not depend on its scale)."
    )


def model_text(ctx: Context, layers: list[dict], rule: Rule) -> str:
    """The verdict's paragraph: every sentence from the numbers the label rests on, and the rule
    of RULES that gave the label."""
    geo, net, zero, label = ctx.geometry, ctx.network_mse, ctx.zero_mse, rule.label
    held = ctx.held_out.prompts
    parts = [
        f"{geo.regime} model, {plural(geo.layers, 'layer')} × {plural(geo.heads, 'head')}; "
        f"held-out MSE {_fmt(net)} ({_below_zero(net, zero)})."
    ]
    tail = _tail_sentence(ctx)
    if tail is not None:
        parts.append(tail)
    if rule.name == "no_better_than_zero":
        parts.append(
            "It does not solve the task (not clearly better than predicting zero), so no algorithm "
            "is claimed for it."
        )
    fam = families.of_geometry(geo)
    parts.append(f"Read as {fam.name}: {fam.update}.")
    eagle = ctx.results.get("eagle")
    proj = ctx.results.get("projection")
    scored = {f["name"]: f for f in (eagle.json.get("families", []) if eagle else [])}
    families_text = _families_sentence(scored, fam)
    if families_text is not None:
        parts.append(families_text)
    if proj is not None:
        pm, pnet = proj.json["projected_mse"], proj.json["network_mse"]
        gap = proj.json.get("prediction_gap", float("nan"))
        note = prompts_note(proj.json, held)
        versus = _cost(pm / pnet - 1) if pnet > 0 else change(pm, pnet)
        gap_text = _fmt(gap)
        if not np.any(ctx.network_pred):  # ‖D̂_network‖ = 0: no relative gap
            gap_text = "not defined: the network predicts 0 on every prompt"
        parts.append(
            f"Projecting every layer's weights onto {fam.name} gives MSE {_fmt(pm)}{note} "
            f"({versus} against the network; prediction gap "
            f"‖D̂_projected − D̂_network‖/‖D̂_network‖ {'=' if _finite(gap) else 'is'} "
            f"{gap_text})."
        )
    for name in ("communication", "sketch"):
        view = ctx.results.get(name)
        if view is not None and view.json.get("sentence"):
            parts.append(view.json["sentence"])
    for note in _coadapted(ctx, layers):
        parts.append(note)
    control = _control_sentence(ctx)
    if control is not None:
        parts.append(control)
    parts += [_layer_sentence(lay) for lay in layers]
    for b in off_family_blocks(ctx):
        parts.append(
            f"It relies on {b['product']}'s {b['block'][0]}×{b['block'][1]} block "
            f"({BLOCK_MEANING[b['product'], b['block']]}), which EAGLE does not have: zeroing it "
            f"in every layer and head multiplies the MSE by {times(b['ratio'], mark='')}."
        )
    optimum_text = _optimum_text(ctx.results.get("optimum"), fam, held)
    if optimum_text is not None:
        parts.append(optimum_text)
    parts += _terms_text(ctx.results.get("terms"), fam)
    claimed = f" ({fam.name})" if label != "not EAGLE" else ""
    parts.append(f"By the verdict's rule table: {rule.text().removeprefix('otherwise: ')}.")
    parts.append(f"Verdict: {label}{claimed}.")
    return " ".join(parts)


def _gap_reason(layers: list[dict], label: str) -> str:
    """The one-step gaps a label rests on: the largest that is defined, and the layers that
    leave the stream unchanged (their gap is 0 / 0)."""
    gaps = [lay["one_step_relative"] for lay in layers if _finite(lay["one_step_relative"])]
    idle = [lay["layer"] for lay in layers if lay.get("rule") == "idle"]
    worst = max(gaps, default=math.nan)
    if label == "not EAGLE":
        text = f"largest one-step gap {_share(worst, 2)} (EAGLE-like ≤ "
        text += f"{LIKE_GAP:.0%})"
    else:
        text = f"every layer's one-step gap ≤ {_share(worst, 2)}"
    if not gaps:
        text = "no layer's one-step gap is defined"
    if idle:
        text += f" (layer {', '.join(map(str, idle))} leaves the stream unchanged)"
    elif len(gaps) < len(layers):
        text += f" ({len(layers) - len(gaps)} layer(s) not finite)"
    return text


def _control_reason(layers: list[dict]) -> str | None:
    """The untrained control's smallest one-step gap, naming the layers it leaves out (not
    finite or skipped); None without a control."""
    given = [lay for lay in layers if lay["control_relative"] is not None]
    if not given:
        return None
    finite = [lay["control_relative"] for lay in given if _finite(lay["control_relative"])]
    left = [lay["layer"] for lay in given if not _finite(lay["control_relative"])]
    if not finite:
        return "untrained control's gap not finite in any layer"
    text = f"untrained control's gap ≥ {_share(min(finite), 0)}"
    if left:
        text += f" (layer {', '.join(map(str, left))} not finite, left out)"
    return text


def _rule_reason(ctx: Context, layers: list[dict], rule: Rule) -> str | None:
    """The reason a specific "not EAGLE" rule gives, in numbers; None for the others."""
    if rule.name == "sends_a":
        return communication_conflict(ctx)
    if rule.name == "control_as_good":
        return "no layer fits the family clearly better than the untrained control"
    if rule.name == "coadapted":
        whole, alone = _projection_costs(ctx, layers)
        return (
            "co-adapted layers: "
            + ", ".join(
                f"layer {lay['layer']} alone {_cost(lay['projection_cost'])}" for lay in alone
            )
            + f", all layers together {_cost(whole)}"
        )
    return None


def confidence(
    ctx: Context, layers: list[dict], label: str, rule: Rule | None = None
) -> tuple[str, list[str]]:
    """How sure the label is ("high", "medium" or "low") and the numbers it rests on, the rule
    that decided first where it is a specific "not EAGLE" one.

    EAGLE is held with high confidence when every layer is an EAGLE step (gap ≤ EAGLE_GAP, the
    control clearly worse) and projecting the weights onto the family costs at most
    PROJECTION_COST; medium when the label holds through the projection or as EAGLE-like; low for
    an EAGLE-like label whose projection costs more than PROJECTION_COST. "not EAGLE" is held with
    high confidence when the model fails the zero predictor, a layer is not EAGLE-like, the
    network sends A columns the family never sends, a layer projected alone or the whole
    projection breaks the model (above BREAKS); medium otherwise (every layer near the family,
    the projection not)."""
    gaps = [lay["one_step_relative"] for lay in layers]
    reasons = []
    worst = max((g for g in gaps if _finite(g)), default=math.nan)
    conflict = communication_conflict(ctx)
    works = working(ctx)
    if not works:
        read, name = _zero_read(ctx)
        reasons.append(
            f"{name} {_fmt(read)} not clearly below the zero predictor's {_fmt(ctx.zero_mse)}"
        )
    else:
        specific = None if rule is None else _rule_reason(ctx, layers, rule)
        if specific is not None:
            reasons.append(specific)
        reasons.append(_gap_reason(layers, label))
        control = _control_reason(layers)
        if control is not None:
            reasons.append(control)
    proj = ctx.results.get("projection")
    cost = math.nan
    if proj is not None and proj.json["network_mse"] > 0:
        cost = proj.json["projected_mse"] / proj.json["network_mse"] - 1.0
        reasons.append(f"projection {_cost(cost)}")
    opt = ctx.results.get("optimum")
    if opt is not None and opt.json["network_mse"] > 0 and opt.json["optimal_mse"] > 0:
        r = ratio(opt.json["network_mse"], opt.json["optimal_mse"], spec=".2g")
        reasons.append(f"network {r} its family's optimum")
    every = all(lay["label"] == "EAGLE" for lay in layers)
    cheap = not math.isfinite(cost) or cost <= PROJECTION_COST
    broken_alone = any(not lay["projection_cost"] <= BREAKS for lay in layers) and (
        rule is not None and rule.name == "coadapted"
    )
    if label == "EAGLE":
        level = "high" if every and cheap else "medium"
    elif label == "EAGLE-like":
        level = "medium" if cheap else "low"
    else:
        clear = (
            not works
            or worst > LIKE_GAP
            or any(lay["label"] == "not EAGLE" for lay in layers)
            or conflict is not None
            or (not math.isnan(cost) and not cost <= BREAKS)  # the projection breaks it
            or broken_alone  # a layer projected alone breaks it
        )
        level = "high" if clear else "medium"
    return level, reasons


def headline(label: str, family: str | None, level: str, reasons: list[str]) -> str:
    """One line: the label, its family, the confidence and its reasons."""
    named = f"{label} ({family})" if family and family != label else label
    return f"{named}, confidence {level}: " + "; ".join(reasons)


def readout_check(ctx: Context, ascent: list[int]) -> tuple[dict, list[str]]:
    """The readout sign, never silent: the sign the steps are stated in, the held-out MSE of the
    negated predictions, and one warning line when those fit clearly better (with the flag that
    fixes it: `evaluate.readout_flag`); else a hint when layers `ascent` step uphill or the
    model is worse than predicting zero."""
    sign = -1 if ctx.geometry.readout < 0 else 1
    net, zero = ctx.network_mse, ctx.zero_mse
    flipped = ctx.held_out.mse(-ctx.network_pred)
    flag = readout_flag(sign, net, flipped)
    info = {"readout": sign, "flipped_mse": flipped, "readout_flag": flag}
    if flag is not None:
        return info, [flag]
    read = ctx.working_mse  # one prompt whose error explodes gives no hint
    if ascent or not (math.isfinite(read) and read <= zero):
        why = (
            f"layer {', '.join(map(str, ascent))} steps uphill (α_0 > 0, gradient ascent)"
            if ascent
            else "the model is worse than predicting zero"
        )
        return info, [f"{why}: {readout_hint(sign)}"]
    return info, []


def _coadapted(ctx: Context, layers: list[dict]) -> list[str]:
    """A whole-model projection that is cheap while single layers projected alone are not: the
    layers' departures cancel one another (co-adapted layers), which is not the family (rule
    "coadapted" of RULES)."""
    proj = ctx.results.get("projection")
    whole, alone = _projection_costs(ctx, layers)
    if proj is None or not (whole <= LIKE_PROJECTION_COST and alone):
        return []
    return [
        f"The whole-model projection {_costs(whole)} while "
        + ", ".join(f"layer {lay['layer']} alone {_costs(lay['projection_cost'])}" for lay in alone)
        + ": the layers are co-adapted (their departures from the family cancel), which is "
        "not running the family."
    ]


def communication_conflict(ctx: Context) -> str | None:
    """Why the paper's distributed family cannot be claimed, when the network sends A columns
    between machines (view `communication`), else None."""
    view = ctx.results.get("communication")
    if view is None or not view.json.get("a_columns_sent"):
        return None
    if families.of_geometry(ctx.geometry).name != "eagle-distributed":
        return None
    sent = [lay["layer"] for lay in view.json["layers"] if lay.get("a_columns_sent")]
    return (
        f"the network sends A columns between machines (layer {', '.join(map(str, sent))}), "
        "which eagle-distributed never does"
    )


# --- the sample layout ---------------------------------------------------------------------

# In the blocks of Z (view `terms`, sample layout): GD's terms, GD++'s data preconditioning, and
# preconditioned GD's matrix steps (the last two also with a preconditioned data update)
SAMPLE_TERMS = {
    "GD": ("B+=BAtA", "D+=BAtC"),
    "GD++": ("A+=AAtA", "C+=AAtC", "A+=W*AAtA", "C+=W*AAtC"),
    "preconditioned GD": ("B+=BAt*W*A", "D+=BAt*W*C", "A+=AAt*W*A", "C+=AAt*W*C"),
}
# a discovered term outside these families is named only when it carries at least this share of
# its block's update (a coefficient of 1e-7 on a term of the same size as the update is round-off)
TERM_SHARE = 0.01
# the steps read from the activations and from the weights agree when they differ by at most this
# (relative to the larger), or when both move the spectrum's top by less than NEGLIGIBLE_STEP
AGREE = 0.05
NEGLIGIBLE_STEP = 1e-3


def sample_rule(labels: list[str], working: bool = True) -> Rule:
    """The "sample model" rule of RULES for a model whose layers are named `labels`: the most
    general name (module text); "unrecognised" for a layer unexplained or a model no better than
    predicting zero (`working` False)."""
    return decide("sample model", {"working": working, "labels": set(labels)})


def sample_label(labels: list[str]) -> str:
    """The model's name from its layers' names (`sample_rule`)."""
    return sample_rule(labels).label


def one_step_theory(ctx: Context) -> float | None:
    """The best single GD step from zero, α_0 = −1/(n + d + 1) (Zhang–Frei–Bartlett),
    where the task makes one: one sample-layout layer, least squares with isotropic noiseless
    samples (α = 1, no κ) and no prompt normalisation; None elsewhere."""
    t, geo = ctx.task, ctx.geometry
    if t is None or not geo.samples or geo.layers != 1 or geo.normalize != "none":
        return None
    if t.task != "least_squares" or t.alpha != 1.0 or t.kappa is not None or t.noise != 0.0:
        return None
    return -1.0 / (t.n + t.d + 1)


def step_differences(layers: list[dict], lam_max: float) -> list[dict]:
    """Per layer and GD++ step (γ, η) read from the activations and from the weights: their
    relative difference |act − wts| / max(|act|, |wts|), or None where both move the top of the
    spectrum (step × λ_max) by less than NEGLIGIBLE_STEP."""
    out = []
    for lay in layers:
        for name in ("gamma", "eta"):
            act, wts = lay[name], lay[f"{name}_weights"]
            if act is None or wts is None or not (math.isfinite(act) and math.isfinite(wts)):
                continue
            size = max(abs(act), abs(wts))
            rel = None if size * lam_max < NEGLIGIBLE_STEP else abs(act - wts) / size
            out.append({"layer": lay["layer"], "step": name, "relative": rel})
    return out


def agreement_text(diffs: list[dict], proj: ViewResult | None) -> tuple[str, str | None]:
    """(one sentence, one headline reason or None) on whether the activations' and the weights'
    steps agree, and which to trust where they do not."""
    rated = [d for d in diffs if d["relative"] is not None]
    if not rated:
        return "", None
    worst = max(rated, key=lambda d: d["relative"])
    name = {"gamma": "γ", "eta": "η"}
    if worst["relative"] <= AGREE:
        return (
            f"The steps read from the activations and from the weights agree to "
            f"{_share(worst['relative'], 2)} or better in every layer.",
            f"activations and weights agree to {_share(worst['relative'], 2)}",
        )
    off = [d for d in rated if d["relative"] > AGREE]
    where = ", ".join(
        f"layer {d['layer']}'s {name[d['step']]} ({_share(d['relative'])})" for d in off
    )
    outside = ""
    if proj is not None:
        lay = proj.json["layers"][worst["layer"]]
        outside = (
            f" (layer {worst['layer']}'s W_QK leaves {_share(lay['qk_outside'])} and W_VP "
            f"{_share(lay['vp_outside'])} of its norm outside the isotropic family)"
        )
    return (
        f"The activations and the weights differ in {where}: the weights' projection drops the "
        f"structure outside GD++{outside}, while the activations are what the network computes on "
        "these prompts, so the activations' steps are the ones to trust (the projection's cost "
        "says how much the dropped part matters).",
        f"activations and weights differ by up to {_share(worst['relative'])} "
        f"(layer {worst['layer']}'s {name[worst['step']]})",
    )


def sample_confidence(
    ctx: Context, layers: list[dict], label: str, theory: float | None, agreement: str | None
) -> tuple[str, list[str]]:
    """("high", "medium" or "low", reasons) for a sample-layout name, from the numbers the layer
    table prints: high when every layer's fit (column R2: the fit its name rests on) reaches
    R² ≥ 0.999, α_0 is within 5% of the theory's one-step value where there is one and the
    activations' and the weights' steps agree within AGREE; medium when every fit reaches
    R2_MIN; low otherwise. "unrecognised" is held with high confidence when the model fails the
    zero predictor."""
    zero = ctx.zero_mse
    r2_min = ctx.results["algorithm"].json["thresholds"]["r2_min"]
    fits = [lay["r2_label"] for lay in layers]
    reasons = []
    works = working(ctx)
    read, name = _zero_read(ctx)
    if works:
        reasons.append(f"{name} {_below_zero(read, zero)}")
    else:
        reasons.append(f"{name} {_fmt(read)} not clearly below the zero predictor's {_fmt(zero)}")
    if layers and label != "unrecognised":
        reasons.append(f"every layer's fit R² ≥ {min(fits):.4f} (threshold {r2_min})")
    near = True
    if theory is not None and layers and math.isfinite(layers[0]["alpha_0"]):
        a = layers[0]["alpha_0"]
        near = abs(a / theory - 1.0) <= 0.05
        off = a / theory - 1.0
        reasons.append(f"α_0 = {a:.4g} against −1/(n + d + 1) = {theory:.4g} ({percent(off)})")
    agree = agreement is None or "agree" in agreement
    if agreement is not None and label != "unrecognised":
        reasons.append(agreement)
    if label == "unrecognised":
        level = "high" if not works else "medium"
    elif min(fits, default=0.0) >= 0.999 and near and works and agree:
        level = "high"
    elif min(fits, default=0.0) >= r2_min:
        level = "medium"
    else:
        level = "low"
    return level, reasons


def _layer_words(lay: dict, algo: dict, last: bool, r2_min: float) -> str:
    """What one sample-layout layer does, in words, with the numbers the table prints."""
    eta, gamma = _fmt(lay["eta"]), _fmt(lay["gamma"]) if lay["gamma"] is not None else ""
    r2 = f"R² {lay['r2_label']:.6f}"
    words = {
        "GD": f"one gradient step η = {eta} (α_0 = {_fmt(lay['alpha_0'])}, {r2})",
        "preconditioned GD": f"a matrix step Γ, {algo['matrix']['departure_from_scalar']:.2g} "
        f"away from a multiple of I ({r2})",
        "polynomial": f"orders {algo['polynomial']['orders']} without the order-1 term ({r2})",
        "unrecognised": f"no fit reaches R² {r2_min}",
    }
    if lay["label"] == "GD++" and lay["fit"] == "stream":
        words["GD++"] = (
            f"it only transforms the data, γ = {gamma}, taking no step on the iterate "
            f"({_share(lay['step_share'], 2)} of it); one GD++ layer reproduces its update ({r2})"
        )
    else:
        words["GD++"] = (
            f"a gradient step η = {eta} through the data the layers before it transformed "
            f"(orders {algo['polynomial']['orders']} of the design form, α = "
            f"[{', '.join(_fmt(v) for v in algo['polynomial']['alpha'])}], {r2})"
        )
    text = words[lay["label"]]
    if not last and lay["gamma"] is not None and lay["fit"] != "stream" and lay["gamma"] != 0:
        text += f"; it transforms the data for the next layers by γ = {gamma}"
    return text


def _sample_layer_rows(ctx: Context, algo: list[dict]) -> list[dict]:
    """Each layer's verdict row in the sample layout: its name and fit from the algorithm view,
    GD++'s γ and η, the weights' steps, one-step gaps and the projection's cost."""
    from eagle_probe.fit.algorithm import label_alpha0

    geo = ctx.geometry
    fid = ctx.results["fidelity"].json["layers"] if "fidelity" in ctx.results else None
    ctrl = _control_layers(ctx)
    proj = ctx.results.get("projection")
    layers = []
    for lay in algo:
        layer = lay["layer"]
        last = layer == geo.layers - 1
        cost, wts = float("nan"), None
        if proj is not None:
            wts = proj.json["layers"][layer]
            net = proj.json["network_mse"]  # on the projection's own prompts
            if net > 0:
                cost = wts["mse"] / net - 1.0
        one_step = fid[layer]["one_step"] if fid else None
        layers.append(
            {
                "layer": layer,
                "label": lay["label"],
                "fit": lay["fit"],  # the fit the name rests on
                "r2_label": lay["r2_label"],  # its R² (column R2 of the layer table)
                "alpha_0": label_alpha0(lay),  # of the fit the label rests on
                "alpha_0_fit": lay["fit"],
                "alpha_0_scalar": lay["scalar"]["alpha_0"],
                "orders": lay["polynomial"]["orders"] if lay["label"] != "GD" else [0],
                "r2": {k: lay[k]["r2"] for k in ("scalar", "polynomial", "matrix")},
                "step_share": lay["step_share"],
                # GD++'s names: γ the data transform (none in the last layer), η the step
                "gamma": lay["gdpp"]["gamma"],
                "eta": lay["gdpp"]["eta"],
                "eta_iterate": lay["gdpp"]["eta_iterate"],
                "gamma_weights": None if wts is None or last else wts["a_step"],
                "eta_weights": None if wts is None else wts["c_step"],
                "one_step_relative": one_step["relative"] if one_step else float("nan"),
                "one_step_relative_D": one_step["relative_blocks"]["D"]
                if one_step
                else float("nan"),
                "control_relative": _control_gap(ctrl, layer),
                "projection_cost": cost,
            }
        )
    return layers


def _sample_intro(geo, net: float, zero: float) -> str:
    """The verdict text's first sentence: the model, its error and how its steps are read."""
    sign = -1 if geo.readout < 0 else 1
    return (
        f"sample-layout model, {plural(geo.layers, 'layer')} × {plural(geo.heads, 'head')}, "
        f"readout {sign:+d}; held-out MSE {_fmt(net)} ({_below_zero(net, zero)}). Its steps are "
        "read as GD++'s (von Oswald et al. 2023): per layer the data move, A, C −= γ A Aᵀ(·), "
        "and the labels take a gradient step, B, D −= η B Aᵀ(·) (η > 0 downhill as the "
        "readout sees it)."
    )


def _sample_layer_sentences(
    layers: list[dict], algo: list[dict], last_layer: int, r2_min: float
) -> list[str]:
    """One sentence a layer: its name, what it does, and how much one GD++ layer misses."""
    parts = []
    for lay, a in zip(layers, algo, strict=True):
        gap = ""
        last = lay["layer"] == last_layer
        key = "one_step_relative_D" if last else "one_step_relative"
        if math.isfinite(lay[key]):
            gap = f"; one GD++ layer misses {_fmt(lay[key])} of its update" + (
                " on the D slot, the only block the prediction reads" if last else ""
            )
            if _finite(lay["control_relative"]):
                gap += f" (untrained control {_fmt(lay['control_relative'])})"
        words = _layer_words(lay, a, last, r2_min)
        parts.append(f"Layer {lay['layer']}: {lay['label']}, {words}{gap}.")
    return parts


def _projection_sentence(proj, net: float, held_out_prompts: int) -> str | None:
    """What projecting every layer onto GD++ (and preconditioned GD) costs, against the network
    on the projection's own prompts; None without it."""
    if proj is None or not math.isfinite(proj.json["projected_mse"]):
        return None
    pm, pnet = proj.json["projected_mse"], proj.json["network_mse"]
    if not pnet > 0:
        return None
    note = prompts_note(proj.json, held_out_prompts)
    text = (
        f"Projecting every layer's weights onto GD++ gives MSE {_fmt(pm)}{note} "
        f"({_cost(pm / pnet - 1)})"
    )
    if "preconditioned_mse" in proj.json:
        pc = proj.json["preconditioned_mse"]
        text += f", onto preconditioned GD {_fmt(pc)} ({_cost(pc / pnet - 1)})"
    return text + "."


def _optimum_sentence(opt, net: float, held_out_prompts: int) -> str | None:
    """How the best GD++ of the same depth compares with the network (the network's MSE over the
    optimum's, on the optimum's prompts); None without it."""
    if opt is None or not math.isfinite(opt.json["network_mse"]):
        return None
    o = opt.json
    note = prompts_note(o, held_out_prompts, "held_out_prompts")
    return (
        f"The best GD++ with the same number of layers (fitted to the truth, relative gradient "
        f"{_fmt(o['optimal']['relative_gradient'])}) reaches {_fmt(o['optimal_mse'])}{note}: "
        f"the network's MSE is {ratio(o['network_mse'], o['optimal_mse'])} that."
    )


def _terms_sentence(terms, last_layer: int) -> str | None:
    """The terms outside GD, GD++ and preconditioned GD that term discovery finds; None
    without term discovery."""
    if terms is None:
        return None
    known = {t for names in SAMPLE_TERMS.values() for t in names}
    extra: dict[str, list[int]] = {}
    for lay in terms.json.get("layers", []):
        last = lay["layer"] == last_layer  # only the D slot of the last layer is read
        for t in lay.get("terms", []):
            if last and t["target"] != "D":
                continue
            if (
                t.get("frequency", 1.0) >= 0.5
                and abs(t.get("share", 1.0)) >= TERM_SHARE
                and t["name"] not in known
            ):
                extra.setdefault(t["name"], []).append(lay["layer"])
    if not extra:
        return (
            "Term discovery finds no term outside GD, GD++ and preconditioned GD carrying "
            f"{TERM_SHARE:.0%} of its block's update (in the last layer, on the D slot the "
            "prediction reads)."
        )
    return (
        "Term discovery finds terms outside GD, GD++ and preconditioned GD carrying at "
        f"least {TERM_SHARE:.0%} of their block's update: "
        + "; ".join(f"{n} (layer {', '.join(map(str, ls))})" for n, ls in extra.items())
        + "."
    )


def sample_verdict(ctx: Context) -> ViewResult:
    """GD, GD++ or preconditioned GD for a sample-layout model (module text)."""
    geo, net, zero = ctx.geometry, ctx.network_mse, ctx.zero_mse
    if "algorithm" not in ctx.results:  # the names come from the algorithm view
        from eagle_probe.fit.algorithm import algorithm_view

        ctx.results["algorithm"] = algorithm_view(ctx)
    algo_json = ctx.results["algorithm"].json
    algo, r2_min = algo_json["layers"], algo_json["thresholds"]["r2_min"]
    proj = ctx.results.get("projection")
    layers = _sample_layer_rows(ctx, algo)
    warnings = []
    works = working(ctx)
    rule = sample_rule([lay["label"] for lay in layers], works)
    label = rule.label
    if not works:
        read, name = _zero_read(ctx)
        warnings.append(
            f"the model is not clearly better than the zero predictor ({name} {_fmt(read)} "
            f"against {_fmt(zero)}): its fits describe no working algorithm"
        )
    last_layer = geo.layers - 1
    parts = [_sample_intro(geo, net, zero)]
    tail = _tail_sentence(ctx)
    if tail is not None:
        parts.append(tail)
    parts += _sample_layer_sentences(layers, algo, last_layer, r2_min)
    lam_max = max((a["polynomial"]["lambda_max"] for a in algo), default=1.0)
    sentence, agreement = agreement_text(step_differences(layers, lam_max), proj)
    if sentence:
        parts.append(sentence)
    sentences = (
        _projection_sentence(proj, net, ctx.held_out.prompts),
        _optimum_sentence(ctx.results.get("optimum"), net, ctx.held_out.prompts),
        _terms_sentence(ctx.results.get("terms"), last_layer),
    )
    parts += [text for text in sentences if text is not None]
    theory = one_step_theory(ctx)
    for lay in layers:
        lay["alpha_0_theory"] = theory if lay["layer"] == 0 and theory is not None else math.nan
    ascent = [
        lay["layer"]
        for lay in layers
        if lay["label"] in ("GD", "GD++", "preconditioned GD")
        and lay["fit"] != "stream"  # a layer taking no step has no direction to check
        and lay["alpha_0"] > 0
    ]
    sign_info, sign_warnings = readout_check(ctx, ascent)
    warnings += sign_warnings
    parts.append(f"By the verdict's rule table: {rule.text().removeprefix('otherwise: ')}.")
    parts.append(f"Verdict: {label}.")
    thresholds = {
        **algo_json["thresholds"],
        "zero_fraction": ZERO_FRACTION,
        "term_share": TERM_SHARE,
        "agree": AGREE,
        "negligible_step": NEGLIGIBLE_STEP,
    }
    family = label if label != "unrecognised" else None
    level, reasons = sample_confidence(ctx, layers, label, theory, agreement)
    return ViewResult(
        "verdict",
        {
            "thresholds": thresholds,
            "off_family_blocks": [],
            "layers": layers,
            "model": {
                "label": label,
                "family": family,
                "read_as": "GD++",
                "confidence": level,
                "reasons": reasons,
                "thresholds": thresholds,
                "headline": headline(label, family, level, reasons),
                "text": " ".join(parts),
                "rule": rule.name,  # the row of RULES that gave the label
                "rule_text": rule.text(),
                **sign_info,
            },
        },
        {},
        warnings,
    )


# --- what the view shows: its figure and the figure's caption -------------------------------------
def figures(ex: Extraction) -> Figures:
    """Per layer the relative one-step gap of the network and of its untrained control, with the
    verdict's thresholds."""
    v = ex.views["verdict"].json
    layers = v.get("layers", [])
    if not layers:
        return {}
    th = v.get("thresholds", {})
    fam = draw.family_word(ex)
    last = len(layers) - 1
    # the sample layout reads its last layer on the D slot alone (the layer table's rel 1-step)
    key = {last: "one_step_relative_D"} if ex.geometry.samples else {}
    mine = np.array([lay[key.get(i, "one_step_relative")] for i, lay in enumerate(layers)])
    ctrl = np.array([lay.get("control_relative", np.nan) for lay in layers], dtype=float)
    floor = draw.floor(mine, ctrl, [th.get("eagle_gap", np.nan)])
    L = len(layers)
    fig = draw.figure(max(6.0, 1.2 * L + 3), 3.6)
    ax = fig.subplots()
    x = np.arange(L)
    has_ctrl = np.isfinite(ctrl).any()
    w = 0.38 if has_ctrl else 0.6
    shown = draw.positive(mine, floor)
    ax.bar(x - (w / 2 if has_ctrl else 0), shown, width=w, color="C0", label="network")
    if has_ctrl:
        ctrl = draw.positive(ctrl, floor)
        ax.bar(x + w / 2, ctrl, width=w, color="0.7", label="untrained control")
    for name, colour, text in (("eagle_gap", "C2", "EAGLE"), ("like_gap", "C1", "EAGLE-like")):
        if name in th:
            ax.axhline(
                th[name], color=colour, ls="--", lw=1.0, label=f"{text} threshold ({th[name]:g})"
            )
    for xi, lay, m in zip(x, layers, shown, strict=True):
        if np.isfinite(m):
            draw.note(
                ax,
                lay["label"],
                (xi - (w / 2 if has_ctrl else 0), m),
                (0, 3),
                ha="center",
                bbox=draw.TEXT_BOX,
            )
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)
    draw.layer_axis(ax, x)
    tex = draw.tex(fam)
    ax.set_ylabel(
        rf"$\|Z_{{l+1}} - \mathrm{{{tex}}}(Z_l)\|^2\,/\,\|Z_{{l+1}} - Z_l\|^2$" "\n(ratio)",
        fontsize=8,
    )
    fig.legend(fontsize=7, loc="outside right center")
    step = "layer" if ex.geometry.samples else "step"
    ax.set_title(f"How much of each layer's update one {fam} {step} misses", fontsize=10)
    return {"verdict_gaps": fig}


def caption(ex: Extraction) -> str:
    if ex.geometry.samples:
        return (
            "How much of each layer's update one GD++ layer with the fitted steps misses (the last "
            "layer's on the D slot, the only block the prediction reads), against the untrained "
            "control; the label is the layer's name: GD, GD++ or preconditioned GD."
        )
    return (
        "A blue bar below the green line is an EAGLE step, and the grey untrained control must "
        "sit well above it for the label to count."
    )


@register("verdict", figures=figures, captions={"verdict_gaps": caption})
def verdict_view(ctx: Context) -> ViewResult:
    if ctx.geometry.samples:
        return sample_verdict(ctx)
    layers = layer_labels(ctx)
    zero = ctx.zero_mse
    facts = model_facts(ctx, layers)
    rule = decide("model", facts)
    label = rule.label
    warnings = []
    if not facts["working"]:
        read, name = _zero_read(ctx)
        warnings.append(
            f"the model is not clearly better than the zero predictor ({name} {_fmt(read)} "
            f"against {_fmt(zero)}): its fits describe no working algorithm"
        )
    elif facts["sends_a"]:
        warnings.append(f"not claimed as eagle-distributed: {communication_conflict(ctx)}")
    if facts["control_as_good"]:
        warnings.append("no layer fits EAGLE clearly better than the untrained control does")
    for b in off_family_blocks(ctx):
        warnings.append(
            f"the network uses {b['product']}'s {b['block']} block "
            f"({BLOCK_MEANING[b['product'], b['block']]}), outside EAGLE's shape: zeroing it "
            f"everywhere multiplies the MSE by {times(b['ratio'], mark='')}"
        )
    sign_info, sign_warnings = readout_check(ctx, [])
    warnings += sign_warnings
    family = families.of_geometry(ctx.geometry).name if label != "not EAGLE" else None
    level, reasons = confidence(ctx, layers, label, rule)
    opt = ctx.results.get("optimum")
    return ViewResult(
        "verdict",
        {
            "thresholds": THRESHOLDS,
            "off_family_blocks": off_family_blocks(ctx),
            "layers": layers,
            "model": {
                "label": label,
                # the family the label claims (None when none is claimed), and the one read
                "family": family,
                "read_as": families.of_geometry(ctx.geometry).name,
                "confidence": level,
                "reasons": reasons,
                "thresholds": THRESHOLDS,
                "headline": headline(label, family, level, reasons),
                "text": model_text(ctx, layers, rule),
                "rule": rule.name,  # the row of RULES that gave the label
                "rule_text": rule.text(),
                # the network's MSE over its family's best (view optimum), on the optimum's prompts
                "network_over_optimum": None
                if opt is None or not opt.json["optimal_mse"] > 0
                else opt.json["network_mse"] / opt.json["optimal_mse"],
                **sign_info,
            },
        },
        {},
        warnings,
    )
