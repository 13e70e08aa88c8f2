"""The learned sketch of a constrained model: is each head's W_QK A-block a scaled projector
α S Sᵀ, is W_VP on the same sketch, and do the heads' sketches together span all n columns?

eagle-sketched (`fit.families`) reads A through a rank-r projector P = S Sᵀ per layer: W_QK's
A-block ≈ α P, its spectrum flat (r singular values α, then 0), and the paper reports the rescaled
W_QK and W_VP A-blocks alike up to sign (relative difference 0.28) with spectra matching S Sᵀ for a
random orthogonal S. Per head, W the n × n A-block of W_QK:

- `rank`: singular values of W above RANGE_RTOL (1e-6) of the largest (the query/key width r
  bounds it);
- `alpha`, `projector_gap`: P the orthogonal projector onto W's range (its left singular
  vectors), α = ⟨W, P⟩ / ⟨P, P⟩ the least-squares level, gap ‖W − α P‖_F / ‖W‖_F (0 for a scaled
  projector; a non-symmetric W, or an uneven spectrum, departs);
- `vp_rescaled_difference`: min over s = ±1 of ‖W / ‖W‖_F − s V / ‖V‖_F‖_F with V the A-block of
  W_VP (the paper's 0.28; 0 when W_VP's A-block is a multiple of the same projector);
- `vp_in_sketch_share`: ‖P V P‖²_F / ‖V‖²_F, how much of W_VP's A-block lives on the head's sketch;
- `norm_share`: ‖W‖_F over the largest ‖W‖_F among the layer's heads (a head far below 1 adds
  little to the layer's scores, so its gap matters little).

Per layer, `span`: the rank of Σ_h P_h (the heads' ranges together, same cut). Where it is n, the
layer can form the full Gram A Aᵀ and the sketched family degenerates to the centralized one: the
geometry's layer projector (`geometry.sketch_projectors`, the range of Σ_h W_QK^h) is then I and
eagle-sketched is scored as eagle.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register
from eagle_probe.fit.families import RANGE_RTOL, head_range, random_sketches

SALT = 0x5CE7C4  # this view's random reference sketches (`Context.rng`)
WEAK_HEAD = 0.2  # the sentence lists heads below this `norm_share` apart


def numerical_rank(s: np.ndarray, rtol: float = RANGE_RTOL) -> int:
    """Singular values s (descending) above rtol × the largest."""
    return int(np.sum(s > rtol * max(float(s[0]) if s.size else 0.0, 1e-300)))


def head_sketch(qk_head: np.ndarray, vp_head: np.ndarray, n: int) -> dict[str, float]:
    """The sketch readings of one head (module text); products (E, E)."""
    W, V = qk_head[:n, :n], vp_head[:n, :n]  # (n, n)  the A-blocks
    s = np.linalg.svd(W, compute_uv=False)
    P = head_range(qk_head, n)  # (n, n)
    r = numerical_rank(s)
    w_norm, v_norm = float(np.linalg.norm(W)), float(np.linalg.norm(V))
    alpha = float(np.sum(W * P)) / r if r else 0.0  # ⟨P, P⟩ = r
    gap = float(np.linalg.norm(W - alpha * P)) / w_norm if w_norm else 0.0
    if w_norm and v_norm:
        Wn, Vn = W / w_norm, V / v_norm
        diff = min(float(np.linalg.norm(Wn - Vn)), float(np.linalg.norm(Wn + Vn)))
        in_sketch = float(np.linalg.norm(P @ V @ P) ** 2) / v_norm**2
    else:
        diff, in_sketch = float("nan"), float("nan")
    return {
        "rank": r,
        "alpha": alpha,
        "projector_gap": gap,
        "vp_rescaled_difference": diff,
        "vp_in_sketch_share": in_sketch,
    }


def layer_span(qk_layer: np.ndarray, n: int) -> int:
    """Rank of the heads' W_QK A-block ranges together, qk_layer (h, E, E)."""
    return layer_basis(qk_layer, n).shape[1]


def layer_basis(qk_layer: np.ndarray, n: int) -> np.ndarray:
    """Orthonormal columns (n, span) for the range of the heads' W_QK A-blocks together: the
    subspace of the sample columns the layer sees A through."""
    total = sum(head_range(W, n) for W in qk_layer)  # (n, n)  Σ_h P_h, PSD
    w, U = np.linalg.eigh(total)
    order = np.argsort(w)[::-1]
    return U[:, order[: numerical_rank(w[order])]]


# largest principal angle (degrees) under which two layers' sketches count as one subspace
SHARED_DEGREES = 5.0


def principal_angles(U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """The principal angles (degrees, ascending) between the column spaces of orthonormal U and V:
    as many as the smaller one's dimension."""
    if not U.shape[1] or not V.shape[1]:
        return np.zeros(0)
    cos = np.clip(np.linalg.svd(U.T @ V, compute_uv=False), -1.0, 1.0)
    return np.sort(np.degrees(np.arccos(cos)))


def shared_subspace(qk: np.ndarray, n: int) -> list[dict]:
    """Per pair of consecutive layers, the principal angles between their sketch ranges
    (`layer_basis`): whether the layers read A through one subspace or each through its own."""
    bases = [layer_basis(qk[layer], n) for layer in range(qk.shape[0])]
    out = []
    for layer in range(len(bases) - 1):
        angles = principal_angles(bases[layer], bases[layer + 1])
        out.append(
            {
                "layers": [layer, layer + 1],
                "angles_deg": [float(a) for a in angles],
                "largest_deg": float(angles.max()) if angles.size else float("nan"),
                "median_deg": float(np.median(angles)) if angles.size else float("nan"),
            }
        )
    return out


def in_sketch_basis(qk: np.ndarray, vp: np.ndarray, n: int) -> np.ndarray:
    """Per layer the A-blocks of Σ_h W_QK^h and Σ_h W_VP^h in the basis [S_l, S_l⊥]: the layer's
    sketch range first (`layer_basis`, its span columns), an orthonormal complement after, so a
    rank-r sketch shows as an r × r block in the corner: (L, 2, n, n)."""
    out = np.zeros((qk.shape[0], 2, n, n))
    for layer in range(qk.shape[0]):
        U = layer_basis(qk[layer], n)
        full = np.linalg.svd(U, full_matrices=True)[0] if U.shape[1] else np.eye(n)
        Q = np.concatenate([U, full[:, U.shape[1] :]], axis=1)  # (n, n) orthogonal
        for k, W in enumerate((qk[layer].sum(0), vp[layer].sum(0))):
            out[layer, k] = Q.T @ W[:n, :n] @ Q
    return out


def spectra(qk: np.ndarray, n: int, ranks: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """Per layer and head the singular values of W_QK's A-block over its largest, beside those of
    α S Sᵀ (α = 1 after normalising) for a random orthogonal n × r S of the head's rank r:
    1 (r times), then 0. qk (L, h, E, E), ranks (L, h)."""
    rows = []
    L, h = qk.shape[:2]
    for layer in range(L):
        for head in range(h):
            s = np.linalg.svd(qk[layer, head, :n, :n], compute_uv=False)
            s = s / max(float(s[0]), 1e-300)
            S = random_sketches(n, max(int(ranks[layer, head]), 1), 1, rng)[0]  # (n, r)
            ref = np.linalg.svd(S @ S.T, compute_uv=False)
            rows += [
                {"layer": layer, "head": head, "index": i, "network": float(x), "random_sketch": y}
                for i, (x, y) in enumerate(zip(s.tolist(), ref.tolist(), strict=True))
            ]
    return pd.DataFrame(rows)


def _range(values, fmt: str = ".2g") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}–{hi:{fmt}}"


def _sentence(
    layers: list[dict], n: int, full: bool, scored_centralized: bool, pairs: list[dict]
) -> str:
    heads = [h for lay in layers for h in lay["heads"]]
    if not heads:
        return ""
    ranks = sorted({h["rank"] for h in heads})
    rank = str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}–{ranks[-1]}"
    gap = _range([h["projector_gap"] for h in heads])
    diffs = [h["vp_rescaled_difference"] for h in heads if np.isfinite(h["vp_rescaled_difference"])]
    vp = ""
    if diffs:
        vp = f", W_VP's rescaled A-block differs from it by {_range(diffs)} (paper 0.28)"
    strong = [h["projector_gap"] for h in heads if h.get("norm_share", 1.0) >= WEAK_HEAD]
    weak = [h["projector_gap"] for h in heads if h.get("norm_share", 1.0) < WEAK_HEAD]
    aside = ""
    if weak and strong:
        gap = _range(strong)
        aside = (
            f" ({len(weak)} weak head(s), ‖W‖ below {WEAK_HEAD:.0%} of their layer's largest: "
            f"{_range(weak)})"
        )
    head = (
        f"Each head's W_QK A-block has rank {rank} and sits {gap} (relative) from a scaled "
        f"projector α S Sᵀ{aside}{vp}"
    )
    if full:
        scored = (
            ", and the model is scored as such"
            if scored_centralized
            else " (the views' layer projector, the range of Σ_h W_QK^h, is not I here)"
        )
        return (
            head + f"; the heads' ranges together span all {n} dimensions in every layer, so the "
            f"layer can form the full Gram A Aᵀ: the sketched family is then the centralized "
            f"one{scored}."
        )
    spans = sorted({lay["span"] for lay in layers})
    where = (
        f"{spans[0]} of {n} dimensions in every layer"
        if len(spans) == 1
        else f"{', '.join(str(lay['span']) for lay in layers)} of {n} dimensions in layers "
        f"0–{len(layers) - 1}"
    )
    return (
        head + f"; the heads' ranges together span {where}: the layers see A through that "
        "sketch (eagle-sketched)" + _shared_words(pairs) + "."
    )


def _shared_words(pairs: list[dict]) -> str:
    """ ", one sketch shared by every layer (…)" or ", a different sketch in each layer (…)"."""
    largest = [p["largest_deg"] for p in pairs if np.isfinite(p["largest_deg"])]
    if not largest:
        return ""
    spread = f"largest principal angle between consecutive layers {_range(largest, '.3g')}°"
    if max(largest) <= SHARED_DEGREES:
        return f", one sketch shared by every layer ({spread})"
    return f", not one shared subspace ({spread}; {SHARED_DEGREES:g}° or less would be one)"


# --- what the view shows: its figure and the figure's caption -------------------------------------
def figures(ex: Extraction) -> Figures:
    """Constrained models: per layer the singular values of every head's W_QK A-block over its
    largest (view `sketch`) against those of α S Sᵀ for a random orthogonal n × r S (r ones,
    then zeros)."""
    view = ex.views["sketch"]
    t = view.tables.get("spectra")
    if t is None or t.empty:
        return {}
    layers = sorted(t.layer.unique())
    spans = {lay["layer"]: lay["span"] for lay in view.json["layers"]}
    fig = draw.figure(2.6 * len(layers) + 1.5, 3.0)
    axes = fig.subplots(1, len(layers), squeeze=False, sharey=True)[0]
    for ax, layer in zip(axes, layers, strict=True):
        part = t[t.layer == layer]
        for k, (_, head) in enumerate(part.groupby("head")):
            ax.plot(
                head["index"],
                head.network,
                "o-",
                ms=2.5,
                lw=0.8,
                alpha=0.7,
                color=draw.layer_colour(k),
                label=f"head {int(head['head'].iloc[0])}",
            )
        ref = part[part["head"] == part["head"].min()]
        ax.step(
            ref["index"],
            ref.random_sketch,
            where="mid",
            color="k",
            ls="--",
            lw=1.2,
            label="α S Sᵀ, random S",
        )
        ax.set_title(f"layer {layer} (span {spans.get(layer, '?')})", fontsize=9)
        ax.set_xlabel("singular value index")
    axes[0].set_ylabel("σ_i / σ_1 of W_QK's A-block")
    fig.legend(*draw.handles(axes[0]), fontsize=7, loc="outside right center")
    fig.suptitle(
        "Each head's sketch: a scaled projector is flat at 1 for r values, then 0", fontsize=10
    )
    out = {"sketch": fig}
    basis = view.extra.get("sketch_basis")
    if basis is not None and not view.json.get("span_full"):
        out["sketch_basis"] = basis_figure(np.asarray(basis), spans)
    return out


def basis_figure(basis: np.ndarray, spans: dict[int, int]):
    """Per layer, W_QK's and W_VP's A-blocks (summed over heads) in the layer's sketch basis
    (`in_sketch_basis`): the sketch's r coordinates first, a dashed line after them."""
    L, n = basis.shape[0], basis.shape[-1]
    fig = draw.figure(2.4 * L + 1.2, 5.0)
    axes = fig.subplots(2, L, squeeze=False)
    for layer in range(L):
        r = spans.get(layer, 0)
        ticks = [(r - 1) / 2, r + (n - r - 1) / 2]
        for row, name in enumerate(("W_QK", "W_VP")):
            ax = axes[row][layer]
            im = draw.diverging(ax, basis[layer, row], interpolation="nearest")
            for pos in (ax.axvline, ax.axhline):
                pos(r - 0.5, color="k", lw=0.8, ls="--")
            ax.set_xticks(ticks, ["S", "S⊥"])
            ax.set_yticks(ticks, ["S", "S⊥"])
            ax.set_title(f"{name} A-block, layer {layer}", fontsize=8)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)
    fig.suptitle(
        "The A-blocks in each layer's sketch basis [S, S⊥] (heads summed): a sketch is the corner",
        fontsize=10,
    )
    return fig


def caption(ex: Extraction) -> str:
    return (
        "A head on a learned sketch α S Sᵀ follows the dashed step (flat at 1 for r values, "
        "then 0); a sloping curve is a rank-r W_QK that is not a scaled projector, and a span of "
        "n means the heads together see every direction of A (the centralized family)."
    )


def basis_caption(ex: Extraction) -> str:
    spans = sorted({lay["span"] for lay in ex.views["sketch"].json["layers"]})
    r = f"{spans[0]}–{spans[-1]}" if len(spans) > 1 else str(spans[0])
    return (
        "The same products drawn in each layer's own basis: the first coordinates span the range "
        f"of the heads' W_QK A-blocks (here {r} of {ex.geometry.n}), the rest its complement. "
        "The eagle-sketched family is a scaled identity in the corner and zero elsewhere in both "
        "rows; W_VP colour outside the corner is the network writing A off the layer's sketch "
        "(the input basis of the weights figure hides the sketch)."
    )


@register("sketch", figures=figures, captions={"sketch": caption, "sketch_basis": basis_caption})
def sketch_view(ctx: Context) -> ViewResult:
    """Per layer and head the sketch readings of W_QK and W_VP; per layer the span of the
    heads' sketches (module text). Reads the products only."""
    n = ctx.geometry.n
    L, h = ctx.qk.shape[:2]
    layers, rows = [], []
    ranks = np.zeros((L, h), dtype=int)
    for layer in range(L):
        heads = []
        for head in range(h):
            info = head_sketch(ctx.qk[layer, head], ctx.vp[layer, head], n)
            ranks[layer, head] = info["rank"]
            heads.append({"head": head, **info})
            rows.append({"layer": layer, **heads[-1]})
        top = max(float(np.linalg.norm(ctx.qk[layer, k, :n, :n])) for k in range(h))
        for entry in heads:
            W = ctx.qk[layer, entry["head"], :n, :n]
            entry["norm_share"] = float(np.linalg.norm(W)) / top if top > 0 else 0.0
        for row in rows[-h:]:
            row["norm_share"] = heads[row["head"]]["norm_share"]
        layers.append({"layer": layer, "span": layer_span(ctx.qk[layer], n), "heads": heads})
    full = bool(layers) and all(lay["span"] == n for lay in layers)
    # the views run eagle-sketched with the geometry's projectors: I where Σ_h W_QK^h has rank n
    P = ctx.geometry.projector
    centralized = P is not None and bool(np.allclose(P, np.eye(n), atol=1e-8))
    pairs = [] if full else shared_subspace(ctx.qk, n)  # a full span is one subspace: R^n
    sentence = _sentence(layers, n, full, centralized, pairs)
    return ViewResult(
        "sketch",
        {"layers": layers, "span_full": full, "shared": pairs, "sentence": sentence},
        {"sketch": pd.DataFrame(rows), "spectra": spectra(ctx.qk, n, ranks, ctx.rng(SALT))},
        extra={"sketch_basis": in_sketch_basis(ctx.qk, ctx.vp, n)},
    )
