"""Property-based tests (hypothesis): 200 + 250 + 150 + 60 + 60 generated cases."""

from __future__ import annotations

import warnings

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle_probe import eagle
from eagle_probe.extract import extract
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
    """(A, b, A0, b0, rank): A0, b0 of order one, A = A0 · 2^ka-ish scale, b likewise."""
    m, n = draw(st.integers(1, 14)), draw(st.integers(1, 14))
    rank = draw(st.integers(1, min(m, n)))
    kappa = 10.0 ** draw(st.floats(0, 3))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((m, rank)))
    V, _ = np.linalg.qr(rng.standard_normal((n, rank)))
    A0 = (U * np.logspace(0, -np.log10(kappa), rank)) @ V.T
    b0 = rng.standard_normal(m)
    sa = 10.0 ** draw(st.integers(-300, 300))
    sb = 10.0 ** draw(st.integers(-300, 300))
    return A0 * sa, b0 * sb, A0, b0, sb / sa


def _representable(x):
    top = np.max(np.abs(x)) if np.any(x) else 0.0
    return np.all(np.isfinite(x)) and (top == 0.0 or top >= np.finfo(float).tiny)


@settings(max_examples=250, **SETTINGS)
@given(problem=ls_problems())
def test_exported_solver_over_scales(problem):
    """Full rank or not, κ ≤ 1e3, A and b each scaled by 10^±300: info 0 with the minimum-norm
    solution to 1e-8 when it is representable in float64, info -3 when it is not."""
    A, b, A0, b0, ratio = problem
    before = A.copy(), b.copy()
    ref0 = np.linalg.pinv(A0, rcond=1e-10) @ b0  # the answer for the order-one problem
    with np.errstate(over="ignore", under="ignore"):
        ref = ref0 * ratio
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x, info = eagle.lstsq(A, b)
    assert np.array_equal(A, before[0]) and np.array_equal(b, before[1]), "inputs changed"
    if not np.any(ref0):
        assert info == 0 and not np.any(x)
    elif _representable(ref) and np.max(np.abs(ref)) > 1e-290 and np.all(np.abs(ref) < 1e300):
        assert info == 0, info
        assert _rel(x, ref) <= 1e-8
    elif not _representable(ref):
        assert info == eagle.UNREPRESENTABLE
        assert not (np.all(np.isfinite(x)) and info == 0)


@st.composite
def block_problems(draw):
    d, n = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    q, p = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rank = draw(st.integers(1, min(d, n)))
    kappa = 10.0 ** draw(st.floats(0, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    U, _ = np.linalg.qr(rng.standard_normal((d + p, rank)))
    V, _ = np.linalg.qr(rng.standard_normal((n + q, rank)))
    X = (U * np.logspace(0, -np.log10(kappa), rank)) @ V.T
    A, B, C = X[:d, :n], X[d:, :n], X[:d, n:]
    # rank A may fall below rank X when d or n is small: the reference is B A⁺ C regardless
    scales = [10.0 ** draw(st.integers(-300, 300)) for _ in range(3)]
    return A, B, C, scales


def _rel(x, ref):
    top = np.max(np.abs(ref))
    return np.linalg.norm(x / top - ref / top) / np.linalg.norm(ref / top)


@settings(max_examples=150, **SETTINGS)
@given(
    problem=block_problems(),
    eta=st.floats(0.01, 0.99),
    gamma=st.floats(0.01, 1.99),
)
def test_complete_over_scales_and_parameters(problem, eta, gamma):
    """Any η ∈ (0, 1), γ ∈ (0, 2) and scales 10^±300 of A, B, C: info 0 only with D = B A⁺ C to
    1e-8; info 0 whenever (η, γ) lie where 500 steps suffice and D is representable; info -3
    when D is not representable."""
    A, B, C, (sa, sb, sc) = problem
    ref0 = B @ np.linalg.pinv(A, rcond=1e-10) @ C
    with np.errstate(over="ignore", under="ignore"):
        ref = ref0 * (sb * sc / sa) if np.isfinite(sb * sc / sa) else ref0 * sb / sa * sc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        D, stats = eagle.complete(A * sa, B * sb, C * sc, eta=eta, gamma=gamma, return_stats=True)
    assert stats["given_steps"] == stats["iterations"] and stats["theory_steps"] == 0
    if stats["info"] == 0:
        assert np.all(np.isfinite(D)), "info 0 with a non-finite D"
    if not np.any(ref0):
        return
    if _representable(ref) and 1e-290 < np.max(np.abs(ref)) < 1e300:
        if 0.2 <= eta <= 0.6 and 0.8 <= gamma <= 1.2:
            assert stats["info"] == 0, stats
        if stats["info"] == 0:
            assert _rel(D, ref) <= 1e-8
        else:
            assert stats["info"] > 0  # not converged: said so, no breakdown
    elif not _representable(ref):
        assert stats["info"] == eagle.UNREPRESENTABLE


BAD = {
    "eta": [0.0, 1.0, 1.5, -0.1, float("nan"), float("inf"), True, "0.3"],
    "gamma": [0.0, 2.0, 50.0, 1e308, -1.0, float("nan"), None],
    "rtol": [-1e-10, 1.0, float("nan"), float("inf")],
    "maxiter": [0, -3, 2.5, True, "10"],
}


@settings(max_examples=60, **SETTINGS)
@given(
    name=st.sampled_from(sorted(BAD)),
    index=st.integers(0, 7),
    which=st.sampled_from(["complete", "lstsq", "distributed", "sketched"]),
)
def test_invalid_parameters_raise(name, index, which):
    value = BAD[name][index % len(BAD[name])]
    if value is None:  # None means "default" for eta/gamma: valid
        return
    rng = np.random.default_rng(0)
    A, B, C = rng.standard_normal((5, 4)), rng.standard_normal((2, 4)), rng.standard_normal((5, 2))
    call = {
        "complete": lambda kw: eagle.complete(A, B, C, **kw),
        "lstsq": lambda kw: eagle.lstsq(A, B[0][:4] @ np.ones((4, 5)) / 4, **kw),
        "distributed": lambda kw: eagle.complete_distributed(A, B, C, 2, **kw),
        "sketched": lambda kw: eagle.complete_sketched(A, B, C, 2, rng, **kw),
    }[which]
    with pytest.raises(ValueError, match=name):
        call({name: value})


@settings(max_examples=60, **SETTINGS)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    a=st.lists(st.floats(0.0, 0.05), min_size=3, max_size=3),
    c=st.lists(st.floats(0.005, 0.1), min_size=3, max_size=3),
)
def test_planted_extraction(layers, heads, a, c):
    a, c = a[:layers], c[:layers]
    model, task = plants.eagle(a, c, heads=heads, n=6, d=5, rank=3)
    ex = extract(
        model,
        task,
        probe_batch_size=16,
        control=False,
        test_batch=16,
        views=("eagle", "fidelity"),
    )
    np.testing.assert_allclose(ex.layers.a_step, a, rtol=RTOL, atol=1e-10)  # atol: a planted 0
    np.testing.assert_allclose(ex.layers.c_step, c, rtol=RTOL)
