"""The interchange test (`fit/causal.py`): its swap through the model's hooks is the swap the
NumPy forward of the products makes, the identity swap changes nothing, a family with the wrong
steps is found out, and the share's limits (1, 0, undefined) mean what the module text says.
Exact plants of every family and their untrained controls: tests/fit/test_families.py."""

import dataclasses

import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close
from probe_context import make_context

from eagle_probe.capture import patched_predict
from eagle_probe.fit import causal
from eagle_probe.fit.eagle import fit_steps
from eagle_probe.layouts import plant
from eagle_probe.model import ModelConfig, from_stream, into_stream
from eagle_probe.tasks import TaskConfig

STEPS = ([0.35, 0.3, 0.25], [0.8, 0.7, 0.6])


@pytest.fixture(scope="module")
def distributed():
    """A planted eagle-distributed model (3 machines, C/D copies on the stream) and its context."""
    cfg = ModelConfig(regime="distributed", n=6, d=6, n_layers=3, machines=3, normalize="spectral")
    model = plant(cfg, *STEPS)
    return model, make_context(model, TaskConfig(n=6, d=6, rank=4), probes=32, held_out=64)


def test_into_stream_undoes_from_stream_with_a_copy_per_machine(distributed):
    model, _ = distributed
    z = torch.randn(4, model.cfg.n_tokens, model.cfg.width, dtype=torch.float64)
    assert torch.equal(into_stream(model.cfg, from_stream(model.cfg, z)), z)  # exact: a permutation


def test_the_identity_swap_gives_the_networks_own_prediction(distributed):
    model, ctx = distributed
    geo, z0 = ctx.geometry, ctx.held_out.z0
    stream = geo.stream(z0, ctx.qk, ctx.vp)
    mask = causal.where(geo, stream.shape[-2:], "all")
    with torch.no_grad():
        own = model(torch.from_numpy(z0)).numpy()
    for layer in range(4):
        assert_close(patched_predict(model, z0, layer, stream[layer], mask), own)


def test_a_swap_through_the_hooks_is_the_swap_of_the_numpy_forward(distributed):
    model, ctx = distributed
    geo, z0 = ctx.geometry, ctx.held_out.z0
    stream = geo.stream(z0, ctx.qk, ctx.vp)
    other = stream[2] + 0.1 * np.random.default_rng(0).standard_normal(stream[2].shape)
    for block in causal.BLOCKS:
        mask = causal.where(geo, stream.shape[-2:], block)
        hooked = patched_predict(model, z0, 2, other, mask)
        numpy = causal.network_from(
            dataclasses.replace(ctx, patched=None), z0, stream[2], 2, other, mask
        )
        assert_close(hooked, numpy)
        assert not np.allclose(hooked, geo.readout_of(stream[-1], z0), rtol=1e-6)
    # every block at once, one mask per prompt: the same as one block at a time
    masks = [causal.where(geo, stream.shape[-2:], block) for block in causal.BLOCKS]
    stacked = np.concatenate([np.broadcast_to(m, other.shape) for m in masks])
    together = patched_predict(
        model, np.concatenate([z0] * 5), 2, np.concatenate([other] * 5), stacked
    )
    for i, m in enumerate(masks):
        assert_close(
            together[i * len(z0) : (i + 1) * len(z0)], patched_predict(model, z0, 2, other, m)
        )


def test_a_family_with_the_wrong_steps_does_not_carry_the_output(distributed):
    _, ctx = distributed
    steps = fit_steps(ctx.cap, ctx.geometry)
    a, c = steps.a_step.to_numpy(), steps.c_step.to_numpy()
    right = causal.interchange(ctx, a, c)
    wrong = causal.interchange(ctx, 2.0 * a, 0.5 * c)
    into = "algorithm_into_network"
    pick = lambda t: t[(t.direction == into) & (t.block == "all")].carried.to_numpy()  # noqa: E731
    assert (pick(right) >= 1 - RTOL).all()
    assert (pick(wrong) < 0.99).all()


def test_the_control_computes_only_what_is_read_of_it_and_the_same_numbers(distributed):
    """On the untrained control's context (`Context.is_control`) the view swaps only the whole
    state into the network, the one share the text reads of the control: the same numbers as the
    full view's, and no other block or direction."""
    _, ctx = distributed
    ctx = dataclasses.replace(ctx, results={})
    from eagle_probe.extract import run_views

    run_views(ctx, ["eagle", "causal"])
    full = ctx.results["causal"].json
    control = dataclasses.replace(ctx, results={"eagle": ctx.results["eagle"]}, is_control=True)
    run_views(control, ["causal"])
    part = control.results["causal"].json
    assert part["blocks"] == ["all"]
    for mine, theirs in zip(part["layers"], full["layers"], strict=True):
        assert set(mine) == {"layer", "algorithm_into_network", "algorithm_into_network_mse"}
        want = theirs["algorithm_into_network"]["all"]
        assert mine["algorithm_into_network"] == {"all": pytest.approx(want, rel=1e-12)}
    assert part["summary"]["algorithm_into_network"] == pytest.approx(
        full["summary"]["algorithm_into_network"]
    )
    assert part["summary"]["network_into_algorithm"] is None


def test_the_share_is_one_for_the_reference_zero_for_the_skip_and_undefined_without_a_skip():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((8, 2, 2))
    skip = ref + 0.3 * rng.standard_normal((8, 2, 2))  # nearer the reference than zero is
    assert causal.carried(ref, skip, ref) == 1.0  # exact: a zero numerator
    assert causal.carried(skip, skip, ref) == pytest.approx(0.0, abs=RTOL)
    assert np.isnan(causal.carried(skip, ref, ref))
    # a skip that blows up is held at predicting zero: a swap no better than zero scores 0
    assert causal.carried(np.zeros_like(ref), 1e6 * skip, ref) == pytest.approx(0.0, abs=RTOL)
    assert causal.share(float("nan")) == "none" and causal.share(0.99962) == "0.9996"
    assert causal.share(-4e-5) == "0.0000" and causal.share(-2183.46) == "-2.18e+03"  # no "-0"


def test_a_model_beyond_the_budget_gives_up_hooks_then_blocks_then_layers(distributed, monkeypatch):
    _, ctx = distributed
    full = causal.plan(ctx, 256)
    assert full[1] and full[2] == causal.BLOCKS and full[3] == [1, 2]
    per_prompt = causal.layer_flops(ctx.geometry) * ctx.held_out.prompts
    monkeypatch.setattr(causal, "VIEW_FLOPS", 100 * per_prompt)  # 100 layer passes a prompt
    k, hooks, blocks, layers = causal.plan(ctx, 256)
    assert not hooks and blocks == causal.BLOCKS and layers == [1, 2]  # 4 × 5 × (2 + 1) = 60
    monkeypatch.setattr(causal, "VIEW_FLOPS", 10 * per_prompt)
    assert causal.plan(ctx, 256)[1:] == (False, ("all",), [1])  # 4 × 1 × 2 = 8 ≤ 10 < 12
    steps = fit_steps(ctx.cap, ctx.geometry)
    view = causal.interchange(ctx, steps.a_step.to_numpy(), steps.c_step.to_numpy())
    assert set(view.block) == {"all"} and set(view.layer) == {1} and not view.hooks.any()
    assert (view.carried >= 1 - RTOL).all()
