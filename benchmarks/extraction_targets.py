"""Benchmark: extraction targets on planted and shipped models.

Usage: python benchmarks/extraction_targets.py

Planted: random EAGLE steps planted in float32 and float64 models (1–8 heads, 2–5 layers), and
gradient-descent plants; the worst relative error of the recovered a_l, c_l and whether any order
> 0 survives in GD plants. Shipped: per-layer fidelity (paper Table 1 metric), R² of the design
form, η and γ, beside the untrained control and the paper's Table 1 row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from eagle_probe import checkpoint
from eagle_probe.extract import extract
from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
from eagle_probe.tasks import TaskConfig

PAPER = {
    "centralized": (2.36, 5.27, 3.70, 2.16),
    "distributed": (0.62, 1.40, 1.28, 1.32),
    "constrained": (0.01, 0.02, 0.13, 0.14),
}


def planted(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for dtype in ("float32", "float64"):
        for trial in range(6):
            layers = int(rng.integers(2, 6))
            heads = int(rng.integers(1, 9))
            gd = trial % 3 == 0
            a = np.zeros(layers) if gd else rng.uniform(0.002, 0.01, layers)
            c = rng.uniform(0.005, 0.02, layers)
            cfg = ModelConfig(n_layers=layers, n_heads=heads, normalize="none", dtype=dtype)
            model = LinearTransformer(cfg)
            model.load_state_dict(eagle_weights(cfg, a.tolist(), c.tolist()))
            ex = extract(model, TaskConfig(), control=False, test_batch=64)
            a_err = np.max(np.abs(ex.layers.a_step - a) / np.where(a > 0, a, 1.0))
            c_err = np.max(np.abs(ex.layers.c_step - c) / c)
            higher = int((ex.terms.order > 0).sum()) if gd else None
            rows.append(
                {
                    "dtype": dtype,
                    "layers": layers,
                    "heads": heads,
                    "plant": "gd" if gd else "eagle",
                    "max_rel_err_a": a_err,
                    "max_rel_err_c": c_err,
                    "terms_of_order_gt_0": higher,
                }
            )
    return pd.DataFrame(rows)


def shipped() -> pd.DataFrame:
    rows = []
    for name in ("centralized", "centralized_8head", "distributed", "constrained"):
        model, task, _ = checkpoint.load(f"trained_models/{name}.pt")
        ex = extract(model, task)
        paper = PAPER.get(name.split("_")[0])
        for r, ctrl in zip(ex.layers.itertuples(), ex.control["layers"], strict=True):
            rows.append(
                {
                    "model": name,
                    "layer": r.layer + 1,
                    "fidelity": r.fidelity,
                    "paper": paper[r.layer] * 1e-4 if name in PAPER else None,
                    "fidelity_D": r.fidelity_D,
                    "fidelity_rel": r.fidelity_rel,
                    "r2": r.r2,
                    "eta": r.eta,
                    "gamma": r.gamma,
                    "control_r2": ctrl["r2"],
                    "control_fidelity_rel": ctrl["fidelity_rel"],
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    pd.set_option("display.width", 200)
    rng = np.random.default_rng(0)
    print(planted(rng).to_string(index=False))
    print()
    print(shipped().to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
