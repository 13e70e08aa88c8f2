"""The batched torch EAGLE on many small problems: seconds, against its own matrix products.

    .venv/bin/python benchmarks/torch_eagle_batch.py [--problems 10000] [--n 20] [--device cpu]

Solves `problems` Gaussian n × n least-squares problems (seed 0) at once with
`solvers.solve_eagle_torch` (float64, rtol 1e-10) and prints its seconds (best of --repeat), its
iterations, how many problems are certified, the largest error against `torch.linalg.solve`, the
seconds its matrix products alone take at the batched-matmul rate measured here (three n × n
products per problem and iteration) and the ratio; then the NumPy solver one problem at a time on
--loop of them, its seconds scaled to the batch. Target (CPU): ≤ 1.0 s for 10,000 20 × 20 to
1e-10, within 2× of the products' time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from eagle_probe.solvers import solve_eagle
from eagle_probe.torch_eagle import solve_eagle_torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loop", type=int, default=500)
    args = parser.parse_args()
    device = torch.device(args.device)
    rng = np.random.default_rng(0)
    A = torch.from_numpy(rng.standard_normal((args.problems, args.n, args.n))).to(device)
    b = torch.from_numpy(rng.standard_normal((args.problems, args.n))).to(device)
    ref = torch.linalg.solve(A, b)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    solve_eagle_torch(A[:100], b[:100])  # warm-up
    best = np.inf
    for _ in range(args.repeat):
        sync()
        t0 = time.perf_counter()
        x, info = solve_eagle_torch(A, b, rtol=1e-10)
        sync()
        best = min(best, time.perf_counter() - t0)
    work, its = solve_eagle_torch.last_work, solve_eagle_torch.last_iterations
    mm = np.inf
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        torch.bmm(A, A)
        sync()
        mm = min(mm, time.perf_counter() - t0)
    products = 3 * mm * work / args.problems
    err = torch.linalg.vector_norm(x - ref, dim=1) / torch.linalg.vector_norm(ref, dim=1)
    print(
        f"torch EAGLE {args.problems} x {args.n}x{args.n} on {device} (threads "
        f"{torch.get_num_threads()}): {best:.3f} s, {its} iterations (slowest), "
        f"{work / args.problems:.1f} per problem, certified {int((info == 0).sum())}, "
        f"max error {float(err.max()):.2e}"
    )
    print(
        f"  one batched {args.n}x{args.n} matmul {mm * 1e3:.2f} ms "
        f"({2 * args.n**3 * args.problems / mm / 1e9:.1f} GFLOP/s): products alone "
        f"{products:.3f} s, ratio {best / products:.2f}"
    )
    An, bn = A[: args.loop].cpu().numpy(), b[: args.loop].cpu().numpy()
    t0 = time.perf_counter()
    for j in range(len(An)):
        solve_eagle(An[j], bn[j])
    loop = (time.perf_counter() - t0) * args.problems / len(An)
    print(f"  NumPy EAGLE one by one: {loop:.3f} s for {args.problems} (from {args.loop})")


if __name__ == "__main__":
    main()
