"""EAGLE in NumPy alone: Algorithm 1 of "Linear Transformers Implicitly Discover Unified
Numerical Algorithms" (NeurIPS 2025), with a certificate behind every info 0.

`eagle-probe extract --out DIR` writes this file to DIR/solver.py with a network's recovered
layers in its data block and a header that says whose (η, γ) each step takes; as shipped it holds
no layers. `python solver.py` solves a random problem and prints its stats. With
X = [[A, C], [B, D]], rank X = rank A, D = B A⁺ C; one EAGLE step, ρ = ‖A‖₂⁻² recomputed each step:

    A ← A − ηρ A AᵀA      B ← B − ηρ B AᵀA      C ← C − γρ A Aᵀ C      D ← D + γρ B Aᵀ C

complete(A, B, C): any size and scale (blocks scaled by powers of two, exactly); step l takes
    `step_rule(LAYERS[l])`: the network's (η_l, γ_l) where a step contracts, clipped to
    η ≤ ETA_MAX, γ ≤ GAMMA_MAX where it overshoots, the theory's η = 1/3, γ = 1 otherwise and
    after the trained depth; it stops with the certificate below.
complete(A, B, C, mode="faithful"): the network's layers as fitted (its prompt scale NORMALIZE,
    then a_l, c_l per layer): what the network computes, not a solved system; info is the depth.
complete(A, B, C, mode="algorithm1"): Algorithm 1 as the paper writes it, with the network's two
    global constants η, γ (ALGORITHM1, fitted to its activations): ρ = ‖Ã‖₂⁻² recomputed every
    step, per machine with C and D averaged (MACHINES > 1), on the sketches PROJECTORS
    (constrained); the network's depth of steps, no certificate; info is the depth.
lstsq(A, b, x0=None): min ‖A x − b‖₂, x = x0 + A⁺(b − A x0), by the same iteration and certificate.
certify(A, B, C, D): an independent check of any D against an SVD of A.

info (scipy style): 0 certified: the relative error is at most stats["bound"] =
max(rtol, 100·κ̂·eps), κ̂ = σ_1/σ_r on A's numerical range (or "exact" for a zero input, "atol" for
lstsq's residual test); > 0 stopped without the certificate after that many iterations, and
stats["reason"] says why (REASONS); check=False skips the certificate: info is then the iterations,
reason "unchecked". < 0: -1 A lost its scale, -2 non-finite numbers, -3 the answer is not
representable in float64. Inputs are never modified.
"""

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

Array = np.ndarray
Blocks = tuple[Array, Array, Array, Array]
Stats = dict[str, Any]
Num = float | None

THEORY_ETA, THEORY_GAMMA = 1.0 / 3.0, 1.0
# A network's η_l, γ_l drive a step as they are up to these, and are clipped to them above: a step
# contracts for η < 1, γ < 2 (A's top singular value maps to (1 − η)σ, C's part along it to
# (1 − γ)c), but above η = 1/3 it reorders A's singular values, and the larger η the more the
# rounding in A's numerical null space grows against its range: with centralized.pt's steps
# (η up to 1.41) clipped at 0.95, 106 of 200 of its own rank-10 prompts ended "unresolved"; at
# 0.8, 3; at 0.6 and below, none (0.6: 16 iterations, the theory's 1/3: 19).
ETA_MAX, GAMMA_MAX = 0.6, 1.95
DEFAULT_MAXITER = 500
BREAKDOWN, NONFINITE, UNREPRESENTABLE = -1, -2, -3
EPS = float(np.finfo(np.float64).eps)
TINY = float(np.finfo(np.float64).tiny)
# The certificate: the bound is max(rtol, CERT_FLOOR · κ̂ · eps) (float64 cannot do better than
# κ̂ · eps); an estimate certifies at bound / CERT_MARGIN (it is rounded too); the range eigenvalues
# of K = A_lᵀA_l / λ_max must be ≥ 1 − CLUSTER; REFINE rounds of refinement per check; a step
# ≤ STALL_STEP (relative) that did not halve is a candidate stop besides a step ≤ rtol.
CERT_FLOOR, CERT_MARGIN, CLUSTER, REFINE, STALL_STEP = 100.0, 4.0, 0.5, 3, 1e-4

# stats["reason"]: info 0 only with "certified", "exact" or "atol"
REASONS = {
    "certified": "converged: the error estimate is within the bound (info 0)",
    "exact": "the answer is exact (A, B, C or the residual is zero; info 0)",
    "atol": "‖b − A x‖ ≤ atol, the residual test asked for (info 0)",
    "unchecked": "check=False: the step test was met and the certificate not run",
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


def complete(
    A: Any,
    B: Any,
    C: Any,
    *,
    mode: str = "normalized",
    rtol: float = 1e-10,
    maxiter: int | None = None,
    eta: Num = None,
    gamma: Num = None,
    check: bool = True,
    return_info: bool = False,
    return_stats: bool = False,
) -> Any:
    """D ≈ B A⁺ C from A (d, n), B (d', n), C (d, n'): D; (D, info, iterations) with return_info;
    (D, stats) with return_stats: info, iterations, reason, kappa (κ̂), error_estimate, bound,
    checks and the steps by the source of their (η, γ) (recovered_steps, clipped_steps,
    theory_steps, given_steps; eta=, gamma= replace the schedule).

    Stopping rule (normalized): candidate stops are a step that changes D by at most rtol·‖D‖_F,
    a small step (≤ STALL_STEP) that no longer shrinks, the resolution limit and maxiter. At each,
    K = A_lᵀA_l must have its rank(A) largest eigenvalues (numpy's lstsq cutoff
    max(d, n)·eps·‖A‖₂) in [(1 − CLUSTER)λ_max, λ_max] and its other eigenvectors null for A by
    that cutoff; the correction B_l K⁺ A_lᵀ C_l (‖B A⁺ C_l‖ in exact arithmetic: the error of D,
    C_l the C block) is applied up to REFINE times, and its size plus twice the current increment
    from A's null space must be at most bound / CERT_MARGIN of ‖D‖. info 0 then states
    ‖D − B A⁺ C‖ ≲ bound · ‖D‖ for prompts with rank X = rank A."""
    A, B, C = check_blocks(A, B, C)
    rtol, _, maxiter = check_options(rtol, 0.0, maxiter, eta, gamma)
    counter = StepCounter()

    def result(D: Array, info: int, iterations: int) -> Any:
        if return_stats:
            return D, counter.stats(info, iterations)
        return (D, info, iterations) if return_info else D

    if mode == "faithful":
        D, info, iterations, counter.extra["reason"] = _faithful(A, B, C)
        return result(D, info, iterations)
    if mode == "algorithm1":
        D, info, iterations, counter.extra["reason"] = _algorithm1(A, B, C)
        return result(D, info, iterations)
    if mode != "normalized":
        raise ValueError(f"unknown mode {mode!r}; choose from algorithm1, faithful, normalized")
    D = np.zeros((B.shape[0], C.shape[1]))
    if not (np.any(A) and np.any(B) and np.any(C)):
        counter.extra["reason"] = "exact"
        return result(D, 0, 0)
    # A = 2^ea Â, B = 2^eb B̂, C = 2^ec Ĉ, so D = 2^(eb+ec-ea) B̂ Â⁺ Ĉ
    ea, eb, ec = exponent(A), exponent(B), exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)

    def checker(Al: Array, Bl: Array, Cl: Array, D: Array, e: float, sv: tuple) -> tuple:
        return _complete_check(A, Al, Bl, Cl, D, sv, rtol, e)

    loop = _certified(A, B, C, rtol, maxiter, eta, gamma, counter, checker if check else None)
    D, info, counter.extra["reason"], it = loop
    if info >= 0:
        D, ok = finished(D, eb + ec - ea, counter)
        info = info if ok else UNREPRESENTABLE
    return result(D, info, it)


def lstsq(
    A: Any,
    b: Any,
    x0: Any = None,
    *,
    rtol: float = 1e-10,
    atol: float = 0.0,
    maxiter: int | None = None,
    callback: Callable | None = None,
    eta: Num = None,
    gamma: Num = None,
    check: bool = True,
    stats: Stats | None = None,
) -> tuple[Array, int]:
    """min ‖A x − b‖₂ by EAGLE: (x, info), x = x0 + A⁺(b − A x0) (x0's null-space part is kept;
    A⁺ with numpy's cutoff max(m, n)·eps·σ_1). A (m, n), b (m,) or (m, k).

    The prompt is [[A, r0], [I_n, 0]], r0 = b − A x0: the D block is A⁺ r0 and the B block
    M_l = m_l(ÃᵀÃ) with A_l = Ã M_l. info 0 certifies ‖x − x*‖₂ ≤ bound · ‖x‖₂,
    bound = max(rtol, 100·κ̂·eps), checked at the candidate stops of `complete`:
      1. G = Ã M_l recomputed; K = GᵀG must have its r largest eigenvalues clustered as in
         `complete` (a smaller one is a singular value still to resolve: the checks skip the
         steps it needs);
      2. the numerical null space Q = orth(M_l W_0) (W_0 K's other eigenvectors) must be null
         for Ã by twice the cutoff, and x is projected off it; the rounding of M_l and G,
         eps ‖Ã‖ ‖M_l‖ over G's smallest cluster singular value, must be within the bound;
      3. with r = b − A x recomputed, d = P M_l G⁺ r is exactly the range error A⁺r of x:
         x ← x + d up to REFINE times, and ‖d‖ + leak + the rounding of r0 must be at most
         bound / CERT_MARGIN of ‖x‖.
    atol > 0: ‖b − A x_k‖ ≤ atol also stops with info 0 (a residual test only). callback(x_k)
    once per iteration. A dict passed as stats receives what `complete` reports."""
    A = check_matrix("A", A)
    b_in = np.asarray(b)
    vector = b_in.ndim == 1
    b = check_matrix("b", b_in.reshape(-1, 1) if vector else b_in)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    rtol, atol, maxiter = check_options(rtol, atol, maxiter, eta, gamma, callback)
    n = A.shape[1]
    if x0 is not None and vector and np.shape(x0) != (n,):
        raise ValueError(f"x0 has shape {np.shape(x0)}; a vector b needs an x0 of shape {(n,)}")
    if x0 is None:
        x0 = np.zeros((n, b.shape[1]))
    else:
        x0 = check_matrix("x0", np.asarray(x0).reshape(-1, 1) if vector else x0)
    if x0.shape != (n, b.shape[1]):
        raise ValueError(f"x0 has shape {x0.shape}, expected {(n, b.shape[1])}")

    def shape(v: Array) -> Array:
        return v[:, 0] if vector else v

    counter = StepCounter()
    options = (rtol, atol, maxiter, callback, eta, gamma, check)
    x, info, it = _lstsq(A, b, x0, options, counter, shape)
    if stats is not None:
        stats.update(counter.stats(info, it))
    return shape(x), info


def _lstsq(A: Array, b: Array, x0: Array, options: tuple, counter: "StepCounter", shape: Callable):
    """`lstsq` on checked arrays: (x, info, iterations)."""
    rtol, atol, maxiter, callback, eta, gamma, check = options
    ea = exponent(A)
    if ea == 0 and not np.any(A):
        counter.extra["reason"] = "exact"
        return x0.copy(), 0, 0
    At = np.ldexp(A, -ea)  # Ã = 2^-ea A, max|Ã| in [0.5, 1)
    # the residual in units of 2^k: r̃0 = 2^-k (b − A x0), computed without overflow
    k = max(exponent(b), ea + exponent(x0)) if np.any(x0) else exponent(b)
    with np.errstate(under="ignore"):
        r = np.ldexp(b, -k) - At @ np.ldexp(x0, ea - k)
    kr = exponent(r)
    if not np.any(r):
        counter.extra["reason"] = "exact"
        return x0.copy(), 0, 0
    r, k = np.ldexp(r, -kr), k + kr
    e_out = k - ea  # x = x0 + 2^e_out ỹ with ỹ ≈ Ã⁺ r̃0
    with np.errstate(under="ignore"):
        bt, xs = np.ldexp(b, -k), np.ldexp(x0, ea - k)  # b and x0 in the units of ỹ
    tol_abs = math.ldexp(atol, -k) if atol > 0 else 0.0

    def iterate(y: Array) -> Array:
        with np.errstate(over="ignore", under="ignore"):
            return x0 + np.ldexp(y, e_out)

    def checker(Al: Array, M: Array, C: Array, y: Array, e: float, sv: tuple) -> tuple:
        s, rank = sv[0], sv[1]
        r0_err = EPS * (safe_norm(bt) + float(s[0]) * safe_norm(xs)) / float(s[rank - 1])
        return _lstsq_check(At, M, y, r, xs, sv, rtol, e, r0_err if np.any(x0) else 0.0), C

    def after(y: Array) -> bool:
        if callback is not None:
            callback(shape(iterate(y)))
        return tol_abs > 0 and safe_norm(r - At @ y) <= tol_abs

    # A_l = Ã m_l(ÃᵀÃ), B_l = M_l = m_l(ÃᵀÃ) from B = I; the D block is ỹ
    loop = _certified(
        At.copy(), np.eye(A.shape[1]), r.copy(), rtol, maxiter, eta, gamma, counter,
        checker if check else None, after=after, watch_a=True,
    )  # fmt: skip
    y, info, counter.extra["reason"], it = loop
    x = iterate(y)
    if info < 0:
        return x, info, it
    if not np.all(np.isfinite(x)) or (np.any(y) and np.max(np.abs(x)) < TINY):
        _warn("the least-squares solution is not representable in float64 at this scale")
        counter.extra["reason"] = "unrepresentable"
        return x, UNREPRESENTABLE, it
    return x, info, it


# --- the network's layers, as they are ------------------------------------------------------
def _faithful(A: Array, B: Array, C: Array) -> tuple[Array, int, int, str]:
    """The network's layers as fitted: (D, info, layers, reason); info NONFINITE on overflow.
    On a size other than the training one, one RuntimeWarning says that D is the network's
    output there, not a solved system."""
    if not LAYERS:
        raise ValueError("this solver carries no recovered layers; use mode='normalized'")
    n = A.shape[1]
    if (REGIME == "distributed" and n % MACHINES) or (
        REGIME == "constrained" and PROJECTORS is not None and len(PROJECTORS[0]) != n
    ):
        raise ValueError(f"the faithful {REGIME} solver takes the training size, not n = {n}")
    sizes = PROVENANCE.get("sizes") or {}
    trained = tuple(sizes.get(k) for k in ("d", "n", "d_prime", "n_prime"))
    given = (A.shape[0], n, B.shape[0], C.shape[1])
    if None not in trained and trained != given:
        _warn(
            f"faithful mode runs the network's {len(LAYERS)} layers on a {given[0]}×{n} A; it was "
            f"trained on {trained[0]}×{trained[1]}: D is the network's output at this size, not "
            "a solved system (mode='normalized' certifies its answer)"
        )
    spectral = NORMALIZE == "spectral"  # the prompt scale: ‖A‖₂, else ‖A‖_F, or 1 for "none"
    if NORMALIZE == "none":
        cols = s = 1.0
    elif LOCAL_SCALE:  # each machine its own scale on its A, B columns; C and D in prompt units
        block = n // MACHINES
        machines = [A[:, m * block : (m + 1) * block] for m in range(MACHINES)]
        cols, s = np.repeat([safe_norm(Am, spectral) for Am in machines], block), 1.0
    else:
        cols = s = safe_norm(A, spectral)
    D = np.zeros((B.shape[0], C.shape[1]))
    if not np.all(cols > 0.0):
        return D, len(LAYERS), len(LAYERS), "fixed depth"
    A, B, C = A / cols, B / cols, C / s
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, coef in enumerate(LAYERS):
            a, c = coef["a_step"], coef["c_step"]
            K, AtC = _layer_products(A, C, layer)
            A, B, C, D = A - a * (A @ K), B - a * (B @ K), C - c * (A @ AtC), D + c * (B @ AtC)
        D = D * s
    if not np.all(np.isfinite(D)):
        _warn("the faithful solver overflowed (the network's constants at this prompt scale)")
        return D, NONFINITE, len(LAYERS), "non-finite"
    return D, len(LAYERS), len(LAYERS), "fixed depth"


# --- Algorithm 1 as the paper writes it, with the network's two constants --------------------
def _algorithm1(A: Array, B: Array, C: Array) -> tuple[Array, int, int, str]:
    """Algorithm 1 with ALGORITHM1's global η, γ for its `steps`: (D, info, steps, reason); info
    NONFINITE on overflow. The paper's outer loop: "for μ = 1..M in parallel: (A^μ_{ℓ+1},
    B^μ_{ℓ+1}, C′_μ, D′_μ) ← UPDATE(A^μ_ℓ, B^μ_ℓ, C_ℓ, D_ℓ); C_{ℓ+1} ← (1/M) Σ_μ C′_μ,
    D_{ℓ+1} ← (1/M) Σ_μ D′_μ", machine μ owning the μ-th block of n / M columns of A and B. Its
    iterates are homogeneous in each block, so A, B and C are scaled by powers of two first."""
    if not ALGORITHM1:
        raise ValueError(
            "this solver carries no fitted Algorithm 1 constants; use mode='normalized'"
        )
    eta, gamma = float(ALGORITHM1["eta"]), float(ALGORITHM1["gamma"])
    steps, form = int(ALGORITHM1["steps"]), ALGORITHM1["form"]
    machines = int(ALGORITHM1["machines"]) if form == "distributed" else 1
    n = A.shape[1]
    if n % machines:
        raise ValueError(f"Algorithm 1 here runs on {machines} machines: n = {n} must divide by it")
    sketches: list[Array | None] = [None] * steps
    if form == "constrained":
        if PROJECTORS is None or len(PROJECTORS) < steps or len(PROJECTORS[0]) != n:
            raise ValueError(f"Algorithm 1 on the network's sketches takes their size, not n = {n}")
        sketches = [np.asarray(P, dtype=np.float64) for P in PROJECTORS[:steps]]
    ea, eb, ec = exponent(A), exponent(B), exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    D = np.zeros((B.shape[0], C.shape[1]))
    block = n // machines
    with np.errstate(over="ignore", invalid="ignore"):
        for P in sketches:
            A, B = A.copy(), B.copy()
            C_sum, D_sum = np.zeros_like(C), np.zeros_like(D)
            for mu in range(machines):
                cols = slice(mu * block, (mu + 1) * block)
                A[:, cols], B[:, cols], C_mu, D_mu = _update(
                    A[:, cols], B[:, cols], C, D, eta, gamma, P
                )
                C_sum, D_sum = C_sum + C_mu, D_sum + D_mu
            C, D = C_sum / machines, D_sum / machines
    if not np.all(np.isfinite(D)):
        _warn("Algorithm 1 overflowed with the network's constants on this prompt")
        return D, NONFINITE, steps, "non-finite"
    D, ok = finish(D, eb + ec - ea)
    if not ok:
        _warn("D is not representable in float64 at this scale")
        return D, UNREPRESENTABLE, steps, "unrepresentable"
    return D, steps, steps, "fixed depth"


def _update(A: Array, B: Array, C: Array, D: Array, eta: float, gamma: float, P: Array | None):
    """UPDATE(A, B, C, D) of Algorithm 1, the sketch S given by its projector P = S Sᵀ (None:
    S = I): "Ã ← AS, B̃ ← BS, ρ ← ‖Ã‖₂⁻², A′ ← A − ηρ Ã ÃᵀÃ Sᵀ, B′ ← B − ηρ B̃ ÃᵀÃ Sᵀ,
    C′ ← C − γρ Ã Ãᵀ C, D′ ← D + γρ B̃ Ãᵀ C"; with Q = A P = Ã Sᵀ and R = B P = B̃ Sᵀ these are
    Q (QᵀQ), R (QᵀQ), Q (QᵀC) and R (QᵀC), and ‖Ã‖₂ = ‖Q‖₂."""
    Q, R = (A, B) if P is None else (A @ P, B @ P)
    norm = safe_norm(Q, spectral=True)
    rho = 1.0 / norm**2 if norm > 0.0 else 0.0
    K, QtC = Q.T @ Q, Q.T @ C
    return (
        A - eta * rho * (Q @ K),
        B - eta * rho * (R @ K),
        C - gamma * rho * (Q @ QtC),
        D + gamma * rho * (R @ QtC),
    )


def _layer_products(A: Array, C: Array, layer: int) -> tuple[Array, Array]:
    """(AᵀA, AᵀC) as a layer sees them: AᵀA within each machine's columns (distributed), both
    within the layer's sketch P (constrained: P AᵀA P and P AᵀC)."""
    K, Q = A.T @ A, A
    if REGIME == "distributed":
        ids = np.arange(A.shape[1]) // (A.shape[1] // MACHINES)
        K = K * (ids[:, None] == ids[None, :])
    elif REGIME == "constrained" and PROJECTORS is not None:
        P = np.asarray(PROJECTORS[layer])
        K, Q = P @ K @ P, A @ P
    return K, Q.T @ C


# --- whose steps: the schedule ----------------------------------------------------------------
def step_rule(layer: dict | None, regime: str = "centralized") -> tuple[float, float, str]:
    """(η, γ, source) of a step from a recovered layer's η, γ (None: past the trained depth).

    "recovered": the network's own, 0 < η ≤ ETA_MAX and 0 < γ ≤ GAMMA_MAX;
    "clipped": both positive but one overshoots: η → min(η, ETA_MAX), γ → min(γ, GAMMA_MAX);
    "theory": η = 1/3, γ = 1 — past the trained depth, where the network's η or γ is not a
    positive number (a step uphill or none), or where its steps belong to another iteration than
    this one (regime other than "centralized": per machine, or on a sketch)."""
    e, g = (layer or {}).get("eta"), (layer or {}).get("gamma")
    real = all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in (e, g))
    if regime != "centralized" or not real:
        return THEORY_ETA, THEORY_GAMMA, "theory"
    if e <= ETA_MAX and g <= GAMMA_MAX:
        return float(e), float(g), "recovered"
    return min(float(e), ETA_MAX), min(float(g), GAMMA_MAX), "clipped"


def step_coefficients(step: int, eta: Num, gamma: Num) -> tuple[float, float, str]:
    """(η, γ, source) of `step`: `step_rule` of LAYERS[step]; eta=, gamma= given to the solver
    replace them ("given" when both are)."""
    e, g, source = step_rule(LAYERS[step] if step < len(LAYERS) else None, REGIME)
    if eta is not None and gamma is not None:
        return float(eta), float(gamma), "given"
    return (e if eta is None else eta), (g if gamma is None else gamma), source


def recovered_layers() -> list[int]:
    """The layers (0-based) whose own (η, γ) drive the step of that index, unclipped."""
    return [i for i, lay in enumerate(LAYERS) if step_rule(lay, REGIME)[2] == "recovered"]


class StepCounter:
    """A call's steps by the source of their (η, γ), and what else it reports."""

    def __init__(self) -> None:
        self.counts = {"recovered": 0, "clipped": 0, "theory": 0, "given": 0}
        self.extra: Stats = {}
        self.last = "theory"

    def step(self, step: int, eta: Num, gamma: Num) -> tuple[float, float]:
        e, g, self.last = step_coefficients(step, eta, gamma)
        self.counts[self.last] += 1
        return e, g

    def untake(self) -> None:
        """The last step was not taken after all."""
        self.counts[self.last] -= 1

    def stats(self, info: int, iterations: int) -> Stats:
        counts = {f"{source}_steps": count for source, count in self.counts.items()}
        return {"info": info, "iterations": iterations} | counts | self.extra


# --- the iteration and its certificate ------------------------------------------------------
def _certified(A, B, C, rtol, maxiter, eta, gamma, counter, check, *, after=None, watch_a=False):
    """The normalized EAGLE iteration on scaled blocks with its certificate, the one loop of
    `complete` (the D block) and `lstsq` (A = Ã, B = I, C = r̃0: the D block is ỹ ≈ Ã⁺r̃0):
    (value, info, reason, iterations).

    check(A_l, B_l, C_l, D, η, sv) -> (_Check, C_l) is the certificate at a candidate stop (sv:
    `singular_values` of the starting A, computed at the first check); None: stop at the first
    step ≤ rtol without it ("unchecked"). after(D) -> True, run after every finite step, stops
    with info 0 ("atol"); watch_a: a non-finite A_l stops too."""
    A0 = A
    D = np.zeros((B.shape[0], C.shape[1]))
    v, it, e = None, 0, THEORY_ETA
    growth, limit = 0.0, _resolution_limit(A.shape)
    sv, next_check, checks, prev_step = None, 0, 0, math.inf
    checked = -1  # the iteration of the last check
    last = _Check("unconverged", D)

    def look(C):
        nonlocal sv, checks
        sv = singular_values(A0) if sv is None else sv
        checks += 1
        return check(A, B, C, D, e, sv)

    reason, bound = "maxiter", 0.0
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            return D, BREAKDOWN, "breakdown", it
        A, B, K, v, top = normalized
        if e > THEORY_ETA:
            # Above η = 1/3 the step σ ↦ σ(1 − ησ²) is not monotone on [0, 1]: the top lands
            # above 1 − η, and a tiny singular value grew by the measured 1/top (with the power
            # iteration's 2% headroom taken off), not by the bound 1/(1 − η) counted before it.
            growth += min(0.0, math.log(1.02 / top) - bound) if it > 1 else 0.0
        e, g = counter.step(it - 1, eta, gamma)
        bound = _growth(e)
        growth += bound
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
        rel_step = safe_norm(dD) / max(safe_norm(D), TINY)
        if check is None:
            if rel_step <= rtol:
                return D, it, "unchecked", it
            continue
        stop = candidate_stop(rel_step, prev_step, rtol)
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
    if check is None:
        return D, max(it, 1), reason, it
    if it > 0 and checked != it:
        last, C = look(C)  # the iteration ends here: a last look for the certificate
    _outcome(counter, last, checks)
    if last.status == "certified":
        return last.value, 0, "certified", it
    value = last.value if last.status != "unconverged" else D
    return value, max(it, 1), _CHECK_REASON.get(last.status) or reason, it


def _normalized_gram(A: Array, B: Array, v: Array | None) -> tuple | None:
    """(A/‖A‖₂, B/‖A‖₂, their AᵀA, v, ‖A‖₂): ρ = 1 (v warm-starts the power iteration; ‖A‖₂ with
    its 2% headroom), or None when ‖A‖₂ is zero or not finite."""
    K = A.T @ A
    lam, v = top_eig(K, v)
    if not math.isfinite(lam) or lam <= 0.0:
        return None
    s = math.sqrt(lam)
    return A / s, B / s, K / lam, v, s


def _eagle_update(A: Array, B: Array, C: Array, K: Array, e: float, g: float) -> Blocks:
    """One EAGLE step with ρ = 1 (K = AᵀA): the new A, B, C and the increment of D."""
    AtC = A.T @ C
    return A - e * (A @ K), B - e * (B @ K), C - g * (A @ AtC), g * (B @ AtC)


def candidate_stop(rel_step, prev_step, rtol):
    """A candidate stop: a step of at most rtol, or a small step that did not halve (the
    iteration has reached its rounding floor, or a singular value is still far from resolved).
    Floats or tensors of them (a torch batch): | and &, not `or`, so both work."""
    return (rel_step <= rtol) | ((rel_step <= STALL_STEP) & (rel_step > 0.5 * prev_step))


def _outcome(counter: StepCounter, check: "_Check", checks: int) -> None:
    counter.extra.update(
        kappa=check.kappa, error_estimate=check.estimate, bound=check.bound, checks=checks
    )


class _Check:
    """What a certificate check found: status ("certified", "unconverged", "inaccurate",
    "unresolved", "ill-conditioned"), the (refined) iterate, the relative error estimate,
    κ̂, the bound and the steps to skip before the next check."""

    def __init__(self, status, value=None, estimate=math.inf, kappa=math.nan, bound=math.nan):
        self.status, self.value, self.estimate = status, value, estimate
        self.kappa, self.bound, self.skip = kappa, bound, 0


_CHECK_REASON = {
    "inaccurate": "stagnated",
    "unresolved": "unresolved",
    "ill-conditioned": "ill-conditioned",
    "unconverged": None,
}


def singular_values(A: Array) -> tuple[Array, int, float]:
    """(σ, rank, cutoff): A's singular values, the numerical rank with numpy.linalg.lstsq's
    cutoff max(shape) · eps · σ_1, and the cutoff."""
    s = np.linalg.svd(A, compute_uv=False)
    cutoff = max(A.shape) * EPS * float(s[0])
    return s, int(np.sum(s > cutoff)), cutoff


def _steps_needed(tau2: float, eta: float) -> int:
    """Steps before a singular value of A_l at τ (relative to the top, τ² = tau2) joins the
    cluster: while small it grows by 1/(1 − η) a step relative to the top."""
    tau = math.sqrt(min(max(tau2, EPS * EPS), 1.0))
    return max(1, int(math.log(1.0 / tau) / -math.log(1.0 - eta)) - 1)


def _range_inverse(K: Array, rank: int, n: int, eta: float) -> tuple:
    """Spectral test of K (n × n, symmetric PSD) at numerical rank `rank`.

    ("unconverged", steps) when K's `rank` largest eigenvalues are not clustered
    (≥ (1 − CLUSTER) λ_max), else ("ok", solve, W_null, delta, low) with solve(F) = K⁺F on the
    cluster's span, W_null an orthonormal basis of the rest (None when rank = n) and low a lower
    bound of the cluster's eigenvalues. Full rank avoids an eigen-decomposition: ‖I − K/μ‖_F ≤ δ
    (μ = trace/n) puts every eigenvalue of K/μ in [1 − δ, 1 + δ], and K⁻¹ is then a Neumann
    series in I − K/μ."""
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


def _null_leak(At: Array, Q: Array, s: Array, rank: int) -> tuple[float, float]:
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
    # M and G = fl(Ã M) carry rounding of about eps ‖Ã‖‖M‖; against G's smallest singular value
    # on the cluster it must be within the bound, or the estimate is rounding. On the range ‖M‖
    # is about 1/σ_r (κ̂ · eps, far inside the bound), but a numerical null space makes M grow
    # there by 1/(1 − η) a step: a rank-2 3 × 3 problem at κ̂ = 6.5e9, scaled by 1e-100, reached
    # a rounding of 0.13, and its estimate said 1.2e-6 of an error of 2.3e-2.
    top_m = top_eig(M)[0]  # ‖M‖₂: M = m_l(ÃᵀÃ) is symmetric positive definite
    rounding = EPS * float(s[0]) * top_m / math.sqrt(max(low, TINY))
    leak, Q = 0.0, None
    if W0 is not None:
        # x-space null directions are M W0 (Ã M W0 ≈ 0); they must be null by lstsq's cutoff
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
        # correction to y and, by its norm, the error estimate
        d = project(M @ solve(G.T @ (r0 - At @ y)))
        size = max(safe_norm(xs + y), TINY)
        estimate = (safe_norm(d) + leak * safe_norm(y) + r0_err) / size
        if estimate < best.estimate:
            best = _Check("inaccurate", y, estimate, kappa, bound)
        if estimate * CERT_MARGIN <= bound:
            best.status = "certified"
            return best
        y = y + d
    return best


def _complete_check(A0, Al, Bl, C, D, sv, rtol, eta):
    """The certificate of `complete` at a candidate stop: the spectral test on K = A_lᵀA_l, the
    error estimate ‖B_l K⁺ A_lᵀ C_l‖ (= ‖B Ã⁺ C_l‖ in exact arithmetic) plus an estimate of what
    A's numerical null space has put into D. Returns (check, C)."""
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
        # the null-space increments grow geometrically (by 1/(1 − η)² a step), so what D holds
        # from A's null space is about twice the current one
        null_part = 2.0 * safe_norm((Bl @ W0) @ (W0.T @ (Al.T @ C)))
    best = _Check("inaccurate", D, kappa=kappa, bound=bound)
    for _ in range(REFINE):
        X = solve(Al.T @ C)
        dD = Bl @ X
        size = max(safe_norm(D), TINY)
        estimate = (safe_norm(dD) + null_part) / size + leak
        if estimate < best.estimate:
            best = _Check("inaccurate", D, estimate, kappa, bound)
        if estimate * CERT_MARGIN <= bound:
            best.status = "certified"
            return best, C
        D, C = D + dD, C - Al @ X
    return best, C


# --- numbers at any scale ------------------------------------------------------------------
def exponent(M: Array) -> int:
    """e with max|M| · 2⁻ᵉ in [0.5, 1) (0 for a zero M): scaling by 2⁻ᵉ is exact."""
    top = float(np.max(np.abs(M))) if np.size(M) else 0.0
    return math.frexp(top)[1] if top > 0.0 and math.isfinite(top) else 0


def safe_norm(M: Array, spectral: bool = False) -> float:
    """‖M‖_F, or ‖M‖₂ (exact, from the smaller Gram matrix) when spectral, without overflow or
    underflow: M is scaled by a power of two first."""
    e = exponent(M)
    M = np.ldexp(M, -e)
    if not spectral:
        return math.ldexp(float(np.linalg.norm(M)), e)
    G = M @ M.T if M.shape[0] <= M.shape[1] else M.T @ M
    return math.ldexp(math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0)), e)


def top_eig(K: Array, v: Array | None = None, iters: int = 30) -> tuple[float, Array]:
    """Largest eigenvalue of the symmetric PSD K by power iteration (v: warm start), with 2%
    headroom: a Rayleigh quotient underestimates, and ηρλ_max must stay below η."""
    n, lam = K.shape[0], 0.0
    if v is None:
        v = np.ones(n) / math.sqrt(n) + np.linspace(0.0, 1e-3, n)
    for _ in range(iters):
        w = K @ v
        norm = np.linalg.norm(w)
        if norm == 0.0:
            return 0.0, v
        previous, lam = lam, float(v @ w) / float(v @ v)
        v = w / norm
        if abs(lam - previous) <= 1e-3 * lam:
            break
    return 1.02 * max(lam, float(v @ (K @ v))), v


def finish(D: Array, e: int) -> tuple[Array, bool]:
    """(D · 2ᵉ, representable): finite and, unless zero, at least the smallest normal number."""
    finite = bool(np.all(np.isfinite(D)))
    if not (finite and np.any(D)):
        return D, finite
    top = exponent(D) + e
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(D, e)
    return out, np.finfo(np.float64).minexp + 1 <= top <= np.finfo(np.float64).maxexp


def finished(D: Array, e: int, counter: StepCounter) -> tuple[Array, bool]:
    """(D · 2ᵉ, representable), with a RuntimeWarning (at the solver's caller) and reason
    "unrepresentable" when float64 cannot hold it."""
    D, ok = finish(D, e)
    if not ok:
        _warn("D = B A⁺ C is not representable in float64 at this scale")
        counter.extra["reason"] = "unrepresentable"
    return D, ok


def _resolution_limit(shape: tuple[int, ...]) -> float:
    """log of 1 / rcond with rcond = max(shape) · eps (numpy.linalg.lstsq's default cutoff)."""
    return -math.log(max(shape) * EPS)


def _growth(eta: float) -> float:
    """log of the factor 1/(1 − η) by which a step raises a tiny singular value against the top."""
    return -math.log(max(1.0 - eta, 1e-12)) if eta < 1.0 else math.inf


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=4)


# --- input checks ---------------------------------------------------------------------------
def check_matrix(name: str, M: Any, ndim: int = 2) -> Array:
    """A float64 copy of M: an `ndim`-d, non-empty, finite, real array (not masked)."""
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


def check_blocks(A: Any, B: Any, C: Any) -> tuple[Array, Array, Array]:
    A, B, C = check_matrix("A", A), check_matrix("B", B), check_matrix("C", C)
    if B.shape[1] != A.shape[1]:
        raise ValueError(f"B has {B.shape[1]} columns but A has {A.shape[1]}")
    if C.shape[0] != A.shape[0]:
        raise ValueError(f"C has {C.shape[0]} rows but A has {A.shape[0]}")
    return A, B, C


def _check_number(name: str, value: Any, low: float, high: float, closed: bool = False) -> float:
    """A real number in (low, high), or [low, high) when closed."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    x = float(value)
    if not (math.isfinite(x) and (low <= x if closed else low < x) and x < high):
        raise ValueError(
            f"{name} must lie in {'[' if closed else '('}{low:g}, {high:g}), got {value!r}"
        )
    return x


def check_options(rtol, atol=0.0, maxiter=None, eta=None, gamma=None, callback=None):
    """The shared keyword arguments, validated: (rtol, atol, maxiter). rtol in [0, 1), atol ≥ 0,
    maxiter ≥ 1, η in (0, 1) and γ in (0, 2) (the ranges where one step contracts)."""
    rtol = _check_number("rtol", rtol, 0.0, 1.0, closed=True)
    atol = _check_number("atol", atol, 0.0, math.inf, closed=True)
    if maxiter is None:
        maxiter = DEFAULT_MAXITER
    elif isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    for name, value, high in (("eta", eta, 1.0), ("gamma", gamma, 2.0)):
        if value is not None:
            _check_number(name, value, 0.0, high)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    return rtol, atol, int(maxiter)


# --- BEGIN RECOVERED CONSTANTS ---
PROVENANCE: dict[str, Any] = {"source": "theory", "eagle_probe": None, "checkpoint_sha256": None}
# One entry per layer of the network: EAGLE coefficients in the network's internal units.
LAYERS: list[dict[str, Num]] = []
# How the network scaled its prompts before the first layer: "none", "spectral" or "frobenius".
NORMALIZE = "none"
# Regime shape: "centralized", "distributed" (MACHINES column blocks) or "constrained"
# (PROJECTORS: per layer the n × n projector onto the learned sketch).
REGIME = "centralized"
MACHINES = 1
PROJECTORS: list[list[list[float]]] | None = None
# True: each machine divided its own A, B columns by their norm and C by nothing; False: one
# scale for the whole prompt.
LOCAL_SCALE = False
# Algorithm 1 as the paper writes it, with the network's two global constants fitted to its
# activations (complete(..., mode="algorithm1")): eta, gamma, steps (the network's depth), form
# ("centralized", "distributed" on `machines` column blocks, or "constrained" on PROJECTORS).
# None: no constants were fitted.
ALGORITHM1: dict[str, Any] | None = None
# --- END RECOVERED CONSTANTS ---


# --- an independent check -------------------------------------------------------------------
def certify(A: Any, B: Any, C: Any, D: Any, *, rtol: float = 1e-10) -> Stats:
    """Check any answer D against B A⁺ C computed from an SVD of A.

    Returns certified, error_estimate (‖D − B A⁺ C‖_F / ‖B A⁺ C‖_F), bound = max(rtol, 100·κ̂·eps),
    kappa (κ̂ = σ_1/σ_r, r the numerical rank with numpy's lstsq cutoff max(d, n)·eps·σ_1) and
    rank. certified: the estimate is at most bound / 4 (the SVD's own rounding is about κ̂·eps).
    For lstsq's x: certify(A, np.eye(n), b[:, None], x[:, None])."""
    A, B, C = check_blocks(A, B, C)
    D = check_matrix("D", D)
    if D.shape != (B.shape[0], C.shape[1]):
        raise ValueError(f"D has shape {D.shape}, expected {(B.shape[0], C.shape[1])}")
    rtol = _check_number("rtol", rtol, 0.0, 1.0, closed=True)
    ea, eb, ec = exponent(A), exponent(B), exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    rank = int(np.sum(s > max(A.shape) * EPS * s[0])) if s[0] > 0 else 0
    kappa = float(s[0] / s[rank - 1]) if rank else 1.0
    want = (B @ Vt[:rank].T) @ ((U[:, :rank].T @ C) / s[:rank, None])
    e = exponent(want)
    with np.errstate(over="ignore", under="ignore"):
        got = np.ldexp(D, -(eb + ec - ea) - e)
    gap, size = safe_norm(got - np.ldexp(want, -e)), safe_norm(np.ldexp(want, -e))
    estimate = gap / size if size > 0 else (0.0 if gap == 0 else math.inf)
    bound = max(rtol, CERT_FLOOR * kappa * EPS)
    certified = bool(bound < 1.0 and CERT_MARGIN * estimate <= bound)
    return dict(certified=certified, error_estimate=estimate, bound=bound, kappa=kappa, rank=rank)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 6)) @ rng.standard_normal((6, 14))  # rank X = rank A = 6
    A, B, C = X[:10, :12], X[10:, :12], X[:10, 12:]
    D, stats = complete(A, B, C, return_stats=True)
    print(f"complete: {stats}\ncertify: {certify(A, B, C, D)}")
