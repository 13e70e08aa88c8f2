"""Benchmark: which ratio is the paper's "10–50 times reduction in test MSE (Fig. 3a)"?

Usage: python benchmarks/paper_ratio.py [--prompts N] [--draws K] [--seeds [RECIPE ...]]
       [--no-shipped]

The paper (§4, "One method, three resource regimes"): "Across all three architectural
constraints, the trained 4-layer transformer achieves a 10–50 times reduction in test MSE
(Fig. 3 a)". Fig. 3's caption: "The evolution of key quantities throughout the transformer
layers … Mean across 10 training seeds is reported." So Fig. 3a plots a quantity per layer, and
the ratio it shows is read across the layers. This script reads the model's D slot after every
layer (the prediction the readout would give there: readout_scale · D slot · s, the same readout
the last layer feeds) on K fresh draws of N held-out prompts and prints, per model:

- the test MSE after each layer (layer 0 = the prompt, D = 0: the zero predictor),
- zero predictor / last layer (the project's "× below the zero predictor"),
- after layer 1 / after the last layer (the reduction the layers achieve once the first one has
  run: the reading that a per-layer plot starting at layer 1 shows),
each as a mean over prompts and, beside it, a median over prompts and a 0.1%-trimmed mean (a mean
hides its tail: one constrained prompt can move it by 10⁴). `--seeds` adds the seeds of the named
recipes (trained_models/seeds/{recipe}_seed*.pt; by default normalized, the centralized recipe,
distributed and constrained) and prints the range over each recipe's seeds.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from eagle_probe import checkpoint  # noqa: E402
from eagle_probe.evaluate import trimmed_mean  # noqa: E402
from eagle_probe.model import readout  # noqa: E402
from eagle_probe.tasks import make_generator, sample  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("centralized", "distributed", "constrained")
SEED_RECIPES = ("normalized", "distributed", "constrained")  # normalized: the centralized seeds


@torch.no_grad()
def layer_errors(path: Path, prompts: int, seed: int) -> np.ndarray:
    """Per-prompt MSE of the D estimate after each layer: (L + 1, prompts), row 0 the zero
    predictor."""
    model, task, _ = checkpoint.load(path)
    model.eval()
    prompt = sample(task, prompts, make_generator(seed), dtype=model.cfg.torch_dtype)
    layers = range(model.cfg.n_layers)
    names = ["hook_scale"] + [f"blocks.{layer}.hook_resid_post" for layer in layers]
    _, cache = model.run_with_cache(prompt.z0(), names_filter=lambda n: n in names)
    scale = cache["hook_scale"]
    rows = [(prompt.D.double() ** 2).flatten(1).mean(1)]
    for layer in layers:
        stream = cache[f"blocks.{layer}.hook_resid_post"]
        pred = readout(model.cfg, stream, scale, model.readout_scale)
        rows.append(((pred.double() - prompt.D.double()) ** 2).flatten(1).mean(1))
    return torch.stack(rows).numpy()


def statistics(errors: np.ndarray) -> dict[str, np.ndarray]:
    """Per layer: mean, median and trimmed mean over prompts."""
    return {
        "mean": errors.mean(1),
        "median": np.median(errors, 1),
        "trimmed": np.array([trimmed_mean(row) for row in errors]),  # worst 0.1% dropped
    }


def ratios(stat: np.ndarray) -> tuple[float, float]:
    """(zero predictor / last layer, layer 1 / last layer)."""
    return float(stat[0] / stat[-1]), float(stat[1] / stat[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8192)
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seeds", nargs="*", default=None, help="also these recipes' seeds")
    parser.add_argument("--no-shipped", action="store_true", help="only the seeds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shipped = [] if args.no_shipped else [ROOT / "trained_models" / f"{n}.pt" for n in SHIPPED]
    recipes = [] if args.seeds is None else (args.seeds or list(SEED_RECIPES))
    seed_dir = ROOT / "trained_models" / "seeds"
    paths = shipped + [p for r in recipes for p in sorted(seed_dir.glob(f"{r}_seed*.pt"))]
    rows = []
    for path in paths:
        draws = range(args.draws)
        per_draw = [statistics(layer_errors(path, args.prompts, 1000 + k)) for k in draws]
        out = {"model": path.stem}
        for kind in ("mean", "median", "trimmed"):
            both = np.array([ratios(d[kind]) for d in per_draw])  # (draws, 2)
            out[kind] = both
            out[kind + "_layers"] = np.array([d[kind] for d in per_draw]).mean(0)
        rows.append(out)
        layers = ", ".join(f"{x:.3g}" for x in out["median_layers"])
        print(f"{path.stem}: median MSE per layer (0 = zero predictor) {layers}")
        for kind in ("mean", "median", "trimmed"):
            zero, first = out[kind][:, 0], out[kind][:, 1]
            print(
                f"  {kind:8s} zero/last {zero.min():.3g}–{zero.max():.3g}×   "
                f"layer 1/last {first.min():.3g}–{first.max():.3g}×   ({args.draws} draws)"
            )
        sys.stdout.flush()
    if recipes:
        print("\nover each recipe's seeds (median over prompts, first draw):")
        for name in recipes:
            part = [r for r in rows if r["model"].startswith(f"{name}_seed")]
            if not part:
                print(f"  {name}: no seeds in {seed_dir}")
                continue
            zero = np.array([r["median"][0, 0] for r in part])
            first = np.array([r["median"][0, 1] for r in part])
            print(
                f"  {name}: zero/last {zero.min():.3g}–{zero.max():.3g}× (median "
                f"{np.median(zero):.3g}), layer 1/last {first.min():.3g}–{first.max():.3g}× "
                f"(median {np.median(first):.3g})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
