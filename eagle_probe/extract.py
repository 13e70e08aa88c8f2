"""Extraction: capture a model, run every registered view, and collect the results.

`extract(model, task)` reads the model once (a float64 copy, its products W_QK and W_VP, its
regime's `Geometry`), captures a probe batch, draws held-out and tuning prompts, runs the views of
`eagle_probe.fit` in their registered order on the model and a few of them on an untrained control
of the same configuration, and returns an `Extraction`. Its `to_json()` is the `extraction.json`
schema documented in docs/extraction-schema.md; `render()` is what `eagle-probe extract` prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe import fit
from eagle_probe.capture import capture, float64_copy, probe_batch
from eagle_probe.checkpoint import jsonable
from eagle_probe.errors import EagleProbeError
from eagle_probe.fit.base import VIEWS, Context, HeldOut, ViewResult
from eagle_probe.fit.eagle import choose_reading
from eagle_probe.fit.geometry import Geometry, sketch_projectors
from eagle_probe.model import LinearTransformer
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample

SCHEMA_VERSION = 2
CONTROL_VIEWS = ("eagle", "fidelity", "polynomial")  # run on the untrained control

# Views that apply to each token layout (ModelConfig.tokens): every view reads both (in the sample
# layout the step family is GD++, `fit.geometry`, and the verdict names GD / GD++ /
# preconditioned GD); the algorithm view's names are of the sample layout's literature.
VIEWS_FOR_LAYOUT = {
    "features": fit.ORDER,
    "samples": fit.ORDER,
}


def geometry_of(model: LinearTransformer, qk: np.ndarray) -> Geometry:
    """The regime's shape read from the model (the constrained sketch from its W_QK)."""
    cfg = model.cfg
    return Geometry(
        regime=cfg.regime,
        d=cfg.d,
        n=cfg.n,
        d_prime=cfg.d_prime,
        n_prime=cfg.n_prime,
        heads=cfg.heads,
        layers=cfg.n_layers,
        mask=model.blocks[0].attn.mask.detach().to(torch.float64).cpu().numpy()
        if cfg.n_layers
        else np.ones((cfg.n_tokens, cfg.n_tokens)),
        readout=float(model.readout_scale.detach()),
        normalize=cfg.normalize,
        machines=cfg.machines if cfg.regime == "distributed" else 1,
        projector=sketch_projectors(qk, cfg.n) if cfg.regime == "constrained" else None,
        layout=cfg.tokens,
    )


def _held_out(task: TaskConfig, batch: int, seed: int) -> HeldOut:
    p = sample(task, batch, make_generator(seed), dtype=torch.float64)
    return HeldOut(z0=p.z0().numpy(), D=p.D.numpy())


@torch.no_grad()
def build_context(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    probe_batch_size: int = 256,
    seed: int = 0,
    test_batch: int = 4096,
    tuning_batch: int = 512,
    held_out: HeldOut | None = None,
    tuning: HeldOut | None = None,
    probes: Prompt | None = None,
) -> Context:
    """Everything the views read, for one model. `probes` replaces the fresh probe batch."""
    if probe_batch_size < 2:
        raise EagleProbeError(f"probe batch must hold at least 2 prompts, got {probe_batch_size}")
    m64 = float64_copy(model)
    cap = capture(m64, probes if probes is not None else probe_batch(task, probe_batch_size, seed))
    qk = m64.W_QK().numpy()
    vp = m64.W_VP().numpy()
    geometry = choose_reading(cap, geometry_of(m64, qk))
    held = held_out if held_out is not None else _held_out(task, test_batch, seed + 7919)
    tune = tuning if tuning is not None else _held_out(task, tuning_batch, seed + 104729)
    pred = m64(torch.from_numpy(held.z0)).numpy()
    return Context(
        cap=cap,
        qk=qk,
        vp=vp,
        geometry=geometry,
        held_out=held,
        tuning=tune,
        network_pred=pred,
        seed=seed,
    )


def run_views(ctx: Context, names, timings: dict[str, float] | None = None) -> None:
    """Run the named views in registry order, storing each result in `ctx.results`."""
    for name in fit.ORDER:
        if name not in names:
            continue
        t0 = time.perf_counter()
        ctx.results[name] = VIEWS[name](ctx)
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
        """The per-layer table the CLI prints (units in the column names)."""
        return layer_table(self)

    def render(self, name: str = "model") -> str:
        """The text report of `eagle-probe extract`."""
        from eagle_probe.report import render_text

        return render_text(self, name)

    def __str__(self) -> str:
        return self.render()

    def to_json(self) -> dict[str, Any]:
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
    cols = {
        "layer": t.layer,
        "a (act.)": t.a_step,
        "c (act.)": t.c_step,
        "eta": t.eta,
        "gamma": t.gamma,
    }
    if "a_weights" in t:
        cols["a (wts)"] = t.a_weights
        cols["c (wts)"] = t.c_weights
    cols["fid 1-step"] = t.fidelity_one_step
    cols["rel 1-step"] = t.fidelity_one_step_rel
    cols["fid e2e"] = t.fidelity
    if "projection_mse" in t:
        net = ex.network["mse"]
        cols["proj. cost %"] = (t.projection_mse / net - 1.0) * 100 if net > 0 else np.nan
    if "r2" in t:
        cols["R2 design"] = t.r2
    if "alpha_0" in t:  # sample layout: the order-0 step and the design form's orders
        cols["alpha_0"] = t.alpha_0
        cols["orders"] = [",".join(map(str, o)) if o is not None else "all" for o in t.orders]
    if "label" in t:
        cols["verdict"] = t.label
    return pd.DataFrame(cols)


def _compat_layers(ex: Extraction) -> list[dict[str, Any]]:
    """`layers` of extraction.json: the numbers the exported solver and older readers use."""
    out = []
    if "eagle" not in ex.views:
        rows = ex.layers.to_dict("records")
        return [{"layer": int(r["layer"]), "label": r["label"]} for r in rows]
    for row in ex.layers.to_dict("records"):
        out.append(
            {
                "layer": int(row["layer"]),
                "a_step": row["a_step"],
                "c_step": row["c_step"],
                "eta": row["eta"],
                "gamma": row["gamma"],
                "fidelity": row["fidelity"],
                "fidelity_one_step": row["fidelity_one_step"],
                "label": row.get("label"),
            }
        )
    return out


def extract(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    probe_batch_size: int = 256,
    seed: int = 0,
    control: bool = True,
    test_batch: int = 4096,
    tuning_batch: int = 512,
    views: tuple[str, ...] | None = None,
) -> Extraction:
    """Run the whole pipeline on `model` with fresh probes of `task`."""
    names = tuple(VIEWS) if views is None else views
    unknown = [v for v in names if v not in VIEWS]
    if unknown:
        raise EagleProbeError(
            f"unknown view(s) {', '.join(unknown)}; choose from {', '.join(VIEWS)}"
        )
    names = tuple(v for v in names if v in VIEWS_FOR_LAYOUT[model.cfg.tokens])
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ctx = build_context(
        model,
        task,
        probe_batch_size=probe_batch_size,
        seed=seed,
        test_batch=test_batch,
        tuning_batch=tuning_batch,
    )
    timings["capture"] = time.perf_counter() - t0
    control_results = None
    if control:
        t0 = time.perf_counter()
        untrained = LinearTransformer(model.cfg, generator=make_generator(seed + 1))
        cctx = build_context(
            untrained,
            task,
            probe_batch_size=probe_batch_size,
            seed=seed,
            held_out=ctx.held_out,
            tuning=ctx.tuning,
        )
        run_views(cctx, [v for v in CONTROL_VIEWS if v in names])
        control_results = cctx.results
        ctx = replace(ctx, control=cctx)
        timings["control"] = time.perf_counter() - t0
    run_views(ctx, names, timings)

    cfg = model.cfg
    info = {
        "regime": cfg.regime,
        "tokens": cfg.tokens,
        "layers": cfg.n_layers,
        "heads": cfg.heads,
        "n": cfg.n,
        "d": cfg.d,
        "n_prime": cfg.n_prime,
        "d_prime": cfg.d_prime,
        "normalize": cfg.normalize,
        "readout": cfg.readout,
        "dtype": cfg.dtype,
        "machines": cfg.machines if cfg.regime == "distributed" else 1,
        "task": task.to_dict(),
        "probe_batch": probe_batch_size,
        "held_out_prompts": int(ctx.held_out.z0.shape[0]),
        "seed": seed,
        "layer_index": "0-based: layer 0 is the first attention layer",
        "units": "steps in internal units (prompt divided by its norm of A); MSE and fidelity "
        "in prompt units"
        if cfg.normalize != "none"
        else "prompt units",
    }
    return Extraction(
        info=info,
        views=dict(ctx.results),
        control=control_results,
        network={"mse": ctx.network_mse, "zero_mse": ctx.zero_mse},
        geometry=ctx.geometry,
        timings=timings,
        held_out=ctx.held_out,
        network_pred=ctx.network_pred,
    )
