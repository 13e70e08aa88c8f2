"""Off the training distribution and across training: the targets of `eagle-probe compare` and
`eagle-probe timeline`, measured.

Usage: python benchmarks/compare_timeline.py [RUN_DIR]

1. A planted float64 EAGLE (n = d = 18, 3 layers, no normalisation): the largest network–algorithm
   gap over every sweep point (target ≤ 1e-10), the smallest sensitivity cosine (≥ 1 − 1e-10),
   the interpolation's relative MSE range (round-off).
2. The same with an extra W_VP term from A's columns to the query columns in layer 1: the gap per
   value of the scale sweep (it should grow away from ×1).
3. trained_models/centralized.pt with the default sweep: wall time (target ≤ 60 s on 2 cores) and
   the summary sentence.
4. With RUN_DIR (from `eagle-probe train --save-every K`): the timeline's wall time (target
   ≤ 3 minutes for 31 checkpoints) and each layer's emergence step.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from eagle_probe import checkpoint
from eagle_probe.compare import compare
from eagle_probe.layouts import model_from_products, plant, state_products
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig

A_STEPS, C_STEPS = [0.01, 0.015, 0.02], [0.02, 0.03, 0.04]  # η = a ‖A‖² ≈ 1/3 at the median


def planted() -> None:
    cfg = ModelConfig(n=18, d=18, n_layers=3, normalize="none", dtype="float64")
    task = TaskConfig(n=18, d=18, rank=10)
    model = plant(cfg, A_STEPS, C_STEPS)
    t0 = time.perf_counter()
    r = compare(model, task).json
    seconds = time.perf_counter() - t0
    points = [p for s in r["sweeps"].values() for p in s["points"]]
    gap = max(p["gap"]["faithful"] for p in points)
    cos = min(min(p["sensitivity_cosine"].values()) for p in points)
    print(f"planted EAGLE ({seconds:.1f} s, {len(points)} sweep points)")
    print(f"  largest gap network–faithful: {gap:.2e} (target ≤ 1e-10)")
    print(f"  smallest sensitivity cosine: 1 − {1 - cos:.2e} (target 1 − 1e-10)")
    print(f"  interpolation MSE range / mean: {r['interpolation']['mse_relative_range']:.2e}")
    print(f"  export check: {r['export_check']['relative_gap']:.2e}")

    qk, vp = state_products(model)
    vp = vp.copy()
    rng = np.random.default_rng(0)
    vp[1, 0, :18, 18:] = 2e-3 * rng.standard_normal((18, 2))
    bent = model_from_products(cfg, qk, vp)
    r = compare(bent, task).json
    print("planted EAGLE + an extra term (layer 1, W_VP from A's columns to C's):")
    for name in ("scale", "kappa"):
        s = r["sweeps"][name]
        row = ", ".join(f"{p['value']:.3g}: {p['gap']['faithful']:.2e}" for p in s["points"])
        f = s["follows"]
        print(f"  {name} gap {row}; follows {f['low']:.3g} … {f['high']:.3g}")


def shipped() -> None:
    model, task, _ = checkpoint.load("trained_models/centralized.pt")
    t0 = time.perf_counter()
    r = compare(model, task)
    seconds = time.perf_counter() - t0
    print(f"centralized.pt compare, default sweep: {seconds:.1f} s wall (target ≤ 60 s)")
    print(r.render())
    m = r.json["iteration_map"]
    print(f"  closest exact-EAGLE step count per layer: {m['eagle']['closest']}")
    print(f"  closest GD step count per layer: {m['gd']['closest']}")


def run_timeline(run_dir: str) -> None:
    from eagle_probe.timeline import timeline

    t0 = time.perf_counter()
    t = timeline(run_dir)
    seconds = time.perf_counter() - t0
    n = len(t.json["checkpoints"])
    print(f"timeline of {n} checkpoints: {seconds:.1f} s wall (target ≤ 180 s for 31)")
    print(t.render())


def main() -> None:
    planted()
    shipped()
    if len(sys.argv) > 1:
        run_timeline(sys.argv[1])


if __name__ == "__main__":
    main()
