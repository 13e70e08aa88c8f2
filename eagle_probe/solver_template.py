"""EAGLE solver: the algorithm recovered from a linear-attention transformer.

This module imports only NumPy. `eagle-probe extract --out DIR` writes a copy of it to
DIR/solver.py with the recovered coefficients filled in below; eagle-probe itself uses it as the
reference EAGLE (Algorithm 1 of "Linear Transformers Implicitly Discover Unified Numerical
Algorithms", NeurIPS 2025).

Block prompt: X = [[A, C], [B, D]] with rank X = rank A; D = B A⁺ C. One EAGLE step, ρ = ‖A‖₂⁻²:

    A ← A − ηρ A AᵀA      B ← B − ηρ B AᵀA      C ← C − γρ A Aᵀ C      D ← D + γρ B Aᵀ C

API
    complete(A, B, C, *, mode="normalized", rtol=1e-10, maxiter=None) -> D
    lstsq(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None) -> (x, info)
    complete_distributed(A, B, C, machines, ...) -> (D, stats)
    complete_sketched(A, B, C, r, rng, ...) -> (D, stats)

Modes of `complete`:
    faithful    the network layer by layer: its prompt normalisation, then one EAGLE step per layer
                with the recovered constant coefficients a_l, c_l (internal units).
    normalized  per-problem ρ_l = ‖A_l‖₂⁻² at every step, the recovered η_l, γ_l for the trained
                depth and then the theory's η = 1/3, γ = 1, until the stopping rule: any size,
                any scale, any number of steps.
`info`: 0 converged, > 0 the iterations used without converging, < 0 breakdown (non-finite
numbers appeared). Inputs are never modified.
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
    return M.astype(np.float64, copy=True)


def _check_blocks(A, B, C):
    A, B, C = _check_matrix("A", A), _check_matrix("B", B), _check_matrix("C", C)
    if B.shape[1] != A.shape[1]:
        raise ValueError(f"B has {B.shape[1]} columns but A has {A.shape[1]}")
    if C.shape[0] != A.shape[0]:
        raise ValueError(f"C has {C.shape[0]} rows but A has {A.shape[0]}")
    return A, B, C


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
    """‖A‖₂ (exact, via the smaller Gram matrix)."""
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return math.sqrt(max(float(np.linalg.eigvalsh(G)[-1]), 0.0))


def _prompt_scale(A):
    if NORMALIZE == "spectral":
        return _spectral_norm(A)
    if NORMALIZE == "frobenius":
        return float(np.linalg.norm(A))
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
        return np.zeros((B.shape[0], C.shape[1]))
    A, B, C = A / s, B / s, C / s
    D = np.zeros((B.shape[0], C.shape[1]))
    for layer, coef in enumerate(LAYERS):
        a, c = coef["a_step"], coef["c_step"]
        K = _gram(A, layer)
        Aq = _query(A, layer)
        AtC = Aq.T @ C
        A, B, C, D = A - a * (A @ K), B - a * (B @ K), C - c * (A @ AtC), D + c * (B @ AtC)
    return D * s


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
    (dC, dD, Am, Bm), with ρ_μ = ‖A^μ‖₂⁻² from its local Gram matrix (zero updates when A^μ = 0)."""
    K = Am.T @ Am
    lam = float(np.linalg.eigvalsh(K)[-1]) if K.shape[0] <= 64 else _top_eig(K)[0]
    if lam <= 0.0:
        return np.zeros_like(C), np.zeros((Bm.shape[0], C.shape[1])), Am, Bm
    AtC = Am.T @ C
    dC = -g / lam * (Am @ AtC)
    dD = g / lam * (Bm @ AtC)
    return dC, dD, Am - e / lam * (Am @ K), Bm - e / lam * (Bm @ K)


def schedule(step, eta=None, gamma=None):
    """(η, γ) of `step`: the recovered per-layer values, then the theory's 1/3 and 1."""
    if eta is not None and gamma is not None:
        return eta, gamma
    if step < len(LAYERS):
        e, g = LAYERS[step].get("eta"), LAYERS[step].get("gamma")
        if e is not None and g is not None and 0.0 < e < 1.0 and 0.0 < g < 2.0:
            return (e if eta is None else eta), (g if gamma is None else gamma)
    return (THEORY_ETA if eta is None else eta), (THEORY_GAMMA if gamma is None else gamma)


def complete(
    A, B, C, *, mode="normalized", rtol=1e-10, maxiter=None, eta=None, gamma=None, return_info=False
):
    """Estimate D = B A⁺ C from the visible blocks A (d, n), B (d', n), C (d, n').

    Stopping rule (normalized): stop after the first step whose update of D is at most
    rtol · ‖D‖_F; info 0. `return_info=True` returns (D, info, iterations).
    """
    A, B, C = _check_blocks(A, B, C)
    if mode == "faithful":
        D = _faithful(A, B, C)
        return (D, 0, len(LAYERS)) if return_info else D
    if mode != "normalized":
        raise ValueError(f"unknown mode {mode!r}; choose from faithful, normalized")
    maxiter = DEFAULT_MAXITER if maxiter is None else int(maxiter)
    D = np.zeros((B.shape[0], C.shape[1]))
    s0 = float(np.abs(A).max())
    if s0 == 0.0:
        return (D, 0, 0) if return_info else D
    # Scale A and B together (B A⁺ is unchanged) and keep ‖A‖₂ = 1: ρ = 1 at every step.
    A, B = A / s0, B / s0
    v, info, it = None, maxiter, 0
    growth, limit = 0.0, _resolution_limit(A.shape)
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(A, B, v)
        if normalized is None:
            info = -1
            break
        A, B, K, v = normalized
        e, g = schedule(it - 1, eta, gamma)
        growth += _growth(e)
        if growth > limit:
            info = 0
            break
        A, B, C, dD = _eagle_update(A, B, C, K, e, g)
        D = D + dD
        if not np.all(np.isfinite(D)):
            info = -2
            break
        if np.linalg.norm(dD) <= rtol * np.linalg.norm(D):
            info = 0
            break
    return (D, info, it) if return_info else D


def lstsq(
    A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None, eta=None, gamma=None
):
    """Least-squares solution of min ‖A x − b‖₂ by EAGLE (minimum-norm when rank deficient).

    A (m, n), b (m,) or (m, k). The prompt is [[A, b], [I_n, 0]], so the D block is x = A⁺ b and
    the C block is the residual r = b − A x. ρ = ‖A_l‖₂⁻² per step by warm-started power
    iteration on the n × n Gram matrix. With x0, the correction A⁺(b − A x0) is added to x0.

    Stopping rule, checked after every step k (x_k, r_k = b − A x_k in the original A): stop when
        ‖x_k − x_{k−1}‖ ≤ rtol ‖x_k − x_0‖   and one of
        ‖r_k‖ ≤ atol + rtol ‖b‖  (consistent),  ‖Aᵀ r_k‖ ≤ rtol ‖A‖₂ ‖r_k‖  (least-squares optimal),
        ‖r_k‖ ≥ (1 − 1e-3) ‖r_{k−1}‖  (the residual no longer decreases);
    or as soon as ‖r_k‖ ≤ atol when atol > 0.
    The iteration also stops (info 0) and returns its best iterate when ‖Aᵀ r_k‖, having reached
    1e-13 ‖A‖₂‖r_k‖, grows 1000-fold again (round-off in the null space of a rank-deficient A being
    amplified), or once only singular values below rcond = max(m, n)·eps are left to resolve: it
    never drifts away from a converged answer, even when rtol cannot be reached.
    Returns (x, info): info 0 converged, > 0 maxiter reached, < 0 breakdown. callback(x_k) is
    called once per iteration.
    """
    A = _check_matrix("A", A)
    b_in = np.asarray(b)
    vector = b_in.ndim == 1
    b = _check_matrix("b", b_in.reshape(-1, 1) if vector else b_in)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    m, n = A.shape
    x = np.zeros((n, b.shape[1]))
    if x0 is not None:
        x0 = _check_matrix("x0", np.asarray(x0).reshape(-1, 1) if vector else x0)
        if x0.shape != x.shape:
            raise ValueError(f"x0 has shape {x0.shape}, expected {x.shape}")
        x = x0.copy()
    shape = (lambda v: v[:, 0]) if vector else (lambda v: v)
    maxiter = DEFAULT_MAXITER if maxiter is None else int(maxiter)
    s0 = float(np.abs(A).max())
    r = b - A @ x
    bnorm = float(np.linalg.norm(b))
    if s0 == 0.0 or float(np.linalg.norm(r)) <= atol + rtol * bnorm:
        return shape(x), 0
    # Work on Ã = A / s0: the D block y accumulates Ã⁺ r = s0 A⁺ r, so x = x0 + y / s0.
    At = A / s0
    norm_a = _spectral_norm(At)
    Al, M = At.copy(), np.eye(n)  # A_l = Ã m_l(ÃᵀÃ) and B_l = m_l(ÃᵀÃ)
    C = r.copy()
    y = np.zeros_like(x)
    v, info = None, maxiter
    prev_res = math.inf
    growth, limit = 0.0, _resolution_limit(A.shape)
    best = (math.inf, x)
    for it in range(1, maxiter + 1):
        normalized = _normalized_gram(Al, M, v)
        if normalized is None:
            info = -1
            break
        Al, M, K, v = normalized
        e, g = schedule(it - 1, eta, gamma)
        growth += _growth(e)
        if growth > limit:  # only noise below rcond is left to resolve: stop, like an rcond
            info = 0
            break
        Al, M, C, step = _eagle_update(Al, M, C, K, e, g)
        y = y + step
        if not (np.all(np.isfinite(y)) and np.all(np.isfinite(Al))):
            info = -2
            break
        xk = x + y / s0
        if callback is not None:
            callback(shape(xk.copy()))
        rk = b - A @ xk
        res = float(np.linalg.norm(rk))
        grad = float(np.linalg.norm(At.T @ rk))
        small_step = np.linalg.norm(step) <= rtol * np.linalg.norm(y)
        if grad < best[0]:
            best = (grad, xk)
        elif grad > 1e3 * best[0] and best[0] <= 1e-13 * norm_a * res:
            # Optimality had been reached and is now lost: round-off in the null space of a
            # rank-deficient A is being amplified. Return the best iterate.
            x, y, s0 = best[1], np.zeros_like(y), 1.0
            info = 0
            break
        # A small residual alone does not pin x down when A is ill-conditioned: also ask for a
        # step that no longer moves x (convergence is quadratic by then, so this costs ~1 step).
        optimal = (
            res <= atol + rtol * bnorm
            or grad <= rtol * norm_a * res
            or res >= prev_res * (1 - 1e-3)
        )
        if (small_step and optimal) or (atol > 0 and res <= atol):
            info = 0
            break
        prev_res = res
    return shape(x + y / s0), info


def _split_columns(n, machines):
    bounds = np.linspace(0, n, machines + 1).round().astype(int)
    return [slice(bounds[i], bounds[i + 1]) for i in range(machines)]


def complete_distributed(
    A, B, C, machines, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Distributed EAGLE: machine μ holds the columns A^μ, B^μ; C and D are replicated.

    Each round, machine μ computes its local update γρ_μ B^μ A^μᵀ C (and A^μ A^μᵀ C); the
    machines average these (one all-reduce of (d + d') × n' floats per machine) and each updates
    its own A^μ, B^μ with its local Gram matrix. Returns (D, stats) with rounds, floats sent per
    machine per round and in total, and info. callback(D_k) runs after every round.
    """
    A, B, C = _check_blocks(A, B, C)
    n = A.shape[1]
    if not isinstance(machines, int) or machines < 1 or machines > n:
        raise ValueError(f"machines must be an integer in [1, {n}], got {machines!r}")
    maxiter = DEFAULT_MAXITER if maxiter is None else int(maxiter)
    parts = _split_columns(n, machines)
    As = [A[:, p].copy() for p in parts]
    Bs = [B[:, p].copy() for p in parts]
    D = np.zeros((B.shape[0], C.shape[1]))
    per_round = (A.shape[0] + B.shape[0]) * C.shape[1]
    info, rounds = maxiter, 0
    if float(np.abs(A).max()) == 0.0:
        return D, {
            "rounds": 0,
            "floats_per_machine_round": per_round,
            "floats_per_machine": 0,
            "info": 0,
        }
    for it in range(1, maxiter + 1):
        rounds = it
        e, g = schedule(it - 1, eta, gamma)
        dC = np.zeros_like(C)
        dD = np.zeros_like(D)
        for mu in range(machines):
            dC_mu, dD_mu, As[mu], Bs[mu] = _local_round(As[mu], Bs[mu], C, e, g)
            dC += dC_mu
            dD += dD_mu
        C = C + dC / machines
        D = D + dD / machines
        if callback is not None:
            callback(D.copy())
        if not np.all(np.isfinite(D)):
            info = -2
            break
        if np.linalg.norm(dD / machines) <= rtol * np.linalg.norm(D):
            info = 0
            break
    stats = {
        "rounds": rounds,
        "floats_per_machine_round": per_round,
        "floats_per_machine": rounds * per_round,
        "info": info,
    }
    return D, stats


def complete_sketched(
    A, B, C, r, rng, *, rtol=1e-10, maxiter=None, eta=None, gamma=None, callback=None
):
    """Sketched EAGLE: a fresh random orthogonal n × r sketch S every step (Ã = A S, B̃ = B S).

    rng: a numpy.random.Generator. Returns (D, stats) with iterations and info. callback(D_k) runs
    after every step.
    """
    A, B, C = _check_blocks(A, B, C)
    n = A.shape[1]
    if not isinstance(r, int) or not 1 <= r <= n:
        raise ValueError(f"sketch size r must be an integer in [1, {n}], got {r!r}")
    maxiter = DEFAULT_MAXITER if maxiter is None else int(maxiter)
    D = np.zeros((B.shape[0], C.shape[1]))
    info, it = maxiter, 0
    if float(np.abs(A).max()) == 0.0:
        return D, {"iterations": 0, "info": 0}
    quiet = 0
    for it in range(1, maxiter + 1):
        S, _ = np.linalg.qr(rng.standard_normal((n, r)))
        As, Bs = A @ S, B @ S
        Ks = As.T @ As
        lam = float(np.linalg.eigvalsh(Ks)[-1])
        if lam <= 0.0:
            continue
        e, g = schedule(it - 1, eta, gamma)
        AtC = As.T @ C
        dD = g / lam * (Bs @ AtC)
        C = C - g / lam * (As @ AtC)
        A = A - e / lam * (As @ Ks @ S.T)
        B = B - e / lam * (Bs @ Ks @ S.T)
        D = D + dD
        if callback is not None:
            callback(D.copy())
        if not np.all(np.isfinite(D)):
            info = -2
            break
        quiet = quiet + 1 if np.linalg.norm(dD) <= rtol * np.linalg.norm(D) else 0
        if quiet >= 3:  # a random sketch can miss the remaining error once; ask for three
            info = 0
            break
    return D, {"iterations": it, "info": info}
