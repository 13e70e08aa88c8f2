"""The distributed regime on real local gloo processes (loopback only)."""

import numpy as np
import pytest

from eagle_probe import dist
from eagle_probe import solver_template as eagle
from eagle_probe.bench import block_problem


@pytest.fixture(scope="module")
def problem():
    return block_problem(40, 40, 8, 10.0, np.random.default_rng(0))


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_multiprocess_eagle_matches_the_simulation(problem, world):
    A, B, C, _ = problem
    results = dist.run_local(world, dist.eagle_worker, A, B, C)
    D_sim, stats = eagle.complete_distributed(A, B, C, world)
    for r in results:
        assert r["info"] == 0 and r["rounds"] == stats["rounds"]
        assert np.abs(r["D"] - D_sim).max() <= 1e-12 * np.abs(D_sim).max()
        assert r["bytes_per_round"] == (A.shape[0] + B.shape[0]) * C.shape[1] * 8


@pytest.mark.slow
def test_gd_and_admm_on_the_same_process_group(problem):
    A, B, C, ref = problem
    gd = dist.run_local(2, dist.gd_worker, A, B, C, ref, 1e-4, 5000)
    admm = dist.run_local(2, dist.admm_worker, A, B, C, ref, 1e-4, 5000)
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
    subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_probe",
            *args,
            "--data-shards",
            "2",
            "-o",
            str(tmp_path / "one.pt"),
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
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
