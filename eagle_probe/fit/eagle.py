"""The EAGLE form (Algorithm 1 of the paper), fitted to the activations one layer at a time.

Per layer the coefficients a_l, c_l of

    A ← A − a A AᵀA,  B ← B − a B AᵀA,  C ← C − c A Aᵀ C,  D_slot ← D_slot − c B Aᵀ C

(the D slot carries −D_EAGLE; the readout negates it), each by least squares on the network's own
update Z_{l+1} − Z_l, jointly over the two blocks that share it and per block as a check.
η_l = a_l ‖A_l‖², γ_l = c_l ‖A_l‖² with ‖A_l‖₂ the batch-max spectral norm of the A block entering
layer l (internal units), the paper's normalisation of the steps. The one-step residual is
relative to the layer's own update. Every step carries a 95% interval over the probe prompts
(`*_lo`, `*_hi`: the percentile bootstrap of `BOOTSTRAP` resamples of the prompts, each step
refitted and its ‖A_l‖₂ maximum retaken on the resample), so a difference between layers or
models can be told from the noise of the batch it was read on. η_l's interval reaches little
above η_l: a resample's maximum ‖A_l‖₂ is never above the batch's.

Sample layout: the same four directions tied by row (`Geometry.pairs`): a from the feature rows
A, C (the data transform of GD++, its γ), c from the label rows B, D (the gradient step, its η),
with the per-block checks `a_from_A`, `a_from_C`, `c_from_B`, `c_from_D`. c is stated in the
readout's frame (`Geometry.step_sign`: a downhill step is positive whichever sign the model reads
its prediction with), and the last layer's c is read from the D slot alone: its A, B, C updates
never reach the prediction, so nothing trains them (a model's W_QK rows of the labels, for one,
keep their initial values there). GD++'s names `gamma` = a and `eta` = c replace EAGLE's
normalised η, γ in this layout.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from eagle_probe.captured import Capture
from eagle_probe.fit import families
from eagle_probe.fit.base import Context, ViewResult, register
from eagle_probe.fit.geometry import Geometry

# resamples of the probe prompts behind each step's interval, and the interval's coverage
BOOTSTRAP = 1000
COVERAGE = 0.95


def _sums(delta: list[np.ndarray], feats: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, Σ ⟨Δ, F⟩ and Σ ‖F‖² over the blocks: (b,), (b,)."""
    num = sum(np.sum(dl * f, axis=(-2, -1)) for dl, f in zip(delta, feats, strict=True))
    den = sum(np.sum(f * f, axis=(-2, -1)) for f in feats)
    return num, den


def _coef(delta: list[np.ndarray], feats: list[np.ndarray]) -> float:
    """The step s minimising Σ ‖Δ + s F‖² (EAGLE subtracts s F)."""
    num, den = _sums(delta, feats)
    return float(_ratio(np.sum(num), np.sum(den)))


def _ratio(num, den):
    """−num / den, 0 where den is 0 (no direction to step along)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, -np.asarray(num) / np.where(den > 0, den, 1.0), 0.0)[()]


def resample_counts(prompts: int, layer: int) -> np.ndarray:
    """How often each probe prompt is drawn in each of `BOOTSTRAP` resamples: (BOOTSTRAP, b).
    Seeded by the layer, so an extraction's intervals are the same on every run."""
    rng = np.random.default_rng([2026, layer])
    return rng.multinomial(prompts, np.full(prompts, 1.0 / prompts), size=BOOTSTRAP)


def interval(values: np.ndarray) -> tuple[float, float]:
    """The central `COVERAGE` percentile interval of bootstrap values (NaN where any is not
    finite)."""
    if not np.isfinite(values).all():
        return math.nan, math.nan
    tail = 50.0 * (1.0 - COVERAGE)
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


def step_intervals(
    counts: np.ndarray, sums: tuple[np.ndarray, np.ndarray], norms2: np.ndarray
) -> dict[str, tuple[float, float]]:
    """The bootstrap intervals of one step s = −Σ num / Σ den over the probe prompts and of its
    normalised value s · max ‖A_l‖₂² (the max taken over each resample's prompts, as the point
    estimate takes it over the batch): {"step": (lo, hi), "normalised": (lo, hi)}."""
    num, den = sums
    step = _ratio(counts @ num, counts @ den)
    with np.errstate(invalid="ignore"):
        top = np.where(counts > 0, norms2, -np.inf).max(axis=1)
        return {"step": interval(step), "normalised": interval(step * top)}


def fit_steps(cap: Capture, geometry: Geometry) -> pd.DataFrame:
    """Per layer: a, c (joint and per block), η, γ and the one-step relative residual.

    Computed once per capture and reading of the step (the family choice and view `eagle` fit
    the same family on the same capture); each call returns its own copy."""
    key = (geometry.layout, geometry.reading, geometry.machines, geometry.d, geometry.n)
    kept = cap.__dict__.setdefault("_eagle_steps", [])  # a cache on a frozen instance
    for k, projector, table in kept:
        if k == key and projector is geometry.projector:
            return table.copy()
    table = _fit_steps(cap, geometry)
    kept.append((key, geometry.projector, table))
    return table.copy()


def _fit_steps(cap: Capture, geometry: Geometry) -> pd.DataFrame:
    rows = []
    for layer in range(cap.layers):
        Z, Z1 = cap.Z[layer], cap.Z[layer + 1]
        delta = dict(zip("ABCD", geometry.blocks(Z1 - Z), strict=True))
        feats = dict(zip("ABCD", geometry.eagle_features(Z, layer), strict=True))
        (p, q), (r, s) = geometry.pairs  # blocks sharing a, blocks sharing c
        a_sums = _sums([delta[p], delta[q]], [feats[p], feats[q]])
        c_sums = _sums([delta[r], delta[s]], [feats[r], feats[s]])
        last = geometry.samples and layer == cap.layers - 1
        if last:  # only the D slot of the last layer reaches the prediction (module text)
            c_sums = _sums([delta["D"]], [feats["D"]])
        a, c = (float(_ratio(np.sum(x), np.sum(y))) for x, y in (a_sums, c_sums))
        # Z1 − EAGLE(Z) from the features already at hand (geometry.eagle_step, unrecomputed)
        step = {p: a, q: a, r: c, s: c}
        with np.errstate(over="ignore", invalid="ignore"):
            gap2 = sum(float(np.sum((delta[x] + step[x] * feats[x]) ** 2)) for x in "ABCD")
        # a stream that overflowed (an untrained control at large sizes) has no spectral norm
        norm2 = cap.a_norm2(layer)
        update = float(np.linalg.norm(Z1 - Z))
        sign = geometry.step_sign  # c in the readout's frame (1 in the feature layout)
        row = {
            "layer": layer,
            "a_step": a,
            "c_step": sign * c,
            f"a_from_{p}": _coef([delta[p]], [feats[p]]),
            f"a_from_{q}": _coef([delta[q]], [feats[q]]),
            f"c_from_{r}": sign * _coef([delta[r]], [feats[r]]),
            f"c_from_{s}": sign * _coef([delta[s]], [feats[s]]),
            "norm_a_max": math.sqrt(norm2),
            "eta": a * norm2,
            "gamma": c * norm2,
            "one_step_residual": math.sqrt(gap2) / update if update else 0.0,
        }
        # intervals over the probe prompts (bootstrap), in the row's own units
        counts = resample_counts(Z.shape[0], layer)
        norms2 = cap.a_norms2(layer)
        ia, ic = (step_intervals(counts, sums, norms2) for sums in (a_sums, c_sums))
        c_ci = tuple(sorted(sign * x for x in ic["step"])) if sign < 0 else ic["step"]
        a_ci, eta_ci, gamma_ci = ia["step"], ia["normalised"], ic["normalised"]
        if geometry.samples:  # GD++'s names: γ the data transform, η the gradient step
            # (no γ in the last layer: its data never reach the prediction; a_step keeps the fit)
            row["gamma"], row["eta"] = (math.nan if last else a), sign * c
            gamma_ci, eta_ci = ((math.nan, math.nan) if last else a_ci), c_ci
            row["c_read_from"] = "D" if last else "BD"
        for name, (lo, hi) in (
            ("a_step", a_ci),
            ("c_step", c_ci),
            ("eta", eta_ci),
            ("gamma", gamma_ci),
        ):
            row[f"{name}_lo"], row[f"{name}_hi"] = lo, hi
        rows.append(row)
    return pd.DataFrame(rows)


# held-out prompts the family choice scores each family's projection on, and never more than the
# capture's probe prompts (an untrained control's first few at large sizes: its scores are only
# reported, and two forwards of its unmergeable heads cost more than its capture)
FAMILY_PROMPTS = 256


def family_scores(
    cap: Capture,
    geometry: Geometry,
    qk: np.ndarray | None = None,
    vp: np.ndarray | None = None,
    z0: np.ndarray | None = None,
) -> list[dict]:
    """Every family the regime admits, scored on the same network (the paper's family first):
    its mean one-step residual on the activations and per-layer steps; with the products qk, vp
    and prompts z0 also `prediction_gap`, ‖D̂_projected − D̂_network‖_F / ‖D̂_network‖_F with
    every layer's weights projected onto the family (view `projection`), on the first
    FAMILY_PROMPTS of z0 and at most as many as the capture's probe prompts."""
    from eagle_probe.fit.projection import project_products

    out = []
    net = None
    if qk is not None and z0 is not None:
        z0 = z0[: min(FAMILY_PROMPTS, cap.Z.shape[1])]
        net = geometry.predict(z0, qk, vp)
    for fam in families.for_geometry(geometry):
        geo = fam.geometry(geometry)
        table = fit_steps(cap, geo) if cap.layers else pd.DataFrame()
        row = {
            "name": fam.name,
            "update": fam.update,
            "sends": fam.sends,
            "one_step_residual": float(table.one_step_residual.mean())
            if len(table)
            else float("nan"),
            "layers": [
                {
                    "layer": int(r.layer),
                    "a_step": float(r.a_step),
                    "c_step": float(r.c_step),
                    "one_step_residual": float(r.one_step_residual),
                }
                for r in table.itertuples()
            ],
        }
        if net is not None:
            proj = project_products(geo, qk, vp, fam)
            with np.errstate(over="ignore", invalid="ignore"):
                pred = geo.predict(z0, proj["qk"], proj["vp"])
                scale = float(np.linalg.norm(net))
                gap = float(np.linalg.norm(pred - net)) / scale if scale > 0 else float("nan")
            row["prediction_gap"] = gap if math.isfinite(gap) else float("inf")
        out.append(row)
    return out


# Another family replaces the paper's own only when it reproduces the network clearly better:
# its score below FAMILY_MARGIN × the paper's (not round-off between two exact readings).
FAMILY_MARGIN = 0.9


def family_key(scores: list[dict]) -> str:
    """The score the family choice compares: the whole-model prediction gap (what the network
    computes) where there is one, else the mean one-step residual."""
    return "prediction_gap" if scores and "prediction_gap" in scores[0] else "one_step_residual"


def choose_family(
    cap: Capture,
    geometry: Geometry,
    family: str | None = None,
    qk: np.ndarray | None = None,
    vp: np.ndarray | None = None,
    z0: np.ndarray | None = None,
) -> tuple[Geometry, list[dict]]:
    """The family the views read, and the scores of every candidate (`family_scores`).

    `family` forces one (the untrained control reads its model's family). Otherwise the paper's
    family of the regime, unless another admitted family reproduces the network clearly better
    (prediction gap of its weight projection below FAMILY_MARGIN × the paper's; without products,
    the mean one-step residual): the distributed regime admits eagle-distributed and
    eagle-over-machines, a network that sends A columns between machines being read by the
    second. The choice and every score are reported (view `eagle`), never made silently."""
    if geometry.samples:
        return geometry, []
    if family is not None:
        return families.get(family).geometry(geometry), []
    scores = family_scores(cap, geometry, qk, vp, z0)
    key = family_key(scores)
    best = scores[0]
    for cand in scores[1:]:
        if cand[key] < FAMILY_MARGIN * best[key]:
            best = cand
    return families.get(best["name"]).geometry(geometry), scores


@register("eagle")
def eagle_view(ctx: Context) -> ViewResult:
    """The EAGLE steps read from the activations, in the family the views read; every family
    the regime admits is scored beside it."""
    table = fit_steps(ctx.cap, ctx.geometry)
    warnings = [
        f"layer {int(r.layer)}: negative {name} step {step:.3g} (EAGLE's steps are positive)"
        for r in table.itertuples()
        for name, step in (("A", r.a_step), ("C", r.c_step))
        if step < 0 and abs(step) > 1e-3 and not ctx.geometry.samples
    ]
    layers = table.to_dict(orient="records")
    extra_json: dict = {}
    if ctx.geometry.samples:
        update = (
            "sample layout, steps tied by row: A −= a A AᵀA, C −= a A AᵀC, B −= c B AᵀA, "
            "D_slot −= c B AᵀC (one GD++ layer: c the gradient step, a the data preconditioning)"
        )
    else:
        fam = families.of_geometry(ctx.geometry)
        update = f"{fam.name}: {fam.update}"
        scores = ctx.family_scores  # the family choice's, on the same capture and prompts
        if scores is None:
            scores = family_scores(ctx.cap, ctx.geometry, ctx.qk, ctx.vp, ctx.held_out.z0)
        key = family_key(scores)
        extra_json = {"family_name": fam.name, "families": scores, "chosen_by": key}
        paper = scores[0]
        if fam.name != paper["name"]:
            mine = next(s for s in scores if s["name"] == fam.name)
            warnings.append(
                f"read as {fam.name} ({key.replace('_', ' ')} {mine[key]:.3g}), not the "
                f"paper's {paper['name']} ({paper[key]:.3g}): {fam.name} sends {fam.sends}"
            )
    return ViewResult(
        "eagle",
        {
            "reading": ctx.geometry.reading,
            "family": update,
            **extra_json,
            "units": "internal",
            "layers": layers,
        },
        {"eagle": table},
        warnings,
    )
