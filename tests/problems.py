"""Least-squares problems of a chosen shape, rank and condition number, shared by the solver
tests (`test_solvers.py`, `test_eagle_solver.py`)."""

import numpy as np

RNG_SEED = 0


def problem(m, n, kappa, *, rank=None, seed=RNG_SEED, consistent=False):
    """(A, b): A (m, n) of rank `rank` (default min(m, n)) with singular values spaced
    logarithmically from 1 to 1/kappa; b = A x for a random x when `consistent`, else random."""
    rng = np.random.default_rng(seed)
    k = min(m, n) if rank is None else rank
    U, _ = np.linalg.qr(rng.standard_normal((m, k)))
    V, _ = np.linalg.qr(rng.standard_normal((n, k)))
    A = (U * np.logspace(0, -np.log10(kappa), k)) @ V.T
    b = A @ rng.standard_normal(n) if consistent else rng.standard_normal(m)
    return A, b


# --- hard families: where a solver that only watches its own steps says "converged" wrongly ---
HARD_FAMILIES = ("hilbert", "graded", "graded_diagonal", "kahan", "clustered", "rank_deficient")


def _orthonormal(rng, m, k):
    return np.linalg.qr(rng.standard_normal((m, k)))[0]


def hard_matrix(family, m, n, p, seed):
    """An m × n matrix of a family that defeats step-size stopping rules; p in [0, 1] sets how
    hard (the exponent of the condition number, the angle of the Kahan matrix, the depth of the
    cluster or the rank).

    hilbert: H_ij = 1/(i + j + 1), κ grows like e^(3.5 min(m, n)); graded: rows scaled by
    10^(−16 p i/(m − 1)) times a Gaussian matrix; graded_diagonal: diag(10^(−16 p i/(k − 1)))
    mixed by a random orthogonal matrix on one side; kahan: diag(s^i)(I − c·strict upper ones),
    s = sin θ, c = cos θ, θ from 1.2 down to 0.05 as p grows (its last singular value is far
    below what its diagonal suggests); clustered: singular values 1 with a cluster of
    min(m, n)/3 of them within 1e−6 of each other at 10^(−12 p); rank_deficient: exact rank
    max(1, ⌊(1 − p) min(m, n)⌋) with κ = 10^(10 p) on its range."""
    rng = np.random.default_rng(seed)
    k = min(m, n)
    if family == "hilbert":
        i, j = np.arange(m)[:, None], np.arange(n)[None, :]
        return 1.0 / (i + j + 1.0)
    if family == "graded":
        return (10.0 ** (-16 * p * np.arange(m) / max(m - 1, 1)))[:, None] * rng.standard_normal(
            (m, n)
        )
    if family == "graded_diagonal":
        g = 10.0 ** (-16 * p * np.arange(k) / max(k - 1, 1))
        A = np.zeros((m, n))
        A[np.arange(k), np.arange(k)] = g
        return _orthonormal(rng, m, m) @ A if rng.random() < 0.5 else A @ _orthonormal(rng, n, n).T
    if family == "kahan":
        theta = 1.2 - 1.15 * p
        s, c = np.sin(theta), np.cos(theta)
        R = np.eye(k) - c * np.triu(np.ones((k, k)), 1)
        K = (s ** np.arange(k))[:, None] * R
        A = np.zeros((m, n))
        A[:k, :k] = K
        return A
    if family == "clustered":
        cluster = max(1, k // 3)
        s = np.ones(k)
        s[k - cluster :] = 10.0 ** (-12 * p) * (1 + 1e-6 * np.arange(cluster))
        return (_orthonormal(rng, m, k) * s) @ _orthonormal(rng, n, k).T
    if family == "rank_deficient":
        r = max(1, int((1 - p) * k))
        s = np.logspace(0, -10 * p, r)
        return (_orthonormal(rng, m, r) * s) @ _orthonormal(rng, n, r).T
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(HARD_FAMILIES)}")


def ls_allowance(A, b, x):
    """The error two backward-stable least-squares answers may differ by (Wedin's bound with
    room): max(1e-6, 1e3 · eps · (κ + κ² tan θ)), κ = σ_1/σ_r on the numerical range (numpy's
    lstsq cutoff), tan θ = ‖b − A x‖ / ‖A x‖ (0 for a consistent system)."""
    s = np.linalg.svd(A, compute_uv=False)
    if not s[0] > 0:
        return 1e-6
    rank = int(np.sum(s > max(A.shape) * np.finfo(float).eps * s[0]))
    kappa = float(s[0] / s[rank - 1])
    fit = float(np.linalg.norm(A @ x))
    tan = float(np.linalg.norm(b - A @ x)) / fit if fit > 0 else 0.0
    return max(1e-6, 1e3 * np.finfo(float).eps * (kappa + kappa * kappa * tan))
