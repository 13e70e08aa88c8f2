"""The reference EAGLE eagle-probe runs: the exported solver's, and its column-split variants.

`complete` and `lstsq` are `solver_template`'s, the file `eagle-probe extract` exports (here with
no recovered layers: the theory's η = 1/3, γ = 1 at every step), with their certificate behind
info 0 (their docstrings state the test and why it implies the bound). This module adds the
distributed and sketched solvers.

API
    complete(A, B, C, *, mode="normalized", rtol=1e-10, maxiter=None, check=True) -> D
        (return_info=True: (D, info, iterations); return_stats=True: (D, stats))
    lstsq(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None) -> (x, info)
        x = x0 + A⁺(b − A x0); pass stats={} to receive the counts below
    complete_distributed(A, B, C, machines, ...) -> (D, stats)
    complete_sketched(A, B, C, r, rng, ...) -> (D, stats)
    stats: info, iterations, reason, kappa (κ̂), error_estimate, bound, checks (certificate
    checks), recovered_steps, clipped_steps, theory_steps, given_steps (the source of each step's
    (η, γ)).

`info` (scipy style): 0 converged with a certificate — the relative error is at most
stats["bound"] = max(rtol, 100·κ̂·eps), κ̂ the condition number of A on its numerical range; > 0
stopped without the certificate, the iterations used (stats["reason"], one of REASONS); < 0: -1
A lost its scale (breakdown), -2 non-finite numbers appeared, -3 the answer is not representable
in float64 (with a RuntimeWarning). info is never 0 without the certificate, nor with a
non-finite answer. Blocks are scaled by powers of two (exact), so every scale float64 holds
works. η must lie in (0, 1) and γ in (0, 2); rtol in [0, 1); maxiter ≥ 1. Inputs are never
modified.
"""

import math

import numpy as np

from eagle_probe.solver_template import (
    BREAKDOWN,
    CERT_FLOOR,
    CERT_MARGIN,
    CLUSTER,
    DEFAULT_MAXITER,
    NONFINITE,
    REASONS,
    REFINE,
    STALL_STEP,
    THEORY_ETA,
    THEORY_GAMMA,
    UNREPRESENTABLE,
    StepCounter,
    check_blocks,
    check_options,
    complete,
    exponent,
    finish,
    finished,
    lstsq,
    recovered_layers,
    safe_norm,
    step_coefficients,
    top_eig,
)

__all__ = [
    "BREAKDOWN",
    "CERT_FLOOR",
    "CERT_MARGIN",
    "CLUSTER",
    "DEFAULT_MAXITER",
    "NONFINITE",
    "REASONS",
    "REFINE",
    "STALL_STEP",
    "THEORY_ETA",
    "THEORY_GAMMA",
    "UNREPRESENTABLE",
    "complete",
    "complete_distributed",
    "complete_sketched",
    "lstsq",
    "recovered_layers",
    "schedule",
]

# The distributed and sketched solvers are checked against the certified centralized answer
# with this much slack over its bound (their own iterations stop on a step test only).
CHECK_SLACK = 100.0


def spectral_norm(A):
    """‖A‖₂ without overflow or underflow."""
    return safe_norm(A, spectral=True)


def schedule(step, eta=None, gamma=None):
    """(η, γ) of `step`: the recovered per-layer values, then the theory's 1/3 and 1."""
    return step_coefficients(step, eta, gamma)[:2]


def _check_count(name, value, n):
    """An integer (Python or NumPy) in [1, n]."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= n:
        raise ValueError(f"{name} must be an integer in [1, {n}], got {value!r}")
    return int(value)


def _local_round(Am, Bm, C, e, g):
    """One machine's share of a distributed EAGLE round on its own columns Am, Bm:
    (dC, dD, Am, Bm), with ρ_μ = ‖A^μ‖₂⁻² from its local Gram matrix (zero updates when A^μ = 0).

    A^μ and B^μ come back divided together by ‖A^μ‖₂ (the updates are invariant under that joint
    scaling), so they stay of order one however many rounds run."""
    K = Am.T @ Am
    lam = float(np.linalg.eigvalsh(K)[-1]) if K.shape[0] <= 64 else top_eig(K)[0]
    if not (lam > 0.0 and math.isfinite(lam)):
        return np.zeros_like(C), np.zeros((Bm.shape[0], C.shape[1])), Am, Bm
    s = math.sqrt(lam)
    Am, Bm, K = Am / s, Bm / s, K / lam
    AtC = Am.T @ C
    return -g * (Am @ AtC), g * (Bm @ AtC), Am - e * (Am @ K), Bm - e * (Bm @ K)


def scaled_blocks(A, B, C, parts):
    """Exact power-of-two scaling for the column-split solvers: C by its own exponent, each
    machine's (A^μ, B^μ) jointly by the exponent of A^μ (B^μ A^μ⁺ is unchanged), B̂ by its own
    exponent first. Returns (As, Bs, Ĉ, exponent of D)."""
    ea, eb, ec = exponent(A), exponent(B), exponent(C)
    As, Bs = [], []
    for p in parts:
        Am, Bm = np.ldexp(A[:, p], -ea), np.ldexp(B[:, p], -eb)
        em = exponent(Am)
        As.append(np.ldexp(Am, -em))
        Bs.append(np.ldexp(Bm, -em))
    return As, Bs, np.ldexp(C, -ec), eb + ec - ea


def split_columns(n, machines):
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
    e = exponent(Dc) if np.any(Dc) else exponent(D)
    with np.errstate(over="ignore", under="ignore"):
        gap = safe_norm(np.ldexp(D, -e) - np.ldexp(Dc, -e))
    size = safe_norm(np.ldexp(Dc, -e))
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
    A, B, C = check_blocks(A, B, C)
    rtol, _, maxiter = check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    machines = _check_count("machines", machines, n)
    parts = split_columns(n, machines)
    D = np.zeros((B.shape[0], C.shape[1]))
    per_round = (A.shape[0] + B.shape[0]) * C.shape[1]
    counter = StepCounter()
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
    As, Bs, Cs, e_out = scaled_blocks(A, B, C, parts)

    def machine_sum(updates):
        dC, dD = np.zeros_like(Cs), np.zeros_like(D)
        for dC_mu, dD_mu in updates:
            dC += dC_mu
            dD += dD_mu
        return dC, dD

    D, info, rounds = column_rounds(
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


def column_rounds(As, Bs, C, reduce, *, machines, rtol, maxiter, eta, gamma, counter, callback, e):
    """The rounds of distributed EAGLE, written once for the in-process simulation and the worker
    processes: each round this process updates the machines' blocks it holds (As, Bs, scaled by
    `scaled_blocks`) with `_local_round`, reduce([(dC_μ, dD_μ), ...]) -> (ΣdC, ΣdD) sums the
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
            callback(finish(D, e)[0].copy())
        if safe_norm(step) <= rtol * safe_norm(D):
            return D, 0, rounds
    return D, maxiter, rounds


def _certify_split(D, e_out, info, steps, A0, B0, C0, rtol, counter):
    """The column-split solvers' finish: D in prompt units and its info, 0 only when D agrees
    with the certified `complete` answer (`_centralized_check`)."""
    D, ok = finished(D, e_out, counter)
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
    A, B, C = check_blocks(A, B, C)
    rtol, _, maxiter = check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    r = _check_count("sketch size r", r, n)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {rng!r}"
        )
    D = np.zeros((B.shape[0], C.shape[1]))
    counter = StepCounter()
    info, it = maxiter, 0
    if not (np.any(A) and np.any(B) and np.any(C)):
        counter.extra["reason"] = "exact"
        return D, counter.stats(0, 0)
    A0, B0, C0 = A, B, C
    ea, eb, ec = exponent(A), exponent(B), exponent(C)
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
        shift = exponent(A)
        A, B = np.ldexp(A, -shift), np.ldexp(B, -shift)
        D = D + dD
        if not np.all(np.isfinite(D)):
            info = NONFINITE
            break
        if callback is not None:
            callback(finish(D, e_out)[0].copy())
        quiet = quiet + 1 if safe_norm(dD) <= rtol * safe_norm(D) else 0
        if quiet >= 3:  # a random sketch can miss the remaining error once; ask for three
            info = 0
            break
    if info >= 0:
        D, info = _certify_split(D, e_out, info, it, A0, B0, C0, rtol, counter)
    else:
        counter.extra["reason"] = "non-finite"
    return D, counter.stats(info, it) | {"iterations": it}
