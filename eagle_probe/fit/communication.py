"""What crosses machines in a distributed model: where each head's W_VP writes, and what the
function loses when the writes into other machines' A columns are removed.

Head μ is machine μ; it owns the A/B columns μ·n/M … (μ+1)·n/M − 1 and shares the n' C/D columns
with every machine. Its W_QK is zero outside its own block (the architecture), so the only way
one machine reaches another is through W_VP: one layer adds ((Z W_QK^μ Zᵀ) ⊙ M) Z W_VP^μ, whose
column j lands in column j of the stream, the column machine owner(j) holds. The columns (outputs)
of W_VP^μ therefore split its squared Frobenius norm three ways, summing to 1:

- `own_share`: the columns of machine μ's own A/B block (nothing sent);
- `cross_cd_share`: the n' shared C/D columns, from any input row. This is the channel the paper's
  eagle-distributed uses: it reports W_VP^μ outside its own A block as diag(0_n, α' I_n'), i.e.
  all of it in the C rows × C/D columns block, each machine sending its C/D result
  ((d + d') n' floats per round). `cd_from_a_share` is the part of it whose inputs are A/B rows
  (off the paper's shape, but the same channel and the same cost);
- `cross_a_share`: the columns of the other machines' A/B blocks, from any input row: machine μ
  writing into machine ν's A^ν, B^ν, the A communication eagle-distributed never does and
  eagle-over-machines (the centralized update across machines, Σ_μ A^μ A^μᵀ A = A Aᵀ A) needs.

Values are read across machines too: row i of W_VP^μ takes stream column i, so rows of another
machine's A/B columns are that machine's columns sent to μ. `cross_a_any_share` is the share of
every entry that reads or writes another machine's A/B columns (either crossing),
and `cross_a_any_ablation` zeroes all of them — the whole A channel between machines. The two
ablations differ because reads and writes partly cancel: on the shipped distributed model,
removing the writes alone breaks the function far more than removing reads and writes together.

`off_family_share` is the share outside eagle-distributed's own shape (everything but the own
block's rows × own block's columns and the C rows × C/D columns): it adds to `cross_a_share` the
other machines' A/B inputs written into the own block and the A/B inputs written into C/D.

Function, on held-out prompts: `cross_a_ablation` is the MSE with those cross-machine A output
columns of W_VP zeroed (one layer, every head; and every layer at once) over the MSE of the
unchanged products (both NumPy forwards, so a layer with nothing there scores exactly 1). A layer
relies on A columns from other machines (`a_columns_relied`) when that ratio is at least
USED_BLOCK or at most its inverse: the function depends on what crosses, whichever way. USED_BLOCK
(2×) is the verdict's rule for a used weight block, so the two readings agree. A layer sends A
columns (`a_columns_sent`) when it relies on them or when a head writes at least SENT_SHARE of its
‖W_VP‖²_F into other machines' A/B columns: those writes are communication whatever they are worth
to the output.

Cost: a machine sends d + d' floats (one stream column over the d + d' tokens) for every column
outside its own block it writes, per layer (a round). `floats_per_machine_round.network` counts
the columns the network's heads write with at least WRITE_SHARE of the head's ‖W_VP‖²_F (the
largest count over heads and layers); eagle-distributed writes the n' C/D columns only,
(d + d') n'. (This counts writes; the `sends` line of eagle-over-machines in `fit.families`
counts each machine broadcasting its own n/M columns instead: the same order, O(d n / M).)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe.fit.base import Context, ViewResult, register
from eagle_probe.fit.verdict import USED_BLOCK

# a column of W_VP^μ counts as written when it holds at least this share of ‖W_VP^μ‖²_F; the
# shipped distributed model's cross columns hold 0.2–16% each in layers 0–2, its last layer
# below 1e-5 (its A/B columns never reach D)
WRITE_SHARE = 1e-3
# held-out prompts the ablations are scored on (paired: the same prompts for every ratio); 512
# keeps the view well under a second at the paper's sizes
PROMPTS = 512


SHARES = (
    "cross_a_share",
    "cross_cd_share",
    "own_share",
    "cd_from_a_share",
    "off_family_share",
    "cross_a_any_share",
)


def machine_of(n: int, machines: int) -> np.ndarray:
    """The machine owning each A/B column: (n,)."""
    return np.arange(n) // (n // machines)


def cross_a_columns(n: int, width: int, machines: int, head: int) -> np.ndarray:
    """Boolean (E,): the A/B columns of every machine but `head`'s."""
    cols = np.zeros(width, dtype=bool)
    cols[:n] = machine_of(n, machines) != head
    return cols


def shares(vp_head: np.ndarray, n: int, machines: int, head: int) -> dict[str, float]:
    """Where one head's W_VP (E, E) writes, as shares of its squared Frobenius norm (module
    text); a zero W_VP has every share 0."""
    E = vp_head.shape[-1]
    sq = vp_head**2  # (E, E)  rows: value input coordinate, columns: output coordinate
    total = float(sq.sum())
    if total == 0.0:
        return dict.fromkeys(SHARES, 0.0)
    cross = cross_a_columns(n, E, machines, head)
    own = np.zeros(E, dtype=bool)
    own[:n] = ~cross[:n]
    return {
        "cross_a_share": float(sq[:, cross].sum()) / total,
        "cross_cd_share": float(sq[:, n:].sum()) / total,
        "own_share": float(sq[:, own].sum()) / total,
        "cd_from_a_share": float(sq[:n, n:].sum()) / total,
        # outside eagle-distributed's shape: all but own block -> own block and C -> C/D
        "off_family_share": 1.0 - float(sq[np.ix_(own, own)].sum() + sq[n:, n:].sum()) / total,
        "cross_a_any_share": float(sq[cross].sum() + sq[np.ix_(~cross, cross)].sum()) / total,
    }


def written_outside(vp_head: np.ndarray, n: int, machines: int, head: int) -> int:
    """Columns outside the head's own A/B block (other machines' A/B columns and the C/D
    columns) holding at least WRITE_SHARE of ‖W_VP‖²_F."""
    col = (vp_head**2).sum(0)  # (E,)  squared norm written into each output column
    total = float(col.sum())
    if total == 0.0:
        return 0
    outside = cross_a_columns(n, vp_head.shape[-1], machines, head)
    outside[n:] = True
    return int(np.sum(outside & (col >= WRITE_SHARE * total)))


def without_cross_a(
    vp: np.ndarray, n: int, machines: int, layers, reads: bool = False
) -> np.ndarray:
    """W_VP (L, h, E, E) with every head's cross-machine A output columns zeroed in `layers`
    (and, with `reads`, its rows reading other machines' A/B columns as well)."""
    out = vp.copy()
    for layer in layers:
        for head in range(vp.shape[1]):
            cross = cross_a_columns(n, vp.shape[-1], machines, head)
            out[layer, head][:, cross] = 0.0
            if reads:
                out[layer, head][cross, :] = 0.0
    return out


SENT_SHARE = 0.05  # a head writing this share of its ‖W_VP‖² across machines sends A columns


def _sent(ratio: float) -> bool:
    """The function depends on what was zeroed: the MSE moved by USED_BLOCK× either way (a
    non-finite ablated MSE counts as dependence)."""
    return not np.isfinite(ratio) or ratio >= USED_BLOCK or ratio <= 1.0 / USED_BLOCK


def _ratio(mse: float, base: float) -> float:
    if base > 0:
        return mse / base
    return 1.0 if mse == base else float("inf")


def _sentence(
    layers: list[dict], sent: bool, ratio: float, any_ratio: float, floats: dict, M: int
) -> str:
    network, paper = floats["network"], floats["eagle-distributed"]
    if sent:
        used = [lay for lay in layers if lay["a_columns_sent"]] or layers
        where = ", ".join(str(lay["layer"]) for lay in used)
        top = max(h["cross_a_share"] for lay in used for h in lay["heads"])
        top_any = max(h["cross_a_any_share"] for lay in used for h in lay["heads"])
        return (
            f"A columns cross machines: in layer(s) {where} a head writes up to "
            f"{100 * top:.2g}% of its ‖W_VP‖² into the other {M - 1} machines' A/B columns "
            f"({100 * top_any:.2g}% reading or writing them), and zeroing those writes in every "
            f"layer changes the held-out MSE ×{ratio:.3g} (reads and writes: ×{any_ratio:.3g}); "
            f"the network sends about {network} floats per machine per round where "
            f"eagle-distributed sends {paper} (the C/D results only)."
        )
    top = max((h["cross_a_share"] for lay in layers for h in lay["heads"]), default=0.0)
    return (
        f"Only the C/D results cross machines: at most {100 * top:.2g}% of any head's ‖W_VP‖² "
        f"writes other machines' A/B columns and zeroing it changes the held-out MSE by "
        f"{ratio:.3g}×, as in eagle-distributed ({network} floats per machine per round; the "
        f"family sends {paper})."
    )


@register("communication")
def communication_view(ctx: Context) -> ViewResult:
    """Per layer and head where W_VP writes; per layer and all at once what the cross-machine
    A writes are worth in held-out MSE (module text)."""
    geo = ctx.geometry
    n, M, L = geo.n, geo.machines, geo.layers
    floats_col = geo.d + geo.d_prime  # one stream column: d + d' tokens
    # passes: the stream, each layer's ablation from that layer on, every layer ablated at once
    held, _ = ctx.scoring(L + L * (L + 1) + 2 * L, limit=PROMPTS)
    stream = geo.stream(held.z0, ctx.qk, ctx.vp)  # (L + 1, b, T, E)  internal units
    base = held.mse(geo.readout_of(stream[-1], held.z0))
    rows, layers = [], []
    written = 0
    for layer in range(L):
        heads = []
        for head in range(ctx.vp.shape[1]):
            s = shares(ctx.vp[layer, head], n, M, head)
            cols = written_outside(ctx.vp[layer, head], n, M, head)
            written = max(written, cols)
            heads.append({"head": head, **s, "floats_sent": floats_col * cols})
            rows.append({"layer": layer, **heads[-1]})
        # the layers before `layer` are unchanged: run on from their stream
        ratios = []
        for reads in (False, True):
            vp = without_cross_a(ctx.vp, n, M, [layer], reads)
            Z = stream[layer]
            with np.errstate(over="ignore", invalid="ignore"):
                for later in range(layer, L):
                    Z = geo.layer(Z, ctx.qk[later], vp[later])
            ratios.append(_ratio(held.mse(geo.readout_of(Z, held.z0)), base))
        ratio, any_ratio = ratios
        layers.append(
            {
                "layer": layer,
                "heads": heads,
                "cross_a_ablation": ratio,
                "cross_a_any_ablation": any_ratio,
                "a_columns_relied": _sent(ratio) or _sent(any_ratio),
                "a_columns_sent": _sent(ratio)
                or _sent(any_ratio)
                or max(h["cross_a_any_share"] for h in heads) >= SENT_SHARE,
            }
        )
    vp = without_cross_a(ctx.vp, n, M, range(L))
    ratio = _ratio(held.mse(geo.predict(held.z0, ctx.qk, vp)), base)
    vp_any = without_cross_a(ctx.vp, n, M, range(L), reads=True)
    any_ratio = _ratio(held.mse(geo.predict(held.z0, ctx.qk, vp_any)), base)
    relied = _sent(ratio) or _sent(any_ratio) or any(lay["a_columns_relied"] for lay in layers)
    sent = relied or any(lay["a_columns_sent"] for lay in layers)
    floats = {"network": floats_col * written, "eagle-distributed": floats_col * geo.n_prime}
    warnings = []
    if sent:
        warnings.append(
            "W_VP writes other machines' A/B columns"
            + (" and the function depends on it" if relied else "")
            + f" (zeroing those writes: MSE ×{ratio:.3g}): A columns cross machines, which "
            "eagle-distributed never does"
        )
    return ViewResult(
        "communication",
        {
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
            "sentence": _sentence(layers, sent, ratio, any_ratio, floats, M),
        },
        {"communication": pd.DataFrame(rows)},
        warnings,
    )
