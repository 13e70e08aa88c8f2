"""Hostile inputs for the numbers a reader gets, each on an input of its own: a plant whose
prediction is exactly 0 (extract, compare, evaluate), an untrained control that overflows, a
training run with loss spikes and a test MSE far below the zero predictor's, a rounded zero. No
report or command line may print inf%, nan, a signed zero or a number of 67 digits
(tests/verdict_checks.py's `unreadable`), crash, or describe a layer untruthfully.
"""

from __future__ import annotations

import collections
import math
import warnings

import plants
import pytest
import verdict_checks

from eagle_probe.extract import extract
from eagle_probe.tasks import TaskConfig

SMALL = {"probe_batch_size": 32, "test_batch": 128, "tuning_batch": 32}


# --- a plant whose prediction is exactly 0: a = c = 0 in every layer ------------------------------


@pytest.fixture(scope="module")
def zero_plant(tmp_path_factory):
    """(model, task, extraction, checkpoint) of a 2-layer plant with a = c = 0 (it predicts 0)."""
    from eagle_probe import checkpoint

    model, task = plants.eagle([0.0, 0.0], [0.0, 0.0], n=6, d=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow or 0/0 warning either
        ex = extract(model, task, **SMALL)
    path = tmp_path_factory.mktemp("zero") / "zero.pt"
    checkpoint.save(path, model, task, {})
    return model, task, ex, path


def test_a_zero_plant_is_described_truthfully_without_unreadable_numbers(zero_plant):
    _, _, ex, _ = zero_plant
    assert verdict_checks.contradictions(ex, ex.render()) == []
    v = ex.views["verdict"].json
    # an a = c = 0 layer leaves the stream as it was: one EAGLE step with zero steps
    assert [(lay["label"], lay["rule"]) for lay in v["layers"]] == [("EAGLE", "idle")] * 2
    text = v["model"]["text"]
    assert text.count("leaves the stream exactly as it was") == 2
    assert "one-step gap is not defined: both are 0" in text
    assert "the network predicts 0 on every prompt" in text  # no relative prediction gap
    assert "finds no term in any layer" in text
    assert (v["model"]["label"], v["model"]["rule"]) == ("not EAGLE", "no_better_than_zero")


def test_compare_of_a_zero_plant_writes_its_figures_and_readable_text(zero_plant):
    from eagle_probe.compare import CompareConfig, compare
    from eagle_probe.plots import compare_figures

    model, task, ex, _ = zero_plant
    cfg = CompareConfig(prompts=16, sensitivity_prompts=4, directions=2, sweeps=("scale",))
    result = compare(model, task, cfg, values={"scale": (0.5, 1.0)}, extraction=ex)
    cosines = [p["sensitivity_cosine"] for p in result.json["sweeps"]["scale"]["points"]]
    assert all(c["C"] is None for c in cosines)  # ∂D̂/∂C = 0: no cosine, not a crash
    assert "compare_sensitivity" in compare_figures(result.json)
    assert verdict_checks.unreadable(result.json["summary"]["text"]) == []


def test_extract_and_evaluate_commands_on_a_zero_plant(zero_plant, tmp_path, capsys):
    from eagle_probe.cli import main

    *_, path = zero_plant
    out = tmp_path / "x"
    assert main(["extract", str(path), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert verdict_checks.unreadable(printed) == []
    flat = " ".join(printed.split())  # lines wrapped at 100 characters
    assert "relative gap not defined: the network predicts 0 on each" in flat
    assert "differs from the network by" not in flat
    assert max(map(len, printed.splitlines()[:-1])) <= 100  # but the paths written
    assert main(["evaluate", str(path), "--batch", "256"]) == 0
    printed = capsys.readouterr().out
    assert "no better than the zero predictor's" in printed
    assert verdict_checks.unreadable(printed) == []


# --- MSEs of two prompt sets --------------------------------------------------------------------


def test_mses_of_fewer_prompts_than_the_held_out_ones_say_so(monkeypatch):
    from eagle_probe.fit import base

    # a budget that affords the projection only its floor of prompts, as for a large model
    monkeypatch.setattr(base, "VIEW_FLOPS", 1.0)
    model, task = plants.eagle([0.3, 0.2], [0.8, 0.6], normalize="spectral")
    ex = extract(model, task, views=("eagle", "fidelity", "projection", "verdict"), **SMALL)
    proj = ex.views["projection"].json
    assert proj["prompts"] == base.SCORING_FLOOR < ex.info["held_out_prompts"]
    text = ex.verdict["text"]
    assert f"on the first {base.SCORING_FLOOR} held-out prompts, where the network's is " in text
    assert verdict_checks.contradictions(ex, ex.render()) == []


# --- an untrained control whose fresh weights would overflow ----------------------------------


def test_an_untrained_control_that_would_overflow_stays_finite():
    # init_std 0.8 at n = 8: fresh weights grow the stream to ~10⁶⁷ by the fifth layer, inf after
    model, task = plants.eagle([0.3] * 6, [0.6] * 6, normalize="spectral", init_std=0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ex = extract(model, task, views=("eagle", "fidelity", "verdict"), **SMALL)
    gains = ex.info["control_gains"]
    assert all(0 < g < 1 for g in gains)  # every layer scaled down, none skipped
    control = [lay["control_relative"] for lay in ex.views["verdict"].json["layers"]]
    assert all(math.isfinite(c) and c > 0.5 for c in control)
    assert "untrained control's gap ≥" in ex.verdict["headline"]
    assert "scaled down" in ex.verdict["text"]
    assert verdict_checks.unreadable(ex.render()) == []


def test_a_control_at_the_papers_sizes_keeps_its_own_weights():
    from eagle_probe.capture import probe_batch
    from eagle_probe.extract import control_gains
    from eagle_probe.model import LinearTransformer, ModelConfig
    from eagle_probe.tasks import make_generator

    cfg = ModelConfig(n=18, d=18, n_layers=4, normalize="spectral")
    untrained = LinearTransformer(cfg, generator=make_generator(1))
    assert control_gains(untrained, probe_batch(TaskConfig(), 16, 0)) == [1.0] * 4


# --- training: the bar's loss and the final line ----------------------------------------------


def _log_with_a_spike():
    from eagle_probe.train import SeedLog

    log = SeedLog([], [], {})
    log.recent = collections.deque([1e-3] * 199 + [7.68e5], maxlen=200)
    log.spikes = [{"step": 812, "loss": 7.68e5, "skipped": False}]
    return log


def test_the_bar_shows_the_median_loss_and_the_spikes_not_a_window_mean():
    from eagle_probe.train import bar_text

    text = bar_text(_log_with_a_spike(), {"val_mse": 5.8e-3})
    # the window's mean is 3.8e+03: one spike in 200 steps
    assert text == "loss 0.001 (median of 200), 1 spike, val 0.0058"


def test_the_final_line_names_the_spikes_and_caps_the_improvement():
    from eagle_probe.cli.train import final_line

    metrics = {
        "interrupted": False,
        "test": {"mse": 1e-70, "zero_mse": 0.19, "worst_mse": 2e-69},
        "spike_count": 15,
        "spikes": [{"step": 812, "loss": 7.68e5}, {"step": 1960, "loss": None}],
        "skipped_steps": 1,
        "wall_seconds": 12.0,
    }
    line = final_line(metrics, "m.pt")
    assert "(zero predictor 1.900e-01, > 10⁶x)" in line
    assert (
        "15 loss spikes (steps 812 to 1,960, largest loss 7.68e+05, 1 not finite, 1 skipped)"
        in (line)
    )
    assert verdict_checks.unreadable(line) == [] and len(line) < 200
    calm = final_line(metrics | {"spike_count": 0, "spikes": [], "skipped_steps": 0}, "m.pt")
    assert "| no loss spikes |" in calm


# --- a rounded zero has no sign ----------------------------------------------------------------


def test_a_projection_that_costs_nothing_prints_no_signed_zero(planted_extraction):
    ex = planted_extraction[0]
    lines = ex.render().splitlines()
    projection = next(line for line in lines if line.startswith("projection onto"))
    assert "0.0%" in projection  # an exact plant: every cost is round-off
    assert verdict_checks.unreadable(ex.render()) == []
