"""Algorithm 1 of the paper as it is written: ρ = ‖Ã_l‖₂⁻² recomputed at every step from the
current iterate, η and γ global constants; fitted to the activations, scored per layer in the
paper's Table-1 metric and run end to end on held-out prompts.

The paper, Algorithm 1 (UPDATE runs unchanged on every machine):

    "UPDATE(A, B, C, D): Ã ← AS, B̃ ← BS, ρ ← ‖Ã‖₂⁻²,
     A′ ← A − ηρ Ã ÃᵀÃ Sᵀ,  B′ ← B − ηρ B̃ ÃᵀÃ Sᵀ,  C′ ← C − γρ Ã Ãᵀ C,  D′ ← D + γρ B̃ Ãᵀ C"

    "for μ = 1..M in parallel: (A^μ_{ℓ+1}, B^μ_{ℓ+1}, C′_μ, D′_μ) ← UPDATE(A^μ_ℓ, B^μ_ℓ, C_ℓ, D_ℓ);
     C_{ℓ+1} ← (1/M) Σ_μ C′_μ, D_{ℓ+1} ← (1/M) Σ_μ D′_μ"

    "M = 1 in the unconstrained and computation-limited settings. In the former, S = I_n, while
     in the latter, S … is composed of random orthogonal rows. The values η, γ are global
     constants"

Each regime runs its own form (`FORMS`, the regime's reading, whichever family the other views
read), in block orientation (A is d × n):

    centralized   S = I: ρ = ‖A‖₂⁻² per prompt
    distributed   per machine ρ_μ = ‖A^μ‖₂⁻², A^μ −= ηρ_μ A^μ A^μᵀ A^μ (and B^μ), and C, D averaged:
                  C −= (γ/M) Σ_μ ρ_μ A^μ A^μᵀ C^μ, D += (γ/M) Σ_μ ρ_μ B^μ A^μᵀ C^μ. In the sum
                  convention of `fit.families` the C-step is c = γ ρ_μ / M. Where the stream holds a
                  C/D copy per machine, machine μ reads its own copy C^μ and every copy receives
                  the mean of the machines' updates: copies that are equal, as Algorithm 1 keeps
                  them, give the paper's average exactly
    constrained   on the layer's learned sketch, Ã = A S_l with P_l = S_l S_lᵀ
                  (`Geometry.projector`): ρ = ‖A P_l‖₂⁻² = ‖A S_l‖₂⁻²,
                  A −= ηρ (A P Aᵀ) A P, B −= ηρ (B P Aᵀ) A P, C −= γρ (A P Aᵀ) C,
                  D += γρ (B P Aᵀ) C

The network's D slot carries −D_EAGLE (`eagle_probe.model`), so the slot moves by −γρ B̃ ÃᵀC.

Units. Algorithm 1 is homogeneous: scaling A^μ and B^μ by t multiplies ρ_μ by t⁻² and every update
of A^μ, B^μ by t, and leaves those of C and D unchanged. So it runs on the network's internal
stream (the prompt divided by its scale, per machine where each machine scales its own columns)
exactly as on the prompt; the gaps are turned into prompt units as in `fit.fidelity`.

Two readings of the constants, each fitted on one step of the activations: with ρ from the
network's own Z_l per prompt, Z_{l+1} − Z_l ≈ −η F_{A,B} − γ F_{C,D} is linear in (η, γ), so least
squares is closed form (internal units; η from the A, B blocks, γ from C, D):

    global      one (η, γ) for every layer, pooled over the layers: the paper's reading
    per_layer   (η_l, γ_l) per layer

Each is scored by the Table-1 metric per layer, one step (the network's Z_l through one step)
and end to end (Algorithm 1 run from the prompt with its own ρ at every step), with the relative
gaps of `fit.fidelity`, and by the held-out MSE of Algorithm 1 run for L steps beside the
network's on the same prompts (network / algorithm).

The sample layout's step family is GD++ (`fit.geometry`); Algorithm 1 is written for the feature
layout, and the view says so instead of scoring it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from eagle_probe import regimes
from eagle_probe.captured import Capture
from eagle_probe.fit.base import (
    Context,
    Extraction,
    ViewResult,
    prompt_tails,
    register,
    table1_blocks,
)
from eagle_probe.fit.fidelity import BLOCKS, paper_table1
from eagle_probe.fit.geometry import Geometry
from eagle_probe.wording import number, plural, ratio, step_list

FORMS = {
    "centralized": "S = I: ρ = ‖A_l‖₂⁻² per prompt",
    "distributed": "per machine: ρ_μ = ‖A^μ_l‖₂⁻² per prompt, C and D averaged over the machines",
    "constrained": "on the layer's learned sketch Ã = A S_l: ρ = ‖A_l S_l‖₂⁻² per prompt",
}
UPDATE = (
    "Ã = A S, B̃ = B S, ρ = ‖Ã‖₂⁻²; A −= ηρ Ã ÃᵀÃ Sᵀ, B −= ηρ B̃ ÃᵀÃ Sᵀ, C −= γρ Ã Ãᵀ C, "
    "D += γρ B̃ Ãᵀ C (per machine, C and D averaged, where M > 1)"
)
PAPER_CONSTANTS = {"eta": 1.0, "gamma": 1.9}  # the paper's η ≈ 1, γ ≈ 1.9
# Held-out prompts the two end-to-end runs score at most (the first of the views' 4096): each
# step's ρ is an eigenvalue problem per prompt (per machine), and 1024 prompts keep the view
# near a tenth of a second's work at the paper's sizes; the network's MSE is taken on the same
# prompts, so network / algorithm compares like with like.
HELD_OUT_PROMPTS = 1024
READINGS = ("global", "per_layer")


def algorithm_geometry(geo: Geometry) -> Geometry:
    """The geometry whose reading runs Algorithm 1 in the regime's own form: the regime's reading
    (a distributed model the views read as eagle-over-machines still runs per machine here) and,
    constrained, the model's learned sketch projectors."""
    reading = regimes.get(geo.regime).reading
    return replace(
        geo, reading=reading, projector=geo.projector if reading == "constrained" else None
    )


def sketch_basis(P: np.ndarray) -> np.ndarray:
    """Orthonormal columns S (n, r) with S Sᵀ = P for a projector P (n, n): its eigenvectors of
    eigenvalue 1 (the eigenvalues of a projector are 0 and 1)."""
    w, V = np.linalg.eigh(P)
    return V[:, w > 0.5]


def _top_eigenvalue(K: np.ndarray) -> np.ndarray:
    """λ_max of PSD matrices K (…, m, m): ‖Ã‖₂² from ÃᵀÃ; NaN where K is not finite."""
    out = np.full(K.shape[:-2], np.nan)
    ok = np.isfinite(K).all(axis=(-2, -1))
    if ok.any():
        out[ok] = np.linalg.eigvalsh(K[ok])[..., -1]
    return out


def _rho(K: np.ndarray) -> np.ndarray:
    """ρ = ‖Ã‖₂⁻² from K = ÃᵀÃ (…, m, m): 0 where Ã is zero (no step), NaN where not finite."""
    lam = _top_eigenvalue(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lam > 0, 1.0 / lam, np.where(np.isnan(lam), np.nan, 0.0))


def features(Z: np.ndarray, geo: Geometry, layer: int) -> tuple[np.ndarray, ...]:
    """Algorithm 1's four directions on a stream Z (b, T, E) with ρ in them (module text): one
    step is A −= η F_A, B −= η F_B, C −= γ F_C, D_slot −= γ F_D. `geo` runs the form
    (`algorithm_geometry`)."""
    A, B, C, _ = geo.blocks(Z)
    if geo.reading == "distributed":
        return _machine_features(A, B, C, geo)
    At = A.swapaxes(-1, -2)
    K = At @ A  # (b, n, n)  ÃᵀÃ lifted by S: S ÃᵀÃ Sᵀ = P AᵀA P on the sketch
    AtC = At @ C  # (b, n, n')
    small = K  # the Gram whose top eigenvalue is ‖Ã‖₂²
    if geo.reading == "constrained" and geo.projector is not None:
        P = geo.projector[layer]  # (n, n)  S_l S_lᵀ
        S = sketch_basis(P)  # (n, r)
        AS = A @ S  # (b, d, r)  Ã
        K, AtC, small = P @ K @ P, P @ AtC, AS.swapaxes(-1, -2) @ AS
    with np.errstate(over="ignore", invalid="ignore"):
        rho = _rho(small)[:, None, None]  # (b, 1, 1)
        # Ã ÃᵀÃ Sᵀ = A K, B̃ ÃᵀÃ Sᵀ = B K, Ã Ãᵀ C = A (P Aᵀ C), B̃ Ãᵀ C = B (P Aᵀ C)
        return rho * (A @ K), rho * (B @ K), rho * (A @ AtC), rho * (B @ AtC)


def _machine_features(A: np.ndarray, B: np.ndarray, C: np.ndarray, geo: Geometry):
    """The distributed form: each machine μ its own ρ_μ on its columns, the mean of the machines'
    C/D updates written into every C/D copy (machine μ reads copy μ where there are copies)."""
    b, d, n = A.shape
    M, m, n_prime = geo.machines, geo.n // geo.machines, geo.n_prime
    Ab = A.reshape(b, d, M, m).swapaxes(1, 2)  # (b, M, d, m)  machine μ's A^μ
    Bb = B.reshape(b, B.shape[1], M, m).swapaxes(1, 2)  # (b, M, d', m)
    if geo.copies > 1:
        Cm = C.reshape(b, d, geo.copies, n_prime).swapaxes(1, 2)  # (b, M, d, n')  copy μ
    else:
        Cm = C[:, None]  # (b, 1, d, n')  one C every machine reads
    with np.errstate(over="ignore", invalid="ignore"):
        K = Ab.swapaxes(-1, -2) @ Ab  # (b, M, m, m)
        rho = _rho(K)[..., None, None]  # (b, M, 1, 1)
        FA = (rho * (Ab @ K)).swapaxes(1, 2).reshape(A.shape)
        FB = (rho * (Bb @ K)).swapaxes(1, 2).reshape(B.shape)
        AtC = Ab.swapaxes(-1, -2) @ Cm  # (b, M, m, n')
        FC = (rho * (Ab @ AtC)).mean(1)  # (b, d, n')  (1/M) Σ_μ ρ_μ A^μ A^μᵀ C^μ
        FD = (rho * (Bb @ AtC)).mean(1)  # (b, d', n')
    if geo.copies > 1:
        FC, FD = np.tile(FC, (1, 1, geo.copies)), np.tile(FD, (1, 1, geo.copies))
    return FA, FB, FC, FD


def step(
    Z: np.ndarray, geo: Geometry, layer: int, eta: float, gamma: float, feats=None
) -> np.ndarray:
    """One step of Algorithm 1 on Z (b, T, E), the D slot negated (`features` given or computed)."""
    FA, FB, FC, FD = features(Z, geo, layer) if feats is None else feats
    d, n = geo.d, geo.n
    out = Z.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        out[:, :d, :n] -= eta * FA
        out[:, d:, :n] -= eta * FB
        out[:, :d, n:] -= gamma * FC
        out[:, d:, n:] -= gamma * FD
    return out


def run(Z0: np.ndarray, geo: Geometry, etas, gammas) -> np.ndarray:
    """Algorithm 1 from Z0 (b, T, E, internal units) for len(etas) steps, ρ recomputed from the
    current iterate at every step: the final stream (b, T, E)."""
    Z = Z0
    for layer, (eta, gamma) in enumerate(zip(etas, gammas, strict=True)):
        Z = step(Z, geo, layer, eta, gamma)
    return Z


def predict(z0: np.ndarray, geo: Geometry, etas, gammas) -> np.ndarray:
    """Algorithm 1's D (b, d', n') in prompt units from prompts z0 (b, T, E): run on the stream
    as the network's first layer sees it and read out as the network reads its own."""
    return geo.readout_of(run(geo.internal(z0), geo, etas, gammas), z0)


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(x * y))


def fit_constants(cap: Capture, geo: Geometry) -> dict:
    """The constants fitted on one step of the activations (module text): `eta`, `gamma` per
    layer (lists) and `global_eta`, `global_gamma` pooled over the layers; `feats` per layer
    for scoring the one step without recomputing them."""
    num, den, feats = np.zeros((cap.layers, 2)), np.zeros((cap.layers, 2)), []
    for layer in range(cap.layers):
        Z = cap.Z[layer]
        F = features(Z, geo, layer)
        delta = geo.blocks(cap.Z[layer + 1] - Z)
        for k, pair in enumerate(((0, 1), (2, 3))):  # η from A, B; γ from C, D
            num[layer, k] = -sum(_dot(delta[i], F[i]) for i in pair)
            den[layer, k] = sum(_dot(F[i], F[i]) for i in pair)
        feats.append(F)

    def solve(n: np.ndarray, d: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(d > 0, n / np.where(d > 0, d, 1.0), np.where(np.isnan(d), np.nan, 0.0))

    per = solve(num, den)
    pooled = solve(num.sum(0), den.sum(0))
    return {
        "eta": [float(x) for x in per[:, 0]],
        "gamma": [float(x) for x in per[:, 1]],
        "global_eta": float(pooled[0]),
        "global_gamma": float(pooled[1]),
        "feats": feats,
    }


def score(cap: Capture, geo: Geometry, etas, gammas, feats=None) -> list[dict]:
    """Per layer the Table-1 metric of Algorithm 1 with steps (η_l, γ_l), one step and end to end,
    in prompt units (`fit.base.table1_blocks`), with the relative gaps of `fit.fidelity` (squared
    gap over ‖Z_{l+1} − Z_l‖² one step, over ‖Z_{l+1} − Z_0‖² end to end) and the paper's value."""
    paper = paper_table1(geo.regime)
    out, run_Z = [], cap.Z[0]
    for layer in range(cap.layers):
        Z, Z1 = cap.Z[layer], cap.Z[layer + 1]
        eta, gamma = etas[layer], gammas[layer]
        F = feats[layer] if feats is not None else None
        one = step(Z, geo, layer, eta, gamma, F)
        run_Z = one if layer == 0 else step(run_Z, geo, layer, eta, gamma)
        row = {"layer": layer, "eta": float(eta), "gamma": float(gamma)}
        for name, got, ref in (
            ("one_step", one, Z),
            ("end_to_end", run_Z, cap.Z[0]),
        ):
            with np.errstate(over="ignore", invalid="ignore"):
                gap2, upd2 = (Z1 - got) ** 2, (Z1 - ref) ** 2
            split = table1_blocks(gap2, cap, geo)
            size = float(np.sum(upd2))
            row[name] = {
                "blocks": {k: split[k] for k in BLOCKS},
                "total": split["total"],
                "relative": float(np.sum(gap2)) / size if size > 0 else float("nan"),
            }
        row["paper"] = paper[layer] if layer < len(paper) else float("nan")
        out.append(row)
    return out


def table(readings: dict[str, dict]) -> pd.DataFrame:
    """One row per reading and layer: η, γ, the one-step and end-to-end metric and relative gap,
    the paper's value."""
    rows = []
    for name, reading in readings.items():
        for lay in reading["layers"]:
            rows.append(
                {
                    "reading": name,
                    "layer": lay["layer"],
                    "eta": lay["eta"],
                    "gamma": lay["gamma"],
                    "one_step": lay["one_step"]["total"],
                    "one_step_relative": lay["one_step"]["relative"],
                    "end_to_end": lay["end_to_end"]["total"],
                    "end_to_end_relative": lay["end_to_end"]["relative"],
                    "paper": lay["paper"],
                }
            )
    return pd.DataFrame(rows)


# --- what the view shows: its lines of the text report ------------------------------------------
def report_lines(ex: Extraction) -> list[str]:
    """The two readings: constants, Table 1 per layer one step and end to end, held-out MSE."""
    v = ex.views["algorithm1"].json
    if not v.get("supported"):
        return [f"Algorithm 1 as the paper writes it: not scored ({v.get('reason', '')})"]
    lines = [
        f"Algorithm 1 as the paper writes it ({v['form_text']}, recomputed every step), η and γ "
        f"fitted to one step of the activations on {v['probe_prompts']} probe prompts; Table 1 "
        "per layer (prompt units) one step and end to end; held-out MSE of the "
        f"algorithm run from the prompt on {plural(v['held_out_prompts'], 'prompt')} (network: "
        "the network's MSE over it; trimmed: without the worst 0.1% of prompts):"
    ]
    for name, label in (("global", "two constants"), ("per_layer", "per layer")):
        r = v["readings"][name]
        lay = r["layers"]
        if name == "global":
            consts = f"η = {number(r['eta'])}, γ = {number(r['gamma'])}"
        else:
            consts = (
                f"η = {step_list(x['eta'] for x in lay)}, γ = {step_list(x['gamma'] for x in lay)}"
            )
        lines.append(
            f"  {label:13s} {consts}: 1-step {step_list(x['one_step']['total'] for x in lay)}, "
            f"e2e {step_list(x['end_to_end']['total'] for x in lay)}; MSE {number(r['mse'])} "
            f"(network {ratio(v['network_mse'], r['mse'], spec='.2f', mark='x')}), trimmed "
            + (
                f"{number(r['trimmed_mse'])} (network "
                f"{ratio(v['network_trimmed_mse'], r['trimmed_mse'], spec='.2f', mark='x')})"
                if "trimmed_mse" in r
                else "not computed"
            )
        )
    return lines


@register("algorithm1", text=report_lines)
def algorithm1_view(ctx: Context) -> ViewResult:
    """Algorithm 1 in the regime's own form, its constants fitted to one step of the activations
    (two global constants; per layer), scored by Table 1 per layer and by its held-out MSE."""
    if ctx.geometry.samples:
        return ViewResult(
            "algorithm1",
            {
                "supported": False,
                "reason": "the sample layout's step family is GD++; Algorithm 1 is written for "
                "the feature layout",
            },
        )
    geo = algorithm_geometry(ctx.geometry)
    cap = ctx.cap
    fitted = fit_constants(cap, geo)
    L = cap.layers
    constants = {
        "global": ([fitted["global_eta"]] * L, [fitted["global_gamma"]] * L),
        "per_layer": (fitted["eta"], fitted["gamma"]),
    }
    # two runs of L steps, each about as costly as a layer pass (and an eigenvalue problem)
    held, net_pred = ctx.scoring(4 * L, limit=HELD_OUT_PROMPTS)
    net_stats = prompt_tails(net_pred, held.D)
    network_mse, network_trimmed = net_stats["mse"], net_stats["trimmed_mse"]
    readings = {}
    for name in READINGS:
        etas, gammas = constants[name]
        stats = prompt_tails(predict(held.z0, geo, etas, gammas), held.D)
        mse, trimmed = stats["mse"], stats["trimmed_mse"]
        reading = {
            "mse": mse,
            "trimmed_mse": trimmed,
            "median_mse": stats["median_mse"],
            "network_over_algorithm": network_mse / mse if mse > 0 else math.nan,
            "network_over_algorithm_trimmed": network_trimmed / trimmed
            if trimmed > 0
            else math.nan,
        }
        if name == "global":
            reading = {"eta": fitted["global_eta"], "gamma": fitted["global_gamma"]} | reading
        reading["layers"] = score(cap, geo, etas, gammas, fitted["feats"])
        readings[name] = reading
    return ViewResult(
        "algorithm1",
        {
            "supported": True,
            "form": geo.reading,
            "form_text": FORMS[geo.reading],
            "machines": geo.machines if geo.reading == "distributed" else 1,
            "update": UPDATE,
            "units": "η, γ dimensionless (ρ carries the scale); fidelity and MSE in prompt units",
            "probe_prompts": int(cap.Z.shape[1]),
            "held_out_prompts": held.prompts,
            "network_mse": network_mse,
            "network_trimmed_mse": network_trimmed,
            "zero_mse": float(np.mean(held.D**2)),
            "paper_constants": dict(PAPER_CONSTANTS),
            "readings": readings,
        },
        {"algorithm1": table(readings)},
    )
