import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close, numpy_eagle, prompt_norm
from plants import NORMALIZE_PATHS, PLANTED_STEPS
from plants import eagle as planted_model
from transformer_lens import FactoredMatrix

from eagle_probe.fit.geometry import prompt_scale as numpy_prompt_scale
from eagle_probe.layouts import geometry_of
from eagle_probe.model import (
    LinearTransformer,
    ModelConfig,
    eagle_weights,
    prompt_scale,
    token_mask,
)
from eagle_probe.tasks import TaskConfig, make_generator, sample

SMALL = dict(n=6, d=5, n_prime=2, d_prime=2, n_layers=2)


def _model(**kwargs) -> LinearTransformer:
    cfg = ModelConfig(**(SMALL | {"dtype": "float64"} | kwargs))
    return LinearTransformer(cfg, generator=make_generator(0))


def _prompt(cfg: ModelConfig, batch: int = 3, seed: int = 1):
    task = TaskConfig(n=cfg.n, d=cfg.d, n_prime=cfg.n_prime, d_prime=cfg.d_prime, rank=3)
    return sample(task, batch, make_generator(seed), dtype=torch.float64)


@pytest.mark.parametrize("heads", [1, 3])
def test_planted_eagle_weights_run_algorithm_1_with_negated_readout(heads):
    cfg = ModelConfig(
        **(SMALL | {"n_layers": 3, "n_heads": heads, "normalize": "none", "dtype": "float64"})
    )
    model = LinearTransformer(cfg)
    a, c = [0.02, 0.015, 0.01], [0.05, 0.04, 0.03]
    model.load_state_dict(eagle_weights(cfg, a, c))
    p = _prompt(cfg)
    with torch.no_grad():
        pred = model(p.z0()).numpy()
        slot = model.run_with_cache(p.z0())[1]["blocks.2.hook_resid_post"][:, cfg.d :, cfg.n :]
    expected = numpy_eagle(p.A.numpy(), p.B.numpy(), p.C.numpy(), a, c)[-1][3]
    assert_close(pred, expected)
    assert_close(slot.numpy(), -expected)


def test_cache_has_every_hook_with_documented_shapes():
    model = _model(n_heads=2)
    cfg = model.cfg
    p = _prompt(cfg, batch=4)
    _, cache = model.run_with_cache(p.z0())
    T, E, b = cfg.n_tokens, cfg.width, 4
    assert cache["hook_embed"].shape == (b, T, E)
    assert cache["hook_scale"].shape == (b, 1, 1)
    for layer in range(cfg.n_layers):
        for name in ("resid_pre", "attn_out", "resid_post"):
            assert cache[f"blocks.{layer}.hook_{name}"].shape == (b, T, E)
        attn = f"blocks.{layer}.attn."
        for name in ("attn_scores", "pattern"):
            assert cache[attn + f"hook_{name}"].shape == (b, 2, T, T)
        assert cache[attn + "hook_result"].shape == (b, T, 2, E)
        assert cache[attn + "hook_q"].shape == cache[attn + "hook_k"].shape == (b, T, 2, cfg.qk)
        assert cache[attn + "hook_v"].shape == cache[attn + "hook_z"].shape == (b, T, 2, cfg.vp)
    assert cache["hook_prediction"].shape == (b, cfg.d_prime, cfg.n_prime)
    assert len(cache) == 3 + 10 * cfg.n_layers


def test_attention_hooks_compose_as_documented():
    """q, k, v, scores, z and result are the factors the layer multiplies, in TL's layouts."""
    model = _model(n_heads=2)
    attn = model.blocks[1].attn
    _, cache = model.run_with_cache(_prompt(model.cfg).z0())
    x = cache["resid_pre", 1]  # (b, T, E)
    q = torch.einsum("bte,hek->bthk", x, attn.W_Q)
    torch.testing.assert_close(cache["q", 1], q)
    scores = torch.einsum("bthk,bshk->bhts", q, cache["k", 1]) * attn.mask
    torch.testing.assert_close(cache["attn_scores", 1], scores)
    z = torch.einsum("bhts,bshv->bthv", scores, cache["v", 1])
    torch.testing.assert_close(cache["z", 1], z)
    result = torch.einsum("bthv,hev->bthe", z, attn.W_P)
    torch.testing.assert_close(cache["result", 1], result)
    torch.testing.assert_close(cache["attn_out", 1], result.sum(2))


def test_residual_stream_adds_up():
    model = _model(n_heads=2)
    _, cache = model.run_with_cache(_prompt(model.cfg).z0())
    pre, post = cache["blocks.1.hook_resid_pre"], cache["blocks.1.hook_resid_post"]
    heads = cache["blocks.1.attn.hook_result"].sum(2)
    torch.testing.assert_close(post, pre + heads)


@pytest.mark.parametrize("regime", ["centralized", "distributed"])
def test_forward_from_a_kept_stream_is_the_forward(regime):
    """Blocks l … L − 1 and the readout run on the stream entering block l and the prompt scale
    (each as the cache holds it) give the forward's prediction to the bit; hooks on the later
    blocks act, so an ablation there needs no rerun of the earlier ones."""
    model = _model(n_heads=3, n_layers=3, regime=regime, n=6 if regime == "centralized" else 9)
    z0 = _prompt(model.cfg, batch=5).z0()

    def ablate(value, hook):
        value[:, :, 0] = 0.0
        return value

    with torch.no_grad():
        plain, cache = model.run_with_cache(z0)
        ablated = model.run_with_hooks(z0, fwd_hooks=[("blocks.2.attn.hook_result", ablate)])
        for layer in range(3):
            pre = cache[f"blocks.{layer}.hook_resid_pre"]
            # exact: the forward's own blocks and readout on its own cached stream
            assert torch.equal(model.forward_from(layer, pre, cache["hook_scale"]), plain)
        with model.hooks(fwd_hooks=[("blocks.2.attn.hook_result", ablate)]):
            late = model.forward_from(1, cache["blocks.1.hook_resid_pre"], cache["hook_scale"])
    # exact: the same hooked blocks on the same stream
    assert torch.equal(late, ablated) and not torch.allclose(late, plain)


def test_scores_never_attend_to_hidden_rows():
    model = _model()
    _, cache = model.run_with_cache(_prompt(model.cfg).z0())
    # exact: the mask multiplies the hidden rows' scores by 0
    assert torch.all(cache["blocks.0.attn.hook_attn_scores"][..., model.cfg.d :] == 0)


def test_ablating_a_head_by_hook_equals_zeroing_its_weights():
    model = _model(n_heads=3)
    z0 = _prompt(model.cfg).z0()

    def ablate(value, hook):
        value[:, :, 1] = 0.0  # hook_result is (b, T, h, E)
        return value

    with torch.no_grad():
        hooked = model.run_with_hooks(z0, fwd_hooks=[("blocks.0.attn.hook_result", ablate)])
        zeroed = LinearTransformer(model.cfg)
        zeroed.load_state_dict(model.state_dict())
        zeroed.blocks[0].attn.W_P[1] = 0.0
        direct = zeroed(z0)
        plain = model(z0)
    torch.testing.assert_close(hooked, direct)
    assert not torch.allclose(hooked, plain)


def test_w_qk_and_w_vp_accessors():
    model = _model(n_heads=2)
    attn = model.blocks[1].attn
    torch.testing.assert_close(model.W_QK(1)[0], attn.W_Q[0] @ attn.W_K[0].T)
    torch.testing.assert_close(model.W_VP()[1, 1], attn.W_V[1] @ attn.W_P[1].T)
    assert model.W_QK().shape == (2, 2, 8, 8)


def test_qk_and_ov_are_factored_matrices_of_the_products():
    model = _model(n_heads=2)
    assert isinstance(model.QK, FactoredMatrix) and isinstance(model.OV, FactoredMatrix)
    assert model.QK.shape == model.OV.shape == (2, 2, 8, 8)
    attn = model.blocks[0].attn
    torch.testing.assert_close(model.QK.AB[0, 1], attn.W_Q[1] @ attn.W_K[1].T)
    torch.testing.assert_close(model.OV.AB[0, 1], attn.W_V[1] @ attn.W_P[1].T)
    torch.testing.assert_close(model.QK.AB, model.W_QK())
    torch.testing.assert_close(model.OV.AB, model.W_VP())


def test_distributed_open_qk_carries_the_locality_mask():
    model = _model(regime="distributed-open", machines=3)
    qk = model.QK.AB  # (L, h, E, E)
    # exact: products of the rows the locality mask zeroes
    assert torch.all(qk[:, 0, 2:, :] == 0) and torch.all(qk[:, 0, :, 2:] == 0)
    torch.testing.assert_close(qk, model.W_QK())


def test_distributed_open_heads_attend_only_to_their_own_block():
    # unnormalised: bumping one block must not rescale the others through ‖A‖₂
    model = _model(regime="distributed-open", machines=3, normalize="none")
    cfg = model.cfg
    assert cfg.heads == 3 and cfg.qk == 2 and cfg.vp == 4
    z0 = _prompt(cfg).z0()
    bumped = z0.clone()
    bumped[:, : cfg.d, 2:4] += 1.0  # columns of machine 1
    _, c0 = model.run_with_cache(z0)
    _, c1 = model.run_with_cache(bumped)
    s0, s1 = c0["attn_scores", 0], c1["attn_scores", 0]
    torch.testing.assert_close(s0[:, [0, 2]], s1[:, [0, 2]])
    assert not torch.allclose(s0[:, 1], s1[:, 1])
    qk = model.W_QK(0)
    # exact: products of the rows the locality mask zeroes
    assert torch.all(qk[0][2:, :] == 0) and torch.all(qk[0][:, 2:] == 0)


def test_constrained_widths_limit_the_rank():
    model = _model(regime="constrained", rank=2)
    assert model.cfg.qk == 2 and model.cfg.vp == 4
    assert torch.linalg.matrix_rank(model.W_QK(0)[0]) == 2
    assert torch.linalg.matrix_rank(model.W_VP(0)[0]) == 4


def test_seed_text_masks():
    cfg = ModelConfig(**(SMALL | {"d": 6, "token_mask": "block_diagonal", "shards": 2}))
    m = token_mask(cfg)
    assert m[0, 3] == 0 and m[0, 1] == 1 and torch.all(m[:, cfg.d :] == 0)  # exact: 0/1 mask
    sparse = token_mask(ModelConfig(**(SMALL | {"token_mask": "sparse", "mask_density": 0.3})))
    assert 0 < float(sparse[:, :5].mean()) < 0.7 and torch.all(sparse[:, 5:] == 0)


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
def test_prompt_scale_is_the_configured_norm_of_a(normalize):
    model = _model(normalize=normalize)
    p = _prompt(model.cfg, batch=16)
    scale = model.prompt_scale(p.z0())
    assert scale.shape == (16, 1, 1)
    np.testing.assert_allclose(scale[:, 0, 0].numpy(), prompt_norm(p.A, normalize), rtol=RTOL)
    if normalize != "none":  # the two norms differ on these prompts (rank 3)
        other = {"spectral": "frobenius", "frobenius": "spectral"}[normalize]
        assert np.all(np.abs(scale[:, 0, 0].numpy() / prompt_norm(p.A, other) - 1) > 1e-3)


@pytest.mark.parametrize("normalize", ["none", "spectral", "frobenius"])
@pytest.mark.parametrize("regime", ["centralized", "distributed"])
def test_numpy_prompt_scale_is_the_models(normalize, regime):
    # the fitter's scales (one per prompt, or each machine's own ‖A^μ‖ per column) are the model's
    machines = 3 if regime == "distributed" else None
    model = _model(normalize=normalize, regime=regime, machines=machines or 1)
    cfg = model.cfg
    z0 = _prompt(cfg, batch=16).z0()
    z0 = z0 * torch.logspace(-30, 30, 16, dtype=torch.float64)[:, None, None]
    want = prompt_scale(cfg, z0).numpy()
    if regime == "distributed" and normalize != "none":
        assert want.shape == (16, 1, cfg.n + cfg.n_prime)
    geo = geometry_of(model, None)
    for got in (
        numpy_prompt_scale(z0.numpy(), normalize, cfg.d, cfg.n, machines),
        geo.scales(z0.numpy()),
    ):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)  # scales 1e-30 … 1e30, none 0


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
def test_normalised_planted_model_runs_eagle_on_the_scaled_prompt(normalize):
    # prediction = s · D_EAGLE(A/s, B/s, C/s) with s the configured norm of A, at every scale
    a, c = PLANTED_STEPS[normalize]
    model, task = planted_model(a, c, normalize=normalize)
    p = sample(task, 8, make_generator(3), dtype=torch.float64)
    for k in (1e-3, 1.0, 1e3):
        A, B, C = (k * t.numpy() for t in (p.A, p.B, p.C))
        s = prompt_norm(A, normalize)[:, None, None]
        want = numpy_eagle(A / s, B / s, C / s, a, c)[-1][3] * s
        with torch.no_grad():
            got = model(k * p.z0()).numpy()
        assert_close(got, want)
    if normalize != "none":  # and the prediction is scale-equivariant
        with torch.no_grad():
            torch.testing.assert_close(model(1e3 * p.z0()), 1e3 * model(p.z0()))


def test_readout_sign_options():
    neg, direct = _model(), _model(readout="direct")
    z0 = _prompt(neg.cfg).z0()
    with torch.no_grad():
        torch.testing.assert_close(neg(z0), -direct(z0))
    learned = _model(readout="learned")
    assert any(name == "readout_scale" for name, _ in learned.named_parameters())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"regime": "federated"}, "unknown regime 'federated'"),
        ({"regime": "distributed", "machines": 4}, "must divide n"),
        ({"regime": "distributed", "machines": 3, "n_heads": 2}, "one head per machine"),
        ({"regime": "constrained", "rank": 7}, "must not exceed"),
        ({"n_layers": 0}, "n_layers must be a positive integer"),
        ({"token_mask": "block_diagonal", "shards": 2}, "must divide d"),
        ({"readout": "abs"}, "unknown readout"),
    ],
)
def test_bad_model_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**(SMALL | kwargs))


def test_wrong_prompt_shape_is_a_clear_error():
    model = _model()
    with pytest.raises(ValueError, match="this model takes"):
        model(torch.zeros(2, 3, 3, dtype=torch.float64))
