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

from eagle_probe.fit.base import Context, HeldOut, ViewResult, affordable, register
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


def _grow(X: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Tangents X (b, p, …) with one more, `new` (b, …), appended: (b, p + 1, …)."""
    return np.concatenate([X, new[:, None]], axis=1)


def _rows_jacobian(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`eagle_jacobian` for the sample layout's row-tied family (B moves with c and C with a), with
    every tangent carried through every block."""
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


def eagle_jacobian(
    geo: Geometry, z0: np.ndarray, a_steps, c_steps, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE's prediction (b, d', n') in prompt units and its Jacobian (b, 2L, d', n')
    with respect to (a_0 … a_{L−1}, c_0 … c_{L−1}); `scale` is geo.prompt_scale(z0) if given.

    Only the tangents that can be nonzero are carried: before layer l only a_0 … a_{l−1} and
    c_0 … c_{l−1} have acted, and the c's never reach A or B, so the c tangents live in the n'
    query columns alone."""
    if geo.samples:
        return _rows_jacobian(geo, z0, a_steps, c_steps, scale)
    L = len(a_steps)
    s = (geo.prompt_scale(z0) if scale is None else scale)[:, None, None]
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
        pred = geo.readout * D * s
        jac = geo.readout * np.concatenate([tDa, tDc], axis=1) * s[:, None]
    return pred, jac


def spectral(geo: Geometry) -> bool:
    """True when the regime's reading of EAGLE uses the plain Gram AᵀA and no query projector:
    then every step is a spectral filter of A_0 and `spectral_jacobian` applies."""
    if geo.samples:  # the row-tied family: not a filter of A_0 alone
        return False
    plain_gram = geo.reading != "distributed"
    plain_query = not (geo.reading == "constrained" and geo.projector is not None)
    return plain_gram and plain_query


def spectral_factors(
    geo: Geometry, z0: np.ndarray, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prompt the singular values σ (b, r) of A_0 = U Σ Vᵀ (internal units), the rank-one
    outputs O_i = (B_0 v_i)(u_iᵀ C_0) (b, r, d', n') and the prompt scale s (b,)."""
    s = geo.prompt_scale(z0) if scale is None else scale
    A, B, C, _ = geo.blocks(z0 / s[:, None, None])
    U, sigma, Vt = np.linalg.svd(A, full_matrices=False)  # (b, d, r), (b, r), (b, r, n)
    beta = B @ Vt.swapaxes(-1, -2)  # (b, d', r)
    gamma = U.swapaxes(-1, -2) @ C  # (b, r, n')
    outer = beta.swapaxes(-1, -2)[..., :, None] * gamma[..., None, :]  # (b, r, d', n')
    return sigma, outer, s


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
    # the plain Gram: one SVD per prompt, then O(L² r) per Jacobian (`spectral_jacobian`)
    factors = spectral_factors(geo, prompts.z0, scale) if spectral(geo) else None

    def evaluate(th: np.ndarray, sl: slice, jacobian: bool):
        if factors is not None:
            part = tuple(f[sl] for f in factors)
            if jacobian:
                return spectral_jacobian(geo, part, th[:L], th[L:])
            return spectral_predict(geo, part, th[:L], th[L:])
        if jacobian:
            return eagle_jacobian(geo, prompts.z0[sl], th[:L], th[L:], scale[sl])
        return predict(geo, prompts.z0[sl], th[:L], th[L:], scale[sl])

    def loss_of(th: np.ndarray) -> float:
        rss = 0.0
        for start in range(0, prompts.z0.shape[0], chunk):
            sl = slice(start, start + chunk)
            pred = evaluate(th, sl, jacobian=False)
            with np.errstate(over="ignore", invalid="ignore"):
                rss += float(np.sum((pred - target[sl]) ** 2))
        return rss / m

    def normal(th: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        JtJ, Jtr, rss = np.zeros((2 * L, 2 * L)), np.zeros(2 * L), 0.0
        for start in range(0, prompts.z0.shape[0], chunk):
            sl = slice(start, start + chunk)
            pred, jac = evaluate(th, sl, jacobian=True)
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
            # the loss decides; the Jacobian is computed only for a step that is taken
            if math.isfinite(t_loss := loss_of(trial)) and t_loss < loss:
                t_loss, t_JtJ, t_Jtr = normal(trial)
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
    `eagle_jacobian` (the same numbers); `scale` is geo.prompt_scale(z0) if given."""
    s = (geo.prompt_scale(z0) if scale is None else scale)[:, None, None]
    A, B, C, D = (x.copy() for x in geo.blocks(z0 / s))
    D[...] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
            At = A.swapaxes(-1, -2)
            K = geo.gram_map(At @ A, layer)
            M = geo.query_operator(layer) @ (At @ C)
            sB, sC = (c, a) if geo.samples else (a, c)  # the row-tied family swaps them
            A, B, C, D = A - a * (A @ K), B - sB * (B @ K), C - sC * (A @ M), D - c * (B @ M)
        return geo.readout * D * s


# Cost, in layer passes of the network's products per prompt (`fit.base.layer_flops`): one EAGLE
# layer with p carried tangents is about 1.5 (p + 1) / h passes, and a fit takes a few tens of
# Jacobians (FIT_JACOBIANS); the spectral fit costs about one pass (an SVD). Paper-sized models
# tune on all 512 tuning prompts; never fewer than TUNING_FLOOR, nor than 8 residuals per step.
FIT_JACOBIANS = 30
TUNING_FLOOR = 4


def fit_passes(geo: Geometry) -> float:
    """Layer passes per tuning prompt of one fit (FIT_JACOBIANS Jacobians of L/2 + 1 tangents on
    average per layer)."""
    L = geo.layers
    return FIT_JACOBIANS * L * (L / 2 + 1) * 1.5 / geo.heads


@register("optimum")
def optimum_view(ctx: Context) -> ViewResult:
    """EAGLE's steps fitted to the truth and to the network, from the weight-read steps."""
    geo = ctx.geometry
    floor = max(TUNING_FLOOR, math.ceil(8 * 2 * geo.layers / (geo.d_prime * geo.n_prime)))
    # the network's forward on the tuning prompts, and the fits unless they are spectral
    passes = geo.layers + (1.0 if spectral(geo) else fit_passes(geo))
    tune = ctx.tuning.first(affordable(geo, passes, ctx.tuning.prompts, floor=floor))
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
    warnings = []
    for name, target in (("optimal", tune.D), ("distilled", net_tune)):
        fit = fit_steps(geo, tune, target, a0, c0)
        fit["mse"] = eagle_mse(geo, held, fit["a_steps"], fit["c_steps"], factors=held_factors)
        if name == "distilled":
            fit["gap_to_network"] = eagle_mse(
                geo, held, fit["a_steps"], fit["c_steps"], net_held, factors=held_factors
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
