"""What crosses machines in a distributed model: where each head's W_VP writes, and what the
function loses when each kind of cross-machine write is removed.

Head μ is machine μ; it owns the A/B columns μ·n/M … (μ+1)·n/M − 1. In the paper's distributed
regime every machine also holds its own copy of the C/D columns (the stream read grouped,
[[A, C^0 … C^{M−1}], [B, D^0 … D^{M−1}]]) and its query, key and value read only its own block,
so the only way one machine reaches another is through W_VP's columns (outputs): one layer adds
((Z W_QK^μ Zᵀ) ⊙ M) Z W_VP^μ, whose column j lands in column j of the stream, the column
machine owner(j) holds. A cross-machine write is then either A traffic (into another machine's
A/B columns) or C/D traffic (into another machine's C/D copy). In distributed-open (values read
every machine, one C/D block shared by all) the C/D columns are the shared channel.

The columns of W_VP^μ split its squared Frobenius norm by destination, summing to 1:

- `own_share`: the columns of machine μ's own A/B block (nothing sent);
- `own_cd_share`: machine μ's own C/D copy (paper's regime; 0 in distributed-open);
- `cross_cd_share`: the C/D columns of the other machines (paper's regime), or the shared C/D
  block (distributed-open). This is the channel the paper's eagle-distributed uses: it reports
  W_VP^μ outside its own A block as diag(0_n, α' I_n'), each machine sending its C/D result;
  `cd_from_a_share` is the part of all C/D writes whose inputs are A/B rows (off the paper's
  shape, but the same channel and the same cost);
- `cross_a_share`: the columns of the other machines' A/B blocks: machine μ writing into machine
  ν's A^ν, B^ν, the A communication eagle-distributed never does and eagle-over-machines (the
  centralized update across machines, Σ_μ A^μ A^μᵀ A = A Aᵀ A) needs.

`cross_a_fraction` is the A traffic's part of the cross-machine energy,
cross_a_share / (cross_a_share + cross_cd_share), the paper's question in one number.

In distributed-open the values are read across machines too: row i of W_VP^μ takes stream column
i, so rows of another machine's A/B columns are that machine's columns sent to μ.
`cross_a_any_share` is the share of every entry that reads or writes another machine's A/B columns
(either crossing), and `cross_a_any_ablation` zeroes all of them — the whole A channel between
machines (in the paper's regime the values read nothing across, and it equals the writes alone).
`off_family_share` is the share outside eagle-distributed's own shape (own A/B rows into own A/B
columns, and C/D rows into C/D columns: in the paper's regime, machine μ's copy into every copy).

Function, on held-out prompts: `cross_a_ablation` is the MSE with the cross-machine A output
columns of W_VP zeroed (one layer, every head; and every layer at once) over the MSE of the
unchanged products (both NumPy forwards, so a layer with nothing there scores exactly 1);
`cross_cd_ablation` (paper's regime) the same with the writes into other machines' C/D copies
zeroed. A layer relies on A columns from other machines (`a_columns_relied`) when that ratio is at
least USED_BLOCK or at most its inverse: the function depends on what crosses, whichever way.
USED_BLOCK (2×) is the verdict's rule for a used weight block, so the two readings agree. A layer
sends A columns (`a_columns_sent`) when it relies on them or when a head writes (or reads) at
least SENT_SHARE of its ‖W_VP‖²_F across machines' A/B columns: those writes are communication
whatever they are worth to the output.

Cost: a machine sends d + d' floats (one stream column over the d + d' tokens) for every column
outside its own block it writes, per layer (a round). `floats_per_machine_round.network` counts
the columns the network's heads write with at least WRITE_SHARE of the head's ‖W_VP‖²_F (the
largest count over heads and layers), split into A and C/D traffic (`floats_a`, `floats_cd`);
eagle-distributed writes the n' C/D columns only: (d + d') n' into the shared block, or
(d + d') n' (M − 1) into the M − 1 other copies. (This counts writes; the `sends` line of
eagle-over-machines in `fit.families` counts each machine broadcasting its own n/M columns
instead: the same order, O(d n / M).)

Averaging (the paper's architecture only, a C/D copy per machine). Head μ's value reads machine
μ's own copy; its output writes every copy. The C/D write factor f[μ, ν] is the scalar head μ
writes into machine ν's C/D slots: the coefficient of I_n' in the least-squares fit of the n' × n'
block of W_VP^μ from the rows of copy μ to the columns of copy ν by f · I,

    f[μ, ν] = tr(W_VP^μ[copy μ rows, copy ν columns]) / n',

so a layer adds f[μ, ν] · U^μ to copy ν, U^μ being head μ's attention-weighted read of its own
copy (A^μ A^μᵀ C^μ on the C rows, B^μ A^μᵀ C^μ on the D rows, in eagle-distributed's shape).
`cd_within` is the mean of f[μ, μ] over machines (own update into own copy), `cd_cross` the mean
of f[μ, ν] over the M (M − 1) pairs μ ≠ ν (own update into another machine's copy), `cd_ratio`
= `cd_cross` / `cd_within`; `cd_factor_residual` is ‖blocks − f I‖_F / ‖blocks‖_F over every
such block of the layer (how far the blocks are from scalar multiples of I). eagle-distributed
has f[μ, ν] = −c for every pair (`families.embed`): with equal factors copy ν receives
f Σ_μ U^μ, the same sum on every machine, i.e. the paper's C = mean_μ C'^μ, D = mean_μ D'^μ up
to the factor M folded into c, and copies that start equal stay equal. With f[μ, μ] = f_w and
f[μ, ν] = f_x otherwise, copy ν receives f_x Σ_μ U^μ + (f_w − f_x) U^ν: the mean plus an extra
step on its own machine's update, and the copies part.

The copies' divergence is read from the activations: after each layer, per prompt, the largest
over machines of ‖X^ν − X̄‖_F / ‖X̄‖_F (X^ν machine ν's copy, X̄ their mean, internal units,
the C/D columns unscaled), median over the scored prompts: `d_spread` for D, `c_spread` for C
(C shrinks towards 0 as the iteration converges, so its relative spread grows late). The
prediction is the mean of the D copies (`Geometry.read_d`); a C spread feeds the later layers'
updates.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, register
from eagle_probe.fit.geometry import Geometry
from eagle_probe.fit.verdict import USED_BLOCK
from eagle_probe.wording import percent, times, value

# a column of W_VP^μ counts as written when it holds at least this share of ‖W_VP^μ‖²_F; the
# shipped distributed model's cross columns hold 0.2–16% each in layers 0–2, its last layer
# below 1e-5 (its A/B columns never reach D)
WRITE_SHARE = 1e-3
# held-out prompts the ablations are scored on (paired: the same prompts for every ratio); 512
# keeps the view well under a second at the paper's sizes
PROMPTS = 512


def machine_of(n: int, machines: int) -> np.ndarray:
    """The machine owning each A/B column: (n,)."""
    return np.arange(n) // (n // machines)


def destinations(geo: Geometry, head: int) -> dict[str, np.ndarray]:
    """Boolean (E,) masks of the stream columns (block orientation) by what they are to machine
    `head`: its own A/B columns, other machines' A/B columns, its own C/D copy, and the C/D columns
    it shares with or sends to others (the other copies, or the one shared block)."""
    n, E = geo.n, geo.width
    own_ab, cross_ab = np.zeros(E, dtype=bool), np.zeros(E, dtype=bool)
    own_ab[:n] = machine_of(n, geo.machines) == head
    cross_ab[:n] = ~own_ab[:n]
    own_cd, cross_cd = np.zeros(E, dtype=bool), np.zeros(E, dtype=bool)
    if geo.copies > 1:
        own_cd[n + head * geo.n_prime : n + (head + 1) * geo.n_prime] = True
        cross_cd[n:] = ~own_cd[n:]
    else:
        cross_cd[n:] = True
    return {"own_ab": own_ab, "cross_ab": cross_ab, "own_cd": own_cd, "cross_cd": cross_cd}


SHARES = (
    "cross_a_share",
    "cross_cd_share",
    "own_share",
    "own_cd_share",
    "cd_from_a_share",
    "off_family_share",
    "cross_a_any_share",
    "cross_a_fraction",
)


def shares(vp_head: np.ndarray, geo: Geometry, head: int) -> dict[str, float]:
    """Where one head's W_VP (E, E) writes, as shares of its squared Frobenius norm (module
    text); a zero W_VP has every share 0."""
    sq = vp_head**2  # (E, E)  rows: value input coordinate, columns: output coordinate
    total = float(sq.sum())
    if total == 0.0:
        return dict.fromkeys(SHARES, 0.0)
    n = geo.n
    dest = destinations(geo, head)
    cross, own = dest["cross_ab"], dest["own_ab"]
    cd_rows = np.zeros(sq.shape[0], dtype=bool)
    cd_rows[n:] = True
    # eagle-distributed's own shape: own A/B rows into own A/B columns, C/D rows into C/D columns
    family = sq[np.ix_(own, own)].sum() + sq[np.ix_(cd_rows, cd_rows)].sum()
    cross_a = float(sq[:, cross].sum()) / total
    cross_cd = float(sq[:, dest["cross_cd"]].sum()) / total
    return {
        "cross_a_share": cross_a,
        "cross_cd_share": cross_cd,
        "own_share": float(sq[:, own].sum()) / total,
        "own_cd_share": float(sq[:, dest["own_cd"]].sum()) / total,
        "cd_from_a_share": float(sq[:n, n:].sum()) / total,
        "off_family_share": 1.0 - float(family) / total,
        "cross_a_any_share": float(sq[cross].sum() + sq[np.ix_(~cross, cross)].sum()) / total,
        "cross_a_fraction": cross_a / (cross_a + cross_cd) if cross_a + cross_cd > 0 else 0.0,
    }


def written_outside(vp_head: np.ndarray, geo: Geometry, head: int) -> tuple[int, int]:
    """Columns outside the head's own block holding at least WRITE_SHARE of ‖W_VP‖²_F: (other
    machines' A/B columns, C/D columns sent)."""
    col = (vp_head**2).sum(0)  # (E,)  squared norm written into each output column
    total = float(col.sum())
    if total == 0.0:
        return 0, 0
    dest = destinations(geo, head)
    big = col >= WRITE_SHARE * total
    return int(np.sum(dest["cross_ab"] & big)), int(np.sum(dest["cross_cd"] & big))


def without(
    vp: np.ndarray, geo: Geometry, layers, kind: str = "cross_ab", reads: bool = False
) -> np.ndarray:
    """W_VP (L, h, E, E) with every head's output columns of `kind` (`destinations`) zeroed in
    `layers` (and, with `reads`, its rows reading those columns as well)."""
    out = vp.copy()
    for layer in layers:
        for head in range(vp.shape[1]):
            cols = destinations(geo, head)[kind]
            out[layer, head][:, cols] = 0.0
            if reads:
                out[layer, head][cols, :] = 0.0
    return out


# The paper (NeurIPS 2025, §4 "Distributed setting", Communication Structure) on W_VP^μ:
#   "Across-machine blocks. Off-diagonal blocks are diag(0_n, α2_ℓ I_n′): i.e. only the
#   incomplete columns (C_ℓ, D_ℓ) are transmitted, and with the very same factor α2_ℓ as the
#   within machine blocks." … "Since attention heads are simply added, every machine averages its
#   received blocks, leading to C_{ℓ+1} = M⁻¹ Σ_μ C′^μ, D_{ℓ+1} = M⁻¹ Σ_μ D′^μ. The shared columns
#   are thus identical across all μ at all ℓ, recovering Alg. 1 with S = I_n and M > 1."
# Measured here (benchmarks/distributed_averaging.py, docs/results.md): distributed.pt writes the
# other machines' copies with cross/within factor ×1.05, ×0.87, ×1.50, ×1.00 in layers 0-3, and
# its D copies part by 3.1% (median prompt) after layer 2; over the ten distributed seeds layer 2
# reads ×1.50 to ×2.80 (D copies 4.1-6.5% apart after it), layers 0, 1 and 3 ×0.91 to ×1.05. The
# "very same factor" holds to 5% in layers 0 and 3, to 13% in layer 1, and not in layer 2; making
# the factors equal (each head's mean write kept) costs at most 3.5% of the held-out MSE.


def _cd_blocks(vp_layer: np.ndarray, geo: Geometry) -> np.ndarray:
    """The n' × n' blocks W_VP^μ[copy μ rows, copy ν columns]: (M, M, n', n')."""
    n, n_prime, M = geo.n, geo.n_prime, geo.copies
    # head μ, row copy, its row, column copy, its column
    V = vp_layer[:M, n:, n:].reshape(M, M, n_prime, M, n_prime)
    return np.stack([V[mu, mu].swapaxes(0, 1) for mu in range(M)])


def averaging(vp_layer: np.ndarray, geo: Geometry) -> dict:
    """One layer's C/D write factors (module text): `cd_factors` (M × M), `cd_within`,
    `cd_cross`, `cd_ratio` (cross / within; 1 where both are 0, infinite where only the
    within factor is) and `cd_factor_residual`."""
    blocks = _cd_blocks(vp_layer, geo)
    f = np.trace(blocks, axis1=-2, axis2=-1) / geo.n_prime  # (M, M)
    M = f.shape[0]
    off = ~np.eye(M, dtype=bool)
    within, cross = float(np.mean(np.diag(f))), float(np.mean(f[off]))
    if within != 0.0:
        ratio = cross / within
    else:
        ratio = 1.0 if cross == 0.0 else float("inf")
    rest = blocks - f[..., None, None] * np.eye(geo.n_prime)
    total = float(np.sum(blocks**2))
    return {
        "cd_factors": f.tolist(),
        "cd_within": within,
        "cd_cross": cross,
        "cd_ratio": ratio,
        "cd_factor_residual": float(np.sqrt(np.sum(rest**2) / total)) if total > 0 else 0.0,
    }


def copy_spread(Z: np.ndarray, geo: Geometry) -> tuple[float, float]:
    """The machines' copies' divergence in a stream Z (b, T, E): (C, D), each per prompt the
    largest over machines of ‖X^ν − X̄‖_F / ‖X̄‖_F, median over prompts (module text); a prompt
    whose copies are all 0 counts 0."""
    d, n, M, n_prime = geo.d, geo.n, geo.copies, geo.n_prime
    out = []
    for X in (Z[:, :d, n:], Z[:, d:, n:]):
        X = X.reshape(X.shape[0], X.shape[1], M, n_prime).swapaxes(1, 2)  # (b, M, rows, n')
        mean = X.mean(1)
        dev = np.linalg.norm(X - mean[:, None], axis=(-2, -1)).max(1)
        size = np.linalg.norm(mean, axis=(-2, -1))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(dev == 0, 0.0, dev / size)
        out.append(float(np.median(rel)) if rel.size else 0.0)
    return out[0], out[1]


def _averaging_sentence(layers: list[dict]) -> str:
    """What the C/D factors and the copies' spread say about the paper's plain average."""
    ratios = ", ".join(f"×{value(lay['cd_ratio'])}" for lay in layers)
    # a spread at round-off (a plant's copies: 1e-16) reads 0%
    spreads = ", ".join(
        _pc(lay["d_spread"] if lay["d_spread"] >= 1e-9 else 0.0, ".2g") for lay in layers
    )
    return (
        f"Averaging: each head writes the other machines' C/D copies {ratios} as strongly as "
        f"its own in layers 0–{len(layers) - 1} (cross-machine over within-machine factor; the "
        "paper's eagle-distributed: ×1, 'the very same factor'), and the machines' D copies "
        f"differ from their mean by {spreads} after each layer (median prompt, the copy "
        "furthest from the mean)."
    )


SENT_SHARE = 0.05  # a head writing this share of its ‖W_VP‖² across machines sends A columns


def _sent(ratio: float) -> bool:
    """The function depends on what was zeroed: the MSE moved by USED_BLOCK× either way (a
    non-finite ablated MSE counts as dependence)."""
    return not np.isfinite(ratio) or ratio >= USED_BLOCK or ratio <= 1.0 / USED_BLOCK


def _ratio(mse: float, base: float) -> float:
    if base > 0:
        return mse / base
    return 1.0 if mse == base else float("inf")


def _pc(share: float, spec: str) -> str:
    """A share as a percentage with `spec`'s digits ("0.026%", `wording.percent`)."""
    return percent(share, signed=False, spec=spec)


def _by(ratio: float) -> str:
    """An MSE ratio as a factor: "×3.99", "×10⁶ or more" (`wording.times`)."""
    return times(ratio, prefix=True)


def _sentence(
    layers: list[dict],
    sent: bool,
    ratio: float,
    any_ratio: float,
    floats: dict,
    M: int,
    cd_ratio: float | None,
) -> str:
    network, paper = floats["network"], floats["eagle-distributed"]
    cd = traffic = ""
    if cd_ratio is not None:  # C/D copies: both kinds of traffic named
        cd = f"; zeroing the writes into other machines' C/D copies changes it {_by(cd_ratio)}"
        traffic = f"{_pc(_fraction(layers), '.3g')} of the cross-machine ‖W_VP‖² is A traffic"
    if sent:
        used = [lay for lay in layers if lay["a_columns_sent"]] or layers
        where = ", ".join(str(lay["layer"]) for lay in used)
        top = max(h["cross_a_share"] for lay in used for h in lay["heads"])
        top_any = max(h["cross_a_any_share"] for lay in used for h in lay["heads"])
        return (
            f"A columns cross machines: in layer(s) {where} a head writes up to "
            f"{_pc(top, '.2g')} of its ‖W_VP‖² into the other {M - 1} machines' A/B columns "
            f"({_pc(top_any, '.2g')} reading or writing them), and zeroing those writes in every "
            f"layer changes the held-out MSE {_by(ratio)} (reads and writes: "
            f"{_by(any_ratio)}"
            f"{cd}); {traffic + '; ' if traffic else ''}the network sends about {network} "
            f"floats per machine per round where eagle-distributed sends {paper} (the C/D "
            "results only)."
        )
    top = max((h["cross_a_share"] for lay in layers for h in lay["heads"]), default=0.0)
    return (
        f"Only the C/D results cross machines: at most {_pc(top, '.2g')} of any head's ‖W_VP‖² "
        f"writes other machines' A/B columns{f' ({traffic})' if traffic else ''} and zeroing "
        f"it changes the held-out MSE by {times(ratio)}{cd}, as in eagle-distributed ({network} "
        f"floats per machine per round; the family sends {paper})."
    )


def _fraction(layers: list[dict]) -> float:
    """The A traffic's part of all cross-machine ‖W_VP‖² energy, over every layer and head (each
    head's shares weighted by its ‖W_VP‖²)."""
    a = sum(h["cross_a_share"] * h["norm2"] for lay in layers for h in lay["heads"])
    cd = sum(h["cross_cd_share"] * h["norm2"] for lay in layers for h in lay["heads"])
    return a / (a + cd) if a + cd > 0 else 0.0


# --- what the view shows: its figure and the figure's caption -------------------------------------
def figures(ex: Extraction) -> Figures:
    """Distributed models: per layer and head the share of ‖W_VP^μ‖²_F written into other
    machines' A/B columns (view `communication`), each layer labelled with what zeroing those
    writes does to the held-out MSE; with a C/D copy per machine (the paper's architecture) a
    second panel shows the share written into the other machines' C/D copies, labelled with
    what zeroing those does."""
    c = ex.views["communication"].json
    layers = c.get("layers", [])
    if not layers:
        return {}
    copies = "cross_cd_ablation" in c
    panels = [("cross_a_share", "Reds", "into other machines' A/B columns", "cross_a_ablation")]
    if copies:
        panels.append(
            ("cross_cd_share", "Blues", "into other machines' C/D copies", "cross_cd_ablation")
        )
    L, h = len(layers), len(layers[0]["heads"])
    fig = draw.figure(max(6.0, (0.7 * h + 3.4) * len(panels) + 1.2), 0.5 * L + 2.1)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, cmap, where, ablation) in zip(axes, panels, strict=True):
        share = np.array([[hd[key] for hd in lay["heads"]] for lay in layers])  # (L, h)
        im = draw.fraction_map(
            ax, share, cmap, ((ij, f"{100 * v:.0f}%") for ij, v in np.ndenumerate(share))
        )
        labels = [
            f"{lay['layer']}: {_by(lay[ablation])}"
            + (
                f", with reads {_by(lay['cross_a_any_ablation'])}"
                if key == "cross_a_share" and not copies and "cross_a_any_ablation" in lay
                else ""
            )
            + (" (sent)" if key == "cross_a_share" and lay["a_columns_sent"] else "")
            for lay in layers
        ]
        ax.set_yticks(range(L), labels, fontsize=8)
        ax.set_xticks(range(h), [str(j) for j in range(h)])
        ax.set_xlabel("head = machine μ")
        ax.set_ylabel("layer: MSE with these\nwrites zeroed", fontsize=8)
        fig.colorbar(im, ax=ax, label="share of ‖W_VP^μ‖²_F", shrink=0.9)
        ax.set_title(
            f"W_VP^μ written {where}\n(every layer zeroed at once: MSE {_by(c[ablation])})",
            fontsize=9,
        )
    if copies:
        fig.suptitle(
            f"A traffic: {_pc(c['cross_a_fraction'], '.3g')} of the cross-machine ‖W_VP‖²",
            fontsize=10,
        )
    return {"communication": fig}


def caption(ex: Extraction) -> str:
    if "cross_cd_ablation" in ex.views["communication"].json:
        return (
            "In the paper's distributed architecture each head reads only its own machine's "
            "block, so everything that crosses machines is a write of W_VP. eagle-distributed "
            "writes nothing into other machines' A/B columns (every red cell 0%) and sends its C/D "
            "result into every other machine's C/D copy (the blue cells); the row labels say how "
            "much the held-out MSE moves when that layer's writes of each kind are zeroed (sent: "
            "a head writes 5% of its ‖W_VP‖² into A/B columns, or zeroing them moves the MSE 2× "
            "or more)."
        )
    return (
        "eagle-distributed writes nothing into other machines' A/B columns (every cell 0%): a "
        "red cell is a head sending A columns, and the row label says how much the held-out "
        "MSE moves when that layer's cross-machine A writes are zeroed, and when the values "
        "reading other machines' A/B columns are zeroed with them (the whole A channel; sent: "
        "a head reads or writes 5% of its ‖W_VP‖² there, or either ablation moves the MSE 2× "
        "or more). This is distributed-open, whose values read every machine: not the "
        "paper's architecture."
    )


def head_writes(vp: np.ndarray, geo) -> tuple[list[dict], list[tuple[int, int]]]:
    """Per head of one layer (vp: (heads, E, E)): where its W_VP writes (`shares`), the floats it
    sends a round (one stream column is d + d' floats) and ‖W_VP‖²; and each head's count of
    other machines' (A/B, C/D) columns written."""
    floats_col = geo.d + geo.d_prime
    heads, cols = [], []
    for head in range(vp.shape[0]):
        written = written_outside(vp[head], geo, head)
        cols.append(written)
        heads.append(
            {
                "head": head,
                **shares(vp[head], geo, head),
                "floats_sent": floats_col * sum(written),
                "floats_a": floats_col * written[0],
                "floats_cd": floats_col * written[1],
                "norm2": float(np.sum(vp[head] ** 2)),
            }
        )
    return heads, cols


@register("communication", figures=figures, captions={"communication": caption})
def communication_view(ctx: Context) -> ViewResult:
    """Per layer and head where W_VP writes; per layer and all at once what the cross-machine
    A writes (and, with C/D copies, the C/D writes) are worth in held-out MSE (module text)."""
    geo = ctx.geometry
    M, L = geo.machines, geo.layers
    copies = geo.copies > 1
    # the factors pair head μ with machine μ's copy: one head per machine
    averaged = copies and ctx.vp.shape[1] == geo.copies
    floats_col = geo.d + geo.d_prime  # one stream column: d + d' tokens
    # passes: the stream, each layer's ablations from that layer on, every layer ablated at once
    kinds = 3 if copies else 2
    held, _ = ctx.scoring(L + kinds * L * (L + 1) / 2 + kinds * L, limit=PROMPTS)
    stream = geo.stream(held.z0, ctx.qk, ctx.vp)  # (L + 1, b, T, E)  internal units
    base = held.mse(geo.readout_of(stream[-1], held.z0))
    rows, layers = [], []
    written = (0, 0)
    ablations = [("cross_ab", False), ("cross_ab", True)] + (
        [("cross_cd", False)] if copies else []
    )
    for layer in range(L):
        heads, cols = head_writes(ctx.vp[layer], geo)
        written = max([written, *cols], key=sum)
        rows += [{"layer": layer, **h} for h in heads]
        # the layers before `layer` are unchanged: run on from their stream
        ratios = []
        for kind, reads in ablations:
            vp = without(ctx.vp, geo, [layer], kind, reads)
            Z = stream[layer]
            with np.errstate(over="ignore", invalid="ignore"):
                for later in range(layer, L):
                    Z = geo.layer(Z, ctx.qk[later], vp[later])
            ratios.append(_ratio(held.mse(geo.readout_of(Z, held.z0)), base))
        ratio, any_ratio = ratios[:2]
        entry = {
            "layer": layer,
            "heads": heads,
            "cross_a_ablation": ratio,
            "cross_a_any_ablation": any_ratio,
            "a_columns_relied": _sent(ratio) or _sent(any_ratio),
            "a_columns_sent": _sent(ratio)
            or _sent(any_ratio)
            or max(h["cross_a_any_share"] for h in heads) >= SENT_SHARE,
        }
        if averaged:
            entry["cross_cd_ablation"] = ratios[2]
            entry.update(averaging(ctx.vp[layer], geo))
            entry["c_spread"], entry["d_spread"] = copy_spread(stream[layer + 1], geo)
        elif copies:
            entry["cross_cd_ablation"] = ratios[2]
        layers.append(entry)
    whole = []
    for kind, reads in ablations:
        vp = without(ctx.vp, geo, range(L), kind, reads)
        whole.append(_ratio(held.mse(geo.predict(held.z0, ctx.qk, vp)), base))
    ratio, any_ratio = whole[:2]
    cd_ratio = whole[2] if copies else None
    relied = _sent(ratio) or _sent(any_ratio) or any(lay["a_columns_relied"] for lay in layers)
    sent = relied or any(lay["a_columns_sent"] for lay in layers)
    family_cols = geo.n_prime * (M - 1 if copies else 1)
    floats = {
        "network": floats_col * sum(written),
        "network_a": floats_col * written[0],
        "network_cd": floats_col * written[1],
        "eagle-distributed": floats_col * family_cols,
    }
    warnings = []
    if sent:
        warnings.append(
            "W_VP writes other machines' A/B columns"
            + (" and the function depends on it" if relied else "")
            + f" (zeroing those writes: MSE {_by(ratio)}): A columns cross machines, which "
            "eagle-distributed never does"
        )
    out = {
        "layers": layers,
        "cross_a_ablation": ratio,
        "cross_a_any_ablation": any_ratio,
        "a_columns_sent": bool(sent),
        "a_columns_relied": bool(relied),
        "floats_per_machine_round": floats,
        "threshold": USED_BLOCK,
        "sent_share": SENT_SHARE,
        "write_share": WRITE_SHARE,
        "network_mse": base,
        "prompts": held.prompts,
        "sentence": _sentence(layers, sent, ratio, any_ratio, floats, M, cd_ratio)
        + (" " + _averaging_sentence(layers) if averaged else ""),
    }
    if copies:
        out["cross_cd_ablation"] = cd_ratio
        out["cross_a_fraction"] = _fraction(layers)
    return ViewResult("communication", out, {"communication": pd.DataFrame(rows)}, warnings)
