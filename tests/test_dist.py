"""The distributed regime on real local gloo processes (loopback only)."""

import numpy as np
import pytest
from conftest import assert_close

from eagle_probe import dist, eagle
from eagle_probe.bench import block_problem


@pytest.fixture(scope="module")
def problem():
    return block_problem(40, 40, 8, 10.0, np.random.default_rng(0))


def reference_rounds(A, B, C, world, rounds, eta=1 / 3, gamma=1.0):
    """Distributed EAGLE written from its definition, independently of the package: machine μ
    holds the columns A^μ, B^μ; each round the machines average γρ_μ B^μ A^μᵀ C (the D update)
    and −γρ_μ A^μ A^μᵀ C (the C update), ρ_μ = ‖A^μ‖₂⁻², and update their own blocks
    A^μ ← A^μ − ηρ_μ A^μ A^μᵀ A^μ, B^μ ← B^μ − ηρ_μ B^μ A^μᵀ A^μ."""
    cuts = np.linspace(0, A.shape[1], world + 1).round().astype(int)
    As = [A[:, cuts[i] : cuts[i + 1]].copy() for i in range(world)]
    Bs = [B[:, cuts[i] : cuts[i + 1]].copy() for i in range(world)]
    C, D = C.copy(), np.zeros((B.shape[0], C.shape[1]))
    for _ in range(rounds):
        rho = [1.0 / np.linalg.norm(Am, 2) ** 2 for Am in As]
        dC = sum(-gamma * r * Am @ Am.T @ C for r, Am in zip(rho, As, strict=True))
        dD = sum(gamma * r * Bm @ Am.T @ C for r, Am, Bm in zip(rho, As, Bs, strict=True))
        As, Bs = (
            [Am - eta * r * Am @ Am.T @ Am for r, Am in zip(rho, As, strict=True)],
            [Bm - eta * r * Bm @ Am.T @ Am for r, Am, Bm in zip(rho, As, Bs, strict=True)],
        )
        C, D = C + dC / world, D + dD / world
    return D


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_multiprocess_eagle_matches_an_independent_reference(problem, world):
    A, B, C, exact = problem
    results = dist.run_local(world, dist.eagle_worker, A, B, C)
    rounds = results[0]["rounds"]
    ref = reference_rounds(A, B, C, world, rounds)
    for r in results:
        assert r["info"] == 0 and r["rounds"] == rounds < 500
        assert_close(r["D"], ref)  # the same rounds, summed in another order
        assert r["bytes_per_round"] == (A.shape[0] + B.shape[0]) * C.shape[1] * 8
        assert r["theory_steps"] == rounds and r["recovered_steps"] == 0
    # and the answer it converged to is D = B A⁺ C
    assert np.linalg.norm(results[0]["D"] - exact) <= 1e-6 * np.linalg.norm(exact)
    # the in-process simulation agrees with the processes
    D_sim, stats = eagle.complete_distributed(A, B, C, world)
    assert stats["rounds"] == rounds
    assert_close(results[0]["D"], D_sim)  # gloo's all-reduce sums in its own order


@pytest.mark.parametrize("world", [2, 3])
def test_simulated_distributed_eagle_matches_the_reference_at_any_scale(problem, world):
    A, B, C, exact = problem
    D, stats = eagle.complete_distributed(A, B, C, world, rtol=0.0, maxiter=25)
    ref = reference_rounds(A, B, C, world, 25)
    assert_close(D, ref)
    # and before it converges, where every round's step sizes still show in D
    D3, _ = eagle.complete_distributed(A, B, C, world, rtol=0.0, maxiter=3)
    ref3 = reference_rounds(A, B, C, world, 3)
    assert np.linalg.norm(ref3 - exact) > 1e-3 * np.linalg.norm(exact)
    assert_close(D3, ref3)
    for sa, sb, sc in [(1e-150, 1.0, 1.0), (1e150, 1e-100, 1e100), (1.0, 1e-300, 1e300)]:
        D2, st = eagle.complete_distributed(A * sa, B * sb, C * sc, world)
        assert st["info"] == 0
        np.testing.assert_allclose(D2 / (sb * sc / sa), exact, rtol=1e-6, atol=0)


def gd_then_admm(rank: int, world: int, *args) -> tuple[dict, dict]:
    """Distributed GD, then consensus ADMM, on the one process group of these workers."""
    return dist.gd_worker(rank, world, *args), dist.admm_worker(rank, world, *args)


@pytest.mark.slow
def test_gd_and_admm_on_the_same_process_group(problem):
    A, B, C, ref = problem
    runs = dist.run_local(2, gd_then_admm, A, B, C, ref, 1e-4, 5000)
    gd, admm = ([run[k] for run in runs] for k in (0, 1))  # by rank
    assert gd[0]["error"] <= 1e-4 and admm[0]["error"] <= 1e-4
    assert gd[0]["rounds"] == gd[1]["rounds"]
    assert gd[0]["bytes_per_round"] == B.shape[0] * A.shape[0] * 8


def test_bad_world_size():
    with pytest.raises(ValueError, match="positive integer"):
        dist.run_local(0, dist.eagle_worker)


@pytest.mark.slow
def test_ddp_with_two_ranks_matches_one_process_with_two_shards(tmp_path):
    """torchrun without --data-shards shards by the process count (the issue's command, smaller)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    args = [
        "train",
        "--regime",
        "centralized",
        "--layers",
        "2",
        "--steps",
        "20",
        "--batch",
        "64",
        "--eval-every",
        "10",
        "--eval-batch",
        "128",
        "--no-progress",
        "--init-std",
        "0.1",
    ]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "eagle_probe",
            *args,
            "-o",
            str(tmp_path / "ddp.pt"),
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    # the one process: this one, through the command's entry point
    assert main([*args, "--data-shards", "2", "-o", str(tmp_path / "one.pt")]) == 0
    ddp, _, m_ddp = checkpoint.load(tmp_path / "ddp.pt")
    one, _, m_one = checkpoint.load(tmp_path / "one.pt")
    assert m_ddp["processes"] == 2 and m_one["processes"] == 1
    assert m_ddp["train_config"]["data_shards"] == m_one["train_config"]["data_shards"] == 2
    for key, value in one.state_dict().items():
        assert (ddp.state_dict()[key] - value).abs().max() <= 1e-4 * max(1.0, value.abs().max())
    losses = [r["train_loss"] for r in m_ddp["history"]]
    assert losses == pytest.approx([r["train_loss"] for r in m_one["history"]], rel=1e-4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ddp.json",
        "ddp.pt",
        "one.json",
        "one.pt",
    ]


@pytest.fixture()
def one_process_group():
    import torch.distributed as tdist

    tdist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{dist.free_port()}", rank=0, world_size=1
    )
    yield
    tdist.destroy_process_group()


def test_the_worker_at_extreme_scales_and_its_return_contract(problem, one_process_group):
    A, B, C, exact = problem
    for sa, sb, sc in [(1e-300, 1.0, 1.0), (1e150, 1e-100, 1e100), (1.0, 1e-300, 1e300)]:
        r = dist.eagle_worker(0, 1, A * sa, B * sb, C * sc)
        assert r["info"] == 0
        np.testing.assert_allclose(r["D"] / (sb * sc / sa), exact, rtol=1e-6, atol=0)
    r = dist.eagle_worker(0, 1, A * 1e-300, B * 1e300, C)  # D ~ 1e600
    assert r["info"] == eagle.UNREPRESENTABLE
    with pytest.raises(ValueError, match="gamma"):
        dist.eagle_worker(0, 1, A, B, C, gamma=50.0)
