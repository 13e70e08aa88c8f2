"""Masked-block completion prompts.

Every task is the same prompt. A low-rank matrix X = [[A, C], [B, D]] with rank(X) = rank(A) is
shown with its D block hidden,

    Z0 = [[A, C],          A: (d, n)    C: (d, n')
          [B, 0]]          B: (d', n)   D: (d', n')

and the model must fill in D. When rank(X) = rank(A) the answer is exactly the Nyström estimate
D* = B A⁺ C.

Least-squares reading (used by the fitter): the n columns of A are samples with d features, B holds
their responses and each column of C is a query. In the card notation A_card = Aᵀ (n, d),
b = Bᵀ (n, d'), x = wᵀ (d, d') with D = w C, so A_cardᵀ A_card = A Aᵀ.

Generators (registry `TASKS`):
  paper          X = R1 R2ᵀ / √s, rows of R1, R2 i.i.d. N(0, diag(α^i)), i = 0..s-1 (paper)
  least_squares  samples x ~ N(0, diag(α^i)), responses W x (+ noise), queries from the same law
  nystrom        a real kernel (RBF or polynomial) on sampled points: landmark block, cross blocks,
                 unseen slice
  completion     an isotropic rank-s matrix X = U Vᵀ / √s with a missing block
`kappa` replaces the spectrum of A by a geometric one with condition number κ (paper, least_squares,
completion). A `Curriculum` moves the difficulty (α or κ) from easy to the target during training.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from eagle_probe.config import StrictDict, check_positive_ints
from eagle_probe.errors import EagleProbeError

KERNELS = ("rbf", "polynomial")
RANKED = ("paper", "completion")  # the tasks whose X has rank s = `rank`
DEFAULT_RANK = 10  # the paper's s, where n and d allow it


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, kw_only=True)
class TaskConfig(StrictDict):
    """The distribution of prompts. Sizes follow the paper's defaults."""

    KIND = "task config"

    task: str = "paper"  # generator name, one of TASKS
    n: int = 18  # columns of A: samples / landmarks
    d: int = 18  # rows of A: features / landmarks
    n_prime: int = 2  # columns of C and D: queries
    d_prime: int = 2  # rows of B and D: outputs
    rank: int | None = None  # s: rank of X (paper, completion) or number of kept singular values
    # (kappa); None: min(10, n, d)
    alpha: float = 0.7  # anisotropy: row covariance diag(α^i), i = 0..s-1 (paper, least_squares)
    noise: float = 0.0  # σ²: variance of Gaussian noise added to every entry of X
    kappa: float | None = None  # prescribed condition number of A's nonzero spectrum
    kernel: str = "rbf"  # nystrom: "rbf" or "polynomial"
    kernel_dim: int = 3  # nystrom: dimension of the sampled points
    lengthscale: float = 1.5  # nystrom, rbf: k(x, y) = exp(-|x - y|² / (2 ℓ²))
    degree: int = 2  # nystrom, polynomial: k(x, y) = (xᵀy / p + 1)^degree

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose from {', '.join(TASKS)}")
        if self.rank is None and all(_positive(getattr(self, k)) for k in ("n", "d")):
            object.__setattr__(self, "rank", min(DEFAULT_RANK, self.n, self.d))
        check_positive_ints(self, ("n", "d", "n_prime", "d_prime", "rank", "kernel_dim", "degree"))
        if self.task in RANKED and self.rank > min(self.n, self.d):
            # X = R1 R2ᵀ has rank s: rank(X) = rank(A), the prompt's premise, needs s <= min(n, d);
            # the generators allocate (b, d + d' + n + n', s), so an unbounded s is unbounded memory
            raise ValueError(
                f"rank s={self.rank} must not exceed min(n, d) = {min(self.n, self.d)} for the "
                f"{self.task} task; pass a rank of at most {min(self.n, self.d)}"
            )
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {self.alpha!r}")
        if not (self.noise >= 0.0 and math.isfinite(self.noise)):
            raise ValueError(f"noise (a variance) must be finite and >= 0, got {self.noise!r}")
        if self.kappa is not None and not (1.0 <= self.kappa < math.inf):
            raise ValueError(f"kappa must be a finite number >= 1, got {self.kappa!r}")
        if self.kappa is not None and self.task == "nystrom":
            raise ValueError("kappa cannot be prescribed for nystrom: the kernel sets the spectrum")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose from {', '.join(KERNELS)}")
        if not self.lengthscale > 0.0:
            raise ValueError(f"lengthscale must be > 0, got {self.lengthscale!r}")

    @property
    def tokens(self) -> int:
        """Rows of the prompt: d + d'."""
        return self.d + self.d_prime

    @property
    def width(self) -> int:
        """Columns of the prompt: n + n'."""
        return self.n + self.n_prime


@dataclass(frozen=True)
class Prompt:
    """A batch of block prompts. All blocks share the leading batch dimension."""

    A: torch.Tensor  # (b, d, n)
    B: torch.Tensor  # (b, d', n)
    C: torch.Tensor  # (b, d, n')
    D: torch.Tensor  # (b, d', n')  the hidden target

    def __post_init__(self) -> None:
        check_blocks(self.A, self.B, self.C, self.D)

    @property
    def batch(self) -> int:
        return self.A.shape[0]

    def z0(self) -> torch.Tensor:
        """The visible prompt [[A, C], [B, 0]]: (b, d + d', n + n')."""
        top = torch.cat([self.A, self.C], dim=-1)  # (b, d, n + n')
        bottom = torch.cat([self.B, torch.zeros_like(self.D)], dim=-1)  # (b, d', n + n')
        return torch.cat([top, bottom], dim=-2)

    def x(self) -> torch.Tensor:
        """The full matrix [[A, C], [B, D]]: (b, d + d', n + n')."""
        top = torch.cat([self.A, self.C], dim=-1)
        bottom = torch.cat([self.B, self.D], dim=-1)
        return torch.cat([top, bottom], dim=-2)

    def optimal(self, rtol: float = 1e-10) -> torch.Tensor:
        """The Nyström estimate B A⁺ C (b, d', n'), computed in float64."""
        A, B, C = (t.to(torch.float64) for t in (self.A, self.B, self.C))
        return (B @ torch.linalg.pinv(A, rtol=rtol) @ C).to(self.D.dtype)

    def to(self, dtype: torch.dtype) -> Prompt:
        return Prompt(*(t.to(dtype) for t in (self.A, self.B, self.C, self.D)))

    def __getitem__(self, index) -> Prompt:
        return Prompt(self.A[index], self.B[index], self.C[index], self.D[index])


def check_blocks(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None) -> None:
    """Raise `EagleProbeError` unless the blocks form a batch of [[A, C], [B, D]] prompts."""
    blocks = {"A": A, "B": B, "C": C} | ({} if D is None else {"D": D})
    for name, block in blocks.items():
        if not isinstance(block, torch.Tensor):
            raise EagleProbeError(
                f"block {name} must be a torch.Tensor, got {type(block).__name__}"
            )
        if block.ndim != 3:
            raise EagleProbeError(
                f"block {name} must have shape (batch, rows, cols), got {tuple(block.shape)}"
            )
        if 0 in block.shape:
            raise EagleProbeError(f"block {name} has an empty dimension: {tuple(block.shape)}")
    b, d, n = A.shape
    expect = {"B": (b, None, n), "C": (b, d, None)}
    if D is not None:
        expect["D"] = (b, B.shape[1], C.shape[2])
    for name, shape in expect.items():
        got = blocks[name].shape
        if any(want is not None and want != have for want, have in zip(shape, got, strict=True)):
            raise EagleProbeError(
                f"block {name} has shape {tuple(got)}, inconsistent with A {tuple(A.shape)}"
            )


# --- generators ------------------------------------------------------------------------------


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def _row_scales(count: int, alpha: float) -> torch.Tensor:
    """Standard deviations α^(i/2), i = 0..count-1: covariance diag(α^i)."""
    return alpha ** (torch.arange(count, dtype=torch.float64) / 2)


def _orthonormal(generator: torch.Generator, b: int, rows: int, cols: int) -> torch.Tensor:
    """(b, rows, cols) with orthonormal columns, Haar distributed."""
    q, r = torch.linalg.qr(_randn(generator, b, rows, cols))
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def _kappa_blocks(cfg: TaskConfig, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """A = P diag(σ) Qᵀ with σ geometric from 1 to 1/κ; B = W A, C = A Y, so rank X = rank A.

    Y ~ N(0, 1/n): a query column A y then has the second moments of A's own columns,
    E[(A y)(A y)ᵀ] = A Aᵀ / n (the queries follow the law of the samples)."""
    s = min(cfg.rank, cfg.d, cfg.n)
    sigma = torch.logspace(0, -math.log10(cfg.kappa), s, dtype=torch.float64)  # (s,)
    P = _orthonormal(g, b, cfg.d, s)  # (b, d, s)
    Q = _orthonormal(g, b, cfg.n, s)  # (b, n, s)
    A = (P * sigma) @ Q.transpose(-1, -2)  # (b, d, n)
    W = _randn(g, b, cfg.d_prime, cfg.d)  # (b, d', d)
    Y = _randn(g, b, cfg.n, cfg.n_prime) / math.sqrt(cfg.n)  # (b, n, n')
    return A, W @ A, A @ Y, W @ A @ Y


def _paper(cfg: TaskConfig, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    if cfg.kappa is not None:
        return _kappa_blocks(cfg, b, g)
    s = cfg.rank
    scale = _row_scales(s, cfg.alpha)  # (s,)
    R1 = _randn(g, b, cfg.tokens, s) * scale  # (b, d + d', s)
    R2 = _randn(g, b, cfg.width, s) * scale  # (b, n + n', s)
    X = R1 @ R2.transpose(-1, -2) / math.sqrt(s)  # (b, d + d', n + n')
    return _split(X, cfg)


def _least_squares(cfg: TaskConfig, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    if cfg.kappa is not None:
        return _kappa_blocks(cfg, b, g)
    scale = _row_scales(cfg.d, cfg.alpha).unsqueeze(-1)  # (d, 1): feature i has variance α^i
    A = _randn(g, b, cfg.d, cfg.n) * scale  # (b, d, n) samples as columns
    C = _randn(g, b, cfg.d, cfg.n_prime) * scale  # (b, d, n') queries
    W = _randn(g, b, cfg.d_prime, cfg.d) / math.sqrt(cfg.d)  # (b, d', d) true weights
    return A, W @ A, C, W @ C


def _completion(cfg: TaskConfig, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    if cfg.kappa is not None:
        return _kappa_blocks(cfg, b, g)
    s = cfg.rank
    U = _randn(g, b, cfg.tokens, s)  # (b, d + d', s)
    V = _randn(g, b, cfg.width, s)  # (b, n + n', s)
    return _split(U @ V.transpose(-1, -2) / math.sqrt(s), cfg)


def kernel_matrix(cfg: TaskConfig, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """k(x_i, y_j) for point sets x (b, p, dim), y (b, q, dim): (b, p, q)."""
    if cfg.kernel == "rbf":
        sq = torch.cdist(x, y).square()
        return torch.exp(-sq / (2 * cfg.lengthscale**2))
    return (x @ y.transpose(-1, -2) / x.shape[-1] + 1.0) ** cfg.degree


def _nystrom(cfg: TaskConfig, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    # Landmarks index the rows (first d) and columns (first n) of A; fresh points index the rest.
    landmarks = _randn(g, b, max(cfg.d, cfg.n), cfg.kernel_dim)
    rows_new = _randn(g, b, cfg.d_prime, cfg.kernel_dim)
    cols_new = _randn(g, b, cfg.n_prime, cfg.kernel_dim)
    rows, cols = landmarks[:, : cfg.d], landmarks[:, : cfg.n]
    A = kernel_matrix(cfg, rows, cols)  # (b, d, n)
    B = kernel_matrix(cfg, rows_new, cols)  # (b, d', n)
    C = kernel_matrix(cfg, rows, cols_new)  # (b, d, n')
    D = kernel_matrix(cfg, rows_new, cols_new)  # (b, d', n')
    return A, B, C, D


def _split(X: torch.Tensor, cfg: TaskConfig) -> tuple[torch.Tensor, ...]:
    d, n = cfg.d, cfg.n
    return X[:, :d, :n], X[:, d:, :n], X[:, :d, n:], X[:, d:, n:]


Generator = Callable[[TaskConfig, int, torch.Generator], tuple[torch.Tensor, ...]]

TASKS: dict[str, Generator] = {
    "paper": _paper,
    "least_squares": _least_squares,
    "nystrom": _nystrom,
    "completion": _completion,
}


def make_generator(seed: int) -> torch.Generator:
    """A CPU `torch.Generator` seeded with `seed` (the only way randomness enters tasks)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def sample(
    config: TaskConfig,
    batch: int,
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
) -> Prompt:
    """Draw `batch` prompts of `config` with `generator` (computed in float64, cast to `dtype`)."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError("generator must be a torch.Generator; see tasks.make_generator(seed)")
    A, B, C, D = TASKS[config.task](config, batch, generator)
    if config.noise > 0:
        sd = math.sqrt(config.noise)
        A, B, C, D = (t + sd * _randn(generator, *t.shape) for t in (A, B, C, D))
    return Prompt(A.to(dtype), B.to(dtype), C.to(dtype), D.to(dtype))


@dataclass(frozen=True, kw_only=True)
class Curriculum:
    """Difficulty grows from `start` to the task's own value over the first `until` of training.

    The difficulty knob is α for the anisotropic generators (α = 1 is isotropic, easiest) and log κ
    when the task prescribes κ.
    """

    start: float = 1.0  # starting α (or starting κ when the task has kappa)
    until: float = 0.5  # fraction of training after which the task's own value is reached

    def __post_init__(self) -> None:
        if not 0.0 < self.until <= 1.0:
            raise ValueError(f"curriculum until must lie in (0, 1], got {self.until!r}")
        if not self.start > 0.0:
            raise ValueError(f"curriculum start must be > 0, got {self.start!r}")

    def at(self, config: TaskConfig, progress: float) -> TaskConfig:
        """The task config to sample from at `progress` ∈ [0, 1] of training."""
        t = min(1.0, max(0.0, progress) / self.until)
        if config.kappa is not None:
            lo = math.log(max(1.0, self.start))
            return replace(config, kappa=math.exp(lo + t * (math.log(config.kappa) - lo)))
        start = min(1.0, self.start)
        return replace(config, alpha=start + t * (config.alpha - start))
