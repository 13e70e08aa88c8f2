"""`eagle-probe compare`: the network beside its extracted algorithm off the training
distribution."""

from __future__ import annotations

import argparse

from eagle_probe import names
from eagle_probe.cli.common import (
    Parser,
    add_force,
    add_model,
    add_results_out,
    add_seed,
    claim_dir,
    load_model,
    more_steps,
    out_dir,
    positive_int,
    publish_results,
)
from eagle_probe.errors import EagleProbeError

HELP = "score a checkpoint and its algorithm on shifted prompts"


def add_compare(parser: Parser) -> None:
    add_model(parser)
    add_results_out(parser, "compare")
    parser.add_argument(
        "--prompts", type=positive_int, default=256, help="prompts per sweep point (256)"
    )
    parser.add_argument(
        "--sweeps",
        default=None,
        help=f"comma-separated sweeps ({','.join(names.SWEEPS)}; default: the model's layout's, "
        "scale,kappa,rank,alpha,noise,samples or, in the sample layout, "
        "input_scale,query_scale,task_noise,samples)",
    )
    parser.add_argument(
        "--more-steps",
        type=more_steps,
        default=4,
        help="the algorithm is also run for this many times the network's layers (4; at most "
        "1000; feature layout)",
    )
    add_seed(parser, 0, "every prompt drawn")
    add_force(parser)


def run(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe import checkpoint
    from eagle_probe.compare import CompareConfig, compare
    from eagle_probe.plots import compare_figures

    sweeps = None
    if args.sweeps is not None:
        sweeps = tuple(s.strip() for s in args.sweeps.split(",") if s.strip())
    unknown = [s for s in sweeps or () if s not in names.SWEEPS]
    if unknown or sweeps == ():
        raise EagleProbeError(
            f"--sweeps: unknown sweep(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(names.SWEEPS)}"
        )
    if args.prompts < 2:
        raise EagleProbeError(f"--prompts must be at least 2, got {args.prompts}")
    out = out_dir(args.out, args.force)
    model, task = load_model(args)
    cfg = CompareConfig(
        prompts=args.prompts,
        sweeps=sweeps,
        more_steps=args.more_steps,
        seed=args.seed,
        sensitivity_prompts=min(32, args.prompts),
    )
    tmp = claim_dir(args, out)
    result = compare(model, task, cfg)
    result.json["model"]["checkpoint"] = str(args.model)
    result.json["model"]["sha256"] = checkpoint.sha256(args.model)
    publish_results(args, out, tmp, "compare", result, compare_figures, start)
    return 0
