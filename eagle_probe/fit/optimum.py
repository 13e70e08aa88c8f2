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

Sample layout: the same fit over the steps of its row-tied family (view `eagle`; B moves with c
and C with a), i.e. the best GD++ with the network's number of layers.
"""

from __future__ import annotations

import math

import numpy as np

from eagle_probe.fit.base import Context, HeldOut, ViewResult, register
from eagle_probe.fit.geometry import Geometry

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


def eagle_jacobian(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE's prediction (b, d', n') in prompt units and its Jacobian (b, 2L, d', n')
    with respect to (a_0 … a_{L−1}, c_0 … c_{L−1}); `scale` is geo.prompt_scale(z0) if given."""
    L = len(a_steps)
    s = (geo.prompt_scale(z0) if scale is None else scale)[:, None, None]
    A, B, C, D = (x.copy() for x in geo.blocks(z0 / s))
    D[...] = 0.0
    b, p = z0.shape[0], 2 * L
    dA, dB, dC, dD = (np.zeros((b, p) + x.shape[1:]) for x in (A, B, C, D))
    with np.errstate(over="ignore", invalid="ignore"):
        for layer in range(L):
            a, c = a_steps[layer], c_steps[layer]
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
        pred = geo.readout * D * s
        jac = geo.readout * dD * s[:, None]
    return pred, jac


def fit_steps(
    geo: Geometry,
    prompts: HeldOut,
    target: np.ndarray,
    a0,
    c0,
    *,
    gtol: float = GTOL,
    max_iter: int = 300,
    chunk: int = 1024,
    warm_start: int = 64,
) -> dict:
    """Levenberg–Marquardt on mean((pred − target)²) over `prompts`, from steps (a0, c0).

    With more than `warm_start` prompts, a first pass on the first `warm_start` of them (to a
    looser tolerance) brings the steps near the optimum cheaply; the second pass on all prompts
    converges. The reported gradient is that of the full objective."""
    if warm_start and prompts.z0.shape[0] > 2 * warm_start:
        sub = HeldOut(z0=prompts.z0[:warm_start], D=prompts.D[:warm_start])
        first = fit_steps(
            geo, sub, target[:warm_start], a0, c0, gtol=1e-4, max_iter=max_iter, warm_start=0
        )
        a0, c0 = first["a_steps"], first["c_steps"]
    L = len(a0)
    theta = np.concatenate([np.asarray(a0, float), np.asarray(c0, float)])
    m = target.size
    scale = geo.prompt_scale(prompts.z0)  # (b,), once: the spectral norm costs an SVD per prompt

    def normal(th: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        JtJ, Jtr, rss = np.zeros((2 * L, 2 * L)), np.zeros(2 * L), 0.0
        for start in range(0, prompts.z0.shape[0], chunk):
            sl = slice(start, start + chunk)
            pred, jac = eagle_jacobian(geo, prompts.z0[sl], th[:L], th[L:], scale[sl])
            r = (pred - target[sl]).reshape(-1)
            J = jac.swapaxes(0, 1).reshape(2 * L, -1)
            JtJ += J @ J.T
            Jtr += J @ r
            rss += float(r @ r)
        return rss / m, JtJ, Jtr

    floor = EXACT**2 * float(np.mean(target**2))  # a loss this small is an exact fit
    loss, JtJ, Jtr = normal(theta)
    mu, history, converged = 1e-3, [loss], False
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
            t_loss, t_JtJ, t_Jtr = normal(trial)
            if math.isfinite(t_loss) and t_loss < loss:
                theta, loss, JtJ, Jtr = trial, t_loss, t_JtJ, t_Jtr
                mu = max(mu / 10.0, 1e-12)
                improved = True
                break
            mu *= 10.0
        history.append(loss)
        if not improved:
            break  # no decrease along any damped step: stationary to round-off
    grad = 2.0 * Jtr / m
    rel = float(np.max(np.abs(grad * theta)) / max(loss, floor, np.finfo(float).tiny))
    return {
        "a_steps": theta[:L].tolist(),
        "c_steps": theta[L:].tolist(),
        "loss": loss,
        "gradient_norm": float(np.linalg.norm(grad)),
        "relative_gradient": rel,
        "converged": bool(converged or rel <= gtol or loss <= floor),
        "iterations": len(history) - 1,
    }


def eagle_mse(geo: Geometry, prompts: HeldOut, a_steps, c_steps, target=None) -> float:
    """MSE of EAGLE with the given steps against `target` (default: the true D)."""
    pred = predict(geo, prompts.z0, a_steps, c_steps)
    ref = prompts.D if target is None else target
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean((pred - ref) ** 2))


def predict(geo: Geometry, z0: np.ndarray, a_steps, c_steps) -> np.ndarray:
    """EAGLE's prediction of D (b, d', n') in prompt units."""
    s = geo.prompt_scale(z0)
    Z = geo.run_eagle(z0 / s[:, None, None], a_steps, c_steps)[-1]
    return geo.readout_of(Z, z0)


@register("optimum")
def optimum_view(ctx: Context) -> ViewResult:
    """EAGLE's steps fitted to the truth and to the network, from the weight-read steps."""
    geo, tune, held = ctx.geometry, ctx.tuning, ctx.held_out
    proj = ctx.results["projection"].json["layers"]
    a0 = [lay["a_step"] for lay in proj]
    c0 = [lay["c_step"] for lay in proj]
    net_tune = geo.predict(tune.z0, ctx.qk, ctx.vp)
    out = {
        "start": {"a_steps": a0, "c_steps": c0, "from": "projection"},
        "tuning_prompts": int(tune.z0.shape[0]),
        "held_out_prompts": int(held.z0.shape[0]),
        "network_mse": ctx.network_mse,
        "start_mse": eagle_mse(geo, held, a0, c0),
    }
    warnings = []
    for name, target in (("optimal", tune.D), ("distilled", net_tune)):
        fit = fit_steps(geo, tune, target, a0, c0)
        fit["mse"] = eagle_mse(geo, held, fit["a_steps"], fit["c_steps"])
        if name == "distilled":
            fit["gap_to_network"] = eagle_mse(
                geo, held, fit["a_steps"], fit["c_steps"], ctx.network_pred
            )
        out[name] = fit
        out[f"{name}_mse"] = fit["mse"]
        if fit["mse"] > 2 * fit["loss"] + 1e-300 and name == "optimal":
            warnings.append(
                f"the {name} EAGLE's held-out MSE {fit['mse']:.3g} is far above its tuning loss "
                f"{fit['loss']:.3g}: steps tuned on {tune.z0.shape[0]} prompts fail on others "
                "(typically rare prompts with a large ‖A‖ when prompts are not normalised)"
            )
        if not fit["converged"]:
            warnings.append(
                f"the {name} EAGLE fit stopped before converging (relative gradient "
                f"{fit['relative_gradient']:.2g} after {fit['iterations']} iterations)"
            )
    return ViewResult("optimum", out, {}, warnings)
