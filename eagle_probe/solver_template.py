"""EAGLE solver: the algorithm recovered from a linear-attention transformer.

This module imports only NumPy. `eagle-probe extract --out DIR` writes a copy of it to
DIR/solver.py with the recovered coefficients filled in below; eagle-probe itself uses it as the
reference EAGLE (Algorithm 1 of "Linear Transformers Implicitly Discover Unified Numerical
Algorithms", NeurIPS 2025).

Block prompt: X = [[A, C], [B, D]] with rank X = rank A; D = B A⁺ C. One EAGLE step, ρ = ‖A‖₂⁻²:

    A ← A − ηρ A AᵀA      B ← B − ηρ B AᵀA      C ← C − γρ A Aᵀ C      D ← D + γρ B Aᵀ C

API
    complete(A, B, C, *, mode="normalized", rtol=1e-10, maxiter=None) -> D
        (return_info=True: (D, info, iterations); return_stats=True: (D, stats))
    lstsq(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None) -> (x, info)
        x = x0 + A⁺(b − A x0); pass stats={} to receive the counts below
    complete_distributed(A, B, C, machines, ...) -> (D, stats)
    complete_sketched(A, B, C, r, rng, ...) -> (D, stats)
    stats: info, iterations, recovered_steps (steps that used the recovered η_l, γ_l),
    theory_steps (steps that used the theory's η = 1/3, γ = 1), given_steps (eta=/gamma= passed).

Modes of `complete`:
    faithful    the network layer by layer: its prompt normalisation, then one EAGLE step per layer
                with the recovered constant coefficients a_l, c_l (internal units).
    normalized  per-problem ρ_l = ‖A_l‖₂⁻² at every step, the recovered η_l, γ_l for the trained
                depth and then the theory's η = 1/3, γ = 1, until the stopping rule: any size,
                any scale, any number of steps.
`info`: 0 converged, > 0 the iterations used without converging, < 0 breakdown: -1 A lost its
scale, -2 non-finite numbers appeared, -3 the answer is not representable in float64 (with a
RuntimeWarning). info is never 0 with a non-finite answer. Blocks are scaled by powers of two
(exact), so every scale float64 holds works. η must lie in (0, 1) and γ in (0, 2); rtol in
[0, 1); maxiter ≥ 1. Inputs are never modified.
"""

import math

import numpy as np

# --- BEGIN RECOVERED CONSTANTS ---
PROVENANCE = {"source": "theory", "eagle_probe": None, "checkpoint_sha256": None}
# One entry per layer of the network: EAGLE coefficients in the network's internal units.
LAYERS = []
# How the network scaled its prompts before the first layer: "none", "spectral" or "frobenius".
NORMALIZE = "none"
# Regime shape: "centralized", "distributed" (MACHINES column blocks) or "constrained"
# (PROJECTORS: per layer the n × n projector onto the learned sketch).
REGIME = "centralized"
MACHINES = 1
PROJECTORS = None
# --- END RECOVERED CONSTANTS ---

THEORY_ETA, THEORY_GAMMA = 1.0 / 3.0, 1.0
DEFAULT_MAXITER = 500
# info < 0: -1 A lost its scale (breakdown), -2 non-finite numbers appeared, -3 the answer does
# not fit in float64 (it overflows, or underflows below the smallest normal number).
BREAKDOWN, NONFINITE, UNREPRESENTABLE = -1, -2, -3


def _check_matrix(name, M, ndim=2):
    M = np.asarray(M)
    if M.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {M.shape}")
    if M.size == 0:
        raise ValueError(f"{name} has an empty dimension: shape {M.shape}")
    if not np.issubdtype(M.dtype, np.number) or np.iscomplexobj(M):
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


def _exponent(M):
    """e with max|M| · 2⁻ᵉ in [0.5, 1) (0 for a zero M): scaling by 2⁻ᵉ is exact."""
    top = float(np.max(np.abs(M))) if np.size(M) else 0.0
    return math.frexp(top)[1] if top > 0.0 and math.isfinite(top) else 0


def _norm(M):
    """‖M‖_F without overflow or underflow (scaled by a power of two)."""
    e = _exponent(M)
    return math.ldexp(float(np.linalg.norm(np.ldexp(M, -e))), e)


def _finish(D, e):
    """(D · 2ᵉ, representable): representable when finite and, unless zero, at least the
    smallest normal number in magnitude (below it the answer has lost its digits)."""
    if not np.all(np.isfinite(D)):
        return D, False
    if not np.any(D):
        return D, True
    top = _exponent(D) + e
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(D, e)
    info = np.finfo(np.float64)
    return out, info.minexp + 1 <= top <= info.maxexp


def _warn(message):
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _top_eig(K, v=None, iters=30):
    """Largest eigenvalue of the symmetric PSD K by power iteration (v: warm start)."""
    n = K.shape[0]
    if v is None:
        v = np.ones(n) / math.sqrt(n) + np.linspace(0.0, 1e-3, n)
    lam = 0.0
    for _ in range(iters):
        w = K @ v
        norm = np.linalg.norm(w)
        if norm == 0.0:
            return 0.0, v
        lam_new = float(v @ w) / float(v @ v)
        v = w / norm
        if abs(lam_new - lam) <= 1e-3 * lam_new:
            lam = lam_new
            break
        lam = lam_new
    # A Rayleigh quotient underestimates; 2% headroom keeps η ρ λ_max below η.
    return 1.02 * max(lam, float(v @ (K @ v))), v


def _spectral_norm(A):
    """‖A‖₂ (exact, via the smaller Gram matrix of A scaled by a power of two)."""
    e = _exponent(A)
    A = np.ldexp(A, -e)
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return math.ldexp(math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0)), e)


def _prompt_scale(A):
    if NORMALIZE == "spectral":
        return _spectral_norm(A)
    if NORMALIZE == "frobenius":
        return _norm(A)
    return 1.0


def _gram(A, layer):
    K = A.T @ A
    if REGIME == "distributed":
        block = A.shape[1] // MACHINES
        ids = np.arange(A.shape[1]) // block
        K = K * (ids[:, None] == ids[None, :])
    elif REGIME == "constrained" and PROJECTORS is not None:
        P = np.asarray(PROJECTORS[layer])
        K = P @ K @ P
    return K


def _query(A, layer):
    if REGIME == "constrained" and PROJECTORS is not None:
        return A @ np.asarray(PROJECTORS[layer])
    return A


def _faithful(A, B, C):
    if not LAYERS:
        raise ValueError("this solver carries no recovered layers; use mode='normalized'")
    n = A.shape[1]
    if REGIME != "centralized" and (
        n % MACHINES
        if REGIME == "distributed"
        else PROJECTORS is not None and len(PROJECTORS[0]) != n
    ):
        raise ValueError(f"the faithful {REGIME} solver takes the training size, not n = {n}")
    s = _prompt_scale(A)
    if s == 0.0:
        return np.zeros((B.shape[0], C.shape[1])), 0
    A, B, C = A / s, B / s, C / s
    D = np.zeros((B.shape[0], C.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, coef in enumerate(LAYERS):
            a, c = coef["a_step"], coef["c_step"]
            K = _gram(A, layer)
            Aq = _query(A, layer)
            AtC = Aq.T @ C
            A, B, C, D = A - a * (A @ K), B - a * (B @ K), C - c * (A @ AtC), D + c * (B @ AtC)
        D = D * s
    if not np.all(np.isfinite(D)):
        _warn("the faithful solver overflowed (the network's constants at this prompt scale)")
        return D, NONFINITE
    return D, 0


def _resolution_limit(shape):
    """log of 1 / rcond with rcond = max(shape) · eps (numpy.linalg.lstsq's default cutoff)."""
    return -math.log(max(shape) * np.finfo(np.float64).eps)


def _growth(eta):
    """log of the factor by which one step raises a tiny singular value relative to the top.

    With ρ = ‖A‖₂⁻², σ ← σ (1 − ηρσ²) maps the top to (1 − η) σ_max and leaves a tiny σ alone, so
    tiny ratios σ/σ_max grow by 1/(1 − η) per step. Once the product exceeds 1/rcond, round-off
    noise in the null space would be promoted to signal: the iteration stops there instead of
    drifting (rank-deficient problems).
    """
    return -math.log(max(1.0 - eta, 1e-12)) if eta < 1.0 else math.inf


def _normalized_gram(A, B, v):
    """Scale A and B together so that ‖A‖₂ = 1 (ρ = 1); returns (A, B, K = AᵀA, v) or None when
    ‖A‖₂ is zero or not finite. v warm-starts the power iteration."""
    K = A.T @ A
    lam, v = _top_eig(K, v)
    if not math.isfinite(lam) or lam <= 0.0:
        return None
    s = math.sqrt(lam)
    return A / s, B / s, K / lam, v


def _eagle_update(A, B, C, K, e, g):
    """One EAGLE step with ρ = 1 (K = AᵀA): the new A, B, C and the increment of D."""
    AtC = A.T @ C
    dD = g * (B @ AtC)
    return A - e * (A @ K), B - e * (B @ K), C - g * (A @ AtC), dD


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


def schedule(step, eta=None, gamma=None):
    """(η, γ) of `step`: the recovered per-layer values, then the theory's 1/3 and 1."""
    return _schedule(step, eta, gamma)[:2]


def _schedule(step, eta, gamma):
    """(η, γ, source): source "recovered" (a layer's values), "theory" or "given" (arguments)."""
    if eta is not None and gamma is not None:
        return float(eta), float(gamma), "given"
    if step < len(LAYERS):
        e, g = LAYERS[step].get("eta"), LAYERS[step].get("gamma")
        if _usable(e, g):
            return (e if eta is None else eta), (g if gamma is None else gamma), "recovered"
    e = THEORY_ETA if eta is None else eta
    return e, (THEORY_GAMMA if gamma is None else gamma), "theory"


def _usable(e, g):
    """A recovered layer's (η, γ) drive the normalized iteration only inside the ranges where a
    step contracts, η ∈ (0, 1), γ ∈ (0, 2); otherwise that step uses the theory's values."""
    return e is not None and g is not None and 0.0 < e < 1.0 and 0.0 < g < 2.0


def recovered_layers():
    """The layers (0-based) whose recovered (η, γ) the normalized mode uses for its step of the
    same index; the other steps, and every step after the last layer, use the theory's
    η = 1/3, γ = 1."""
    return [i for i, layer in enumerate(LAYERS) if _usable(layer.get("eta"), layer.get("gamma"))]


class _Counter:
    """Steps by the source of their (η, γ): recovered, theory or given."""

    def __init__(self):
        self.counts = {"recovered": 0, "theory": 0, "given": 0}

    def step(self, step, eta, gamma):
        e, g, source = _schedule(step, eta, gamma)
        self.counts[source] += 1
        self.last = source
        return e, g

    def untake(self):
        """The last step was not taken after all (the growth limit stopped the iteration)."""
        self.counts[self.last] -= 1

    def stats(self, info, iterations):
        return {
            "info": info,
            "iterations": iterations,
            "recovered_steps": self.counts["recovered"],
            "theory_steps": self.counts["theory"],
            "given_steps": self.counts["given"],
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
    Stopping rule (normalized): stop after the first step whose update of D is at most
    rtol · ‖D‖_F (info 0), or once only singular values of A below rcond = max(d, n)·eps are left
    to resolve (info 0: the answer is what lstsq's cutoff gives). info < 0 when the answer is
    not finite or not representable in float64 (-3) or the iteration broke down; it is never 0
    with a non-finite D.
    `return_info=True` returns (D, info, iterations); `return_stats=True` returns (D, stats) with
    info, iterations and how many steps used recovered (η, γ), the theory's (η, γ) = (1/3, 1), or
    the ones passed as arguments (recovered_steps, theory_steps, given_steps).
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma)
    counter = _Counter()

    def result(D, info, iterations):
        if return_stats:
            return D, counter.stats(info, iterations)
        return (D, info, iterations) if return_info else D

    if mode == "faithful":
        D, info = _faithful(A, B, C)
        return result(D, info, len(LAYERS))
    if mode != "normalized":
        raise ValueError(f"unknown mode {mode!r}; choose from faithful, normalized")
    D = np.zeros((B.shape[0], C.shape[1]))
    if not (np.any(A) and np.any(B) and np.any(C)):
        return result(D, 0, 0)
    # Exact power-of-two scaling: A = 2^ea Â, B = 2^eb B̂, C = 2^ec Ĉ, so D = 2^(eb+ec-ea) B̂ Â⁺ Ĉ.
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    D, info, it = _iterate(A, B, C, rtol, maxiter, eta, gamma, counter)
    if info >= 0:
        D, ok = _finish(D, eb + ec - ea)
        if not ok:
            _warn("D = B A⁺ C is not representable in float64 at this scale")
            info = UNREPRESENTABLE
    return result(D, info, it)


def _iterate(A, B, C, rtol, maxiter, eta, gamma, counter):
    """The normalized EAGLE iteration on scaled blocks: (D, info, iterations).

    Besides the plain rule (‖ΔD‖ ≤ rtol ‖D‖), the drift guard of `lstsq`: C is the residual of
    the prompt, so once ‖Aᵀ C‖ ≤ rtol ‖C‖ (‖A‖₂ = 1 here) or ‖C‖ ≤ rtol ‖C_0‖, a small step
    followed by geometrically growing ones returns the iterate after the smallest step."""
    D = np.zeros((B.shape[0], C.shape[1]))
    c0 = _norm(C)
    v, info, it = None, maxiter, 0
    growth, limit = 0.0, _resolution_limit(A.shape)
    quietest, settled = (math.inf, D), False
    calmest, prev_cn = (math.inf, D), math.inf  # the smallest step while ‖C‖ stagnates
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            info = BREAKDOWN
            break
        A, B, K, v = normalized
        e, g = counter.step(it - 1, eta, gamma)
        growth += _growth(e)
        if growth > limit:
            it -= 1
            counter.untake()
            info = 0 if quietest[0] <= DRIFT_STEP or settled else it
            D = quietest[1] if quietest[0] <= DRIFT_STEP else calmest[1]
            break
        A, B, C, dD = _eagle_update(A, B, C, K, e, g)
        D = D + dD
        if not np.all(np.isfinite(D)):
            info = NONFINITE
            break
        rel_step = _norm(dD) / max(_norm(D), np.finfo(float).tiny)
        if rel_step <= rtol:
            info = 0
            break
        cn = _norm(C)
        settled = cn <= rtol * c0 or _norm(A.T @ C) <= rtol * cn
        if (settled or cn >= (1 - 1e-3) * prev_cn) and rel_step < calmest[0]:
            calmest = (rel_step, D)
        prev_cn = cn
        if settled and rel_step < quietest[0]:
            quietest = (rel_step, D)
        elif quietest[0] <= DRIFT_STEP and rel_step > DRIFT_GROWTH * quietest[0]:
            D, info = quietest[1], 0
            break
    return D, info, it


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
    of A is kept (the iteration only adds vectors in the row space of A).
    A (m, n), b (m,) or (m, k). The prompt is [[A, r0], [I_n, 0]] with r0 = b − A x0, so the D
    block is A⁺ r0 and the C block the residual. A and r0 are scaled by powers of two first
    (exact), so every scale float64 holds works; ρ = ‖A_l‖₂⁻² per step by warm-started power
    iteration on the n × n Gram matrix.

    Stopping rule, checked after every step k (x_k, r_k = b − A x_k): stop when
        ‖x_k − x_{k−1}‖ ≤ rtol ‖x_k − x_0‖   and one of
        ‖r_k‖ ≤ atol + rtol ‖b‖  (consistent),  ‖Aᵀ r_k‖ ≤ rtol ‖A‖₂ ‖r_k‖  (least-squares optimal),
        ‖r_k‖ ≥ (1 − 1e-3) ‖r_{k−1}‖  (the residual no longer decreases);
    or as soon as ‖r_k‖ ≤ atol when atol > 0.
    The iteration also stops (info 0) once only singular values below rcond = max(m, n)·eps are
    left to resolve, or when ‖Aᵀ r_k‖, having reached 1e-13 ‖A‖₂‖r_k‖, grows 1000-fold again
    (round-off in the null space of a rank-deficient A being amplified; the best iterate is
    returned): it never drifts away from a converged answer, even when rtol cannot be reached.
    Returns (x, info): info 0 converged, > 0 maxiter reached, < 0 breakdown (-2 non-finite
    numbers, -3 x is not representable in float64); never 0 with a non-finite x.
    callback(x_k) is called once per iteration. A dict passed as `stats` receives the
    iterations and the steps by source of (η, γ), as in `complete`.
    """
    A = _check_matrix("A", A)
    b_in = np.asarray(b)
    vector = b_in.ndim == 1
    b = _check_matrix("b", b_in.reshape(-1, 1) if vector else b_in)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    rtol, atol, maxiter = _check_options(rtol, atol, maxiter, eta, gamma, callback)
    m, n = A.shape
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
        return x0.copy(), 0, 0
    At = np.ldexp(A, -ea)  # Ã = 2^-ea A, max|Ã| in [0.5, 1)
    # Residual in units of 2^k: r̃0 = 2^-k (b − A x0), computed without overflow.
    k = max(_exponent(b), ea + _exponent(x0)) if np.any(x0) else _exponent(b)
    with np.errstate(under="ignore"):
        r = np.ldexp(b, -k) - At @ np.ldexp(x0, ea - k)
    kr = _exponent(r)
    if not np.any(r):
        return x0.copy(), 0, 0
    r, k = np.ldexp(r, -kr), k + kr
    e_out = k - ea  # x = x0 + 2^e_out ỹ with ỹ ≈ Ã⁺ r̃0
    with np.errstate(under="ignore"):
        bt = np.ldexp(b, -k)  # b in the same units
    bnorm, tol_abs = _norm(bt), math.ldexp(atol, -k) if atol > 0 else 0.0

    def iterate(y):
        with np.errstate(over="ignore", under="ignore"):
            return x0 + np.ldexp(y, e_out)

    if _norm(r) <= tol_abs + rtol * bnorm:
        return x0.copy(), 0, 0
    norm_a = _spectral_norm(At)
    Al, M = At.copy(), np.eye(A.shape[1])  # A_l = Ã m_l(ÃᵀÃ) and B_l = m_l(ÃᵀÃ)
    C = r.copy()
    y = np.zeros_like(x0)
    v, info, it = None, maxiter, 0
    prev_res = math.inf
    growth, limit = 0.0, _resolution_limit(A.shape)
    best = (math.inf, y)
    quietest = (math.inf, y)  # the smallest relative step taken while settled, and its iterate
    settled = False
    calmest = (math.inf, y)  # the same under the weaker test (the residual stagnates)
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(Al, M, v)
        if normalized is None:
            info = BREAKDOWN
            break
        Al, M, K, v = normalized
        e, g = counter.step(it - 1, eta, gamma)
        growth += _growth(e)
        if growth > limit:  # only noise below rcond is left to resolve: stop, like an rcond
            it -= 1
            counter.untake()
            info = 0 if quietest[0] <= DRIFT_STEP or settled else it
            y = quietest[1] if quietest[0] <= DRIFT_STEP else calmest[1]
            break
        Al, M, C, step = _eagle_update(Al, M, C, K, e, g)
        y = y + step
        if not (np.all(np.isfinite(y)) and np.all(np.isfinite(Al))):
            info = NONFINITE
            break
        if callback is not None:
            callback(shape(iterate(y)))
        rk = r - At @ y  # the residual in units of 2^k
        res = _norm(rk)
        grad = _norm(At.T @ rk)
        rel_step = _norm(step) / max(_norm(y), np.finfo(float).tiny)
        small_step = rel_step <= rtol
        if grad < best[0]:
            best = (grad, y)
        elif grad > 1e3 * best[0] and best[0] <= 1e-13 * norm_a * res:
            # Optimality had been reached and is now lost: round-off in the null space of a
            # rank-deficient A is being amplified. Return the best iterate.
            y, info = best[1], 0
            break
        # A small residual alone does not pin x down when A is ill-conditioned: also ask for a
        # step that no longer moves x (convergence is quadratic by then, so this costs ~1 step).
        optimal = (
            res <= tol_abs + rtol * bnorm
            or grad <= rtol * norm_a * res
            or res >= prev_res * (1 - 1e-3)
        )
        if (small_step and optimal) or (tol_abs > 0 and res <= tol_abs):
            info = 0
            break
        settled = res <= tol_abs + rtol * bnorm or grad <= rtol * norm_a * res
        if optimal and rel_step < calmest[0]:
            calmest = (rel_step, y)
        if settled and rel_step < quietest[0]:
            quietest = (rel_step, y)
        elif quietest[0] <= DRIFT_STEP and rel_step > DRIFT_GROWTH * quietest[0]:
            # The steps had shrunk (quadratic convergence) and now grow again geometrically
            # while the residual stays put: round-off in the numerical null space is being
            # resolved. The answer is the iterate after the smallest step.
            y, info = quietest[1], 0
            break
        prev_res = res
    x = iterate(y)
    if info < 0:
        return x, info, it
    if not np.all(np.isfinite(x)) or (np.any(y) and np.max(np.abs(x)) < np.finfo(float).tiny):
        _warn("the least-squares solution is not representable in float64 at this scale")
        return x, UNREPRESENTABLE, it
    return x, info, it


# Drift guard of `lstsq` and `complete`: once a step of at most DRIFT_STEP (relative) has been
# taken while the residual test held, a step DRIFT_GROWTH times larger means the iteration is
# resolving round-off (it grows by 1/(1 − η)² a step there), not the answer.
DRIFT_STEP, DRIFT_GROWTH = 1e-4, 4.0


def _split_columns(n, machines):
    bounds = np.linspace(0, n, machines + 1).round().astype(int)
    return [slice(bounds[i], bounds[i + 1]) for i in range(machines)]


def complete_distributed(
    A, B, C, machines, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Distributed EAGLE: machine μ holds the columns A^μ, B^μ; C and D are replicated.

    Each round, machine μ computes its local update γρ_μ B^μ A^μᵀ C (and A^μ A^μᵀ C); the
    machines average these (one all-reduce of (d + d') × n' floats per machine) and each updates
    its own A^μ, B^μ with its local Gram matrix. Stops when a round changes D by at most
    rtol · ‖D‖_F. Returns (D, stats) with rounds, floats sent per machine per round and in total,
    info (as in `complete`: never 0 with a non-finite D) and the steps by source of (η, γ).
    callback(D_k) runs after every round.
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    if isinstance(machines, bool) or not isinstance(machines, int) or not 1 <= machines <= n:
        raise ValueError(f"machines must be an integer in [1, {n}], got {machines!r}")
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
        return D, stats()
    As, Bs, C, e_out = _scaled_blocks(A, B, C, parts)
    for it in range(1, maxiter + 1):
        rounds = it
        e, g = counter.step(it - 1, eta, gamma)
        dC = np.zeros_like(C)
        dD = np.zeros_like(D)
        for mu in range(machines):
            dC_mu, dD_mu, As[mu], Bs[mu] = _local_round(As[mu], Bs[mu], C, e, g)
            dC += dC_mu
            dD += dD_mu
        C = C + dC / machines
        D = D + dD / machines
        if not np.all(np.isfinite(D)):
            info = NONFINITE
            break
        if callback is not None:
            callback(_finish(D, e_out)[0].copy())
        if _norm(dD / machines) <= rtol * _norm(D):
            info = 0
            break
    if info >= 0:
        D, ok = _finish(D, e_out)
        if not ok:
            _warn("D = B A⁺ C is not representable in float64 at this scale")
            info = UNREPRESENTABLE
    return D, stats()


def complete_sketched(
    A, B, C, r, rng, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Sketched EAGLE: a fresh random orthogonal n × r sketch S every step (Ã = A S, B̃ = B S).

    rng: a numpy.random.Generator. Stops after three steps in a row that change D by at most
    rtol · ‖D‖_F. Returns (D, stats) with iterations, info (as in `complete`) and the steps by
    source of (η, γ). callback(D_k) runs after every step.
    """
    A, B, C = _check_blocks(A, B, C)
    rtol, _, maxiter = _check_options(rtol, 0.0, maxiter, eta, gamma, callback)
    n = A.shape[1]
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= n:
        raise ValueError(f"sketch size r must be an integer in [1, {n}], got {r!r}")
    D = np.zeros((B.shape[0], C.shape[1]))
    counter = _Counter()
    info, it = maxiter, 0
    if not (np.any(A) and np.any(B) and np.any(C)):
        return D, counter.stats(0, 0)
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
        D, ok = _finish(D, e_out)
        if not ok:
            _warn("D = B A⁺ C is not representable in float64 at this scale")
            info = UNREPRESENTABLE
    return D, counter.stats(info, it) | {"iterations": it}
