"""Benchmark: distributed EAGLE, distributed GD and ADMM on real local gloo processes.

Usage: python benchmarks/distributed_processes.py [--n 1000] [--world 4] [--eps 1e-8]

Prints rounds, bytes sent per rank per round, wall time, and agreement with the single-process
simulation (`eagle.complete_distributed`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from eagle_probe import dist, eagle
from eagle_probe.bench import block_problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--eps", type=float, default=1e-8)
    parser.add_argument("--maxiter", type=int, default=20000)
    args = parser.parse_args()
    A, B, C, ref = block_problem(args.n, args.n, 10, 10.0, np.random.default_rng(0))
    start = time.perf_counter()
    D_sim, sim = eagle.complete_distributed(A, B, C, args.world)
    sim_s = time.perf_counter() - start
    start = time.perf_counter()
    res = dist.run_local(args.world, dist.eagle_worker, A, B, C)
    wall = time.perf_counter() - start
    gap = max(float(np.abs(r["D"] - D_sim).max()) for r in res) / float(np.abs(D_sim).max())
    err = float(np.linalg.norm(res[0]["D"] - ref) / np.linalg.norm(ref))
    print(f"d = n = {args.n}, {args.world} processes")
    print(
        f"EAGLE: {res[0]['rounds']} rounds (simulation {sim['rounds']}, {sim_s:.2f} s), "
        f"error {err:.1e}, {res[0]['bytes_per_round']:.0f} bytes per rank per round "
        f"(= {res[0]['bytes_per_round'] / 8:.0f} floats; (d + d')·n' = "
        f"{(A.shape[0] + B.shape[0]) * C.shape[1]}), wall {wall:.2f} s incl. start-up, "
        f"max gap to the simulation {gap:.1e}"
    )
    for name, fn in (("distributed GD", dist.gd_worker), ("ADMM", dist.admm_worker)):
        start = time.perf_counter()
        r = dist.run_local(args.world, fn, A, B, C, ref, args.eps, args.maxiter)[0]
        print(
            f"{name}: {r['rounds']} rounds to {r['error']:.1e} (target {args.eps:.0e}), "
            f"{r['bytes_per_round']:.0f} bytes per rank per round, total "
            f"{r['bytes_sent'] / 1e6:.2f} MB per rank, wall {time.perf_counter() - start:.1f} s"
        )
    print(f"EAGLE total per rank: {res[0]['bytes_sent'] / 1e6:.4f} MB")


if __name__ == "__main__":
    main()
