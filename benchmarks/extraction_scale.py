"""Benchmark: extraction of planted EAGLE models at research sizes, each in its own process.

Usage: python benchmarks/extraction_scale.py [--sizes 64,128,256] [--threads N] [--shipped]
       python benchmarks/extraction_scale.py --sizes 512   (n = d = 512, 12 layers, 4 heads)

Per size, `eagle-probe plant` writes a centralized model whose layers run known EAGLE steps
(normalize none; steps of order 0.1–0.8 / median ‖A‖₂² of the task so the iteration is stable),
then `eagle-probe extract --out DIR` runs on it in a child process. Printed per size: wall time of
the extract process, its CPU time and peak resident memory as the operating system measured them
(`os.wait4` of the child), and the worst relative error of the recovered steps a_l, c_l against
the planted ones. `--shipped` also times `extract trained_models/centralized.pt`. No targets are
asserted here; docs/results.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from eagle_probe.tasks import TaskConfig, make_generator, sample

ROOT = Path(__file__).resolve().parents[1]
SIZES = {64: (8, 2), 128: (8, 2), 256: (12, 4), 512: (12, 4)}  # n = d: (layers, heads)
TARGETS = {64: (15, 1.5), 128: (30, 3.0), 256: (100, 6.0), 512: (600, 8.0)}  # s, GB (peak RSS)


def planted_steps(n: int, layers: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """Steps scaled by the median ‖A‖₂² of the task's prompts."""
    task = TaskConfig(n=n, d=n, rank=min(10, n))
    A = sample(task, 64, make_generator(seed), dtype=torch.float64).A
    norm2 = float(torch.linalg.matrix_norm(A, ord=2).median() ** 2)
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.1, 0.3, layers) / norm2
    c = rng.uniform(0.3, 0.8, layers) / norm2
    return [float(x) for x in a], [float(x) for x in c]


def run(argv: list[str]) -> tuple[float, float, float, int]:
    """Run `eagle-probe argv` in a child: (wall s, CPU s, peak RSS GB, exit code)."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"  eagle-probe {' '.join(argv[:2])} failed ({code}): {err.strip()[-300:]}")
    # ru_maxrss is in KiB on Linux
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / 1e9, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,128,256")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--shipped", action="store_true")
    parser.add_argument("--max-memory", default="8")
    args = parser.parse_args()
    threads = ["--threads", str(args.threads)] if args.threads else []
    print("| model | wall s | CPU s | peak RSS GB | step error | target |")
    print("|---|---|---|---|---|---|")
    timings: dict[str, dict[str, float]] = {}
    counts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.shipped:
            out = Path(tmp) / "shipped"
            wall, cpu, rss, _ = run(
                ["extract", str(ROOT / "trained_models/centralized.pt"), "--out", str(out)]
                + threads
            )
            print(f"| centralized.pt | {wall:.1f} | {cpu:.1f} | {rss:.2f} | – | ≤ 10 s |")
        for n in (int(s) for s in args.sizes.split(",")):
            layers, heads = SIZES.get(n, (8, 2))
            a, c = planted_steps(n, layers)
            model = Path(tmp) / f"planted{n}.pt"
            plant = ["plant", "--n", str(n), "--d", str(n), "--heads", str(heads)]
            plant += ["--a-steps", ",".join(map(repr, a)), "--c-steps", ",".join(map(repr, c))]
            if run(plant + ["-o", str(model)])[3] != 0:
                continue
            out = Path(tmp) / f"out{n}"
            wall, cpu, rss, code = run(
                ["extract", str(model), "--out", str(out), "--max-memory", args.max_memory]
                + threads
            )
            error = float("nan")
            if code == 0:
                payload = json.loads((out / "extraction.json").read_text())
                timings[f"n = {n}"] = payload["timings"]
                counts[f"n = {n}"] = {
                    "probes": payload["model"]["probe_batch"],
                    "held-out": payload["model"]["held_out_prompts"],
                    "tuning (optimum)": payload["views"]["optimum"]["tuning_prompts"],
                    "attribution": payload["views"]["attribution"]["prompts"],
                    "projection": payload["views"]["projection"]["prompts"],
                }
                layers_json = payload["layers"]
                got_a = np.array([row["a_step"] for row in layers_json])
                got_c = np.array([row["c_step"] for row in layers_json])
                error = float(
                    max(np.max(np.abs(got_a - a) / np.abs(a)), np.max(np.abs(got_c - c) / c))
                )
            seconds, gb = TARGETS.get(n, (float("nan"), float("nan")))
            print(
                f"| n = d = {n}, {layers} layers, {heads} heads | {wall:.1f} | {cpu:.1f} | "
                f"{rss:.2f} | {error:.1e} | ≤ {seconds:g} s, ≤ {gb:g} GB |",
                flush=True,
            )

    if timings:
        sizes = list(timings)
        print("\nSeconds per stage (wall, in the extract process):\n")
        print("| stage | " + " | ".join(sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        stages = [k for k in next(iter(timings.values())) if k != "total"] + ["total"]
        for stage in stages:
            cells = [f"{timings[s].get(stage, float('nan')):.2f}" for s in sizes]
            print(f"| {stage} | " + " | ".join(cells) + " |")
        print("\nPrompts each part used:\n")
        print("| prompts | " + " | ".join(sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for key in next(iter(counts.values())):
            print(f"| {key} | " + " | ".join(str(counts[s][key]) for s in sizes) + " |")


if __name__ == "__main__":
    main()
