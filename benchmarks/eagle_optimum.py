"""How good can an L-step EAGLE be on a model's own task, and how close is the network to it?

Usage: python benchmarks/eagle_optimum.py [MODEL.pt] [--tuning 8192] [--held-out 8192]

Runs the `projection` and `optimum` views of the extraction with large prompt sets: EAGLE with the
steps read off the weights (projection), EAGLE with steps fitted by Levenberg–Marquardt with the
exact Jacobian to the true D (`optimal`) and to the network's predictions (`distilled`), each with
its final gradient. Prompts are scaled and read out as the network does.
"""

from __future__ import annotations

import argparse
import time

from eagle_probe import checkpoint
from eagle_probe.extract import build_context, run_views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="trained_models/centralized.pt")
    parser.add_argument("--tuning", type=int, default=8192, help="prompts the steps are fitted on")
    parser.add_argument("--held-out", type=int, default=8192, help="prompts the MSEs are on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, task, _ = checkpoint.load(args.model)
    start = time.perf_counter()
    ctx = build_context(
        model,
        task,
        probe_batch_size=64,
        seed=args.seed,
        test_batch=args.held_out,
        tuning_batch=args.tuning,
    )
    run_views(ctx, ("projection", "optimum"))
    proj, opt = ctx.results["projection"].json, ctx.results["optimum"].json
    net = opt["network_mse"]
    print(f"{args.model}: {args.held_out} held-out prompts, {args.tuning} tuning prompts")
    print(f"zero predictor                 MSE {ctx.zero_mse:.4e}")
    print(f"network                        MSE {net:.4e}")
    print(f"weights projected onto EAGLE   MSE {proj['projected_mse']:.4e}")
    print(f"EAGLE, weight-read steps       MSE {opt['start_mse']:.4e}")
    for name in ("distilled", "optimal"):
        f = opt[name]
        print(
            f"EAGLE, {name:9s} steps        MSE {f['mse']:.4e} ({f['mse'] / net:.3f}x network)"
            f"  |grad| {f['gradient_norm']:.2e}, relative {f['relative_gradient']:.2e}, "
            f"{'converged' if f['converged'] else 'NOT converged'} after {f['iterations']} it."
        )
        print(f"    a = {[round(v, 4) for v in f['a_steps']]}")
        print(f"    c = {[round(v, 4) for v in f['c_steps']]}")
    print(f"start (projection): a = {[round(v, 4) for v in opt['start']['a_steps']]}")
    print(f"                    c = {[round(v, 4) for v in opt['start']['c_steps']]}")
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
