"""The streamed capture against a one-shot reference: every layer's whole cache and every query
probe in one forward each (the plain reading of the capture's definition)."""

import math

import numpy as np
import pytest
import torch
from conftest import RTOL, TRAINED
from plants import add_products, product_term
from plants import eagle as planted_model

from eagle_probe import capture as capture_module
from eagle_probe import checkpoint
from eagle_probe.capture import capture, capture_bytes, float64_copy, probe_batch, query_separable
from eagle_probe.model import LinearTransformer, ModelConfig, from_stream
from eagle_probe.tasks import TaskConfig


@torch.no_grad()
def one_shot(model, prompt):
    """(Z, x, dx_heads, scale) with the whole cache held at once."""
    model = float64_copy(model)
    cfg = model.cfg
    z0 = prompt.to(torch.float64).z0()
    b, L, d, n, dp, npr = z0.shape[0], cfg.n_layers, cfg.d, cfg.n, cfg.d_prime, cfg.n_prime
    _, cache = model.run_with_cache(z0)
    stream = [cache["hook_embed"]] + [cache["resid_post", i] for i in range(L)]
    Z = from_stream(cfg, torch.stack(stream))
    scale = cache["hook_scale"][:, 0, 0]
    groups = math.ceil(d / npr)
    probes = z0.unsqueeze(1).repeat(1, groups, 1, 1)
    for g in range(groups):
        for k in range(npr):
            j = g * npr + k
            probes[:, g, :d, n + k] = 0.0
            if j < d:
                probes[:, g, j, n + k] = scale
    _, pc = model.run_with_cache(probes.reshape(b * groups, *z0.shape[1:]))
    x = np.zeros((L + 1, b, d, dp))
    dx_heads = np.zeros((L, b, cfg.heads, d, dp))
    for i in range(L):
        slot = from_stream(cfg, pc["resid_post", i])[:, d:, n:].reshape(b, groups, dp, npr)
        heads = from_stream(cfg, pc["result", i].transpose(1, 2))[:, :, d:, n:]
        heads = heads.reshape(b, groups, cfg.heads, dp, npr)
        for g in range(groups):
            for k in range(npr):
                j = g * npr + k
                if j < d:
                    x[i + 1, :, j, :] = -slot[:, g, :, k].numpy()
                    dx_heads[i, :, :, j, :] = -heads[:, g, :, :, k].numpy()
    return Z.numpy(), x, dx_heads, scale.numpy()


def agree(model, task, batch=24, **kwargs):
    prompt = probe_batch(task, batch, 0)
    Z, x, dx_heads, scale = one_shot(model, prompt)
    cap = capture(model, prompt, **kwargs)
    for name, ref in (("Z", Z), ("x", x), ("dx_heads", dx_heads), ("scale", scale)):
        got = getattr(cap, name)
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=0, atol=RTOL * max(1.0, np.abs(ref).max()))
    assert (cap.linearity_deviation >= 0).all()
    return cap


@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_planted_model_separable_path_equals_one_shot(chunk):
    model, task = planted_model([0.05, 0.04, 0.03], [0.09, 0.08, 0.07], heads=2, d=5)
    assert query_separable(float64_copy(model))
    cap = agree(model, task, chunk=chunk)
    assert (cap.linearity_deviation < RTOL).all()


def test_affine_query_path_equals_one_shot():
    """A value path from A into the C/D columns keeps the model separable but makes D affine in
    the query; the probes still read the same responses."""
    model, task = planted_model([0.05, 0.04], [0.09, 0.08], heads=2)
    add_products(model, vp=product_term(model, 0, 0, 0, -1, 0.3))
    assert query_separable(float64_copy(model))
    cap = agree(model, task, chunk=7)
    assert cap.linearity_deviation[1:].max() > 1e-3


@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_general_model_streamed_probes_equal_one_shot(normalize, monkeypatch):
    cfg = ModelConfig(n=8, d=7, n_layers=3, n_heads=2, normalize=normalize)
    model = LinearTransformer(cfg, generator=torch.Generator().manual_seed(1))
    assert not query_separable(float64_copy(model))
    agree(model, TaskConfig(n=8, d=7, rank=3), chunk=5)
    monkeypatch.setattr(capture_module, "probes_per_run", lambda cfg: 3)  # probes split too
    agree(model, TaskConfig(n=8, d=7, rank=3), chunk=4)


@pytest.mark.parametrize("name", ["centralized", "lsa_1layer"])
def test_shipped_models_equal_one_shot(name):
    model, task, _ = checkpoint.load(TRAINED / f"{name}.pt")
    agree(model, task, batch=16, chunk=6)


def test_memory_estimate_grows_with_the_batch_not_with_the_probes():
    cfg = ModelConfig(n=128, d=128, n_layers=8, n_heads=2, normalize="none")
    small, large = capture_bytes(cfg, 16), capture_bytes(cfg, 64)
    assert small < large < 4 * small + 2**28
    # the whole cache of every probe would be d / n' = 64 times the batch's forward
    assert large < 64 * 8 * 130 * 130 * 8 * 10
