"""Project every layer's weights onto the regime's algorithm family and measure what it costs.

The family of a head's products (Frobenius-orthogonal projection onto a linear span):

- centralized: each square diagonal block a scalar times the identity, the cross blocks zero:
  W_QK = diag(q I_n, q' I_n'), W_VP = diag(v I_n, w I_n');
- distributed (head μ reads only its column block), one basis per family (`fit.families`):
  eagle-distributed, the paper's: W_QK = q I on block μ, W_VP = v I on block μ + w I_n' (nothing
  of A crosses machines); eagle-over-machines: W_VP = v I_n + w I_n' (head μ writes every
  machine's A columns: Σ_μ A^μ A^μᵀ A = A Aᵀ A, the centralized update);
- constrained (query/key width r): W_QK = q P_h + q' I_n' and W_VP = v P_h + w I_n', with P_h the
  projector onto the range of the head's own W_QK A-block (its learned sketch S Sᵀ).

The steps the projection implies are EAGLE's: a_l = −Σ_h q_h v_h and c_l = −Σ_h q_h w_h
(internal units; W_QK = diag(I, 0), W_VP = diag(−a I, −c I) is one EAGLE step); distributed:
the mean over the machines' heads. q' ≠ 0 is reported:
EAGLE has no query-side C term. The cost is measured in function, on held-out prompts: the test
MSE with only layer l projected, and with every layer projected, for the family the views read
and for every other family the regime admits (`families`).

Sample layout (E = d + d', blocks X = the d features, Y = the d' labels of a row [x, y]): the
same isotropic family, W_QK = diag(q I_d, q_c I_d'), W_VP = diag(v I_d, w I_d'), is GD++ (GD
where v = 0), with a = −Σ_h q_h v_h / n, c = −Σ_h q_h w_h / n (the scores carry 1/n; view `eagle`
for what a and c do). Preconditioned GD (Ahn et al. 2023) frees W_QK's X×X block:
`preconditioned_mse` is the held-out MSE with every layer projected onto that larger family.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit import families
from eagle_probe.fit.base import Context, Extraction, Figures, ViewResult, prompt_tails, register
from eagle_probe.fit.families import Family, embed
from eagle_probe.fit.geometry import Geometry
from eagle_probe.wording import change, number, value


def family(geo: Geometry, head: int, qk_head: np.ndarray, fam: Family | None = None):
    """Basis matrices (E × E) of the head's W_QK and W_VP in `fam` (default: the family the
    geometry reads)."""
    return (fam or families.of_geometry(geo)).basis(geo, head, qk_head)


def preconditioned_family(geo: Geometry) -> list[np.ndarray]:
    """Sample layout: basis of W_QK = diag(Γ, q_c I_d') with Γ a free d × d block."""
    d = geo.split[0]
    out = []
    for i in range(d):
        for j in range(d):
            unit = np.zeros((d, d))
            unit[i, j] = 1.0
            out.append(embed(geo, unit))
    return out + [embed(geo, None, 1.0)]


def project(M: np.ndarray, basis: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Frobenius-orthogonal projection of M onto span(basis): (coefficients, projected M)."""
    V = np.stack([b.reshape(-1) for b in basis], axis=1)  # (E², k)
    coef = np.linalg.lstsq(V, M.reshape(-1), rcond=None)[0]
    return coef, (V @ coef).reshape(M.shape)


def project_products(
    geo: Geometry, qk: np.ndarray, vp: np.ndarray, fam: Family | None = None
) -> dict:
    """Project every (layer, head) onto `fam` (default: the geometry's family); return the
    projected products, the levels and the steps they imply."""
    fam = fam or families.of_geometry(geo)
    qk_names, vp_names = fam.level_names(geo)
    pqk, pvp = np.zeros_like(qk), np.zeros_like(vp)
    rows = []
    for layer in range(qk.shape[0]):
        for head in range(qk.shape[1]):
            qk_basis, vp_basis = fam.basis(geo, head, qk[layer, head])
            cq, pqk[layer, head] = project(qk[layer, head], qk_basis)
            cv, pvp[layer, head] = project(vp[layer, head], vp_basis)
            row = {"layer": layer, "head": head}
            row.update(dict(zip(qk_names, cq, strict=True)))
            row.update(dict(zip(vp_names, cv, strict=True)))
            for name, W, P in (("qk", qk, pqk), ("vp", vp, pvp)):
                norm = float(np.linalg.norm(W[layer, head]))
                off = float(np.linalg.norm(W[layer, head] - P[layer, head]))
                row[f"{name}_outside"] = off / norm if norm else 0.0
            rows.append(row)
    heads = pd.DataFrame(rows)
    heads["a_part"] = -heads.q * heads.v * geo.key_scale
    heads["c_part"] = -heads.q * heads.w * geo.key_scale * geo.step_sign
    a_steps, c_steps = fam.steps(geo, heads)
    return {"qk": pqk, "vp": pvp, "heads": heads, "a_steps": a_steps, "c_steps": c_steps}


# the medians and trimmed means `projection_cost` sets beside the two means
TAIL_KEYS = (
    "network_median_mse",
    "projected_median_mse",
    "network_trimmed_mse",
    "projected_trimmed_mse",
)


def projection_cost(ctx: Context, pqk: np.ndarray, pvp: np.ndarray) -> dict:
    """Held-out MSE of the network's products, of all layers projected, and of each layer alone,
    on the held-out prompts the view can afford (`Context.scoring`: all of them at paper sizes)."""
    geo = ctx.geometry
    L = ctx.qk.shape[0]
    held, _ = ctx.scoring(2 * L + L * (L + 1) / 2)
    stream = geo.stream(held.z0, ctx.qk, ctx.vp)  # (L + 1, b, T, E)
    net = held.mse(geo.readout_of(stream[-1], held.z0))
    each = []
    for layer in range(ctx.qk.shape[0]):
        Z = stream[layer]  # the layers before `layer` are the network's own
        with np.errstate(over="ignore", invalid="ignore"):
            Z = geo.layer(Z, pqk[layer], pvp[layer])
            for later in range(layer + 1, ctx.qk.shape[0]):
                Z = geo.layer(Z, ctx.qk[later], ctx.vp[later])
        each.append(held.mse(geo.readout_of(Z, held.z0)))
    net_pred = geo.readout_of(stream[-1], held.z0)
    proj_pred = geo.predict(held.z0, pqk, pvp)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = float(np.linalg.norm(net_pred))
        gap = float(np.linalg.norm(proj_pred - net_pred)) / scale if scale > 0 else float("nan")
    net_tails, proj_tails = prompt_tails(net_pred, held.D), prompt_tails(proj_pred, held.D)
    return {
        "network_mse": net,
        "projected_mse": held.mse(proj_pred),
        # beside each mean, the median and the 0.1%-trimmed mean (`evaluate.tails`)
        "network_median_mse": net_tails["median_mse"],
        "projected_median_mse": proj_tails["median_mse"],
        "network_trimmed_mse": net_tails["trimmed_mse"],
        "projected_trimmed_mse": proj_tails["trimmed_mse"],
        "prediction_gap": gap,  # ‖D̂_projected − D̂_network‖_F / ‖D̂_network‖_F
        "layer_mse": each,
        "prompts": held.prompts,
    }


# --- what the view shows: its lines of the text report, its figure and the figure's caption ------
def report_lines(ex: Extraction) -> list[str]:
    p = ex.views["projection"].json
    net, pm = p["network_mse"], p["projected_mse"]
    family = "GD++ family" if ex.geometry.samples else f"{p['family']} family"
    k = p.get("prompts", ex.info.get("held_out_prompts"))
    where = "" if k == ex.info.get("held_out_prompts") else f" on the first {k} held-out prompts"
    lines = [
        f"projection onto the {family}{where}: MSE {number(net)} -> {number(pm)} "
        f"({change(pm, net)}"
        + (
            f"; median {number(p['network_median_mse'])} -> {number(p['projected_median_mse'])}"
            if "projected_median_mse" in p
            else ""
        )
        + "); "
        "per layer alone: "
        + ", ".join(f"L{lay['layer']} {change(lay['mse'], net)}" for lay in p["layers"])
    ]
    if "preconditioned_mse" in p and net > 0:
        pc = p["preconditioned_mse"]
        lines.append(
            f"projection onto preconditioned GD (W_QK's XX block free): MSE {number(pc)} "
            f"({change(pc, net)})"
        )
    return lines


def figures(ex: Extraction) -> Figures:
    """Held-out MSE of the network, of its projection onto the EAGLE family (all layers, and each
    layer alone) and, when the optimum ran, of EAGLE with fitted steps; the zero predictor as a
    reference line."""
    p = ex.views["projection"].json
    bars = [("network", p["network_mse"], "0.35")]
    bars.append(("all layers projected", p["projected_mse"], "C0"))
    for lay in p["layers"]:
        bars.append((f"layer {lay['layer']} projected alone", lay["mse"], "C9"))
    fam = draw.family_word(ex)
    if "optimum" in ex.views:
        o = ex.views["optimum"].json
        if "start_mse" in o:
            bars.append((f"{fam}, steps read from weights", o["start_mse"], "C2"))
        bars.append((f"{fam} closest to network (distilled)", o["distilled_mse"], "C2"))
        bars.append((f"best {fam}, same depth (optimal)", o["optimal_mse"], "C2"))
    labels = [b[0] for b in bars]
    vals = np.array([b[1] for b in bars], dtype=float)
    zero = float(ex.network.get("zero_mse", np.nan))
    floor = draw.floor(vals, [zero])
    shown = draw.positive(vals, floor)
    fig = draw.figure(7.5, 0.36 * len(bars) + 1.6)
    ax = fig.subplots()
    y = np.arange(len(bars))[::-1]
    ax.barh(y, shown, color=[b[2] for b in bars], height=0.7)
    for yi, v, s in zip(y, vals, shown, strict=True):
        draw.note(
            ax,
            draw.readable(v),
            (s if np.isfinite(s) else floor, yi),
            (3, 0),
            va="center",
            bbox=draw.TEXT_BOX,
        )
    if np.isfinite(zero) and zero > 0:
        ax.axvline(zero, color="C3", ls="--", lw=1.2, label=f"zero predictor ({zero:.3g})")
    ax.axvline(p["network_mse"], color="0.35", ls=":", lw=1.0, label="network")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xscale("log")
    lo, hi = np.nanmin(np.append(shown, zero)), np.nanmax(np.append(shown, zero))
    ax.set_xlim(lo / 2, hi * 8)
    ax.set_xlabel("held-out MSE on D (prompt units, log scale)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"What the {fam} family costs in function", fontsize=10)
    return {"projection_cost": fig}


def caption(ex: Extraction) -> str:
    p = ex.views["projection"].json
    net = p["network_mse"]
    here = f"; here projecting every layer changes the MSE by {change(p['projected_mse'], net)}"
    here = here if net > 0 else ""
    if ex.geometry.samples:
        return (
            "Bars at the network's dotted line cost nothing; the green bars show the best GD++ "
            f"steps{here}."
        )
    return (
        "Bars at the network's dotted line cost nothing, bars near the red zero-predictor line "
        "lose the whole function, and the green bars show what EAGLE itself reaches with fitted "
        f"steps{here}."
    )


@register("projection", text=report_lines, figures=figures, captions={"projection_cost": caption})
def projection_view(ctx: Context) -> ViewResult:
    """The regime's EAGLE family in weight space: levels, implied steps, cost in function."""
    geo = ctx.geometry
    proj = project_products(geo, ctx.qk, ctx.vp)
    cost = projection_cost(ctx, proj["qk"], proj["vp"])
    extra_json = {}
    if geo.samples:
        basis = preconditioned_family(geo)
        pqk = np.zeros_like(ctx.qk)
        for idx in np.ndindex(ctx.qk.shape[:2]):
            pqk[idx] = project(ctx.qk[idx], basis)[1]
        extra_json["preconditioned_mse"] = ctx.held_out.mse(
            geo.predict(ctx.held_out.z0, pqk, proj["vp"])
        )
    heads = proj["heads"]
    layers = []
    for layer in range(ctx.qk.shape[0]):
        part = heads[heads.layer == layer]
        layers.append(
            {
                "layer": layer,
                "a_step": float(proj["a_steps"][layer]),
                "c_step": float(proj["c_steps"][layer]),
                "mse": cost["layer_mse"][layer],
                "qk_outside": float(part.qk_outside.max()),
                "vp_outside": float(part.vp_outside.max()),
                "heads": part.drop(columns=["layer", "a_part", "c_part"]).to_dict("records"),
            }
        )
    warnings = []
    net, projected = cost["network_mse"], cost["projected_mse"]
    fam = families.of_geometry(geo)
    name = "GD++" if geo.samples else fam.name
    if not np.isfinite(projected) or projected > 10 * max(net, ctx.zero_mse):
        warnings.append(
            f"projecting every layer onto the {name} family blows up "
            f"(MSE {value(projected)} against the network's {value(net)}): the network is not "
            "that family"
        )
    # every family the regime admits, scored the same way (the views read `fam`)
    scored = []
    for other in () if geo.samples else families.for_geometry(geo):
        if other.name == fam.name:
            p, c = proj, cost
        else:
            p = project_products(other.geometry(geo), ctx.qk, ctx.vp, other)
            c = projection_cost(replace(ctx, geometry=other.geometry(geo)), p["qk"], p["vp"])
        scored.append(
            {
                "name": other.name,
                "projected_mse": c["projected_mse"],
                "prediction_gap": c["prediction_gap"],
                "layer_mse": c["layer_mse"],
                "a_steps": [float(x) for x in p["a_steps"]],
                "c_steps": [float(x) for x in p["c_steps"]],
                "read": other.name == fam.name,
            }
        )
    extra_json["families"] = scored
    table = pd.DataFrame(
        [{k: v for k, v in lay.items() if k != "heads"} for lay in layers]
    ).set_index("layer")
    return ViewResult(
        "projection",
        {
            "family": "GD++ (samples)" if geo.samples else fam.name,
            "units": "internal (steps); prompt units (MSE)",
            "network_mse": net,
            "projected_mse": projected,
            **{k: cost[k] for k in TAIL_KEYS},
            "prediction_gap": cost["prediction_gap"],
            "prompts": cost["prompts"],
            **extra_json,
            "layers": layers,
        },
        {"projection": table, "heads": heads},
        warnings,
        extra={"qk": proj["qk"], "vp": proj["vp"]},
    )
