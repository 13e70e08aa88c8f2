"""`eagle-probe bench`: benchmark the recovered solver against classical ones."""

from __future__ import annotations

import argparse
import json
import sys

from eagle_probe.cli.common import (
    Parser,
    add_seed,
    claim_dir,
    memory_budget,
    out_dir,
    publish,
)
from eagle_probe.errors import EagleProbeError

HELP = "benchmark the recovered solver against classical ones"


def add_bench(parser: Parser) -> None:
    parser.add_argument("--suite", default="quick", help="quick, paper or real (quick)")
    parser.add_argument(
        "--out", default="bench-out", help="directory for CSV, PNG and summary.md (bench-out)"
    )
    parser.add_argument("--json", action="store_true", help="print the tables as one JSON object")
    add_seed(parser, 0, "the problems")
    parser.add_argument("--force", action="store_true", help="write into an existing --out")


def run(args: argparse.Namespace) -> int:
    from eagle_probe.bench import SUITES, run_bench

    if args.suite not in SUITES:
        raise EagleProbeError(f"unknown suite {args.suite!r}; choose from {', '.join(SUITES)}")
    out = out_dir(args.out, args.force)
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    tmp = claim_dir(args, out)
    tables = run_bench(
        args.suite, tmp, seed=args.seed, log=log, max_bytes=memory_budget(args), device=args.device
    )
    publish(args)
    if args.json:
        payload = {
            name: json.loads(t.to_json(orient="records"))
            for name, t in tables.items()
            if not name.endswith("history")
        }
        print(json.dumps(payload))
    else:
        print(f"wrote {out}/summary.md, {len(tables)} CSV tables and plots")
    return 0
