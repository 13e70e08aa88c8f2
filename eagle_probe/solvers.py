"""Least-squares solvers behind one interface, EAGLE among them.

Every solver has the scipy-style signature

    solve(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None) -> (x, info)

for min ‖A x − b‖₂ with A (m, n) dense and b (m,); info 0 converged, > 0 iterations used without
converging, < 0 breakdown; callback(x_k) once per iteration; inputs are never modified. `run()`
wraps any of them and records iterations, wall time, counted FLOPs and the error history against a
reference solution.

FLOPs are counted from the operations each method performs per iteration (a dense m × n matvec is
2mn, an n × n by n × n product 2n³), not measured by hardware counters.

Regimes beyond the centralized one:
  distributed (`distributed_eagle`, `distributed_gd`, `admm`): the n columns of the block prompt's
      A are split over M machines; communication is counted in rounds and floats per machine.
  constrained (`sketched_eagle`, `sketched_sgd`): each step sees an n × r orthogonal sketch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse.linalg as spla

from eagle_probe import eagle
from eagle_probe import solver_template as kernel

Solver = Callable[..., tuple[np.ndarray, int]]


def _scale_free(method: Solver) -> Solver:
    """Run `method` on A and b scaled by powers of two (exact), so that every scale float64
    holds works; validate the options; never return info 0 with a non-finite or
    unrepresentable x (info -3 then, with a RuntimeWarning).

    Ã = 2^-ea A, b̃ = 2^-k b, x̃0 = 2^(ea-k) x0 and x = 2^(k-ea) x̃: the same problem in units
    where max|Ã| and max|b̃| are about one."""

    def solve(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
        A, b, x = _prepare(A, b, x0)
        rtol, atol, _ = kernel.check_options(rtol, atol, None, None, None, callback)
        if maxiter is not None:
            kernel.check_options(rtol, atol, maxiter)
        ea = kernel.exponent(A)
        k = kernel.exponent(b)
        if np.any(x):
            k = max(k, ea + kernel.exponent(x))
        with np.errstate(under="ignore"):
            At, bt, xt = np.ldexp(A, -ea), np.ldexp(b, -k), np.ldexp(x, ea - k)

        def unscale(v):
            with np.errstate(over="ignore", under="ignore"):
                return np.ldexp(v, k - ea)

        inner = (lambda v: callback(unscale(v))) if callback is not None else None
        xt, info = method(
            At,
            bt,
            xt,
            rtol=rtol,
            atol=math.ldexp(atol, -k),
            maxiter=maxiter,
            callback=inner,
        )
        solve.last_iterations = getattr(method, "last_iterations", None)
        out = unscale(xt)
        if info < 0:
            return out, info
        tiny = np.finfo(np.float64).tiny
        if not np.all(np.isfinite(out)) or (np.any(xt) and np.max(np.abs(out)) < tiny):
            import warnings

            warnings.warn(
                "the least-squares solution is not representable in float64 at this scale",
                RuntimeWarning,
                stacklevel=2,
            )
            return out, eagle.UNREPRESENTABLE
        return out, info

    solve.__name__ = method.__name__
    solve.__doc__ = method.__doc__
    solve.last_iterations = None
    return solve


def _prepare(A, b, x0):
    A = kernel.check_matrix("A", A)
    b = kernel.check_matrix("b", np.asarray(b), ndim=1)
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but A has {A.shape[0]}")
    x = np.zeros(A.shape[1]) if x0 is None else kernel.check_matrix("x0", x0, ndim=1)
    if x.shape != (A.shape[1],):
        raise ValueError(f"x0 has shape {x.shape}, expected ({A.shape[1]},)")
    return A, b, x.copy()


def _converged(A, b, x, rtol, atol, norm_a) -> bool:
    """The shared stopping test: consistent residual, or least-squares optimality."""
    r = b - A @ x
    res = float(np.linalg.norm(r))
    return (
        res <= atol + rtol * float(np.linalg.norm(b))
        or float(np.linalg.norm(A.T @ r)) <= rtol * norm_a * res
    )


def _eagle(eta: float, name: str, doc: str) -> Solver:
    """`eagle.lstsq` at step size η (γ = 1) with the common signature."""

    def solve(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
        return eagle.lstsq(
            A,
            b,
            x0,
            rtol=rtol,
            atol=atol,
            maxiter=maxiter,
            callback=callback,
            eta=eta,
            gamma=eagle.THEORY_GAMMA,
        )

    solve.__name__, solve.__qualname__, solve.__doc__ = name, name, doc
    return solve


FAST_ETA = 0.45  # measured: ~25% fewer iterations than the theory's 1/3 at equal accuracy
solve_eagle = _eagle(
    eagle.THEORY_ETA,
    "solve_eagle",
    "EAGLE (Algorithm 1, η = 1/3, γ = 1, ρ per step); see `eagle.lstsq`.",
)
solve_eagle_fast = _eagle(
    FAST_ETA,
    "solve_eagle_fast",
    "EAGLE with η = 0.45 (instead of the theory's 1/3), γ = 1; same stopping rule.",
)


def solve_lstsq(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
    """LAPACK gelsd (SVD) with numpy's cutoff rcond = max(m, n)·eps; one 'iteration'.

    x = x0 + A⁺(b − A x0), like every solver here (x0's null-space component is kept)."""
    A, b, x0 = _prepare(A, b, x0)
    cond = max(A.shape) * np.finfo(np.float64).eps
    r = b - A @ x0
    x = x0 + scipy.linalg.lstsq(A, r, cond=cond, lapack_driver="gelsd", check_finite=False)[0]
    if callback is not None:
        callback(x.copy())
    return x, 0


def _scipy_counted(method):
    def solve(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
        A, b, x = _prepare(A, b, x0)
        maxiter = 20 * A.shape[1] if maxiter is None else maxiter
        op = spla.aslinearoperator(A)
        if method == "cg":
            AtA = spla.LinearOperator(
                (A.shape[1],) * 2, matvec=lambda v: A.T @ (A @ v), dtype=np.float64
            )
            rhs = A.T @ b
            x, info = spla.cg(
                AtA,
                rhs,
                x0=x,
                rtol=rtol,
                atol=atol,
                maxiter=maxiter,
                callback=(lambda xk: callback(xk.copy())) if callback else None,
            )
            return x, (0 if info == 0 else maxiter if info > 0 else -1)
        fn = spla.lsqr if method == "lsqr" else spla.lsmr
        out = (
            fn(op, b, atol=rtol, btol=rtol, maxiter=maxiter, x0=x)
            if method == "lsmr"
            else fn(op, b, atol=rtol, btol=rtol, iter_lim=maxiter, x0=x)
        )
        x, istop, itn = out[0], out[1], out[2]
        solve.last_iterations = int(itn)  # scipy's lsqr/lsmr take no per-iteration callback
        if callback is not None:
            callback(x.copy())
        return x, (0 if istop in (1, 2, 4, 5) else itn if istop == 7 else -1)

    solve.__name__ = f"solve_{method}"
    solve.__doc__ = (
        f"scipy.sparse.linalg {method} ({'on the normal equations' if method == 'cg' else 'on A'})."
    )
    return solve


solve_cg = _scale_free(_scipy_counted("cg"))
solve_lsqr = _scale_free(_scipy_counted("lsqr"))
solve_lsmr = _scale_free(_scipy_counted("lsmr"))


def solve_gd(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
    """Gradient descent with step 1/σ_max(A)²."""
    A, b, x = _prepare(A, b, x0)
    maxiter = 100 * A.shape[1] if maxiter is None else maxiter
    norm_a = eagle.spectral_norm(A)
    if norm_a == 0:
        return x, 0
    step = 1.0 / norm_a**2
    for _ in range(maxiter):
        x = x + step * (A.T @ (b - A @ x))
        if callback is not None:
            callback(x.copy())
        if not np.all(np.isfinite(x)):
            return x, -1
        if _converged(A, b, x, rtol, atol, norm_a):
            return x, 0
    return x, maxiter


def solve_lbfgs(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
    """L-BFGS-B (scipy.optimize) on ½‖A x − b‖²; gtol scaled by ‖A‖₂‖b‖."""
    A, b, x = _prepare(A, b, x0)
    maxiter = 20 * A.shape[1] if maxiter is None else maxiter
    norm_a = eagle.spectral_norm(A)

    def fun(v):
        r = A @ v - b
        return 0.5 * float(r @ r), A.T @ r

    res = scipy.optimize.minimize(
        fun,
        x,
        jac=True,
        method="L-BFGS-B",
        callback=(lambda xk: callback(np.array(xk, copy=True))) if callback else None,
        options={
            "maxiter": maxiter,
            "gtol": rtol * norm_a * max(np.linalg.norm(b), 1e-300),
            "ftol": 0.0,
            "maxcor": 20,
        },
    )
    x = res.x
    ok = res.success or _converged(A, b, x, max(rtol, 1e-13), atol, norm_a)
    return x, (0 if ok else max(res.nit, 1))


def solve_newton_schulz(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
    """Newton–Schulz iteration for A⁺: X ← X (2I − A X), X_0 = Aᵀ/σ_max², x = X b."""
    A, b, x = _prepare(A, b, x0)
    maxiter = 200 if maxiter is None else maxiter
    norm_a = eagle.spectral_norm(A)
    if norm_a == 0:
        return x, 0
    r0 = b - A @ x
    X = A.T / norm_a**2
    prev = X @ r0
    for _ in range(maxiter):
        X = 2 * X - X @ (A @ X)
        xk = x + X @ r0
        if callback is not None:
            callback(xk.copy())
        if not np.all(np.isfinite(xk)):
            return xk, -1
        if _converged(A, b, xk, rtol, atol, norm_a) or np.linalg.norm(xk - x - prev) <= (
            rtol * np.linalg.norm(xk)
        ):
            return xk, 0
        prev = xk - x
    return x + X @ r0, maxiter


solve_lstsq = _scale_free(solve_lstsq)
solve_gd = _scale_free(solve_gd)
solve_lbfgs = _scale_free(solve_lbfgs)
solve_newton_schulz = _scale_free(solve_newton_schulz)

SOLVERS: dict[str, Solver] = {
    "eagle": solve_eagle,
    "eagle_fast": solve_eagle_fast,
    "lstsq": solve_lstsq,
    "cg": solve_cg,
    "lsqr": solve_lsqr,
    "lsmr": solve_lsmr,
    "gd": solve_gd,
    "lbfgs": solve_lbfgs,
    "newton_schulz": solve_newton_schulz,
}


def solve_eagle_torch(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None):
    """`solve_eagle` in torch on A's device, for one problem A (m, n) or a batch (p, m, n), in
    float32 or float64, with the same info contract (`eagle_probe.torch_eagle`)."""
    from eagle_probe.torch_eagle import solve_eagle_torch as solve

    return solve(A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback)


def lstsq_torch(A, b, *, driver: str | None = None):
    """torch.linalg.lstsq on A's device, batched like `solve_eagle_torch`: (x, driver used);
    the driver defaults to gelsd on the CPU and gels (the only one) on CUDA."""
    from eagle_probe.torch_eagle import lstsq_torch as solve

    return solve(A, b, driver=driver)


def flops_per_iteration(name: str, m: int, n: int) -> float:
    """Counted FLOPs of one iteration (one solve for lstsq) on a dense m × n problem."""
    matvec = 2.0 * m * n
    return {
        "eagle": 4.0 * m * n * n + 2.0 * n**3 + 4 * matvec,  # Gram, A K, M K, residuals
        "eagle_fast": 4.0 * m * n * n + 2.0 * n**3 + 4 * matvec,
        "lstsq": 4.0 * m * n * n + 8.0 * n**3,  # bidiagonalisation + SVD (model count)
        "cg": 2 * matvec,
        "lsqr": 2 * matvec,
        "lsmr": 2 * matvec,
        "gd": 2 * matvec,
        "lbfgs": 2 * matvec + 4.0 * 20 * n,
        "newton_schulz": 4.0 * m * n * n,
    }[name]


def solver(name: str) -> Solver:
    if name not in SOLVERS:
        raise ValueError(f"unknown solver {name!r}; choose from {', '.join(SOLVERS)}")
    return SOLVERS[name]


@dataclass
class Run:
    """One solver on one problem."""

    name: str
    info: int
    iterations: int
    seconds: float
    flops: float
    error: float  # final ‖x − x_ref‖ / ‖x_ref‖ (NaN without reference)
    history: list[float] = field(default_factory=list)  # error after each iteration
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "solver": self.name,
            "info": self.info,
            "iterations": self.iterations,
            "seconds": self.seconds,
            "error": self.error,  # beside the time: a fast wrong answer is no success
            "flops": self.flops,
        } | self.extra


def run(name: str, A, b, *, reference=None, rtol=1e-10, maxiter=None, record=True) -> Run:
    """Run solver `name` with timing, FLOP count and (if `reference`) the error history.

    The history callback costs one vector norm per iteration and is excluded from `seconds` only
    approximately; pass record=False for clean timings.
    """
    fn = solver(name)
    history: list[float] = []
    count = [0]
    ref_norm = float(np.linalg.norm(reference)) if reference is not None else math.nan

    def callback(xk):
        count[0] += 1
        if record and reference is not None:
            history.append(float(np.linalg.norm(xk - reference)) / max(ref_norm, 1e-300))

    fn.last_iterations = None
    start = time.perf_counter()
    x, info = fn(A, b, rtol=rtol, maxiter=maxiter, callback=callback)
    seconds = time.perf_counter() - start
    m, n = np.shape(A)
    iterations = fn.last_iterations or max(count[0], 1)
    error = (
        float(np.linalg.norm(x - reference)) / max(ref_norm, 1e-300)
        if reference is not None
        else math.nan
    )
    return Run(
        name,
        int(info),
        iterations,
        seconds,
        iterations * flops_per_iteration(name, m, n),
        error,
        history,
    )


# --- distributed regime: the columns of the block prompt's A are split over M machines -------
#
# Least-squares reading: w (d' × d) minimises ‖w A − B‖_F over the n samples (columns), machine μ
# holding A^μ, B^μ; the answer is D = w C. Every method reports rounds and floats sent per
# machine per round; the error is ‖D_k − D*‖_F / ‖D*‖_F against D* = B A⁺ C.


def _split(A, B, machines):
    parts = eagle.split_columns(A.shape[1], machines)
    return [A[:, p] for p in parts], [B[:, p] for p in parts]


def _rel(D, ref):
    return float(np.linalg.norm(D - ref)) / max(float(np.linalg.norm(ref)), 1e-300)


def distributed_eagle(A, B, C, machines, reference, *, eps=1e-8, maxiter=500):
    """Rounds of distributed EAGLE (eagle.complete_distributed) to reach eps."""
    errors = []

    class Reached(Exception):
        pass

    def callback(D):
        errors.append(_rel(D, reference))
        if errors[-1] <= eps:
            raise Reached

    per_round = (A.shape[0] + B.shape[0]) * C.shape[1]
    try:
        eagle.complete_distributed(A, B, C, machines, rtol=0.0, maxiter=maxiter, callback=callback)
    except Reached:
        pass
    return {
        "method": "eagle",
        "rounds": len(errors),
        "error": errors[-1],
        "floats_per_round": per_round,
    }


def distributed_gd(A, B, C, machines, reference, *, eps=1e-8, maxiter=20000):
    """Gradient descent on w with step 1/‖A‖₂²: one all-reduce of the d' × d gradient a round."""
    As, Bs = _split(A, B, machines)
    w, rounds, error = gd_rounds(A, As, Bs, C, reference, sum, eps, maxiter)
    return {
        "method": "distributed_gd",
        "rounds": rounds,
        "error": error,
        "floats_per_round": w.size,
    }


def gd_rounds(A, As, Bs, C, reference, reduce, eps, maxiter):
    """Distributed gradient descent on w (d' × d) from w = 0, step 1/‖A‖₂² (A: all columns):
    each round reduce([(w A^μ − B^μ) A^μᵀ for the machines this process holds]) sums the
    gradients over all machines and w ← w − step · gradient; stops once ‖w C − D*‖_F ≤ eps ‖D*‖_F
    (D* = `reference`) or at maxiter. Written once for the simulation here (reduce = sum) and
    the worker processes (`dist.gd_worker`: all_reduce). Returns (w, rounds, error)."""
    w = np.zeros((Bs[0].shape[0], A.shape[0]))
    step = 1.0 / max(eagle.spectral_norm(A) ** 2, 1e-300)
    error = _rel(w @ C, reference)
    rounds = 0
    for rounds in range(1, maxiter + 1):  # noqa: B007 - the count is returned
        w = w - step * reduce([(w @ Am - Bm) @ Am.T for Am, Bm in zip(As, Bs, strict=True)])
        error = _rel(w @ C, reference)
        if error <= eps:
            break
    return w, rounds, error


def admm(A, B, C, machines, reference, *, eps=1e-8, maxiter=20000, rho=None):
    """Consensus ADMM on w; machine μ solves its regularised local problem exactly.

    rho defaults to ‖A‖₂² / M. One round sends the d' × d vector w_μ + u_μ per machine.
    """
    As, Bs = _split(A, B, machines)
    rho = admm_rho(A, machines, rho)
    z, rounds, error = admm_rounds(As, Bs, C, reference, rho, machines, sum, eps, maxiter)
    return {
        "method": "admm",
        "rounds": rounds,
        "error": error,
        "floats_per_round": z.size,
        "rho": rho,
    }


def admm_rho(A, machines, rho=None) -> float:
    """ADMM's penalty: `rho` when given, else ‖A‖₂² / M."""
    return eagle.spectral_norm(A) ** 2 / machines if rho is None else rho


def admm_rounds(As, Bs, C, reference, rho, machines, reduce, eps, maxiter):
    """Consensus ADMM on w (d' × d) over `machines`, of which this process holds As, Bs: each
    machine solves w_μ (A^μ A^μᵀ + ρ I) = B^μ A^μᵀ + ρ (z − u_μ) by its Cholesky factor,
    reduce([w_μ + u_μ, ...]) sums over all machines, z is their mean and u_μ ← u_μ + w_μ − z;
    stops as `gd_rounds` does. Written once for the simulation here (reduce = sum) and the worker
    processes (`dist.admm_worker`: all_reduce). Returns (z, rounds, error)."""
    d = As[0].shape[0]
    factors = [np.linalg.cholesky(Am @ Am.T + rho * np.eye(d)) for Am in As]
    rhs = [Bm @ Am.T for Am, Bm in zip(As, Bs, strict=True)]
    ws = [np.zeros((Bs[0].shape[0], d)) for _ in As]
    us = [np.zeros_like(w) for w in ws]
    z = np.zeros_like(ws[0])
    error, rounds = _rel(z @ C, reference), 0
    for rounds in range(1, maxiter + 1):  # noqa: B007 - the count is returned
        for mu, L in enumerate(factors):
            target = rhs[mu] + rho * (z - us[mu])  # w (A Aᵀ + ρ I) = target
            ws[mu] = scipy.linalg.cho_solve((L, True), target.T).T
        z = reduce([w + u for w, u in zip(ws, us, strict=True)]) / machines
        for mu in range(len(ws)):
            us[mu] = us[mu] + ws[mu] - z
        error = _rel(z @ C, reference)
        if error <= eps:
            break
    return z, rounds, error


def diversity_index(A, machines) -> float:
    """Smallest positive eigenvalue of the mean of the machines' projections onto range(A^μ)."""
    As, _ = _split(A, A[:1], machines)
    P = np.zeros((A.shape[0], A.shape[0]))
    for Am in As:
        U, s, _ = np.linalg.svd(Am, full_matrices=False)
        k = int(np.sum(s > 1e-10 * max(s.max(), 1e-300)))
        P += U[:, :k] @ U[:, :k].T
    ev = np.linalg.eigvalsh(P / machines)
    positive = ev[ev > 1e-10]
    return float(positive.min()) if positive.size else 0.0


# --- constrained regime: every step sees an n × r orthogonal sketch of the samples ----------


def sketched_sgd(A, B, C, r, rng, reference, *, steps, lr=1.0):
    """Sketched gradient descent on w: w ← w − lr/‖A S‖₂² (w A S − B S)(A S)ᵀ, S fresh each
    step. Returns the error after each step and the FLOPs per step."""
    n = A.shape[1]
    w = np.zeros((B.shape[0], A.shape[0]))
    errors = []
    for _ in range(steps):
        S, _ = np.linalg.qr(rng.standard_normal((n, r)))
        As, Bs = A @ S, B @ S
        step = lr / max(float(np.linalg.norm(As, 2)) ** 2, 1e-300)
        w = w - step * (w @ As - Bs) @ As.T
        errors.append(_rel(w @ C, reference))
    d, dp = A.shape[0], B.shape[0]
    flops = 2.0 * n * r * (d + dp) + 2 * n * r * r + 4.0 * dp * d * r + 2.0 * d * r * r
    return errors, flops


def sketched_eagle_errors(A, B, C, r, rng, reference, *, steps):
    """Sketched EAGLE: error after each step (fresh sketch per step) and the FLOPs per step."""
    errors: list[float] = []
    eagle.complete_sketched(
        A,
        B,
        C,
        r,
        rng,
        rtol=0.0,
        maxiter=steps,
        eta=eagle.THEORY_ETA,
        gamma=eagle.THEORY_GAMMA,
        callback=lambda D: errors.append(_rel(D, reference)),
    )
    n = A.shape[1]
    d, dp, q = A.shape[0], B.shape[0], C.shape[1]
    flops = (
        2.0 * n * r * (d + dp)
        + 2 * n * r * r
        + 2.0 * d * r * r
        + 4.0 * (d + dp) * r * q
        + 2.0 * (d + dp) * r * r
        + 2.0 * (d + dp) * r * n
    )
    return errors, flops
