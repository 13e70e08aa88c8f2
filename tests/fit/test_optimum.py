"""The optimum view (`fit/optimum.py`): the multi-start fit finds a planted EAGLE's steps from poor
starts, never takes a start that blew up, and reports its starts consistently; the distilled
optimum of the shared planted extraction recovers the planted steps; the Jacobian in the steps
matches finite differences."""

from __future__ import annotations

import numpy as np
import plants
import pytest
from conftest import RTOL
from plants import VIEW_STEPS
from probe_context import assert_jacobian_matches_finite_differences

from eagle_probe.extract import build_context, run_views
from eagle_probe.fit import optimum

A_STEPS, C_STEPS = [0.9, 0.6], [1.1, 0.8]
BLOWUP_OK = 2.0  # a stable optimum of raw prompts stays within this of the network held out


@pytest.fixture(scope="module")
def ctx():
    model, task = plants.eagle(A_STEPS, C_STEPS, normalize="spectral", **plants.SMALL)
    return build_context(model, task, probe_batch_size=32, test_batch=128, tuning_batch=128)


def test_normalised_steps_divide_by_the_propagated_batch_max_norm(ctx):
    geo, z0 = ctx.geometry, ctx.tuning.z0[:32]
    eta, gamma = [1 / 3, 0.7], [1.0, 1.9]
    a, c = optimum.normalised_steps(geo, z0, eta, gamma)
    assert a[0] == pytest.approx(1 / 3) and c[0] == pytest.approx(1.0)  # ‖A_0‖₂ = 1
    Z = geo.run_eagle(z0 / geo.prompt_scale(z0)[:, None, None], a, c)
    for layer in range(2):
        A = geo.blocks(Z[layer])[0]
        norm2 = float(np.linalg.norm(A, ord=2, axis=(-2, -1)).max() ** 2)
        assert a[layer] * norm2 == pytest.approx(eta[layer], rel=RTOL)
        assert c[layer] * norm2 == pytest.approx(gamma[layer], rel=RTOL)


def test_multistart_recovers_the_planted_steps_from_poor_starts(ctx):
    geo, tune = ctx.geometry, ctx.tuning
    target = geo.predict(tune.z0, ctx.qk, ctx.vp)  # the planted EAGLE's own predictions
    poor = [0.2 * s for s in A_STEPS], [3.0 * s for s in C_STEPS]
    starts = optimum.starts_for(geo, tune.z0[:64], *poor, np.random.default_rng(0), count=16)
    out = optimum.multistart(geo, tune, target, starts)
    best = out["best_fit"]
    assert best["converged"] and best["loss"] <= RTOL**2 * float(np.mean(target**2))  # MSE
    np.testing.assert_allclose(best["a_steps"][:-1], A_STEPS[:-1], rtol=1e-6)  # a_{L-1}: no D
    np.testing.assert_allclose(best["c_steps"], C_STEPS, rtol=1e-6)
    assert out["best"] == best["loss"] and out["within_1pct"] >= 1


def test_a_start_that_blows_up_is_failed_and_never_the_best(ctx):
    geo, tune = ctx.geometry, ctx.tuning
    L = geo.layers
    good = ("projection", list(A_STEPS), list(C_STEPS))
    starts = [
        ("nan", [float("nan")] * L, [1.0] * L),  # first: min() over NaN would pick it
        ("huge", [1e8] * L, [1e8] * L),  # overflows to inf
        ("negative", [-50.0] * L, [-50.0] * L),  # finite, far above the zero predictor
        good,
    ]
    # no screen iterations: each start is scored as it is (an LM fit may rescue a poor start)
    out = optimum.multistart(geo, tune, tune.D, starts, screen_iter=0, always=("projection",))
    kinds = {r["kind"]: r for r in out["starts"]}
    assert kinds["nan"]["failed"] and kinds["huge"]["failed"] and kinds["negative"]["failed"]
    assert not kinds["projection"]["failed"]
    assert out["failed_starts"] == 3
    assert out["best_fit"]["start_kind"] == "projection"
    assert np.isfinite(out["best"]) and out["best"] <= float(np.mean(tune.D**2))
    assert out["median"] == out["best"] and out["spread"] == 1.0  # exact: one start, x / x
    none = optimum.multistart(geo, tune, tune.D, starts[:2])
    assert none["best_fit"] is None and none["best"] is None and none["failed_starts"] == 2


def test_optimum_view_reports_its_starts_consistently(ctx):
    run_views(ctx, ("eagle", "projection", "optimum"))
    o = ctx.results["optimum"].json
    starts = o["starts"]
    assert len(starts) >= 16 and len(starts) == optimum.STARTS
    assert [s["kind"] for s in starts[:4]] == ["projection", "theory", "paper", "minimax"]
    assert {"random", "jitter"} <= {s["kind"] for s in starts}
    for s in starts:
        for key in ("initial_mse", "final_mse", "converged", "relative_gradient", "iterations"):
            assert key in s
        assert s["final_mse"] <= s["initial_mse"] or s["failed"]
    good = [s["final_mse"] for s in starts if not s["failed"]]
    assert o["best"] == min(good)
    # the fit chosen is the refined one lowest on the fresh validation prompts
    chosen = starts[o["optimal"]["start_index"]]
    assert o["optimal"]["loss"] == chosen["final_mse"]
    refined = [s for s in starts if s["refined"] and not s["failed"]]
    assert chosen["validation_mse"] == min(s["validation_mse"] for s in refined)
    assert o["best"] <= o["median"] == pytest.approx(float(np.median(good)))
    assert o["spread"] == pytest.approx(max(good) / min(good))
    assert 1 <= o["within_1pct"] <= len(good)
    assert o["failed_starts"] == len(starts) - len(good)
    assert o["screen_prompts"] <= o["tuning_prompts"]
    assert o["refined_starts"] == sum(s["refined"] for s in starts) == optimum.REFINE
    assert all(s["refined"] for s in starts if s["kind"] in optimum.ALWAYS)
    best = starts[o["optimal"]["start_index"]]
    assert best["refined"] and best["mse"] == o["optimal_mse"] == o["optimal"]["mse"]
    # never worse on the tuning prompts than the fit from the weight-read steps alone
    single = optimum.fit_steps(ctx.geometry, ctx.tuning, ctx.tuning.D, *_start(o))
    assert o["best"] <= single["loss"] * (1 + RTOL)
    assert o["optimal"]["converged"]


def _start(o: dict) -> tuple[list, list]:
    return o["start"]["a_steps"], o["start"]["c_steps"]


def test_steps_that_blow_up_on_fresh_prompts_are_failed_not_the_best():
    """Raw prompts: steps tuned on prompts with ‖A‖ ≈ 1 overshoot on a fresh prompt with a
    larger ‖A‖. The validation draw catches it: that fit is `unstable`, never the best."""
    from eagle_probe.fit.base import HeldOut

    model, task = plants.eagle([0.3, 0.2], [0.5, 0.4], **plants.SMALL)
    ctx = build_context(model, task, probe_batch_size=32, test_batch=64, tuning_batch=64)
    geo, tune = ctx.geometry, ctx.tuning
    s = np.linalg.norm(geo.blocks(tune.z0)[0], ord=2, axis=(-2, -1)).max()
    tune = HeldOut(z0=tune.z0 / s, D=tune.D / s)  # every tuning prompt has ‖A‖₂ ≤ 1
    big = HeldOut(z0=tune.z0[:8] * 4.0, D=tune.D[:8] * 4.0)  # ‖A‖₂ up to 4
    bold = ("bold", [1.9, 1.9], [1.9, 1.9])  # contracts ‖A‖ ≤ 1, diverges at 4
    safe = ("safe", [0.05, 0.05], [0.1, 0.1])
    kw = dict(screen_iter=0, refine_iter=0, max_iter=0, always=("bold", "safe"))
    without = optimum.multistart(geo, tune, tune.D, [bold, safe], **kw)
    assert not any(r["failed"] for r in without["starts"])
    out = optimum.multistart(geo, tune, tune.D, [bold, safe], validation=big, **kw)
    kinds = {r["kind"]: r for r in out["starts"]}
    assert kinds["bold"]["unstable"] and kinds["bold"]["failed"]
    assert not kinds["safe"]["failed"] and out["unstable_starts"] == 1
    assert out["best_fit"]["start_kind"] == "safe"


def test_kept_svds_and_scales_are_those_of_the_rows_asked_for(ctx):
    """The SVDs and prompt scales kept by memory give a leading slice the first rows of the
    kept ones, a longer array on the same memory its own, and a copy with other values its own."""
    geo, z0 = ctx.geometry, ctx.tuning.z0
    fresh = [x.copy() for x in optimum.spectral_factors(geo, z0.copy())]
    short = optimum.spectral_factors(geo, z0[:8])  # kept for the first 8 rows
    whole = optimum.spectral_factors(geo, z0)  # longer on the same memory: computed again
    again = optimum.spectral_factors(geo, z0[:5])  # the first rows of the whole one
    for got, k in ((short, 8), (whole, z0.shape[0]), (again, 5)):
        for x, ref in zip(got, fresh, strict=True):
            # exact: NumPy's batched SVD runs one LAPACK call per prompt, on the same values
            np.testing.assert_array_equal(x, ref[:k])
    other = z0[:8] * 2.0  # new memory, other values: its own scales and singular values
    np.testing.assert_allclose(geo.prompt_scale(other), 2.0 * geo.prompt_scale(z0[:8]))
    np.testing.assert_allclose(optimum.spectral_factors(geo, other)[0], short[0], rtol=RTOL)
    assert not optimum.spectral_factors(geo, z0)[0].flags.writeable


# --- the optimum view on the shared planted extraction, and its pieces on a planted model ---------


def test_distilled_optimum_recovers_the_planted_steps(planted_extraction):
    ex, a, c = planted_extraction
    o = ex.views["optimum"].json
    d = o["distilled"]
    assert d["converged"]
    np.testing.assert_allclose(d["a_steps"][:-1], a[:-1], rtol=1e-6)  # a_{L-1} never reaches D
    np.testing.assert_allclose(d["c_steps"], c, rtol=1e-6)
    # beside the means, the median and the trimmed mean: the distilled fit is the network, so
    # its are the network's, and the network's are the extraction's own on the same prompts
    if o["held_out_prompts"] == ex.info["held_out_prompts"]:
        assert o["network_median_mse"] == pytest.approx(ex.network["median_mse"], rel=1e-6)
        assert o["network_trimmed_mse"] == pytest.approx(ex.network["trimmed_mse"], rel=1e-6)
    for key in ("median_mse", "trimmed_mse"):
        assert d[key] == pytest.approx(o[f"network_{key}"], rel=1e-5)
        assert o["optimal"][key] > 0
    assert "(median " in "\n".join(optimum.report_lines(ex))
    if ex.info["normalize"] != "none":
        assert o["optimal"]["converged"]
        assert o["optimal_mse"] <= o["network_mse"] * 1.01
    else:
        # raw prompts: steps tuned on the tuning prompts can diverge on a fresh large-‖A‖ one;
        # then the optimum is the best start that stays stable on the validation prompts
        assert o["optimal"]["converged"] or o["optimal"]["stable_fallback"]
        if not o["optimal"]["converged"] or o["optimal_mse"] > 2 * o["optimal"]["loss"]:
            assert any("fail on others" in w for w in ex.warnings)
        assert o["optimal_mse"] <= o["network_mse"] * BLOWUP_OK


def test_jacobian_of_eagle_matches_finite_differences():
    model, task = plants.eagle(*VIEW_STEPS, normalize="spectral")
    ctx = build_context(model, task, probe_batch_size=16, test_batch=32, tuning_batch=32)
    geo = ctx.geometry
    z0 = ctx.tuning.z0
    assert_jacobian_matches_finite_differences(geo, z0, np.array(VIEW_STEPS[0] + VIEW_STEPS[1]))


def test_optimum_from_a_poor_start_converges_to_a_better_eagle():
    model, task = plants.eagle(*VIEW_STEPS, normalize="spectral")
    ctx = build_context(model, task, probe_batch_size=16, test_batch=256, tuning_batch=512)
    start = [s * 0.3 for s in VIEW_STEPS[0]], [s * 0.3 for s in VIEW_STEPS[1]]
    fit = optimum.fit_steps(ctx.geometry, ctx.tuning, ctx.tuning.D, *start)
    before = optimum.eagle_mse(ctx.geometry, ctx.held_out, *start)
    after = optimum.eagle_mse(ctx.geometry, ctx.held_out, fit["a_steps"], fit["c_steps"])
    assert fit["converged"] and fit["relative_gradient"] <= optimum.GTOL
    assert after < 0.5 * before
