"""`eagle-probe timeline`: when each layer of a training run becomes its algorithm."""

from __future__ import annotations

import argparse

from eagle_probe.cli.common import (
    Parser,
    _budget,
    _claim,
    _out_dir,
    _positive_int,
    _publish,
    _seed,
    _write_results,
)

HELP = "extract each checkpoint of a train --save-every run"


def _add_timeline(parser: Parser) -> None:
    parser.add_argument("run_dir", help="run directory of train --save-every (MODEL.steps/)")
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="write DIR/timeline.json and its figures (PNG) here",
    )
    parser.add_argument(
        "--test-batch",
        type=_positive_int,
        default=1024,
        help="held-out prompts of each checkpoint's test MSE (1024)",
    )
    parser.add_argument("--seed", type=_seed, default=0, help="seed of the prompts (0)")
    parser.add_argument(
        "--force", action="store_true", help="write into an existing --out (its files replaced)"
    )


def run(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe import files
    from eagle_probe.plots import timeline_figures
    from eagle_probe.timeline import run_checkpoints, timeline

    run_checkpoints(args.run_dir)  # a directory without checkpoints fails before --out is made
    out = _out_dir(args.out, args.force)
    tmp = _claim(args, files.output_dir(out, force=args.force))
    result = timeline(
        args.run_dir, seed=args.seed, test_batch=args.test_batch, max_bytes=_budget(args)
    )
    payload = result.json
    payload["timings"]["total"] = time.perf_counter() - start
    names = _write_results(tmp, "timeline", payload, timeline_figures(payload))
    _publish(args)
    print(result.render())
    print(f"wrote {out / 'timeline.json'} and {', '.join(names)}")
    return 0
