"""Benchmark: every shipped checkpoint on fresh noiseless prompts of the paper distribution.

Usage: python benchmarks/shipped_models.py [--batch 20000] [--seed 2026] [--json OUT]

Prints, per model, the test MSE against the zero predictor and B A⁺ C, the median and worst prompt,
and how long each evaluation took. Targets: ≥ 110× below the zero predictor for centralized.pt and
centralized_8head.pt, ≥ 10× for the other block models, ≥ 2.5× for the one-step LSA model (one GD
step cannot pass 1/(1 − n/(n + d + 1)) = 2.8×) and ≥ 100× for the three-layer one; every prompt
finite. distributed.pt and constrained.pt are judged against their own regime's optimal EAGLE (the
optimum view of `eagle-probe extract`), see docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"centralized": 110.0, "centralized_8head": 110.0, "lsa_1layer": 2.5, "lsa_3layer": 100.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args()
    rows = []
    for path in sorted((ROOT / "trained_models").glob("*.pt")):
        model, task, metrics = checkpoint.load(path)
        start = time.perf_counter()
        result = evaluate(model, task, batch=args.batch, seed=args.seed)
        target = TARGETS.get(path.stem, 10.0)
        rows.append(
            {
                "model": path.name,
                "regime": model.cfg.regime,
                "heads": model.cfg.heads,
                "kb": round(path.stat().st_size / 1024, 1),
                "train_steps": metrics.get("steps_done"),
                "train_s": round(metrics.get("wall_seconds", float("nan"))),
                "mse": result["mse"],
                "zero_mse": result["zero_mse"],
                "improvement": result["improvement"],
                "median_mse": result["median_mse"],
                "worst_mse": result["worst_mse"],
                "nonfinite": result["nonfinite_prompts"],
                "target": target,
                "meets_target": bool(
                    result["improvement"] >= target and result["nonfinite_prompts"] == 0
                ),
                "eval_s": round(time.perf_counter() - start, 2),
            }
        )
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3g}".format):
        print(f"{args.batch} fresh noiseless prompts of the paper distribution, seed {args.seed}")
        print(table.to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
