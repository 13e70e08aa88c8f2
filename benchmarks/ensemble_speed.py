"""Seeds in one process against sequential runs: seed-steps per second, side by side.

    python benchmarks/ensemble_speed.py [--seeds 8] [--steps 40] [--batch 1024] [--regime R]

Trains `--seeds` seeds of one configuration twice, on one thread: one `train.train` run per seed
after another, and all seeds together with `ensemble.train_ensemble`; the two are interleaved
`--repeats` times so a load change on a shared machine hits both. Both validate once, at the end,
on the default 8192 held-out prompts. Prints CPU and wall seconds and seed-steps per second.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from eagle_probe.ensemble import train_ensemble
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig
from eagle_probe.train import TrainConfig, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--regime", default="centralized")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = ModelConfig(regime=args.regime, n_heads=args.heads, dtype=args.dtype)
    task = TaskConfig()
    run = TrainConfig(steps=args.steps, batch=args.batch, eval_every=args.steps)
    seeds = list(range(args.seeds))
    times: dict[str, list[tuple[float, float]]] = {"sequential": [], "together": []}
    for _ in range(args.repeats):
        for kind in times:
            cpu, wall = time.process_time(), time.perf_counter()
            if kind == "sequential":
                for seed in seeds:
                    train(
                        model, task, TrainConfig(**(run.to_dict() | {"seed": seed})), progress=False
                    )
            else:
                train_ensemble(model, task, run, seeds, progress=False)
            times[kind].append((time.process_time() - cpu, time.perf_counter() - wall))
    seed_steps = args.seeds * args.steps
    print(
        f"{args.regime}, heads {model.heads}, {args.dtype}, {args.seeds} seeds x "
        f"{args.steps} steps, batch {args.batch}, 1 thread, {args.repeats} repeats (best)"
    )
    rate = {}
    for kind, rows in times.items():
        cpu = min(c for c, _ in rows)
        wall = min(w for _, w in rows)
        rate[kind] = seed_steps / cpu
        print(
            f"  {kind:10s} CPU {cpu:7.1f} s  wall {wall:7.1f} s  "
            f"{seed_steps / cpu:6.1f} seed-steps/s (CPU)  "
            f"median wall {statistics.median(w for _, w in rows):.1f} s"
        )
    print(f"  speed-up (CPU seed-steps/s): {rate['together'] / rate['sequential']:.2f}x")


if __name__ == "__main__":
    main()
