"""Benchmark: is C/D plainly averaged in the paper's distributed architecture?

Usage: python benchmarks/distributed_averaging.py [CKPT …] [--json OUT]
(default: trained_models/distributed.pt and trained_models/seeds/distributed_seed{0..9}.pt)

The paper (§4, distributed setting) reads W_VP^μ's across-machine blocks as diag(0_n, α2 I_n')
"with the very same factor α2 as the within machine blocks", so every machine's copy of C/D
receives the same sum and "the shared columns are thus identical across all μ at all ℓ". For
every checkpoint of the paper's architecture (regime distributed: one head per machine, a C/D
copy per machine), view `communication` on the extraction's first 512 held-out prompts (seed 0)
gives per layer the cross-machine over within-machine C/D write factor (`cd_ratio`, from the
weights) and the copies' divergence after the layer (`d_spread`, `c_spread`, from the
activations: the copy furthest from the machines' mean, relative to the mean, median prompt);
see eagle_probe/fit/communication.py for the definitions.

One more column says whether the departure is used: `averaged` is the held-out MSE with every
layer's factors f[μ, ν] replaced by their mean over the receiving machines ν, mean_ν f[μ, ν]
(each head sends its update to every copy with one factor, so the copies stay equal and the mean
copy receives what it received before in that layer; the off-identity rest of each block is kept),
over the network's MSE on the same prompts.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from eagle_probe import checkpoint
from eagle_probe.extract import build_context
from eagle_probe.fit import VIEWS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "trained_models" / "distributed.pt"] + [
    ROOT / "trained_models" / "seeds" / f"distributed_seed{s}.pt" for s in range(10)
]
PROMPTS = 512


def plain_average(vp: np.ndarray, geo, layers) -> np.ndarray:
    """W_VP (L, h, E, E) with, in `layers`, every C/D block W^{μν} moved from f[μ, ν] I to
    mean_ν f[μ, ν] I (module text)."""
    out = vp.copy()
    n, n_prime, M = geo.n, geo.n_prime, geo.copies
    eye = np.eye(n_prime)
    for layer in layers:
        for mu in range(M):
            rows = slice(n + mu * n_prime, n + (mu + 1) * n_prime)
            cols = [slice(n + nu * n_prime, n + (nu + 1) * n_prime) for nu in range(M)]
            f = [np.trace(out[layer, mu, rows, c]) / n_prime for c in cols]
            for c, fv in zip(cols, f, strict=True):
                out[layer, mu, rows, c] += (np.mean(f) - fv) * eye
    return out


def one(path: Path) -> dict:
    model, task, _ = checkpoint.load(path)
    if model.cfg.regime != "distributed":
        raise SystemExit(f"{path}: a {model.cfg.regime} model, not the paper's distributed one")
    ctx = build_context(model, task, seed=0, test_batch=PROMPTS, tuning_batch=64)
    view = VIEWS["communication"].run(ctx).json
    geo = ctx.geometry
    held = ctx.held_out.first(view["prompts"])
    base = view["network_mse"]
    L = geo.layers
    averaged = [
        held.mse(geo.predict(held.z0, ctx.qk, plain_average(ctx.vp, geo, [layer]))) / base
        for layer in range(L)
    ]
    every = held.mse(geo.predict(held.z0, ctx.qk, plain_average(ctx.vp, geo, range(L)))) / base
    return {
        "checkpoint": path.name,
        "machines": geo.copies,
        "prompts": view["prompts"],
        "network_mse": base,
        "averaged_every_layer": every,
        "layers": [
            {
                "layer": lay["layer"],
                "cd_within": lay["cd_within"],
                "cd_cross": lay["cd_cross"],
                "cd_ratio": lay["cd_ratio"],
                "cd_factor_residual": lay["cd_factor_residual"],
                "d_spread": lay["d_spread"],
                "c_spread": lay["c_spread"],
                "averaged": averaged[lay["layer"]],
            }
            for lay in view["layers"]
        ],
    }


def table(rows: list[dict], key: str, spec: str) -> list[str]:
    """One line per checkpoint, one column per layer."""
    L = len(rows[0]["layers"])
    head = f"{'checkpoint':24s}" + "".join(f"{f'layer {i}':>10s}" for i in range(L))
    lines = [head]
    for r in rows:
        cells = "".join(f"{format(lay[key], spec):>10s}" for lay in r["layers"])
        lines.append(f"{r['checkpoint']:24s}{cells}")
    seeds = [r for r in rows if "seed" in r["checkpoint"]]
    if len(seeds) > 1:
        for label, pick in (
            ("seeds min", min),
            ("seeds median", statistics.median),
            ("seeds max", max),
        ):
            vals = [pick([r["layers"][i][key] for r in seeds]) for i in range(L)]
            lines.append(f"{label:24s}" + "".join(f"{format(v, spec):>10s}" for v in vals))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [one(path) for path in args.checkpoints]
    print(
        f"{len(rows)} checkpoints, M = {rows[0]['machines']}, {rows[0]['prompts']} held-out "
        "prompts each (seed 0)"
    )
    for key, spec, title in (
        ("cd_ratio", ".3f", "cross-machine / within-machine C/D write factor (paper: 1)"),
        ("d_spread", ".2%", "D copies' spread after the layer (paper: 0)"),
        ("c_spread", ".2%", "C copies' spread after the layer (paper: 0)"),
        ("cd_factor_residual", ".2%", "C/D blocks off a scaled identity"),
        ("averaged", ".3f", "MSE with this layer's factors made equal, over the network's"),
    ):
        print(f"\n{title}")
        print("\n".join(table(rows, key, spec)))
    print("\nMSE with every layer's factors made equal, over the network's:")
    for r in rows:
        print(
            f"  {r['checkpoint']:24s}{r['averaged_every_layer']:.3f}  "
            f"(network {r['network_mse']:.3g})"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
