"""The best EAGLE the regime allows, found by an optimizer that converges.

Only the 2L step sizes θ = (a_0 … a_{L−1}, c_0 … c_{L−1}) are free; the prompts are scaled and read
out as the network does. Two targets:

- `optimal`: closest to the true D (what the architecture could reach running EAGLE);
- `distilled`: closest to the network's own predictions (the EAGLE that best imitates it).

The fit is Levenberg–Marquardt on the mean squared residual with the exact Jacobian, propagated
forward through the EAGLE recursion alongside the iterate (forward-mode: per layer
dA' = dA − da·AK − a(dA K + A dK), dK = Π(dAᵀA + AᵀdA), and likewise for B, C, D), started from
the steps the weights imply (view `projection`). It stops when the gradient of the loss, relative
to the loss, is below `gtol` — a stationary point, reported with its final gradient norm — or
after `max_iter` iterations, with `converged: false`.

The loss has many stationary points, so `optimal` is the best of a multi-start (`multistart`):
the weight-read steps, the theory's (η, γ) = (1/3, 1), the paper's (1, 1.9), the minimax
(4/3, 4/3) and random normalised and jittered steps, each screened by a few iterations on a few
tuning prompts; the weight-read and minimax starts and the best screens are refined on every
tuning prompt and the lowest is continued to convergence. A start that blows up (non-finite, or
above the zero predictor) on the tuning prompts or on a fresh validation draw as large as the
held-out set (`Context.validation`: steps pushed to the edge of stability on the tuning prompts
can diverge on rare others) is never the best. Every start is reported with its initial and final
loss, and the best, median, spread and count within 1% of the best over them. `distilled` is
fitted from the weight-read steps alone.

Sample layout: the same fit over the steps of its row-tied family (view `eagle`; B moves with c
and C with a), i.e. the best GD++ with the network's number of layers.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from eagle_probe.fit.base import (
    Context,
    Extraction,
    HeldOut,
    ViewResult,
    affordable,
    prompt_tails,
    register,
)
from eagle_probe.fit.families import of_geometry
from eagle_probe.fit.geometry import Geometry
from eagle_probe.wording import number, plural, ratio, step_list, value

# Converged: no single step size, changed by a relative ε, changes the loss by more than
# GTOL · ε relative, i.e. max_i |θ_i ∂L/∂θ_i| ≤ GTOL · L (a stationary point up to round-off).
GTOL = 1e-6
EXACT = 1e-12  # or the fit is exact: RMS residual ≤ EXACT × RMS target


def _right(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """X_p M for tangents X (b, p, r, k) and a matrix M (b, k, m): one flat batched product."""
    b, p, r, k = X.shape
    return (X.reshape(b, p * r, k) @ M).reshape(b, p, r, M.shape[-1])


def _left(M: np.ndarray, X: np.ndarray) -> np.ndarray:
    """M X_p for a matrix M (b, r, k) and tangents X (b, p, k, m)."""
    return M[:, None] @ X


def _grow(X: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Tangents X (b, p, …) with one more, `new` (b, …), appended: (b, p + 1, …)."""
    return np.concatenate([X, new[:, None]], axis=1)


def _rows_jacobian(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`eagle_jacobian` for the sample layout's row-tied family (B moves with c and C with a), with
    every tangent carried through every block."""
    L = len(a_steps)
    s = geo.scales(z0) if scale is None else scale
    A, B, C, D = (x.copy() for x in geo.blocks(z0 / s))
    D[...] = 0.0
    b, p = z0.shape[0], 2 * L
    dA, dB, dC, dD = (np.zeros((b, p) + x.shape[1:]) for x in (A, B, C, D))
    sign = geo.step_sign  # the label step acts on the stream as σ c (`Geometry.step_sign`)
    with np.errstate(over="ignore", invalid="ignore"):
        for layer in range(L):
            a, c = a_steps[layer], sign * c_steps[layer]
            At = A.swapaxes(-1, -2)
            K = geo.gram_map(At @ A, layer)  # (b, n, n)
            X = _left(At, dA)  # Aᵀ dA: (b, p, n, n)
            dK = geo.gram_map(X + X.swapaxes(-1, -2), layer)
            P = geo.query_operator(layer)
            M = P @ (At @ C)  # (b, n, n')
            dM = P @ (_left(At, dC) + _right(dA.swapaxes(-1, -2), C))  # (b, p, n, n')
            AK, BK, AM, BM = A @ K, B @ K, A @ M, B @ M
            # EAGLE: B moves with a and C with c; the sample layout's family swaps them
            sB, iB, sC, iC = (c, L + layer, a, layer) if geo.samples else (a, layer, c, L + layer)
            nA = dA - a * (_right(dA, K) + _left(A, dK))
            nB = dB - sB * (_right(dB, K) + _left(B, dK))
            nC = dC - sC * (_right(dA, M) + _left(A, dM))
            nD = dD - c * (_right(dB, M) + _left(B, dM))
            nA[:, layer] -= AK
            nB[:, iB] -= BK
            nC[:, iC] -= AM
            nD[:, L + layer] -= BM
            dA, dB, dC, dD = nA, nB, nC, nD
            A, B, C, D = A - a * AK, B - sB * BK, C - sC * AM, D - c * BM
        pred = geo.readout * D * geo.d_scale(s)
        jac = geo.readout * dD * geo.d_scale(s)[:, None]
        jac[:, L:] *= sign  # ∂/∂c = σ ∂/∂(σ c)
    return pred, jac


def eagle_jacobian(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE's prediction (b, d', n') in prompt units and its Jacobian (b, 2L, d', n')
    with respect to (a_0 … a_{L−1}, c_0 … c_{L−1}); `scale` is geo.scales(z0) if given.

    Plain prompts (b, d + d', n + n'): a family run from the input keeps every machine's C/D
    copy equal, so the copies of the paper's distributed regime need not be carried.

    Only the tangents that can be nonzero are carried: before layer l only a_0 … a_{l−1} and
    c_0 … c_{l−1} have acted, and the c's never reach A or B, so the c tangents live in the n'
    query columns alone."""
    if geo.samples:
        return _rows_jacobian(geo, z0, a_steps, c_steps, scale)
    L = len(a_steps)
    s = geo.scales(z0) if scale is None else scale
    A, B, C, D = (x.copy() for x in geo.blocks(z0 / s))
    D[...] = 0.0
    b = z0.shape[0]

    def none(x: np.ndarray) -> np.ndarray:
        return np.zeros((b, 0) + x.shape[1:])

    # a tangents of A, B, C, D and c tangents of C, D: (b, active, …)
    tA, tB, tCa, tDa, tCc, tDc = none(A), none(B), none(C), none(D), none(C), none(D)
    with np.errstate(over="ignore", invalid="ignore"):
        for layer in range(L):
            a, c = a_steps[layer], c_steps[layer]
            At = A.swapaxes(-1, -2)
            K = geo.gram_map(At @ A, layer)  # (b, n, n)
            P = geo.query_operator(layer)
            M = P @ (At @ C)  # (b, n, n')
            X = _left(At, tA)  # Aᵀ dA: (b, p, n, n)
            dK = geo.gram_map(X + X.swapaxes(-1, -2), layer)
            dMa = P @ (_left(At, tCa) + _right(tA.swapaxes(-1, -2), C))  # (b, p, n, n')
            dMc = P @ _left(At, tCc)  # (b, p, n, n')
            AK, BK, AM, BM = A @ K, B @ K, A @ M, B @ M
            nA = tA - a * (_right(tA, K) + _left(A, dK))
            nB = tB - a * (_right(tB, K) + _left(B, dK))
            nCa = tCa - c * (_right(tA, M) + _left(A, dMa))
            nDa = tDa - c * (_right(tB, M) + _left(B, dMa))
            nCc = tCc - c * _left(A, dMc)
            nDc = tDc - c * _left(B, dMc)
            # the new steps: ∂/∂a_l of A − a AK is −AK (C, D see the old A), ∂/∂c_l of C is −AM
            tA, tB = _grow(nA, -AK), _grow(nB, -BK)
            tCa, tDa = _grow(nCa, np.zeros_like(C)), _grow(nDa, np.zeros_like(D))
            tCc, tDc = _grow(nCc, -AM), _grow(nDc, -BM)
            A, B, C, D = A - a * AK, B - a * BK, C - c * AM, D - c * BM
        pred = geo.readout * D * geo.d_scale(s)
        jac = geo.readout * np.concatenate([tDa, tDc], axis=1) * geo.d_scale(s)[:, None]
    return pred, jac


def spectral(geo: Geometry) -> bool:
    """True when the regime's reading of EAGLE uses the plain Gram AᵀA and no query projector
    (a sketch projector that is I in every layer is none): then every step is a spectral filter
    of A_0 and `spectral_jacobian` applies."""
    if geo.samples:  # the row-tied family: not a filter of A_0 alone
        return False
    return geo.reading != "distributed" and not geo.sketched


def spectral_factors(
    geo: Geometry, z0: np.ndarray, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prompt the singular values σ (b, r) of A_0 = U Σ Vᵀ (internal units), the rank-one
    outputs O_i = (B_0 v_i)(u_iᵀ C_0) (b, r, d', n') and the prompt scale s (b,).

    Without `scale` (the prompts' own, `Geometry.prompt_scale`) σ, B_0 V and Uᵀ C_0 are kept for
    as long as `z0` lives, keyed by its memory like the prompt scale: every fit of the optimum
    asks for the same tuning prompts or their first rows, and each asking cost an SVD per
    prompt. The SVDs are per prompt, so the first rows of the kept ones are those of the rows."""
    s = geo.prompt_scale(z0) if scale is None else scale
    b = z0.shape[0]
    key = (z0.__array_interface__["data"][0], z0.strides, z0.shape[1:], z0.dtype.str)
    key += (geo.d, geo.n, geo.normalize)
    hit = _SVDS.get(key) if scale is None else None
    if hit is not None and hit[0]() is not None and hit[1][0].shape[0] >= b:
        sigma, beta, gamma = (x[:b] for x in hit[1])
    else:
        A, B, C, _ = geo.blocks(z0 / s[:, None, None])
        U, sigma, Vt = np.linalg.svd(A, full_matrices=False)  # (b, d, r), (b, r), (b, r, n)
        beta = B @ Vt.swapaxes(-1, -2)  # (b, d', r)
        gamma = U.swapaxes(-1, -2) @ C  # (b, r, n')
        for x in (sigma, beta, gamma):
            x.flags.writeable = False
        if scale is None:
            try:
                ref = weakref.ref(z0, lambda r, key=key: _forget(_SVDS, key, r))
            except TypeError:  # not weak-referenceable: no cache
                ref = None
            if ref is not None:
                _SVDS[key] = (ref, (sigma, beta, gamma))
    outer = beta.swapaxes(-1, -2)[..., :, None] * gamma[..., None, :]  # (b, r, d', n')
    return sigma, outer, s


def _forget(cache: dict, key: tuple, ref: weakref.ref) -> None:
    """Drop cache[key] if it is still the entry of the array behind `ref` (a later, longer array
    on the same memory may have replaced it)."""
    if key in cache and cache[key][0] is ref:
        del cache[key]


# spectral_factors' SVDs of live prompt arrays: memory key -> (weak reference, (σ, B_0 V, Uᵀ C_0))
_SVDS: dict[tuple, tuple[weakref.ref, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}


def spectral_jacobian(
    geo: Geometry, factors: tuple[np.ndarray, np.ndarray, np.ndarray], a_steps, c_steps
) -> tuple[np.ndarray, np.ndarray]:
    """What `eagle_jacobian` returns, computed in the singular basis of A_0 (plain Gram, no
    projector). With A_0 = U Σ Vᵀ every EAGLE layer keeps the singular vectors:

        σ ← σ − a σ³,  ρ ← ρ (1 − a σ²)  (B V = B_0 V diag ρ),  g ← g (1 − c σ²)  (Uᵀ C = g Uᵀ C_0)

    and D_slot ← D_slot − c B Aᵀ C = D_slot − c Σ_i ρ_i σ_i g_i O_i, so the prediction is
    −readout · s · Σ_i w_i O_i with w = Σ_l c_l ρ_l σ_l g_l, and its Jacobian needs only the
    derivatives of the r scalars w_i, by one backward sweep over the layers."""
    sigma0, outer, s = factors
    L = len(a_steps)
    b, r = sigma0.shape
    states = [(sigma0, np.ones((b, r)), np.ones((b, r)))]  # (σ_l, ρ_l, g_l), l = 0 … L
    w = np.zeros((b, r))
    with np.errstate(over="ignore", invalid="ignore"):
        for a, c in zip(a_steps, c_steps, strict=True):
            sig, rho, g = states[-1]
            s2 = sig * sig
            w = w + c * rho * sig * g  # the D update reads the layer's input values
            states.append((sig - a * s2 * sig, rho * (1 - a * s2), g * (1 - c * s2)))
        # ∂w_i/∂θ for every prompt and singular value at once, by the adjoint recursion
        # (one backward sweep: each w_i is a scalar function of the 2L steps)
        dw = np.zeros((b, 2 * L, r))
        lam_sig, lam_rho, lam_g = np.zeros((b, r)), np.zeros((b, r)), np.zeros((b, r))
        for layer in reversed(range(L)):
            a, c = a_steps[layer], c_steps[layer]
            sig, rho, g = states[layer]
            s2 = sig * sig
            dw[:, layer] = -(lam_sig * s2 * sig + lam_rho * rho * s2)
            dw[:, L + layer] = rho * sig * g - lam_g * g * s2
            lam_sig, lam_rho, lam_g = (
                lam_sig * (1 - 3 * a * s2)
                - 2 * a * lam_rho * rho * sig
                - 2 * c * lam_g * g * sig
                + c * rho * g,
                lam_rho * (1 - a * s2) + c * sig * g,
                lam_g * (1 - c * s2) + c * rho * sig,
            )
        k = -geo.readout * s[:, None, None]
        flat = outer.reshape(b, r, -1)  # (b, r, d'·n')
        pred = k * (w[:, None] @ flat).reshape(b, *outer.shape[2:])
        jac = k[:, None] * (dw @ flat).reshape(b, 2 * L, *outer.shape[2:])
    return pred, jac


def spectral_predict(
    geo: Geometry, factors: tuple[np.ndarray, np.ndarray, np.ndarray], a_steps, c_steps
) -> np.ndarray:
    """The prediction of `spectral_jacobian` without the Jacobian."""
    sigma0, outer, s = factors
    b, r = sigma0.shape
    sig, rho, g, w = sigma0.copy(), np.ones((b, r)), np.ones((b, r)), np.zeros((b, r))
    with np.errstate(over="ignore", invalid="ignore"):
        for a, c in zip(a_steps, c_steps, strict=True):
            s2 = sig * sig
            w = w + c * rho * sig * g
            sig, rho, g = sig - a * s2 * sig, rho * (1 - a * s2), g * (1 - c * s2)
        pred = (w[:, None] @ outer.reshape(b, r, -1)).reshape(b, *outer.shape[2:])
        return -geo.readout * s[:, None, None] * pred


def fit_steps(
    geo: Geometry,
    prompts: HeldOut,
    target: np.ndarray,
    a0,
    c0,
    *,
    gtol: float = GTOL,
    max_iter: int = 300,
    chunk: int | None = None,
    warm_start: int = 64,
) -> dict:
    """Levenberg–Marquardt on mean((pred − target)²) over `prompts`, from steps (a0, c0).

    With more than `warm_start` prompts, a first pass on the first `warm_start` of them (to a
    looser tolerance) brings the steps near the optimum cheaply; the second pass on all prompts
    converges. The reported gradient is that of the full objective. The loss and the normal
    equations are summed over `chunk` prompts at a time (default 1024 in the singular basis,
    `FORWARD_CHUNK` for the forward-mode Jacobian)."""
    if warm_start and prompts.z0.shape[0] > 2 * warm_start:
        sub = HeldOut(z0=prompts.z0[:warm_start], D=prompts.D[:warm_start])
        first = fit_steps(
            geo, sub, target[:warm_start], a0, c0, gtol=1e-4, max_iter=max_iter, warm_start=0
        )
        a0, c0 = first["a_steps"], first["c_steps"]
    L = len(a0)
    theta = np.concatenate([np.asarray(a0, float), np.asarray(c0, float)])
    objective = _Objective(geo, prompts, target, chunk)
    floor = EXACT**2 * float(np.mean(target**2))  # a loss this small is an exact fit
    theta, loss, Jtr, iterations, converged = _levenberg_marquardt(
        objective, theta, gtol=gtol, max_iter=max_iter, floor=floor
    )
    grad = 2.0 * Jtr / objective.m
    rel = float(np.max(np.abs(grad * theta)) / max(loss, floor, np.finfo(float).tiny))
    return {
        "a_steps": theta[:L].tolist(),
        "c_steps": theta[L:].tolist(),
        "loss": loss,
        "gradient_norm": float(np.linalg.norm(grad)),
        "relative_gradient": rel,
        "converged": bool(converged or rel <= gtol or loss <= floor),
        "iterations": iterations,
    }


class _Objective:
    """mean((pred − target)²) over the prompts and its normal equations, summed over `chunk`
    prompts at a time: in the singular basis of A when the Gram is the plain one (one SVD per
    prompt, then O(L² r) per Jacobian), else by forward-mode Jacobians."""

    def __init__(self, geo: Geometry, prompts: HeldOut, target: np.ndarray, chunk: int | None):
        self.geo, self.prompts, self.target, self.m = geo, prompts, target, target.size
        # (b, 1, 1) or (b, 1, n + n'), once: the spectral norm costs an SVD per prompt
        self.scale = geo.scales(prompts.z0)
        self.factors = spectral_factors(geo, prompts.z0) if spectral(geo) else None
        if chunk is None:
            chunk = 1024 if self.factors is not None else FORWARD_CHUNK
        self.chunk = chunk

    def _slices(self):
        for start in range(0, self.prompts.z0.shape[0], self.chunk):
            yield slice(start, start + self.chunk)

    def _evaluate(self, th: np.ndarray, sl: slice, jacobian: bool):
        geo, L = self.geo, th.size // 2
        if self.factors is not None:
            part = tuple(f[sl] for f in self.factors)
            if jacobian:
                return spectral_jacobian(geo, part, th[:L], th[L:])
            return spectral_predict(geo, part, th[:L], th[L:])
        z0 = self.prompts.z0[sl]
        if jacobian:
            return eagle_jacobian(geo, z0, th[:L], th[L:], self.scale[sl])
        return predict(geo, z0, th[:L], th[L:], self.scale[sl])

    def loss(self, th: np.ndarray) -> float:
        rss = 0.0
        for sl in self._slices():
            pred = self._evaluate(th, sl, jacobian=False)
            with np.errstate(over="ignore", invalid="ignore"):
                rss += float(np.sum((pred - self.target[sl]) ** 2))
        return rss / self.m

    def normal(self, th: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(loss, JᵀJ, Jᵀr) at `th`."""
        k = th.size
        JtJ, Jtr, rss = np.zeros((k, k)), np.zeros(k), 0.0
        for sl in self._slices():
            pred, jac = self._evaluate(th, sl, jacobian=True)
            r = (pred - self.target[sl]).reshape(-1)
            J = jac.swapaxes(0, 1).reshape(k, -1)
            JtJ += J @ J.T
            Jtr += J @ r
            rss += float(r @ r)
        return rss / self.m, JtJ, Jtr


def _levenberg_marquardt(
    objective: _Objective, theta: np.ndarray, *, gtol: float, max_iter: int, floor: float
) -> tuple[np.ndarray, float, np.ndarray, int, bool]:
    """Damped Gauss–Newton from `theta` until the relative gradient is below `gtol`, the loss
    below `floor`, no damped step decreases the loss, or `max_iter` iterations: (theta, loss,
    Jᵀr, iterations, converged)."""
    m = objective.m
    loss, JtJ, Jtr = objective.normal(theta)
    mu, iterations, converged = 1e-3, 0, False
    for _ in range(max_iter):
        grad = 2.0 * Jtr / m
        if not math.isfinite(loss):
            break
        if np.max(np.abs(grad * theta)) <= gtol * loss or loss <= floor:
            converged = True
            break
        improved = False
        for _ in range(30):
            H = JtJ + mu * np.diag(np.maximum(np.diag(JtJ), 1e-300))
            try:
                step = np.linalg.solve(H, Jtr)
            except np.linalg.LinAlgError:
                mu *= 10.0
                continue
            trial = theta - step
            # the loss decides; the Jacobian is computed only for a step that is taken
            if math.isfinite(t_loss := objective.loss(trial)) and t_loss < loss:
                loss, JtJ, Jtr = objective.normal(trial)
                theta = trial
                mu = max(mu / 10.0, 1e-12)
                improved = True
                break
            mu *= 10.0
        iterations += 1
        if not improved:
            break  # no decrease along any damped step: stationary to round-off
    return theta, loss, Jtr, iterations, converged


def eagle_mse(
    geo: Geometry, prompts: HeldOut, a_steps, c_steps, target=None, factors=None
) -> float:
    """MSE of EAGLE with the given steps against `target` (default: the true D); `factors`
    (`spectral_factors` of the prompts) runs it in the singular basis."""
    if factors is not None:
        pred = spectral_predict(geo, factors, a_steps, c_steps)
    else:
        pred = predict(geo, prompts.z0, a_steps, c_steps)
    ref = prompts.D if target is None else target
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean((pred - ref) ** 2))


def predict(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> np.ndarray:
    """EAGLE's prediction of D (b, d', n') in prompt units, in the order of operations of
    `eagle_jacobian` (the same numbers); `scale` is geo.scales(z0) if given."""
    s = geo.scales(z0) if scale is None else scale
    A, B, C, D = (x.copy() for x in geo.blocks(z0 / s))
    D[...] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
            At = A.swapaxes(-1, -2)
            K = geo.gram_map(At @ A, layer)
            M = geo.query_operator(layer) @ (At @ C)
            c = geo.step_sign * c  # the label step on the stream (`Geometry.step_sign`)
            sB, sC = (c, a) if geo.samples else (a, c)  # the row-tied family swaps them
            A, B, C, D = A - a * (A @ K), B - sB * (B @ K), C - sC * (A @ M), D - c * (B @ M)
        return geo.readout * D * geo.d_scale(s)


# Cost, in layer passes of the network's products per prompt (`fit.base.layer_flops`): one EAGLE
# layer with p carried tangents is about 1.5 (p + 1) / h passes, and a fit takes a few tens of
# Jacobians (FIT_JACOBIANS); the spectral fit costs about one pass (an SVD). Paper-sized models
# tune on all 512 tuning prompts; never fewer than TUNING_FLOOR, nor than 8 residuals per step.
FIT_JACOBIANS = 30
# Prompts per forward-mode Jacobian (`eagle_jacobian`): its tangents (b, L, …) for 128 prompts of
# the shipped sizes stay in cache; 512 at once ran at half the speed (45 ms against 23 ms per
# Jacobian of constrained.pt's 512 tuning prompts, one core).
FORWARD_CHUNK = 128
TUNING_FLOOR = 4


def fit_passes(geo: Geometry) -> float:
    """Layer passes per tuning prompt of one fit (FIT_JACOBIANS Jacobians of L/2 + 1 tangents on
    average per layer)."""
    L = geo.layers
    return FIT_JACOBIANS * L * (L / 2 + 1) * 1.5 / geo.heads


# The multi-start fit of `optimal`. The 2L-step loss has many stationary points (the LM fit from
# the weight-read steps stops at one), so the fit starts from STARTS steps: the weight-read ones;
# the theory's (η, γ) = THEORY, the paper's PAPER and the minimax MINIMAX in every layer;
# RANDOM_NORMALISED random normalised starts; and the rest the weight-read steps each times a
# log-uniform factor within JITTER. A random normalised start draws one η on ETA_RANGE and one γ on
# GAMMA_RANGE, log-uniform and stratified (a Latin hypercube over the starts), and multiplies each
# layer's by a log-uniform factor within LAYER_JITTER. Every start is screened by SCREEN_ITER LM
# iterations on the first SCREEN_PROMPTS tuning prompts (the fits' own warm-start size) and its
# steps scored on every tuning prompt; the ALWAYS starts and the best other screens, REFINE in
# all, are refined on every tuning prompt for REFINE_ITER iterations, and the lowest of those is
# continued to convergence.
STARTS = 24
THEORY = (1.0 / 3.0, 1.0)  # (η, γ) of the theory's step sizes
PAPER = (1.0, 1.9)  # (η, γ) the paper reads from its trained models
# the minimax step: η = 4/3 minimises max over σ ∈ [0, 1] of |σ(1 − ησ²)| (to 1/3), the fastest
# contraction of ‖A‖ by one layer; γ the same
MINIMAX = (4.0 / 3.0, 4.0 / 3.0)
# from half the theory's to the largest η for which σ ← σ(1 − ησ²) stays bounded on [0, 1], and
# from half the theory's γ to twice the paper's
ETA_RANGE = (THEORY[0] / 2, 2.0)
GAMMA_RANGE = (THEORY[1] / 2, 2 * PAPER[1])
LAYER_JITTER = 1.25
RANDOM_NORMALISED = 16
JITTER = 1.5
ALWAYS = ("projection", "minimax")  # starts always refined (the others by their screens)
SCREEN_PROMPTS = 64
SCREEN_ITER = 30
SCREEN_GTOL = 1e-4
REFINE = 4
REFINE_ITER = 10
MAX_ITER = 300
WITHIN = 0.01  # `within_1pct`: starts whose final loss is within this fraction of the best
SALT = 0x0B7  # ctx.rng salt of the random starts


def normalised_steps(geo: Geometry, z0: np.ndarray, eta, gamma) -> tuple[list, list]:
    """Steps a_l = η_l / ‖A_l‖², c_l = γ_l / ‖A_l‖² (internal units) with ‖A_l‖₂ the largest
    spectral norm over the prompts z0 of the A block entering layer l, propagated through the
    regime's EAGLE recursion with these steps (the paper's normalisation, view `eagle`)."""
    # the plain Gram keeps A's singular vectors, σ ← σ − a σ³ (`spectral_jacobian`): the norms
    # from the prompts' kept singular values, not an SVD per prompt and layer
    sigma = spectral_factors(geo, z0)[0] if spectral(geo) else None  # (b, r)
    A = None if sigma is not None else geo.blocks(z0 / geo.scales(z0))[0]
    a_steps, c_steps, norm2 = [], [], 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, (e, g) in enumerate(zip(eta, gamma, strict=True)):
            if sigma is not None:
                top = float(np.max(np.abs(sigma)) ** 2) if sigma.size else 0.0
            else:
                top = float(np.linalg.norm(A, ord=2, axis=(-2, -1)).max() ** 2) if A.size else 0.0
            norm2 = top if math.isfinite(top) and top > 0 else norm2  # else the last finite one
            a, c = float(e) / norm2, float(g) / norm2
            a_steps.append(a)
            c_steps.append(c)
            if sigma is not None:
                sigma = sigma - a * sigma**3
            else:
                A = A - a * (A @ geo.gram_map(A.swapaxes(-1, -2) @ A, layer))
    return a_steps, c_steps


def starts_for(
    geo: Geometry, z0: np.ndarray, a0, c0, rng: np.random.Generator, count: int = STARTS
) -> list[tuple[str, list, list]]:
    """The multi-start's starts (kind, a_steps, c_steps): the weight-read steps a0, c0 first,
    then the theory's and the paper's normalised steps, random normalised ones and random
    multiples of the weight-read ones (module constants); ‖A_l‖ is read on the prompts z0."""
    L = len(a0)
    out = [("projection", [float(x) for x in a0], [float(x) for x in c0])]
    for kind, (eta, gamma) in (("theory", THEORY), ("paper", PAPER), ("minimax", MINIMAX)):
        out.append((kind, *normalised_steps(geo, z0, [eta] * L, [gamma] * L)))
    m = min(RANDOM_NORMALISED, count - len(out))
    if (
        m > 0
    ):  # stratified: one draw in each of m equal slices of log η and of log γ, paired at random
        u = (rng.permutation(m)[:, None] + rng.uniform(size=(m, 2))) / m
        u[:, 1] = u[rng.permutation(m), 1]
        lo, hi = np.log([ETA_RANGE[0], GAMMA_RANGE[0]]), np.log([ETA_RANGE[1], GAMMA_RANGE[1]])
        for eta, gamma in np.exp(lo + u * (hi - lo)):
            layer = np.exp(rng.uniform(-1, 1, (2, L)) * math.log(LAYER_JITTER))
            out.append(("random", *normalised_steps(geo, z0, eta * layer[0], gamma * layer[1])))
    for _ in range(count - len(out)):
        fa, fc = np.exp(rng.uniform(-1, 1, (2, L)) * math.log(JITTER))
        out.append(("jitter", (np.asarray(a0) * fa).tolist(), (np.asarray(c0) * fc).tolist()))
    return out


def failed(loss: float, zero: float) -> bool:
    """A fit that blew up: a non-finite loss, or one above the zero predictor's (`zero`)."""
    return not math.isfinite(loss) or loss > zero


class _Search:
    """What `multistart` scores fits with: the loss on the tuning prompts, the zero predictor's
    MSE there, and with validation prompts each fit's validation MSE (once per fit) and whether
    its steps blow up there."""

    def __init__(
        self,
        geo: Geometry,
        prompts: HeldOut,
        target: np.ndarray,
        validation: HeldOut | None,
        ceiling: float | None,
    ) -> None:
        self.geo, self.prompts, self.target, self.validation = geo, prompts, target, validation
        self.factors = spectral_factors(geo, prompts.z0) if spectral(geo) else None
        self.zero = float(np.mean(target**2))
        if validation is not None:
            self.v_factors = spectral_factors(geo, validation.z0) if spectral(geo) else None
            self.v_zero = float(np.mean(validation.D**2)) if ceiling is None else ceiling
        # id(fit) -> (fit, its validation MSE); the fit is held so that its id is not reused
        self.checked: dict[int, tuple[dict, float]] = {}

    def loss(self, a, c) -> float:
        value = eagle_mse(self.geo, self.prompts, a, c, self.target, factors=self.factors)
        return value if math.isfinite(value) else float("inf")

    def checked_mse(self, fit: dict) -> float:
        """The fit's MSE on the validation prompts (inf where it is not finite), once per fit."""
        key = id(fit)
        if key not in self.checked:
            value = eagle_mse(
                self.geo, self.validation, fit["a_steps"], fit["c_steps"], factors=self.v_factors
            )
            self.checked[key] = (fit, value if math.isfinite(value) else float("inf"))
        return self.checked[key][1]

    def unstable(self, fit: dict) -> bool:
        """The fit's steps blow up on the validation prompts."""
        return self.validation is not None and failed(self.checked_mse(fit), self.v_zero)

    def rank(self, fit: dict) -> float:
        """What chooses between fits: the validation MSE where there are validation prompts
        (a fresh draw, so the held-out score of the choice stays unbiased), else the loss."""
        return self.checked_mse(fit) if self.validation is not None else fit["loss"]

    def fit(self, a, c, *, gtol: float, max_iter: int) -> dict:
        """`fit_steps` on every tuning prompt from steps (a, c)."""
        return fit_steps(
            self.geo, self.prompts, self.target, a, c, gtol=gtol, max_iter=max_iter, warm_start=0
        )


def _screen_starts(
    search: _Search, starts: list[tuple[str, list, list]], k: int, screen_iter: int
) -> tuple[list[dict], list[dict]]:
    """Each start fitted on the first k prompts (the screen): the starts' records and screens.
    A screen's steps are then scored on every prompt (one forward each: the screen prompts alone
    overfit, and steps tuned on a few prompts can blow up on rare others, when its start's steps
    are kept)."""
    sub, sub_target = search.prompts.first(k), search.target[:k]
    records, screens = [], []
    for kind, a, c in starts:
        screen = fit_steps(
            search.geo, sub, sub_target, a, c, gtol=SCREEN_GTOL, max_iter=screen_iter, warm_start=0
        )
        screens.append(screen)
        records.append(
            {
                "kind": kind,
                "a_start": [float(x) for x in a],
                "c_start": [float(x) for x in c],
                "initial_mse": search.loss(a, c),
                "screen_mse": screen["loss"] if math.isfinite(screen["loss"]) else float("inf"),
                "screen_iterations": screen["iterations"],
                "refined": False,
                "failed": False,
                "converged": screen["converged"],
                "relative_gradient": screen["relative_gradient"],
                "iterations": 0,
            }
        )
    for r, screen in zip(records, screens, strict=True):
        r["final_mse"] = search.loss(screen["a_steps"], screen["c_steps"])
        if r["initial_mse"] < r["final_mse"]:
            r["final_mse"] = r["initial_mse"]
            screen.update(a_steps=r["a_start"], c_steps=r["c_start"])
        r["failed"] = failed(r["final_mse"], search.zero)
    return records, screens


def _chosen_starts(records: list[dict], always: tuple[str, ...], refine: int) -> list[int]:
    """The starts to refine: the `always` kinds and the best other screens that did not blow
    up, `refine` in all."""
    alive = [i for i, r in enumerate(records) if not r["failed"]]
    chosen = [i for i in alive if records[i]["kind"] in always]
    others = sorted((i for i in alive if i not in chosen), key=lambda i: records[i]["final_mse"])
    return chosen + others[: max(0, refine - len(chosen))]


def _converge_best(
    search: _Search, fits: dict[int, dict], ok: list[int], gtol: float, max_iter: int
) -> int | None:
    """The lowest of the refined fits `ok` (None without any), continued to convergence in
    `fits` unless its continuation rises or blows up on the validation prompts (then kept, the
    continuation noted as `unstable_continuation`)."""
    if not ok:
        return None
    top = min(ok, key=lambda i: search.rank(fits[i]))
    first = fits[top]
    if first["converged"]:
        return top
    more = search.fit(first["a_steps"], first["c_steps"], gtol=gtol, max_iter=max_iter)
    more["iterations"] += first["iterations"]
    if not more["loss"] > first["loss"]:
        if search.unstable(more):  # converged steps that diverge on fresh prompts: keep these
            first["unstable_continuation"] = {
                "iterations": more["iterations"],
                "relative_gradient": more["relative_gradient"],
                "loss": more["loss"],
            }
        else:
            fits[top] = more
    return top


def _record_refined(
    search: _Search, records: list[dict], fits: dict[int, dict], shaky: set[int]
) -> None:
    """Write each refined start's last fit into its record."""
    for i, fit in fits.items():
        records[i].update(
            refined=True,
            unstable=i in shaky,
            validation_mse=search.checked_mse(fit) if search.validation is not None else None,
            failed=failed(fit["loss"], search.zero) or i in shaky,
            converged=fit["converged"],
            relative_gradient=fit["relative_gradient"],
            iterations=fit["iterations"],
            a_steps=fit["a_steps"],
            c_steps=fit["c_steps"],
        )
    for i, fit in fits.items():
        records[i]["final_mse"] = fit["loss"] if math.isfinite(fit["loss"]) else float("inf")


def _stable_fallback(
    search: _Search, records: list[dict], screens: list[dict]
) -> tuple[int, dict] | None:
    """When no refined fit stays stable on fresh prompts: of the starts' own steps and their
    screens, the one lowest on the validation prompts that is stable there (unconverged), as
    (start index, fit); None when none is."""
    cands = []
    for i, r in enumerate(records):
        for a, c, tl in (
            (r["a_start"], r["c_start"], r["initial_mse"]),
            (screens[i]["a_steps"], screens[i]["c_steps"], None),
        ):
            tl = search.loss(a, c) if tl is None else tl
            if not failed(tl, search.zero):
                cands.append((i, {"a_steps": list(a), "c_steps": list(c), "loss": tl}))
    stable = [(i, f) for i, f in cands if not search.unstable(f)]
    if not stable:
        return None
    i, f = min(stable, key=lambda t: search.rank(t[1]))
    grad = search.fit(f["a_steps"], f["c_steps"], gtol=GTOL, max_iter=0)
    best_fit = {
        **grad, **f, "converged": False, "stable_fallback": True,
        "start_index": i, "start_kind": records[i]["kind"],
    }  # fmt: skip
    return i, best_fit


def multistart(
    geo: Geometry,
    prompts: HeldOut,
    target: np.ndarray,
    starts: list[tuple[str, list, list]],
    *,
    screen_prompts: int = SCREEN_PROMPTS,
    screen_iter: int = SCREEN_ITER,
    refine: int = REFINE,
    always: tuple[str, ...] = ALWAYS,
    refine_iter: int = REFINE_ITER,
    max_iter: int = MAX_ITER,
    gtol: float = GTOL,
    validation: HeldOut | None = None,
    ceiling: float | None = None,
) -> dict:
    """The best of `fit_steps` from every start, by the staged search of the module constants:
    `best_fit` (the `fit_steps` dict of the chosen fit, below, with its `start_index` and
    `start_kind`), `starts` (one record per start, below), and over the final losses of the starts
    that did not fail `best` (the lowest), `median`, `spread` (largest over lowest),
    `within_1pct` (how many within 1% of the lowest) and `failed_starts`, with the sizes of each
    stage. A failed start (`failed`: non-finite, or above the zero predictor, on `prompts` or,
    for a refined start, on the true D of the `validation` prompts) is never the best;
    `best_fit` and the statistics are None when every start failed. `unstable_starts` counts
    the refined starts that failed on `validation` only (above `ceiling` there, default the
    zero predictor's validation MSE). With `validation`, the refined fit
    with the lowest validation MSE is the best (and continued to convergence), since tuned
    steps can overfit the tuning prompts' tail; without, the lowest loss on `prompts`.

    Each start's record: `kind`, `a_start`, `c_start`, `initial_mse` and `final_mse` (loss on
    `prompts` at the start's and at its last steps), `screen_mse`, `screen_iterations`,
    `refined`, `failed`, and `converged`, `relative_gradient`, `iterations` of its last fit (the
    screen's, on the screen prompts to SCREEN_GTOL, for a start not refined; the iterations on
    every prompt for a refined one), and for a refined start its `a_steps`, `c_steps`,
    `unstable` and `validation_mse` (None without validation prompts)."""
    search = _Search(geo, prompts, target, validation, ceiling)
    k = max(1, min(screen_prompts, prompts.prompts))
    records, screens = _screen_starts(search, starts, k, screen_iter)
    chosen = _chosen_starts(records, always, refine)
    fits = {
        i: search.fit(screens[i]["a_steps"], screens[i]["c_steps"], gtol=gtol, max_iter=refine_iter)
        for i in chosen
    }
    shaky = {i for i in chosen if search.unstable(fits[i])}
    ok = [i for i in chosen if not failed(fits[i]["loss"], search.zero) and i not in shaky]
    top = _converge_best(search, fits, ok, gtol, max_iter)
    _record_refined(search, records, fits, shaky)
    good = [i for i, r in enumerate(records) if not r["failed"]]
    finals = np.array([records[i]["final_mse"] for i in good])
    out = {
        "starts": records,
        "screen_prompts": k,
        "screen_iterations": screen_iter,
        "refined_starts": len(fits),
        "refine_iterations": refine_iter,
        "failed_starts": len(records) - len(good),
        "unstable_starts": len(shaky),
        "best_fit": None,
        "best": None,
        "median": None,
        "spread": None,
        "within_1pct": 0,
    }
    best = [i for i in fits if i in good]
    if best:  # the one continued to convergence, else the lowest of the others
        i = top if ok and top in best else min(best, key=lambda i: search.rank(fits[i]))
        out["best_fit"] = {**fits[i], "start_index": i, "start_kind": records[i]["kind"]}
        low = float(finals.min())
        out["best"] = low
        out["median"] = float(np.median(finals))
        out["spread"] = float(finals.max() / low) if low > 0 else float("inf")
        out["within_1pct"] = int(np.sum(finals <= low * (1 + WITHIN)))
    elif validation is not None and records:
        fallback = _stable_fallback(search, records, screens)
        if fallback is not None:
            out["best_fit"] = fallback[1]
            out["best"] = float(finals.min()) if finals.size else fallback[1]["loss"]
    return out


# fitted steps blow up on the validation prompts when their MSE there is above the zero
# predictor's and BLOWUP × the network's own (heavy-tailed prompts can put the network itself
# above the zero predictor's mean, and a fit as good as the network has not blown up)
BLOWUP = 10.0


def validation_ceiling(ctx: Context) -> float | None:
    """The validation MSE above which fitted steps count as blown up (`BLOWUP`), or None
    without validation prompts."""
    v = ctx.validation
    if v is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        net = v.mse(ctx.geometry.predict(v.z0, ctx.qk, ctx.vp))
    zero = float(np.mean(v.D**2))
    return max(zero, BLOWUP * net) if math.isfinite(net) else zero


def family_optima(
    ctx: Context,
    tune: HeldOut,
    held: HeldOut,
    screen: int,
    read_mse: float,
    ceiling: float | None = None,
) -> list[dict]:
    """The same multi-start for every other family the regime admits (view `projection`'s
    steps of that family as its weight-read start): per family `name`, `optimal_mse` (held-out),
    `best`, `median`, `spread`, `within_1pct`, `failed_starts`, `a_steps`, `c_steps`, and `read`
    (true for the family the views read, whose numbers are the view's own)."""
    from eagle_probe.fit import families

    geo = ctx.geometry
    if geo.samples:
        return []
    read = families.of_geometry(geo).name
    projected = {f["name"]: f for f in ctx.results["projection"].json.get("families", [])}
    out = []
    for fam in families.for_geometry(geo):
        if fam.name == read:
            out.append({"name": fam.name, "optimal_mse": read_mse, "read": True})
            continue
        if fam.name not in projected:
            continue
        g = fam.geometry(geo)
        a0, c0 = projected[fam.name]["a_steps"], projected[fam.name]["c_steps"]
        starts = starts_for(g, tune.z0[:screen], a0, c0, ctx.rng(SALT + 1))
        search = multistart(
            g, tune, tune.D, starts, screen_prompts=screen, validation=ctx.validation,
            ceiling=ceiling,
        )  # fmt: skip
        best = search.pop("best_fit")
        factors = spectral_factors(g, held.z0) if spectral(g) else None
        mse = (
            float("inf")
            if best is None
            else eagle_mse(g, held, best["a_steps"], best["c_steps"], factors=factors)
        )
        out.append(
            {
                "name": fam.name,
                "optimal_mse": mse,
                "read": False,
                **{k: search[k] for k in ("best", "median", "spread", "within_1pct")},
                "failed_starts": search["failed_starts"],
                "unstable_starts": search["unstable_starts"],
                "a_steps": None if best is None else [float(x) for x in best["a_steps"]],
                "c_steps": None if best is None else [float(x) for x in best["c_steps"]],
            }
        )
    return out


# --- what the view shows: its lines of the text report --------------------------------------------
def report_lines(ex: Extraction) -> list[str]:
    """The optimal and the distilled steps, with their fits' convergence."""
    o = ex.views["optimum"].json
    net = o["network_mse"]
    family = "GD++" if ex.geometry.samples else of_geometry(ex.geometry).name
    median = number(o.get("median", float("nan"))) or "not finite"
    spread = number(o.get("spread", 1.0))
    spread = f"×{spread}" if spread else "not finite"
    lines = [
        f"best {family} ({plural(len(o['optimal']['a_steps']), 'layer')}, steps by "
        "Levenberg-Marquardt, "
        f"{o['tuning_prompts']} tuning prompts; optimal: best of {len(o.get('starts', [])) or 1} "
        f"starts, median {median}, spread {spread}; distilled: from the weight-read steps; "
        "network: the network's MSE over the fit's, on the same prompts):",
    ]
    for name in ("optimal", "distilled"):
        f = o[name]
        versus = ratio(net, f["mse"], spec=".2f", mark="x")
        median = f" (median {number(f['median_mse'])})" if "median_mse" in f else ""
        lines.append(
            f"  {name:9s} MSE {number(f['mse']) or 'not finite'}{median} (network {versus})  "
            f"a = {step_list(f['a_steps'])}  c = {step_list(f['c_steps'])}  "
            f"|grad| {number(f['gradient_norm'])}, rel {number(f['relative_gradient'])}, "
            f"{'converged' if f['converged'] else 'NOT converged'} in {f['iterations']} it."
        )
    return lines


@register("optimum", text=report_lines)
def optimum_view(ctx: Context) -> ViewResult:
    """EAGLE's steps fitted to the truth from many starts (the best of a multi-start) and to the
    network from the weight-read steps."""
    geo = ctx.geometry
    floor = max(TUNING_FLOOR, math.ceil(8 * 2 * geo.layers / (geo.d_prime * geo.n_prime)))
    # the network's forward on the tuning prompts, and the fits unless they are spectral
    passes = geo.layers + (1.0 if spectral(geo) else fit_passes(geo))
    tune = ctx.tuning.first(affordable(geo, passes, ctx.tuning.prompts, floor=floor))
    # the multi-start's screen: STARTS fits of SCREEN_ITER iterations
    screen_passes = STARTS * (1.0 if spectral(geo) else fit_passes(geo)) * SCREEN_ITER
    limit = SCREEN_PROMPTS
    screen = affordable(geo, screen_passes / FIT_JACOBIANS, tune.prompts, limit=limit, floor=floor)
    held, net_held = ctx.scoring(10 * 1.5 * geo.layers / geo.heads)  # ten EAGLE runs
    network_mse = held.mse(net_held)
    held_factors = spectral_factors(geo, held.z0) if spectral(geo) else None  # one SVD each
    proj = ctx.results["projection"].json["layers"]
    a0 = [lay["a_step"] for lay in proj]
    c0 = [lay["c_step"] for lay in proj]
    net_tune = geo.predict(tune.z0, ctx.qk, ctx.vp)
    out = {
        "start": {"a_steps": a0, "c_steps": c0, "from": "projection"},
        "tuning_prompts": int(tune.z0.shape[0]),
        "held_out_prompts": int(held.z0.shape[0]),
        "network_mse": network_mse,
        "start_mse": eagle_mse(geo, held, a0, c0, factors=held_factors),
    }
    warnings: list[str] = []
    starts = starts_for(geo, tune.z0[:screen], a0, c0, ctx.rng(SALT))
    ceiling = validation_ceiling(ctx)  # one network forward on the validation prompts
    search = multistart(
        geo, tune, tune.D, starts, screen_prompts=screen, validation=ctx.validation,
        ceiling=ceiling,
    )  # fmt: skip
    for r in search["starts"]:
        if r["refined"]:
            r["mse"] = eagle_mse(geo, held, r["a_steps"], r["c_steps"], factors=held_factors)
    best = search.pop("best_fit")
    if best is None:  # every start blew up: the weight-read start's fit, reported as such
        best = {
            **fit_steps(geo, tune, tune.D, a0, c0),
            "start_index": 0,
            "start_kind": "projection",
        }
        warnings.append(
            f"every one of the {len(starts)} starts of the optimal EAGLE fit blew up "
            "(non-finite, or above the zero predictor): its steps are the weight-read start's fit"
        )

    def held_pred(a_steps, c_steps) -> np.ndarray:  # on the held-out prompts, as eagle_mse runs it
        if held_factors is not None:
            return spectral_predict(geo, held_factors, a_steps, c_steps)
        return predict(geo, held.z0, a_steps, c_steps)

    best_pred = held_pred(best["a_steps"], best["c_steps"])
    best_mse = held.mse(best_pred)
    out.update(search)
    out["families"] = family_optima(ctx, tune, held, screen, best_mse, ceiling)
    warnings += _family_warnings(out["families"], tune.z0.shape[0])
    net_tails = prompt_tails(net_held, held.D)  # beside each mean, its median and trimmed mean
    out["network_median_mse"] = net_tails["median_mse"]
    out["network_trimmed_mse"] = net_tails["trimmed_mse"]
    for name, target in (("optimal", tune.D), ("distilled", net_tune)):
        if name == "optimal":
            fit, pred = {**best, "mse": best_mse}, best_pred
        else:
            fit = fit_steps(geo, tune, target, a0, c0)
            pred = held_pred(fit["a_steps"], fit["c_steps"])
            fit["mse"] = held.mse(pred)
            fit["gap_to_network"] = HeldOut(z0=held.z0, D=net_held).mse(pred)
        tails = prompt_tails(pred, held.D)
        fit["median_mse"], fit["trimmed_mse"] = tails["median_mse"], tails["trimmed_mse"]
        out[name] = fit
        out[f"{name}_mse"] = fit["mse"]
        if fit["mse"] > 2 * fit["loss"] + 1e-300 and name == "optimal":
            warnings.append(
                f"the {name} EAGLE's held-out MSE {value(fit['mse'])} is far above its tuning "
                f"loss {value(fit['loss'])}: steps tuned on {tune.z0.shape[0]} prompts fail on "
                "others (typically rare prompts with a large ‖A‖ when prompts are not normalised)"
            )
        if fit.get("stable_fallback"):
            warnings.append(
                f"every refined {name} EAGLE fit blows up on fresh validation prompts (steps "
                "tuned on these prompts fail on others): the optimum is the "
                f"{fit['start_kind']} start's steps that stay stable there, not a converged fit"
            )
        elif not fit["converged"] and "unstable_continuation" in fit:
            more = fit["unstable_continuation"]
            warnings.append(
                f"the {name} EAGLE fit is kept after {fit['iterations']} iterations: continued "
                f"to convergence ({more['iterations']} iterations, tuning loss "
                f"{value(more['loss'])}) its steps blow up on fresh validation prompts (steps "
                "tuned on these prompts fail on others)"
            )
        elif not fit["converged"]:
            warnings.append(
                f"the {name} EAGLE fit stopped before converging (relative gradient "
                f"{fit['relative_gradient']:.2g} after {fit['iterations']} iterations)"
            )
    return ViewResult("optimum", out, {}, warnings)


def _family_warnings(families: list[dict], tuning: int) -> list[str]:
    """The warnings of the other families' optima: none stable, or one that blows up held out."""
    warnings = []
    for fam in families:
        if not fam["read"] and fam.get("best") is None:
            warnings.append(
                f"every start of the {fam['name']} fit blew up (non-finite, or above the zero "
                f"predictor, on the {tuning} tuning prompts or, "
                f"{fam.get('unstable_starts', 0)} of them, on fresh validation prompts): the "
                "family has no stable optimum with fixed steps"
            )
        if not fam["read"] and fam.get("best") is not None and fam["optimal_mse"] > 2 * fam["best"]:
            warnings.append(
                f"the best {fam['name']} (tuning loss {value(fam['best'])}) reaches held-out MSE "
                f"{value(fam['optimal_mse'])}: its steps, tuned on {tuning} prompts, "
                "blow up on others"
            )
    return warnings
