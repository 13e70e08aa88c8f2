"""Benchmark: the shipped seed models, test error and Table 1 as mean ± sd over seeds.

Usage: python benchmarks/seed_table.py [--dir trained_models/seeds] [--batch 20000] [--seed 2026]
       [--json OUT]

For every `{recipe}_seed{k}.pt` in the directory: the mean, median and worst prompt MSE on fresh
noiseless prompts of the paper distribution (and × below the zero predictor), then the fidelity
view's Table-1 metric per layer, one-step and end-to-end (prompt units, the activation-fitted
EAGLE steps), and per recipe the mean ± sd over seeds beside the paper's Table 1.
Target: for the plain recipe, a median prompt MSE ≥ 10× below the zero predictor in at least
4 of 5 seeds.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate
from eagle_probe.extract import extract
from eagle_probe.fit.fidelity import PAPER_TABLE1

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"(?P<recipe>[a-z_]+)_seed(?P<seed>\d+)\.pt")


def _models(folder: Path) -> list[tuple[str, int, Path]]:
    found = []
    for path in sorted(folder.glob("*.pt")):
        match = NAME.fullmatch(path.name)
        if match:
            found.append((match["recipe"], int(match["seed"]), path))
    return found


def _mean_sd(values: pd.Series) -> str:
    return (
        f"{values.mean():.3g} ± {values.std(ddof=1):.2g}"
        if len(values) > 1
        else f"{values.mean():.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "trained_models" / "seeds")
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, default=None, help="also write the tables as JSON")
    args = parser.parse_args()
    models = _models(args.dir)
    if not models:
        raise SystemExit(f"no {{recipe}}_seed{{k}}.pt in {args.dir}")
    tests, fidelity = [], []
    for recipe, seed, path in models:
        model, task, metrics = checkpoint.load(path)
        result = evaluate(model, task, batch=args.batch, seed=args.seed)
        zero = result["zero_mse"]
        tests.append(
            {
                "recipe": recipe,
                "seed": seed,
                "mse": result["mse"],
                "median_mse": result["median_mse"],
                "worst_mse": result["worst_mse"],
                "x_below_zero_mean": zero / result["mse"],
                "x_below_zero_median": zero / result["median_mse"],
                "nonfinite": result["nonfinite_prompts"],
                "train_s": round(metrics.get("wall_seconds", float("nan"))),
                "select": metrics.get("train_config", {}).get("select", "mean"),
            }
        )
        ex = extract(model, task, seed=0, control=False, views=("eagle", "fidelity"))
        for row in ex.layers.itertuples():
            fidelity.append(
                {
                    "recipe": recipe,
                    "seed": seed,
                    "layer": row.layer + 1,
                    "one_step": row.fidelity_one_step,
                    "end_to_end": row.fidelity,
                    "eta": row.eta,
                    "gamma": row.gamma,
                }
            )
        print(f"{path.name}: done", flush=True)
    tests_df, fid_df = pd.DataFrame(tests), pd.DataFrame(fidelity)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3g}".format):
        print(tests_df.to_string(index=False))
    for recipe, part in tests_df.groupby("recipe"):
        good = int((part.x_below_zero_median >= 10).sum())
        print(
            f"{recipe}: median prompt ≥ 10× below zero in {good} of {len(part)} seeds; "
            f"mean MSE {_mean_sd(part.mse)}, median {_mean_sd(part.median_mse)}, "
            f"worst {_mean_sd(part.worst_mse)}"
        )
    table = []
    paper = PAPER_TABLE1["centralized"]
    for (recipe, layer), part in fid_df.groupby(["recipe", "layer"]):
        table.append(
            {
                "recipe": recipe,
                "layer": layer,
                "one_step": _mean_sd(part.one_step),
                "end_to_end": _mean_sd(part.end_to_end),
                "eta": _mean_sd(part.eta),
                "gamma": _mean_sd(part.gamma),
                "paper": paper[layer - 1] if layer <= len(paper) else np.nan,
                "seeds": len(part),
            }
        )
    print(pd.DataFrame(table).to_string(index=False))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"tests": tests, "fidelity": fidelity, "table1": table}, indent=2, default=float
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
