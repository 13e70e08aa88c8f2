import math

import pytest
import torch
from conftest import RTOL

from eagle_probe.tasks import TASKS, Curriculum, Prompt, TaskConfig, make_generator, sample


@pytest.mark.parametrize("task", list(TASKS))
def test_shapes_and_dtype(task):
    cfg = TaskConfig(task=task, n=7, d=5, n_prime=3, d_prime=2, rank=3)
    p = sample(cfg, 4, make_generator(0))
    assert p.A.shape == (4, 5, 7) and p.B.shape == (4, 2, 7)
    assert p.C.shape == (4, 5, 3) and p.D.shape == (4, 2, 3)
    assert p.z0().shape == (4, 7, 10) and p.A.dtype == torch.float32
    assert torch.all(p.z0()[:, 5:, 7:] == 0), "the D slot of the prompt must be hidden"


@pytest.mark.parametrize(
    "cfg",
    [
        TaskConfig(),
        TaskConfig(kappa=1e3),
        TaskConfig(task="least_squares", n=30, d=8, n_prime=1, d_prime=1),
        TaskConfig(task="completion", rank=4),
        TaskConfig(task="nystrom", kernel="polynomial", degree=2, kernel_dim=3),
    ],
    ids=["paper", "kappa", "least_squares", "completion", "nystrom_poly"],
)
def test_rank_of_x_equals_rank_of_a_and_nystrom_is_exact(cfg):
    p = sample(cfg, 16, make_generator(1), dtype=torch.float64)
    rank_a = torch.linalg.matrix_rank(p.A, rtol=1e-9)
    rank_x = torch.linalg.matrix_rank(p.x(), rtol=1e-9)
    assert torch.equal(rank_a, rank_x)
    err = (p.optimal() - p.D).abs().max() / p.D.abs().max()
    assert err < RTOL  # κ(A) ≤ 1e3: round-off κ² eps = 2e-10


def test_paper_distribution_matches_its_second_moment():
    # E[D_ij²] = Σ_k α^{2k} / s for X = R1 R2ᵀ/√s with row covariance diag(α^k).
    cfg = TaskConfig()
    p = sample(cfg, 20000, make_generator(2), dtype=torch.float64)
    expected = sum(cfg.alpha ** (2 * k) for k in range(cfg.rank)) / cfg.rank
    assert abs(float(p.D.square().mean()) / expected - 1) < 0.05


@pytest.mark.parametrize(
    "cfg",
    [
        TaskConfig(),
        TaskConfig(kappa=1e3),
        TaskConfig(task="least_squares", n=30, d=8),
        TaskConfig(task="least_squares", n=30, d=8, kappa=1e2, rank=6),
        TaskConfig(task="completion", rank=4),
        TaskConfig(task="completion", rank=4, kappa=1e2),
        TaskConfig(task="nystrom", kernel="rbf", n=10, d=10),
        TaskConfig(task="nystrom", kernel="polynomial", n=10, d=10),
        TaskConfig(noise=0.01),
    ],
    ids=[
        "paper",
        "paper_kappa",
        "least_squares",
        "least_squares_kappa",
        "completion",
        "completion_kappa",
        "nystrom_rbf",
        "nystrom_poly",
        "paper_noise",
    ],
)
def test_queries_follow_the_law_of_the_samples(cfg):
    # Row i of A and of C holds feature i of the samples and of the queries: the same law, so the
    # same second moment per feature row. (Nyström: A's diagonal k(x_i, x_i) is no sample of a
    # fresh point; only its off-diagonal entries are compared.)
    p = sample(cfg, 4000, make_generator(11), dtype=torch.float64)
    A, C = p.A.square(), p.C.square()  # (b, d, n), (b, d, n')
    if cfg.task == "nystrom":
        keep = ~torch.eye(cfg.d, cfg.n, dtype=torch.bool)
        samples = (A * keep).sum(dim=(0, 2)) / (keep.sum(dim=1) * A.shape[0])
    else:
        samples = A.mean(dim=(0, 2))  # (d,)
    queries = C.mean(dim=(0, 2))  # (d,)
    ratio = queries / samples
    assert float((ratio - 1).abs().max()) < 0.1, f"query/sample second moment: {ratio}"
    if cfg.task == "least_squares" and cfg.kappa is None:  # feature i has variance α^i
        torch.testing.assert_close(
            samples, cfg.alpha ** torch.arange(cfg.d, dtype=torch.float64), rtol=0.05, atol=0
        )


def test_kappa_prescribes_the_condition_number():
    p = sample(TaskConfig(kappa=1e4, rank=10), 3, make_generator(3), dtype=torch.float64)
    s = torch.linalg.svdvals(p.A)[:, :10]
    assert torch.allclose(s[:, 0] / s[:, -1], torch.full((3,), 1e4, dtype=torch.float64))


def test_rbf_nystrom_is_an_approximation_not_exact():
    cfg = TaskConfig(task="nystrom", kernel="rbf", n=6, d=6)
    p = sample(cfg, 64, make_generator(4), dtype=torch.float64)
    err = float((p.optimal() - p.D).square().mean())
    assert 0 < err < float(p.D.square().mean())


def test_same_seed_same_prompts_and_generators_are_not_global():
    a = sample(TaskConfig(), 3, make_generator(5))
    torch.manual_seed(0)
    b = sample(TaskConfig(), 3, make_generator(5))
    c = sample(TaskConfig(), 3, make_generator(6))
    assert torch.equal(a.A, b.A) and not torch.equal(a.A, c.A)  # exact: one seed, one process


def test_noise_breaks_exactness():
    p = sample(TaskConfig(noise=0.01), 64, make_generator(7), dtype=torch.float64)
    assert float((p.optimal() - p.D).square().mean()) > 1e-4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task": "bogus"}, "unknown task 'bogus'"),
        ({"n": 0}, "n must be a positive integer"),
        ({"alpha": 1.5}, "alpha"),
        ({"noise": -1.0}, "noise"),
        ({"kappa": 0.5}, "kappa"),
        ({"kappa": math.inf}, "kappa"),
        ({"task": "nystrom", "kappa": 10.0}, "kappa cannot"),
        ({"kernel": "laplace"}, "unknown kernel"),
    ],
)
def test_bad_task_configs_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TaskConfig(**kwargs)


def test_prompt_rejects_inconsistent_blocks():
    A, B, C, D = (
        torch.zeros(2, 3, 4),
        torch.zeros(2, 1, 4),
        torch.zeros(2, 3, 2),
        torch.zeros(2, 1, 3),
    )
    with pytest.raises(ValueError, match="block D"):
        Prompt(A, B, C, D)


def test_roundtrip_dict():
    cfg = TaskConfig(task="nystrom", kernel="polynomial")
    assert TaskConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown task config field"):
        TaskConfig.from_dict(cfg.to_dict() | {"bogus": 1})


def test_curriculum_moves_from_easy_to_target():
    cur = Curriculum(start=1.0, until=0.5)
    cfg = TaskConfig(alpha=0.7)
    assert cur.at(cfg, 0.0).alpha == 1.0
    assert cur.at(cfg, 0.25).alpha == pytest.approx(0.85)
    assert cur.at(cfg, 0.9).alpha == pytest.approx(0.7)
    k = Curriculum(start=10.0, until=1.0).at(TaskConfig(kappa=1e4), 0.5).kappa
    assert k == pytest.approx(1e2 * 10**0.5)
