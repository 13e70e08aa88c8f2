"""Benchmark: how well each recovered step is known, and what the interchange test says.

Usage: python benchmarks/evidence.py [MODEL.pt …] [--seeds DIR] [--recipes NAME …] [--causal]
       [--json OUT]

For each model: per layer η_l, γ_l read from the activations (view `eagle`, 256 probe prompts,
seed 0) with their 95% bootstrap intervals over the probe prompts. With `--causal`, the
interchange view as well (the fitted family's state swapped into the network at each interior
layer, and back; untrained control beside). With `--seeds DIR`, every `{recipe}_seed{k}.pt`
there: per recipe and layer the mean ± sd of η_l, γ_l over the seeds, their range, and the
median width of one seed's interval, so the spread between seeds can be held against the noise
of one probe batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from eagle_probe import checkpoint
from eagle_probe.bench import seed_files
from eagle_probe.extract import extract

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("centralized", "distributed", "constrained")


def steps(path: Path, causal: bool) -> tuple[pd.DataFrame, dict | None]:
    """Per layer η, γ and their intervals; the causal view's summary and the control's."""
    model, task, _ = checkpoint.load(path)
    views = ("eagle", "causal") if causal else ("eagle",)
    ex = extract(model, task, views=views, control=causal)
    cols = ["layer", "eta", "eta_lo", "eta_hi", "gamma", "gamma_lo", "gamma_hi"]
    table = ex.views["eagle"].tables["eagle"][cols]
    if not causal:
        return table, None
    j = ex.views["causal"].json
    control = ex.control["causal"].json if ex.control else None
    return table, {"model": j, "control": control}


def seeds_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per recipe and layer: mean ± sd of η, γ over the seeds, their range, the median width of
    one seed's 95% interval."""
    out = []
    for (recipe, layer), part in rows.groupby(["recipe", "layer"]):
        entry = {"recipe": recipe, "layer": int(layer), "seeds": len(part)}
        for name in ("eta", "gamma"):
            entry |= {
                f"{name}_mean": part[name].mean(),
                f"{name}_sd": part[name].std(ddof=1),
                f"{name}_min": part[name].min(),
                f"{name}_max": part[name].max(),
                f"{name}_width": (part[f"{name}_hi"] - part[f"{name}_lo"]).median(),
            }
        out.append(entry)
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--seeds", type=Path, default=None, help="a folder of seed checkpoints")
    parser.add_argument("--recipes", nargs="+", default=None, help="only these seed recipes")
    parser.add_argument("--causal", action="store_true", help="also the interchange view")
    parser.add_argument("--json", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args()
    models = args.models or (
        [] if args.seeds else [ROOT / "trained_models" / f"{m}.pt" for m in SHIPPED]
    )
    report: dict = {"models": {}, "seeds": None}
    pd.set_option("display.width", 160)
    for path in models:
        t0 = time.perf_counter()
        table, causal = steps(path, args.causal)
        print(f"\n{path.name} ({time.perf_counter() - t0:.0f} s)")
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        entry = {"steps": table.to_dict("records")}
        if causal is not None:
            for who in ("model", "control"):
                j = causal[who]
                if j is None or not j["layers"]:
                    continue
                for lay in j["layers"]:
                    into = lay["algorithm_into_network"]
                    back = lay.get("network_into_algorithm")  # not computed for the control
                    cells = " ".join(f"{b} {into[b]:.4f}" for b in into)
                    back = f"; back {back['all']:.4f}" if back else ""
                    print(f"  {who} L{lay['layer']}: into network {cells}{back}")
            entry["causal"] = causal
        report["models"][path.name] = entry
        sys.stdout.flush()
    if args.seeds is not None:
        recipes = set(args.recipes) if args.recipes else None
        rows = []
        files = seed_files(args.seeds, recipes)
        for i, (path, recipe, seed) in enumerate(files):
            table, _ = steps(path, causal=False)
            rows.append(table.assign(recipe=recipe, seed=seed))
            print(f"seed models: {i + 1}/{len(files)}", end="\r", file=sys.stderr)
        summary = seeds_table(pd.concat(rows))
        print("\nη_l, γ_l over seeds: mean ± sd, range, median width of one seed's 95% interval")
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        report["seeds"] = summary.to_dict("records")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
