"""The regime registry and the paper's architectures (§B.4 of the paper).

Distributed: "the query, key, and value matrices are restricted to data local to a single machine",
"a single set of transformations is shared across all attention heads", C and D "replicated
identically in each X^μ". Constrained: a single head of query/key width r.
"""

import numpy as np
import pytest
import torch
from conftest import assert_close

from eagle_probe import checkpoint, regimes
from eagle_probe.extract import extract
from eagle_probe.layouts import geometry_of, plant, state_products
from eagle_probe.model import LinearTransformer, ModelConfig, to_stream
from eagle_probe.tasks import TaskConfig, make_generator, sample


def _model(regime: str, **kw) -> LinearTransformer:
    cfg = ModelConfig(regime=regime, dtype="float64", **kw)
    return LinearTransformer(cfg, torch.Generator().manual_seed(3)).eval()


def _prompts(cfg: ModelConfig, b: int = 6, seed: int = 0) -> torch.Tensor:
    task = TaskConfig(n=cfg.n, d=cfg.d, n_prime=cfg.n_prime, d_prime=cfg.d_prime)
    return sample(task, b, make_generator(seed), dtype=torch.float64).z0()


def _qkv(model: LinearTransformer, z0: torch.Tensor) -> dict:
    names = [f"blocks.{i}.attn.hook_{r}" for i in range(model.cfg.n_layers) for r in "qkv"]
    _, cache = model.run_with_cache(z0, names_filter=lambda n: n in names)
    return {name: cache[name] for name in names}


def _perturb_machine(cfg: ModelConfig, z0: torch.Tensor, machine: int) -> torch.Tensor:
    """z0 with machine `machine`'s A and B columns changed (C untouched)."""
    out = z0.clone()
    cols = slice(machine * cfg.block, (machine + 1) * cfg.block)
    g = torch.Generator().manual_seed(11)
    out[:, :, cols] += torch.randn(out[:, :, cols].shape, generator=g, dtype=out.dtype)
    return out


def test_the_distributed_stream_holds_a_block_and_a_c_copy_per_machine():
    cfg = ModelConfig(regime="distributed", n=12, d=10, machines=4)
    assert cfg.width == 12 + 4 * 2 and cfg.heads == 4
    cols = cfg.spec.stream_columns(cfg)  # the prompt column behind every stream column
    w = 12 // 4 + 2
    for mu in range(4):
        block = cols[mu * w : (mu + 1) * w]
        assert list(block) == [*range(3 * mu, 3 * mu + 3), 12, 13]
    z0 = _prompts(cfg)
    stream = to_stream(cfg, z0)
    for mu in range(4):
        torch.testing.assert_close(stream[:, :10, mu * w + 3 : (mu + 1) * w], z0[:, :10, 12:])


def test_one_set_of_query_key_value_weights_is_shared_by_the_machines():
    shared = ModelConfig(regime="distributed")
    model = LinearTransformer(shared)
    w = shared.n // shared.machines + shared.n_prime
    for name in ("W_Q", "W_K", "W_V"):
        assert tuple(getattr(model.blocks[0].attn, name).shape[:2]) == (1, w)
    assert tuple(model.blocks[0].attn.W_P.shape[:2]) == (3, shared.width)  # free projections
    own = LinearTransformer(ModelConfig(regime="distributed", share_heads=False))
    assert own.blocks[0].attn.W_Q.shape[0] == 3


@pytest.mark.parametrize("machines", [2, 3])
def test_head_mu_is_blind_to_machine_nu_at_layer_zero(machines):
    model = _model("distributed", n=12, d=10, machines=machines)
    cfg = model.cfg
    z0 = _prompts(cfg)
    base = _qkv(model, z0)
    for nu in range(machines):
        moved = _qkv(model, _perturb_machine(cfg, z0, nu))
        for role in "qkv":
            name = f"blocks.0.attn.hook_{role}"
            for mu in range(machines):
                diff = (moved[name][:, :, mu] - base[name][:, :, mu]).abs().max()
                if mu == nu:
                    assert diff > 1e-3  # its own machine moves it
                else:
                    # exact: the other machines' columns meet only zero weights (products with 0)
                    assert diff == 0.0, (role, mu, nu)


@pytest.mark.parametrize("regime", ["distributed", "distributed-open"])
def test_head_mu_is_blind_to_machine_nu_at_every_layer_given_its_input(regime):
    """Each layer, fed a stream whose machine-ν columns are changed, keeps head μ's Q, K, V:
    true of the paper's architecture, false of distributed-open (its values read everything)."""
    model = _model(regime, n=12, d=10, machines=3)
    cfg = model.cfg
    g = torch.Generator().manual_seed(5)
    z = torch.randn(4, cfg.n_tokens, cfg.width, generator=g, dtype=torch.float64)
    blind = []
    for block in model.blocks:
        attn = block.attn
        W_Q, W_K = attn.effective_qk()
        W_V = attn.effective_v()
        for nu in range(3):
            cols = torch.from_numpy(cfg.spec.machine_columns(cfg, nu))
            moved = z.clone()
            moved[..., cols] += 1.0
            for mu in range(3):
                if mu == nu:
                    continue
                for W in (W_Q[mu], W_K[mu], W_V[mu]):
                    # exact: the moved columns meet only zero weights where head mu is blind
                    blind.append(bool(torch.equal(z @ W, moved @ W)))
    assert all(blind) == (regime == "distributed")


def test_a_global_scale_would_leak_so_each_machine_scales_its_own_columns():
    model = _model("distributed", n=12, d=10, machines=3)
    z0 = _prompts(model.cfg)
    scale = model.prompt_scale(z0)  # (b, 1, n + n')
    for mu in range(3):
        A = z0[:, :10, 4 * mu : 4 * mu + 4]
        torch.testing.assert_close(scale[:, 0, 4 * mu], torch.linalg.matrix_norm(A, ord=2))
    assert torch.all(scale[:, 0, 12:] == 1.0)  # exact: the query columns' scale is the constant 1


@pytest.mark.parametrize("normalize", ["none", "spectral", "frobenius"])
@pytest.mark.parametrize("regime", regimes.NAMES)
def test_the_fitters_numpy_forward_is_the_models_in_every_regime(regime, normalize):
    heads = None if regimes.get(regime).machines else 2  # distributed: one head per machine
    model = _model(regime, n=6, d=5, n_heads=heads, rank=3, init_std=0.3, normalize=normalize)
    z0 = _prompts(model.cfg, b=8) * torch.logspace(-3, 3, 8, dtype=torch.float64)[:, None, None]
    qk, vp = state_products(model)
    with torch.no_grad():
        want = model(z0).numpy()
    got = geometry_of(model, qk).predict(z0.numpy(), qk, vp)
    assert np.abs(want).max() > 0
    for g, w in zip(got, want, strict=True):  # per prompt: their scales span 1e-3 … 1e3
        assert_close(g, w)


def test_distributed_open_is_the_architecture_values_read_every_machine():
    model = _model("distributed-open", n=12, d=10, machines=3)
    cfg = model.cfg
    assert cfg.width == 12 + 2 and not cfg.spec.paper
    z0 = _prompts(cfg)
    base, moved = _qkv(model, z0), _qkv(model, _perturb_machine(cfg, z0, 1))
    v0 = base["blocks.0.attn.hook_v"][:, :, 0]
    assert (moved["blocks.0.attn.hook_v"][:, :, 0] - v0).abs().max() > 1e-3


def test_constrained_is_one_head_and_more_heads_are_named_the_multi_head_variant():
    one = ModelConfig(regime="constrained")
    assert one.heads == 1 and one.qk == 5
    many = ModelConfig(regime="constrained", n_heads=8)
    assert "multi-head variant" in many.spec.describe(many)
    assert "multi-head" not in one.spec.describe(one)


def _algorithm_1(z0: np.ndarray, machines: int, a_steps, c_steps, normalize: str) -> np.ndarray:
    """Algorithm 1 of the paper, distributed, written out here: each machine scales its own
    columns (ρ_μ = ‖A^μ‖⁻² when normalised), updates its A^μ, B^μ with its own Gram, and every
    machine's C, D moves by the sum of the machines' C/D updates (the network's D slot carries
    −D, so D here is the prediction)."""
    d, out = z0.shape[1] - 2, []
    n = z0.shape[2] - 2
    size = n // machines
    for z in z0:
        A, B, C = z[:d, :n].copy(), z[d:, :n].copy(), z[:d, n:].copy()
        for mu in range(machines):
            cols = slice(mu * size, (mu + 1) * size)
            s = np.linalg.norm(A[:, cols], 2) if normalize == "spectral" else 1.0
            A[:, cols] /= s
            B[:, cols] /= s
        D = np.zeros((B.shape[0], C.shape[1]))
        for a, c in zip(a_steps, c_steps, strict=True):
            dC, dD = np.zeros_like(C), np.zeros_like(D)
            for mu in range(machines):
                cols = slice(mu * size, (mu + 1) * size)
                Am, Bm = A[:, cols].copy(), B[:, cols].copy()
                G = Am @ Am.T
                dC -= c * G @ C
                dD += c * Bm @ Am.T @ C
                A[:, cols] = Am - a * G @ Am
                B[:, cols] = Bm - a * Bm @ Am.T @ Am
            C, D = C + dC, D + dD
        out.append(D)
    return np.stack(out)


@pytest.mark.parametrize("machines", [2, 4])
@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_a_distributed_plant_is_algorithm_1_and_its_steps_come_back(machines, normalize):
    cfg = ModelConfig(
        regime="distributed", n=12, d=10, machines=machines, dtype="float64", normalize=normalize
    )
    a, c = [0.02, 0.015, 0.01], [0.03, 0.02, 0.01]
    if normalize == "spectral":
        a, c = [0.3, 0.2, 0.1], [0.5, 0.4, 0.3]
    model = plant(replace_layers(cfg, 3), a, c)
    z0 = _prompts(model.cfg, b=16, seed=4)
    ref = _algorithm_1(z0.numpy(), machines, a, c, normalize)
    with torch.no_grad():
        pred = model(z0).numpy()
    assert_close(pred, ref)
    task = TaskConfig(n=12, d=10)
    ex = extract(model, task, views=("eagle", "fidelity", "projection", "communication"))
    steps = ex.views["eagle"].tables["eagle"]
    np.testing.assert_allclose(steps.a_step, a, rtol=1e-6)
    np.testing.assert_allclose(steps.c_step, c, rtol=1e-6)
    assert ex.info["family"] == "eagle-distributed"
    comm = ex.views["communication"].json
    # exact: the share of the plant's cross-machine A blocks, all zeros
    assert not comm["a_columns_sent"] and comm["cross_a_fraction"] == 0.0
    assert comm["cross_cd_ablation"] > 1.1  # the C/D results are what crosses


def replace_layers(cfg: ModelConfig, layers: int) -> ModelConfig:
    from dataclasses import replace

    return replace(cfg, n_layers=layers)


def test_a_planted_cross_machine_a_write_is_named_by_the_communication_view():
    cfg = ModelConfig(regime="distributed", n=12, d=10, machines=3, dtype="float64", n_layers=2)
    model = plant(cfg, [0.3, 0.2], [0.5, 0.4], cross_a=1.0)
    ex = extract(model, TaskConfig(n=12, d=10), views=("eagle", "communication"))
    comm = ex.views["communication"].json
    assert comm["a_columns_sent"] and comm["cross_a_fraction"] > 0.05
    assert comm["floats_per_machine_round"]["network_a"] > 0
    clean_model = plant(cfg, [0.3, 0.2], [0.5, 0.4])
    clean = extract(clean_model, TaskConfig(n=12, d=10), views=("eagle", "communication"))
    assert clean.views["communication"].json["floats_per_machine_round"]["network_a"] == 0


def test_a_single_head_sketched_plant_comes_back_in_its_family():
    cfg = ModelConfig(regime="constrained", n=12, d=10, rank=4, dtype="float64", n_layers=3)
    model = plant(cfg, [0.3, 0.2, 0.1], [0.5, 0.4, 0.3], sketch_seed=2)
    ex = extract(model, TaskConfig(n=12, d=10), views=("eagle", "fidelity", "sketch"))
    steps = ex.views["eagle"].tables["eagle"]
    np.testing.assert_allclose(steps.a_step, [0.3, 0.2, 0.1], rtol=1e-6)
    np.testing.assert_allclose(steps.c_step, [0.5, 0.4, 0.3], rtol=1e-6)
    assert ex.info["family"] == "eagle-sketched"
    assert ex.views["sketch"].json["layers"][0]["span"] == 4


def test_the_exported_solver_equals_a_distributed_plant(tmp_path):
    import importlib.util

    from eagle_probe.export import write_solver

    cfg = ModelConfig(regime="distributed", n=12, d=10, machines=3, dtype="float64", n_layers=3)
    model = plant(cfg, [0.3, 0.2, 0.1], [0.5, 0.4, 0.3])
    ex = extract(model, TaskConfig(n=12, d=10), views=("eagle", "fidelity", "projection"))
    path = write_solver(tmp_path / "solver.py", ex.to_json())
    spec = importlib.util.spec_from_file_location("planted_solver", path)
    solver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solver)
    z0 = _prompts(cfg, b=5, seed=9)
    with torch.no_grad():
        net = model(z0).numpy()
    for z, want in zip(z0.numpy(), net, strict=True):
        got = solver.complete(z[:10, :12], z[10:, :12], z[:10, 12:], mode="faithful")
        assert_close(got, want)  # the exported NumPy solver against the torch forward


def test_every_regime_is_one_registry_entry_and_the_command_line_spells_them():
    from eagle_probe.cli import train

    assert train.REGIMES == tuple(regimes.REGIMES)
    for spec in regimes.REGIMES.values():
        cfg = ModelConfig(regime=spec.name, n=12, d=10)
        model = LinearTransformer(cfg, torch.Generator().manual_seed(0))
        assert model(_prompts(cfg)).shape == (6, 2, 2)
        assert cfg.width == spec.width(cfg)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(regime="distributed", n=10, machines=3), "must divide n"),
        (dict(regime="centralized", share_heads=False), "distributed regime only"),
        (dict(regime="distributed", n_heads=2), "one head per machine"),
        (dict(regime="constrained", rank=30), "must not exceed"),
    ],
)
def test_configs_a_regime_cannot_build_are_one_clear_error(kw, words):
    with pytest.raises(ValueError, match=words):
        ModelConfig(**kw)


def test_a_format_1_distributed_checkpoint_loads_as_distributed_open(tmp_path):
    model = _model("distributed-open", n=12, d=10)
    path = tmp_path / "old.pt"
    checkpoint.save(path, model, TaskConfig(n=12, d=10))
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 1
    payload["model_config"]["regime"] = "distributed"
    del payload["model_config"]["share_heads"]
    torch.save(payload, path)
    with pytest.warns(UserWarning, match="read as distributed-open"):
        loaded, _, _ = checkpoint.load(path)
    assert loaded.cfg.regime == "distributed-open"
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value)


def test_a_checkpoint_whose_stream_width_disagrees_with_its_regime_is_refused(tmp_path):
    model = _model("distributed-open", n=12, d=10)
    path = tmp_path / "relabelled.pt"
    checkpoint.save(path, model, TaskConfig(n=12, d=10))
    payload = torch.load(path, weights_only=True)
    payload["model_config"]["regime"] = "distributed"  # a format-2 file: no upgrade
    torch.save(payload, path)
    with pytest.raises(checkpoint.CheckpointError, match="weights do not match|shape"):
        checkpoint.load(path)
