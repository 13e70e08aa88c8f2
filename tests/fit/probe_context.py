"""Contexts for the fit views' tests and benchmarks: a model through the capture, as the extraction
builds it (probe capture, products, geometry, held-out prompts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from eagle_probe import capture, tasks
from eagle_probe.fit.base import Context, HeldOut
from eagle_probe.fit.geometry import Geometry
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
    """The Context a view reads: probe capture, products, geometry, held-out prompts."""
    model64 = capture.float64_copy(model)
    cfg = model64.cfg
    cap = capture.capture(model64, capture.probe_batch(task, probes, seed))
    geometry = Geometry(
        regime=cfg.regime,
        d=cfg.d,
        n=cfg.n,
        d_prime=cfg.d_prime,
        n_prime=cfg.n_prime,
        heads=cfg.heads,
        layers=cfg.n_layers,
        mask=model64.blocks[0].attn.mask.numpy(),
        readout=float(model64.readout_scale),
        normalize=cfg.normalize,
    )
    prompt = tasks.sample(task, held_out, tasks.make_generator(seed + 7919), dtype=torch.float64)
    with torch.no_grad():
        pred = model64(prompt.z0()).numpy()
    return Context(
        cap=cap,
        qk=model64.W_QK().numpy(),
        vp=model64.W_VP().numpy(),
        geometry=geometry,
        held_out=HeldOut(z0=prompt.z0().numpy(), D=prompt.D.numpy()),
        network_pred=pred,
        seed=seed,
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
