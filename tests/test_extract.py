import importlib.util
import os
from dataclasses import replace

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, RTOL_FLOAT32, assert_close, numpy_eagle, prompt_norm
from plants import NORMALIZE_PATHS, PLANTED_STEPS

from eagle_probe.capture import capture, probe_batch
from eagle_probe.errors import EagleProbeError
from eagle_probe.export import write_solver
from eagle_probe.extract import build_context, extract
from eagle_probe.fit import eagle_expansion
from eagle_probe.fit.eagle import fit_steps
from eagle_probe.fit.fidelity import fidelity_table
from eagle_probe.tasks import Prompt, make_generator, sample

planted = plants.eagle


def probe_iterates(task, normalize, a, c, batch, seed):
    """EAGLE on the probes `extract` draws (same task, batch and seed), in the model's internal
    units, computed in NumPy: (iterates [(A_l, B_l, C_l, D_l)], per-prompt scale s (b, 1, 1))."""
    p = probe_batch(task, batch, seed)
    A, B, C = (t.numpy() for t in (p.A, p.B, p.C))
    s = prompt_norm(A, normalize)[:, None, None]
    return numpy_eagle(A / s, B / s, C / s, a, c), s


def off_eagle(model, eps=0.05):
    """The planted model with a small non-EAGLE term in layer 1's W_QK, head 0 (fidelity > 0)."""
    return plants.add_products(model, qk=plants.product_term(model, 1, 0, 0, 1, eps))


CASES = [
    ([0.05, 0.04, 0.03], [0.09, 0.08, 0.07], 1),
    ([0.02, 0.0, 0.05, 0.01], [0.1, 0.05, 0.02, 0.08], 3),
    ([0.01], [0.2], 2),
]

# The views these tests read (the others are tested in tests/fit)
STEP_VIEWS = ("eagle", "fidelity", "polynomial")

# Steps per case on the `none` path; the normalised paths see ‖A‖₂ ≤ 1, so their steps are
# these times the median ‖A‖₂² of the small task (about 14, see conftest.PLANTED_STEPS).
SCALE = {"none": 1.0, "spectral": 10.0, "frobenius": 12.0}


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
@pytest.mark.parametrize("a, c, heads", CASES)
@pytest.mark.parametrize("dtype, tol", [("float64", RTOL), ("float32", RTOL_FLOAT32)])
def test_planted_steps_are_recovered(a, c, heads, dtype, tol, normalize):
    a, c = [x * SCALE[normalize] for x in a], [x * SCALE[normalize] for x in c]
    model, task = planted(a, c, heads=heads, dtype=dtype, normalize=normalize)
    ex = extract(
        model,
        task,
        probe_batch_size=64,
        control=False,
        test_batch=64,
        tuning_batch=64,
        views=STEP_VIEWS,
    )
    assert_close(ex.layers.a_step, a, rtol=tol)  # one case plants a = 0
    np.testing.assert_allclose(ex.layers.c_step, c, rtol=tol)
    # 1 − R² is a square: 1e-10 ≥ RTOL²
    assert (ex.layers.r2 > 1 - 1e-10).all() and (ex.layers.one_step_residual < 1e-6).all()
    # a mean squared gap over entries of order one: a square, floor RTOL²
    assert (ex.layers.fidelity < RTOL**2).all()
    # the readout-sign convention: the D slot moves by -c B Aᵀ C, like C moves by -c A Aᵀ C
    np.testing.assert_allclose(ex.layers.c_from_D, ex.layers.c_from_C, rtol=1e-6)
    # each head carries 1/heads of every layer's update
    shares = ex.fits[ex.fits["head"] >= 0].share
    np.testing.assert_allclose(shares, 1 / heads, rtol=1e-6)


def test_eta_gamma_use_the_batch_max_norm_of_each_layers_a(planted):
    model, task, a, c = planted
    ex = extract(
        model,
        task,
        probe_batch_size=64,
        seed=5,
        control=False,
        test_batch=64,
        tuning_batch=64,
        views=("eagle", "fidelity"),
    )
    iterates, _ = probe_iterates(task, model.cfg.normalize, a, c, 64, 5)
    # ‖A_l‖₂² per prompt for the A block entering layer l, internal units
    norm2 = np.array([np.linalg.norm(it[0], ord=2, axis=(-2, -1)) ** 2 for it in iterates[:-1]])
    np.testing.assert_allclose(ex.layers.eta, np.array(a) * norm2.max(axis=1), rtol=RTOL)
    np.testing.assert_allclose(ex.layers.gamma, np.array(c) * norm2.max(axis=1), rtol=RTOL)
    # the batch max differs from the batch mean by far more than the tolerance above (except
    # at the input of a spectrally normalised model, where every ‖A_0‖₂ is 1)
    assert (norm2.max(axis=1) > 1.001 * norm2.mean(axis=1))[1:].all()


def test_fidelity_is_the_table1_metric_in_prompt_units(planted):
    model, task, a, c = planted
    model = off_eagle(model)
    ex = extract(
        model,
        task,
        probe_batch_size=64,
        seed=2,
        control=False,
        test_batch=64,
        tuning_batch=64,
        views=("eagle", "fidelity"),
    )
    a_fit, c_fit = ex.layers.a_step.to_numpy(), ex.layers.c_step.to_numpy()
    assert np.abs(c_fit - c).max() < 0.3 * max(c), "the perturbation leaves the steps near c"
    # network stream from the hooks, EAGLE stream in NumPy with the fitted steps, both internal
    iterates, s = probe_iterates(task, model.cfg.normalize, a_fit, c_fit, 64, 2)
    p = probe_batch(task, 64, 2)
    with torch.no_grad():
        _, cache = model.run_with_cache(p.z0())
    for layer in range(model.cfg.n_layers):
        A, B, C, D = iterates[layer + 1]
        eagle = np.concatenate(
            [np.concatenate([A, C], -1), np.concatenate([B, -D], -1)], -2
        )  # the network's D slot carries -D
        net = cache[f"blocks.{layer}.hook_resid_post"].numpy()
        expected = float(np.mean((net - eagle) ** 2 * s**2))
        assert ex.layers.fidelity[layer] == pytest.approx(expected, rel=RTOL)
    assert ex.layers.fidelity.iloc[-1] > 1e-8, "the perturbed model is not EAGLE"


@pytest.mark.parametrize("normalize", ["spectral", "frobenius"])
def test_fidelity_scales_with_the_square_of_the_probes(normalize):
    # A normalising model sees the same internal prompt at every scale k, so every gap in prompt
    # units, and the Table-1 metric with it, is multiplied by k².
    a, c = PLANTED_STEPS[normalize]
    model, task = off_eagle(planted(a, c, normalize=normalize)[0]), planted(a, c)[1]
    p = probe_batch(task, 32, 4)

    def table1(prompt):  # the EAGLE steps fitted on `prompt` and their Table-1 fidelity
        ctx = build_context(model, task, probes=prompt, test_batch=8, tuning_batch=8)
        steps = fit_steps(ctx.cap, ctx.geometry)
        table = fidelity_table(ctx, steps.a_step.to_numpy(), steps.c_step.to_numpy())
        return steps, table.sort_values(["reading", "layer"]).total.to_numpy()

    base_steps, base = table1(p)
    end_to_end, one_step = base.reshape(2, -1)
    assert (end_to_end[1:] > 1e-8).all() and one_step[1] > 1e-8, "layer 1 departs from EAGLE"
    for k in (1e-3, 7.0):
        steps, scaled = table1(Prompt(p.A * k, p.B * k, p.C * k, p.D * k))
        want = k**2 * base
        # mean squared gaps: a layer that follows EAGLE has round-off squared, held to 1e-12
        # (≥ RTOL²) of the largest
        np.testing.assert_allclose(scaled, want, rtol=RTOL, atol=1e-12 * want.max())
        np.testing.assert_allclose(steps.a_step, base_steps.a_step, rtol=RTOL)


def _load_solver(path):
    spec = importlib.util.spec_from_file_location("exported_solver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_faithful_export_equals_the_network(planted, tmp_path):
    model, task, _, _ = planted
    ex = extract(
        model,
        task,
        probe_batch_size=32,
        control=False,
        test_batch=32,
        tuning_batch=32,
        views=("eagle", "fidelity"),
    )
    solver = _load_solver(write_solver(tmp_path / "solver.py", ex.to_json()))
    p = sample(task, 12, make_generator(9), dtype=torch.float64)
    with torch.no_grad():
        net = model(p.z0()).numpy()
    # prompts at very different scales: the normalised paths must undo their own scale
    for i, k in enumerate(np.geomspace(1e-3, 1e3, 12)):
        D = solver.complete(
            k * p.A[i].numpy(), k * p.B[i].numpy(), k * p.C[i].numpy(), mode="faithful"
        )
        with torch.no_grad():
            want = model(k * p.z0()[i : i + 1]).numpy()[0]
        assert_close(D, want)  # NumPy's Algorithm 1 against the torch forward
        if k == 1.0:
            assert_close(D, net[i])


def test_projecting_a_planted_model_onto_eagle_changes_nothing(planted):
    # The weight projection re-runs the network from its products on the prompts' own scale: for
    # a model that is exactly EAGLE the projected model is the model.
    model, task, _, _ = planted
    ex = extract(
        model,
        task,
        probe_batch_size=32,
        control=False,
        test_batch=64,
        tuning_batch=32,
        views=("eagle", "fidelity", "projection"),
    )
    assert ex.test["projected_mse"] == pytest.approx(ex.test["mse"], rel=RTOL)


def test_the_network_entry_carries_the_tail_of_the_held_out_errors():
    """extraction.json's `network` keeps `mse` and `zero_mse` and adds the tail of the per-prompt
    errors, computed here from the held-out prompts and the network's predictions on them; the
    text report's held-out MSE line prints the median and the trimmed mean beside the mean."""
    from eagle_probe.wording import number

    model, task = planted(*PLANTED_STEPS["spectral"], normalize="spectral")
    ex = extract(model, task, probe_batch_size=32, control=False, test_batch=65,
                 tuning_batch=32, views=("eagle", "fidelity"))  # fmt: skip
    D, pred = ex.held_out.D, ex.network_pred
    err = ((pred - D) ** 2).mean(axis=(-1, -2))
    zero = (D**2).mean(axis=(-1, -2))
    net = ex.to_json()["network"]
    assert net["mse"] == np.mean((pred - D) ** 2)  # exact: the same NumPy mean as before
    assert net["zero_mse"] == np.mean(D**2)
    ordered = np.sort(err)
    assert net["prompts"] == 65 and net["trimmed_prompts"] == 1  # int(0.999 × 65) = 64 kept
    assert net["median_mse"] == pytest.approx(ordered[32], rel=RTOL)  # the middle of 65
    assert net["trimmed_mse"] == pytest.approx(ordered[:64].mean(), rel=RTOL)
    assert net["worst_mse"] == pytest.approx(ordered[-1], rel=RTOL)
    assert not np.any(np.isclose(err, zero, rtol=1e-6))  # none within round-off of its zero
    assert net["worse_than_zero_prompts"] == int((err > zero).sum())
    assert net["worse_than_zero"] == net["worse_than_zero_prompts"] / 65
    line = next(t for t in ex.render().splitlines() if t.startswith("held-out MSE"))
    assert line.startswith(
        f"held-out MSE {number(net['mse'])} (median {number(net['median_mse'])}, 0.1%-trimmed "
        f"{number(net['trimmed_mse'])}, "
    )


def test_normalised_planted_model_is_separated_from_its_control(normalize):
    a, c = PLANTED_STEPS[normalize]
    model, task = planted(a, c, normalize=normalize)
    ex = extract(
        model,
        task,
        probe_batch_size=64,
        test_batch=64,
        tuning_batch=64,
        seed=3,
        views=("eagle", "fidelity"),
    )
    ctrl_gap = [lay["one_step"]["relative"] for lay in ex.control["fidelity"].json["layers"]]
    assert all(g > 0.5 for g in ctrl_gap)
    # ratios of squared norms: 1e-12 ≥ RTOL²
    assert (ex.layers.fidelity_rel < 1e-12).all() and (
        ex.layers.fidelity_one_step_rel < 1e-12
    ).all()


def test_gradient_descent_plants_have_only_order_zero():
    model, task = planted([0, 0, 0, 0], [0.02, 0.03, 0.01, 0.02], heads=2)
    ex = extract(model, task, probe_batch_size=64, control=False, test_batch=64, tuning_batch=64)
    assert all(list(o) == [0] for o in ex.fits.orders)
    assert set(ex.terms.order) == {0}
    layer_terms = ex.terms[ex.terms["head"] == -1]
    np.testing.assert_allclose(layer_terms.alpha, [-0.02, -0.03, -0.01, -0.02], rtol=RTOL)
    assert (ex.layers.a_step.abs() < RTOL * 0.03).all()  # zero to RTOL of the largest step


def test_design_form_matches_the_eagle_expansion_at_low_depth():
    a, c = [0.04, 0.03, 0.02], [0.1, 0.09, 0.08]
    model, task = planted(a, c)
    ex = extract(model, task, probe_batch_size=64, control=False, test_batch=64, tuning_batch=64)
    expected = eagle_expansion(a, c)
    for layer in (0, 1):
        fitted = ex.terms[(ex.terms.layer == layer) & (ex.terms["head"] == -1)]
        assert_close(fitted.alpha, -expected[layer])
        assert list(fitted.order) == list(range(2 * layer + 1))
    assert (ex.layers.expansion_gap < 1e-6).all()


def test_query_linearity_is_measured():
    model, task = planted([0.05, 0.04], [0.09, 0.08])
    cap = capture(model, probe_batch(task, 16, 0))
    assert (cap.linearity_deviation < RTOL).all()  # a relative norm of round-off
    # a value path from A into the C/D columns makes D affine, not linear, in the query
    plants.add_products(model, vp=plants.product_term(model, 0, 0, 0, -1, 0.3))
    cap = capture(model, probe_batch(task, 16, 0))
    assert cap.linearity_deviation[1:].max() > 1e-3


def test_untrained_control_is_separated_from_a_planted_model():
    model, task = planted([0.05, 0.04, 0.03], [0.09, 0.08, 0.07])
    ex = extract(model, task, probe_batch_size=64, test_batch=64, tuning_batch=64, seed=3)
    ctrl_r2 = [lay["r2"] for lay in ex.control["polynomial"].json["layers"]]
    ctrl_gap = [lay["one_step"]["relative"] for lay in ex.control["fidelity"].json["layers"]]
    assert all(r < 0.5 for r in ctrl_r2) and (ex.layers.r2 > 0.999).all()
    assert all(g > 0.5 for g in ctrl_gap)
    # ratios of squared norms: 1e-12 ≥ RTOL²
    assert (ex.layers.fidelity_rel < 1e-12).all() and (
        ex.layers.fidelity_one_step_rel < 1e-12
    ).all()


def test_weight_structure_and_simplified_model():
    model, task = planted([0.05, 0.04], [0.09, 0.08], heads=2)
    ex = extract(model, task, probe_batch_size=32, control=False, test_batch=256, tuning_batch=32)
    assert ex.weights.W_QK.tolist() == ["diag(1 I_8, 0)"] * 4
    assert ex.weights.W_VP.iloc[0] == "diag(-0.025 I_8, -0.045 I_2)"
    assert ex.test["simplified_mse"] == pytest.approx(ex.test["mse"], rel=RTOL)


def test_degenerate_probe_is_refused():
    model, _ = planted([0.05], [0.09])
    zero = Prompt(
        torch.zeros(2, 6, 8), torch.ones(2, 2, 8), torch.ones(2, 6, 2), torch.zeros(2, 2, 2)
    )
    with pytest.raises(EagleProbeError, match="all zero"):
        capture(model, zero)


def test_an_extraction_runs_capture_views_control_verdict_in_that_order(monkeypatch):
    from eagle_probe import extract as ex_mod

    model, task = planted([0.05, 0.04], [0.09, 0.08], normalize="spectral")
    events, parent, inside = [], os.getpid(), []
    real_build, real_control = ex_mod.build_context, ex_mod._control

    def build(*args, **kwargs):
        if not inside:  # the control's own capture is part of the control
            events.append("capture")
        return real_build(*args, **kwargs)

    def control(*args, **kwargs):
        events.append("control")
        inside.append(True)
        try:
            return real_control(*args, **kwargs)
        finally:
            inside.clear()

    for name, view in list(ex_mod.VIEWS.items()):

        def counted(ctx, view=view, name=name):
            assert os.getpid() == parent  # every view runs in this process
            if not inside:
                events.append(name)
            return view.run(ctx)

        monkeypatch.setitem(ex_mod.VIEWS, name, replace(view, run=counted))
    monkeypatch.setattr(ex_mod, "build_context", build)
    monkeypatch.setattr(ex_mod, "_control", control)
    result = extract(model, task, probe_batch_size=32, test_batch=128)
    views = [v for v in result.views if v != "verdict"]
    assert events == ["capture", *views, "control", "verdict"]  # views in the registry's order
    assert list(result.timings) == ["capture", *views, "control", "verdict"]
