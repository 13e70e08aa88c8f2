"""`eagle-probe timeline`: when each layer of a training run becomes its algorithm."""

from __future__ import annotations

import argparse

from eagle_probe.cli.common import (
    Parser,
    add_force,
    add_results_out,
    add_seed,
    claim_dir,
    memory_budget,
    out_dir,
    positive_int,
    publish_results,
)

HELP = "extract each checkpoint of a train --save-every run"


def add_timeline(parser: Parser) -> None:
    parser.add_argument("run_dir", help="run directory of train --save-every (MODEL.steps/)")
    add_results_out(parser, "timeline")
    parser.add_argument(
        "--test-batch",
        type=positive_int,
        default=1024,
        help="held-out prompts of each checkpoint's test MSE (1024)",
    )
    add_seed(parser, 0, "the prompts")
    add_force(parser)


def run(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe.plots import timeline_figures
    from eagle_probe.timeline import run_checkpoints, timeline

    run_checkpoints(args.run_dir)  # a directory without checkpoints fails before --out is made
    out = out_dir(args.out, args.force)
    tmp = claim_dir(args, out)
    result = timeline(
        args.run_dir, seed=args.seed, test_batch=args.test_batch, max_bytes=memory_budget(args)
    )
    publish_results(args, out, tmp, "timeline", result, timeline_figures, start)
    return 0
