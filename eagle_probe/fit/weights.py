"""Weight structure: what W_QK and W_VP look like after sparsification, per layer and head, and
what the sparsified ("simplified") model does in function.

The products split into two coordinate kinds (`Geometry.split`, `Geometry.coords`): the n sample
columns A and the n' query columns C in the feature layout; the d features X and the d' labels Y
of the rows [x, y] in the sample layout, where the blocks are named XX, XY, YX, YY."""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe.fit.base import Context, ViewResult, register


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


def _sent_copy(block: np.ndarray, copies: int) -> tuple[str, None] | None:
    """A C/D block (c n' × c n') of the paper's distributed layout that writes one machine's copy
    into every copy, q I_{n'} in each: `q I_n' copy μ → all c` (no single level: the simplified
    model keeps it as it is), or None."""
    k = block.shape[0]
    if copies < 2 or block.shape[1] != k or k % copies or not np.any(block):
        return None
    n_prime, scale = k // copies, float(np.abs(block).max())
    rows = [block[m * n_prime : (m + 1) * n_prime] for m in range(copies)]
    live = [m for m, r in enumerate(rows) if np.abs(r).max() > EXACT * scale]
    if len(live) != 1:
        return None
    level = float(rows[live[0]][0, 0])
    want = np.tile(level * np.eye(n_prime), (1, copies))
    if np.abs(rows[live[0]] - want).max() > EXACT * abs(level):
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
    sent = _sent_copy(raw["qq"], copies)
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


@register("weights")
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
            f"the sparsified ('simplified') weights blow up: MSE {simplified:.3g} against the "
            f"network's {network:.3g}; the structure text is not a model of this network"
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
