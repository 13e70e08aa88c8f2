"""What a verdict must never say, checked from an extraction's own numbers: the label against the
conditions of the rule table (written out here from docs/extraction-schema.md, not read from
the package), every sentence against the label, every ratio against the numbers it divides, and
every number for reading. Shared by tests/fit/test_verdict_consistency.py (plants of every family,
the shipped checkpoints) and benchmarks/verdict_consistency.py (the seed checkpoints).

`contradictions(ex)` returns one line per contradiction found; an empty list is a consistent
verdict.
"""

from __future__ import annotations

import math
import re

# thresholds of the rule table (docs/extraction-schema.md), written out, not imported
EAGLE_GAP, LIKE_GAP, CONTROL_FACTOR = 0.01, 0.5, 2.0
PROJECTION_COST, LIKE_PROJECTION_COST, ZERO_FRACTION = 0.05, 1.0, 0.8

# sentences that deny the model runs the family it is read as: never beside a claimed family
DENIALS = (
    "co-adapted",
    "not running the family",
    "no algorithm is claimed",
    "does not solve the task",
    "never does",
    "no working algorithm",
)
# numbers no reader should get: an infinity, a NaN, a signed zero, a number of 12 digits or more
UNREADABLE = re.compile(
    r"\binf\b|\bnan\b|\binfinitely\b|%\s*inf|inf%|nan%|[-+−]0(\.0+)?%|[-+−]0\.0+\b(?!\d)|\d{12,}",
    re.IGNORECASE,
)
SAMPLE_ORDER = ("GD", "polynomial", "GD++", "preconditioned GD")  # least to most general
NUMBER = r"([0-9][0-9.]*(?:e[+-]?[0-9]+)?)"


def unreadable(text: str) -> list[str]:
    """The unreadable numbers in `text`, each with a little context."""
    return [text[max(0, m.start() - 30) : m.end() + 10] for m in UNREADABLE.finditer(text)]


def _close(printed: str, exact: float, digits: int) -> bool:
    """Whether `printed` is `exact` to the `digits` significant digits it was printed with."""
    return math.isfinite(exact) and float(printed) == float(f"{exact:.{digits}g}")


def _base(name: str) -> str:
    return name.replace("W", "").replace("*", "")


def _working(net: dict) -> bool:
    """The zero-predictor test on the JSON's numbers: the held-out MSE without the worst 0.1% of
    prompts (`trimmed_mse`; the mean in an extraction written before it) finite and at most
    ZERO_FRACTION × the zero predictor's."""
    mse = net.get("trimmed_mse", net["mse"])
    return mse is not None and math.isfinite(mse) and mse <= ZERO_FRACTION * net["zero_mse"]


def feature_label_problems(js: dict) -> list[str]:
    """The feature layout's label against the rule table's conditions, on the JSON's numbers."""
    v, net = js["views"]["verdict"], js["network"]
    label, out = v["model"]["label"], []
    for lay in v["layers"]:
        gap, ctrl = lay["one_step_relative"], lay["control_relative"]
        if lay["label"] == "not EAGLE":
            continue
        if lay.get("rule") == "idle":
            if gap is not None:
                out.append(f"layer {lay['layer']} is called idle with a gap {gap}")
            continue
        bound = EAGLE_GAP if lay["label"] == "EAGLE" else LIKE_GAP
        if gap is None or not gap <= bound:
            out.append(f"layer {lay['layer']} is {lay['label']} with one-step gap {gap}")
        if ctrl is not None and math.isfinite(ctrl) and not ctrl >= CONTROL_FACTOR * gap:
            out.append(f"layer {lay['layer']} is {lay['label']} with the control at {ctrl}")
    if label == "not EAGLE":
        return out
    if not _working(net):
        out.append(f"{label} claimed for a model no better than the zero predictor")
    labels = {lay["label"] for lay in v["layers"]}
    if not labels <= {"EAGLE", "EAGLE-like"}:
        out.append(f"{label} claimed with a layer not EAGLE-like")
    proj = js["views"].get("projection")
    if proj is not None and proj["network_mse"] > 0:
        whole = proj["projected_mse"] / proj["network_mse"] - 1
        alone = [lay["mse"] / proj["network_mse"] - 1 for lay in proj["layers"]]
        if whole <= LIKE_PROJECTION_COST and not all(c <= LIKE_PROJECTION_COST for c in alone):
            out.append(f"{label} claimed for co-adapted layers (whole {whole:.3g}, alone {alone})")
        if label == "EAGLE" and labels != {"EAGLE"} and not whole <= PROJECTION_COST:
            out.append(f"EAGLE with an EAGLE-like layer and a projection costing {whole:.3g}")
        if label == "EAGLE-like" and not whole <= LIKE_PROJECTION_COST:
            out.append(f"EAGLE-like with a projection costing {whole:.3g}")
    ctrl = js.get("control")
    if ctrl is not None and "fidelity" in ctrl["views"]:
        gaps = [lay["one_step_relative"] for lay in v["layers"]]
        cgaps = [lay["one_step"]["relative"] for lay in ctrl["views"]["fidelity"]["layers"]]
        if all(
            c is not None and g is not None and c < CONTROL_FACTOR * g
            for c, g in zip(cgaps, gaps, strict=True)
        ):
            out.append(f"{label} claimed while the untrained control fits as well")
    comm = js["views"].get("communication")
    if (
        comm is not None
        and comm.get("a_columns_sent")
        and v["model"]["family"] == ("eagle-distributed")
    ):
        out.append("eagle-distributed claimed while A columns cross machines")
    return out


def sample_label_problems(js: dict) -> list[str]:
    """The sample layout's label: the most general of its layers' names, or unrecognised."""
    v, net = js["views"]["verdict"], js["network"]
    label, names = v["model"]["label"], [lay["label"] for lay in v["layers"]]
    if not _working(net) or "unrecognised" in names:
        expected = "unrecognised"
    else:
        expected = max(names, key=SAMPLE_ORDER.index)
    return [] if label == expected else [f"label {label}, the rule table gives {expected}"]


def sentence_problems(js: dict) -> list[str]:
    """Every sentence of the paragraph and the headline against the label and the numbers."""
    v = js["views"]["verdict"]
    model, text, head = v["model"], v["model"]["text"], v["model"]["headline"]
    label, family = model["label"], model["family"]
    samples = js["model"]["tokens"] == "samples"
    out = []
    claimed = label not in ("not EAGLE", "unrecognised")
    ending = f"Verdict: {label}{f' ({family})' if family and family != label else ''}."
    if not text.endswith(ending):
        out.append(f"the paragraph does not end {ending!r}")
    if not head.startswith(f"{label}{f' ({family})' if family and family != label else ''},"):
        out.append(f"the headline does not open with the label: {head[:60]!r}")
    if claimed:
        out += [f"{label} beside {p!r}" for p in DENIALS if p in text or p in head]
    for lay in v["layers"]:
        mark = f"Layer {lay['layer']}: {lay['label']}" + ("," if samples else " (")
        if mark not in text:
            out.append(f"no sentence {mark!r}")
    if text.count("Verdict:") != 1:
        out.append(f"the paragraph gives {text.count('Verdict:')} verdicts")
    # every ratio network / optimum, in the headline and the paragraph alike
    opt = js["views"].get("optimum")
    if opt is not None and opt["optimal_mse"] > 0:
        exact = opt["network_mse"] / opt["optimal_mse"]
        for printed in re.findall(rf"network {NUMBER}× its family's optimum", head):
            if not _close(printed, exact, 2):
                out.append(f"headline: network {printed}× the optimum, the numbers give {exact}")
        for printed in re.findall(rf"the network's MSE is {NUMBER}× that", text):
            if not _close(printed, exact, 3):
                out.append(f"paragraph: network {printed}× the optimum, the numbers give {exact}")
        if "× the network's MSE" in text:
            out.append("a ratio stated optimum / network")
    # the family's term count from the terms view's own layers
    terms, fam = js["views"].get("terms"), model["read_as"]
    found = re.search(r"finds (\S+)'s (\d+) terms in every layer", text)
    if found and terms is not None:
        own = (terms.get("family_terms") or {}).get(found.group(1), [])
        if int(found.group(2)) != len(own):
            out.append(f"{found.group(2)} terms named, {fam} has {len(own)}")
        for lay in terms["layers"]:
            held = {_base(t["name"]) for t in lay["terms"] if t.get("frequency", 1) >= 0.5}
            if not set(own) <= held:
                out.append(f"layer {lay['layer']} lacks {sorted(set(own) - held)}")
    if re.search(r"\bfour terms\b", text):
        out.append("'four terms' hard-coded")
    # MSEs of two prompt sets are never set side by side unsaid
    held_out = js["model"]["held_out_prompts"]
    proj = js["views"].get("projection")
    if proj is not None and proj.get("prompts", held_out) != held_out:
        if "Projecting every layer" in text and "held-out prompt" not in text:
            out.append("the projection's MSE of fewer prompts is not said to be")
    gaps = [lay["one_step_relative"] for lay in v["layers"] if lay["one_step_relative"] is not None]
    bound = re.search(rf"every layer's one-step gap ≤ {NUMBER}%", head)
    if bound and gaps and not max(gaps) * 100 <= float(bound.group(1)) + 0.005:
        out.append(f"headline bound {bound.group(1)}% below the largest gap {max(gaps)}")
    out += [f"unreadable: {u!r}" for u in unreadable(head + " " + text)]
    return out


def contradictions(ex, rendered: str | None = None) -> list[str]:
    """Every contradiction of extraction `ex`'s verdict (module text); `rendered`: its printed
    report, checked for unreadable numbers too."""
    js = ex.to_json()
    samples = js["model"]["tokens"] == "samples"
    out = sample_label_problems(js) if samples else feature_label_problems(js)
    out += sentence_problems(js)
    if rendered is not None:
        out += [f"report: {u!r}" for u in unreadable(rendered)]
        proj = js["views"].get("projection")
        if proj is not None and proj.get("prompts") != js["model"]["held_out_prompts"]:
            line = next((x for x in rendered.splitlines() if x.startswith("projection onto")), "")
            if f"on the first {proj['prompts']} held-out prompts" not in line:
                out.append("report: the projection's MSEs of fewer prompts are not said to be")
    return out
