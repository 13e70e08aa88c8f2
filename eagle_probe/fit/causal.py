"""Interchange test: does the algorithm's own state carry what the network's later layers read?

The other views compare the network with its family by fit (steps read from the activations,
projections of the weights). This one intervenes, as causal-abstraction work does: at each interior
layer l (1 … L − 1) the stream entering layer l is replaced — one block (A, B, C, the D slot) or
all of it — by the fitted family's state after l steps on the same prompts (view `eagle`'s steps,
`Geometry.run_eagle`), and the network's remaining layers run on it (TransformerLens
`run_with_hooks` on `blocks.{l}.hook_resid_pre`: `capture.patched_predict`). The swap is scored
against the same swap with the block's value before any step (the block of the prompt itself, as
if the first l layers had left it alone):

    carried = 1 − MSE(ŷ_swapped, ŷ_network) / min(MSE(ŷ_skipped, ŷ_network), mean ŷ_network²)

(the skip's error capped at that of predicting zero: where the later layers blow up on a skipped
state, as a constrained model's large late steps do on the raw prompt, any swap would otherwise
score nearly 1). 1: the later layers give the network's own answer from the algorithm's state
(an exact plant scores 1 to rounding); 0: the algorithm's state serves them no better than the
untouched prompt or predicting zero; below 0, worse. A block the first l layers leave unchanged
(a skipped block that moves the output by less than DEFINED of its energy) has no score. The
converse swap puts the network's state into the algorithm's remaining steps and scores the
algorithm's output the same way (network → algorithm). Both also give the swapped output's MSE
to the truth, beside the network's own. Means over the first `PROMPTS` held-out prompts (prompt
units).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit.base import (
    VIEW_FLOPS,
    Context,
    Extraction,
    Figures,
    ViewResult,
    layer_flops,
    register,
)
from eagle_probe.wording import number, value

BLOCKS = ("A", "B", "C", "D", "all")
PROMPTS = 256
# a skip that moves the output by less than this share of its energy: no score for that block
DEFINED = 1e-12
DIRECTIONS = ("algorithm_into_network", "network_into_algorithm")
# what is read of the untrained control (`Context.is_control`): the whole state swapped into the
# network, whose least share the text sets beside the model's
CONTROL_READS = (("all",), ("algorithm_into_network",))


def where(geo, shape: tuple[int, int], block: str) -> np.ndarray:
    """The entries (T, E) of a block-orientation stream that belong to `block` ("all": every
    one)."""
    mask = np.zeros(shape, dtype=bool)
    if block == "all":
        mask[...] = True
        return mask
    dict(zip("ABCD", geo.blocks(mask), strict=True))[block][...] = True
    return mask


def carried(swapped: np.ndarray, skipped: np.ndarray, reference: np.ndarray) -> float:
    """1 − MSE(swapped, reference) / MSE(skipped, reference), the skip's MSE capped at the
    reference's energy (that of predicting zero: a skip whose later layers blow up would credit
    any swap with nearly 1); NaN where the skip moves the reference by less than DEFINED of its
    energy (nothing to carry)."""
    with np.errstate(over="ignore", invalid="ignore"):
        den = float(np.mean((skipped - reference) ** 2))
        num = float(np.mean((swapped - reference) ** 2))
        energy = float(np.mean(reference**2))
    if np.isnan(den) or not np.isfinite(num) or den <= DEFINED * energy:
        return float("nan")
    return 1.0 - num / min(den, energy)


def algorithm_from(geo, Z: np.ndarray, layer: int, steps, z0: np.ndarray) -> np.ndarray:
    """The family's predictions from states Z (V · b, T, E) entering step `layer` (its remaining
    steps), V variants of the b prompts z0 one after another: (V · b, d', n')."""
    a_steps, c_steps = steps
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(layer, len(a_steps)):
            Z = geo.eagle_step(Z, k, a_steps[k], c_steps[k])
    return _read_out(geo, Z, z0)


def _read_out(geo, Z: np.ndarray, z0: np.ndarray) -> np.ndarray:
    """Predictions (V · b, d', n') of final streams Z (V · b, T, E), V variants of the b prompts
    z0: each variant read out with the prompts' own scales."""
    b = z0.shape[0]
    return np.concatenate([geo.readout_of(Z[i : i + b], z0) for i in range(0, len(Z), b)])


def network_from(ctx: Context, z0, base, layer: int, state, mask, hooks=True) -> np.ndarray:
    """The network's predictions with its stream entering `layer` (`base`, (V · b, T, E): V
    variants of the b prompts z0) replaced by `state` where `mask` (V · b, T, E) holds: the model
    itself through its hooks (`Context.patched`) where there is one and `hooks`, else the
    products' NumPy forward from that layer on. (V · b, d', n')."""
    reps = len(state) // z0.shape[0]
    if hooks and ctx.patched is not None:
        return ctx.patched(np.concatenate([z0] * reps), layer, state, mask)
    geo = ctx.geometry
    Z = np.where(mask, state, base)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(layer, ctx.qk.shape[0]):
            Z = geo.layer(Z, ctx.qk[k], ctx.vp[k])
    return _read_out(geo, Z, z0)


def plan(
    ctx: Context,
    prompts: int,
    blocks: tuple[str, ...] = BLOCKS,
    directions: tuple[str, ...] = DIRECTIONS,
) -> tuple[int, bool, tuple[str, ...], list[int]]:
    """What the view can afford within the views' budget (`fit.base.VIEW_FLOPS`): (prompts,
    through the model's hooks, blocks, interior layers). In order of giving up: the hooks (a full
    forward per swap) for the NumPy forward from the swapped layer on, then the single blocks for
    the whole state, then interior layers (evenly spread, at least one); never fewer prompts than
    the floor. Paper-sized models get everything."""
    L = ctx.qk.shape[0]
    interior = list(range(1, L))
    per_swap = 2 * len(directions)  # a swap and its skip, in each direction
    hooked = per_swap * len(blocks) * len(interior) * L  # layer passes per prompt
    held, _ = ctx.scoring(hooked, limit=prompts)
    k = held.prompts
    budget = VIEW_FLOPS / (k * layer_flops(ctx.geometry))  # layer passes the budget allows
    if hooked <= budget:
        return k, ctx.patched is not None, blocks, interior
    after = {layer: L - layer for layer in interior}  # layers run after a NumPy swap

    def cost(blocks, layers):
        return per_swap * len(blocks) * sum(after[layer] for layer in layers)

    blocks = blocks if cost(blocks, interior) <= budget else ("all",)
    for keep in range(len(interior), 0, -1):  # the most evenly spread layers that fit
        spread = np.linspace(0, len(interior) - 1, keep).round().astype(int)
        layers = sorted({interior[i] for i in spread})
        if cost(blocks, layers) <= budget:
            break
    return k, False, blocks, layers


def interchange(
    ctx: Context,
    a_steps,
    c_steps,
    prompts: int = PROMPTS,
    blocks: tuple[str, ...] = BLOCKS,
    directions: tuple[str, ...] = DIRECTIONS,
) -> pd.DataFrame:
    """One row per interior layer, block (of `blocks`) and direction (of `directions`) the budget
    affords (`plan`): carried, the swapped output's MSE to the truth, and the network's and the
    algorithm's own MSE on the same prompts."""
    geo = ctx.geometry
    k, hooks, blocks, layers = plan(ctx, prompts, blocks, directions)
    held, pred = ctx.held_out.first(k), ctx.network_pred[:k]
    z0 = held.z0
    stream = geo.stream(z0, ctx.qk, ctx.vp)  # the network's states (internal units)
    if not np.isfinite(pred).all():  # the untrained control is not scored: its forward here
        pred = geo.readout_of(stream[-1], z0)
    steps = (np.asarray(a_steps, dtype=float), np.asarray(c_steps, dtype=float))
    with np.errstate(over="ignore", invalid="ignore"):
        algo = geo.run_eagle(stream[0], *steps)  # the family's states
    algo_pred = geo.readout_of(algo[-1], z0)
    own = {"network_mse": held.mse(pred), "algorithm_mse": held.mse(algo_pred)}
    rows = []
    masks = [where(geo, stream.shape[-2:], block) for block in blocks]
    for layer in layers:
        for direction in directions:
            if direction == "algorithm_into_network":
                into, source, reference = stream, algo, pred
            else:
                into, source, reference = algo, stream, algo_pred
            # every block's swap and skip in one run: 2 V variants of the k prompts
            states = [np.where(m, x, into[layer]) for m in masks for x in (source[layer], into[0])]
            variants = np.concatenate(states)
            mask = np.concatenate(
                [np.broadcast_to(m, into[layer].shape) for m in masks for _ in range(2)]
            )
            if direction == "algorithm_into_network":
                base = np.concatenate([into[layer]] * len(states))
                out = network_from(ctx, z0, base, layer, variants, mask, hooks)
            else:
                out = algorithm_from(geo, variants, layer, steps, z0)
            out = out.reshape(len(states), k, *out.shape[1:])
            for i, block in enumerate(blocks):
                swapped, skipped = out[2 * i], out[2 * i + 1]
                rows.append(
                    {
                        "layer": layer,
                        "block": block,
                        "direction": direction,
                        "carried": carried(swapped, skipped, reference),
                        "swapped_mse": held.mse(swapped),
                        "skipped_mse": held.mse(skipped),
                        **own,
                        "prompts": held.prompts,
                        "hooks": hooks,
                    }
                )
    return pd.DataFrame(rows)


def _summary(table: pd.DataFrame) -> dict:
    """The least carried by the whole state in each direction, and where."""
    out = {}
    for direction in DIRECTIONS:
        part = table[(table.direction == direction) & (table.block == "all")]
        part = part[np.isfinite(part.carried)]
        if part.empty:
            out[direction] = None
            continue
        worst = part.loc[part.carried.idxmin()]
        out[direction] = {"min": float(worst.carried), "layer": int(worst.layer)}
    return out


def share(x: float, digits: int = 4) -> str:
    """A carried share for a sentence or a figure cell: `digits` decimals (0.9996 is not 1), never
    a signed zero, "none" where it has no score, `number` far below 0."""
    if not np.isfinite(x):
        return "none"
    return value(x, f".{digits}f") if x > -10 else number(x)


def text(ex: Extraction) -> list[str]:
    j = ex.views["causal"].json
    if not j["layers"]:
        return [f"interchange: {j['note']}"]
    parts = []
    for lay in j["layers"]:
        into = lay["algorithm_into_network"]
        back = lay["network_into_algorithm"]
        each = "".join(f"{b} {share(into[b])}, " for b in BLOCKS[:-1] if b in into)
        each = f"{each[:-2]}; " if each else ""
        parts.append(f"L{lay['layer']} all {share(into['all'])} ({each}back {share(back['all'])})")
    least = j["summary"]["algorithm_into_network"]
    scored = len(j["layers"])
    fewer = (
        f", {scored} of {j['interior_layers']} interior layers within the views' budget"
        if scored < j.get("interior_layers", scored)
        else ""
    )
    head = (
        f"interchange (the {j['family']} state after l steps swapped into the network entering "
        f"layer l, {j['prompts']} held-out prompts{fewer}): share of the network's output it "
        "carries"
    )
    lines = [f"{head}: " + "; ".join(parts)]
    if least is not None:
        ctrl = (getattr(ex, "control", None) or {}).get("causal")
        lines.append(
            f"  least: {share(least['min'])} at layer {least['layer']}"
            + _control_words(ctrl)
            + "; 1 = the later layers answer from the algorithm's state as from their own"
        )
    return lines


def _control_words(control) -> str:
    """ " (untrained control 0.12)": the control's least share, where it ran the view."""
    if control is None:
        return ""
    least = (control.json.get("summary") or {}).get("algorithm_into_network")
    if least is None:
        return ""
    return f" (untrained control {share(least['min'])})"


def figures(ex: Extraction) -> Figures:
    """Carried per interior layer and block, both directions."""
    t = ex.views["causal"].tables.get("causal")
    if t is None or t.empty:
        return {}
    layers = sorted(t.layer.unique())
    fig = draw.figure(max(7.0, 1.1 * len(BLOCKS) * 2 + 1.5), 0.55 * len(layers) + 2.2)
    axes = fig.subplots(1, 2, sharey=True)
    titles = {
        "algorithm_into_network": "algorithm's state → network's later layers",
        "network_into_algorithm": "network's state → algorithm's later steps",
    }
    for ax, direction in zip(axes, DIRECTIONS, strict=True):
        part = t[t.direction == direction]
        grid = np.full((len(layers), len(BLOCKS)), np.nan)
        for r in part.itertuples():
            grid[layers.index(r.layer), BLOCKS.index(r.block)] = r.carried
        texts = [
            ((i, k), "—" if not np.isfinite(grid[i, k]) else share(grid[i, k], 3))
            for i in range(len(layers))
            for k in range(len(BLOCKS))
        ]
        im = draw.fraction_map(ax, np.clip(np.nan_to_num(grid, nan=0.0), 0, 1), "Blues", texts)
        ax.set_xticks(range(len(BLOCKS)), [b if b != "all" else "all blocks" for b in BLOCKS])
        ax.set_xlabel("block swapped")
        ax.set_title(titles[direction], fontsize=9)
    draw.layer_axis(axes[0], layers, axis="y")
    fig.colorbar(im, ax=axes, shrink=0.8, label="share of the output carried (below 0: white)")
    fig.suptitle(
        f"Interchange: the fitted {draw.family_word(ex)} and the network, state for state",
        fontsize=10,
    )
    return {"causal": fig}


def caption(ex: Extraction) -> str:
    j = ex.views["causal"].json
    least = j["summary"]["algorithm_into_network"]
    here = "" if least is None else f" Here the least is {share(least['min'])} (layer "
    here += "" if least is None else f"{least['layer']})."
    return (
        "Each cell swaps one block of the stream entering a layer (or all of it) for the other "
        "side's state on the same prompts and runs the rest: 1 means the rest answers as it does "
        "from its own state, 0 no better than from the untouched prompt; a dash marks a block "
        f"the earlier layers leave unchanged or one not scored within the views' budget.{here}"
    )


@register("causal", text=text, figures=figures, captions={"causal": caption})
def causal_view(ctx: Context) -> ViewResult:
    """Interchange intervention between the network and its fitted family (module text)."""
    steps = ctx.results["eagle"].tables["eagle"]
    family = ctx.results["eagle"].json.get("family_name", "GD++")
    if ctx.qk.shape[0] < 2:
        note = "a one-layer model has no interior state to swap"
        return ViewResult("causal", {"layers": [], "note": note, "family": family})
    reads = CONTROL_READS if ctx.is_control else (BLOCKS, DIRECTIONS)
    table = interchange(ctx, steps.a_step.to_numpy(), steps.c_step.to_numpy(), PROMPTS, *reads)
    layers = []
    blocks = tuple(dict.fromkeys(table.block))
    for layer, part in table.groupby("layer"):
        entry = {"layer": int(layer)}
        for direction in reads[1]:
            sub = part[part.direction == direction].set_index("block")
            entry[direction] = {b: float(sub.loc[b, "carried"]) for b in blocks}
            entry[f"{direction}_mse"] = {b: float(sub.loc[b, "swapped_mse"]) for b in blocks}
        layers.append(entry)
    first = table.iloc[0]
    return ViewResult(
        "causal",
        {
            "family": family,
            "prompts": int(first.prompts),
            "forward": "model hooks" if bool(first.hooks) else "NumPy products",
            "blocks": list(blocks),
            "interior_layers": ctx.qk.shape[0] - 1,
            "network_mse": float(first.network_mse),
            "algorithm_mse": float(first.algorithm_mse),
            "layers": layers,
            "summary": _summary(table),
        },
        {"causal": table},
    )
