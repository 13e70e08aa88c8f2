"""Weight structure: what W_QK and W_VP look like after sparsification, per layer and head, and
what the sparsified ("simplified") model does in function.

The products split into two coordinate kinds (`Geometry.split`, `Geometry.coords`): the n sample
columns A and the n' query columns C in the feature layout; the d features X and the d' labels Y
of the rows [x, y] in the sample layout, where the blocks are named XX, XY, YX, YY."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register
from eagle_probe.wording import value


def sparsify(W: np.ndarray) -> np.ndarray:
    """Zero the entries below τ = 1.5 ‖W‖₁ / #entries."""
    tau = 1.5 * np.abs(W).sum() / W.size
    return np.where(np.abs(W) >= tau, W, 0.0)


def _describe_block(block: np.ndarray) -> tuple[str, float | None]:
    """A block after sparsification: '0', 'q I', 'q I[i:j]' (on a contiguous range of the
    coordinates only: a machine's own columns), 'diag', or 'dense' (and its level)."""
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
        on = np.flatnonzero(diag)
        if not np.any(off) and on[-1] - on[0] + 1 == on.size:
            # a scalar times I on one machine's columns only; no level: the simplified model
            # keeps the block sparsified, not scalar
            level = float(diag[on].mean())
            if np.std(diag[on]) <= 0.1 * abs(level):
                return f"{level:.3g} I[{on[0]}:{on[-1] + 1}]", None
    return "dense", None


def _near_identity(block: np.ndarray) -> str | None:
    """A square block that sparsification leaves dense but that is a scalar times I plus small
    off-diagonal entries: 'q I_k + x% off-diag' (x = ‖off-diagonal‖_F / ‖block‖_F), else None.
    Its level stays unset: the simplified model keeps such a block sparsified, not scalar."""
    k = block.shape[0]
    if block.shape[1] != k or k < 2 or not np.any(block):
        return None
    diag = np.diag(block)
    level = float(diag.mean())
    off = float(np.linalg.norm(block - np.diag(diag))) / float(np.linalg.norm(block))
    if np.std(diag) <= 0.1 * abs(level) and off <= 0.5:
        return f"{level:.3g} I_{k} + {off:.0%} off-diag"
    return None


EXACT = 1e-6  # relative tolerance of the exact shapes below (float32 plants hold them to ~1e-7)


def _exact_block(block: np.ndarray) -> tuple[str, float | None] | None:
    """A square block of exactly one of EAGLE's shapes, before any sparsification: a scalar times
    I on a contiguous range of its coordinates only (a machine's own columns: `q I[i:j]`), or a
    scalar times a rank-r orthogonal projector (a sketch S Sᵀ: `q P_r`); None otherwise."""
    k = block.shape[0]
    if block.shape[1] != k or not np.any(block):
        return None
    scale = float(np.abs(block).max())
    diag = np.diag(block)
    if np.abs(block - np.diag(diag)).max() <= EXACT * scale:
        on = np.flatnonzero(np.abs(diag) > EXACT * scale)
        level = float(diag[on].mean())
        contiguous = on.size and on[-1] - on[0] + 1 == on.size
        if contiguous and np.abs(diag[on] - level).max() <= EXACT * abs(level) and on.size < k:
            return f"{level:.3g} I[{on[0]}:{on[-1] + 1}]", level
        if on.size == k and np.abs(diag - level).max() <= EXACT * abs(level):
            return f"{level:.3g} I_{k}", level
    if np.abs(block - block.T).max() <= EXACT * scale:
        w = np.linalg.eigvalsh(block)
        top = w[np.argmax(np.abs(w))]
        on = np.abs(w) > EXACT * abs(top)
        r = int(on.sum())
        if r < k and np.abs(w[on] - top).max() <= EXACT * abs(top):
            return f"{float(top):.3g} P_{r}", float(top)
    return None


def _sent_copy(block: np.ndarray, copies: int, tol: float = EXACT) -> tuple[str, None] | None:
    """A C/D block (c n' × c n') of the paper's distributed layout that writes one machine's copy
    into every copy, q I_{n'} in each, to `tol` relative (EXACT before sparsification, 10% after,
    as `_describe_block`'s levels): `q I_n' copy μ → all c` (no single level: the simplified
    model keeps it as it is), or None."""
    k = block.shape[0]
    if copies < 2 or block.shape[1] != k or k % copies or not np.any(block):
        return None
    n_prime, scale = k // copies, float(np.abs(block).max())
    rows = [block[m * n_prime : (m + 1) * n_prime] for m in range(copies)]
    live = [m for m, r in enumerate(rows) if np.abs(r).max() > EXACT * scale]
    if len(live) != 1:
        return None
    level = float(np.mean(np.diagonal(rows[live[0]].reshape(n_prime, copies, n_prime), 0, 0, 2)))
    want = np.tile(level * np.eye(n_prime), (1, copies))
    if np.abs(rows[live[0]] - want).max() > tol * abs(level):
        return None
    return f"{level:.3g} I_{n_prime} copy {live[0]} → all {copies}", None


def describe(W: np.ndarray, n: int, copies: int = 1) -> dict:
    """Structure of one E × E product matrix, as text and levels: blocks of one of EAGLE's exact
    shapes (`_exact_block`, and with C/D copies a machine's copy sent to every copy) are named as
    such, every other block after sparsification."""
    S = sparsify(W)
    raw = {"nn": W[:n, :n], "nq": W[:n, n:], "qn": W[n:, :n], "qq": W[n:, n:]}
    blocks = {"nn": S[:n, :n], "nq": S[:n, n:], "qn": S[n:, :n], "qq": S[n:, n:]}
    kinds = {k: _exact_block(raw[k]) or _describe_block(v) for k, v in blocks.items()}
    sent = _sent_copy(raw["qq"], copies) or _sent_copy(blocks["qq"], copies, tol=0.1)
    if sent is not None:
        kinds["qq"] = sent
    for k, (kind, level) in kinds.items():
        if kind == "dense":
            kinds[k] = (_near_identity(raw[k]) or kind, level)
    if not np.any(raw["nq"]) and not np.any(raw["qn"]):
        kinds["nq"] = kinds["qn"] = ("0", 0.0)
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


def weight_view(qk: np.ndarray, vp: np.ndarray, n: int, copies: int = 1) -> pd.DataFrame:
    """Per layer and head: the structure of W_QK and W_VP. qk, vp: (L, h, E, E)."""
    rows = []
    for layer in range(qk.shape[0]):
        for head in range(qk.shape[1]):
            q, v = describe(qk[layer, head], n, copies), describe(vp[layer, head], n, copies)
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


def block_norms(W: np.ndarray, n: int, coords: tuple[str, str] = ("A", "C")) -> dict[str, float]:
    """Frobenius norms of the four blocks of an E × E product (named by `coords`) and the
    off-diagonal/diagonal ratio of its first block (0 for a scalar multiple of I)."""
    nn = W[:n, :n]
    off = nn - np.diag(np.diag(nn))
    diag = float(np.linalg.norm(np.diag(nn)))
    a, c = coords
    return {
        a + a: float(np.linalg.norm(nn)),
        a + c: float(np.linalg.norm(W[:n, n:])),
        c + a: float(np.linalg.norm(W[n:, :n])),
        c + c: float(np.linalg.norm(W[n:, n:])),
        "offdiag_ratio": float(np.linalg.norm(off)) / diag if diag else float("inf"),
    }


# --- what the view shows: its lines of the text report, its figures and their caption -----------
def report_lines(ex: Extraction) -> list[str]:
    lines = ["weights (sparsified, tau = 1.5 |W|_1 / #entries):"]
    for h in ex.views["weights"].json["heads"]:
        lines.append(
            f"  layer {h['layer']} head {h['head']}: W_QK = {h['W_QK']}   W_VP = {h['W_VP']}"
        )
    return lines


def network_products(ex: Extraction) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(W_QK, W_VP, source) of an extraction, each (L, h, E, E): the network's own products when
    the `weights` view carries them, else the products projected onto the EAGLE family."""
    w = ex.views.get("weights")
    if w is not None and "qk" in w.extra and "vp" in w.extra:
        return np.asarray(w.extra["qk"]), np.asarray(w.extra["vp"]), "network"
    p = ex.views.get("projection")
    if p is not None and "qk" in p.extra and "vp" in p.extra:
        return np.asarray(p.extra["qk"]), np.asarray(p.extra["vp"]), "projected"
    return None


def machine_cuts(geo) -> list[int]:
    """Where one machine's columns end and the next one's begin, in block orientation: inside
    the A columns (n / M each) and between the C/D copies (n' each); none outside the
    distributed regimes and in the sample layout."""
    if geo.samples or geo.machines <= 1:
        return []
    size = geo.n // geo.machines
    cuts = [k * size for k in range(1, geo.machines)]
    return cuts + [geo.n + k * geo.n_prime for k in range(1, geo.copies)]


def _block_axis(
    ax,
    n: int,
    width: int,
    xlabel: str,
    ylabel: str,
    coords: tuple[str, str] = ("A", "C"),
    cuts: list[int] = (),
) -> None:
    """Tick the A (first n) and C (last n') feature columns and draw the A|C boundary (sample
    layout: the X features and Y labels of the rows), and dotted, the machine boundaries
    `cuts` (`machine_cuts`)."""
    centres = [(n - 1) / 2, n + (width - n - 1) / 2]
    a, c = coords
    ax.set_xticks(centres, [f"{a} 0–{n - 1}", c], fontsize=7)
    ax.set_yticks(centres, [f"{a} 0–{n - 1}", c], fontsize=7, rotation=90, va="center")
    for pos in (ax.axvline, ax.axhline):
        pos(n - 0.5, color="k", lw=0.8, ls="--")
        for edge in cuts:  # machine boundaries: each machine's A columns, each C/D copy
            pos(edge - 0.5, color="0.35", lw=0.6, ls=":")
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=7)


MAX_PANELS = 8  # (layer, head) pairs per heatmap figure
MAX_COLUMNS = 4  # pairs per line of a heatmap figure; each line is a W_QK row over a W_VP row


def grid(layers: list[int], heads: int) -> tuple[int, int, dict[tuple[int, int], tuple[int, int]]]:
    """(lines, columns, {(layer, head): (line, column)}) of a heatmap figure: a layer's heads are
    one block that no other layer's heads continue. A layer of at most MAX_COLUMNS heads fills
    `heads` consecutive columns of one line (MAX_COLUMNS // heads layers to a line); a wider one
    starts a line of its own and goes on over the next lines, MAX_COLUMNS heads to each."""
    where = {}
    if heads <= MAX_COLUMNS:
        per_line = MAX_COLUMNS // heads
        cols = min(per_line, len(layers)) * heads
        for i, layer in enumerate(layers):
            for h in range(heads):
                where[layer, h] = (i // per_line, (i % per_line) * heads + h)
    else:
        cols, span = MAX_COLUMNS, -(-heads // MAX_COLUMNS)
        for i, layer in enumerate(layers):
            for h in range(heads):
                where[layer, h] = (i * span + h // cols, h % cols)
    lines = 1 + max(line for line, _ in where.values())
    return lines, cols, where


def figure_name(layers: list[int], all_layers: int) -> str:
    """The name of the heatmap figure of `layers`: `weights` when it shows every layer, else
    `weights_layer{l}` or `weights_layers{a}-{b}`."""
    if len(layers) == all_layers:
        return "weights"
    if len(layers) == 1:
        return f"weights_layer{layers[0]}"
    return f"weights_layers{layers[0]}-{layers[-1]}"


def figure_layers(name: str, all_layers: int) -> list[int]:
    """The layers heatmap figure `name` shows (`figure_name` read back)."""
    if name.startswith("weights_layers"):
        first, last = name.removeprefix("weights_layers").split("-")
        return list(range(int(first), int(last) + 1))
    if name.startswith("weights_layer"):
        return [int(name.removeprefix("weights_layer"))]
    return list(range(all_layers))


def figures(ex: Extraction) -> Figures:
    """W_QK over W_VP for every layer and head, each panel with its colour bar, diverging colours
    centred at 0 and the A|C feature boundary dashed. Whole layers per figure, at most MAX_PANELS
    (layer, head) pairs, each layer's heads one block of lines of at most MAX_COLUMNS (`grid`):
    one figure `weights` when everything fits, else `weights_layer{l}` (or
    `weights_layers{a}-{b}`)."""
    got = network_products(ex)
    if got is None:
        return {}
    qk, vp, source = got
    n, coords = ex.geometry.split[0], ex.geometry.coords
    width = qk.shape[-1]
    L, H = qk.shape[:2]
    chunks = layer_chunks(L, H)
    what = "" if source == "network" else f", projected onto the {draw.family_word(ex)} family"
    figs = {}
    for layers in chunks:
        lines, cols, where = grid(layers, H)
        w, h = max(2.7 * cols + 0.4, 6.0), 2.75 * 2 * lines + 0.3
        # a fixed grid, not constrained layout: with dozens of colour bars that costs seconds
        fig = draw.figure(w, h, layout=None)
        margins = {"left": 0.6 / w, "right": 1 - 0.55 / w, "bottom": 0.45 / h, "top": 1 - 0.6 / h}
        axes = fig.subplots(
            2 * lines, cols, squeeze=False, gridspec_kw={**margins, "wspace": 0.55, "hspace": 0.45}
        )
        for (layer, h), (line, col) in where.items():
            for row, (W, name, xl, yl) in enumerate(
                (
                    (qk[layer, h], "W_QK", "key feature", "query feature"),
                    (vp[layer, h], "W_VP", "written feature", "value feature"),
                )
            ):
                ax = axes[2 * line + row][col]
                im = draw.diverging(ax, W, interpolation="nearest")
                _block_axis(ax, n, width, xl, yl, coords, machine_cuts(ex.geometry))
                ax.set_title(f"{name}, layer {layer}" + (f" head {h}" if H > 1 else ""), fontsize=8)
                cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
                cb.ax.tick_params(labelsize=6)
                if col == cols - 1:
                    cb.set_label("entry (dimensionless)", fontsize=7)
        used = set(where.values())
        for line in range(lines):
            for col in range(cols):
                if (line, col) not in used:
                    axes[2 * line][col].set_visible(False)
                    axes[2 * line + 1][col].set_visible(False)
        fig.suptitle(
            f"Products per layer{' and head' if H > 1 else ''}{what}: "
            "W_QK = W_Q W_Kᵀ above W_VP = W_V W_Pᵀ",
            fontsize=10,
        )
        figs[figure_name(layers, L)] = fig
    return figs


def layer_chunks(layers: int, heads: int) -> list[list[int]]:
    """The layers of each heatmap figure: whole layers, at most MAX_PANELS (layer, head) pairs."""
    per = max(1, MAX_PANELS // heads)
    return [list(range(s, min(s + per, layers))) for s in range(0, layers, per)]


# what each family's heads look like in the feature layout: W_QK, then W_VP (`fit.families`)
FAMILY_SHAPES = {
    "eagle": (
        "the centralized family (eagle): in every head W_QK = diag(q I_n, q_c I_n') and "
        "W_VP = diag(v I_n, w I_n'), a scalar times the identity in each square block"
    ),
    "eagle-distributed": (
        "the distributed family (eagle-distributed): head μ is machine μ, its W_QK q "
        "times the identity on machine μ's own A columns only (q I[i:j]) and its W_VP v on the "
        "same columns{sent}"
    ),
    "eagle-over-machines": (
        "the over-machines family (eagle-over-machines): head μ's W_QK q times the "
        "identity on machine μ's own A columns only (q I[i:j]), its W_VP diag(v I_n, w I_n') "
        "over every column"
    ),
    "eagle-sketched": (
        "the sketched family (eagle-sketched): in every head the A blocks of W_QK and "
        "W_VP a scalar times the layer's rank-r sketch projector P = S Sᵀ (dense to the eye, "
        "named q P_r), the C blocks a scalar times the identity"
    ),
}


def family_shape(ex: Extraction) -> str:
    """The shape of the heads of `ex`'s families (those its regime admits, `fit.families`): 'the
    shape of' a family, its heads' W_QK and W_VP, the families joined by 'or of'."""
    from eagle_probe.fit import families

    geo = ex.geometry
    sent = (
        f", machine μ's copy of the C/D block written into all {geo.copies} copies "
        "(q I_n' copy μ → all)"
        if geo.copies > 1
        else ", w I_n' on the C block"
    )
    shapes = [
        FAMILY_SHAPES.get(fam.name, f"the {fam.name} family").format(sent=sent)
        for fam in families.for_geometry(geo)
    ]
    return "the shape of " + "; or of ".join(shapes)


def caption(ex: Extraction, name: str = "weights") -> str:
    """The caption of heatmap figure `name`: its layers where the products take several figures,
    the shape to read them against (in the first figure's caption only; the later ones point to
    it), and the heads of this figure that depart from it."""
    got = network_products(ex)
    if got is None:
        return ""
    L, H = got[0].shape[:2]
    layers = figure_layers(name, L)
    first = figure_name(layer_chunks(L, H)[0], L)
    if name != first:
        return f"{_layers_text(layers)}, read against the shape in the caption of {first}." + (
            "" if ex.geometry.samples or got[2] == "projected" else _weights_here(ex, layers)
        )
    where = "" if name == "weights" else f"{_layers_text(layers)}. "
    if ex.geometry.samples:
        return where + (
            "Rows [x, y] of the prompt: X the d features, Y the labels. GD is W_QK = diag(q I, 0) "
            "with W_VP's YY block the step η; GD++ adds a scalar XX block to W_VP (the data "
            "transform γ); preconditioned GD has a non-scalar XX block in W_QK."
        )
    if got[2] == "projected":
        return where + (
            "The products projected onto the EAGLE family (this extraction does not carry the "
            "network's own products): compare the levels of the diagonal blocks across layers."
        )
    shape = family_shape(ex)
    cuts = machine_cuts(ex.geometry)
    machines = (
        f" Dotted lines split the columns by machine ({ex.geometry.machines} blocks of A "
        f"columns, then the C/D copies): what crosses a dotted line is sent between machines."
        if cuts
        else ""
    )
    return where + (
        f"{shape[0].upper()}{shape[1:]}; zeros across the dashed A|C boundary. Colour off those "
        "blocks, or across the boundary, is structure the family does not have."
        + machines
        + _weights_here(ex, layers)
    )


def _layers_text(layers: list[int]) -> str:
    return f"Layer {layers[0]}" if len(layers) == 1 else f"Layers {layers[0]}–{layers[-1]}"


def _weights_here(ex: Extraction, layers: list[int]) -> str:
    """The heads of `layers` whose sparsified products are not of the family's plain shape."""
    heads = [h for h in ex.views["weights"].json["heads"] if h["layer"] in layers]
    odd = [
        f"layer {h['layer']} head {h['head']} {name} = {h[name]}"
        for h in heads
        for name in ("W_QK", "W_VP")
        if "dense" in h[name] or "off-diag" in h[name] or h[name].startswith("[[")
    ]
    if not odd:
        count = f"{len(heads)} head{'s' if len(heads) != 1 else ''}"
        every = "every head's" if len(layers) > 1 or len(heads) > 1 else "the head's"
        of = f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}–{layers[-1]}"
        return f" Here {every} W_QK and W_VP in {of} has that shape ({count})."
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return " Here: " + "; ".join(odd[:3]) + more + "."


@register("weights", text=report_lines, figures=figures, captions={"weights": caption})
def weights_view(ctx: Context) -> ViewResult:
    """Structure text, block norms and the simplified model's held-out MSE."""
    n, coords = ctx.geometry.split[0], ctx.geometry.coords
    table = weight_view(ctx.qk, ctx.vp, n, 1 if ctx.geometry.samples else ctx.geometry.copies)
    sqk, svp = simplified_products(ctx.qk, ctx.vp, n)
    held, net_pred = ctx.scoring(ctx.geometry.layers)
    simplified = held.mse(ctx.geometry.predict(held.z0, sqk, svp))
    network = held.mse(net_pred)
    heads = []
    for row in table.itertuples():
        heads.append(
            {
                "layer": int(row.layer),
                "head": int(row.head),
                "W_QK": row.W_QK,
                "W_VP": row.W_VP,
                "qk_blocks": block_norms(ctx.qk[row.layer, row.head], n, coords),
                "vp_blocks": block_norms(ctx.vp[row.layer, row.head], n, coords),
            }
        )
    warnings = []
    if not np.isfinite(simplified) or simplified > 10 * max(network, ctx.zero_mse):
        warnings.append(
            f"the sparsified ('simplified') weights blow up: MSE {value(simplified)} against the "
            f"network's {value(network)}; the structure text is not a model of this network"
        )
    return ViewResult(
        "weights",
        {
            "sparsify": "entries below 1.5 ‖W‖₁ / #entries set to 0",
            "simplified_mse": simplified,
            "prompts": held.prompts,
            "heads": heads,
        },
        {"weights": table},
        warnings,
        extra={"qk": ctx.qk, "vp": ctx.vp},
    )
