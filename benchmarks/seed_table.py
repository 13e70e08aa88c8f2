"""Benchmark: the shipped seed models, test error and Table 1 as mean ± sd over seeds.

Usage: python benchmarks/seed_table.py [--dir trained_models/seeds] [--batch 20000] [--seed 2026]
       [--json OUT] [--recipes NAME …]

For every `{recipe}_seed{k}.pt` in the directory (any regime): the mean, median and worst prompt
MSE on fresh noiseless prompts of the paper distribution (× below the zero predictor for the mean
and the median), then the fidelity view's Table-1 metric per layer, one-step and end-to-end
(prompt units; EAGLE steps of the model's own family fitted on 256 probe prompts, scored on 512
others), and per recipe the mean ± sd over seeds beside the paper's Table 1 of its regime; then
the same for Algorithm 1 as the paper writes it (view `algorithm1`: ρ = ‖Ã_l‖₂⁻² recomputed every
step, in the regime's own form) with its two global constants and with per-layer η_l, γ_l, both
fitted to one step of the activations on the same 256 probe prompts and scored on the same 512,
with the fitted constants and the held-out MSE of the algorithm beside the network's.
`--recipes` measures only the named recipes; with `--json` naming an existing file of the same
batch and seed, their rows replace those recipes' rows there and the others are kept.
Target: for the plain recipe, a median prompt MSE ≥ 10× below
the zero predictor in at least 4 of 5 seeds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from eagle_probe.bench import seed_algorithm1, seed_summary, seeds

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "trained_models" / "seeds")
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", type=Path, default=None, help="also write the tables as JSON")
    parser.add_argument("--recipes", nargs="+", default=None, help="measure only these recipes")
    args = parser.parse_args()
    recipes = set(args.recipes) if args.recipes else None
    tests, fidelity = seeds(args.dir, batch=args.batch, seed=args.seed, recipes=recipes)
    table = seed_summary(fidelity)
    rows = seed_algorithm1(args.dir, recipes=recipes)
    algorithm1 = seed_summary(rows)
    constants = algorithm1_constants(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3g}".format):
        print(f"{args.batch} fresh noiseless prompts of the paper distribution, seed {args.seed}")
        print(tests.to_string(index=False))
        for recipe, part in tests.groupby("recipe"):
            good = int((part.below_zero_median >= 10).sum())
            print(
                f"{recipe}: median prompt >= 10x below zero in {good} of {len(part)} seeds; "
                f"mean MSE {part.mse.mean():.3g} ± {part.mse.std():.2g}, median "
                f"{part.median_mse.mean():.3g} ± {part.median_mse.std():.2g}, worst "
                f"{part.worst_mse.mean():.3g} ± {part.worst_mse.std():.2g}"
            )
        print("Table 1 (prompt units), mean ± sd over seeds:")
        print(table.to_string(index=False))
        print("Algorithm 1 as the paper writes it, fitted constants and held-out MSE per seed:")
        print(constants.to_string(index=False))
        print("Algorithm 1, Table 1 (prompt units), mean ± sd over seeds:")
        print(algorithm1.to_string(index=False))
    if args.json:
        payload = {
            "batch": args.batch,
            "seed": args.seed,
            "tests": tests.to_dict(orient="records"),
            "table1": table.to_dict(orient="records"),
            "algorithm1": algorithm1.to_dict(orient="records"),
            "algorithm1_constants": constants.to_dict(orient="records"),
        }
        if recipes is not None and args.json.exists():
            payload = merged(json.loads(args.json.read_text()), payload, recipes)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


def algorithm1_constants(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model and reading of the constants (`global`, `per_layer`): the fitted η and γ
    (per layer: lists), the held-out MSE of Algorithm 1 and the network's, network / algorithm."""
    out = []
    for (recipe, seed, regime, constants), part in rows.groupby(
        ["recipe", "seed", "regime", "constants"], sort=True
    ):
        steps = part[part.reading == "one_step"].sort_values("layer")
        eta, gamma = steps.eta.tolist(), steps.gamma.tolist()
        first = part.iloc[0]
        out.append(
            {
                "recipe": recipe,
                "seed": seed,
                "regime": regime,
                "constants": constants,
                "eta": eta[0] if constants == "global" else eta,
                "gamma": gamma[0] if constants == "global" else gamma,
                "mse": first.mse,
                "network_mse": first.network_mse,
                "network_over_algorithm": first.network_over_algorithm,
            }
        )
    return pd.DataFrame(out)


def _order(row: dict) -> tuple:
    return (row["recipe"], row.get("seed", 0), row.get("constants", ""), row.get("layer", 0))


def merged(old: dict, new: dict, recipes: set[str]) -> dict:
    """`old` with the rows of `recipes` replaced by `new`'s (both of one batch and seed)."""
    if (old["batch"], old["seed"]) != (new["batch"], new["seed"]):
        raise SystemExit(
            f"the existing JSON measured batch {old['batch']}, seed {old['seed']}; this run "
            f"{new['batch']}, {new['seed']}: pass the same --batch and --seed, or a new --json"
        )
    out = dict(new)
    for key in ("tests", "table1", "algorithm1", "algorithm1_constants"):
        kept = [row for row in old.get(key, []) if row["recipe"] not in recipes]
        rows = kept + new[key]
        out[key] = sorted(rows, key=_order)
    return out


if __name__ == "__main__":
    main()
