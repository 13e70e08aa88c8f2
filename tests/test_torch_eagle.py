"""The torch EAGLE solver (CPU): the NumPy solver's answers and info contract, batched, in float64
and float32; problems the batched certificate cannot decide carry the NumPy solver's verdict."""

import numpy as np
import pytest
import torch

from eagle_probe.solvers import lstsq_torch, solve_eagle, solve_eagle_torch


def batch(p, m, n, kappa, *, seed=0, rank=None):
    """p problems with singular values from 1 to 1/kappa (rank of them nonzero)."""
    rng = np.random.default_rng(seed)
    k = min(m, n) if rank is None else rank
    out = []
    for _ in range(p):
        U, _ = np.linalg.qr(rng.standard_normal((m, k)))
        V, _ = np.linalg.qr(rng.standard_normal((n, k)))
        out.append((U * np.logspace(0, -np.log10(kappa), k)) @ V.T)
    return np.stack(out), rng.standard_normal((p, m))


def pinv_solution(A, b):
    return np.stack(
        [np.linalg.pinv(a, rcond=max(a.shape) * 2.2e-16) @ v for a, v in zip(A, b, strict=True)]
    )


def rel(x, ref):
    return np.linalg.norm(x - ref, axis=-1) / np.linalg.norm(ref, axis=-1)


@pytest.mark.parametrize("m, n, kappa", [(20, 20, 1e2), (30, 12, 1e4), (16, 16, 1e6)])
def test_a_batch_is_certified_and_right_in_float64(m, n, kappa):
    A, b = batch(64, m, n, kappa)
    At, bt = torch.from_numpy(A), torch.from_numpy(b)
    A0, b0 = At.clone(), bt.clone()
    x, info = solve_eagle_torch(At, bt, rtol=1e-10)
    assert info.dtype == torch.int64 and info.shape == (64,)
    # exact: inputs not written to
    assert torch.equal(At, A0) and torch.equal(bt, b0), "inputs must not change"
    assert bool((info == 0).all())
    err = rel(x.numpy(), pinv_solution(A, b))
    assert err.max() <= max(1e-10, 100 * kappa * 2.2e-16) * 4


def test_random_gaussian_problems_reach_1e_10():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(500, 20, 20, generator=g, dtype=torch.float64)
    b = torch.randn(500, 20, generator=g, dtype=torch.float64)
    x, info = solve_eagle_torch(A, b)
    ref = torch.linalg.solve(A, b)
    err = rel(x.numpy(), ref.numpy())
    kappa = torch.linalg.cond(A).numpy()
    assert bool((info == 0).all())
    # each certified to max(rtol, 100 κ eps) at most
    assert np.all(err <= np.maximum(1e-10, 100 * kappa * 2.2e-16) * 4)
    # and typically at the round-off of the problem (a few tenths of κ eps here), far below rtol
    assert np.median(err / (kappa * 2.2e-16)) < 10


def test_float32_is_certified_to_its_own_precision():
    A, b = batch(32, 20, 20, 1e2, seed=3)
    x, info = solve_eagle_torch(torch.from_numpy(A).float(), torch.from_numpy(b).float())
    assert x.dtype == torch.float32 and bool((info == 0).all())
    err = rel(x.double().numpy(), pinv_solution(A, b))
    assert err.max() <= 100 * 1e2 * 1.2e-7 * 4 and err.max() > 1e-12  # float32, not float64


def test_one_problem_returns_a_vector_and_an_int_like_numpy():
    A, b = batch(1, 25, 10, 1e3, seed=4)
    x, info = solve_eagle_torch(A[0], b[0])
    xn, infon = solve_eagle(A[0], b[0])
    assert isinstance(info, int) and info == infon == 0
    assert x.shape == (10,)
    # both certify their error estimate below bound / 4, bound = max(rtol, 100 κ̂ eps) = 1e-10
    assert np.linalg.norm(x.numpy() - xn) <= 1e-10 * np.linalg.norm(xn)


def test_x0_keeps_its_null_space_part_and_the_answer_is_x0_plus_the_pinv_step():
    A, b = batch(8, 30, 10, 1e2, seed=5)
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((8, 10))
    x, info = solve_eagle_torch(torch.from_numpy(A), torch.from_numpy(b), torch.from_numpy(x0))
    ref = x0 + pinv_solution(A, b - np.einsum("pmn,pn->pm", A, x0))
    assert bool((info == 0).all())
    assert rel(x.numpy(), ref).max() <= 1e-10


def test_rank_deficient_and_wide_problems_carry_the_numpy_verdict():
    A1, b1 = batch(3, 20, 20, 1e2, seed=7, rank=8)  # numerical rank 8 < n
    A2, b2 = batch(3, 20, 20, 1e2, seed=8)
    A, b = np.concatenate([A1, A2]), np.concatenate([b1, b2])
    x, info = solve_eagle_torch(torch.from_numpy(A), torch.from_numpy(b))
    for j in range(6):
        xn, infon = solve_eagle(A[j], b[j])
        assert int(info[j]) == infon == 0
        assert np.linalg.norm(x[j].numpy() - xn) <= 1e-9 * np.linalg.norm(xn)
    Aw, bw = batch(4, 8, 20, 10.0, seed=9)  # m < n: minimum-norm solutions
    x, info = solve_eagle_torch(torch.from_numpy(Aw), torch.from_numpy(bw))
    assert bool((info == 0).all())
    assert rel(x.numpy(), pinv_solution(Aw, bw)).max() <= 1e-9


def test_zero_right_hand_sides_and_zero_matrices_are_exact():
    A, b = batch(4, 10, 10, 10.0, seed=10)
    b[1] = 0.0
    A[2] = 0.0
    x, info = solve_eagle_torch(torch.from_numpy(A), torch.from_numpy(b))
    assert bool((info == 0).all())
    assert not bool(x[1].any()) and not bool(x[2].any())  # exact: nothing to solve, x = 0


def test_every_scale_float64_holds_works():
    A, b = batch(4, 12, 12, 1e2, seed=11)
    ref = pinv_solution(A, b)
    for e in (-600, 600):
        x, info = solve_eagle_torch(torch.from_numpy(np.ldexp(A, e)), torch.from_numpy(b))
        assert bool((info == 0).all())
        assert rel(np.ldexp(x.numpy(), e), ref).max() <= 1e-10


def test_maxiter_without_a_certificate_is_info_positive_as_in_numpy():
    A, b = batch(2, 20, 20, 1e6, seed=12)
    x, info = solve_eagle_torch(torch.from_numpy(A), torch.from_numpy(b), maxiter=3)
    assert bool((info > 0).all())
    for j in range(2):
        assert int(info[j]) == solve_eagle(A[j], b[j], maxiter=3)[1]


@pytest.mark.parametrize(
    "args, words",
    [
        ((torch.full((2, 3, 3), float("nan")), torch.ones(2, 3)), "NaN or Inf"),
        ((torch.ones(2, 3, 3), torch.ones(2, 4)), "expected"),
        ((torch.ones(3), torch.ones(3)), "(m, n) or (p, m, n)"),
    ],
)
def test_bad_inputs_raise_value_errors(args, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        solve_eagle_torch(*args)


def test_torch_lstsq_names_its_driver_and_matches_numpy():
    A, b = batch(6, 20, 10, 1e3, seed=13)
    ref = pinv_solution(A, b)
    for driver in ("gelsd", "gelsy", "gels"):
        x, used = lstsq_torch(torch.from_numpy(A), torch.from_numpy(b), driver=driver)
        # LAPACK against pinv, κ = 1e3 with a residual: 1e-9 > 1e3 κ eps, a bound of κ, not a CPU
        assert used == driver and rel(x.numpy(), ref).max() <= 1e-9
    assert lstsq_torch(torch.from_numpy(A), torch.from_numpy(b))[1] == "gelsd"
    with pytest.raises(ValueError, match="unknown driver"):
        lstsq_torch(torch.from_numpy(A), torch.from_numpy(b), driver="magic")


def test_a_step_that_stalls_before_the_small_singular_value_is_resolved_is_not_certified():
    # σ = 1 (19 times) and 1e-8: the steps become small while x still misses its largest part
    rng = np.random.default_rng(14)
    A, b = [], []
    for _ in range(16):
        U, _ = np.linalg.qr(rng.standard_normal((20, 20)))
        V, _ = np.linalg.qr(rng.standard_normal((20, 20)))
        A.append((U * np.r_[np.ones(19), 1e-8]) @ V.T)
        b.append(U @ rng.standard_normal(20))
    A, b = np.stack(A), np.stack(b)
    seen = []
    x, info = solve_eagle_torch(
        torch.from_numpy(A), torch.from_numpy(b), callback=lambda x: seen.append(x.clone())
    )
    ref = pinv_solution(A, b)
    assert bool((info == 0).all())
    assert rel(x.numpy(), ref).max() <= 4 * 100 * 1e8 * 2.2e-16
    early = rel(seen[len(seen) // 3].numpy(), ref)
    assert early.min() > 0.5  # a third of the way, the iterate was still far off


def test_the_device_benchmark_runs_every_method_and_reaches_1e_10_in_float64():
    from eagle_probe.bench import device_batch

    table = device_batch("cpu", np.random.default_rng(0), problems=200, n=8)
    methods = list(table.method)
    assert methods[:2] == ["eagle torch (float64)", "eagle torch (float32)"]
    assert {"torch lstsq (gelsd)", "torch lstsq (gelsy)", "torch lstsq (gels)"} <= set(methods)
    assert {"numpy eagle (one by one, scaled)", "numpy lstsq (one by one, scaled)"} <= set(methods)
    eagle64 = table.iloc[0]
    assert eagle64.uncertified == 0 and eagle64.error <= 1e-9 and eagle64.products_seconds > 0
    assert table.iloc[1].error > 1e-9  # float32 is float32
    assert (table.seconds > 0).all() and (table.device.isin(["cpu"])).all()


def test_a_clustered_step_is_certified_before_the_step_test_would_stop():
    # the step's own A_lᵀA_l clustered: the certificate's refinement finishes the solve, several
    # steps before the NumPy solver's step test stops, with the same certified accuracy
    A, b = batch(16, 20, 20, 1e3, seed=21)
    seen = []
    x, info = solve_eagle_torch(
        torch.from_numpy(A), torch.from_numpy(b), callback=lambda x: seen.append(1)
    )
    steps = []
    for j in range(16):
        calls = []
        xn, infon = solve_eagle(A[j], b[j], callback=calls.append)
        assert infon == 0
        steps.append(len(calls))
    assert bool((info == 0).all())
    assert len(seen) <= min(steps) - 4
    assert rel(x.numpy(), pinv_solution(A, b)).max() <= 1e-10
