"""Property-based tests (hypothesis): 200 + 250 + 60 generated cases in the default run."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle_probe import solver_template as eagle
from eagle_probe.extract import extract
from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
from eagle_probe.tasks import TaskConfig, make_generator, sample

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def task_configs(draw):
    task = draw(st.sampled_from(["paper", "completion", "least_squares", "nystrom"]))
    n, d = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    rank = draw(st.integers(1, min(n, d)))
    kappa = draw(st.sampled_from([None, 10.0, 1e3])) if task != "nystrom" else None
    kernel = draw(st.sampled_from(["rbf", "polynomial"]))
    return TaskConfig(
        task=task,
        n=n,
        d=d,
        n_prime=draw(st.integers(1, 3)),
        d_prime=draw(st.integers(1, 3)),
        rank=rank,
        kappa=kappa,
        kernel=kernel,
        alpha=draw(st.sampled_from([0.5, 0.7, 1.0])),
    )


@settings(max_examples=200, **SETTINGS)
@given(cfg=task_configs(), seed=st.integers(0, 2**31), batch=st.integers(1, 4))
def test_task_generators(cfg, seed, batch):
    p = sample(cfg, batch, make_generator(seed), dtype=torch.float64)
    assert p.A.shape == (batch, cfg.d, cfg.n) and p.B.shape == (batch, cfg.d_prime, cfg.n)
    assert p.C.shape == (batch, cfg.d, cfg.n_prime) and p.D.shape == (
        batch,
        cfg.d_prime,
        cfg.n_prime,
    )
    assert torch.isfinite(p.x()).all()
    exact = cfg.task in ("paper", "completion") or cfg.kappa is not None
    if exact:
        assert torch.equal(
            torch.linalg.matrix_rank(p.A, rtol=1e-8), torch.linalg.matrix_rank(p.x(), rtol=1e-8)
        )
        err = (p.optimal(rtol=1e-9) - p.D).abs().max()
        assert err <= 1e-6 * max(1.0, float(p.D.abs().max()))


@st.composite
def ls_problems(draw):
    m, n = draw(st.integers(1, 14)), draw(st.integers(1, 14))
    rank = draw(st.integers(0, min(m, n)))
    kappa = 10.0 ** draw(st.floats(0, 6))
    scale = 10.0 ** draw(st.integers(-100, 100))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    A = np.zeros((m, n))
    if rank:
        U, _ = np.linalg.qr(rng.standard_normal((m, rank)))
        V, _ = np.linalg.qr(rng.standard_normal((n, rank)))
        A = (U * np.logspace(0, -np.log10(kappa), rank)) @ V.T
    b = rng.standard_normal(m)
    return A * scale, b, rank, kappa


@settings(max_examples=250, **SETTINGS)
@given(problem=ls_problems())
def test_exported_solver(problem):
    A, b, rank, kappa = problem
    A0, b0 = A.copy(), b.copy()
    x, info = eagle.lstsq(A, b, maxiter=300)
    assert np.array_equal(A, A0) and np.array_equal(b, b0), "inputs changed"
    assert info <= 0 or info == 300
    if info == 0:
        assert np.all(np.isfinite(x)), "info 0 with non-finite result"
    if info == 0 and rank == min(A.shape) and kappa <= 1e5:
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        assert np.linalg.norm(x - ref) <= 1e-6 * max(np.linalg.norm(ref), 1e-300)


@settings(max_examples=60, **SETTINGS)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    a=st.lists(st.floats(0.0, 0.05), min_size=3, max_size=3),
    c=st.lists(st.floats(0.005, 0.1), min_size=3, max_size=3),
)
def test_planted_extraction(layers, heads, a, c):
    a, c = a[:layers], c[:layers]
    cfg = ModelConfig(n=6, d=5, n_layers=layers, n_heads=heads, normalize="none", dtype="float64")
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, a, c))
    ex = extract(
        model, TaskConfig(n=6, d=5, rank=3), probe_batch_size=16, control=False, test_batch=16
    )
    np.testing.assert_allclose(ex.layers.a_step, a, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ex.layers.c_step, c, rtol=1e-8)
