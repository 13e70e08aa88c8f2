"""Extraction: capture a model, fit every view, and collect the results.

`extract(model, task)` returns an `Extraction` whose tables are pandas DataFrames and whose
`to_json()` is the `extraction.json` schema documented in docs/extraction-schema.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe import fit
from eagle_probe.capture import Capture, capture, float64_copy, probe_batch
from eagle_probe.checkpoint import jsonable
from eagle_probe.errors import EagleProbeError
from eagle_probe.evaluate import prompt_errors
from eagle_probe.model import LinearTransformer, forward_products
from eagle_probe.tasks import TaskConfig, make_generator, sample

SCHEMA_VERSION = 1


@dataclass
class Extraction:
    """Everything recovered from one model."""

    info: dict[str, Any]  # model and probe description
    layers: pd.DataFrame  # one row per layer: EAGLE form, fidelity, design-form fit of the layer
    fits: pd.DataFrame  # one row per (layer, head); head −1 is the whole layer
    terms: pd.DataFrame  # one row per recovered term (layer, head, order, alpha, step)
    expansion: list[list[dict[str, float]]]  # per layer: EAGLE-implied terms [{order, alpha}]
    weights: pd.DataFrame  # structure of W_QK and W_VP per layer and head
    dynamic: pd.DataFrame  # per-prompt step sizes against ‖A‖₂
    symbolic: dict[str, Any]  # sympy text of the layer updates and of D_L
    test: dict[str, float]  # test MSE of the model and of its simplified-weights version
    control: dict[str, Any] | None = None  # the same numbers for an untrained model
    timings: dict[str, float] = field(default_factory=dict)
    projectors: list | None = None  # constrained: per layer the n × n sketch projector

    def table(self) -> pd.DataFrame:
        """The per-layer, per-head table the CLI prints."""
        rows = []
        for _, f in self.fits.iterrows():
            layer = self.layers.iloc[int(f.layer)]
            head = int(f["head"])
            terms = self.terms[(self.terms.layer == f.layer) & (self.terms["head"] == head)]
            alpha = ", ".join(f"{a:.3g}" for a in terms.alpha.head(3))
            alpha += ", …" if len(terms) > 3 else ""
            rows.append(
                {
                    "layer": int(f.layer),
                    "head": "all" if head < 0 else head,
                    "orders": _orders_text(f.orders),
                    "alpha": alpha,
                    "a": layer.a_step if head < 0 else None,
                    "c": layer.c_step if head < 0 else None,
                    "eta": layer.eta if head < 0 else None,
                    "gamma": layer.gamma if head < 0 else None,
                    "R2": f.r2,
                    "share": f.share,
                    "fidelity": layer.fidelity if head < 0 else None,
                    "fid_rel": layer.fidelity_rel if head < 0 else None,
                }
            )
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        layers = []
        for _, row in self.layers.iterrows():
            li = int(row.layer)
            terms = self.terms[self.terms.layer == li]
            layers.append(
                {
                    "layer": li,
                    "a_step": row.a_step,
                    "c_step": row.c_step,
                    "eta": row.eta,
                    "gamma": row.gamma,
                    "fidelity": row.fidelity,
                    "fidelity_rel": row.fidelity_rel,
                    "fidelity_blocks": {k: row[f"fidelity_{k}"] for k in "ABCD"},
                    "structure": row.structure,
                    "one_step_residual": row.one_step_residual,
                    "r2": row.r2,
                    "rel_residual": row.rel_residual,
                    "degree": int(row.degree),
                    "orders": [int(p) for p in row.orders],
                    "c_from_C": row.c_from_C,
                    "c_from_D": row.c_from_D,
                    "a_from_A": row.a_from_A,
                    "a_from_B": row.a_from_B,
                    "norm_a_max": row.norm_a_max,
                    "expansion_gap": row.expansion_gap,
                    "linearity_deviation": row.linearity_deviation,
                    "terms": [
                        {"order": int(t.order), "alpha": float(t.alpha), "head": int(t.head)}
                        for t in terms.itertuples()
                    ],
                    "eagle_terms": self.expansion[li],
                    "heads": [
                        {
                            "head": int(f.head),
                            "orders": [int(p) for p in f.orders],
                            "r2": f.r2,
                            "share": f.share,
                        }
                        for f in self.fits[
                            (self.fits.layer == li) & (self.fits["head"] >= 0)
                        ].itertuples()
                    ],
                    "weights": [
                        {"head": int(w.head), "W_QK": w.W_QK, "W_VP": w.W_VP}
                        for w in self.weights[self.weights.layer == li].itertuples()
                    ],
                    "dynamic": self.dynamic[self.dynamic.layer == li]
                    .iloc[0]
                    .drop("layer")
                    .to_dict(),
                }
            )
        out = {
            "schema_version": SCHEMA_VERSION,
            "model": self.info,
            "layers": layers,
            "symbolic": self.symbolic,
            "test": self.test,
            "control": self.control,
            "timings": self.timings,
        }
        return jsonable(out)


def _orders_text(orders) -> str:
    orders = list(orders)
    if len(orders) > 6:
        return f"{orders[0]}..{orders[-1]}"
    return "{" + ",".join(str(p) for p in orders) + "}"


def structure_of(model: LinearTransformer) -> fit.Structure:
    """The regime's shape of EAGLE, read from the model (the sketch from its W_QK)."""
    cfg = model.cfg
    if cfg.regime == "distributed":
        return fit.Structure("distributed", machines=cfg.machines)
    if cfg.regime == "constrained":
        qk = model.W_QK().to(torch.float64).sum(1)[:, : cfg.n, : cfg.n].numpy()  # (L, n, n)
        projectors = []
        for W in qk:
            U, s, _ = np.linalg.svd(W)
            k = int(np.sum(s > 1e-6 * max(s.max(), 1e-300)))
            projectors.append(U[:, :k] @ U[:, :k].T)
        return fit.Structure("constrained", projector=np.stack(projectors))
    return fit.Structure("centralized")


def _summary(
    cap: Capture, model: LinearTransformer
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, fit.Structure]:
    st = structure_of(model)
    eagle = fit.eagle_view(cap, st)
    if st.regime == "distributed":
        # Heads see local blocks but W_VP may write every block: Σ_μ A^μ A^μᵀ A = A Aᵀ A is the
        # centralized update. Keep whichever reading of the A/B update reproduces the network.
        central = fit.Structure("centralized")
        alt = fit.eagle_view(cap, central)
        if alt.fidelity.mean() < eagle.fidelity.mean():
            st, eagle = central, alt
    eagle["structure"] = "local" if st.regime == "distributed" else st.regime
    fits, terms = fit.polynomial_view(cap)
    layer_fits = fits[fits["head"] == -1].set_index("layer")
    eagle["r2"] = layer_fits.r2.values
    eagle["rel_residual"] = layer_fits.rel_residual.values
    eagle["degree"] = layer_fits.degree.values
    eagle["orders"] = list(layer_fits.orders.values)
    eagle["linearity_deviation"] = cap.linearity_deviation[1:]
    eagle["expansion_gap"] = fit.expansion_gap(fits, cap, eagle.a_step, eagle.c_step)
    return eagle, fits, terms, st


def extract(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    probe_batch_size: int = 256,
    seed: int = 0,
    control: bool = True,
    test_batch: int = 2048,
) -> Extraction:
    """Run the whole pipeline on `model` with fresh probes of `task`."""
    if probe_batch_size < 2:
        raise EagleProbeError(f"probe batch must hold at least 2 prompts, got {probe_batch_size}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    prompt = probe_batch(task, probe_batch_size, seed)
    cap = capture(model, prompt)
    timings["capture"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    eagle, fits, terms, structure = _summary(cap, model)
    expansion = [
        [{"order": p, "alpha": float(-b)} for p, b in enumerate(beta) if b != 0]
        for beta in fit.eagle_expansion(eagle.a_step, eagle.c_step)
    ]
    dynamic = fit.dynamic_steps(cap)
    timings["fit"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    m64 = float64_copy(model)
    qk = m64.W_QK().numpy()
    vp = m64.W_VP().numpy()
    weights = fit.weight_view(qk, vp, model.cfg.n)
    sqk, svp = fit.simplified_products(qk, vp, model.cfg.n)
    test_prompt = sample(task, test_batch, make_generator(seed + 7919), dtype=torch.float64)
    errors = prompt_errors(m64, test_prompt)
    with torch.no_grad():
        simple_pred = forward_products(
            m64, torch.from_numpy(sqk), torch.from_numpy(svp), test_prompt.z0()
        )
    simple_mse = float((simple_pred - test_prompt.D).square().mean())
    test = {
        "mse": float(errors["model"].mean()),
        "zero_mse": float(errors["zero"].mean()),
        "simplified_mse": simple_mse,
    }
    timings["weights"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    symbolic = {
        "layers": fit.symbolic_layers(eagle.a_step, eagle.c_step),
        "unrolled": fit.symbolic_unrolled(eagle.a_step, eagle.c_step),
    }
    timings["symbolic"] = time.perf_counter() - t0

    control_info = None
    if control:
        t0 = time.perf_counter()
        untrained = LinearTransformer(model.cfg, generator=make_generator(seed + 1))
        ccap = capture(untrained, prompt)
        c_eagle, c_fits, _, _ = _summary(ccap, untrained)
        control_info = {
            "description": "untrained model of the same configuration, same probe batch",
            "layers": [
                {
                    "layer": int(r.layer),
                    "a_step": r.a_step,
                    "c_step": r.c_step,
                    "fidelity": r.fidelity,
                    "fidelity_rel": r.fidelity_rel,
                    "r2": r.r2,
                    "one_step_residual": r.one_step_residual,
                }
                for r in c_eagle.itertuples()
            ],
        }
        timings["control"] = time.perf_counter() - t0

    cfg = model.cfg
    info = {
        "regime": cfg.regime,
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
        "seed": seed,
        "units": "internal (prompt divided by its norm of A)"
        if cfg.normalize != "none"
        else "prompt units",
    }
    return Extraction(
        info=info,
        layers=eagle,
        fits=fits,
        terms=terms,
        expansion=expansion,
        weights=weights,
        dynamic=dynamic,
        symbolic=symbolic,
        test=test,
        control=control_info,
        timings=timings,
        projectors=None
        if structure.projector is None
        else [P.tolist() for P in structure.projector],
    )


def render_table(result: Extraction, name: str = "model") -> str:
    """The per-layer text report of `eagle-probe extract`."""
    info, test = result.info, result.test
    lines = [
        f"{name}: {info['regime']}, {info['layers']} layers x {info['heads']} head(s), "
        f"probe batch {info['probe_batch']} (seed {info['seed']}), units: {info['units']}",
        f"test MSE {test['mse']:.3e} (zero predictor {test['zero_mse']:.3e}); simplified weights "
        f"{test['simplified_mse']:.3e}",
        "",
    ]
    table = result.table()
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        lines.append(table.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3g}"))
    lines.append("")
    lines.append("weights (sparsified, τ = 1.5‖W‖₁/#entries):")
    for w in result.weights.itertuples():
        lines.append(f"  layer {w.layer} head {w.head}: W_QK = {w.W_QK}   W_VP = {w.W_VP}")
    if result.control is not None:
        lines.append("")
        lines.append(
            "untrained control (same probes): "
            + "; ".join(
                f"L{r['layer']} R2 {r['r2']:.2g} fidelity {r['fidelity']:.2g} "
                f"(rel {r['fidelity_rel']:.2g})"
                for r in result.control["layers"]
            )
        )
    lines.append("")
    lines.append(
        result.symbolic["unrolled"][:300] + (" …" if len(result.symbolic["unrolled"]) > 300 else "")
    )
    return "\n".join(lines)
