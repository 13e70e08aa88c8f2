"""The verdict: per layer a label from stated thresholds, per model one paragraph.

A layer is
- "EAGLE" when one EAGLE step reproduces it (relative one-step gap ≤ EAGLE_GAP) and the untrained
  control is clearly worse (its relative gap ≥ CONTROL_FACTOR × the layer's);
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
- "not EAGLE" otherwise: a whole-model projection that is cheap while layers projected alone
  break the model is reported as co-adapted layers, not as the family. Also "not EAGLE" whatever
  its layers when it is not clearly better than the zero predictor (MSE above ZERO_FRACTION of
  the zero predictor's) or than its untrained control, and (distributed) when it reads as the
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

import numpy as np

from eagle_probe import drawing as draw
from eagle_probe import regimes
from eagle_probe.fit import families
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register
from eagle_probe.wording import against_zero, plural, readout_flag, readout_hint

EAGLE_GAP = 0.01  # relative one-step gap ‖Z_{l+1} − EAGLE(Z_l)‖² / ‖Z_{l+1} − Z_l‖²
LIKE_GAP = 0.5
PROJECTION_COST = 0.05  # relative MSE increase with the layer projected onto the family
# the untrained control's relative one-step gap must be at least this many times the layer's
CONTROL_FACTOR = 2.0
LIKE_PROJECTION_COST = 1.0  # the EAGLE-family model stays within 2× of the network's MSE
USED_BLOCK = (
    2.0  # an off-family block is "used" when zeroing it everywhere multiplies the MSE by this
)
# a model above this fraction of the zero predictor's MSE is no better than predicting zero
ZERO_FRACTION = 0.8

THRESHOLDS = {
    "eagle_gap": EAGLE_GAP,
    "like_gap": LIKE_GAP,
    "projection_cost": PROJECTION_COST,
    "control_factor": CONTROL_FACTOR,
    "like_projection_cost": LIKE_PROJECTION_COST,
    "used_block": USED_BLOCK,
    "zero_fraction": ZERO_FRACTION,
}


def _fmt(x: float | None) -> str:
    """A number for a sentence; None is the number of a view that did not run: "skipped"."""
    if x is None:
        return "skipped"
    return f"{x:.3g}" if math.isfinite(x) else str(x)


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


BREAKS = 10.0  # a projection that raises the MSE more than 1000% breaks the model


def _cost(cost: float) -> str:
    """A relative MSE change as a percentage, or "breaks the model (×N)" above 1000%."""
    if not math.isfinite(cost):
        return "breaks the model (non-finite MSE)"
    if cost > BREAKS:
        return f"breaks the model (×{cost + 1:.3g})"
    return f"{cost * 100:+.1f}%"


def _costs(cost: float) -> str:
    """`_cost` as a predicate: "costs +3.0%" or "breaks the model (×N)"."""
    text = _cost(cost)
    return text if text.startswith("breaks") else f"costs {text}"


def layer_labels(ctx: Context) -> list[dict]:
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
        if gap <= EAGLE_GAP and separated:
            label = "EAGLE"
        elif separated and gap <= LIKE_GAP:
            label = "EAGLE-like"
        else:
            label = "not EAGLE"
        blocks = f["one_step"]["relative_blocks"]
        off = [k for k, v in blocks.items() if math.isfinite(v) and v > 10 * EAGLE_GAP]
        out.append(
            {
                "layer": layer,
                "label": label,
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
    (`evaluate.against_zero`)."""
    return against_zero(net, zero, lambda r: f"{_fmt(r)}×")


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


def _optimum_text(opt, fam) -> str | None:
    """How the best and the closest fitted steps of `fam` compare with the network."""
    if opt is None or not opt.json["network_mse"] > 0:
        return None
    o = opt.json
    return (
        f"The best {fam.name} with the same number of steps (fitted to the truth, best of "
        f"{len(o.get('starts', [])) or 1} starts, {o.get('within_1pct', 1)} within 1%, "
        "relative "
        f"gradient {_fmt(o['optimal']['relative_gradient'])}) reaches {_fmt(o['optimal_mse'])} "
        f"({o['optimal_mse'] / o['network_mse']:.2f}× the network's MSE); the one closest to "
        "the network "
        f"reaches {_fmt(o['distilled_mse'])}."
    )


def _terms_text(terms, fam) -> list[str]:
    """What term discovery finds beside `fam`'s terms (nothing without term discovery)."""
    if terms is None:
        return []
    extra, matrix = term_kinds(terms.json, fam)
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
    if not extra and not matrix:
        parts.append(f"Term discovery finds {fam.name}'s four terms and nothing else.")
    return parts


def model_text(ctx: Context, layers: list[dict], label: str) -> str:
    geo, net, zero = ctx.geometry, ctx.network_mse, ctx.zero_mse
    parts = [
        f"{geo.regime} model, {plural(geo.layers, 'layer')} × {plural(geo.heads, 'head')}; "
        f"held-out MSE {_fmt(net)} ({_below_zero(net, zero)})."
    ]
    if net > ZERO_FRACTION * zero:
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
        parts.append(
            f"Projecting every layer's weights onto {fam.name} gives MSE {_fmt(pm)} "
            f"({_cost(pm / pnet - 1)} against the network; prediction gap "
            f"‖D̂_projected − D̂_network‖/‖D̂_network‖ = {_fmt(gap)})."
            if pnet > 0
            else f"Projecting every layer onto {fam.name} gives MSE {_fmt(pm)}."
        )
    for name in ("communication", "sketch"):
        view = ctx.results.get(name)
        if view is not None and view.json.get("sentence"):
            parts.append(view.json["sentence"])
    for note in _coadapted(ctx, layers):
        parts.append(note)
    parts += [_layer_sentence(lay) for lay in layers]
    for b in off_family_blocks(ctx):
        parts.append(
            f"It relies on {b['product']}'s {b['block'][0]}×{b['block'][1]} block "
            f"({BLOCK_MEANING[b['product'], b['block']]}), which EAGLE does not have: zeroing it "
            f"in every layer and head multiplies the MSE by {_fmt(b['ratio'])}."
        )
    optimum_text = _optimum_text(ctx.results.get("optimum"), fam)
    if optimum_text is not None:
        parts.append(optimum_text)
    parts += _terms_text(ctx.results.get("terms"), fam)
    claimed = f" ({fam.name})" if label != "not EAGLE" else ""
    parts.append(f"Verdict: {label}{claimed}.")
    return " ".join(parts)


def confidence(ctx: Context, layers: list[dict], label: str) -> tuple[str, list[str]]:
    """How sure the label is ("high", "medium" or "low") and the numbers it rests on.

    EAGLE is held with high confidence when every layer is an EAGLE step (gap ≤ EAGLE_GAP, the
    control clearly worse) and projecting the weights onto the family costs at most
    PROJECTION_COST; medium when the label holds through the projection or as EAGLE-like; low for
    an EAGLE-like label whose projection costs more than PROJECTION_COST. "not EAGLE" is held with
    high confidence when the model fails the zero predictor, a layer is not EAGLE-like, the
    network sends A columns the family never sends, or the projection breaks the model (above
    BREAKS); medium otherwise (every layer near the family, the projection not)."""
    net, zero = ctx.network_mse, ctx.zero_mse
    gaps = [lay["one_step_relative"] for lay in layers]
    controls = [lay["control_relative"] for lay in layers if _finite(lay["control_relative"])]
    reasons = []
    worst = max(gaps, default=math.nan)
    conflict = communication_conflict(ctx)
    if not (math.isfinite(net) and net <= ZERO_FRACTION * zero):
        reasons.append(f"MSE {_fmt(net)} not clearly below the zero predictor's {_fmt(zero)}")
    else:
        if conflict is not None and label == "not EAGLE":
            reasons.append(conflict)
        if label == "not EAGLE":
            reasons.append(f"largest one-step gap {worst:.2%} (EAGLE-like ≤ {LIKE_GAP:.0%})")
        else:
            reasons.append(f"every layer's one-step gap ≤ {worst:.2%}")
        if controls:
            reasons.append(f"untrained control's gap ≥ {min(controls):.0%}")
    proj = ctx.results.get("projection")
    cost = math.nan
    if proj is not None and proj.json["network_mse"] > 0:
        cost = proj.json["projected_mse"] / proj.json["network_mse"] - 1.0
        reasons.append(f"projection {_cost(cost)}")
    opt = ctx.results.get("optimum")
    if opt is not None and opt.json["network_mse"] > 0 and opt.json["optimal_mse"] > 0:
        reasons.append(
            f"network {opt.json['network_mse'] / opt.json['optimal_mse']:.2g}× its family's optimum"
        )
    every = all(lay["label"] == "EAGLE" for lay in layers)
    cheap = not math.isfinite(cost) or cost <= PROJECTION_COST
    if label == "EAGLE":
        level = "high" if every and cheap else "medium"
    elif label == "EAGLE-like":
        level = "medium" if cheap else "low"
    else:
        clear = (
            not (math.isfinite(net) and net <= ZERO_FRACTION * zero)
            or worst > LIKE_GAP
            or any(lay["label"] == "not EAGLE" for lay in layers)
            or conflict is not None
            or (not math.isnan(cost) and not cost <= BREAKS)  # the projection breaks it
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
    if ascent or not (math.isfinite(net) and net <= zero):
        why = (
            f"layer {', '.join(map(str, ascent))} steps uphill (α_0 > 0, gradient ascent)"
            if ascent
            else "the model is worse than predicting zero"
        )
        return info, [f"{why}: {readout_hint(sign)}"]
    return info, []


def _coadapted(ctx: Context, layers: list[dict]) -> list[str]:
    """A whole-model projection that is cheap while single layers projected alone are not: the
    layers' departures cancel one another (co-adapted layers), which is not the family."""
    proj = ctx.results.get("projection")
    if proj is None or not proj.json["network_mse"] > 0:
        return []
    whole = proj.json["projected_mse"] / proj.json["network_mse"] - 1.0
    alone = [lay for lay in layers if not lay["projection_cost"] <= LIKE_PROJECTION_COST]
    if whole <= LIKE_PROJECTION_COST and alone:
        return [
            f"The whole-model projection {_costs(whole)} while "
            + ", ".join(
                f"layer {lay['layer']} alone {_costs(lay['projection_cost'])}" for lay in alone
            )
            + ": the layers are co-adapted (their departures from the family cancel), which is "
            "not running the family."
        ]
    return []


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
SAMPLE_ORDER = ("GD", "polynomial", "GD++", "preconditioned GD")  # least to most general
# a discovered term outside these families is named only when it carries at least this share of
# its block's update (a coefficient of 1e-7 on a term of the same size as the update is round-off)
TERM_SHARE = 0.01
# the steps read from the activations and from the weights agree when they differ by at most this
# (relative to the larger), or when both move the spectrum's top by less than NEGLIGIBLE_STEP
AGREE = 0.05
NEGLIGIBLE_STEP = 1e-3


def sample_label(labels: list[str]) -> str:
    """The model's name from its layers' names (module text)."""
    if not labels or "unrecognised" in labels:
        return "unrecognised"
    return max(labels, key=SAMPLE_ORDER.index)


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
            f"{worst['relative']:.2%} or better in every layer.",
            f"activations and weights agree to {worst['relative']:.2%}",
        )
    off = [d for d in rated if d["relative"] > AGREE]
    where = ", ".join(f"layer {d['layer']}'s {name[d['step']]} ({d['relative']:.1%})" for d in off)
    outside = ""
    if proj is not None:
        lay = proj.json["layers"][worst["layer"]]
        outside = (
            f" (layer {worst['layer']}'s W_QK leaves {lay['qk_outside']:.1%} and W_VP "
            f"{lay['vp_outside']:.1%} of its norm outside the isotropic family)"
        )
    return (
        f"The activations and the weights differ in {where}: the weights' projection drops the "
        f"structure outside GD++{outside}, while the activations are what the network computes on "
        "these prompts, so the activations' steps are the ones to trust (the projection's cost "
        "says how much the dropped part matters).",
        f"activations and weights differ by up to {worst['relative']:.1%} "
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
    net, zero = ctx.network_mse, ctx.zero_mse
    r2_min = ctx.results["algorithm"].json["thresholds"]["r2_min"]
    fits = [lay["r2_label"] for lay in layers]
    reasons = []
    working = math.isfinite(net) and net <= ZERO_FRACTION * zero
    if working:
        reasons.append(f"MSE {_below_zero(net, zero)}")
    else:
        reasons.append(f"MSE {_fmt(net)} not clearly below the zero predictor's {_fmt(zero)}")
    if layers and label != "unrecognised":
        reasons.append(f"every layer's fit R² ≥ {min(fits):.4f} (threshold {r2_min})")
    near = True
    if theory is not None and layers and math.isfinite(layers[0]["alpha_0"]):
        a = layers[0]["alpha_0"]
        near = abs(a / theory - 1.0) <= 0.05
        off = a / theory - 1.0
        reasons.append(f"α_0 = {a:.4g} against −1/(n + d + 1) = {theory:.4g} ({off:+.1%})")
    agree = agreement is None or "agree" in agreement
    if agreement is not None and label != "unrecognised":
        reasons.append(agreement)
    if label == "unrecognised":
        level = "high" if not working else "medium"
    elif min(fits, default=0.0) >= 0.999 and near and working and agree:
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
            f"({lay['step_share']:.2%} of it); one GD++ layer reproduces its update ({r2})"
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

    geo, net = ctx.geometry, ctx.network_mse
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


def _projection_sentence(proj, net: float) -> str | None:
    """What projecting every layer onto GD++ (and preconditioned GD) costs; None without it."""
    if proj is None or not net > 0 or not math.isfinite(proj.json["projected_mse"]):
        return None
    pm = proj.json["projected_mse"]
    text = (
        f"Projecting every layer's weights onto GD++ gives MSE {_fmt(pm)} ({_cost(pm / net - 1)})"
    )
    if "preconditioned_mse" in proj.json:
        pc = proj.json["preconditioned_mse"]
        text += f", onto preconditioned GD {_fmt(pc)} ({_cost(pc / net - 1)})"
    return text + "."


def _optimum_sentence(opt, net: float) -> str | None:
    """How the best GD++ of the same depth compares with the network; None without it."""
    if opt is None or not net > 0:
        return None
    o = opt.json
    return (
        f"The best GD++ with the same number of layers (fitted to the truth, relative gradient "
        f"{_fmt(o['optimal']['relative_gradient'])}) reaches {_fmt(o['optimal_mse'])} "
        f"({o['optimal_mse'] / net:.2f}× the network's MSE)."
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
    label = sample_label([lay["label"] for lay in layers])
    if not math.isfinite(net) or net > ZERO_FRACTION * zero:
        label = "unrecognised"
        warnings.append(
            f"the model is not clearly better than the zero predictor (MSE {_fmt(net)} against "
            f"{_fmt(zero)}): its fits describe no working algorithm"
        )
    last_layer = geo.layers - 1
    parts = [_sample_intro(geo, net, zero)]
    parts += _sample_layer_sentences(layers, algo, last_layer, r2_min)
    lam_max = max((a["polynomial"]["lambda_max"] for a in algo), default=1.0)
    sentence, agreement = agreement_text(step_differences(layers, lam_max), proj)
    if sentence:
        parts.append(sentence)
    sentences = (
        _projection_sentence(proj, net),
        _optimum_sentence(ctx.results.get("optimum"), net),
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
    net, zero = ctx.network_mse, ctx.zero_mse
    warnings = []
    labels = {lay["label"] for lay in layers}
    if not math.isfinite(net) or net > ZERO_FRACTION * zero:
        label = "not EAGLE"
        warnings.append(
            f"the model is not clearly better than the zero predictor (MSE {_fmt(net)} against "
            f"{_fmt(zero)}): its fits describe no working algorithm"
        )
    else:
        proj = ctx.results.get("projection")
        pnet = net if proj is None else proj.json["network_mse"]  # on the projection's prompts
        cheap = proj is not None and proj.json["projected_mse"] <= (1 + PROJECTION_COST) * pnet
        near = proj is None or proj.json["projected_mse"] <= (1 + LIKE_PROJECTION_COST) * pnet
        # a family is claimed only where every layer is at least like it
        every_like = labels <= {"EAGLE", "EAGLE-like"}
        if labels == {"EAGLE"} or (cheap and every_like):
            label = "EAGLE"
        elif every_like and near:
            label = "EAGLE-like"
        else:
            label = "not EAGLE"
        conflict = communication_conflict(ctx)
        if conflict is not None:
            label = "not EAGLE"
            warnings.append(f"not claimed as eagle-distributed: {conflict}")
    if _control_layers(ctx) is not None:
        ctrl = [c["one_step"]["relative"] for c in _control_layers(ctx)]
        mine = [lay["one_step_relative"] for lay in layers]
        if all(c < CONTROL_FACTOR * m for c, m in zip(ctrl, mine, strict=True)):
            label = "not EAGLE"
            warnings.append("no layer fits EAGLE clearly better than the untrained control does")
    for b in off_family_blocks(ctx):
        warnings.append(
            f"the network uses {b['product']}'s {b['block']} block "
            f"({BLOCK_MEANING[b['product'], b['block']]}), outside EAGLE's shape: zeroing it "
            f"everywhere multiplies the MSE by {_fmt(b['ratio'])}"
        )
    sign_info, sign_warnings = readout_check(ctx, [])
    warnings += sign_warnings
    family = families.of_geometry(ctx.geometry).name if label != "not EAGLE" else None
    level, reasons = confidence(ctx, layers, label)
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
                "text": model_text(ctx, layers, label),
                **sign_info,
            },
        },
        {},
        warnings,
    )
