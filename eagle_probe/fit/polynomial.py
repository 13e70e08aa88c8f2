"""The design's polynomial update, shown as what it is: a spectral filter.

In card notation (A_card = Aᵀ, b = Bᵀ, x = wᵀ, G = A Aᵀ) each layer's update of the implicit
iterate is fitted as

    x_{l+1} = x_l − Σ_p α_p G^p A_cardᵀ (b − A_card x_l) = x_l + f_l(G) r_l,
    f_l(λ) = −Σ_p α_p λ^p,

per layer and head (`fit_polynomial`, Chebyshev basis on [0, λ_max], degree by BIC). EAGLE implies
f_l(λ) = c_l m_l(λ)² with m_0 = 1, m_{l+1} = m_l (1 − a_l λ m_l²) (`eagle_expansion`), so the two
filters are compared on the probe spectrum. Coefficients go to JSON in the stable bases only:
Chebyshev on [0, λ_max] and monomials scaled by λ_max^p (the value each order contributes at the
top of the spectrum). Orders are listed only where the fit is sparse: an order is kept if dropping
it raises the relative residual by more than `ORDER_THRESHOLD`.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.polynomial import Polynomial
from numpy.polynomial import chebyshev as cheb

from eagle_probe import drawing as draw
from eagle_probe.captured import Capture
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register

ORDER_THRESHOLD = 1e-3  # an order is essential if dropping it raises the relative residual by this
SPECTRUM_POINTS = 64  # points of the filter curves stored for figures


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


# the latest shifted matrix 2G/λ_max − I of `chebyshev_features`: (weak reference to G, λ_max, it);
# every (layer, head) fit of a view reads the same probe G
_SHIFTED: list[tuple] = []


def _shifted(G: np.ndarray, lam_max: float) -> np.ndarray:
    """2G/λ_max − I (b, d, d), kept for the latest G while it lives (arrays G are never modified
    in place: the capture's is read-only)."""
    if _SHIFTED and _SHIFTED[0][0]() is G and _SHIFTED[0][1] == lam_max:
        return _SHIFTED[0][2]
    t = 2.0 * G / lam_max - np.eye(G.shape[-1])
    try:
        _SHIFTED[:] = [(weakref.ref(G), lam_max, t)]
    except TypeError:  # not weak-referenceable: nothing kept
        _SHIFTED.clear()
    return t


def chebyshev_features(G: np.ndarray, r: np.ndarray, degree: int, lam_max: float) -> np.ndarray:
    """T_k(2G/λ_max − I) r for k = 0..degree: (degree + 1, b, d, d')."""
    t = _shifted(G, lam_max) if not G.flags.writeable else 2.0 * G / lam_max - np.eye(G.shape[-1])
    feats = [r]
    if degree >= 1:
        feats.append(t @ r)
    for _ in range(2, degree + 1):
        feats.append(2.0 * (t @ feats[-1]) - feats[-2])
    return np.stack(feats)


def fit_polynomial(
    G: np.ndarray,
    r: np.ndarray,
    dx: np.ndarray,
    *,
    max_degree: int = 16,
    lam_max: float | None = None,
) -> PolyFit:
    """Fit dx ≈ f(G) r over a batch; G (b, d, d), r and dx (b, d, d'). `lam_max` is λ_max(G)
    over the batch if known (one eigendecomposition serves every fit on the same G)."""
    if lam_max is None:
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


def fit_layers(cap: Capture, *, max_degree: int = 16) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (layer, head) fits of the design's form. Head −1 is the whole layer.

    Returns (fits, terms): one row per fit, and one row per recovered term (order, α, step).
    """
    G = cap.normal_matrix()
    lam_max = float(cap.normal_eigenvalues().max())
    rows, terms = [], []
    for layer in range(cap.layers):
        r = residual_direction(cap, layer)
        dx_layer = cap.x[layer + 1] - cap.x[layer]
        total = float(np.sum(dx_layer**2))
        targets = [(-1, dx_layer)] + [(h, cap.dx_heads[layer, :, h]) for h in range(cap.heads)]
        for head, dx in targets:
            fit = fit_polynomial(G, r, dx, max_degree=max_degree, lam_max=lam_max)
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
    if cap.units is None:
        norm = np.linalg.norm(A, ord=2, axis=(-2, -1)) * cap.scale  # original units
    else:  # each machine's columns in their own units: back to the prompt's
        norm = np.linalg.norm(A * cap.units[..., : cap.n], ord=2, axis=(-2, -1))
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


def essential_orders(
    G: np.ndarray, r: np.ndarray, dx: np.ndarray, fit: PolyFit
) -> list[int] | None:
    """Orders whose removal (refit on the rest, monomial basis scaled by λ_max) raises the relative
    residual by more than ORDER_THRESHOLD; None when the fit is not sparse (every order needed)."""
    K = fit.degree
    if K == 0:
        return [0]
    lam = max(fit.lam_max, 1e-300)
    feats, v, scaled = [], r / 1.0, G / lam  # (b, d, d), once for every order
    for _ in range(K + 1):
        feats.append(v.reshape(-1))
        v = scaled @ v
    X = np.stack(feats, axis=1)
    y = dx.reshape(-1)
    ny = float(np.linalg.norm(y))
    base = fit.rel_residual
    keep = []
    for p in range(K + 1):
        cols = [q for q in range(K + 1) if q != p]
        coef = np.linalg.lstsq(X[:, cols], y, rcond=None)[0]
        rel = float(np.linalg.norm(y - X[:, cols] @ coef)) / ny if ny else 0.0
        if rel - base > ORDER_THRESHOLD:
            keep.append(p)
    return keep if len(keep) < K + 1 or K < 3 else None


FIT_DEGREE = 16  # highest degree of the per-layer design-form fits (`fit_layers`)


def _beyond_degree(layer: int, eagle: bool) -> str:
    """Why a low R² need not contradict an EAGLE label: EAGLE's layer-l update of x is a
    polynomial in G of order up to 3^l − 1 (each step m_{l+1} = m_l (1 − a λ m_l²) triples the
    order), above the fit's degree from layer 3 on."""
    top = 3**layer - 1
    if not eagle or top <= FIT_DEGREE:
        return ""
    return (
        f" (EAGLE's step at this layer has orders up to {top}, above the fit's degree "
        f"{FIT_DEGREE}: the fit, not the layer, falls short of EAGLE here)"
    )


# --- what the view shows: its figure and the figure's caption -------------------------------------
def figures(ex: Extraction) -> Figures:
    """Per layer the fitted design-form filter f_l(λ) against EAGLE's implied c_l m_l(λ)² on
    [0, λ_max] of the probe spectrum, with the probe eigenvalues as a rug."""
    extra = ex.views["polynomial"].extra
    grid, curves = np.asarray(extra["grid"]), extra["curves"]
    spectrum = np.asarray(extra.get("spectrum", []))
    L = len(curves)
    if L == 0:
        return {}
    cols = min(L, 4)
    rows = -(-L // cols)
    fig = draw.figure(3.3 * cols, 2.9 * rows + 0.5)
    axes = fig.subplots(rows, cols, squeeze=False).reshape(-1)
    layers = ex.views["polynomial"].json.get("layers", [])
    # the filter the family's steps imply: EAGLE's c_l m_l(λ)², GD++'s η_l m_l(λ)² (the same
    # recursion, `fit.geometry` module text)
    family = "GD++: η_l m_l(λ)²" if ex.geometry.samples else "EAGLE: c_l m_l(λ)²"
    for layer, (ax, c) in enumerate(zip(axes, curves, strict=False)):
        ax.plot(grid, c["fitted"], color="C0", lw=1.8, label="fitted f_l(λ) (design form)")
        if c.get("eagle") is not None:
            ax.plot(grid, c["eagle"], color="C3", lw=1.4, ls="--", label=family)
        if spectrum.size:
            ax.plot(
                spectrum,
                np.zeros_like(spectrum),
                "|",
                color="k",
                alpha=0.15,
                ms=8,
                transform=ax.get_xaxis_transform(),
                label="probe eigenvalues",
            )
        r2 = layers[layer].get("r2") if layer < len(layers) else None
        title = f"layer {layer}" + (f" (R² = {r2:.3f})" if r2 is not None else "")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("λ, eigenvalue of A Aᵀ (internal units)", fontsize=8)
        ax.set_ylabel("f_l(λ) (internal units)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[:L]:
        lo, hi = ax.get_ylim()
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # both filters on a scale that includes 0
        ax.set_ylim(lo - 0.04 * (hi - lo), hi + 0.08 * (hi - lo))
    for ax in axes[L:]:
        ax.set_visible(False)
    handles, labels = draw.handles(axes[0])
    if spectrum.size:  # the rug's own marks are faint; the legend shows a solid one
        handles[-1] = draw.mark(marker="|", ls="", color="k", ms=8)
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fam = draw.family_word(ex)
    fig.suptitle(f"Spectral filter of each layer: fitted against {fam}'s", fontsize=10)
    return {"filters": fig}


def caption(ex: Extraction) -> str:
    if ex.geometry.samples:
        return (
            "The solid filter fitted to each layer's update of the implicit iterate against the "
            "dashed η_l m_l(λ)² that GD++'s steps, read from the activations, imply; where the two "
            "part over the eigenvalue rug of the probes, the layer is not a GD++ step."
        )
    return (
        "Where the solid fitted filter and the dashed EAGLE filter part over the dense part of the "
        "eigenvalue rug, the layer does not filter the spectrum as an EAGLE step does; differences "
        "away from the rug are not seen by the data."
    )


@register("polynomial", figures=figures, captions={"filters": caption})
def polynomial_view(ctx: Context) -> ViewResult:
    """Design-form filters per layer against EAGLE's implied filter."""
    cap = ctx.cap
    fits, terms = fit_layers(cap)
    # EAGLE's implied filter, where the eagle view ran (the feature layout); None otherwise
    eagle = ctx.results.get("eagle")
    expansions = (
        eagle_expansion(eagle.tables["eagle"].a_step, eagle.tables["eagle"].c_step)
        if eagle is not None
        else [None] * cap.layers
    )
    G = cap.normal_matrix()
    eig = cap.normal_eigenvalues().reshape(-1)
    lam_top = float(eig.max())
    grid = np.linspace(0.0, lam_top, SPECTRUM_POINTS)
    present = eig[eig > 1e-12 * max(lam_top, 1e-300)]
    layers, curves = [], []
    for layer in range(cap.layers):
        r = residual_direction(cap, layer)
        dx = cap.x[layer + 1] - cap.x[layer]
        row = fits[(fits.layer == layer) & (fits["head"] == -1)].iloc[0]
        fit = fit_polynomial(G, r, dx, max_degree=max(int(row["degree"]), 0), lam_max=lam_top)
        f_fit = fit.filter(grid)
        f_eagle, gap = None, None
        if expansions[layer] is not None:
            implied = Polynomial(expansions[layer])
            f_eagle = implied(grid)
            gap_scale = max(float(np.abs(implied(present)).max()), 1e-300)
            gap = float(np.abs(fit.filter(present) - implied(present)).max() / gap_scale)
        t = cheb.poly2cheb(Polynomial(fit.beta)(Polynomial([lam_top / 2, lam_top / 2])).coef)
        scaled = fit.beta * lam_top ** np.arange(fit.beta.size)
        orders = essential_orders(G, r, dx, fit)
        heads = fits[(fits.layer == layer) & (fits["head"] >= 0)]
        layers.append(
            {
                "layer": layer,
                "degree": fit.degree,
                "r2": fit.r2,
                "rel_residual": fit.rel_residual,
                "orders": orders,
                "sparse": orders is not None,
                "chebyshev": [float(v) for v in t],
                "scaled_monomial": [float(v) for v in scaled],
                "lambda_max": lam_top,
                "eagle_filter_gap": gap,
                "linearity_deviation": float(cap.linearity_deviation[layer + 1]),
                "heads": [
                    {"head": int(h.head), "degree": int(h.degree), "r2": h.r2, "share": h.share}
                    for h in heads.itertuples()
                ],
            }
        )
        curves.append({"fitted": f_fit, "eagle": f_eagle})
    warnings = [
        f"layer {lay['layer']}: the design form explains only R² = {lay['r2']:.2f} of the update"
        + _beyond_degree(lay["layer"], eagle is not None)
        for lay in layers
        if lay["r2"] < 0.9
    ]
    dyn = dynamic_steps(cap)
    return ViewResult(
        "polynomial",
        {
            "basis": "Chebyshev T_k(2λ/λ_max − 1) on [0, λ_max]; scaled monomials β_p λ_max^p",
            "order_threshold": ORDER_THRESHOLD,
            "layers": layers,
            "dynamic": dyn.to_dict("records"),
        },
        {"fits": fits, "terms": terms, "dynamic": dyn},
        warnings,
        extra={"grid": grid, "curves": curves, "spectrum": present},
    )
