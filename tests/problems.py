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
