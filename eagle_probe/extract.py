"""Extraction: capture a model, run every registered view, and collect the results.

`extract(model, task)` reads the model once (a float64 copy, its products W_QK and W_VP, its
regime's `Geometry`), captures a probe batch, draws held-out and tuning prompts, runs the views of
`eagle_probe.fit` in their registered order on the model and a few of them on an untrained control
of the same configuration, and returns an `Extraction`. Its `to_json()` is the `extraction.json`
schema documented in docs/extraction-schema.md; `render()` is what `eagle-probe extract` prints.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe import fit, regimes
from eagle_probe.capture import (
    capture,
    default_probe_batch,
    float64_copy,
    on_device,
    patched_predict,
    probe_batch,
    probe_chunk,
    probe_flops,
)
from eagle_probe.checkpoint import jsonable
from eagle_probe.errors import EagleProbeError
from eagle_probe.evaluate import tails
from eagle_probe.fit import families
from eagle_probe.fit.base import VIEWS, Context, HeldOut, ViewResult, affordable
from eagle_probe.fit.eagle import choose_family
from eagle_probe.fit.geometry import Geometry
from eagle_probe.layouts import geometry_of, state_products
from eagle_probe.model import LinearTransformer
from eagle_probe.progress import Progress
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample
from eagle_probe.wording import span

SCHEMA_VERSION = 2
CONTROL_VIEWS = ("eagle", "fidelity", "causal", "polynomial")  # run on the untrained control
# The control's implicit iterate (for its `polynomial` view) needs d / n' forwards per probe
# prompt, since an untrained model is not query-separable; above this many flops it is skipped
# and the control runs `eagle` and `fidelity` only (all the verdict reads).
CONTROL_PROBE_FLOPS = 1e11
# The control keeps its fresh weights but for a layer whose update on the probe prompts is larger
# than CONTROL_GROWTH × the stream entering it: that layer's W_P is scaled down to it
# (`control_gains`). Linear attention is cubic in the stream, so fresh weights of a large model
# grow it like x → c x³ and overflow float64 within a few layers (n = 128: from the seventh); a
# layer's relative one-step gap does not depend on the scale of its W_P, so a scaled layer reads
# the same on its input and the layers after it see a finite stream. Fresh weights at the paper's
# sizes move the stream by far less, and no layer of theirs is scaled.
CONTROL_GROWTH = 1.0

# Views that apply to each token layout (ModelConfig.tokens): every view reads both (in the sample
# layout the step family is GD++, `fit.geometry`, and the verdict names GD / GD++ /
# preconditioned GD); the algorithm view's names are of the sample layout's literature.
VIEWS_FOR_LAYOUT = {
    "features": fit.ORDER,
    "samples": fit.ORDER,
}


def runs_on(view: str, regime: str) -> bool:
    """Whether view `view` runs on a model of regime `regime`: views that read one regime's own
    structure run only on the regimes that list them (`Regime.views`); every other view runs on
    every regime."""
    listed = any(view in r.views for r in regimes.REGIMES.values())
    return not listed or view in regimes.get(regime).views


def _units(cfg) -> str:
    """What the numbers of an extraction are measured in, for its JSON."""
    if cfg.normalize == "none":
        return "prompt units"
    if cfg.spec.copies and not cfg.samples:
        return (
            "steps in internal units (each machine's A/B columns divided by its own norm of A^μ, "
            "C and D in prompt units); MSE and fidelity in prompt units"
        )
    return (
        "steps in internal units (prompt divided by its norm of A); MSE and fidelity in prompt "
        "units"
    )


def _held_out(task: TaskConfig, batch: int, seed: int) -> HeldOut:
    p = sample(task, batch, make_generator(seed), dtype=torch.float64)
    return HeldOut(z0=p.z0().numpy(), D=p.D.numpy())


HELD_OUT_FLOOR = 32  # held-out and tuning prompts drawn however large the model


def scoring_prompts(geometry: Geometry, wanted: int) -> int:
    """Held-out (or tuning) prompts to draw: `wanted`, or fewer when one forward of the network on
    them would exceed `fit.base.DRAW_FLOPS`, never below HELD_OUT_FLOOR. Every paper-sized model
    gets all it asks for."""
    from eagle_probe.fit import base

    return min(
        wanted,
        affordable(geometry, geometry.layers, wanted, floor=HELD_OUT_FLOOR, flops=base.DRAW_FLOPS),
    )


def scoring_sets(
    task: TaskConfig, sizes: Geometry, test_batch: int, tuning_batch: int, seed: int
) -> tuple[HeldOut, HeldOut]:
    """The held-out and tuning prompts of a model: their counts (`scoring_prompts`) depend on
    its sizes alone, not on the family the views read."""
    return (
        _held_out(task, scoring_prompts(sizes, test_batch), seed + 7919),
        _held_out(task, scoring_prompts(sizes, tuning_batch), seed + 104729),
    )


def extract_bytes(cfg, probe_batch: int, chunk: int | None = None) -> int:
    """An estimate of an extraction's peak memory: the capture (`capture_bytes`), the views'
    copies of the probe stream (the EAGLE run of `fidelity` and one layer's products: about two
    streams), and the held-out and tuning prompts with one scored stream. Measured peaks (resident
    memory, including about 0.45 GB of libraries) at n = d = 64, 128, 256: 1.2, 1.7, 2.4 GB
    against estimates of 0.85, 1.4, 2.0 GiB."""
    from eagle_probe.capture import capture_bytes

    L, T, E = cfg.n_layers, cfg.n_tokens, cfg.width
    stream = 8 * probe_batch * (L + 1) * T * E
    from eagle_probe.fit import base

    per_prompt = L * 4.0 * cfg.heads * T * E * (T + E)  # one forward (`scoring_prompts`)
    drawn = [
        min(wanted, max(HELD_OUT_FLOOR, int(base.DRAW_FLOPS // max(per_prompt, 1.0))))
        for wanted in (4096, 512)
    ]
    held = 8 * sum(drawn) * T * E + 8 * drawn[0] * T * E * (L + 1)  # and one scored stream
    return capture_bytes(cfg, probe_batch, chunk) + 2 * stream + held


CONTROL_FLOOR = 16  # probe prompts of the control, however large the model


def control_probe_batch(geometry: Geometry, probe_batch_size: int) -> int:
    """Probe prompts of the untrained control: the model's, or the first of them that its capture
    and its eagle and fidelity views (about 4 L layer passes per prompt) afford within
    `fit.base.VIEW_FLOPS`; all 256 at paper sizes, never fewer than CONTROL_FLOOR."""
    k = affordable(geometry, 4 * geometry.layers, probe_batch_size, floor=CONTROL_FLOOR)
    return min(probe_batch_size, k)


def predict_chunked(
    model: LinearTransformer, z0: np.ndarray, *, device: torch.device, chunk: int
) -> np.ndarray:
    """The network's predictions (b, d', n') on prompts z0, `chunk` prompts at a time."""
    out = [
        model(torch.from_numpy(z0[i : i + chunk]).to(device)).cpu().numpy()
        for i in range(0, z0.shape[0], chunk)
    ]
    return np.concatenate(out) if out else np.zeros((0, model.cfg.d_prime, model.cfg.n_prime))


@torch.no_grad()
def build_context(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    probe_batch_size: int | None = None,
    seed: int = 0,
    test_batch: int = 4096,
    tuning_batch: int = 512,
    held_out: HeldOut | None = None,
    tuning: HeldOut | None = None,
    validation: HeldOut | None = None,
    probes: Prompt | None = None,
    chunk: int | None = None,
    device: str | torch.device = "cpu",
    progress: Progress | None = None,
    iterate: bool = True,
    score: bool = True,
    family: str | None = None,
) -> Context:
    """Everything the views read, for one model. `probes` replaces the fresh probe batch;
    `probe_batch_size` None is `capture.default_probe_batch` (256 for the paper's sizes). Fewer
    held-out and tuning prompts than asked are drawn for models too large to score on them all
    (`scoring_prompts`; `extract` reports the counts). `iterate=False` skips the query probes,
    `score=False` the network's forward on the held-out prompts (the control needs neither);
    `family` forces the algorithm family the views read (`fit.eagle.choose_family`);
    `validation` replaces the validation prompts drawn for `held_out` (the control reads the
    model's)."""
    if probe_batch_size is None:
        probe_batch_size = default_probe_batch(model.cfg)
    if probe_batch_size < 2:
        raise EagleProbeError(f"probe batch must hold at least 2 prompts, got {probe_batch_size}")
    device = torch.device(device)
    m64 = float64_copy(model)
    prompts = probes if probes is not None else probe_batch(task, probe_batch_size, seed)
    cap = capture(m64, prompts, chunk=chunk, device=device, progress=progress, iterate=iterate)
    qk, vp = state_products(m64)  # block orientation
    geometry = geometry_of(m64, qk)
    if held_out is None or tuning is None:
        drawn = scoring_sets(task, geometry, test_batch, tuning_batch, seed)
        held_out = drawn[0] if held_out is None else held_out
        tuning = drawn[1] if tuning is None else tuning
    geometry, scores = choose_family(cap, geometry, family, qk, vp, held_out.z0)
    # as many as the held-out prompts: a blow-up of tuned steps on rare prompts shows on either
    if validation is None:
        validation = _held_out(task, held_out.prompts, seed + 1299709)
    held, tune = held_out, tuning
    if score:
        pred = predict_chunked(
            on_device(m64, device),
            held.z0,
            device=device,
            chunk=probe_chunk(m64.cfg) if chunk is None else chunk,
        )
    else:  # the control's views read no predictions of the network
        pred = np.full(held.D.shape, np.nan)
    return Context(
        cap=cap,
        qk=qk,
        vp=vp,
        geometry=geometry,
        held_out=held,
        tuning=tune,
        network_pred=pred,
        seed=seed,
        validation=validation,
        task=task,
        family_scores=scores or None,  # a forced family scores none
        network_tails=held_out_tails(held, pred) if score else None,
        patched=functools.partial(
            patched_predict,
            on_device(m64, device),
            chunk=probe_chunk(m64.cfg) if chunk is None else chunk,
        ),
    )


def run_views(
    ctx: Context,
    names,
    timings: dict[str, float] | None = None,
    progress: Progress | None = None,
) -> None:
    """Run the named views in registry order, one after another, storing each result in
    `ctx.results` and its seconds in `timings`."""
    order = [name for name in fit.ORDER if name in names]
    for name in progress(order, "views") if progress is not None else order:
        t0 = time.perf_counter()
        ctx.results[name] = VIEWS[name].run(ctx)
        if timings is not None:
            timings[name] = time.perf_counter() - t0


@dataclass
class Extraction:
    """Everything recovered from one model: the views, the control's views, the warnings."""

    info: dict[str, Any]  # model and probe description
    views: dict[str, ViewResult]  # name -> result, in run order
    control: dict[str, ViewResult] | None  # the untrained control's views
    network: dict[str, float]  # held-out MSE of the network and of the zero predictor
    geometry: Geometry
    timings: dict[str, float] = field(default_factory=dict)
    held_out: HeldOut | None = field(default=None, repr=False)  # the prompts the MSEs are on
    network_pred: np.ndarray | None = field(default=None, repr=False)  # (b, d', n') on them
    # the checkpoint's training record (`training_record`), where the caller loaded one
    training: dict[str, Any] | None = None
    # the extraction.json this extraction was read back from (`load_extraction`), written again
    # as it was by `to_json`; None for an extraction computed here
    source: dict[str, Any] | None = field(default=None, repr=False)

    # --- tables for people ------------------------------------------------------------------

    @property
    def warnings(self) -> list[str]:
        return [w for v in self.views.values() for w in v.warnings]

    @property
    def layers(self) -> pd.DataFrame:
        """One row per layer: EAGLE steps (activations and weights), fidelity, verdict."""
        if "eagle" not in self.views:  # sample layout: the algorithm view's table
            return self.views["algorithm"].tables["algorithm"].copy()
        table = self.views["eagle"].tables["eagle"].copy()
        fid = self.views["fidelity"].tables["fidelity"]
        one = fid[fid.reading == "one_step"].set_index("layer")
        e2e = fid[fid.reading == "end_to_end"].set_index("layer")
        table["fidelity"] = e2e.total.values
        table["fidelity_one_step"] = one.total.values
        table["fidelity_rel"] = e2e.relative.values
        table["fidelity_one_step_rel"] = one.relative.values
        for k in "ABCD":
            table[f"fidelity_{k}"] = e2e[k].values
            table[f"fidelity_one_step_{k}"] = one[k].values
        if "projection" in self.views:
            proj = self.views["projection"].json["layers"]
            table["a_weights"] = [p["a_step"] for p in proj]
            table["c_weights"] = [p["c_step"] for p in proj]
            table["projection_mse"] = [p["mse"] for p in proj]
        if "polynomial" in self.views:
            poly = self.views["polynomial"].json["layers"]
            table["r2"] = [p["r2"] for p in poly]
            table["rel_residual"] = [p["rel_residual"] for p in poly]
            table["degree"] = [p["degree"] for p in poly]
            table["orders"] = [p["orders"] for p in poly]
            table["expansion_gap"] = [p["eagle_filter_gap"] for p in poly]
            table["linearity_deviation"] = [p["linearity_deviation"] for p in poly]
        if "algorithm" in self.views and self.geometry.samples:
            table["alpha_0"] = self.views["algorithm"].tables["algorithm"].alpha_0.values
            if "verdict" in self.views:  # the order-0 step of the fit each layer's name rests on
                v = self.views["verdict"].json["layers"]
                table["alpha_0"] = [lay["alpha_0"] for lay in v]
                table["alpha_0_theory"] = [lay.get("alpha_0_theory", np.nan) for lay in v]
                table["orders"] = [lay["orders"] for lay in v]
        if "verdict" in self.views:
            table["label"] = [v["label"] for v in self.views["verdict"].json["layers"]]
        table["structure"] = self.geometry.reading
        return table

    @property
    def fits(self) -> pd.DataFrame:
        """Design-form fits per (layer, head); head −1 is the whole layer."""
        return self.views["polynomial"].tables["fits"]

    @property
    def terms(self) -> pd.DataFrame:
        """Design-form terms (layer, head, order, alpha, step) of the polynomial fits."""
        return self.views["polynomial"].tables["terms"]

    @property
    def weights(self) -> pd.DataFrame:
        """Structure of W_QK and W_VP per layer and head (sparsified)."""
        return self.views["weights"].tables["weights"]

    @property
    def test(self) -> dict[str, float]:
        out = dict(self.network)
        if "weights" in self.views:
            out["simplified_mse"] = self.views["weights"].json["simplified_mse"]
        if "projection" in self.views:
            out["projected_mse"] = self.views["projection"].json["projected_mse"]
        return out

    @property
    def verdict(self) -> dict[str, Any]:
        return self.views["verdict"].json["model"] if "verdict" in self.views else {}

    @property
    def projectors(self) -> list | None:
        P = self.geometry.projector
        return None if P is None else [p.tolist() for p in P]

    def table(self) -> pd.DataFrame:
        """The per-layer table the CLI prints (each column's unit: `report.UNITS`)."""
        return layer_table(self)

    def render(self, name: str = "model") -> str:
        """The text report of `eagle-probe extract`."""
        from eagle_probe.report import render_text

        return render_text(self, name)

    def __str__(self) -> str:
        return self.render()

    def _repr_html_(self) -> str:
        """What Jupyter shows for an extraction: the verdict's headline and the per-layer table."""
        from eagle_probe.report import notebook_html

        return notebook_html(self)

    def to_json(self) -> dict[str, Any]:
        if self.source is not None:  # read back from its JSON: that JSON, unchanged
            return copy.deepcopy(self.source)
        out = {
            "schema_version": SCHEMA_VERSION,
            "model": self.info,
            "geometry": self.geometry.to_json(),
            "network": self.network,
            "layers": _compat_layers(self),
            "views": {name: v.json for name, v in self.views.items()},
            "control": None
            if self.control is None
            else {
                "description": "untrained model of the same configuration, same probe batch",
                "views": {name: v.json for name, v in self.control.items()},
            },
            "warnings": self.warnings,
            "timings": self.timings,
            "training": self.training,
        }
        return jsonable(out)


def layer_table(ex: Extraction) -> pd.DataFrame:
    """Per layer, with units: steps read from activations and from weights, fidelity one-step and
    end-to-end (prompt units), the projection's cost, the design form's R², the label. In the
    sample layout a and c are the GD++ family's steps (`fit.geometry`), and the order-0 step α_0
    and the design form's orders are added."""
    t = ex.layers
    if "eagle" not in ex.views:  # sample layout: the algorithm view's columns, orders as text
        return t.assign(orders=[",".join(map(str, o)) for o in t.orders])
    if ex.geometry.samples and "verdict" in ex.views:
        return sample_table(ex)
    cols = {"layer": t.layer, "a (act.)": t.a_step, "c (act.)": t.c_step}
    if not ex.geometry.samples:  # EAGLE's normalised steps; the sample layout's GD++ has none
        cols["eta"], cols["gamma"] = t.eta, t.gamma
        if "eta_lo" in t:  # their 95% intervals over the probe prompts (`fit.eagle`)
            cols["eta 95%"] = [span(lo, hi) for lo, hi in zip(t.eta_lo, t.eta_hi, strict=True)]
            cols["gamma 95%"] = [
                span(lo, hi) for lo, hi in zip(t.gamma_lo, t.gamma_hi, strict=True)
            ]
    if "a_weights" in t:
        cols["a (wts)"] = t.a_weights
        cols["c (wts)"] = t.c_weights
    cols["fid 1-step"] = t.fidelity_one_step
    cols["rel 1-step"] = t.fidelity_one_step_rel
    cols["fid e2e"] = t.fidelity
    if "projection_mse" in t:
        net = ex.views["projection"].json["network_mse"]  # on the projection's own prompts
        cols["proj. cost %"] = (t.projection_mse / net - 1.0) * 100 if net > 0 else np.nan
    if "r2" in t:
        cols["R2 design"] = t.r2
    if "alpha_0" in t:  # sample layout: the order-0 step and the design form's orders
        cols["alpha_0"] = t.alpha_0
        if "alpha_0_theory" in t and np.isfinite(t.alpha_0_theory.to_numpy(float)).any():
            cols["theory"] = t.alpha_0_theory  # −1/(n + d + 1), the best one step from zero
        cols["orders"] = [",".join(map(str, o)) if o is not None else "all" for o in t.orders]
    if "label" in t:
        cols["verdict"] = t.label
    return pd.DataFrame(cols)


def sample_table(ex: Extraction) -> pd.DataFrame:
    """The sample layout's per-layer table, every number the verdict's own (`views.verdict`
    layers): GD++'s γ (the data transform; none in the last layer, whose data never reach the
    prediction) and η (the gradient step, the readout's frame) read from the activations and
    from the weights, the one-step gap of one GD++ layer (the last layer's on the D slot it is
    read from), the projection's cost, the R² of the fit the layer's name rests on, α_0 and the
    design form's orders."""
    v = ex.views["verdict"].json["layers"]
    last = len(v) - 1

    def col(key: str) -> list:
        return [np.nan if lay.get(key) is None else lay[key] for lay in v]

    cols = {
        "layer": col("layer"),
        "gamma (act.)": col("gamma"),
        "eta (act.)": col("eta"),
        "gamma (wts)": col("gamma_weights"),
        "eta (wts)": col("eta_weights"),
        "rel 1-step": [
            lay["one_step_relative_D" if lay["layer"] == last else "one_step_relative"] for lay in v
        ],
        "proj. cost %": [lay["projection_cost"] * 100 for lay in v],
        "R2": col("r2_label"),
        "alpha_0": col("alpha_0"),
    }
    if np.isfinite(np.asarray(col("alpha_0_theory"), dtype=float)).any():
        cols["theory"] = col("alpha_0_theory")  # −1/(n + d + 1), the best one step from zero
    cols["orders"] = [",".join(map(str, lay["orders"])) for lay in v]
    cols["verdict"] = [lay["label"] for lay in v]
    return pd.DataFrame(cols)


def load_extraction(data: dict[str, Any], model: LinearTransformer) -> Extraction:
    """An extraction read back from its extraction.json (`Extraction.to_json`), for the model it
    describes: the views' JSON, view `eagle`'s table, the geometry rebuilt from the model in the
    family the extraction read. What `compare` reads of an extraction; the views' figures and
    their other tables are not restored. Raises EagleProbeError when `data` is not an extraction
    of this schema, or describes a model of other sizes."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise EagleProbeError(
            f"not an extraction.json of schema version {SCHEMA_VERSION} (found {found!r})"
        )
    info, views = data.get("model") or {}, data.get("views") or {}
    cfg = model.cfg
    sizes = {k: info.get(k) for k in ("n", "d", "n_prime", "d_prime", "layers", "heads")}
    want = {"n": cfg.n, "d": cfg.d, "n_prime": cfg.n_prime, "d_prime": cfg.d_prime}
    want |= {"layers": cfg.n_layers, "heads": cfg.heads}
    if info.get("regime") != cfg.regime or sizes != want:
        raise EagleProbeError(
            f"the extraction describes a {info.get('regime')} model of sizes {sizes}, not this "
            f"{cfg.regime} model of sizes {want}"
        )
    if "eagle" not in views:
        raise EagleProbeError("the extraction has no view eagle: its steps are what is read")
    m64 = float64_copy(model)
    qk, _ = state_products(m64)
    geometry = geometry_of(m64, qk)
    if info.get("family"):
        geometry = families.get(info["family"]).geometry(geometry)
    results = {
        name: ViewResult(name, json) for name, json in views.items() if isinstance(json, dict)
    }
    results["eagle"].tables["eagle"] = pd.DataFrame(views["eagle"]["layers"])
    return Extraction(
        info=info,
        views=results,
        control=None,
        network=data.get("network") or {},
        geometry=geometry,
        timings=data.get("timings") or {},
        training=data.get("training"),
        source=data,
    )


# what an extraction keeps of a checkpoint's training metrics: the curve, its spikes, the kept step
TRAINING_KEYS = ("history", "spikes", "best_step", "steps_done", "spike_count")


def training_record(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a checkpoint's training metrics (`checkpoint.load`) the report draws: the
    evaluation history (train loss, held-out mean, median and trimmed MSE every few steps), the
    loss spikes, the step whose weights were kept; None without a history."""
    if not metrics or not metrics.get("history"):
        return None
    return {k: jsonable(metrics[k]) for k in TRAINING_KEYS if k in metrics}


INTERVAL_KEYS = tuple(
    f"{k}_{end}" for k in ("a_step", "c_step", "eta", "gamma") for end in ("lo", "hi")
)


def _compat_layers(ex: Extraction) -> list[dict[str, Any]]:
    """`layers` of extraction.json: the numbers the exported solver and older readers use."""
    out = []
    if "eagle" not in ex.views:
        rows = ex.layers.to_dict("records")
        return [{"layer": int(r["layer"]), "label": r["label"]} for r in rows]
    verdict = ex.views["verdict"].json["layers"] if "verdict" in ex.views else None
    for row in ex.layers.to_dict("records"):
        entry = {
            "layer": int(row["layer"]),
            "a_step": row["a_step"],
            "c_step": row["c_step"],
            "eta": row["eta"],
            "gamma": row["gamma"],
            # 95% intervals over the probe prompts (`fit.eagle`)
            **{k: row[k] for k in INTERVAL_KEYS if k in row},
            "fidelity": row["fidelity"],
            "fidelity_one_step": row["fidelity_one_step"],
            "label": row.get("label"),
        }
        if ex.geometry.samples and verdict is not None:  # GD++'s names, as the table prints
            lay = verdict[entry["layer"]]
            entry |= {k: lay[k] for k in ("gamma", "eta", "gamma_weights", "eta_weights")}
        out.append(entry)
    return out


@dataclass(frozen=True)
class Control:
    """The untrained control's view results: what the model's views read of it (`verdict`), and
    the factor on each layer's W_P that kept its stream finite (`control_gains`)."""

    results: dict[str, ViewResult]
    gains: tuple[float, ...] = ()


@torch.no_grad()
def control_gains(model: LinearTransformer, prompts: Prompt) -> list[float]:
    """Per layer of the untrained `model`, the factor ≤ 1 on its W_P that keeps the layer's update
    on `prompts` within CONTROL_GROWTH × the Frobenius norm of the stream entering it (that of
    the layers before it, each already scaled; float64); 1.0 where it already is."""
    m64 = float64_copy(model)
    _, cache = m64.run_with_cache(prompts.z0().to(torch.float64), names_filter="hook_embed")
    z = cache["hook_embed"]  # (b, T, E)  the stream entering layer 0
    gains = []
    for block in m64.blocks:
        update = block.attn(z)  # (b, T, E)  the layer's update, scaled by a factor on W_P
        size, grown = float(torch.linalg.norm(z)), float(torch.linalg.norm(update))
        gain = 1.0
        if not grown <= CONTROL_GROWTH * size:
            gain = CONTROL_GROWTH * size / grown if math.isfinite(grown) else 0.0
        gains.append(gain)
        z = z + gain * update
    return gains


def _control(
    model: LinearTransformer,
    task: TaskConfig,
    ctx: Context,
    family: str | None,
    names,
    probe_batch_size: int,
    control_probes: int,
    chunk: int | None,
    device,
) -> Control:
    """The untrained control's views (`CONTROL_VIEWS`): a model of the same configuration with
    fresh weights (a layer that would grow the stream beyond CONTROL_GROWTH scaled down:
    `control_gains`), probed on the first `control_probes` probe prompts, scored on the model's
    held-out and tuning prompts (those of its context `ctx`) and read in the model's `family`
    (None: the sample layout)."""
    seed = ctx.seed
    untrained = LinearTransformer(model.cfg, generator=make_generator(seed + 1))
    probes = probe_batch(task, probe_batch_size, seed)[:control_probes]
    gains = control_gains(untrained, probes)
    with torch.no_grad():
        for block, gain in zip(untrained.blocks, gains, strict=True):
            if gain < 1.0:
                block.attn.W_P.mul_(gain)
    # the control's one-step gaps are ratios: the first probe prompts its budget affords
    iterate = probe_flops(model.cfg, control_probes) <= CONTROL_PROBE_FLOPS
    control_views = [v for v in CONTROL_VIEWS if v in names]
    if not iterate:
        control_views = [v for v in control_views if v != "polynomial"]
    cctx = build_context(
        untrained,
        task,
        probes=probes,
        seed=seed,
        held_out=ctx.held_out,
        tuning=ctx.tuning,
        validation=ctx.validation,  # drawn for the same held-out count and seed
        chunk=chunk,
        device=device,
        iterate=iterate,
        score=False,
        family=family,
    )
    cctx = replace(cctx, is_control=True)
    run_views(cctx, control_views)
    return Control(cctx.results, tuple(gains))


def view_names(cfg, views: tuple[str, ...] | None) -> tuple[str, ...]:
    """The views an extraction of a model of `cfg` runs: `views` (None: all registered) less
    those its token layout or regime does not read."""
    names = tuple(VIEWS) if views is None else views
    unknown = [v for v in names if v not in VIEWS]
    if unknown:
        raise EagleProbeError(
            f"unknown view(s) {', '.join(unknown)}; choose from {', '.join(VIEWS)}"
        )
    return tuple(v for v in names if v in VIEWS_FOR_LAYOUT[cfg.tokens] and runs_on(v, cfg.regime))


def extract(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    probe_batch_size: int | None = None,
    seed: int = 0,
    control: bool = True,
    test_batch: int = 4096,
    tuning_batch: int = 512,
    views: tuple[str, ...] | None = None,
    chunk: int | None = None,
    device: str | torch.device = "cpu",
    progress: Progress | None = None,
) -> Extraction:
    """Run the whole pipeline on `model` with fresh probes of `task`, one step after another:
    capture (`build_context` for the sizes), the views, the untrained control's views, the
    verdict. `device` is the torch device of the forwards, `progress` reports long loops."""
    names = view_names(model.cfg, views)
    if probe_batch_size is None:
        probe_batch_size = default_probe_batch(model.cfg)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ctx = build_context(model, task, probe_batch_size=probe_batch_size, seed=seed,
                        test_batch=test_batch, tuning_batch=tuning_batch, chunk=chunk,
                        device=device, progress=progress)  # fmt: skip
    timings["capture"] = time.perf_counter() - t0
    run_views(ctx, [v for v in names if v != "verdict"], timings, progress)
    control_results, gains = None, None
    if control:
        t0 = time.perf_counter()
        family = None if ctx.geometry.samples else families.of_geometry(ctx.geometry).name
        control_probes = control_probe_batch(geometry_of(model, None), probe_batch_size)
        ran = _control(
            model, task, ctx, family, names, probe_batch_size, control_probes, chunk, device
        )
        control_results, gains = ran.results, list(ran.gains)
        timings["control"] = time.perf_counter() - t0
        ctx = replace(ctx, control=ran)
    if "verdict" in names:
        run_views(ctx, ["verdict"], timings)
    return Extraction(
        info=model_info(model, task, ctx, probe_batch_size, control_results, seed, gains),
        views=dict(ctx.results),
        control=control_results,
        network=network_numbers(ctx),
        geometry=ctx.geometry,
        timings=timings,
        held_out=ctx.held_out,
        network_pred=ctx.network_pred,
    )


# the tail of the held-out errors the `network` entry carries beside its mean (`evaluate.tails`)
NETWORK_TAILS = (
    "prompts",
    "median_mse",
    "trimmed_mse",
    "trimmed_prompts",
    "worst_mse",
    "worse_than_zero",
    "worse_than_zero_prompts",
)


def held_out_tails(held: HeldOut, pred: np.ndarray) -> dict[str, Any]:
    """`evaluate.tails` of the per-prompt errors of predictions `pred` (b, d', n') on `held`,
    against each prompt's mean of D² (the zero predictor's error)."""
    with np.errstate(over="ignore", invalid="ignore"):
        errors = ((pred - held.D) ** 2).mean(axis=(-1, -2))
    return tails(errors, (held.D**2).mean(axis=(-1, -2)))


def network_numbers(ctx: Context) -> dict[str, Any]:
    """The `network` entry of extraction.json: the network's held-out MSE `mse` and the zero
    predictor's `zero_mse` (the means over every entry of D), with the tail of the network's
    per-prompt errors beside them (NETWORK_TAILS, `held_out_tails`): its median, its mean
    without the worst 0.1% of prompts (`trimmed_mse`: what the verdict holds against the zero
    predictor, `Context.working_mse`), its worst prompt and the share of prompts it predicts
    worse than zero."""
    stats = ctx.network_tails
    if stats is None:
        stats = held_out_tails(ctx.held_out, ctx.network_pred)
    return {"mse": ctx.network_mse, "zero_mse": ctx.zero_mse} | {k: stats[k] for k in NETWORK_TAILS}


def model_info(
    model: LinearTransformer,
    task: TaskConfig,
    ctx: Context,
    probe_batch_size: int,
    control_results: dict[str, ViewResult] | None,
    seed: int,
    control_gains: list[float] | None = None,
) -> dict[str, Any]:
    """The `model` entry of extraction.json: the model, its task and the probes read."""
    cfg = model.cfg
    control = control_results is not None
    return {
        "regime": cfg.regime,
        "architecture": "sample layout: tokens are the rows [x, y]"
        if cfg.samples
        else cfg.spec.describe(cfg),
        "tokens": cfg.tokens,
        "layers": cfg.n_layers,
        "heads": cfg.heads,
        "n": cfg.n,
        "d": cfg.d,
        "n_prime": cfg.n_prime,
        "d_prime": cfg.d_prime,
        "normalize": cfg.normalize,
        # prediction = readout × D slot; the sample layout states its steps in this sign's frame
        "readout": float(model.readout_scale.detach()),
        **({"readout_learned": True} if cfg.readout == "learned" else {}),
        "dtype": cfg.dtype,
        "machines": cfg.machines if cfg.spec.machines else 1,
        **(
            {"local_scale": True, "share_heads": cfg.share_heads, "copies": cfg.machines}
            if cfg.spec.copies and not cfg.samples
            else {}
        ),
        "family": None if cfg.samples else families.of_geometry(ctx.geometry).name,
        "task": task.to_dict(),
        "probe_batch": probe_batch_size,
        "held_out_prompts": int(ctx.held_out.z0.shape[0]),
        "tuning_prompts": int(ctx.tuning.z0.shape[0]),
        "control_views": list(control_results) if control else [],
        "control_probe_batch": control_probe_batch(geometry_of(model, None), probe_batch_size)
        if control
        else 0,
        # the factor on each control layer's W_P that kept its stream finite (1: its own weights)
        "control_gains": control_gains if control else None,
        "seed": seed,
        "layer_index": "0-based: layer 0 is the first attention layer",
        "units": _units(cfg),
    }
