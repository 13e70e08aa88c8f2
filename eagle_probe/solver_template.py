"""EAGLE: the least-squares algorithm a linear-attention transformer was found to run (NumPy only).

`eagle-probe extract --out DIR` writes this file to DIR/solver.py with the network's numbers in
the data block (as shipped it holds no layers); `python solver.py` solves and certifies a random
problem. With X = [[A, C], [B, D]], rank X = rank A, D = B A⁺ C; one EAGLE step (ρ = ‖A‖₂⁻²):

    A ← A − ηρ A AᵀA      B ← B − ηρ B AᵀA      C ← C − γρ A Aᵀ C      D ← D + γρ B Aᵀ C

complete(A, B, C, mode="faithful"): the network: its prompt scaling (NORMALIZE), then one step
    per layer with the recovered a_l = ηρ, c_l = γρ (LAYERS, the network's units).
complete(A, B, C): any size and scale: blocks scaled by powers of two (exact), ρ_l = ‖A_l‖₂⁻²,
    the recovered η_l, γ_l for the trained depth, then η = 1/3, γ = 1, until a step changes D by
    at most rtol·‖D‖_F. lstsq(A, b) is complete(A, I, b) = A⁺b.
certify(A, B, C, D) (opt-in): D against an SVD of A, with the bound max(rtol, 100·κ̂·eps).
info: 0 converged ("exact" for a zero input); > 0 the iterations run without converging
("resolution limit": only singular values below numpy's lstsq cutoff were left; "maxiter";
"fixed depth" in faithful mode); < 0: -1 A lost its scale, -2 non-finite numbers, -3 the answer
is not representable in float64. Inputs are never modified.
"""

import math
import warnings
from typing import Any, NamedTuple

import numpy as np

Array = np.ndarray
Blocks = tuple[Array, Array, Array, Array]
Stats = dict[str, Any]
Num = float | None

THEORY_ETA, THEORY_GAMMA = 1.0 / 3.0, 1.0
DEFAULT_MAXITER = 500
BREAKDOWN, NONFINITE, UNREPRESENTABLE = -1, -2, -3
EPS = float(np.finfo(np.float64).eps)


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
    """D = B A⁺ C from A (d, n), B (d', n), C (d, n'): D; (D, info, iterations) with return_info;
    (D, stats) with return_stats: info, iterations, reason and how many steps took the recovered
    (η, γ), the theory's or eta=/gamma= (recovered_steps, theory_steps, given_steps)."""
    A, B, C = _check_blocks(A, B, C)
    options = _check_options(rtol, maxiter, eta, gamma)
    if mode == "faithful":
        D, info, iterations, reason = _faithful(A, B, C)
    elif mode == "normalized":
        D, info, iterations, reason = _normalized(A, B, C, options)
    else:
        raise ValueError(f"unknown mode {mode!r}; choose from faithful, normalized")
    if return_stats:
        steps = iterations if mode == "normalized" else 0  # the faithful layers have no schedule
        return D, options.stats(info, iterations, reason, steps)
    return (D, info, iterations) if return_info else D


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
    """min ‖A x − b‖₂ by EAGLE: (x, info), x = A⁺b, A (m, n), b (m,) or (m, k): `complete` on the
    blocks (A, I_n, b). A dict passed as stats receives what `complete` reports."""
    A, vector = _check_matrix("A", A), np.ndim(b) == 1
    b = _check_matrix("b", np.reshape(b, (-1, 1)) if vector else b)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    options = _check_options(rtol, maxiter, eta, gamma)
    x, info, iterations, reason = _normalized(A, np.eye(A.shape[1]), b, options)
    if stats is not None:
        stats.update(options.stats(info, iterations, reason, iterations))
    return (x[:, 0] if vector else x), info


def _faithful(A: Array, B: Array, C: Array) -> tuple[Array, int, int, str]:
    """The network's layers as they are: (D, info, layers, reason); info NONFINITE on overflow."""
    if not LAYERS:
        raise ValueError("this solver carries no recovered layers; use mode='normalized'")
    n = A.shape[1]
    if (REGIME == "distributed" and n % MACHINES) or (
        REGIME == "constrained" and PROJECTORS is not None and len(PROJECTORS[0]) != n
    ):
        raise ValueError(f"the faithful {REGIME} solver takes the training size, not n = {n}")
    spectral = NORMALIZE == "spectral"  # the prompt scale: ‖A‖₂, else ‖A‖_F, or 1 for "none"
    if NORMALIZE == "none":
        cols = s = 1.0
    elif LOCAL_SCALE:  # each machine its own scale on its A, B columns; C and D in prompt units
        block = n // MACHINES
        machines = [A[:, m * block : (m + 1) * block] for m in range(MACHINES)]
        cols, s = np.repeat([_norm(Am, spectral) for Am in machines], block), 1.0
    else:
        cols = s = _norm(A, spectral)
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


def _normalized(A: Array, B: Array, C: Array, options: "_Options") -> tuple[Array, int, int, str]:
    """EAGLE with ρ_l = ‖A_l‖₂⁻² on the blocks scaled by powers of two: (D, info, steps, reason).

    A tiny singular value grows by 1/(1 − η) a step relative to the top one; once that growth
    passes 1/rcond (numpy's lstsq cutoff) only round-off is left to resolve, and the iteration
    stops there rather than promote it to signal."""
    D = np.zeros((B.shape[0], C.shape[1]))
    if not (np.any(A) and np.any(B) and np.any(C)):
        return D, 0, 0, "exact"
    ea, eb, ec = _exponent(A), _exponent(B), _exponent(C)
    A, B, C = np.ldexp(A, -ea), np.ldexp(B, -eb), np.ldexp(C, -ec)
    v, growth, limit = None, 0.0, _resolution_limit(A.shape)
    info, steps, reason = options.maxiter, options.maxiter, "maxiter"
    for step in range(options.maxiter):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            return D, BREAKDOWN, step, "breakdown"
        A, B, K, v = normalized
        e, g, _ = _schedule(step, options.eta, options.gamma)
        growth += _growth(e)
        if growth > limit:
            info, steps, reason = max(step, 1), step, "resolution limit"
            break
        A, B, C, dD = _eagle_update(A, B, C, K, e, g)
        D = D + dD
        if not (np.all(np.isfinite(D)) and np.all(np.isfinite(A))):
            return D, NONFINITE, step + 1, "non-finite"
        if _norm(dD) <= options.rtol * max(_norm(D), np.finfo(float).tiny):
            info, steps, reason = 0, step + 1, "converged"
            break
    D, representable = _finish(D, eb + ec - ea)
    if not representable:
        _warn("D = B A⁺ C is not representable in float64 at this scale")
        return D, UNREPRESENTABLE, steps, "unrepresentable"
    return D, info, steps, reason


def _normalized_gram(A: Array, B: Array, v: Array | None) -> Blocks | None:
    """(A/‖A‖₂, B/‖A‖₂, their AᵀA, v) (ρ = 1; v warm-starts the power iteration), or None
    when ‖A‖₂ is zero or not finite."""
    K = A.T @ A
    lam, v = _top_eig(K, v)
    if not math.isfinite(lam) or lam <= 0.0:
        return None
    s = math.sqrt(lam)
    return A / s, B / s, K / lam, v


def _eagle_update(A: Array, B: Array, C: Array, K: Array, e: float, g: float) -> Blocks:
    """One EAGLE step with ρ = 1 (K = AᵀA): the new A, B, C and the increment of D."""
    AtC = A.T @ C
    return A - e * (A @ K), B - e * (B @ K), C - g * (A @ AtC), g * (B @ AtC)


def _schedule(step: int, eta: Num, gamma: Num) -> tuple[float, float, str]:
    """(η, γ, source) of `step`: the recovered layer's ("recovered"), then the theory's 1/3 and 1
    ("theory"); eta=, gamma= passed to the solver replace them ("given")."""
    if eta is not None and gamma is not None:
        return float(eta), float(gamma), "given"
    layer = LAYERS[step] if step < len(LAYERS) else {}
    e, g, source = layer.get("eta"), layer.get("gamma"), "recovered"
    if not _usable(e, g):
        e, g, source = THEORY_ETA, THEORY_GAMMA, "theory"
    return (e if eta is None else eta), (g if gamma is None else gamma), source


def _usable(e: Num, g: Num) -> bool:
    """A layer's (η, γ) drive the normalized iteration only where a step contracts: η ∈ (0, 1),
    γ ∈ (0, 2) (the top singular value of A maps to (1 − η)σ, C's part along it to (1 − γ)c)."""
    return e is not None and g is not None and 0.0 < e < 1.0 and 0.0 < g < 2.0


def recovered_layers() -> list[int]:
    """The layers (0-based) whose (η, γ) the normalized mode uses at the step of that index."""
    return [i for i, layer in enumerate(LAYERS) if _usable(layer.get("eta"), layer.get("gamma"))]


class _Options(NamedTuple):
    rtol: float
    maxiter: int
    eta: Num
    gamma: Num

    def stats(self, info: int, iterations: int, reason: str, steps: int) -> Stats:
        """What return_stats reports, with the source of each of the first `steps` steps' (η, γ)."""
        sources = [_schedule(step, self.eta, self.gamma)[2] for step in range(steps)]
        counts = {f"{s}_steps": sources.count(s) for s in ("recovered", "theory", "given")}
        return {"info": info, "iterations": iterations} | counts | {"reason": reason}


# --- numbers at any scale ------------------------------------------------------------------
def _exponent(M: Array) -> int:
    """e with max|M| · 2⁻ᵉ in [0.5, 1) (0 for a zero M): scaling by 2⁻ᵉ is exact."""
    top = float(np.max(np.abs(M))) if np.size(M) else 0.0
    return math.frexp(top)[1] if top > 0.0 and math.isfinite(top) else 0


def _norm(M: Array, spectral: bool = False) -> float:
    """‖M‖_F, or ‖M‖₂ (exact, from the smaller Gram matrix) when spectral, without overflow or
    underflow: M is scaled by a power of two first."""
    e = _exponent(M)
    M = np.ldexp(M, -e)
    if not spectral:
        return math.ldexp(float(np.linalg.norm(M)), e)
    G = M @ M.T if M.shape[0] <= M.shape[1] else M.T @ M
    return math.ldexp(math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0)), e)


def _top_eig(K: Array, v: Array | None = None, iters: int = 30) -> tuple[float, Array]:
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


def _finish(D: Array, e: int) -> tuple[Array, bool]:
    """(D · 2ᵉ, representable): finite and, unless zero, at least the smallest normal number."""
    finite = bool(np.all(np.isfinite(D)))
    if not (finite and np.any(D)):
        return D, finite
    top = _exponent(D) + e
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(D, e)
    return out, np.finfo(np.float64).minexp + 1 <= top <= np.finfo(np.float64).maxexp


def _resolution_limit(shape: tuple[int, ...]) -> float:
    """log of 1 / rcond with rcond = max(shape) · eps (numpy.linalg.lstsq's default cutoff)."""
    return -math.log(max(shape) * EPS)


def _growth(eta: float) -> float:
    """log of the factor 1/(1 − η) by which a step raises a tiny singular value against the top."""
    return -math.log(max(1.0 - eta, 1e-12)) if eta < 1.0 else math.inf


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


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
        interval = f"{'[' if closed else '('}{low:g}, {high:g})"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return x


def _check_options(rtol: Any, maxiter: Any, eta: Any, gamma: Any) -> _Options:
    """The options, validated: rtol in [0, 1), maxiter ≥ 1, eta in (0, 1), gamma in (0, 2)."""
    rtol = _check_number("rtol", rtol, 0.0, 1.0, closed=True)
    if maxiter is None:
        maxiter = DEFAULT_MAXITER
    elif isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    for name, value, high in (("eta", eta, 1.0), ("gamma", gamma, 2.0)):
        if value is not None:
            _check_number(name, value, 0.0, high)
    return _Options(rtol, int(maxiter), eta, gamma)


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
# --- END RECOVERED CONSTANTS ---


# --- the certificate (opt-in) --------------------------------------------------------------
def certify(A: Any, B: Any, C: Any, D: Any, *, rtol: float = 1e-10) -> Stats:
    """Check an answer D against B A⁺ C computed from an SVD of A.

    Returns certified, error_estimate (‖D − B A⁺ C‖_F / ‖B A⁺ C‖_F), bound = max(rtol, 100·κ̂·eps),
    kappa (κ̂ = σ_1/σ_r, r the numerical rank with numpy's lstsq cutoff max(d, n)·eps·σ_1) and
    rank. certified: the estimate is at most bound / 4 (the SVD's own rounding is about κ̂·eps).
    For lstsq's x: certify(A, np.eye(n), b[:, None], x[:, None])."""
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
    e = _exponent(want)
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
    print(f"complete: {stats}\ncertify: {certify(A, B, C, D)}")
