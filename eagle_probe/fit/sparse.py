"""Sparse regression on normal equations: STLSQ, a forward group path, stability selection, and an
exact refit.

The problems here are least squares y ≈ Σ_g Φ_g θ_g over groups of columns g (a scalar term is a
group of one column; a matrix term a group of many). The solvers see them only through a
`NormalProblem`: the blocks Φ_gᵀ Φ_h and Φ_gᵀ y, and ‖y‖², computed by the caller from whatever
structure it has and cached here, in float64. Supports are refitted with the explicit design and
an orthogonal factorisation (`refit_qr`) where that is small, so planted models come back at
round-off accuracy; the normal-equation path (`solve_normal`) is for large groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import LinAlgError, lapack, solve_triangular


@dataclass
class NormalProblem:
    """Normal equations of a grouped least-squares problem, assembled block by block on demand."""

    sizes: list[int]  # columns per group
    gram_block: Callable[[int, int], np.ndarray]  # (g, h) -> Φ_gᵀ Φ_h (sizes[g], sizes[h])
    rhs_block: Callable[[int], np.ndarray]  # g -> Φ_gᵀ y (sizes[g],)
    yy: float  # ‖y‖²
    own_solver: Callable[[int], Callable[[np.ndarray], np.ndarray]] | None = None  # g -> a
    # solver with Φ_gᵀ Φ_g that uses the group's structure (default: `psd_solver` of the block)
    _own: dict[int, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict, repr=False)
    _gram: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _rhs: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    # (groups, levels, exact) -> (θ, relative residual): STLSQ and the forward path refit the
    # same supports (a converged STLSQ support, the path's start), with the same numbers
    _fits: dict[tuple, tuple[np.ndarray, float]] = field(default_factory=dict, repr=False)

    def block(self, g: int, h: int) -> np.ndarray:
        """Φ_gᵀ Φ_h (cached; the transpose of Φ_hᵀ Φ_g where that is cached)."""
        if (g, h) not in self._gram:
            if (h, g) in self._gram:
                self._gram[(g, h)] = self._gram[(h, g)].T
            else:
                self._gram[(g, h)] = np.asarray(self.gram_block(g, h), dtype=np.float64)
        return self._gram[(g, h)]

    def gram(self, groups: Sequence[int]) -> np.ndarray:
        """The normal matrix of the columns of `groups`, in order."""
        rows = [np.concatenate([self.block(g, h) for h in groups], axis=1) for g in groups]
        return np.concatenate(rows, axis=0)

    def rhs(self, groups: Sequence[int]) -> np.ndarray:
        for g in groups:
            if g not in self._rhs:
                self._rhs[g] = np.asarray(self.rhs_block(g), dtype=np.float64).reshape(-1)
        return np.concatenate([self._rhs[g] for g in groups])

    def fit(
        self, groups: Sequence[int], levels: Sequence[int] | None = None, exact: bool = False
    ) -> tuple[list[np.ndarray], float]:
        """Least squares on `groups`: (coefficients per group, relative residual ‖r‖/‖y‖).

        `levels` (group counts, summing to len(groups)) fits the groups in priority order: each
        level gets only what lies outside the span of the levels before it (block elimination),
        so where a later group's columns contain an earlier one's (a matrix family holding a
        scalar term, two matrix families sharing the identity direction), the earlier group
        keeps the shared direction instead of a minimum-norm split. `exact`: see `psd_solver`.
        """
        groups = list(groups)
        sizes = [self.sizes[g] for g in groups]
        if not groups or self.yy <= 0.0:
            return [np.zeros(s) for s in sizes], 1.0 if self.yy > 0 else 0.0
        levels = [c for c in (levels or [len(groups)]) if c > 0]
        if sum(levels) != len(groups):
            raise ValueError(f"levels {levels} do not cover {len(groups)} groups")
        key = (tuple(groups), tuple(levels), exact)
        if key not in self._fits:
            edges = np.cumsum([0] + levels)
            cols = [sum(sizes[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
            G, b = self.gram(groups), self.rhs(groups)
            theta = _solve_levels(G, b, cols, exact)
            rr = max(self.yy - 2.0 * theta @ b + theta @ G @ theta, 0.0)
            self._fits[key] = (theta, float(np.sqrt(rr / self.yy)))
        theta, res = self._fits[key]
        return split(theta.copy(), sizes), res

    def own(self, g: int) -> Callable[[np.ndarray], np.ndarray]:
        """A solver with group g's own normal matrix Φ_gᵀ Φ_g (cached)."""
        if g not in self._own:
            own = self.own_solver(g) if self.own_solver else None
            self._own[g] = own or psd_solver(self.gram([g]))
        return self._own[g]

    def alone(self, support: Sequence[int], coefs: Sequence[np.ndarray], g: int) -> float:
        """Fraction of ‖y‖² that group g alone explains of the support's residual (used to
        screen candidates before `gain`)."""
        b = self.rhs([g])
        if support:
            theta = np.concatenate([np.asarray(c).reshape(-1) for c in coefs])
            b = b - np.concatenate([self.block(g, h) for h in support], axis=1) @ theta
        return float(max(self.own(g)(b) @ b, 0.0)) / max(self.yy, 1e-300)

    def gain(self, support: Sequence[int], coefs: Sequence[np.ndarray], g: int) -> float:
        """Fraction of ‖y‖² by which adding group g to the fitted `support` (coefficients
        `coefs`) lowers the residual. The joint fit is eliminated with g first (its own,
        possibly structured, solver), leaving the support's Schur complement
        M = G_SS − G_Sg G_gg⁻¹ G_gS, which is small and solved exactly (minimum norm), so a
        support term that g contains costs nothing."""
        support = list(support)
        b_g = self.rhs([g])
        solve = self.own(g)
        x_g = solve(b_g)
        fitted = float(b_g @ x_g)
        if support:
            b_S = self.rhs(support)
            theta = np.concatenate([np.asarray(c).reshape(-1) for c in coefs])
            G_gS = np.concatenate([self.block(g, h) for h in support], axis=1)
            Y = solve(G_gS)
            M = self.gram(support) - G_gS.T @ Y
            r = b_S - G_gS.T @ x_g
            fitted += float(r @ psd_solver(0.5 * (M + M.T))(r)) - float(theta @ b_S)
        return max(fitted, 0.0) / max(self.yy, 1e-300)


def _solve_levels(
    G: np.ndarray, b: np.ndarray, cols: list[int], exact: bool, reference: np.ndarray | None = None
) -> np.ndarray:
    """Solve G θ = b level by level (`NormalProblem.fit`): the first level's columns first, the
    rest on their Schur complement, recursively."""
    k = cols[0]
    if reference is None:
        reference = np.diag(G)
    if len(cols) == 1:
        return psd_solver(G, exact=exact, reference=reference)(b)
    G11, G12, G22 = G[:k, :k], G[:k, k:], G[k:, k:]
    X = psd_solver(G11, exact=exact, reference=reference[:k])(
        np.concatenate([b[:k, None], G12], axis=1)
    )
    schur = G22 - G12.T @ X[:, 1:]
    rest = b[k:] - G12.T @ X[:, 0]
    theta2 = _solve_levels(0.5 * (schur + schur.T), rest, cols[1:], exact, reference[k:])
    return np.concatenate([X[:, 0] - X[:, 1:] @ theta2, theta2])


def split(theta: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Cut a stacked coefficient vector into groups."""
    return np.split(theta, np.cumsum(sizes)[:-1]) if len(sizes) else []


def solve_normal(G: np.ndarray, b: np.ndarray, rcond: float = 1e-13) -> np.ndarray:
    """Minimum-norm solution of G θ = b (b: (p,) or (p, k)) for a symmetric positive
    semi-definite G (float64).

    The system is equilibrated by its diagonal (every column of the design scaled to unit norm),
    then solved through an eigendecomposition, discarding directions below `rcond` × the largest
    eigenvalue (the unidentifiable ones: a matrix coefficient acting on the null space of a
    rank-deficient block); the solution has minimum norm in those scaled coordinates.
    """
    return psd_solver(G, rcond, exact=True)(b)


def psd_solver(
    G: np.ndarray, rcond: float = 1e-13, exact: bool = False, reference: np.ndarray | None = None
) -> Callable[[np.ndarray], np.ndarray]:
    """A solver b ↦ θ for G θ = b with G symmetric positive semi-definite, factored once.

    `exact`: minimum-norm through an eigendecomposition of the equilibrated G (directions below
    `rcond` × the largest eigenvalue dropped). Otherwise a Cholesky factorisation of the
    equilibrated G + `ridge` I with ridge = 1e-12 (several times faster; unidentifiable
    directions are damped to nearly zero instead of cut), falling back to the exact route.
    `reference`: diagonal the columns had before a projection (a Schur complement); a column
    left with less than 1e-12 of it is taken as lying in the projected span and gets 0.
    """
    G = np.asarray(G, dtype=np.float64)
    diag = np.clip(np.diag(G), 0.0, None)
    d = np.sqrt(diag)
    live = d > 0.0
    if reference is not None:
        live &= diag > 1e-12 * np.asarray(reference)
    s = np.zeros_like(d)
    s[live] = 1.0 / d[live]
    Gs = G[np.ix_(live, live)] * s[live][:, None] * s[live][None, :]
    if not live.any():
        return lambda b: np.zeros_like(np.asarray(b, dtype=np.float64))
    if not exact:
        try:
            factor = _cholesky(Gs + 1e-12 * np.eye(Gs.shape[0]))
        except LinAlgError:
            exact = True
    if exact:
        w, V = np.linalg.eigh(Gs)
        keep = w > rcond * max(w[-1], 0.0)
        Vk, wk = V[:, keep], w[keep]

    def solve(b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=np.float64)
        theta = np.zeros_like(b)
        sb = s[live].reshape((-1,) + (1,) * (b.ndim - 1))
        rhs = b[live] * sb
        if exact:
            inv = (1.0 / wk).reshape((-1,) + (1,) * (b.ndim - 1))
            x = Vk @ (inv * (Vk.T @ rhs)) if wk.size else np.zeros_like(rhs)
        else:
            x = _cho_solve(factor, rhs)
        theta[live] = x * sb
        return theta

    return solve


def _finite(a: np.ndarray) -> np.ndarray:
    """`a`, or the ValueError scipy's checked routines raise on infs and NaNs."""
    if not np.isfinite(a).all():
        raise ValueError("array must not contain infs or NaNs")
    return a


def _cholesky(a: np.ndarray) -> np.ndarray:
    """The lower Cholesky factor of a float64 matrix (k, k), k ≥ 1, as `scipy.linalg.cho_factor(
    a, lower=True)[0]` gives it (the same LAPACK call, dpotrf, without the wrapper's dispatch;
    the upper triangle keeps a's entries); LinAlgError where a is not positive definite."""
    c, info = lapack.dpotrf(_finite(a), lower=1, clean=0)
    if info > 0:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    if info < 0:
        raise ValueError(f"illegal value in {-info}-th argument of internal potrf")
    return c


def _cho_solve(c: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`scipy.linalg.cho_solve((c, True), b)` for a factor c of `_cholesky` and a float64
    right-hand side b (k,) or (k, m), k ≥ 1: LAPACK's dpotrs."""
    if b.size == 0:
        return np.empty_like(b)
    x, info = lapack.dpotrs(c, _finite(b), lower=1)
    if info != 0:
        raise ValueError(f"illegal value in {-info}th argument of internal potrs")
    return x


def refit_qr(
    design: np.ndarray, y: np.ndarray, levels: Sequence[int] | None = None, rcond: float = 1e-13
) -> np.ndarray:
    """Least squares on an explicit design (m, p) through LAPACK's orthogonal (SVD-based)
    solver, columns scaled to unit norm: coefficients at round-off accuracy; zero columns get 0.

    `levels` (column counts) gives priority as in `NormalProblem.fit`: each level is fitted on
    what lies outside the span of the levels before it (minimum norm there).
    """
    design = np.asarray(design, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    norms = np.linalg.norm(design, axis=0)
    live = norms > 0.0
    scaled = design / np.where(live, norms, 1.0)
    cols = [c for c in (levels or [design.shape[1]]) if c > 0]
    if sum(cols) != design.shape[1]:
        raise ValueError(f"levels {cols} do not cover {design.shape[1]} columns")
    x = _lstsq_levels(scaled, y, cols, rcond)
    return np.where(live, x / np.where(live, norms, 1.0), 0.0)


def _lstsq(Phi: np.ndarray, y: np.ndarray, rcond: float) -> np.ndarray:
    """Householder QR when Φ has full column rank (fast for tall designs), else LAPACK's
    minimum-norm SVD solver."""
    if Phi.shape[1] == 0:
        return np.zeros(0)
    Q, R = np.linalg.qr(Phi)
    diag = np.abs(np.diag(R))
    if diag.min() > rcond * 1e3 * max(diag.max(), 1e-300):
        return solve_triangular(R, Q.T @ y)
    return np.linalg.lstsq(Phi, y, rcond=rcond)[0]


def _lstsq_levels(Phi: np.ndarray, y: np.ndarray, cols: list[int], rcond: float) -> np.ndarray:
    k = cols[0]
    if len(cols) == 1:
        return _lstsq(Phi, y, rcond)
    U, sv, _ = np.linalg.svd(Phi[:, :k], full_matrices=False)
    U = U[:, sv > rcond * max(sv.max(initial=0.0), 1e-300)]
    rest = Phi[:, k:] - U @ (U.T @ Phi[:, k:])
    x2 = _lstsq_levels(rest, y - U @ (U.T @ y), cols[1:], rcond)
    x1 = _lstsq(Phi[:, :k], y - Phi[:, k:] @ x2, rcond)
    return np.concatenate([x1, x2])


def stlsq(
    problem: NormalProblem,
    groups: Sequence[int],
    threshold: float,
    max_iter: int = 20,
    levels: Callable[[list[int]], list[int]] | None = None,
) -> tuple[list[int], list[np.ndarray]]:
    """Sequential thresholded least squares (Brunton et al. 2016) over groups.

    Each group is scored by the norm of its fitted contribution relative to ‖y‖,
    ‖Φ_g θ_g‖ / ‖y‖ (a scale-free threshold); groups scoring below `threshold` are dropped and
    the rest refitted, until the support stops changing. `levels(support)` gives the priority
    levels of a support (`NormalProblem.fit`). Returns (support, coefficients).
    """
    levels = levels or (lambda sup: [len(sup)])
    support = [g for g in groups if problem.gram([g]).diagonal().max(initial=0.0) > 0.0]
    for _ in range(max_iter):
        if not support or problem.yy <= 0.0:
            return [], []
        coefs, _ = problem.fit(support, levels(support))
        scores = [
            np.sqrt(max(c @ problem.gram([g]) @ c, 0.0) / problem.yy)
            for g, c in zip(support, coefs, strict=True)
        ]
        keep = [g for g, s in zip(support, scores, strict=True) if s >= threshold]
        if keep == support:
            return support, coefs
        support = keep
    coefs, _ = problem.fit(support, levels(support))
    return support, coefs


def forward_groups(
    problem: NormalProblem,
    start: Sequence[int],
    candidates: Sequence[int],
    *,
    tol: float,
    min_gain: float,
    max_groups: int,
    parsimony: float = 0.8,
    screen: int = 2,
    small: int = 64,
) -> tuple[list[int], list[float]]:
    """A forward path over groups (stepwise sparse regression run forwards).

    From the support `start`, each step takes the `screen` candidates that explain most of the
    residual alone (`NormalProblem.alone`) and every candidate of at most `small` columns (cheap
    to score exactly), scores them by the exact drop of the residual when
    each joins the support (`NormalProblem.gain`), and adds the smallest one that achieves at
    least `parsimony` of the best log-reduction of the residual (so a large family that contains
    a small one wins only by a clear margin). The path stops when the relative residual is
    ≤ `tol`, when the step lowers it by less than the factor `min_gain`, or after `max_groups`
    additions. Returns (support, relative residual after each step, start first).
    """
    support = list(start)
    coefs, res = problem.fit(support)
    path = [res]
    pool = [g for g in candidates if g not in support]
    for _ in range(max_groups):
        if res <= tol or not pool:
            break
        alone = [problem.alone(support, coefs, g) for g in pool]
        shortlist = [pool[i] for i in np.argsort(alone)[::-1][:screen]]
        shortlist += [g for g in pool if problem.sizes[g] <= small and g not in shortlist]
        after = []
        for g in shortlist:
            drop = problem.gain(support, coefs, g)
            after.append(np.sqrt(max(res * res - drop, 0.0)))
        after = np.maximum(np.asarray(after), 1e-300)
        logs = np.log(res / after)
        best = float(logs.max())
        if best <= 0.0:
            break
        ok = [i for i in range(len(shortlist)) if logs[i] >= parsimony * best]
        pick = shortlist[min(ok, key=lambda i: (problem.sizes[shortlist[i]], -logs[i]))]
        trial_coefs, trial_res = problem.fit(support + [pick])
        if trial_res > res * (1.0 - min_gain):
            break
        support, coefs, res = support + [pick], trial_coefs, trial_res
        pool.remove(pick)
        path.append(res)
    return support, path


def bags(prompts: int, count: int, fraction: float, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` random subsets of `fraction` of the prompts, drawn without replacement."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"bag fraction must lie in (0, 1], got {fraction!r}")
    size = max(2, int(round(fraction * prompts)))
    return [
        np.sort(rng.choice(prompts, size=min(size, prompts), replace=False)) for _ in range(count)
    ]


def inclusion_frequency(
    supports: Sequence[Sequence[str]], names: Sequence[str]
) -> dict[str, float]:
    """Fraction of the bags whose support holds each name (stability selection)."""
    if not supports:
        return {name: 0.0 for name in names}
    return {name: sum(name in s for s in supports) / len(supports) for name in names}
