"""TransformerLens idioms on every shipped model: ActivationCache tuple keys, stack_activation,
stack_head_results, utilities.get_act_name, cfg.n_heads / d_head / d_model / n_ctx / n_layers,
the stacked W_Q / W_K / W_V / W_O, blocks[l].attn.W_O / QK / OV, FactoredMatrix QK / OV,
model(prompt) on a Prompt, and the prompt-scale hook."""

import pytest
import torch
from conftest import TRAINED
from transformer_lens import ActivationCache, FactoredMatrix, utilities

from eagle_probe import checkpoint
from eagle_probe.model import from_stream
from eagle_probe.tasks import make_generator, sample

SHIPPED = [
    "centralized",
    "centralized_8head",
    "distributed",
    "constrained",
    "lsa_1layer",
    "lsa_3layer",
]


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
        # no token attends to the hidden rows
        # exact: the mask multiplies their scores by 0
        assert torch.all(scores[..., cfg.keys :] == 0)
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
        # exact: stack_activation copies the cached tensors
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
    blocks = from_stream(cfg, cache["resid_post", -1])  # [[A, C…], [B, D…]], every C/D copy
    D = blocks[:, cfg.d :, cfg.n :]
    slot = D.unflatten(-1, (-1, cfg.n_prime)).mean(-2)  # the mean of the copies (one, or M)
    scale = cache["hook_scale"]  # (b, 1, 1), or per prompt column (b, 1, n + n')
    expected = model.readout_scale * slot * (scale if scale.shape[-1] == 1 else scale[..., cfg.n :])
    torch.testing.assert_close(prediction, expected)
    embed = from_stream(cfg, cache["hook_embed"])
    plain = cfg.n + cfg.n_prime  # the A/B columns and the first C/D copy: the prompt itself
    torch.testing.assert_close(embed[..., :plain] * scale, prompt.z0())
    if cfg.normalize == "spectral" and scale.shape[-1] == 1:
        norms = torch.linalg.matrix_norm(prompt.A, ord=2)
        torch.testing.assert_close(scale[:, 0, 0], norms)
    elif cfg.normalize == "spectral":  # each machine its own ‖A^μ‖₂
        size = cfg.n // cfg.machines
        for mu in range(cfg.machines):
            norms = torch.linalg.matrix_norm(prompt.A[..., mu * size : (mu + 1) * size], ord=2)
            torch.testing.assert_close(scale[:, 0, mu * size], norms)


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


def test_stack_head_results_on_every_model(run):
    model, _, cache, _ = run
    cfg = model.cfg
    stack, labels = cache.stack_head_results(layer=-1, return_labels=True)  # (L·h, b, T, E)
    assert stack.shape == (cfg.n_layers * cfg.heads, 8, cfg.n_tokens, cfg.width)
    assert labels[: cfg.heads] == [f"L0H{h}" for h in range(cfg.heads)]
    total = stack.sum(0) + cache["hook_embed"]
    torch.testing.assert_close(total, cache["resid_post", -1])


def test_head_results_recomputed_from_z_and_w_o(run):
    model, _, cache, _ = run
    stored = {
        f"blocks.{i}.attn.hook_result": cache[f"blocks.{i}.attn.hook_result"]
        for i in range(model.cfg.n_layers)
    }
    bare = ActivationCache({k: v for k, v in cache.cache_dict.items() if k not in stored}, model)
    bare.compute_head_results()  # TransformerLens's einsum of hook_z with blocks[l].attn.W_O
    for key, value in stored.items():
        torch.testing.assert_close(bare[key], value)


def test_config_names_every_size(run):
    model, _, _, _ = run
    cfg = model.cfg
    # the stacked weights as the heads apply them to the stream (a machine's local, shared
    # W_Q placed on its columns): (L, h, d_model, d_head)
    assert isinstance(cfg.n_heads, int) and cfg.n_heads == model.W_Q.shape[1]
    assert cfg.d_head == model.W_Q.shape[-1]
    assert cfg.d_model == model.W_Q.shape[2]
    assert cfg.n_ctx == model.blocks[0].attn.mask.shape[0]
    assert cfg.n_layers == len(model.blocks)


def test_stacked_weights_in_transformer_lens_shapes(run):
    model, _, _, _ = run
    cfg = model.cfg
    L, h, E = cfg.n_layers, cfg.n_heads, cfg.d_model
    assert model.W_Q.shape == model.W_K.shape == (L, h, E, cfg.d_head)
    assert model.W_V.shape == (L, h, E, cfg.vp)
    assert model.W_O.shape == (L, h, cfg.vp, E)
    torch.testing.assert_close(model.W_Q @ model.W_K.transpose(-1, -2), model.W_QK())
    torch.testing.assert_close(model.W_V @ model.W_O, model.W_VP())


def test_per_layer_w_o_qk_and_ov(run):
    model, _, _, _ = run
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        # exact: W_O is W_P transposed, nothing computed
        assert torch.equal(attn.W_O, attn.W_P.transpose(-1, -2))
        assert isinstance(attn.QK, FactoredMatrix) and isinstance(attn.OV, FactoredMatrix)
        torch.testing.assert_close(attn.QK.AB, model.W_QK(layer))
        torch.testing.assert_close(attn.OV.AB, model.W_VP(layer))


def test_model_called_on_a_prompt(run):
    model, prediction, _, prompt = run
    # exact: model(prompt) runs the same forward on prompt.z0() as the fixture's run_with_cache
    # (hooks are identities), in this process
    with torch.no_grad():
        assert torch.equal(model(prompt), prediction)
        out, cache = model.run_with_cache(prompt)
    assert torch.equal(out, prediction)
    assert isinstance(cache, ActivationCache)
