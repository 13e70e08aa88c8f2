"""The honesty of the solver.py a user receives, for every shipped model.

For each shipped model `eagle-probe extract trained_models/NAME.pt --out DIR` writes DIR/solver.py
(skipped when DIR/solver.py exists and --reuse is given); the file is imported and run on
- hard problems (tests/problems.py `hard_matrix`: Hilbert, graded rows, graded diagonals, Kahan,
  clustered small singular values, rank-deficient), m < 70, n < 80, consistent or not, scaled by
  1, 2^±500, 1e-100 or 3.7: how many return info 0, and how many of those are wrong (outside
  `problems.ls_allowance` of numpy's lstsq);
- ordinary problems (`problems.problem`, κ log-uniform in [1, 1e8]): the share certified;
- the model's own prompts (4,096 of its task): the share certified and the median iterations,
  against the shipped template (the theory's steps only).

    python benchmarks/exported_solvers.py [--hard 420] [--ordinary 1000] [--out bench-out/exported]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the problem families the tests use

from problems import HARD_FAMILIES, hard_matrix, ls_allowance, problem  # noqa: E402

from eagle_probe import solver_template  # noqa: E402
from eagle_probe.export import load_solver  # noqa: E402

SHIPPED = (
    "centralized",
    "centralized_8head",
    "distributed",
    "distributed_open",
    "constrained",
    "constrained_8head",
)
SCALES = (1.0, 2.0**-500, 2.0**500, 1e-100, 3.7)


def hard_cases(count: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    for i in range(count):
        family = HARD_FAMILIES[i % len(HARD_FAMILIES)]
        m = int(rng.integers(2, 70))
        n = int(rng.integers(1, 80))
        yield (
            family,
            m,
            n,
            float(rng.random()),
            int(rng.integers(2**31)),
            bool(rng.random() < 0.5),
            SCALES[int(rng.integers(len(SCALES)))],
        )


def rel(x, ref):
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


def run_hard(solver, cases):
    info0 = wrong = 0
    reasons = collections.Counter()
    for family, m, n, p, seed, consistent, scale in cases:
        A = hard_matrix(family, m, n, p, seed)
        rng = np.random.default_rng(seed + 1)
        b = A @ rng.standard_normal(n) if consistent else rng.standard_normal(m)
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        stats = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            x, info = solver.lstsq(A * scale, b, stats=stats)
        reasons[stats["reason"]] += 1
        if info == 0:
            info0 += 1
            wrong += not rel(x * scale, ref) <= ls_allowance(A, b, ref)
    return info0, wrong, reasons


def run_ordinary(solver, count: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    certified = wrong = 0
    for _ in range(count):
        m, n = (int(v) for v in rng.integers(1, 80, 2))
        kappa = 10 ** float(rng.uniform(0, 8))
        A, b = problem(m, n, kappa, seed=int(rng.integers(2**31)), consistent=rng.random() < 0.5)
        x, info = solver.lstsq(A, b)
        if info == 0:
            certified += 1
            ref = np.linalg.lstsq(A, b, rcond=None)[0]
            wrong += not rel(x, ref) <= ls_allowance(A, b, ref)
    return certified, wrong


def run_own(solver, task, count: int):
    import torch

    from eagle_probe.tasks import make_generator, sample

    p = sample(task, count, make_generator(7), dtype=torch.float64)
    certified, iterations = 0, []
    for i in range(count):
        _, stats = solver.complete(
            p.A[i].numpy(), p.B[i].numpy(), p.C[i].numpy(), return_stats=True
        )
        certified += stats["info"] == 0
        iterations.append(stats["iterations"])
    return certified, float(np.median(iterations))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hard", type=int, default=420, help="hard problems per model")
    ap.add_argument("--ordinary", type=int, default=1000, help="ordinary problems per model")
    ap.add_argument("--own", type=int, default=4096, help="the model's own prompts")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "exported")
    ap.add_argument("--reuse", action="store_true", help="keep solver.py files already written")
    args = ap.parse_args()
    from eagle_probe import checkpoint

    cases = list(hard_cases(args.hard))
    print(
        "| solver | hard: info 0 | hard: wrong info 0 | hard: other outcomes | ordinary certified "
        "| own prompts certified | median iterations |"
    )
    print("|---|---:|---:|---|---:|---:|---:|")
    rows = [("template (theory's steps)", solver_template, None)]
    for name in SHIPPED:
        out = args.out / name
        if not (args.reuse and (out / "solver.py").exists()):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "eagle_probe", "extract", f"trained_models/{name}.pt",
                 "--out", str(out), "--force"],
                check=True, cwd=ROOT, capture_output=True,
            )  # fmt: skip
            print(f"<!-- extract {name}: {time.perf_counter() - start:.0f} s -->", flush=True)
        rows.append((name, load_solver(out / "solver.py"), name))
    task = checkpoint.load("trained_models/centralized.pt")[1]
    for label, solver, name in rows:
        own_task = task if name is None else checkpoint.load(f"trained_models/{name}.pt")[1]
        info0, wrong, reasons = run_hard(solver, cases)
        certified, wrong_ord = run_ordinary(solver, args.ordinary)
        own, its = run_own(solver, own_task, args.own)
        others = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if k != "certified")
        print(
            f"| {label} | {info0} / {len(cases)} | {wrong} | {others} | "
            f"{certified} / {args.ordinary} ({100 * certified / args.ordinary:.1f}%, "
            f"{wrong_ord} wrong) | {own} / {args.own} | {its:g} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
