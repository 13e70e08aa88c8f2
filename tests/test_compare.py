"""Off the training distribution: `eagle_probe.compare` on planted models, whose algorithm is
known exactly, and its baselines against NumPy's least squares."""

import re
from dataclasses import replace

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, assert_close
from plants import PLANTED_STEPS
from plants import eagle as planted_model

from eagle_probe.compare import (
    CompareConfig,
    _point_prompts,
    cgls,
    compare,
    default_values,
    gd,
    in_gauge,
    theory_eagle,
)
from eagle_probe.tasks import TaskConfig, make_generator, sample

SMALL = CompareConfig(prompts=32, sensitivity_prompts=8, directions=4, map_steps=8)


def _lstsq_answer(z0, d, n):
    """B A⁺ C from NumPy's least squares, prompt by prompt: w = argmin ‖w A − B‖ (min norm)."""
    out = []
    for z in z0:
        A, B, C = z[:d, :n], z[d:, :n], z[:d, n:]
        w = np.linalg.lstsq(A.T, B.T, rcond=None)[0].T  # (d', d)
        out.append(w @ C)
    return np.stack(out)


@pytest.fixture(scope="module")
def planted_compare():
    """compare() of a planted float64 EAGLE (one per normalisation path)."""
    out = {}
    for normalize in ("none", "spectral"):
        a, c = PLANTED_STEPS[normalize]
        model, task = planted_model(a, c, normalize=normalize)
        out[normalize] = (model, task, compare(model, task, SMALL))
    return out


@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_planted_network_equals_its_algorithm_at_every_sweep_point(planted_compare, normalize):
    _, _, result = planted_compare[normalize]
    sweeps = result.json["sweeps"]
    assert set(sweeps) == {"scale", "kappa", "rank", "alpha", "noise"}
    assert "samples" in result.json["skipped"]
    for name, sweep in sweeps.items():
        for point in sweep["points"]:
            assert point["gap"]["faithful"] <= RTOL, (name, point["value"])
            for block in ("C", "A"):  # 1 − cos = θ²/2: an angle of 1.4e-5, above RTOL
                assert point["sensitivity_cosine"][block] >= 1 - 1e-10, (name, block)
            # the faithful algorithm's MSE is the network's to round-off
            net, alg = point["mse"]["network"], point["mse"]["faithful"]
            assert abs(net - alg) <= RTOL * max(net, 1e-300), (name, point["value"])
            # and so are the median and the trimmed mean beside it, each at most the mean's
            # worst prompt and, for the trimmed mean of these few prompts, at most the mean
            for key in ("median_mse", "trimmed_mse"):
                net, alg = point[key]["network"], point[key]["faithful"]
                assert abs(net - alg) <= RTOL * max(net, 1e-300), (name, key)
                assert 0 <= net <= point["mse"]["network"] * point["prompts"]
            assert point["trimmed_mse"]["network"] <= point["mse"]["network"] * (1 + 1e-12)
    assert result.json["interpolation"]["mse_relative_range"] <= RTOL
    assert max(result.json["interpolation"]["gap"]) <= RTOL
    assert result.json["export_check"]["relative_gap"] <= RTOL


def test_planted_sweep_points_are_the_prompts_asked_for(planted_compare):
    """The scale sweep multiplies A and divides the answer; κ prompts have the condition number
    and the training median ‖A‖₂ asked for (checked from singular values here)."""
    _, task, result = planted_compare["none"]
    base = sample(task, 64, make_generator(5), dtype=torch.float64)
    z0, D = _point_prompts(task, "scale", 4.0, 64, 5, 1.0)
    np.testing.assert_allclose(z0[:, : task.d, : task.n], 4.0 * base.A.numpy())
    assert_close(_lstsq_answer(z0, task.d, task.n), D)
    z0, D = _point_prompts(task, "kappa", 1e4, 64, 5, 2.5)
    sv = np.linalg.svd(z0[:, : task.d, : task.n], compute_uv=False)
    s = min(task.rank, task.d, task.n)
    np.testing.assert_allclose(sv[:, 0], 2.5, rtol=RTOL)
    np.testing.assert_allclose(sv[:, 0] / sv[:, s - 1], 1e4, rtol=RTOL)
    assert_close(_lstsq_answer(z0, task.d, task.n), D, rtol=1e-5)  # κ = 1e4: κ² eps = 1e-8
    table = result.sweeps["scale"]
    np.testing.assert_allclose(table.value, default_values(task)["scale"])


def test_an_extra_term_shows_the_gap_growing_away_from_training():
    """A planted EAGLE with a small extra W_VP term from A's columns to the query columns (a
    term cubic in A where EAGLE's D update is linear in A): the gap to the extracted algorithm
    grows with the scale of A and shrinks below it."""
    from eagle_probe.layouts import model_from_products, state_products

    a, c = PLANTED_STEPS["spectral"]
    model, task = planted_model(a, c, normalize="spectral")
    qk, vp = state_products(model)
    extra = vp.copy()
    n = task.n
    extra[1, 0, :n, n:] = 0.05 * np.random.default_rng(0).standard_normal((n, task.n_prime))
    bent = model_from_products(model.cfg, qk, extra)
    cfg = CompareConfig(prompts=64, sensitivity_prompts=8, directions=4, sweeps=("scale",))
    result = compare(bent, task, cfg)
    points = result.json["sweeps"]["scale"]["points"]
    gaps = {p["value"]: p["gap"]["faithful"] for p in points}
    assert gaps[1.0] > 1e-6  # the extra term is visible at the training scale
    assert gaps[4.0] > 3 * gaps[1.0] and gaps[0.25] < gaps[1.0] / 3
    assert min(p["sensitivity_cosine"]["A"] for p in points) < 1 - 1e-6


def test_baselines_against_numpy_least_squares():
    task = TaskConfig(n=8, d=6, rank=4)
    p = sample(task, 16, make_generator(3), dtype=torch.float64)
    z0 = p.z0().numpy()
    want = _lstsq_answer(z0, 6, 8)
    assert_close(want, p.D.numpy())
    # CGLS reaches B A⁺ C in rank(A) iterations up to round-off; GD gets closer with every step
    assert_close(cgls(z0, 6, 8, 12), want, rtol=1e-6)
    _, path = gd(z0, 6, 8, 50)
    errors = [float(np.sum((D - want) ** 2)) for D in path]
    assert all(b <= a * (1 + RTOL) for a, b in zip(errors, errors[1:], strict=False))
    # the theory's EAGLE (η = 1/3, γ = 1) converges to B A⁺ C
    D = theory_eagle(z0, 6, 8, 40)[-1]
    assert_close(D, want)


def test_iteration_map_finds_one_step_of_theory_eagle(planted_compare):
    """A spectral-normalised planted layer with a = 1/3, c = 1 is one step of Algorithm 1 with
    η = 1/3, γ = 1 (ρ = 1 on the normalised prompt): its closest count is 1, at round-off."""
    model, task = planted_model([1 / 3, 0.2], [1.0, 0.5], normalize="spectral")
    result = compare(model, task, SMALL)
    eagle = result.json["iteration_map"]["eagle"]
    # the distance is a squared relative error: RTOL² is a relative error of RTOL
    assert eagle["closest"][0] == 1 and eagle["closest_distance"][0] <= RTOL**2


def test_gauge_keeps_every_head_product():
    rng = np.random.default_rng(1)
    qk, qk_f, vp_f = (rng.standard_normal((2, 3, 5, 5)) for _ in range(3))
    g_qk, g_vp = in_gauge(qk, qk_f, vp_f)
    for layer in range(2):
        for head in range(3):
            assert_close(
                np.kron(g_qk[layer, head], g_vp[layer, head]),
                np.kron(qk_f[layer, head], vp_f[layer, head]),
            )
    np.testing.assert_allclose(
        np.linalg.norm(g_qk, axis=(-2, -1)), np.linalg.norm(qk, axis=(-2, -1)), rtol=RTOL
    )


@pytest.mark.parametrize("regime", ["distributed", "constrained"])
def test_other_regimes_planted_agree(regime):
    from eagle_probe.layouts import plant
    from eagle_probe.model import ModelConfig

    cfg = ModelConfig(
        regime=regime, n=6, d=6, n_layers=2, machines=3, rank=3, normalize="none", dtype="float64"
    )
    model = plant(cfg, [0.05, 0.04], [0.09, 0.08])
    task = TaskConfig(n=6, d=6, rank=3)
    config = CompareConfig(
        prompts=24, sensitivity_prompts=6, directions=3, map_steps=6, sweeps=("scale", "kappa")
    )
    result = compare(model, task, config)
    assert result.json["export_check"]["relative_gap"] <= RTOL
    for sweep in result.json["sweeps"].values():
        assert max(p["gap"]["faithful"] for p in sweep["points"]) <= RTOL


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown sweep"):
        CompareConfig(sweeps=("size",))
    with pytest.raises(ValueError, match="prompts"):
        CompareConfig(prompts=1)


def _keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


def documented_keys(data: dict) -> set:
    """The keys of a JSON document that docs/extraction-schema.md does not name in backticks."""
    from conftest import ROOT

    text = (ROOT / "docs" / "extraction-schema.md").read_text()
    return set(_keys(data)) - set(re.findall(r"`([A-Za-z_0-9]+)`", text))


def test_schema_doc_lists_every_compare_field(planted_compare):
    _, _, result = planted_compare["none"]
    data = dict(result.json, model={k: v for k, v in result.json["model"].items() if k != "task"})
    assert not documented_keys(data)  # the TaskConfig's own fields are docs/training.md's


def test_the_algorithm_run_longer_converges_to_the_answer():
    """The faithful layers followed by theory steps (η = 1/3, γ = 1) reach B A⁺ C on exactly
    low-rank prompts at every scale of A, while the network's fixed depth does not."""
    a, c = PLANTED_STEPS["spectral"]
    model, task = planted_model(a, c, normalize="spectral")
    cfg = CompareConfig(prompts=32, sensitivity_prompts=4, directions=2, more_steps=15)
    result = compare(model, task, replace(cfg, sweeps=("scale",)))
    for point in result.json["sweeps"]["scale"]["points"]:
        assert point["relative_mse"]["more"] <= RTOL**2, point["value"]  # MSE: errors squared
        assert point["relative_mse"]["network"] >= 1e-6, point["value"]
    assert result.json["steps"]["more"]["total_steps"] == 45


def test_a_planted_gdpp_model_follows_its_algorithm_on_von_oswald_sweeps():
    """Planted GD++ (n = 6): the network is its algorithm at every sweep point, on n context
    samples too (the steps carry the scores' 1/n); with noisy labels the answer B A⁺ C is no
    longer exact; the figures of every sweep are drawn."""
    from eagle_probe import layouts
    from eagle_probe.plots import compare_figures

    qk, vp = layouts.gdpp_products(3, 1, [0.5, 0.4], [0.3, 0.0])
    model = plants.samples(qk, vp, n=6, d=3)
    task = TaskConfig(task="least_squares", n=6, d=3, n_prime=1, d_prime=1, alpha=1.0)
    result = compare(model, task, SMALL)
    sweeps = result.json["sweeps"]
    assert list(sweeps) == ["input_scale", "query_scale", "task_noise", "samples"]
    assert result.json["model"]["family"] == "GD++" and result.json["steps"]["more"] is None
    for name, sweep in sweeps.items():
        for point in sweep["points"]:
            assert point["gap"]["faithful"] <= RTOL, (name, point["value"])
            assert "more" not in point["mse"]
    assert [p["value"] for p in sweeps["samples"]["points"]] == [1, 3, 6, 12, 24]
    noisy = sweeps["task_noise"]["points"]
    exact_floor = RTOL**2 * noisy[0]["zero_mse"]  # a relative error of RTOL, squared
    assert noisy[0]["mse"]["exact"] <= exact_floor < noisy[-1]["mse"]["exact"]
    assert max(result.json["interpolation"]["gap"]) <= RTOL
    assert list(result.json["iteration_map"]) == ["gd"]
    figures = compare_figures(result.json)
    assert set(figures) == {
        "compare_sweeps",
        "compare_sensitivity",
        "compare_interpolation",
        "iteration_map",
    }
    ticks = [t.get_text() for t in figures["compare_sweeps"].axes[0].get_xticklabels()]
    assert ticks == ["0.25", "0.5", "1", "2", "4"]  # input scale in plain numbers


def test_interpolation_is_flat_for_a_planted_model_in_another_gauge():
    """W_QK × 5, W_VP / 5: the same network; its straight path to the family is flat only in the
    network's gauge (without it the midpoint's layers step 1.8× too far)."""
    from eagle_probe.layouts import model_from_products, state_products

    a, c = PLANTED_STEPS["spectral"]
    model, task = planted_model(a, c, normalize="spectral")
    qk, vp = state_products(model)
    scaled = model_from_products(model.cfg, 5.0 * qk, vp / 5.0)
    cfg = CompareConfig(prompts=32, sensitivity_prompts=4, directions=2, sweeps=("scale",))
    result = compare(scaled, task, cfg)
    assert result.json["interpolation"]["mse_relative_range"] <= RTOL
    assert max(result.json["interpolation"]["gap"]) <= RTOL


def test_render_keeps_lines_to_100_characters(planted_compare):
    result = planted_compare["none"][2]
    lines = result.render().splitlines()
    assert lines[0].startswith("the network follows its extracted algorithm")
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert " ".join(line.strip() for line in lines[:3]).startswith(
        result.json["summary"]["text"][:150]
    )
