"""TransformerLens idioms on every shipped model: ActivationCache tuple keys, stack_activation,
utilities.get_act_name, FactoredMatrix QK / OV, and the prompt-scale hook."""

import pytest
import torch
from conftest import TRAINED
from transformer_lens import ActivationCache, FactoredMatrix, utilities

from eagle_probe import checkpoint
from eagle_probe.tasks import make_generator, sample

SHIPPED = ["centralized", "centralized_8head", "distributed", "constrained"]


@pytest.fixture(scope="module", params=SHIPPED)
def run(request):
    model, task, _ = checkpoint.load(TRAINED / f"{request.param}.pt")
    prompt = sample(task, 8, make_generator(0), dtype=model.cfg.torch_dtype)
    with torch.no_grad():
        prediction, cache = model.run_with_cache(prompt.z0())
    return model, prediction, cache, prompt


def test_run_with_cache_returns_an_activation_cache(run):
    model, _, cache, _ = run
    assert isinstance(cache, ActivationCache)
    assert set(cache.keys()) == set(model.hook_dict)


def test_attn_scores_by_tuple_key(run):
    model, _, cache, _ = run
    cfg = model.cfg
    for layer in range(cfg.n_layers):
        scores = cache["attn_scores", layer]
        assert scores is cache[f"blocks.{layer}.attn.hook_attn_scores"]
        assert scores.shape == (8, cfg.heads, cfg.n_tokens, cfg.n_tokens)
        assert torch.all(scores[..., cfg.d :] == 0)  # no token attends to the hidden rows
    assert cache["attn_scores", -1] is cache["attn_scores", cfg.n_layers - 1]


def test_result_by_tuple_key_sums_to_attn_out(run):
    model, _, cache, _ = run
    cfg = model.cfg
    for layer in range(cfg.n_layers):
        result = cache["result", layer]  # [batch, pos, head, d_model]
        assert result.shape == (8, cfg.n_tokens, cfg.heads, cfg.d_model)
        torch.testing.assert_close(result.sum(2), cache["attn_out", layer])


def test_stack_activation_resid_post(run):
    model, _, cache, _ = run
    cfg = model.cfg
    stack = cache.stack_activation("resid_post")
    assert stack.shape == (cfg.n_layers, 8, cfg.n_tokens, cfg.width)
    for layer in range(cfg.n_layers):
        assert torch.equal(stack[layer], cache[f"blocks.{layer}.hook_resid_post"])
    parts = cache.decompose_resid()  # embed, then each layer's attn_out
    assert parts.shape[0] == cfg.n_layers + 1
    torch.testing.assert_close(parts.sum(0), stack[-1])


def test_get_act_name_names_are_hooks(run):
    model, _, _, _ = run
    L = model.cfg.n_layers
    names = ["q", "k", "v", "z", "attn_scores", "pattern", "result", "attn_out"]
    names += ["resid_pre", "resid_post"]
    for layer in (0, L - 1):
        for name in names:
            assert utilities.get_act_name(name, layer) in model.hook_dict, name
    assert utilities.get_act_name("embed") in model.hook_dict


def test_scale_hook_relates_internal_units_to_the_prediction(run):
    model, prediction, cache, prompt = run
    cfg = model.cfg
    slot = cache["resid_post", -1][:, cfg.d :, cfg.n :]
    expected = model.readout_scale * slot * cache["hook_scale"]
    torch.testing.assert_close(prediction, expected)
    torch.testing.assert_close(cache["hook_embed"] * cache["hook_scale"], prompt.z0())
    if cfg.normalize == "spectral":
        norms = torch.linalg.matrix_norm(prompt.A, ord=2)
        torch.testing.assert_close(cache["hook_scale"][:, 0, 0], norms)


def test_qk_and_ov_factored_matrices(run):
    model, _, _, _ = run
    cfg = model.cfg
    for product, plain in ((model.QK, model.W_QK()), (model.OV, model.W_VP())):
        assert isinstance(product, FactoredMatrix)
        assert product.shape == (cfg.n_layers, cfg.heads, cfg.width, cfg.width)
        torch.testing.assert_close(product.AB, plain)
    eig = model.QK.eigenvalues  # (L, h, qk): the nonzero spectrum of each head's W_QK
    assert eig.shape == (cfg.n_layers, cfg.heads, cfg.qk)
    u, s, v = model.OV.svd()
    assert s.shape == (cfg.n_layers, cfg.heads, cfg.vp)


def test_stack_head_results_when_the_config_names_its_heads(run):
    model, _, cache, _ = run
    cfg = model.cfg
    if cfg.n_heads is None:
        pytest.skip("stack_head_results labels heads by cfg.n_heads")
    stack = cache.stack_head_results()  # (L·h, b, T, E): every head of every layer
    assert stack.shape == (cfg.n_layers * cfg.heads, 8, cfg.n_tokens, cfg.width)
    total = stack.sum(0) + cache["hook_embed"]
    torch.testing.assert_close(total, cache["resid_post", -1])
