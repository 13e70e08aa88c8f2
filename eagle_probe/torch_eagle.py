"""EAGLE least squares in torch, batched over a leading axis, on any torch device.

    solve_eagle_torch(A, b, x0=None, *, rtol=1e-10, atol=0.0, maxiter=None, callback=None)
        -> (x, info)

is `eagle_probe.solvers.solve_eagle` (Algorithm 1 on the prompt [[A, r0], [I_n, 0]], η = 1/3,
γ = 1) for A (m, n) or a batch A (p, m, n), b (m,) or (p, m), in float32 or float64, on the device
of A. x = x0 + A⁺(b − A x0) with numpy's A⁺ (cutoff max(m, n)·eps·σ_1).

info, per problem (an int, or an int64 tensor (p,) for a batch), as in the NumPy solver: 0 only
with a certificate of the answer, > 0 iterations used without one, < 0 -1 breakdown, -2
non-finite numbers, -3 x not representable. The certificate is the NumPy solver's full-rank one,
batched: at a candidate stop (a step ‖x_k − x_{k−1}‖ ≤ rtol ‖x_k − x0‖, a step ≤ 1e-4 that no
longer halves, or, once per problem, the step's own A_lᵀA_l clustered to ‖I − A_lᵀA_l/μ‖_F ≤
1/2, see EARLY) G = Ã M_l is recomputed, K = GᵀG must satisfy ‖I − K/μ‖_F ≤ 1/2 (μ = trace K / n:
every singular value of A resolved and clustered), and with r = b − A x recomputed, the range
error d = M_l K⁻¹ Gᵀ r of x (exactly A⁺r for any invertible M_l; K is well conditioned, so a
Cholesky solve is accurate) is added up to three times; info 0 when ‖d‖ + ε_0 ≤ bound/4 · ‖x‖,
bound = max(rtol, 100 · κ̂ · eps), where ε_0 is the rounding of r0 (as in NumPy) and
κ̂ = σ̂_1 λ̂_max(M_l) / √(μ (1 − δ)) over-estimates σ_1/σ_n (σ̂_1 and λ̂_max are upper bounds, see
`_top_bound`; G's singular values σ_i(A) m_l(σ_i²) lie within [√(μ(1 − δ)), √(μ(1 + δ))]) by at
most √3 · n^(3/32), so the bound is never tighter than the noise floor allows. Problems the
batched certificate cannot decide (numerical rank below n, m < n, a breakdown, the resolution
limit or maxiter reached) are solved again, one by one, by the NumPy solver, whose answer and
info they then carry.

ρ = ‖A_l‖₂⁻² needs no eigen-solver after the first step: once K_l is divided by an upper bound
of its largest eigenvalue (all eigenvalues t ∈ (0, 1]), one step maps t to t (1 − η t)², which
for η ≤ 1/3 increases on [0, 1] (and stays below (1 − η)² up to t = 4): (1 − η)² bounds the next
largest eigenvalue, so λ_l = λ_0 (1 − η)^(2l); λ_0 is the upper bound ‖K^8‖_F^(1/8) of
`_top_bound`. Cost per iteration and problem: three products of about n × n by n × n,
[A_l | C_l]ᵀ[A_l | C_l], [A_l | C_l] T and Tᵀ [M_l | y]ᵀ (see `_solve`), into memory allocated
once. Problems leave the batch when they are certified, so the batch shrinks as it converges.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from eagle_probe import solver_template as template

ETA, GAMMA = template.THEORY_ETA, template.THEORY_GAMMA
SQUARINGS = 4  # `_top_bound`: λ_max from trace K^16, at most n^(1/16) above it
CLUSTER = template.CLUSTER
CERT_FLOOR, CERT_MARGIN, REFINE = template.CERT_FLOOR, template.CERT_MARGIN, template.REFINE
RATIO = GAMMA / ETA  # κ: Z's C column is C_l times this, Vᵀ's last row −y (see `_solve`)
COMPACT = 0.8  # the batch is compacted when fewer than this share of it is still running
SLICE = 1024  # problems at a time where a temporary the batch's size is not needed
CERT_SLICE = 512  # problems at a time in the certificate
# A candidate stop, once per problem, besides the step tests: the step's own P shows A_l's
# singular values clustered, ‖I − A_lᵀA_l / μ‖_F ≤ EARLY (μ its mean eigenvalue). A_l = Ã M_l in
# exact arithmetic, so the certificate's fresh K is then clustered too, and its refinement (the
# range error d is exact whatever the iterate) finishes the solve a few steps early
EARLY = CLUSTER


def _as_tensor(name: str, value, device=None) -> torch.Tensor:
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if device is not None:
        t = t.to(device)
    if t.is_complex() or not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise ValueError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float64)
    if t.numel() == 0:
        raise ValueError(f"{name} has an empty dimension: shape {tuple(t.shape)}")
    low, high = torch.aminmax(t)  # NaN propagates: one pass, no temporary of t's size
    if not (math.isfinite(float(low)) and math.isfinite(float(high))):
        raise ValueError(f"{name} contains NaN or Inf")
    return t


def _top(M: torch.Tensor) -> torch.Tensor:
    """max |M| per problem (p,), without a temporary of M's size."""
    low, high = torch.aminmax(M.flatten(1), dim=1)
    return torch.maximum(high, -low)


def _exponent(M: torch.Tensor, top: torch.Tensor | None = None) -> torch.Tensor:
    """Per problem e with max|M| · 2⁻ᵉ in [0.5, 1) (0 for a zero M): (p,) int32; top is
    `_top(M)` where known."""
    top = _top(M) if top is None else top
    _, e = torch.frexp(top)
    return torch.where(top > 0, e, torch.zeros_like(e))


def _ldexp(M: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """M · 2ᵉ per problem (exact), e (p,)."""
    return torch.ldexp(M, e.to(M.dtype).view(-1, *([1] * (M.dim() - 1))))


def _norm(M: torch.Tensor) -> torch.Tensor:
    """‖M‖_F per problem (p,)."""
    return torch.linalg.vector_norm(M, dim=tuple(range(1, M.dim())))


def _top_bound(K: torch.Tensor, squarings: int = SQUARINGS) -> torch.Tensor:
    """An upper bound of λ_max of the symmetric PSD K (p, n, n): λ_max^(2^j) ≤ trace K^(2^j) =
    ‖K^(2^(j−1))‖_F², so λ_max ≤ ‖K^(2^(j−1))‖_F^(1/2^(j−1)), at most n^(1/2^j) λ_max
    (j = squarings; K is divided by its trace first, so nothing overflows)."""
    trace = K.diagonal(dim1=-2, dim2=-1).sum(-1).clamp_min(torch.finfo(K.dtype).tiny)
    P = K / trace.view(-1, 1, 1)
    for _ in range(squarings - 1):
        P = P @ P
    return trace * _norm(P) ** (1.0 / 2 ** (squarings - 1))


def _certify(At, M, y, r0, xs, r0_err, s1, rtol, eps):
    """The batched full-rank certificate at a candidate stop, for q problems. Returns
    (certified (q,), y (q, n, 1): the certified iterate where certified, else the refined one,
    decided (q,): K clustered, so the NumPy solver's verdict is due where not certified)."""
    q, m, n = At.shape
    G = At @ M  # (q, m, n), fresh
    K = G.mT @ G  # (q, n, n)
    mu = K.diagonal(dim1=-2, dim2=-1).sum(-1) / n  # (q,)
    E = K / mu.clamp_min(1e-300).view(-1, 1, 1)
    E.diagonal(dim1=-2, dim2=-1).sub_(1.0)  # K/μ − I
    delta = _norm(E)
    clustered = (delta <= CLUSTER) & (mu > 0)
    # κ̂ = σ̂_1 λ_max(M_l) / √(μ (1 − δ)); M_l = m_l(ÃᵀÃ) is symmetric positive definite here
    spread = torch.sqrt(mu * (1.0 - delta.clamp(max=CLUSTER))).clamp_min(1e-300)
    # λ_max(M_l) ≤ _top_bound(M_l) ≤ ‖M_l‖_F: where even ‖M_l‖_F keeps CERT_FLOOR · κ̂ · eps below
    # rtol / 2, the bound is rtol whatever _top_bound gives, which is then not computed
    kappa = torch.zeros_like(spread)
    need = CERT_FLOOR * eps * s1 * _norm(M) / spread > 0.5 * rtol
    if bool(need.any()):
        kappa[need] = s1[need] * _top_bound(M[need]) / spread[need]
    bound = torch.clamp(CERT_FLOOR * kappa * eps, min=rtol)
    chol, bad = torch.linalg.cholesky_ex(K)  # where not clustered, only bad is read
    clustered = clustered & (bad == 0) & (bound < 1.0)
    out = y
    certified = torch.zeros(q, dtype=torch.bool, device=K.device)
    pending = clustered  # clustered, not yet certified
    for _ in range(REFINE):
        if not bool(pending.any()):
            break
        r = r0 - At @ y  # (q, m, 1): the true residual
        d = M @ torch.cholesky_solve(G.mT @ r, chol)  # (q, n, 1): Ã⁺ r, the error of y
        size = torch.linalg.vector_norm(y.squeeze(-1) + xs, dim=1).clamp_min(1e-300)
        estimate = (_norm(d) + r0_err) / size
        new = pending & (estimate * CERT_MARGIN <= bound)
        out = torch.where(new.view(-1, 1, 1), y, out)
        certified = certified | new
        pending = pending & ~new
        y = torch.where(pending.view(-1, 1, 1), y + d, y)
    out = torch.where(certified.view(-1, 1, 1), out, y)
    return certified, out, clustered


def solve_eagle_torch(
    A,
    b,
    x0=None,
    *,
    rtol: float = 1e-10,
    atol: float = 0.0,
    maxiter: int | None = None,
    callback: Callable[[torch.Tensor], None] | None = None,
):
    """EAGLE least squares for one problem A (m, n), b (m,) or a batch A (p, m, n), b (p, m), on
    A's device in its dtype (float32 or float64; other real types become float64); see the
    module text for the stopping rule and info. Returns (x, info): x (n,) or (p, n) on that
    device; info an int or an int64 tensor (p,). callback(x_k) once per iteration with the
    batch's current iterate (finished problems hold their answer). Inputs are never modified."""
    rtol, atol, maxiter = template.check_options(rtol, atol, maxiter, None, None, callback)
    A = _as_tensor("A", A)
    single = A.dim() == 2
    if A.dim() not in (2, 3):
        raise ValueError(f"A must be (m, n) or (p, m, n), got shape {tuple(A.shape)}")
    b = _as_tensor("b", b, A.device).to(A.dtype)
    A = A.unsqueeze(0) if single else A
    b = b.unsqueeze(0) if single else b
    p, m, n = A.shape
    if b.shape != (p, m):
        raise ValueError(f"b has shape {tuple(b.shape)}, expected {(m,) if single else (p, m)}")
    if x0 is None:
        x0 = torch.zeros(p, n, dtype=A.dtype, device=A.device)
    else:
        x0 = _as_tensor("x0", x0, A.device).to(A.dtype)
        x0 = x0.unsqueeze(0) if single else x0
        if x0.shape != (p, n):
            raise ValueError(f"x0 has shape {tuple(x0.shape)}, expected {(p, n)}")
    x, info, iterations, work = _solve(A, b, x0, rtol, atol, maxiter, callback)
    solve_eagle_torch.last_iterations = iterations
    solve_eagle_torch.last_work = work
    if single:
        return x[0], int(info[0])
    return x, info


solve_eagle_torch.last_iterations = None  # iterations of the last call (its slowest problem)
solve_eagle_torch.last_work = None  # problem-iterations of the last call (Σ batch per iteration)


def _solve(A, b, x0, rtol, atol, maxiter, callback):
    p, m, n = A.shape
    dtype, device = A.dtype, A.device
    eps = float(torch.finfo(dtype).eps)
    info = torch.full((p,), 1, dtype=torch.int64, device=device)
    x = x0.clone()
    sc = _Scaling(A, b, x0)
    k, r, e_out, bt, xs, has_x0, scaled = sc.k, sc.r, sc.e_out, sc.bt, sc.xs, sc.has_x0, sc.scaled
    info[sc.exact] = 0
    done = sc.exact
    # the active problems' state: A_l, M_l, C_l, y, their ρ bound, the last step
    idx = torch.nonzero(~done).squeeze(1)
    q = len(idx)
    Zs, Vs, Ps, Ts, lam0 = _starting_state(A, sc.ea, idx, r if q == p else r[idx])
    Z, Vt = Zs[0], Vs[0]
    s1 = torch.sqrt(lam0)
    r0_err = torch.where(has_x0, eps * (_norm(bt) + s1 * _norm(xs)), torch.zeros_like(s1))
    unit = torch.eye(n + 1, dtype=dtype, device=device)
    D = torch.zeros(n + 1, n + 1, dtype=dtype, device=device)
    D[:n, :n], D[:n, n] = -ETA, -GAMMA
    # trace A_lᵀA_l, ‖[A_lᵀA_l | κ A_lᵀC_l]‖_F and ‖κ A_lᵀC_l‖ (from P's last row) per problem
    trace, gram, edge = (torch.empty(q, dtype=dtype, device=device) for _ in range(3))
    tried = torch.zeros(q, dtype=torch.bool, device=device)  # an EARLY candidate already
    lam = 1.0
    alive = torch.ones(q, dtype=torch.bool, device=device)  # not yet finished
    prev = torch.full((q,), math.inf, dtype=dtype, device=device)
    growth, limit = 0.0, -math.log(max(m, n) * eps)
    it, work = 0, 0
    for it in range(1, maxiter + 1):
        count = int(alive.sum())
        if not count:
            break
        if count < COMPACT * q:  # drop the finished problems from the batch
            keep = torch.nonzero(alive).squeeze(1)
            q = len(keep)
            Z = torch.index_select(Z, 0, keep, out=Zs[1][:q])
            Vt = torch.index_select(Vt, 0, keep, out=Vs[1][:q])
            Zs.reverse(), Vs.reverse()
            idx, prev, alive, tried = idx[keep], prev[keep], alive[keep], tried[keep]
            trace, gram, edge = trace[:q], gram[:q], edge[:q]
        work += q
        growth += -math.log(1.0 - ETA)
        if growth > limit:  # only noise below the cutoff is left to resolve
            it -= 1
            break
        Dl = D / lam
        newZ, newVt = Zs[1][:q], Vs[1][:q]
        for i in range(0, q, SLICE):
            j = min(q, i + SLICE)
            z = Z[i:j]
            P = torch.bmm(z.mT, z, out=Ps[: j - i])  # [[A_lᵀA_l, κ A_lᵀC_l], [κ C_lᵀA_l, κ²‖C_l‖²]]
            torch.sum(P[:, :n, :n].diagonal(dim1=-2, dim2=-1), dim=-1, out=trace[i:j])
            flat = P.view(j - i, -1)  # n rows of n + 1, then κ C_lᵀA_l and κ²‖C_l‖²
            torch.linalg.vector_norm(flat[:, : n * (n + 1)], dim=1, out=gram[i:j])
            torch.linalg.vector_norm(flat[:, n * (n + 1) : -1], dim=1, out=edge[i:j])
            T = torch.addcmul(unit, P, Dl, out=Ts[: j - i])
            torch.bmm(T.mT, Vt[i:j], out=newVt[i:j])
            torch.bmm(z, T, out=newZ[i:j])
        step_norm = torch.linalg.vector_norm(newVt[:, n] - Vt[:, n], dim=1) / RATIO
        Z, Vt = newZ, newVt  # ‖γ M_l A_lᵀC_l / λ‖ above
        Zs.reverse(), Vs.reverse()
        lam = lam * (1.0 - ETA) ** 2  # the next bound
        finite = torch.isfinite(trace) & torch.isfinite(step_norm) & (trace > 0)
        if callback is not None or atol > 0:
            y = Vt[:, n].unsqueeze(-1) / -RATIO  # (q, n, 1)
        if callback is not None:
            x_now = x.clone()
            x_now[idx[alive]] = x0[idx[alive]] + _ldexp(y[alive].squeeze(-1), e_out[idx[alive]])
            callback(x_now)
        y_norm = torch.linalg.vector_norm(Vt[:, n], dim=1) / RATIO
        rel = step_norm / y_norm.clamp_min(1e-300)
        # ‖I − K/μ‖_F² = ‖K‖_F² / μ² − n for K = A_lᵀA_l, μ = trace K / n
        early = alive & ~tried & ((gram**2 - edge**2) * n**2 <= trace**2 * (n + EARLY**2))
        tried = tried | early
        candidate = alive & (template.candidate_stop(rel, prev, rtol) | early)
        prev = rel
        finite = finite | ~alive  # a finished problem's numbers no longer matter
        leave = ~finite  # non-finite ones: the NumPy solver below
        if atol > 0:
            res = _ldexp(_norm(r[idx] - scaled(idx) @ y), k[idx])
            hit = alive & finite & (res <= atol)
            x[idx[hit]] = x0[idx[hit]] + _ldexp(y[hit].squeeze(-1), e_out[idx[hit]])
            info[idx[hit]] = 0
            candidate = candidate & ~hit
            leave = leave | hit
        check = candidate & finite
        if bool(check.any()):
            sel = torch.nonzero(check).squeeze(1)
            g = idx[sel]
            ok, y_sel, decided = _certify_batch(sc, Vt, sel, g, r0_err, s1, rtol, eps)
            # clustered, yet no certificate: the NumPy solver decides, except after an EARLY
            # attempt, where the iteration goes on (from its own iterate, not the refined one,
            # which would no longer match C_l)
            leave[sel] = ok | (decided & ~early[sel])
            good = g[ok]
            x[good] = x0[good] + _ldexp(y_sel[ok].squeeze(-1), e_out[good])
            info[good] = 0
        alive = alive & ~leave
    _numpy_fallback(A, b, x0, x, info, rtol, atol, maxiter)
    return x, info, it, work


def _starting_state(A, ea, idx, r_a):
    """The batch's buffers, two of Z = [A_l | κ C_l] and of Vᵀ = [M_l | −κ y]ᵀ (the first holding
    the start) and the P and T buffers of SLICE problems, and λ_0 per problem.

    Z = [A_l | κ C_l] (q, m, n + 1) and Vᵀ = [M_l | −κ y]ᵀ (q, n + 1, n), κ = γ/η: one step,
    A_l ← A_l W, M_l ← M_l W (W = I − η K̂), C_l ← C_l − γ A_l A_lᵀC_l / λ, y += γ M_l A_lᵀC_l / λ,
    is Z ← Z T and Vᵀ ← Tᵀ Vᵀ with T = [[W, −γ κ A_lᵀC_l / λ], [0, 1]] (n + 1, n + 1) built
    from P = Zᵀ Z in one pass, T = I + P ⊙ D / λ (D: −η on the W block, −γ on the last column
    above it, 0 on the last row): three batched products of contiguous operands a step, and −κ y
    a contiguous row of Vᵀ. Z and Vᵀ live in memory allocated once (two of each, used in turn),
    P and T in buffers of SLICE problems, each slice's three products run while its P and T are
    in cache: a fresh block of the batch's size every step would cost about a product in
    first-touch page faults, and one that leaves the cache about half of one.

    A_l and M_l start divided by the first bound √λ_0 of ‖Ã‖₂, so that the bound after l steps,
    λ_0 (1 − η)^(2l), is the scalar (1 − η)^(2l) for every problem (module text)."""
    p, m, n = A.shape
    dtype, device = A.dtype, A.device
    q = len(idx)
    Zs = [torch.empty(q, m, n + 1, dtype=dtype, device=device) for _ in range(2)]
    Vs = [torch.empty(q, n + 1, n, dtype=dtype, device=device) for _ in range(2)]
    width = min(q, SLICE)
    Ps = torch.empty(width, n + 1, n + 1, dtype=dtype, device=device)
    Ts = torch.empty(width, n + 1, n + 1, dtype=dtype, device=device)
    Z, Vt = Zs[0], Vs[0]
    lam0 = torch.zeros(p, dtype=dtype, device=device)
    for i in range(0, q, SLICE):
        j = min(q, i + SLICE)
        rows = slice(i, j) if q == p else idx[i:j]
        z = Z[i:j, :, :n]
        z.copy_(A[rows])
        torch.ldexp(z, (-ea[rows]).to(dtype).view(-1, 1, 1), out=z)  # Ã, exactly
        lam0[rows] = _top_bound(z.mT @ z)  # ‖Ã‖₂² from above
        z.div_(torch.sqrt(lam0[rows]).view(-1, 1, 1))
    s0 = torch.sqrt(lam0[idx]).view(-1, 1, 1)
    Z[..., n:].copy_(r_a).mul_(RATIO)
    Vt.zero_()
    Vt[:, :n].diagonal(dim1=-2, dim2=-1).copy_(1.0 / s0.view(-1, 1))
    return Zs, Vs, Ps, Ts, lam0


def _certify_batch(sc: _Scaling, Vt, sel, g, r0_err, s1, rtol, eps):
    """`_certify` of the batch rows `sel` (problems `g`), CERT_SLICE problems at a time:
    temporaries that small are reused, not faulted in. (certified, refined y, decided)."""
    n = Vt.shape[-1]
    parts = []
    for h in range(0, len(sel), CERT_SLICE):
        sh, gh = sel[h : h + CERT_SLICE], g[h : h + CERT_SLICE]
        Vsel = Vt[sh]  # (s, n + 1, n)
        parts.append(
            _certify(
                sc.scaled(gh),
                Vsel[:, :n].mT,
                Vsel[:, n].unsqueeze(-1) / -RATIO,
                sc.r[gh],
                sc.xs[gh],
                r0_err[gh],
                s1[gh],
                rtol,
                eps,
            )
        )
    return (torch.cat(t) for t in zip(*parts, strict=True))


class _Scaling:
    """The exact power-of-two scaling of every problem (`solver_template._lstsq`):
    Ã = A 2^(−ea), the residual of x0 scaled to r = (b − A x0) 2^(−k) with k chosen so that r's
    largest entry is near 1, and x = x0 + 2^e_out y for the iterate y of the scaled problem."""

    def __init__(self, A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor) -> None:
        p = A.shape[0]
        self.A = A
        top_a = _top(A)
        self.ea = ea = _exponent(A, top_a)
        slices = [slice(i, min(p, i + SLICE)) for i in range(0, p, SLICE)]
        k = _exponent(b)
        self.has_x0 = has_x0 = (x0 != 0).any(dim=1)
        k = torch.where(has_x0, torch.maximum(k, ea + _exponent(x0)), k)
        r = _ldexp(b, -k).unsqueeze(-1)  # (p, m, 1)
        if bool(has_x0.any()):
            xk = _ldexp(x0, ea - k).unsqueeze(-1)
            r = r - torch.cat([self.scaled(s) @ xk[s] for s in slices])
        kr = _exponent(r)
        zero_r = ~(r.flatten(1) != 0).any(dim=1)
        self.r = _ldexp(r, -kr)
        self.k = k = k + kr
        self.e_out = k - ea  # x = x0 + 2^e_out y
        self.bt = _ldexp(b, -k)
        self.xs = _ldexp(x0, ea - k)
        self.exact = (top_a == 0) | zero_r  # A = 0 or b = A x0: x0 is the answer

    def scaled(self, rows) -> torch.Tensor:
        """Ã = A 2^(−ea) of the problems `rows` (a slice or indices)."""
        return _ldexp(self.A[rows], -self.ea[rows])


def _numpy_fallback(A, b, x0, x, info, rtol, atol, maxiter) -> None:
    """What the batched certificate could not decide (info ≠ 0): the NumPy solver (`eagle.lstsq`
    with this module's η and γ, as `solvers.solve_eagle`), one problem at a time, its answer and
    code written into x and info."""
    undecided = torch.nonzero(info != 0).squeeze(1).tolist()
    if not undecided:
        return
    A64 = A.detach().to("cpu", torch.float64).numpy()
    b64 = b.detach().to("cpu", torch.float64).numpy()
    x064 = x0.detach().to("cpu", torch.float64).numpy()
    for j in undecided:
        xj, ij = template.lstsq(
            A64[j], b64[j], x064[j], rtol=rtol, atol=atol, maxiter=maxiter, eta=ETA, gamma=GAMMA
        )
        x[j] = torch.as_tensor(xj, dtype=x.dtype, device=x.device)
        info[j] = ij


DRIVERS = {"cpu": ("gelsd", "gelsy", "gelss", "gels"), "cuda": ("gels",)}


def lstsq_torch(A, b, *, driver: str | None = None) -> tuple[torch.Tensor, str]:
    """torch.linalg.lstsq for A (m, n) or (p, m, n), b (m,) or (p, m) on A's device: (x, driver).
    The driver defaults to gelsd (SVD, numpy's) on the CPU and gels (QR, full rank only, the
    one CUDA has) elsewhere; an unknown one raises ValueError."""
    A = _as_tensor("A", A)
    b = _as_tensor("b", b, A.device).to(A.dtype)
    kind = "cpu" if A.device.type == "cpu" else "cuda"
    known = DRIVERS[kind]
    driver = known[0] if driver is None else driver
    if driver not in known:
        raise ValueError(f"unknown driver {driver!r} on {A.device}; choose from {', '.join(known)}")
    rcond = max(A.shape[-2:]) * float(torch.finfo(A.dtype).eps) if driver != "gels" else None
    x = torch.linalg.lstsq(A, b.unsqueeze(-1), rcond=rcond, driver=driver).solution
    return x.squeeze(-1), driver
