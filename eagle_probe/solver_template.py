"""EAGLE: the least-squares algorithm a linear-attention transformer was found to run (NumPy only).

`eagle-probe extract --out DIR` writes this file to DIR/solver.py with the network's numbers in
the data block; as shipped it holds no layers (the theory's η = 1/3, γ = 1 at every step).
`python solver.py` solves a random problem and certifies the answer. With X = [[A, C], [B, D]],
rank X = rank A, D = B A⁺ C; one EAGLE step (Algorithm 1, ρ = ‖A‖₂⁻²):

    A ← A − ηρ A AᵀA      B ← B − ηρ B AᵀA      C ← C − γρ A Aᵀ C      D ← D + γρ B Aᵀ C

complete(A, B, C, mode="faithful"): the network: its prompt scaling (NORMALIZE), then one step
    per layer with the recovered a_l = ηρ, c_l = γρ (LAYERS, the network's units).
complete(A, B, C): any size and scale: blocks scaled by powers of two (exact), ρ_l = ‖A_l‖₂⁻²,
    the recovered η_l, γ_l for the trained depth, then η = 1/3, γ = 1, until a step changes D by
    at most rtol·‖D‖_F. lstsq(A, b) is complete(A, I, b) = A⁺b.
certify(A, B, C, D) (opt-in): D against an SVD of A, with the bound max(rtol, 100·κ̂·eps).
info: 0 converged (reason "converged", or "exact" for a zero input); > 0 the iterations run
without converging ("resolution limit": only singular values below numpy's lstsq cutoff were
left; "maxiter"; "fixed depth" in faithful mode); < 0: -1 A lost its scale, -2 non-finite
numbers, -3 the answer is not representable in float64. Inputs are never modified.
"""

import math
import warnings
from typing import Any

import numpy as np

Array = np.ndarray
Blocks = tuple[Array, Array, Array, Array]
Stats = dict[str, Any]
Num = float | None

THEORY_ETA, THEORY_GAMMA = 1.0 / 3.0, 1.0
DEFAULT_MAXITER = 500
BREAKDOWN, NONFINITE, UNREPRESENTABLE = -1, -2, -3
EPS = float(np.finfo(np.float64).eps)


# --- the solver ----------------------------------------------------------------------------


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
    return_info: bool = False,
    return_stats: bool = False,
) -> Any:
    """D = B A⁺ C from the visible blocks A (d, n), B (d', n) and C (d, n').

    Returns D; (D, info, iterations) with return_info; (D, stats) with return_stats, stats holding
    info, iterations, reason and how many steps used the recovered (η, γ), the theory's or the
    ones passed as eta=/gamma= (recovered_steps, theory_steps, given_steps)."""
    A, B, C = _check_blocks(A, B, C)
    rtol, maxiter = _check_options(rtol, maxiter, eta, gamma)
    run = _Counter(rtol, maxiter, eta, gamma)
    if mode == "faithful":
        D, info = _faithful(A, B, C)
        run.extra["reason"] = "fixed depth" if info == 0 else "non-finite"
        info, iterations = (len(LAYERS) if info == 0 else info), len(LAYERS)
    elif mode == "normalized":
        D, info, iterations = _normalized(A, B, C, run)
    else:
        raise ValueError(f"unknown mode {mode!r}; choose from faithful, normalized")
    if return_stats:
        return D, run.stats(info, iterations)
    return (D, info, iterations) if return_info else D


def _faithful(A: Array, B: Array, C: Array) -> tuple[Array, int]:
    """The network's layers as they are: (D, 0), or (D, NONFINITE) when the numbers overflow."""
    if not LAYERS:
        raise ValueError("this solver carries no recovered layers; use mode='normalized'")
    n = A.shape[1]
    if REGIME != "centralized" and (
        n % MACHINES
        if REGIME == "distributed"
        else PROJECTORS is not None and len(PROJECTORS[0]) != n
    ):
        raise ValueError(f"the faithful {REGIME} solver takes the training size, not n = {n}")
    if LOCAL_SCALE:  # each machine its own scale on its A, B columns; C and D in prompt units
        block = n // MACHINES
        cols = np.repeat(
            [_prompt_scale(A[:, m * block : (m + 1) * block]) for m in range(MACHINES)], block
        )
        if not np.all(cols > 0.0):
            return np.zeros((B.shape[0], C.shape[1])), 0
        A, B, s = A / cols, B / cols, 1.0
    else:
        s = _prompt_scale(A)
        if s == 0.0:
            return np.zeros((B.shape[0], C.shape[1])), 0
        A, B, C = A / s, B / s, C / s
    D = np.zeros((B.shape[0], C.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, coef in enumerate(LAYERS):
            a, c = coef["a_step"], coef["c_step"]
            K = _gram(A, layer)
            AtC = _query(A, layer).T @ C
            A, B, C, D = A - a * (A @ K), B - a * (B @ K), C - c * (A @ AtC), D + c * (B @ AtC)
        D = D * s
    if not np.all(np.isfinite(D)):
        _warn("the faithful solver overflowed (the network's constants at this prompt scale)")
        return D, NONFINITE
    return D, 0


def _prompt_scale(A: Array) -> float:
    if NORMALIZE == "spectral":
        return _spectral_norm(A)
    return _norm(A) if NORMALIZE == "frobenius" else 1.0


def _gram(A: Array, layer: int) -> Array:
    """AᵀA as the layer sees it: per machine (distributed) or within the sketch (constrained)."""
    K = A.T @ A
    if REGIME == "distributed":
        ids = np.arange(A.shape[1]) // (A.shape[1] // MACHINES)
        K = K * (ids[:, None] == ids[None, :])
    elif REGIME == "constrained" and PROJECTORS is not None:
        P = np.asarray(PROJECTORS[layer])
        K = P @ K @ P
    return K


def _query(A: Array, layer: int) -> Array:
    if REGIME == "constrained" and PROJECTORS is not None:
        return A @ np.asarray(PROJECTORS[layer])
    return A


def _normalized(A: Array, B: Array, C: Array, run: "_Counter") -> tuple[Array, int, int]:
    """Scale by powers of two, iterate, scale back: (D, info, iterations)."""
    if not (np.any(A) and np.any(B) and np.any(C)):
        run.extra["reason"] = "exact"
        return np.zeros((B.shape[0], C.shape[1])), 0, 0
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    D, info, iterations = _iterate(np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec), run)
    if info >= 0:
        D, ok = _finish(D, eb + ec - ea)
        if not ok:
            _warn("D = B A⁺ C is not representable in float64 at this scale")
            info, run.extra["reason"] = UNREPRESENTABLE, "unrepresentable"
    return D, info, iterations


def _iterate(A: Array, B: Array, C: Array, run: "_Counter") -> tuple[Array, int, int]:
    """EAGLE with ρ_l = ‖A_l‖₂⁻² on blocks of order one: (D, info, iterations).

    A tiny singular value grows by 1/(1 − η) a step relative to the top one; once that growth
    passes 1/rcond (numpy's lstsq cutoff) only round-off is left to resolve, and the iteration
    stops there rather than promote it to signal."""
    D = np.zeros((B.shape[0], C.shape[1]))
    v, growth, limit = None, 0.0, _resolution_limit(A.shape)
    reason, it = "maxiter", 0
    for it in range(1, run.maxiter + 1):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            run.extra["reason"] = "breakdown"
            return D, BREAKDOWN, it
        A, B, K, v = normalized
        e, g = run.step(it - 1, run.eta, run.gamma)
        growth += _growth(e)
        if growth > limit:
            it -= 1
            run.untake()
            reason = "resolution limit"
            break
        A, B, C, dD = _eagle_update(A, B, C, K, e, g)
        D = D + dD
        if not (np.all(np.isfinite(D)) and np.all(np.isfinite(A))):
            run.extra["reason"] = "non-finite"
            return D, NONFINITE, it
        if _norm(dD) <= run.rtol * max(_norm(D), np.finfo(float).tiny):
            run.extra["reason"] = "converged"
            return D, 0, it
    run.extra["reason"] = reason
    return D, max(it, 1), it


def _normalized_gram(A: Array, B: Array, v: Array | None) -> Blocks | None:
    """A and B divided together by ‖A‖₂ (ρ = 1): (A, B, K = AᵀA, v), or None when ‖A‖₂ is zero
    or not finite. v warm-starts the power iteration."""
    K = A.T @ A
    lam, v = _top_eig(K, v)
    if not math.isfinite(lam) or lam <= 0.0:
        return None
    s = math.sqrt(lam)
    return A / s, B / s, K / lam, v


def _eagle_update(A: Array, B: Array, C: Array, K: Array, e: float, g: float) -> Blocks:
    """One EAGLE step with ρ = 1 (K = AᵀA): the new A, B, C and the increment of D."""
    AtC = A.T @ C
    dD = g * (B @ AtC)
    return A - e * (A @ K), B - e * (B @ K), C - g * (A @ AtC), dD


def lstsq(
    A: Any,
    b: Any,
    *,
    rtol: float = 1e-10,
    maxiter: int | None = None,
    eta: Num = None,
    gamma: Num = None,
    stats: Stats | None = None,
) -> tuple[Array, int]:
    """min ‖A x − b‖₂ by EAGLE: (x, info), x = A⁺b the minimum-norm solution, A (m, n), b (m,) or
    (m, k); it is `complete` on the blocks (A, I_n, b). A dict passed as stats receives what
    `complete` reports."""
    A, vector = _check_matrix("A", A), np.ndim(b) == 1
    b = _check_matrix("b", np.reshape(b, (-1, 1)) if vector else b)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    rtol, maxiter = _check_options(rtol, maxiter, eta, gamma)
    run = _Counter(rtol, maxiter, eta, gamma)
    x, info, iterations = _normalized(A, np.eye(A.shape[1]), b, run)
    if stats is not None:
        stats.update(run.stats(info, iterations))
    return (x[:, 0] if vector else x), info


# --- the step size schedule ----------------------------------------------------------------


def schedule(step: int, eta: Num = None, gamma: Num = None) -> tuple[float, float]:
    """(η, γ) of `step`: the recovered per-layer values, then the theory's 1/3 and 1."""
    return _schedule(step, eta, gamma)[:2]


def _schedule(step: int, eta: Num, gamma: Num) -> tuple[float, float, str]:
    """(η, γ, source): source "recovered" (a layer's values), "theory" or "given" (arguments)."""
    if eta is not None and gamma is not None:
        return float(eta), float(gamma), "given"
    if step < len(LAYERS):
        e, g = LAYERS[step].get("eta"), LAYERS[step].get("gamma")
        if _usable(e, g):
            return (e if eta is None else eta), (g if gamma is None else gamma), "recovered"
    e = THEORY_ETA if eta is None else eta
    return e, (THEORY_GAMMA if gamma is None else gamma), "theory"


def _usable(e: Num, g: Num) -> bool:
    """A layer's (η, γ) drive the normalized iteration only where a step contracts: η ∈ (0, 1),
    γ ∈ (0, 2) (the top singular value of A maps to (1 − η)σ, C's part along it to (1 − γ)c)."""
    return e is not None and g is not None and 0.0 < e < 1.0 and 0.0 < g < 2.0


def recovered_layers() -> list[int]:
    """The layers (0-based) whose (η, γ) the normalized mode uses at the step of that index."""
    return [i for i, layer in enumerate(LAYERS) if _usable(layer.get("eta"), layer.get("gamma"))]


class _Counter:
    """A call's options, its steps by the source of their (η, γ) and what else it reports."""

    def __init__(
        self, rtol: float = 0, maxiter: int = 500, eta: Num = None, gamma: Num = None
    ) -> None:
        self.rtol, self.maxiter, self.eta, self.gamma = rtol, maxiter, eta, gamma
        self.counts = {"recovered": 0, "theory": 0, "given": 0}
        self.extra: Stats = {}
        self.last = "theory"

    def step(self, step: int, eta: Num, gamma: Num) -> tuple[float, float]:
        e, g, self.last = _schedule(step, eta, gamma)
        self.counts[self.last] += 1
        return e, g

    def untake(self) -> None:
        """The last step was not taken after all."""
        self.counts[self.last] -= 1

    def stats(self, info: int, iterations: int) -> Stats:
        counts = {f"{source}_steps": count for source, count in self.counts.items()}
        return {"info": info, "iterations": iterations} | counts | self.extra


# --- numbers at any scale ------------------------------------------------------------------


def _exponent(M: Array) -> int:
    """e with max|M| · 2⁻ᵉ in [0.5, 1) (0 for a zero M): scaling by 2⁻ᵉ is exact."""
    top = float(np.max(np.abs(M))) if np.size(M) else 0.0
    return math.frexp(top)[1] if top > 0.0 and math.isfinite(top) else 0


def _norm(M: Array) -> float:
    """‖M‖_F without overflow or underflow (scaled by a power of two)."""
    e = _exponent(M)
    return math.ldexp(float(np.linalg.norm(np.ldexp(M, -e))), e)


def _spectral_norm(A: Array) -> float:
    """‖A‖₂ (exact, via the smaller Gram matrix of A scaled by a power of two)."""
    e = _exponent(A)
    A = np.ldexp(A, -e)
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return math.ldexp(math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0)), e)


def _top_eig(K: Array, v: Array | None = None, iters: int = 30) -> tuple[float, Array]:
    """Largest eigenvalue of the symmetric PSD K by power iteration (v: warm start), with 2%
    headroom: a Rayleigh quotient underestimates, and ηρλ_max must stay below η."""
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
    return 1.02 * max(lam, float(v @ (K @ v))), v


def _finish(D: Array, e: int) -> tuple[Array, bool]:
    """(D · 2ᵉ, representable): finite and, unless zero, at least the smallest normal number."""
    if not np.all(np.isfinite(D)):
        return D, False
    if not np.any(D):
        return D, True
    top = _exponent(D) + e
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(D, e)
    info = np.finfo(np.float64)
    return out, info.minexp + 1 <= top <= info.maxexp


def _resolution_limit(shape: tuple[int, ...]) -> float:
    """log of 1 / rcond with rcond = max(shape) · eps (numpy.linalg.lstsq's default cutoff)."""
    return -math.log(max(shape) * EPS)


def _growth(eta: float) -> float:
    """log of the factor 1/(1 − η) by which a step raises a tiny singular value against the top."""
    return -math.log(max(1.0 - eta, 1e-12)) if eta < 1.0 else math.inf


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


# --- input checks --------------------------------------------------------------------------


def _check_matrix(name: str, M: Any) -> Array:
    """A float64 copy of M: a 2-d, non-empty, finite, real array (not masked)."""
    kind = np.asarray(M).dtype.kind
    if isinstance(M, np.ma.MaskedArray) or np.ndim(M) != 2 or not np.size(M) or kind not in "biuf":
        raise ValueError(f"{name} must be a non-empty 2-d real array, got {np.shape(M)} {kind}")
    M = np.array(M, dtype=np.float64)
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or Inf, or does not fit in float64")
    return M


def _check_blocks(A: Any, B: Any, C: Any) -> tuple[Array, Array, Array]:
    A, B, C = _check_matrix("A", A), _check_matrix("B", B), _check_matrix("C", C)
    if B.shape[1] != A.shape[1] or C.shape[0] != A.shape[0]:
        raise ValueError(f"B {B.shape} must have A's columns, C {C.shape} A's rows {A.shape}")
    return A, B, C


def _check_number(name: str, value: Any, low: float, high: float, closed: bool = False) -> float:
    """A real number in (low, high), or [low, high) when closed."""
    real = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    x = float(value) if real else math.nan
    if not (math.isfinite(x) and (low <= x if closed else low < x) and x < high):
        raise ValueError(
            f"{name} must lie in {'[' if closed else '('}{low:g}, {high:g}), got {value!r}"
        )
    return x


def _check_options(rtol: Any, maxiter: Any, eta: Any, gamma: Any) -> tuple[float, int]:
    """(rtol, maxiter), validated with eta and gamma."""
    rtol = _check_number("rtol", rtol, 0.0, 1.0, closed=True)
    if maxiter is None:
        maxiter = DEFAULT_MAXITER
    elif isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    if eta is not None:
        _check_number("eta", eta, 0.0, 1.0)
    if gamma is not None:
        _check_number("gamma", gamma, 0.0, 2.0)
    return rtol, int(maxiter)


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
# True: each machine divided its own A, B columns by its own norm and C by nothing (the paper's
# distributed architecture); False: one scale for the whole prompt.
LOCAL_SCALE = False
# --- END RECOVERED CONSTANTS ---


# --- the certificate (opt-in) --------------------------------------------------------------


def certify(A: Any, B: Any, C: Any, D: Any, *, rtol: float = 1e-10) -> Stats:
    """Check an answer D against B A⁺ C computed from an SVD of A.

    Returns certified, error_estimate (‖D − B A⁺ C‖_F / ‖B A⁺ C‖_F), bound = max(rtol, 100·κ̂·eps),
    kappa (κ̂ = σ_1/σ_r, r the numerical rank with numpy's lstsq cutoff max(d, n)·eps·σ_1) and
    rank. certified: the estimate is at most bound / 4 (the SVD's own rounding is about κ̂·eps).
    For lstsq's x (x0 = None): certify(A, np.eye(n), b[:, None], x[:, None])."""
    A, B, C = _check_blocks(A, B, C)
    D = _check_matrix("D", D)
    if D.shape != (B.shape[0], C.shape[1]):
        raise ValueError(f"D has shape {D.shape}, expected {(B.shape[0], C.shape[1])}")
    rtol = _check_number("rtol", rtol, 0.0, 1.0, closed=True)
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    rank = int(np.sum(s > max(A.shape) * EPS * s[0])) if s[0] > 0 else 0
    kappa = float(s[0] / s[rank - 1]) if rank else 1.0
    want = (B @ Vt[:rank].T) @ ((U[:, :rank].T @ C) / s[:rank, None])
    e = _exponent(want) if np.any(want) else 0
    with np.errstate(over="ignore", under="ignore"):
        got = np.ldexp(D, -(eb + ec - ea) - e)
    gap, size = _norm(got - np.ldexp(want, -e)), _norm(np.ldexp(want, -e))
    estimate = gap / size if size > 0 else (0.0 if gap == 0 else math.inf)
    bound = max(rtol, 100.0 * kappa * EPS)
    certified = bool(bound < 1.0 and 4.0 * estimate <= bound)
    return dict(certified=certified, error_estimate=estimate, bound=bound, kappa=kappa, rank=rank)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 6)) @ rng.standard_normal((6, 14))  # rank X = rank A = 6
    A, B, C = X[:10, :12], X[10:, :12], X[:10, 12:]
    D, stats = complete(A, B, C, return_stats=True)
    print("complete:", stats)
    print("certify:", certify(A, B, C, D))
