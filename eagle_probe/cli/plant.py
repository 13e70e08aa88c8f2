"""`eagle-probe plant`: write a model whose weights run given EAGLE steps."""

from __future__ import annotations

import argparse
import math

from eagle_probe.cli.common import (
    PROBE_PROMPTS,
    Parser,
    enter_claim,
    finite_float,
    finite_outputs,
    memory_budget,
    nonneg_int,
    positive_int,
    publish,
)
from eagle_probe.errors import EagleProbeError

HELP = "write a model whose weights run given EAGLE steps (any regime)"


def add_plant(parser: Parser) -> None:
    parser.add_argument("--n", type=positive_int, default=18, help="columns of A (18)")
    parser.add_argument("--d", type=positive_int, default=18, help="rows of A (18)")
    parser.add_argument("--n-prime", type=positive_int, default=2, help="columns of C, D (2)")
    parser.add_argument("--d-prime", type=positive_int, default=2, help="rows of B, D (2)")
    parser.add_argument("--a-steps", required=True, help="comma-separated a_0,…,a_{L-1}")
    parser.add_argument("--c-steps", required=True, help="comma-separated c_0,…,c_{L-1}")
    parser.add_argument(
        "--regime",
        default="centralized",
        help="centralized (eagle, the default), distributed (eagle-distributed, the paper's "
        "architecture: one head per machine, C/D copied on every machine), distributed-open "
        "(eagle-distributed, values reading every machine) or constrained (eagle-sketched, a "
        "random rank-r sketch per layer)",
    )
    parser.add_argument(
        "--cross-a",
        type=finite_float,
        default=0.0,
        help="distributed regimes: every head also writes this multiple of its A/B update into "
        "the next machine's A/B columns (A traffic the family never has; 0)",
    )
    parser.add_argument(
        "--machines", type=positive_int, default=3, help="distributed: machines M (3)"
    )
    parser.add_argument(
        "--rank", type=positive_int, default=5, help="constrained: sketch rank r (5)"
    )
    parser.add_argument(
        "--sketch-seed", type=nonneg_int, default=0, help="constrained: seed of the sketches (0)"
    )
    parser.add_argument(
        "--heads",
        type=positive_int,
        default=None,
        help="heads per layer (1; distributed regimes: one per machine)",
    )
    parser.add_argument("--dtype", default="float32", help="float32 or float64 (float32)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    parser.add_argument("-o", "--out", required=True, help="checkpoint to write")


def _steps(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise EagleProbeError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise EagleProbeError(f"{name} must be one or more finite numbers, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    from eagle_probe import budget, checkpoint, files, regimes
    from eagle_probe.cli.train import check_regime_options
    from eagle_probe.layouts import plant
    from eagle_probe.model import DTYPES, ModelConfig
    from eagle_probe.tasks import TaskConfig

    a_steps, c_steps = _steps(args.a_steps, "--a-steps"), _steps(args.c_steps, "--c-steps")
    if len(a_steps) != len(c_steps):
        raise EagleProbeError(
            f"--a-steps has {len(a_steps)} values but --c-steps has {len(c_steps)}; give one "
            "of each per layer"
        )
    if args.dtype not in DTYPES:
        raise EagleProbeError(f"unknown dtype {args.dtype!r}; choose from {', '.join(DTYPES)}")
    if args.regime not in regimes.REGIMES:
        raise EagleProbeError(
            f"unknown regime {args.regime!r}; choose from {', '.join(regimes.REGIMES)}"
        )
    check_regime_options(args)  # --machines, --rank only where the regime takes them
    spec = regimes.get(args.regime)
    if spec.machines and args.n % args.machines:
        raise EagleProbeError(f"--machines {args.machines} must divide --n {args.n}")
    if "sketch" in spec.views and args.rank > args.n:
        raise EagleProbeError(f"--rank {args.rank} must lie in [1, --n = {args.n}]")
    if args.cross_a and not spec.machines:
        raise EagleProbeError(f"--cross-a needs a distributed regime, not {args.regime}")
    out = files.check_file(files.as_path(args.out, "-o/--out"), force=args.force)
    try:
        cfg = ModelConfig(
            regime=args.regime,
            n=args.n,
            d=args.d,
            n_prime=args.n_prime,
            d_prime=args.d_prime,
            n_layers=len(a_steps),
            n_heads=args.heads,
            machines=args.machines,
            rank=args.rank,
            normalize="none",  # the planted steps act on the prompt itself
            dtype=args.dtype,
        )
    except ValueError as err:
        raise EagleProbeError(str(err)) from None
    task = TaskConfig(
        n=args.n, d=args.d, n_prime=args.n_prime, d_prime=args.d_prime, rank=min(10, args.n, args.d)
    )
    budget.check_model(cfg, memory_budget(args))
    budget.check(
        max(budget.plant_bytes(cfg), budget.forward_bytes(cfg, PROBE_PROMPTS)),
        f"planting {len(a_steps)} layer(s) of width {cfg.width} (n = {cfg.n})",
        memory_budget(args),
    )
    claim = enter_claim(args, files.output_files([out], force=args.force))
    model = plant(cfg, a_steps, c_steps, sketch_seed=args.sketch_seed, cross_a=args.cross_a)
    finite_outputs(model, task, "the planted steps overflow", "plant smaller steps")
    family = spec.families[0]
    planted = {"a_steps": a_steps, "c_steps": c_steps, "family": family}
    if "sketch" in spec.views:
        planted["sketch_seed"] = args.sketch_seed
    if args.cross_a:
        planted["cross_a"] = args.cross_a
    metrics = {"planted": planted}
    claim.write(out, lambda handle: checkpoint.dump(handle, model, task, metrics))
    publish(args)
    print(f"wrote {out}: {len(a_steps)} planted {family} layers, {cfg.heads} head(s), {args.dtype}")
    return 0
