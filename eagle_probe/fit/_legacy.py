"""Recover each layer's update from a `Capture`. Plain NumPy (and sympy): no torch here.

Two views, side by side:

(a) The design's polynomial update, in card notation (A_card = Aᵀ, b = Bᵀ, x = wᵀ, G = A Aᵀ):

        x_{l+1} = x_l − Σ_i α_i G^{p_i} A_cardᵀ (b − A_card x_l),

    with A_cardᵀ(b − A_card x) = A Bᵀ − G x,

    fitted per layer and head by least squares in a Chebyshev basis on [0, λ_max(G)] (stable where
    monomials are not), the degree chosen by BIC with a round-off floor, then converted to
    monomials. Descent means α < 0; `step = −α`.

(b) The EAGLE form (Algorithm 1 of the paper): per layer the coefficients a_l, c_l of
        A ← A − a A AᵀA,  B ← B − a B AᵀA,  C ← C − c A Aᵀ C,  D_slot ← D_slot − c B Aᵀ C,
    (the D slot carries −D_EAGLE; the readout negates it), η_l = a_l ‖A_l‖², γ_l = c_l ‖A_l‖² with
    the batch-max spectral norm, and the fidelity of the whole algorithm against the network in the
    paper's Table 1 metric ‖Z_network − Z_EAGLE‖²_F / #entries (original prompt units).
    Expanding the recursion m_0 = 1, m_{l+1} = m_l (1 − a_l λ m_l²) gives the design's orders
    exactly: α_{l,p} = −c_l · [λ^p] m_l(λ)².
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.polynomial import Polynomial
from numpy.polynomial import chebyshev as cheb

from eagle_probe.capture import Capture

ROUNDOFF = 1e-11  # relative residual treated as an exact fit (float64 capture)


# --- (a) the design's polynomial update --------------------------------------------------------


@dataclass(frozen=True)
class PolyFit:
    """Δx ≈ Σ_p β_p G^p r with r = A Bᵀ − G x; α_p = −β_p."""

    beta: np.ndarray  # (K + 1,) monomial coefficients of λ^0 … λ^K
    degree: int  # K, chosen by BIC
    r2: float  # 1 − ‖Δx − fit‖² / ‖Δx‖² (uncentred: the model has no intercept)
    rel_residual: float  # ‖Δx − fit‖ / ‖Δx‖
    lam_max: float  # λ_max(G) over the batch: the fit's interval is [0, lam_max]

    @property
    def alpha(self) -> np.ndarray:
        return -self.beta

    def orders(self, rtol: float = 1e-6) -> list[int]:
        """Orders whose term matters on [0, λ_max]: |β_p| λ_max^p above rtol of the largest."""
        size = np.abs(self.beta) * self.lam_max ** np.arange(self.beta.size)
        if size.max() == 0:
            return []
        return [int(p) for p in np.flatnonzero(size >= rtol * size.max())]

    def filter(self, lam: np.ndarray) -> np.ndarray:
        """The fitted spectral filter f(λ) = Σ β_p λ^p."""
        return Polynomial(self.beta)(lam)


def chebyshev_features(G: np.ndarray, r: np.ndarray, degree: int, lam_max: float) -> np.ndarray:
    """T_k(2G/λ_max − I) r for k = 0..degree: (degree + 1, b, d, d')."""
    t = 2.0 * G / lam_max - np.eye(G.shape[-1])
    feats = [r]
    if degree >= 1:
        feats.append(t @ r)
    for _ in range(2, degree + 1):
        feats.append(2.0 * (t @ feats[-1]) - feats[-2])
    return np.stack(feats)


def fit_polynomial(
    G: np.ndarray, r: np.ndarray, dx: np.ndarray, *, max_degree: int = 16
) -> PolyFit:
    """Fit dx ≈ f(G) r over a batch; G (b, d, d), r and dx (b, d, d')."""
    lam_max = float(np.linalg.eigvalsh(G).max())
    y = dx.reshape(-1)
    norm_y = float(np.linalg.norm(y))
    if lam_max <= 0 or norm_y == 0:
        return PolyFit(
            np.zeros(1),
            0,
            1.0 if norm_y == 0 else 0.0,
            0.0 if norm_y == 0 else 1.0,
            max(lam_max, 0.0),
        )
    feats = chebyshev_features(G, r, max_degree, lam_max).reshape(max_degree + 1, -1).T
    scale = np.linalg.norm(feats, axis=0)
    scale[scale == 0] = 1.0
    # One QR serves every nested degree: the fit on the first K + 1 columns uses Q[:, :K + 1].
    Q, R = np.linalg.qr(feats / scale)
    qty = Q.T @ y
    N = y.size
    floor = (ROUNDOFF * norm_y) ** 2
    best = None
    for K in range(max_degree + 1):
        rss = max(norm_y**2 - float(np.sum(qty[: K + 1] ** 2)), 0.0)
        bic = N * math.log(max(rss, floor) / N) + (K + 1) * math.log(N)
        if best is None or bic < best[0] - 1e-9:
            best = (bic, K)
    _, K = best
    coef = np.linalg.lstsq(R[: K + 1, : K + 1], qty[: K + 1], rcond=None)[0] / scale[: K + 1]
    rss = float(np.sum((y - feats[:, : K + 1] @ coef) ** 2))
    mono = cheb.cheb2poly(coef)  # coefficients in t = 2λ/λ_max − 1
    beta = Polynomial(mono)(Polynomial([-1.0, 2.0 / lam_max])).coef
    beta = np.pad(beta, (0, K + 1 - beta.size))[: K + 1]
    rel = math.sqrt(rss) / norm_y
    return PolyFit(beta, K, 1.0 - rel**2, rel, lam_max)


def residual_direction(cap: Capture, layer: int) -> np.ndarray:
    """A_cardᵀ(b − A_card x_l) = A Bᵀ − G x_l: (b, d, d')."""
    return cap.normal_rhs() - cap.normal_matrix() @ cap.x[layer]


def polynomial_view(cap: Capture, *, max_degree: int = 16) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (layer, head) fits of the design's form. Head −1 is the whole layer.

    Returns (fits, terms): one row per fit, and one row per recovered term (order, α, step).
    """
    G = cap.normal_matrix()
    rows, terms = [], []
    for layer in range(cap.layers):
        r = residual_direction(cap, layer)
        dx_layer = cap.x[layer + 1] - cap.x[layer]
        total = float(np.sum(dx_layer**2))
        targets = [(-1, dx_layer)] + [(h, cap.dx_heads[layer, :, h]) for h in range(cap.heads)]
        for head, dx in targets:
            fit = fit_polynomial(G, r, dx, max_degree=max_degree)
            share = 1.0 if head < 0 else float(np.sum(dx * dx_layer)) / total if total else 0.0
            orders = fit.orders()
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "degree": fit.degree,
                    "orders": orders,
                    "r2": fit.r2,
                    "rel_residual": fit.rel_residual,
                    "share": share,
                    "lam_max": fit.lam_max,
                }
            )
            terms += [
                {
                    "layer": layer,
                    "head": head,
                    "order": p,
                    "alpha": float(fit.alpha[p]),
                    "step": float(-fit.alpha[p]),
                }
                for p in orders
            ]
    return pd.DataFrame(rows), pd.DataFrame(
        terms, columns=["layer", "head", "order", "alpha", "step"]
    )


def dynamic_steps(cap: Capture) -> pd.DataFrame:
    """Are the steps dynamic? Per prompt, fit Δx_l ≈ β r_l (order 0 only) and regress
    log |β| (original units: β / s²) on log ‖A‖₂ (original units).

    slope ≈ −2: steps scale like ‖A‖₂⁻² per prompt (dynamic); slope ≈ 0: constant steps.
    """
    A = cap.blocks(0)[0]
    norm = np.linalg.norm(A, ord=2, axis=(-2, -1)) * cap.scale  # original units
    rows = []
    for layer in range(cap.layers):
        r = residual_direction(cap, layer)
        dx = cap.x[layer + 1] - cap.x[layer]
        beta = np.sum(dx * r, axis=(-1, -2)) / np.maximum(np.sum(r * r, axis=(-1, -2)), 1e-300)
        beta_orig = beta / cap.scale**2
        ok = np.abs(beta_orig) > 0
        if ok.sum() >= 3 and np.ptp(np.log(norm[ok])) > 0:
            slope, _ = np.polyfit(np.log(norm[ok]), np.log(np.abs(beta_orig[ok])), 1)
        else:
            slope = float("nan")
        rows.append(
            {
                "layer": layer,
                "step_median": float(np.median(-beta_orig)),
                "step_cv": float(np.std(beta_orig) / max(abs(np.mean(beta_orig)), 1e-300)),
                "slope_vs_norm": float(slope),
            }
        )
    return pd.DataFrame(rows)


# --- (b) the EAGLE form -----------------------------------------------------------------------


@dataclass(frozen=True)
class Structure:
    """How the regime shapes EAGLE's products (S = I, a learned sketch, or column blocks)."""

    regime: str
    projector: np.ndarray | None = None  # constrained: (L, n, n) projector onto the sketch range
    machines: int = 1  # distributed: number of column blocks


def _gram(A: np.ndarray, st: Structure, layer: int) -> np.ndarray:
    """AᵀA as the regime sees it: (b, n, n)."""
    K = A.swapaxes(-1, -2) @ A
    if st.regime == "constrained" and st.projector is not None:
        P = st.projector[layer]
        return P @ K @ P
    if st.regime == "distributed":
        n = A.shape[-1]
        block = n // st.machines
        ids = np.arange(n) // block
        return K * (ids[:, None] == ids[None, :])
    return K


def _query_product(A: np.ndarray, st: Structure, layer: int) -> np.ndarray:
    """The (n, n) operator between Aᵀ and A in the C/D update: P (sketch) or I."""
    if st.regime == "constrained" and st.projector is not None:
        return st.projector[layer]
    return np.eye(A.shape[-1])


def eagle_features(Z: np.ndarray, d: int, n: int, st: Structure, layer: int) -> tuple:
    """The four EAGLE directions for the stream Z (b, T, E): (FA, FB, FC, FD)."""
    A, B, C = Z[:, :d, :n], Z[:, d:, :n], Z[:, :d, n:]
    K = _gram(A, st, layer)
    P = _query_product(A, st, layer)
    At = A.swapaxes(-1, -2)
    return A @ K, B @ K, A @ P @ At @ C, B @ P @ At @ C


def _coef(delta: list[np.ndarray], feats: list[np.ndarray]) -> float:
    """c minimising Σ ‖Δ + c F‖²."""
    num = sum(float(np.sum(dl * f)) for dl, f in zip(delta, feats, strict=True))
    den = sum(float(np.sum(f * f)) for f in feats)
    return -num / den if den > 0 else 0.0


def eagle_step(Z: np.ndarray, d: int, n: int, st: Structure, layer: int, a: float, c: float):
    """One EAGLE layer on the stream Z (b, T, E), D slot in the network's (negated) convention."""
    FA, FB, FC, FD = eagle_features(Z, d, n, st, layer)
    out = Z.copy()
    out[:, :d, :n] -= a * FA
    out[:, d:, :n] -= a * FB
    out[:, :d, n:] -= c * FC
    out[:, d:, n:] -= c * FD
    return out


def eagle_view(cap: Capture, st: Structure) -> pd.DataFrame:
    """Per layer: a, c (joint and per block), η, γ, one-step residual, Table-1 fidelity."""
    d, n = cap.d, cap.n
    rows = []
    a_steps, c_steps = [], []
    for layer in range(cap.layers):
        Z, Z1 = cap.Z[layer], cap.Z[layer + 1]
        dZ = Z1 - Z
        FA, FB, FC, FD = eagle_features(Z, d, n, st, layer)
        dA, dB, dC, dD = dZ[:, :d, :n], dZ[:, d:, :n], dZ[:, :d, n:], dZ[:, d:, n:]
        a = _coef([dA, dB], [FA, FB])
        c = _coef([dC, dD], [FC, FD])
        a_steps.append(a)
        c_steps.append(c)
        pred = eagle_step(Z, d, n, st, layer, a, c) - Z
        one_step = float(np.linalg.norm(dZ - pred) / max(np.linalg.norm(dZ), 1e-300))
        norm2 = float(np.linalg.norm(Z[:, :d, :n], ord=2, axis=(-2, -1)).max() ** 2)
        rows.append(
            {
                "layer": layer,
                "a_step": a,
                "c_step": c,
                "a_from_A": _coef([dA], [FA]),
                "a_from_B": _coef([dB], [FB]),
                "c_from_C": _coef([dC], [FC]),
                "c_from_D": _coef([dD], [FD]),
                "norm_a_max": math.sqrt(norm2),
                "eta": a * norm2,
                "gamma": c * norm2,
                "one_step_residual": one_step,
            }
        )
    fid = fidelity(cap, st, a_steps, c_steps)
    blocks = fidelity_blocks(cap, st, a_steps, c_steps)
    change = [
        float(((cap.Z[lay + 1] - cap.Z[0]) ** 2 * cap.scale[:, None, None] ** 2).mean())
        for lay in range(cap.layers)
    ]
    for row, f, ch, bl in zip(rows, fid, change, blocks, strict=True):
        row["fidelity"] = f
        row.update({f"fidelity_{k}": v for k, v in bl.items()})
        row["fidelity_rel"] = f / ch if ch > 0 else float("nan")
    return pd.DataFrame(rows)


def run_eagle(cap: Capture, st: Structure, a_steps, c_steps) -> np.ndarray:
    """EAGLE from the captured input with the given steps: (L + 1, b, T, E), internal units."""
    Z = [cap.Z[0]]
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        with np.errstate(over="ignore", invalid="ignore"):
            Z.append(eagle_step(Z[-1], cap.d, cap.n, st, layer, a, c))
    return np.stack(Z)


def fidelity(cap: Capture, st: Structure, a_steps, c_steps) -> list[float]:
    """Paper Table 1 metric per layer: ‖Z_net,l − Z_EAGLE,l‖²_F / #entries in original units."""
    return [float(e.mean()) for e in _squared_gap(cap, st, a_steps, c_steps)]


def fidelity_blocks(cap: Capture, st: Structure, a_steps, c_steps) -> list[dict[str, float]]:
    """The Table 1 metric split by block: mean squared gap over A, B, C and D entries."""
    d, n = cap.d, cap.n
    out = []
    for e in _squared_gap(cap, st, a_steps, c_steps):
        out.append(
            {
                "A": float(e[:, :d, :n].mean()),
                "B": float(e[:, d:, :n].mean()),
                "C": float(e[:, :d, n:].mean()),
                "D": float(e[:, d:, n:].mean()),
            }
        )
    return out


def _squared_gap(cap: Capture, st: Structure, a_steps, c_steps) -> np.ndarray:
    """(L, b, T, E) squared gap between network and EAGLE after each layer, prompt units."""
    alg = run_eagle(cap, st, a_steps, c_steps)
    s2 = cap.scale[None, :, None, None] ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        return ((cap.Z - alg) ** 2 * s2)[1:]


def eagle_expansion(a_steps, c_steps) -> list[np.ndarray]:
    """Design-form coefficients implied by EAGLE: per layer, β_p = c_l [λ^p] m_l(λ)² (α = −β).

    m_0 = 1, m_{l+1}(λ) = m_l(λ) (1 − a_l λ m_l(λ)²) (card notation; exact, see module doc).
    """
    m = Polynomial([1.0])
    lam = Polynomial([0.0, 1.0])
    out = []
    for a, c in zip(a_steps, c_steps, strict=True):
        out.append((c * m * m).coef.copy())
        m = m * (1 - a * lam * m * m)
    return out


def expansion_gap(fits: pd.DataFrame, cap: Capture, a_steps, c_steps) -> list[float]:
    """Largest gap between the fitted filter (view a) and EAGLE's c_l m_l² (view b) on the
    spectrum actually present, relative to the largest value of the latter."""
    G = cap.normal_matrix()
    lam = np.linalg.eigvalsh(G).reshape(-1)
    lam = lam[lam > 1e-12 * max(lam.max(), 1e-300)]
    gaps = []
    expansions = eagle_expansion(a_steps, c_steps)
    for layer, beta_eagle in enumerate(expansions):
        row = fits[(fits.layer == layer) & (fits["head"] == -1)].iloc[0]
        fitted = _layer_beta(cap, layer, G, row)
        f_fit, f_eagle = Polynomial(fitted)(lam), Polynomial(beta_eagle)(lam)
        scale = max(float(np.abs(f_eagle).max()), 1e-300)
        gaps.append(float(np.abs(f_fit - f_eagle).max() / scale))
    return gaps


def _layer_beta(cap: Capture, layer: int, G: np.ndarray, row) -> np.ndarray:
    r = residual_direction(cap, layer)
    return fit_polynomial(
        G, r, cap.x[layer + 1] - cap.x[layer], max_degree=max(int(row["degree"]), 0)
    ).beta


# --- (c) weight space -------------------------------------------------------------------------


def sparsify(W: np.ndarray) -> np.ndarray:
    """Zero the entries below τ = 1.5 ‖W‖₁ / #entries."""
    tau = 1.5 * np.abs(W).sum() / W.size
    return np.where(np.abs(W) >= tau, W, 0.0)


def _describe_block(block: np.ndarray) -> tuple[str, float | None]:
    """A block after sparsification: '0', 'q I', 'diag', or 'dense' (and its level)."""
    if not np.any(block):
        return "0", 0.0
    if block.shape[0] == block.shape[1]:
        off = block - np.diag(np.diag(block))
        diag = np.diag(block)
        if not np.any(off) and np.all(diag != 0):
            level = float(diag.mean())
            if np.std(diag) <= 0.1 * abs(level):
                return f"{level:.3g} I_{block.shape[0]}", level
            return "diag", None
    return "dense", None


def describe(W: np.ndarray, n: int) -> dict:
    """Structure of one E × E product matrix after sparsification, as text and levels."""
    S = sparsify(W)
    blocks = {"nn": S[:n, :n], "nq": S[:n, n:], "qn": S[n:, :n], "qq": S[n:, n:]}
    kinds = {k: _describe_block(v) for k, v in blocks.items()}
    if kinds["nq"][0] == "0" and kinds["qn"][0] == "0":
        text = f"diag({kinds['nn'][0]}, {kinds['qq'][0]})"
    else:
        text = f"[[{kinds['nn'][0]}, {kinds['nq'][0]}], [{kinds['qn'][0]}, {kinds['qq'][0]}]]"
    kept = float(np.count_nonzero(S)) / S.size
    return {
        "structure": text,
        "level_nn": kinds["nn"][1],
        "level_qq": kinds["qq"][1],
        "kept_fraction": kept,
        "simple": all(k[1] is not None for k in kinds.values()),
    }


def weight_view(qk: np.ndarray, vp: np.ndarray, n: int) -> pd.DataFrame:
    """Per layer and head: the structure of W_QK and W_VP. qk, vp: (L, h, E, E)."""
    rows = []
    for layer in range(qk.shape[0]):
        for head in range(qk.shape[1]):
            q, v = describe(qk[layer, head], n), describe(vp[layer, head], n)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "W_QK": q["structure"],
                    "W_VP": v["structure"],
                    "qk_nn": q["level_nn"],
                    "qk_qq": q["level_qq"],
                    "vp_nn": v["level_nn"],
                    "vp_qq": v["level_qq"],
                    "qk_kept": q["kept_fraction"],
                    "vp_kept": v["kept_fraction"],
                    "simple": q["simple"] and v["simple"],
                }
            )
    return pd.DataFrame(rows)


def simplified_products(qk: np.ndarray, vp: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Replace every product by its cluster levels: diag(level_nn I_n, level_qq I_n') where the
    structure is that simple, else by its sparsified self."""
    out_qk, out_vp = np.zeros_like(qk), np.zeros_like(vp)
    E = qk.shape[-1]
    for idx in np.ndindex(qk.shape[:2]):
        for src, dst in ((qk, out_qk), (vp, out_vp)):
            info = describe(src[idx], n)
            if info["simple"] and info["structure"].startswith("diag("):
                dst[idx] = np.diag([info["level_nn"]] * n + [info["level_qq"]] * (E - n))
            else:
                dst[idx] = sparsify(src[idx])
    return out_qk, out_vp


# --- (d) symbolic -----------------------------------------------------------------------------


def symbolic_layers(a_steps, c_steps, digits: int = 4) -> list[dict[str, str]]:
    """sympy text of each layer's EAGLE update with the recovered numbers."""
    import sympy as sp

    rows = []
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        A, B, C, D = (sp.MatrixSymbol(f"{s}_{layer}", 1, 1) for s in "ABCD")
        a_, c_ = sp.Float(a, digits), sp.Float(c, digits)
        rows.append(
            {
                "A": str(A - a_ * A * A.T * A),
                "B": str(B - a_ * B * A.T * A),
                "C": str(C - c_ * A * A.T * C),
                "D": str(D + c_ * B * A.T * C),
            }
        )
    return rows


def symbolic_unrolled(a_steps, c_steps, digits: int = 4) -> str:
    """D_L = B Aᵀ q(A Aᵀ) C with q(λ) = Σ_l c_l P_l(λ) m_l(λ)², as sympy text."""
    import sympy as sp

    lam = sp.Symbol("lambda")
    m, P, q = sp.Integer(1), sp.Integer(1), sp.Integer(0)
    for a, c in zip(a_steps, c_steps, strict=True):
        a_, c_ = sp.Float(a, 17), sp.Float(c, 17)
        q += c_ * P * m**2
        P = sp.expand(P * (1 - c_ * lam * m**2))
        m = sp.expand(m * (1 - a_ * lam * m**2))
    poly = sp.Poly(sp.expand(q), lam)
    terms = sorted(poly.terms())
    text = " ".join(
        f"{'+' if float(coef) >= 0 else '-'} {abs(float(coef)):.{digits}g}"
        + ("" if k == 0 else f"*lambda**{k}" if k > 1 else "*lambda")
        for (k,), coef in terms
    ).lstrip("+ ")
    return f"D_L = B·Aᵀ·q(A·Aᵀ)·C,  q(lambda) = {text}"
