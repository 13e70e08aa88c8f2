"""Contexts for the fit views' tests and benchmarks: a model through the capture, as the extraction
builds it (probe capture, products, geometry, held-out prompts). Plants: tests/plants.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from eagle_probe import tasks
from eagle_probe.extract import build_context
from eagle_probe.fit.base import Context
from eagle_probe.model import LinearTransformer

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
