"""Is the family optimum of `extract` global? Many starts, each fitted to convergence.

Usage: python benchmarks/family_optimum.py MODEL.pt [--starts 48] [--tuning 2048]
       [--held-out 8192] [--seed 0] [--json OUT.json]

The extraction's optimum view (`eagle_probe.fit.optimum.multistart`) screens 24 starts on a few
prompts and refines the best few. Here every start is fitted by the same Levenberg–Marquardt to
convergence on `--tuning` prompts, in the family the extraction reads for the model (its own
regime, its own learned sketch where it has one): the view's own starts (the weight-read steps,
theory, paper, minimax and its random normalised ones) and `--starts` more, (η_l, γ_l) per layer
log-uniform in [0.05, 2] × [0.05, 4], normalised by each layer's ‖A_l‖₂² as the view's are.
Each fit is scored on `--held-out` fresh prompts and checked for blow-ups on a validation draw as
large (a fit above the zero predictor there is unstable and never the best). Prints the
distribution of the stable held-out MSEs and the network's MSE over the best.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from eagle_probe import checkpoint
from eagle_probe.extract import build_context, run_views
from eagle_probe.fit.optimum import eagle_mse, fit_steps, normalised_steps, starts_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--starts", type=int, default=48, help="random starts (48)")
    parser.add_argument("--tuning", type=int, default=2048, help="prompts the steps fit (2048)")
    parser.add_argument("--held-out", type=int, default=8192, help="prompts the MSEs are on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()
    model, task, _ = checkpoint.load(args.model)
    t0 = time.perf_counter()
    ctx = build_context(
        model,
        task,
        probe_batch_size=64,
        seed=args.seed,
        test_batch=args.held_out,
        tuning_batch=args.tuning,
    )
    run_views(ctx, ("eagle", "projection"))
    geo, tune, held, valid = ctx.geometry, ctx.tuning, ctx.held_out, ctx.validation
    L = geo.layers
    proj = ctx.results["projection"].json["layers"]
    a0, c0 = [x["a_step"] for x in proj], [x["c_step"] for x in proj]
    rng = np.random.default_rng(args.seed)
    # the view's own starts (weight-read, theory, paper, minimax, its random normalised ones)
    named = [s for s in starts_for(geo, tune.z0, a0, c0, rng) if s[0] != "jitter"]
    for _ in range(args.starts):  # and more: (η_l, γ_l) per layer, log-uniform, normalised
        eta, gamma = (
            np.exp(rng.uniform(np.log(0.05), np.log(2.0), L)),
            np.exp(rng.uniform(np.log(0.05), np.log(4.0), L)),
        )
        named.append(("random", *normalised_steps(geo, tune.z0, eta, gamma)))
    zero_valid = float(np.mean(valid.D**2))
    rows = []
    for kind, a, c in named:
        fit = fit_steps(geo, tune, tune.D, a, c, max_iter=400)
        mse = eagle_mse(geo, held, fit["a_steps"], fit["c_steps"])
        v = eagle_mse(geo, valid, fit["a_steps"], fit["c_steps"])
        stable = math.isfinite(v) and v < zero_valid and math.isfinite(mse)
        rows.append(
            {
                "kind": kind,
                "held_out_mse": mse if math.isfinite(mse) else None,
                "validation_mse": v if math.isfinite(v) else None,
                "tuning_loss": fit["loss"],
                "converged": bool(fit["converged"]),
                "relative_gradient": fit["relative_gradient"],
                "stable": bool(stable),
                "a_steps": [float(x) for x in fit["a_steps"]],
                "c_steps": [float(x) for x in fit["c_steps"]],
            }
        )
    net = ctx.network_mse
    good = sorted((r for r in rows if r["stable"]), key=lambda r: r["held_out_mse"])
    family = ctx.results["eagle"].json.get("family_name")
    print(f"{args.model}: family {family}, {len(rows)} starts, {len(good)} stable")
    print(f"  network MSE {net:.4e}, zero predictor {ctx.zero_mse:.4e}")
    if good:
        best = good[0]
        mses = np.array([r["held_out_mse"] for r in good])
        print(
            f"  best {best['held_out_mse']:.4e} (network {net / best['held_out_mse']:.2f}x it; "
            f"from a {best['kind']} start, converged {best['converged']}), median "
            f"{np.median(mses):.4e}, within 1% of the best: {int(np.sum(mses <= mses[0] * 1.01))}"
        )
        print(f"  a = {[round(x, 4) for x in best['a_steps']]}")
        print(f"  c = {[round(x, 4) for x in best['c_steps']]}")
    print(f"  {time.perf_counter() - t0:.0f} s")
    if args.json:
        out = {"model": args.model, "family": family, "network_mse": net, "starts": rows}
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
