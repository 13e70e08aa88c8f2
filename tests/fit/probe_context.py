"""Contexts for the fit views' tests and benchmarks: a model through the capture, as the extraction
builds it (probe capture, products, geometry, held-out prompts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from eagle_probe import tasks
from eagle_probe.extract import build_context
from eagle_probe.fit.base import Context
from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights

TRAINED = Path(__file__).resolve().parents[2] / "trained_models"


def make_context(
    model: LinearTransformer,
    task: tasks.TaskConfig,
    *,
    probes: int = 256,
    held_out: int = 2048,
    seed: int = 0,
) -> Context:
    """The Context a view reads, built by the extraction pipeline itself."""
    return build_context(
        model, task, probe_batch_size=probes, seed=seed, test_batch=held_out, tuning_batch=64
    )


def planted(
    *,
    a: list[float],
    c: list[float],
    heads: int = 1,
    dtype: str = "float32",
    normalize: str = "none",
    sizes: tuple[int, int, int, int] = (6, 5, 2, 3),
    **extra,
) -> tuple[LinearTransformer, tasks.TaskConfig]:
    """A centralized model running EAGLE with steps a, c; sizes (n, d, n', d')."""
    n, d, n_prime, d_prime = sizes
    cfg = ModelConfig(
        n=n,
        d=d,
        n_prime=n_prime,
        d_prime=d_prime,
        n_layers=len(a),
        n_heads=heads,
        normalize=normalize,
        dtype=dtype,
        **extra,
    )
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, a, c))
    model.eval()
    task = tasks.TaskConfig(n=n, d=d, n_prime=n_prime, d_prime=d_prime, rank=min(n, d, 4))
    return model, task


def plant_cross_term(
    model: LinearTransformer, layer: int, seed: int = 1, scale: float = 0.3
) -> np.ndarray:
    """Add a W_QK cross block between the query's A/B features and the key's C features to one
    layer of a planted model (W_QK[:n, n:] = M, every head), in place; returns M (n, n')."""
    cfg = model.cfg
    n, E = cfg.n, cfg.width
    g = torch.Generator().manual_seed(seed)
    M = scale * torch.randn(n, cfg.n_prime, generator=g, dtype=torch.float64)
    attn = model.blocks[layer].attn
    with torch.no_grad():
        # query A/B features write M into the spare query/key columns n..E-1, which the key reads
        # only from its C features: W_Q[:n, n:] = M, W_K[n:, n:] = I  =>  W_QK[:n, n:] = M
        attn.W_Q[:, :n, n:E] = M.to(attn.W_Q.dtype)
        attn.W_K[:, n:E, n:E] = torch.eye(E - n, dtype=attn.W_K.dtype)
    return M.numpy()


def assert_jacobian_matches_finite_differences(geo, z0, theta: np.ndarray, h: float = 1e-6):
    """The optimum's Jacobian in the steps θ = (a_0 … a_{L−1}, c_0 … c_{L−1}) against central
    differences of its prediction, column by column, to 1e-6 of the difference's size."""
    from eagle_probe.fit import optimum

    L = theta.size // 2
    _, jac = optimum.eagle_jacobian(geo, z0, theta[:L], theta[L:])
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        fd = (
            optimum.predict(geo, z0, up[:L], up[L:]) - optimum.predict(geo, z0, down[:L], down[L:])
        ) / (2 * h)
        assert np.abs(fd - jac[:, i]).max() <= 1e-6 * max(np.abs(fd).max(), 1e-12), i
