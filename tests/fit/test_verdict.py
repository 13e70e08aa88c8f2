"""The verdict view (`fit/verdict.py`): EAGLE in every layer of a planted model; not EAGLE for an
untrained model or a planted one that barely moves (its layers are EAGLE, its answer no better
than predicting zero). The verdict in ten seconds: one headline line (label, family, confidence
and its reasons), lines of at most 100 characters, the sample layout's α_0 from the fit its label
used beside the theory's one-step value, warnings only about the families in question, and the
readout-sign hint."""

from __future__ import annotations

import plants
import pytest
from plants import VIEW_STEPS

from eagle_probe import layouts
from eagle_probe.extract import extract
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator

N, D = 20, 5
ISOTROPIC = TaskConfig(task="least_squares", n=N, d=D, n_prime=1, d_prime=1, alpha=1.0)


def _gd(eta: float):
    """One planted GD layer: x_1 = (η / n) A Bᵀ, α_0 = −η / n."""
    return plants.samples(*layouts.gd_products(D, 1, [eta]), n=N, d=D)


@pytest.fixture(scope="module")
def best_step():
    """The best single step from zero, η / n = 1 / (n + d + 1)."""
    model = _gd(N / (N + D + 1))
    return extract(model, ISOTROPIC, probe_batch_size=64, test_batch=256, tuning_batch=64)


def test_sample_verdict_carries_label_family_confidence_reasons_thresholds(best_step):
    v = best_step.verdict
    assert v["label"] == "GD" and v["family"] == "GD" and v["confidence"] == "high"
    assert v["thresholds"]["r2_min"] == 0.99
    assert any("−1/(n + d + 1) = -0.03846 (0.0%)" in r for r in v["reasons"]), v["reasons"]
    assert v["headline"].startswith("GD, confidence high: ")


def test_sample_table_shows_the_labels_fit_and_the_theory(best_step):
    table = best_step.table()
    assert "eta" not in table and "gamma" not in table  # EAGLE's columns are not this layout's
    assert table["alpha_0"].iloc[0] == pytest.approx(-1 / (N + D + 1), rel=1e-9)
    assert table["theory"].iloc[0] == pytest.approx(-1 / (N + D + 1), rel=1e-12)
    assert table["orders"].iloc[0] == "0"


def test_report_opens_with_the_headline_and_keeps_to_100_characters(best_step):
    lines = best_step.render("a/rather/long/path/to/the/model/checkpoint.pt").splitlines()
    assert lines[0] == "verdict: GD, confidence high"
    assert "−1/(n + d + 1)" in " ".join(lines[1:3])
    assert max(map(len, lines)) <= 100
    text = " ".join(line.strip() for line in lines)
    assert "1 layer x 1 head," in text and "1 layers" not in text


def test_gradient_ascent_gets_the_readout_hint():
    ex = extract(
        _gd(-N / (N + D + 1)),
        ISOTROPIC,
        probe_batch_size=64,
        test_batch=256,
        tuning_batch=64,
        control=False,
    )
    assert any("--readout +1" in w for w in ex.warnings), ex.warnings
    assert ex.verdict["label"] == "unrecognised"  # worse than predicting zero


def test_an_eagle_model_gets_no_gradient_descent_warnings_and_a_headline():
    model, task = plants.eagle([0.02, 0.015], [0.03, 0.02])
    ex = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=64)
    v = ex.verdict
    assert (v["label"], v["family"], v["confidence"]) == ("EAGLE", "eagle", "high")
    assert v["reasons"][0].startswith("every layer's one-step gap ≤ ")
    lines = ex.render().splitlines()
    assert lines[0] == "verdict: EAGLE (eagle), confidence high"
    assert max(map(len, lines)) <= 100
    assert not [w for w in ex.warnings if "gradient-descent step" in w]
    assert not [w for w in ex.warnings if "--readout" in w]


def test_the_page_opens_its_verdict_with_the_headline(best_step):
    import html

    from eagle_probe.report import render_html

    page = render_html(best_step, "m.pt", {})
    v = best_step.verdict  # the headline's label and confidence, then the numbers they rest on
    first = f"Verdict: {v['label']}, confidence {v['confidence']}"
    assert f'<p class="headline"><strong>{html.escape(first)}</strong></p>' in page
    assert f'<p class="reasons">{html.escape("; ".join(v["reasons"]))}</p>' in page
    assert v["headline"] == f"{v['label']}, confidence {v['confidence']}: " + "; ".join(
        v["reasons"]
    )
    assert "1 layer × 1 head," in page


def test_a_model_no_better_than_zero_is_not_called_1x_below_it():
    from eagle_probe.fit.verdict import _below_zero

    assert _below_zero(0.321, 0.32) == "no better than the zero predictor's 0.32"
    assert _below_zero(0.5, 0.32).startswith("no better")
    assert _below_zero(0.01, 0.2) == "20× below the zero predictor's 0.2"
    assert _below_zero(3.3, 1.0) == "no better than the zero predictor: 3.3× above its 1"


# --- the views' shared planted extraction, untrained and barely moving models ---------------------


def test_verdict_is_eagle_in_every_layer(planted_extraction):
    ex, _, _ = planted_extraction
    v = ex.views["verdict"].json
    assert [lay["label"] for lay in v["layers"]] == ["EAGLE"] * len(VIEW_STEPS[0])
    if ex.network["trimmed_mse"] <= 0.8 * ex.network["zero_mse"]:  # what the verdict reads
        assert v["model"]["label"] == "EAGLE"
        assert not [w for w in ex.warnings if "fail on others" not in w]
    else:
        # constant steps small enough for the rare large-‖A‖ prompt leave the typical prompt
        # barely solved: the model runs EAGLE exactly but is no better than predicting zero
        assert v["model"]["label"] == "not EAGLE"
        assert any("zero predictor" in w for w in ex.warnings)


def test_one_prompt_cannot_make_a_working_model_no_better_than_zero():
    """4,096 held-out prompts predicted at a quarter of D's error and one at 10⁴ (the mean far
    above the zero predictor's): the zero-predictor test reads the mean without the worst 0.1% of
    prompts (5 of them), so the model works, and the sentence that says why quotes the trimmed
    MSE. A context without the tail (a network not scored) reads the mean, as before."""
    import numpy as np

    from eagle_probe.evaluate import tails
    from eagle_probe.fit.base import Context, HeldOut
    from eagle_probe.fit.verdict import _tail_sentence, _zero_read, working

    rng = np.random.default_rng(0)
    D = rng.standard_normal((4096, 2, 2))
    pred = 0.5 * D  # each prompt's error a quarter of its zero predictor's
    pred[17] = 1e4
    held = HeldOut(z0=np.zeros((4096, 1, 1)), D=D)
    errors, zero = ((pred - D) ** 2).mean(axis=(-1, -2)), (D**2).mean(axis=(-1, -2))
    ctx = Context(*[None] * 4, held, None, pred, network_tails=tails(errors, zero))
    assert ctx.network_mse > 1e4 * ctx.zero_mse  # the mean alone: no better than predicting zero
    assert working(ctx) and ctx.working_mse < 0.3 * ctx.zero_mse
    assert _zero_read(ctx) == (ctx.working_mse, "0.1%-trimmed MSE")
    assert "without its worst 5 prompts of 4096" in _tail_sentence(ctx)
    bare = Context(*[None] * 4, held, None, pred)
    assert not working(bare) and _zero_read(bare) == (bare.network_mse, "MSE")
    assert _tail_sentence(bare) is None
    fine = Context(*[None] * 4, held, None, 0.5 * D, network_tails=tails(zero / 4, zero))
    assert working(fine) and _zero_read(fine)[1] == "MSE" and _tail_sentence(fine) is None


def test_untrained_model_is_not_eagle_and_says_so():
    cfg = ModelConfig(n=8, d=6, n_layers=2, normalize="spectral", dtype="float64")
    model = LinearTransformer(cfg, generator=make_generator(3))
    task = TaskConfig(n=8, d=6, rank=4)
    views = ("eagle", "fidelity", "projection", "weights", "attribution", "verdict")
    ex = extract(model, task, probe_batch_size=64, test_batch=256, views=views)
    assert ex.views["verdict"].json["model"]["label"] == "not EAGLE"
    assert any("zero predictor" in w for w in ex.warnings)


def test_a_model_that_barely_moves_is_not_eagle_though_its_layers_are():
    model, task = plants.eagle([1e-4, 1e-4], [1e-4, 1e-4], normalize="spectral")
    ex = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=128)
    assert ex.views["verdict"].json["model"]["label"] == "not EAGLE"
    assert any("zero predictor" in w for w in ex.warnings)


# --- the rule table: one in code, the same in the docs, applied to the label and the text -------


def test_the_docs_rule_table_is_the_code_table():
    from pathlib import Path

    from eagle_probe.fit.rules import RULES, SCOPES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "extraction-schema.md").read_text()
    table = doc.split("### The rule table", 1)[1].split("| scope | label | rule | when |", 1)[1]
    lines = table.split("\n\n", 1)[0].strip().splitlines()[1:]  # under the |---| line
    rows = [tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines]
    assert rows == [(r.scope, r.label, f"`{r.name}`", r.text()) for r in RULES]
    for scope in SCOPES:
        assert f"- **{scope}**:" in doc


def test_each_scope_ends_in_a_rule_that_always_holds():
    from eagle_probe.fit.rules import RULES, SCOPES

    for scope in SCOPES:
        last = [r for r in RULES if r.scope == scope][-1]
        assert last.holds({}), scope  # "otherwise": every input gets a label


def _facts(**changed) -> dict:
    facts = {
        "working": True,
        "control_as_good": False,
        "sends_a": False,
        "coadapted": False,
        "every_eagle": True,
        "every_like": True,
        "cheap": True,
        "near": True,
    }
    return facts | changed


def test_coadapted_layers_are_never_eagle_whatever_their_one_step_gaps():
    from eagle_probe.fit.verdict import decide

    assert decide("model", _facts()).label == "EAGLE"
    rule = decide("model", _facts(coadapted=True))
    assert (rule.label, rule.name) == ("not EAGLE", "coadapted")
    rule = decide("model", _facts(coadapted=True, every_eagle=False))
    assert (rule.label, rule.name) == ("not EAGLE", "coadapted")
    assert decide("model", _facts(working=False, coadapted=True)).name == "no_better_than_zero"


@pytest.fixture(scope="module")
def planted_context():
    """A real Context of a planted 3-layer model with the views the verdict reads."""
    from probe_context import make_context

    from eagle_probe.extract import run_views

    model, task = plants.eagle([0.3, 0.2, 0.1], [0.8, 0.6, 0.4], normalize="spectral")
    ctx = make_context(model, task, probes=64, held_out=256)
    run_views(ctx, ("eagle", "fidelity", "projection", "optimum", "terms"))
    return ctx


def _verdict_with(ctx, **json_changes):
    """The verdict view on `ctx` with the projection's JSON changed (layer MSEs by factor)."""
    import copy
    from dataclasses import replace

    from eagle_probe.fit.base import ViewResult
    from eagle_probe.fit.verdict import verdict_view

    proj = copy.deepcopy(ctx.results["projection"].json)
    pnet = proj["network_mse"]
    proj["projected_mse"] = pnet * json_changes.get("whole", 1.0)
    for layer, factor in json_changes.get("alone", {}).items():
        proj["layers"][layer]["mse"] = pnet * factor
    results = dict(ctx.results) | {"projection": ViewResult("projection", proj)}
    return verdict_view(replace(ctx, results=results)).json


def test_a_layer_breaking_the_model_alone_makes_the_verdict_not_eagle(planted_context):
    before = _verdict_with(planted_context)
    assert before["model"]["label"] == "EAGLE"
    v = _verdict_with(planted_context, whole=1.03, alone={1: 1.29e13})
    model = v["model"]
    assert [lay["label"] for lay in v["layers"]] == ["EAGLE"] * 3  # each layer is a step
    assert (model["label"], model["family"], model["rule"]) == ("not EAGLE", None, "coadapted")
    assert model["headline"].startswith("not EAGLE, confidence high: co-adapted layers: layer 1")
    assert "×10⁶ or more" in model["headline"] and "1.29e+13" not in model["text"]
    assert "co-adapted" in model["text"] and model["text"].endswith("Verdict: not EAGLE.")
    assert "Verdict: EAGLE" not in model["text"]


def test_every_optimum_ratio_is_the_networks_mse_over_the_optimums(planted_context):
    import re

    model = _verdict_with(planted_context)["model"]
    opt = planted_context.results["optimum"].json
    exact = opt["network_mse"] / opt["optimal_mse"]
    assert model["network_over_optimum"] == pytest.approx(exact, rel=1e-12)
    head = re.search(r"network ([0-9.e+-]+)× its family's optimum", model["headline"])
    text = re.search(r"the network's MSE is ([0-9.e+-]+)× that", model["text"])
    assert float(head.group(1)) == float(f"{exact:.2g}")
    assert float(text.group(1)) == float(f"{exact:.3g}")
    assert "× the network's MSE" not in model["text"]


def test_the_terms_sentence_counts_the_terms_the_terms_view_found():
    from eagle_probe.fit import families
    from eagle_probe.fit.base import ViewResult
    from eagle_probe.fit.verdict import _terms_text

    def term(name):
        return {"name": name, "frequency": 1.0, "coefficient": -0.1}

    full = ["A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC"]
    layers = [
        {"layer": 0, "terms": [term(t) for t in full]},
        {"layer": 1, "terms": [term("C+=AAtC"), term("D+=BAtC")]},  # a = 0: no A, B step
    ]
    eagle = families.get("eagle")
    text = " ".join(_terms_text(ViewResult("terms", {"layers": layers}), eagle))
    assert "four" not in text and "4 terms in every layer" not in text
    assert "layer 1 2 of its 4 (C+=AAtC, D+=BAtC)" in text
    text = " ".join(_terms_text(ViewResult("terms", {"layers": layers[:1]}), eagle))
    assert text == "Term discovery finds eagle's 4 terms in every layer and nothing else."
