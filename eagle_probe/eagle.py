"""The reference EAGLE eagle-probe runs: the exported solver's iteration with its certificate.

The EAGLE step, the exact power-of-two scaling, the faithful mode and the step schedule are
`solver_template`'s (the file `eagle-probe extract` exports; here with no recovered layers, so
the theory's η = 1/3, γ = 1 at every step). This module adds strict input checks, the certificate
behind info 0, the least-squares solver with x0, atol and callback, and the distributed and
sketched solvers.

API
    complete(A, B, C, *, mode="normalized", rtol=1e-10, maxiter=None) -> D
        (return_info=True: (D, info, iterations); return_stats=True: (D, stats))
    lstsq(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None) -> (x, info)
        x = x0 + A⁺(b − A x0); pass stats={} to receive the counts below
    complete_distributed(A, B, C, machines, ...) -> (D, stats)
    complete_sketched(A, B, C, r, rng, ...) -> (D, stats)
    stats: info, iterations, reason, kappa (κ̂), error_estimate, bound, checks (certificate
    checks), recovered_steps, theory_steps, given_steps (the source of each step's (η, γ)).

`info` (scipy style): 0 converged with a certificate — the relative error is at most
stats["bound"] = max(rtol, 100·κ̂·eps), κ̂ the condition number of A on its numerical range (see
`lstsq` for the test and why it implies the bound); > 0 stopped without the certificate, the
iterations used (stats["reason"]: stagnated, resolution limit, unresolved, ill-conditioned,
maxiter, fixed depth, not certified); < 0: -1 A lost its scale (breakdown), -2 non-finite
numbers appeared, -3 the answer is not representable in float64 (with a RuntimeWarning).
info is never 0 without the certificate, nor with a non-finite answer. Blocks are scaled by
powers of two (exact), so every scale float64 holds works. η must lie in (0, 1) and γ in (0, 2);
rtol in [0, 1); maxiter ≥ 1. Inputs are never modified.
"""

import math
import warnings

import numpy as np

from eagle_probe.solver_template import (
    BREAKDOWN,
    DEFAULT_MAXITER,
    EPS,
    NONFINITE,
    THEORY_ETA,
    THEORY_GAMMA,
    UNREPRESENTABLE,
    _eagle_update,
    _exponent,
    _faithful,
    _finish,
    _growth,
    _norm,
    _normalized_gram,
    _resolution_limit,
    _schedule,
    _top_eig,
    _warn,
    recovered_layers,
)

__all__ = [
    "DEFAULT_MAXITER",
    "THEORY_ETA",
    "THEORY_GAMMA",
    "complete",
    "complete_distributed",
    "complete_sketched",
    "lstsq",
    "recovered_layers",
    "schedule",
]


def _spectral_norm(A):
    """‖A‖₂ without overflow or underflow."""
    return _norm(A, spectral=True)


def schedule(step, eta=None, gamma=None):
    """(η, γ) of `step`: the recovered per-layer values, then the theory's 1/3 and 1."""
    return _schedule(step, eta, gamma)[:2]


class _Counter:
    """A call's steps by the source of their (η, γ), and what else it reports."""

    def __init__(self):
        self.counts = {"recovered": 0, "theory": 0, "given": 0}
        self.extra = {}
        self.last = "theory"

    def step(self, step, eta, gamma):
        e, g, self.last = _schedule(step, eta, gamma)
        self.counts[self.last] += 1
        return e, g

    def untake(self):
        """The last step was not taken after all."""
        self.counts[self.last] -= 1

    def stats(self, info, iterations):
        counts = {f"{source}_steps": count for source, count in self.counts.items()}
        return {"info": info, "iterations": iterations} | counts | self.extra


def _check_count(name, value, n):
    """An integer (Python or NumPy) in [1, n]."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= n:
        raise ValueError(f"{name} must be an integer in [1, {n}], got {value!r}")
    return int(value)


def _check_matrix(name, M, ndim=2):
    if isinstance(M, np.ma.MaskedArray):
        raise ValueError(
            f"{name} is a masked array; its mask would be ignored: pass np.ma.filled({name}, v) "
            "or the rows and columns you mean"
        )
    M = np.asarray(M)
    if M.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {M.shape}")
    if M.size == 0:
        raise ValueError(f"{name} has an empty dimension: shape {M.shape}")
    if M.dtype.kind not in "biuf":  # timedelta64 counts as an integer to numpy; not here
        raise ValueError(f"{name} must hold real numbers, got dtype {M.dtype}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or Inf")
    M = M.astype(np.float64, copy=True)
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} does not fit in float64 (it overflows)")
    return M


def _check_blocks(A, B, C):
    A, B, C = _check_matrix("A", A), _check_matrix("B", B), _check_matrix("C", C)
    if B.shape[1] != A.shape[1]:
        raise ValueError(f"B has {B.shape[1]} columns but A has {A.shape[1]}")
    if C.shape[0] != A.shape[0]:
        raise ValueError(f"C has {C.shape[0]} rows but A has {A.shape[0]}")
    return A, B, C


def _check_number(name, value, low, high, *, low_open=True, high_open=True):
    """A real number in the interval (low, high) (brackets by the *_open flags)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (math.isfinite(value) and above and below):
        lb, hb = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must lie in {lb}{low:g}, {high:g}{hb}, got {value!r}")
    return value


def _check_options(rtol, atol=0.0, maxiter=None, eta=None, gamma=None, callback=None):
    """Validate the shared keyword arguments; returns (rtol, atol, maxiter).

    η ∈ (0, 1) and γ ∈ (0, 2) are the ranges where one step contracts: the top singular value
    of A maps to (1 − η)σ and C's component along it to (1 − γ)c (Algorithm 1, ρ = ‖A‖₂⁻²)."""
    rtol = _check_number("rtol", rtol, 0.0, 1.0, low_open=False)
    atol = _check_number("atol", atol, 0.0, math.inf, low_open=False)
    if maxiter is None:
        maxiter = DEFAULT_MAXITER
    elif isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    if eta is not None:
        _check_number("eta", eta, 0.0, 1.0)
    if gamma is not None:
        _check_number("gamma", gamma, 0.0, 2.0)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    return rtol, atol, int(maxiter)


def _local_round(Am, Bm, C, e, g):
    """One machine's share of a distributed EAGLE round on its own columns Am, Bm:
    (dC, dD, Am, Bm), with ρ_μ = ‖A^μ‖₂⁻² from its local Gram matrix (zero updates when A^μ = 0).

    A^μ and B^μ come back divided together by ‖A^μ‖₂ (the updates are invariant under that joint
    scaling), so they stay of order one however many rounds run."""
    K = Am.T @ Am
    lam = float(np.linalg.eigvalsh(K)[-1]) if K.shape[0] <= 64 else _top_eig(K)[0]
    if not (lam > 0.0 and math.isfinite(lam)):
        return np.zeros_like(C), np.zeros((Bm.shape[0], C.shape[1])), Am, Bm
    s = math.sqrt(lam)
    Am, Bm, K = Am / s, Bm / s, K / lam
    AtC = Am.T @ C
    return -g * (Am @ AtC), g * (Bm @ AtC), Am - e * (Am @ K), Bm - e * (Bm @ K)


def _scaled_blocks(A, B, C, parts):
    """Exact power-of-two scaling for the column-split solvers: C by its own exponent, each
    machine's (A^μ, B^μ) jointly by the exponent of A^μ (B^μ A^μ⁺ is unchanged), B̂ by its own
    exponent first. Returns (As, Bs, Ĉ, exponent of D)."""
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    As, Bs = [], []
    for p in parts:
        Am, Bm = np.ldexp(A[:, p], -ea), np.ldexp(B[:, p], -eb)
        em = _exponent(Am)
        As.append(np.ldexp(Am, -em))
        Bs.append(np.ldexp(Bm, -em))
    return As, Bs, np.ldexp(C, -ec), eb + ec - ea


# --- the certificate behind info 0 ---------------------------------------------------------
#
# At convergence A_l = Ã m_l(ÃᵀÃ) has all its nonzero singular values clustered, so B_l = M_l
# (for lstsq) is a preconditioner with Ã M_l well conditioned on the range: the error of the
# iterate is then measured, not guessed, from the true residual r = b − A x (see `lstsq`).
# The promised bound is max(rtol, CERT_FLOOR · κ̂ · eps): float64 cannot do better than κ̂ · eps,
# and the estimate itself carries rounding of that size.
CERT_FLOOR = 100.0
# Certify only when the error estimate is at most bound / CERT_MARGIN: the estimate is computed
# in floating point too, so it is allowed to be off by that factor.
CERT_MARGIN = 4.0
# δ of the clustering test: the range eigenvalues of K = (ÃM)ᵀ(ÃM) / λ_max must be ≥ 1 − δ.
CLUSTER = 0.5
# Rounds of refinement at a certificate check (x ← x + correction from the true residual).
REFINE = 3
# A candidate stop besides a step ≤ rtol: a step ≤ STALL_STEP (relative) that did not halve.
STALL_STEP = 1e-4
# The distributed and sketched solvers are checked against the certified centralized answer
# with this much slack over its bound (their own iterations stop on a step test only).
CHECK_SLACK = 100.0


def _singular_values(A):
    """(σ, rank, cutoff): A's singular values, the numerical rank with numpy.linalg.lstsq's
    cutoff max(shape) · eps · σ_1, and the cutoff."""
    s = np.linalg.svd(A, compute_uv=False)
    cutoff = max(A.shape) * EPS * float(s[0])
    return s, int(np.sum(s > cutoff)), cutoff


def _steps_needed(tau2, eta):
    """Steps before a singular value of A_l at τ (relative to the top, τ² = tau2) joins the
    cluster: while small it grows by 1/(1 − η) a step relative to the top."""
    tau = math.sqrt(min(max(tau2, EPS * EPS), 1.0))
    return max(1, int(math.log(1.0 / tau) / -math.log(1.0 - eta)) - 1)


def _range_inverse(K, rank, n, eta):
    """Spectral test of K (n × n, symmetric PSD) at numerical rank `rank`.

    Returns ("unconverged", steps) when K's `rank` largest eigenvalues are not clustered
    (≥ (1 − CLUSTER) λ_max), else ("ok", solve, W_null, delta, low) with solve(F) = K⁺F on the
    cluster's span, W_null an orthonormal basis of the rest (None when rank = n) and low a lower
    bound of the cluster's eigenvalues.
    The full-rank case avoids an eigen-decomposition: ‖I − K/μ‖_F ≤ δ (μ = trace/n) puts every
    eigenvalue of K/μ in [1 − δ, 1 + δ], and K⁻¹ is then a Neumann series in I − K/μ."""
    if rank == n:
        mu = float(np.trace(K)) / n
        if mu > 0.0:
            E = np.eye(n) - K / mu
            delta = float(np.linalg.norm(E))
            if delta <= CLUSTER:
                terms = max(
                    1, min(200, math.ceil(math.log(EPS / 8) / math.log(max(delta, 1e-300))))
                )

                def solve(F):
                    out = term = F / mu
                    for _ in range(terms):
                        term = E @ term
                        out = out + term
                    return out

                return "ok", solve, None, delta, (1.0 - delta) * mu
        lam = np.linalg.eigvalsh(K)
        return "unconverged", _steps_needed(lam[0] / max(lam[-1], 1e-300), eta)
    lam, W = np.linalg.eigh(K)
    top = float(lam[-1])
    edge = float(lam[n - rank]) / top if top > 0.0 else 0.0
    if edge < 1.0 - CLUSTER:
        return "unconverged", _steps_needed(edge, eta)
    Wc, lc = W[:, n - rank :], lam[n - rank :]

    def solve(F):
        return Wc @ ((Wc.T @ F) / lc[:, None])

    return "ok", solve, W[:, : n - rank], 1.0 - edge, float(lc[0])


class _Check:
    """What a certificate check found: status ("certified", "unconverged", "inaccurate",
    "unresolved", "ill-conditioned"), the (refined) iterate, the relative error estimate,
    κ̂, the bound and the steps to skip before the next check."""

    def __init__(self, status, value=None, estimate=math.inf, kappa=math.nan, bound=math.nan):
        self.status, self.value, self.estimate = status, value, estimate
        self.kappa, self.bound, self.skip = kappa, bound, 0


def _null_leak(At, Q, s, rank):
    """How far the orthonormal basis Q of the numerical null space leans into A's range,
    relative to 1/σ_r: ‖Ã Q‖₂ beyond σ_{r+1} (what the cut-off singular values give) over σ_r;
    and ‖Ã Q‖₂. (The Gram matrix of Ã Q is accurate relative to its own, tiny, norm.)"""
    if not Q.shape[1]:
        return 0.0, 0.0
    Z = At @ Q
    zeta = math.sqrt(max(float(np.linalg.eigvalsh(Z.T @ Z)[-1]), 0.0))
    nxt = float(s[rank]) if rank < len(s) else 0.0
    return math.sqrt(max(zeta * zeta - nxt * nxt, 0.0)) / float(s[rank - 1]), zeta


def _lstsq_check(At, M, y, r0, xs, sv, rtol, eta, r0_err):
    """The certificate of `lstsq` at a candidate stop (scaled units: Ã, r̃0, x̃0 = xs)."""
    s, rank, cutoff = sv
    n = At.shape[1]
    kappa = float(s[0]) / float(s[rank - 1])
    bound = max(rtol, CERT_FLOOR * kappa * EPS)
    if bound >= 1.0:  # a relative error bound of 1 certifies nothing
        return _Check("ill-conditioned", y, kappa=kappa, bound=bound)
    G = At @ M  # fresh, not the recursive A_l: the estimate below is exact for any invertible M
    found = _range_inverse(G.T @ G, rank, n, eta)
    if found[0] == "unconverged":
        check = _Check("unconverged", y, kappa=kappa, bound=bound)
        check.skip = found[1]
        return check
    _, solve, W0, _, low = found
    # M itself, and G = fl(Ã M) with every product below, carry rounding of about eps ‖Ã‖‖M‖:
    # against G's smallest singular value on the cluster it must be within the bound, or the
    # estimate is rounding. On the range ‖M‖ is about 1/σ_r, so this is about κ̂ · eps, far
    # inside the bound; but a numerical null space makes M grow there step after step (by
    # 1/(1 − η) a step against the range): a rank-2 3 × 3 problem at κ̂ = 6.5e9, scaled by
    # 1e-100, reached a rounding of 0.13, and its estimate said 1.2e-6 of an error of 2.3e-2.
    top_m = _top_eig(M)[0]  # ‖M‖₂: M = m_l(ÃᵀÃ) is symmetric positive definite
    rounding = EPS * float(s[0]) * top_m / math.sqrt(max(low, np.finfo(float).tiny))
    leak, Q = 0.0, None
    if W0 is not None:
        # x-space null directions are M W0 (Ã M W0 ≈ 0); they must be null by lstsq's cutoff.
        Q = np.linalg.qr(M @ W0)[0]
        leak, zeta = _null_leak(At, Q, s, rank)
        if zeta > 2.0 * cutoff:
            return _Check("unresolved", y, kappa=kappa, bound=bound)

    def project(v):
        return v if Q is None else v - Q @ (Q.T @ v)

    y = project(y)
    if rounding > bound:  # the estimate below would be rounding
        return _Check("inaccurate", y, rounding, kappa, bound)
    best = _Check("inaccurate", y, kappa=kappa, bound=bound)
    for _ in range(REFINE):
        # d = P M (ÃM)⁺ r is exactly the range error Ã⁺r of y (any invertible M): the
        # correction to y and, by its norm, the error estimate.
        d = project(M @ solve(G.T @ (r0 - At @ y)))
        size = max(_norm(xs + y), np.finfo(float).tiny)
        estimate = (_norm(d) + leak * _norm(y) + r0_err) / size
        if estimate < best.estimate:
            best = _Check("inaccurate", y, estimate, kappa, bound)
        if estimate * CERT_MARGIN <= bound:
            best.status = "certified"
            return best
        y = y + d
    return best


def _complete_check(A0, Al, Bl, C, D, sv, rtol, eta):
    """The certificate of `complete` at a candidate stop: the same spectral test on K = A_lᵀA_l,
    the error estimate ‖B_l K⁺ A_lᵀ C_l‖ (= ‖B Ã⁺ C_l‖ in exact arithmetic, C_l the C block)
    plus an estimate of what A's numerical null space has put into D. Returns (check, C)."""
    s, rank, cutoff = sv
    n = A0.shape[1]
    kappa = float(s[0]) / float(s[rank - 1])
    bound = max(rtol, CERT_FLOOR * kappa * EPS)
    if bound >= 1.0:
        return _Check("ill-conditioned", D, kappa=kappa, bound=bound), C
    found = _range_inverse(Al.T @ Al, rank, n, eta)
    if found[0] == "unconverged":
        check = _Check("unconverged", D, kappa=kappa, bound=bound)
        check.skip = found[1]
        return check, C
    _, solve, W0, _, _ = found
    leak, null_part = 0.0, 0.0
    if W0 is not None:
        leak, zeta = _null_leak(A0, W0, s, rank)
        if zeta > 2.0 * cutoff:
            return _Check("unresolved", D, kappa=kappa, bound=bound), C
        # The null-space increments grow geometrically (by 1/(1 − η)² a step), so what D holds
        # from A's null space is about twice the current one.
        null_part = 2.0 * _norm((Bl @ W0) @ (W0.T @ (Al.T @ C)))
    best = _Check("inaccurate", D, kappa=kappa, bound=bound)
    for _ in range(REFINE):
        X = solve(Al.T @ C)
        dD = Bl @ X
        size = max(_norm(D), np.finfo(float).tiny)
        estimate = (_norm(dD) + null_part) / size + leak
        if estimate < best.estimate:
            best = _Check("inaccurate", D, estimate, kappa, bound)
        if estimate * CERT_MARGIN <= bound:
            best.status = "certified"
            return best, C
        D, C = D + dD, C - Al @ X
    return best, C


# stats["reason"] for each outcome (info 0 only with "certified" or "atol"; "exact": the
# answer is x0, or D = 0, exactly).
REASONS = {
    "certified": "converged: the error estimate is within the bound (info 0)",
    "exact": "the answer is exact (A, B, C or the residual is zero; info 0)",
    "atol": "‖b − A x‖ ≤ atol, the residual test asked for (info 0)",
    "stagnated": "the spectrum converged but the error estimate stays above the bound",
    "resolution limit": "only singular values at the cutoff max(m, n)·eps·‖A‖ were left to "
    "resolve, without a certificate",
    "unresolved": "A's numerical null space could not be separated from its range",
    "ill-conditioned": "κ̂ · eps is too large for any bound below 1",
    "maxiter": "maxiter reached without a certificate",
    "fixed depth": "the network's layers, run as they are: no certificate",
    "not certified": "the centralized check did not confirm the answer",
    "breakdown": "A lost its scale (info -1)",
    "non-finite": "non-finite numbers appeared (info -2)",
    "unrepresentable": "the answer is not representable in float64 (info -3)",
}
_CHECK_REASON = {
    "inaccurate": "stagnated",
    "unresolved": "unresolved",
    "ill-conditioned": "ill-conditioned",
    "unconverged": None,
}


def complete(
    A,
    B,
    C,
    *,
    mode="normalized",
    rtol=1e-10,
    maxiter=None,
    eta=None,
    gamma=None,
    return_info=False,
    return_stats=False,
):
    """Estimate D = B A⁺ C from the visible blocks A (d, n), B (d', n), C (d, n').

    A, B and C are first scaled by powers of two (exact), so any scale that float64 holds works.
    Stopping rule (normalized): the certificate of `lstsq` on the blocks. Candidate stops are a
    step that changes D by at most rtol · ‖D‖_F, a small step (≤ 1e-4) that no longer shrinks,
    the resolution limit and maxiter; at each, K = A_lᵀA_l must have its rank(A) largest
    eigenvalues (rank with numpy's cutoff max(d, n)·eps·‖A‖₂) clustered in [(1 − δ)λ_max, λ_max],
    δ = 0.5, its other eigenvectors must be null for A by that cutoff, and the estimate
    ‖B_l K⁺ A_lᵀ C_l‖ (which is ‖B A⁺ C_l‖ in exact arithmetic: the error of D, C_l being the C
    block) plus twice the current increment from A's null space must be at most bound / 4 of
    ‖D‖, bound = max(rtol, 100 · κ̂ · eps), κ̂ = σ_1/σ_rank. The correction B_l K⁺ A_lᵀ C_l is
    applied (up to three times) before the test. info 0 then states ‖D − B A⁺ C‖ ≲ bound · ‖D‖
    for prompts with rank X = rank A (C_l is the recursive C block, not a recomputed residual:
    B A⁺ C cannot be recomputed without solving the problem). Otherwise info is the iteration
    count (> 0) and stats["reason"] says why; info < 0 when the answer is not finite or not
    representable in float64 (-3) or the iteration broke down; never 0 with a non-finite D.
    Faithful mode runs the network's layers as they are: info is their number (no certificate)
    unless the numbers overflow (-2).
    `return_info=True` returns (D, info, iterations); `return_stats=True` returns (D, stats) with
    info, iterations, reason, kappa (κ̂), error_estimate (relative), bound, checks (certificate
    checks run) and how many steps used recovered (η, γ), the theory's (η, γ) = (1/3, 1), or the
    ones passed as arguments (recovered_steps, theory_steps, given_steps).
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma)
    counter = _Counter()

    def result(D, info, iterations):
        if return_stats:
            return D, counter.stats(info, iterations)
        return (D, info, iterations) if return_info else D

    if mode == "faithful":
        D, info, iterations, counter.extra["reason"] = _faithful(A, B, C)
        return result(D, info, iterations)
    if mode != "normalized":
        raise ValueError(f"unknown mode {mode!r}; choose from faithful, normalized")
    D = np.zeros((B.shape[0], C.shape[1]))
    if not (np.any(A) and np.any(B) and np.any(C)):
        counter.extra["reason"] = "exact"
        return result(D, 0, 0)
    # Exact power-of-two scaling: A = 2^ea Â, B = 2^eb B̂, C = 2^ec Ĉ, so D = 2^(eb+ec-ea) B̂ Â⁺ Ĉ.
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)

    def check(Al, Bl, Cl, D, e, sv):
        return _complete_check(A, Al, Bl, Cl, D, sv, rtol, e)

    D, info, reason, it = _certified(A, B, C, rtol, maxiter, eta, gamma, counter, check)
    counter.extra["reason"] = reason
    if info >= 0:
        D, ok = _finished(D, eb + ec - ea, counter)
        info = info if ok else UNREPRESENTABLE
    return result(D, info, it)


def _finished(D, e, counter):
    """(D · 2ᵉ, representable): the D block in prompt units; when float64 cannot hold it, a
    RuntimeWarning (pointing two frames above this one: `complete`'s caller, or the column-split
    solver itself) and stats["reason"] "unrepresentable"."""
    D, ok = _finish(D, e)
    if not ok:
        warnings.warn(
            "D = B A⁺ C is not representable in float64 at this scale", RuntimeWarning, stacklevel=3
        )
        counter.extra["reason"] = "unrepresentable"
    return D, ok


def _candidate(rel_step, prev_step, rtol):
    """A candidate stop: a step of at most rtol, or a small step that did not halve (the
    iteration has reached its rounding floor, or a singular value is still far from resolved).
    Floats or tensors of them (`torch_eagle`'s batch): | and &, not `or`, so both work."""
    return (rel_step <= rtol) | ((rel_step <= STALL_STEP) & (rel_step > 0.5 * prev_step))


def _outcome(counter, check, checks):
    counter.extra.update(
        kappa=check.kappa, error_estimate=check.estimate, bound=check.bound, checks=checks
    )


def _certified(A, B, C, rtol, maxiter, eta, gamma, counter, check, *, after=None, watch_a=False):
    """The normalized EAGLE iteration on scaled blocks with its certificate, the one loop of
    `complete` (the D block) and `lstsq` (A = Ã, B = I, C = r̃0: the D block is ỹ ≈ Ã⁺r̃0):
    (value, info, reason, iterations).

    check(A_l, B_l, C_l, D, η, sv) -> (_Check, C_l) is the certificate at a candidate stop (sv:
    `_singular_values` of the starting A, computed at the first check); after(D) -> True, run
    after every finite step, stops with info 0 ("atol"); watch_a: a non-finite A_l stops too."""
    A0 = A
    D = np.zeros((B.shape[0], C.shape[1]))
    v, it, e = None, 0, THEORY_ETA
    growth, limit = 0.0, _resolution_limit(A.shape)
    sv, next_check, checks, prev_step = None, 0, 0, math.inf
    checked = -1  # the iteration of the last check
    last = _Check("unconverged", D)

    def look(C):
        nonlocal sv, checks
        sv = _singular_values(A0) if sv is None else sv
        checks += 1
        return check(A, B, C, D, e, sv)

    reason = "maxiter"
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            return D, BREAKDOWN, "breakdown", it
        A, B, K, v = normalized
        e, g = counter.step(it - 1, eta, gamma)
        growth += _growth(e)
        if growth > limit:  # only noise below the cutoff is left to resolve
            it -= 1
            counter.untake()
            reason = "resolution limit"
            break
        A, B, C, dD = _eagle_update(A, B, C, K, e, g)
        D = D + dD
        if not np.all(np.isfinite(D)) or (watch_a and not np.all(np.isfinite(A))):
            return D, NONFINITE, "non-finite", it
        if after is not None and after(D):
            return D, 0, "atol", it
        rel_step = _norm(dD) / max(_norm(D), np.finfo(float).tiny)
        stop = _candidate(rel_step, prev_step, rtol)
        prev_step = rel_step
        if stop and it >= next_check:
            last, C = look(C)
            if last.status == "certified":
                _outcome(counter, last, checks)
                return last.value, 0, "certified", it
            if last.status != "unconverged":
                _outcome(counter, last, checks)
                return last.value, it, _CHECK_REASON[last.status], it
            next_check, checked = it + last.skip, it
    if it > 0 and checked != it:
        last, C = look(C)  # the iteration ends here: a last look for the certificate
    _outcome(counter, last, checks)
    if last.status == "certified":
        return last.value, 0, "certified", it
    value = last.value if last.status != "unconverged" else D
    return value, max(it, 1), _CHECK_REASON.get(last.status) or reason, it


def lstsq(
    A,
    b,
    x0=None,
    *,
    rtol=1e-10,
    atol=0.0,
    maxiter=None,
    callback=None,
    eta=None,
    gamma=None,
    stats=None,
):
    """Least-squares solution of min ‖A x − b‖₂ by EAGLE: x = x0 + A⁺(b − A x0).

    Without x0 this is the minimum-norm solution A⁺b; with x0, x0's component in the null space
    of A is kept (the iteration only adds vectors in the row space of A). A⁺ is numpy's: singular
    values at most rcond·σ_1, rcond = max(m, n)·eps, count as zero.
    A (m, n), b (m,) or (m, k). The prompt is [[A, r0], [I_n, 0]] with r0 = b − A x0, so the D
    block is A⁺ r0 and the B block M_l = m_l(ÃᵀÃ) with A_l = Ã M_l. A and r0 are scaled by
    powers of two first (exact), so every scale float64 holds works; ρ = ‖A_l‖₂⁻² per step by
    warm-started power iteration on the n × n Gram matrix.

    Stopping rule. info 0 certifies
        ‖x − x*‖₂ ≤ bound · ‖x‖₂,   bound = max(rtol, 100 · κ̂ · eps)   (stats["bound"]),
    x* = x0 + A⁺(b − A x0), κ̂ = σ_1/σ_r the condition number of A on its numerical range
    (stats["kappa"]), r its numerical rank. The certificate is checked at candidate stops only
    (a step ‖x_k − x_{k−1}‖ ≤ rtol ‖x_k − x0‖, a step ≤ 1e-4 that no longer halves, the
    resolution limit, maxiter):
      1. G = Ã M_l is recomputed and K = GᵀG must have its r largest eigenvalues in
         [(1 − δ)λ_max, λ_max], δ = 0.5 (for full rank: ‖I − K/μ‖_F ≤ δ, μ = trace K / n, without
         an eigen-decomposition). A smaller one is a singular value of A not yet resolved: the
         checks skip the steps it still needs (it grows by 1/(1 − η) a step).
      2. The other eigenvectors W_0 of K give the numerical null space Q = orth(M_l W_0); ‖Ã Q‖₂
         must be at most twice the cutoff. x is projected off Q (x keeps x0's null-space part).
         The rounding that M_l and G carry, eps ‖Ã‖₂ ‖M_l‖₂ over G's smallest singular value on
         the cluster, must be within the bound (about κ̂ · eps on a range, but a numerical null
         space makes M_l grow there every step).
      3. With r = b − A x recomputed (not the recursive C block), d = P M_l G⁺ r (G⁺ on the
         cluster, P the projection) is exactly the range error A⁺r of x for any invertible M_l;
         since G is well conditioned (step 1), d is computed accurately. x ← x + d is applied
         up to three times, and the estimate ‖d‖ + leak + ε_0 of the last x (leak: how far Q
         leans into the range, ε_0 = eps (‖b‖ + ‖A‖‖x0‖)/σ_r the rounding of r0) must be at most
         bound/4 of ‖x‖: the estimate is itself rounded, so the factor 4 is its allowance.
    Why the bound follows: x* − x = A⁺r restricted to the numerical range (null part equal by
    step 2), and d is that vector up to rounding of order κ̂·eps·‖x‖.
    With atol > 0, ‖b − A x_k‖ ≤ atol also stops with info 0 (a residual certificate only).
    Returns (x, info): info 0 certified (as above); > 0 stopped without the certificate after
    that many iterations (stats["reason"]: "stagnated" when the spectrum converged but the
    estimate stays above the bound, "resolution limit", "unresolved", "ill-conditioned" when
    100·κ̂·eps ≥ 1, "maxiter"); < 0: -1 breakdown, -2 non-finite numbers, -3 x is not
    representable in float64. Never 0 with a non-finite x or without the certificate.
    callback(x_k) is called once per iteration. A dict passed as `stats` receives info,
    iterations, reason, kappa, error_estimate (relative), bound, checks and the steps by source
    of (η, γ), as in `complete`.
    """
    A = _check_matrix("A", A)
    b_in = np.asarray(b)
    vector = b_in.ndim == 1
    b = _check_matrix("b", b_in.reshape(-1, 1) if vector else b_in)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    rtol, atol, maxiter = _check_options(rtol, atol, maxiter, eta, gamma, callback)
    m, n = A.shape
    if x0 is not None and vector and np.shape(x0) != (n,):
        raise ValueError(f"x0 has shape {np.shape(x0)}; a vector b needs an x0 of shape {(n,)}")
    x0 = (
        np.zeros((n, b.shape[1]))
        if x0 is None
        else _check_matrix("x0", np.asarray(x0).reshape(-1, 1) if vector else x0)
    )
    if x0.shape != (n, b.shape[1]):
        raise ValueError(f"x0 has shape {x0.shape}, expected {(n, b.shape[1])}")
    shape = (lambda v: v[:, 0]) if vector else (lambda v: v)
    counter = _Counter()
    x, info, it = _lstsq(A, b, x0, rtol, atol, maxiter, callback, eta, gamma, counter, shape)
    if stats is not None:
        stats.update(counter.stats(info, it))
    return shape(x), info


def _lstsq(A, b, x0, rtol, atol, maxiter, callback, eta, gamma, counter, shape):
    ea = _exponent(A)
    if ea == 0 and not np.any(A):
        counter.extra["reason"] = "exact"
        return x0.copy(), 0, 0
    At = np.ldexp(A, -ea)  # Ã = 2^-ea A, max|Ã| in [0.5, 1)
    # Residual in units of 2^k: r̃0 = 2^-k (b − A x0), computed without overflow.
    k = max(_exponent(b), ea + _exponent(x0)) if np.any(x0) else _exponent(b)
    with np.errstate(under="ignore"):
        r = np.ldexp(b, -k) - At @ np.ldexp(x0, ea - k)
    kr = _exponent(r)
    if not np.any(r):
        counter.extra["reason"] = "exact"
        return x0.copy(), 0, 0
    r, k = np.ldexp(r, -kr), k + kr
    e_out = k - ea  # x = x0 + 2^e_out ỹ with ỹ ≈ Ã⁺ r̃0
    with np.errstate(under="ignore"):
        bt = np.ldexp(b, -k)  # b in the same units
        xs = np.ldexp(x0, ea - k)  # x0 in the units of ỹ
    tol_abs = math.ldexp(atol, -k) if atol > 0 else 0.0

    def iterate(y):
        with np.errstate(over="ignore", under="ignore"):
            return x0 + np.ldexp(y, e_out)

    def check(Al, M, C, y, e, sv):
        s, rank = sv[0], sv[1]
        r0_err = (
            EPS * (_norm(bt) + float(s[0]) * _norm(xs)) / float(s[rank - 1]) if np.any(x0) else 0.0
        )
        return _lstsq_check(At, M, y, r, xs, sv, rtol, e, r0_err), C

    def after(y):
        if callback is not None:
            callback(shape(iterate(y)))
        return tol_abs > 0 and _norm(r - At @ y) <= tol_abs

    # A_l = Ã m_l(ÃᵀÃ) and B_l = M_l = m_l(ÃᵀÃ); the D block is ỹ
    y, info, reason, it = _certified(
        At.copy(),
        np.eye(A.shape[1]),
        r.copy(),
        rtol,
        maxiter,
        eta,
        gamma,
        counter,
        check,
        after=after,
        watch_a=True,
    )
    counter.extra["reason"] = reason
    x = iterate(y)
    if info < 0:
        return x, info, it
    if not np.all(np.isfinite(x)) or (np.any(y) and np.max(np.abs(x)) < np.finfo(float).tiny):
        _warn("the least-squares solution is not representable in float64 at this scale")
        counter.extra["reason"] = "unrepresentable"
        return x, UNREPRESENTABLE, it
    return x, info, it


def _split_columns(n, machines):
    bounds = np.linspace(0, n, machines + 1).round().astype(int)
    return [slice(bounds[i], bounds[i + 1]) for i in range(machines)]


def _centralized_check(A, B, C, D, rtol):
    """(ok, reason, extra): D against the certified answer of `complete` on the same blocks.

    The distributed and sketched iterations stop on a step test, which says nothing about the
    error on an ill-conditioned A; their info 0 is backed instead by this check:
    ‖D − D_c‖ ≤ CHECK_SLACK · max(rtol, bound_c) · ‖D_c‖ with D_c certified to bound_c, so that
    ‖D − B A⁺ C‖ ≲ (CHECK_SLACK · max(rtol, bound_c) + bound_c) · ‖D_c‖ (stats["bound"])."""
    Dc, st = complete(A, B, C, rtol=rtol, return_stats=True)
    extra = {k: st[k] for k in ("kappa", "bound") if k in st}
    if st["info"] != 0:
        return False, "not certified", extra
    bound_c = st.get("bound", 0.0)
    tol = CHECK_SLACK * max(rtol, bound_c)
    e = _exponent(Dc) if np.any(Dc) else _exponent(D)
    with np.errstate(over="ignore", under="ignore"):
        gap = _norm(np.ldexp(D, -e) - np.ldexp(Dc, -e))
    size = _norm(np.ldexp(Dc, -e))
    estimate = gap / size if size > 0 else (0.0 if gap == 0 else math.inf)
    extra |= {"error_estimate": estimate, "bound": tol + bound_c}
    return estimate <= tol, "certified" if estimate <= tol else "not certified", extra


def complete_distributed(
    A, B, C, machines, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Distributed EAGLE: machine μ holds the columns A^μ, B^μ; C and D are replicated.

    Each round, machine μ computes its local update γρ_μ B^μ A^μᵀ C (and A^μ A^μᵀ C); the
    machines average these (one all-reduce of (d + d') × n' floats per machine) and each updates
    its own A^μ, B^μ with its local Gram matrix. Stops when a round changes D by at most
    rtol · ‖D‖_F, or at maxiter. A step test says nothing about the error when A is
    ill-conditioned, and the machines hold no preconditioner to certify with, so info 0 is
    backed by a check against the certified centralized answer D_c of `complete`:
    ‖D − D_c‖ ≤ 100 · max(rtol, bound_c) · ‖D_c‖ (the check gathers the blocks; it is the
    simulation's certificate, not a distributed one). info 0 then states a relative error of at
    most stats["bound"] = 100 · max(rtol, bound_c) + bound_c; otherwise info is the rounds used
    (stats["reason"]: "not certified" or "maxiter"). Returns (D, stats) with rounds, floats sent
    per machine per round and in total, info (< 0 as in `complete`), reason, error_estimate,
    kappa, bound and the steps by source of (η, γ).
    callback(D_k) runs after every round.
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    machines = _check_count("machines", machines, n)
    parts = _split_columns(n, machines)
    D = np.zeros((B.shape[0], C.shape[1]))
    per_round = (A.shape[0] + B.shape[0]) * C.shape[1]
    counter = _Counter()
    info, rounds = maxiter, 0

    def stats():
        return counter.stats(info, rounds) | {
            "rounds": rounds,
            "floats_per_machine_round": per_round,
            "floats_per_machine": rounds * per_round,
        }

    if not (np.any(A) and np.any(B) and np.any(C)):
        info = 0
        counter.extra["reason"] = "exact"
        return D, stats()
    As, Bs, Cs, e_out = _scaled_blocks(A, B, C, parts)

    def machine_sum(updates):
        dC, dD = np.zeros_like(Cs), np.zeros_like(D)
        for dC_mu, dD_mu in updates:
            dC += dC_mu
            dD += dD_mu
        return dC, dD

    D, info, rounds = _column_rounds(
        As,
        Bs,
        Cs,
        machine_sum,
        machines=machines,
        rtol=rtol,
        maxiter=maxiter,
        eta=eta,
        gamma=gamma,
        counter=counter,
        callback=callback,
        e=e_out,
    )
    if info >= 0:
        D, info = _certify_split(D, e_out, info, rounds, A, B, C, rtol, counter)
    else:
        counter.extra["reason"] = "non-finite"
    return D, stats()


def _column_rounds(As, Bs, C, reduce, *, machines, rtol, maxiter, eta, gamma, counter, callback, e):
    """The rounds of distributed EAGLE, written once for the in-process simulation and the worker
    processes: each round this process updates the machines' blocks it holds (As, Bs, scaled by
    `_scaled_blocks`) with `_local_round`, reduce([(dC_μ, dD_μ), ...]) -> (ΣdC, ΣdD) sums the
    updates over all `machines`, and C and D take their mean. Stops when a round changes D by at
    most rtol · ‖D‖_F (info 0), at maxiter (info maxiter) or on a non-finite D (-2).
    callback(D_k · 2ᵉ) after every round. Returns (D, info, rounds), D in scaled units."""
    D = np.zeros((Bs[0].shape[0], C.shape[1]))
    rounds = 0
    for rounds in range(1, maxiter + 1):  # noqa: B007 - the count is returned
        e_step, g = counter.step(rounds - 1, eta, gamma)
        updates = []
        for mu in range(len(As)):
            dC_mu, dD_mu, As[mu], Bs[mu] = _local_round(As[mu], Bs[mu], C, e_step, g)
            updates.append((dC_mu, dD_mu))
        dC, dD = reduce(updates)
        C = C + dC / machines
        step = dD / machines
        D = D + step
        if not np.all(np.isfinite(D)):
            return D, NONFINITE, rounds
        if callback is not None:
            callback(_finish(D, e)[0].copy())
        if _norm(step) <= rtol * _norm(D):
            return D, 0, rounds
    return D, maxiter, rounds


def _certify_split(D, e_out, info, steps, A0, B0, C0, rtol, counter):
    """The column-split solvers' finish: D in prompt units and its info, 0 only when D agrees
    with the certified `complete` answer (`_centralized_check`)."""
    D, ok = _finished(D, e_out, counter)
    if not ok:
        return D, UNREPRESENTABLE
    ok, reason, extra = _centralized_check(A0, B0, C0, D, rtol)
    counter.extra.update(extra, reason=reason if ok or info == 0 else "maxiter")
    return D, 0 if ok else max(steps, 1)


def complete_sketched(
    A, B, C, r, rng, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Sketched EAGLE: a fresh random orthogonal n × r sketch S every step (Ã = A S, B̃ = B S).

    rng: a numpy.random.Generator. Stops after three steps in a row that change D by at most
    rtol · ‖D‖_F, or at maxiter. As for `complete_distributed`, info 0 is backed by the check
    against the certified centralized answer (a random sketch cannot carry the certificate):
    relative error at most stats["bound"]; otherwise info is the iterations used. Returns
    (D, stats) with iterations, info, reason, error_estimate, kappa, bound and the steps by
    source of (η, γ). callback(D_k) runs after every step.
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    r = _check_count("sketch size r", r, n)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {rng!r}"
        )
    D = np.zeros((B.shape[0], C.shape[1]))
    counter = _Counter()
    info, it = maxiter, 0
    if not (np.any(A) and np.any(B) and np.any(C)):
        counter.extra["reason"] = "exact"
        return D, counter.stats(0, 0)
    A0, B0, C0 = A, B, C
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    e_out = eb + ec - ea
    quiet = 0
    for it in range(1, maxiter + 1):
        S, _ = np.linalg.qr(rng.standard_normal((n, r)))
        As, Bs = A @ S, B @ S
        Ks = As.T @ As
        lam = float(np.linalg.eigvalsh(Ks)[-1])
        if not (lam > 0.0 and math.isfinite(lam)):
            continue
        e, g = counter.step(it - 1, eta, gamma)
        AtC = As.T @ C
        dD = g / lam * (Bs @ AtC)
        C = C - g / lam * (As @ AtC)
        A = A - e / lam * (As @ Ks @ S.T)
        B = B - e / lam * (Bs @ Ks @ S.T)
        # Keep A of order one: (A, B) scaled together by a power of two changes no update.
        shift = _exponent(A)
        A, B = np.ldexp(A, -shift), np.ldexp(B, -shift)
        D = D + dD
        if not np.all(np.isfinite(D)):
            info = NONFINITE
            break
        if callback is not None:
            callback(_finish(D, e_out)[0].copy())
        quiet = quiet + 1 if _norm(dD) <= rtol * _norm(D) else 0
        if quiet >= 3:  # a random sketch can miss the remaining error once; ask for three
            info = 0
            break
    if info >= 0:
        D, info = _certify_split(D, e_out, info, it, A0, B0, C0, rtol, counter)
    else:
        counter.extra["reason"] = "non-finite"
    return D, counter.stats(info, it) | {"iterations": it}
