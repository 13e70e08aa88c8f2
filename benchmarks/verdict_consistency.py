"""Benchmark: the verdict agrees with itself on every seed checkpoint.

Usage: python benchmarks/verdict_consistency.py [--quick] [--shipped] [--full]

Extracts every checkpoint of trained_models/seeds/ (62 small models of every regime; `--shipped`
adds trained_models/*.pt, `--quick` takes the first seed of each configuration) with every view,
term discovery included, and checks its verdict with tests/verdict_checks.py: the label against
the rule table's conditions on the extraction's own numbers, every sentence against the label,
every ratio the network's MSE over the optimum's, the terms counted from the terms view, and no
unreadable number in the printed report. Prints one line per checkpoint (label, the rule that
gave it, the contradictions found) and the total count; target 0. The extraction draws 1,024
held-out and 128 tuning prompts (the command draws 4,096 and 512: `--full`), probe batch 256.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the checks the tests use

import verdict_checks  # noqa: E402

from eagle_probe import checkpoint  # noqa: E402
from eagle_probe.extract import extract  # noqa: E402


def checkpoints(quick: bool, shipped: bool) -> list[Path]:
    """The seed checkpoints (the first of each configuration with `quick`), then the shipped."""
    seeds = sorted((ROOT / "trained_models" / "seeds").glob("*.pt"))
    if quick:
        first: dict[str, Path] = {}
        for path in seeds:
            first.setdefault(path.stem.rsplit("_seed", 1)[0], path)
        seeds = list(first.values())
    return seeds + (sorted((ROOT / "trained_models").glob("*.pt")) if shipped else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed per configuration")
    parser.add_argument("--shipped", action="store_true", help="also trained_models/*.pt")
    parser.add_argument("--full", action="store_true", help="the command's prompt counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = {} if args.full else {"test_batch": 1024, "tuning_batch": 128}
    total, start = 0, time.perf_counter()
    paths = checkpoints(args.quick, args.shipped)
    for path in paths:
        t0 = time.perf_counter()
        model, task, _ = checkpoint.load(path)
        ex = extract(model, task, **sizes)
        found = verdict_checks.contradictions(ex, ex.render(str(path)))
        total += len(found)
        v = ex.views["verdict"].json["model"]
        print(
            f"{path.relative_to(ROOT)}: {v['label']} ({v['rule']}, confidence "
            f"{v['confidence']}), {len(found)} contradiction(s), {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        for line in found:
            print(f"    {line}", flush=True)
    print(
        f"{total} contradiction(s) in {len(paths)} checkpoints "
        f"({time.perf_counter() - start:.0f} s)"
    )
    return 0 if total == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
