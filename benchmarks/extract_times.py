"""Benchmark: the whole `eagle-probe extract MODEL --out DIR` process on every shipped model, cold.

Usage: python benchmarks/extract_times.py [--repeats 3] [--models centralized,constrained,…]
       [--threads N] [--json OUT]

Each model is extracted `--repeats` times as a fresh process (imports, checkpoint, views, export,
report and figures), one model after another; per model the median, smallest and largest wall
seconds, the CPU seconds of the median run and its peak resident memory, the per-stage seconds of
that run's extraction.json, and `eagle-probe --help` and `eagle-probe extract --help`. The load
average is printed before each model: the targets are for a machine doing nothing else.
Targets (2-core CPU): `--help` ≤ 1 s; centralized.pt ≤ 6 s; every other shipped model ≤ 20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = (
    "centralized",
    "centralized_8head",
    "distributed",
    "constrained",
    "lsa_1layer",
    "lsa_3layer",
)
RUN = "import sys; from eagle_probe.cli import main; sys.exit(main())"
SCRIPT = Path(sys.executable).parent / "eagle-probe"  # the installed command, as users run it
CLI = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-c", RUN]


def timed(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak resident GB of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 2**20  # ru_maxrss: KiB on Linux, the largest child so far


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=None, help="pass --threads N to extract")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    os.environ.update(env)
    rows = []
    for label, argv in (("--help", ["--help"]), ("extract --help", ["extract", "--help"])):
        walls = [timed(CLI + argv)[0] for _ in range(args.repeats)]
        rows.append({"what": f"eagle-probe {label}", "median_s": statistics.median(walls),
                     "min_s": min(walls), "max_s": max(walls)})  # fmt: skip
        print(f"eagle-probe {label}: median {statistics.median(walls):.3f} s")
    for name in args.models.split(","):
        model = ROOT / "trained_models" / f"{name}.pt"
        print(f"{name}: load average {os.getloadavg()[0]:.2f}", flush=True)
        runs = []
        for _ in range(args.repeats):
            out = Path(tempfile.mkdtemp(prefix="extract-times-")) / "out"
            argv = CLI + ["extract", str(model), "--out", str(out), "--no-progress"]
            if args.threads:
                argv += ["--threads", str(args.threads)]
            wall, cpu, peak = timed(argv)
            stages = json.loads((out / "extraction.json").read_text())["timings"]
            shutil.rmtree(out.parent)
            runs.append((wall, cpu, peak, stages))
        runs.sort(key=lambda r: r[0])
        wall, cpu, peak, stages = runs[len(runs) // 2]
        rows.append({"what": f"extract {name}.pt --out", "median_s": wall, "min_s": runs[0][0],
                     "max_s": runs[-1][0], "cpu_s": cpu, "peak_gb_so_far": peak,
                     "stages": {k: round(v, 3) for k, v in stages.items()}})  # fmt: skip
        print(
            f"  wall median {wall:.2f} s (min {runs[0][0]:.2f}, max {runs[-1][0]:.2f}), "
            f"CPU {cpu:.2f} s; stages: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
