"""The batched torch EAGLE on many small problems: seconds, against its own matrix products.

    .venv/bin/python benchmarks/torch_eagle_batch.py [--problems 10000] [--n 20] [--device cpu]
        [--threads T] [--repeat 5] [--loop 500]

Solves `problems` Gaussian n × n least-squares problems (seed 0) at once with
`solvers.solve_eagle_torch` (float64, rtol 1e-10), --repeat times, and prints the median wall
seconds and the median CPU seconds of the process (on a shared machine the CPU seconds are the
solver's own; the wall seconds also hold the time other processes took the cores), its
iterations, the info counts, the largest error against `torch.linalg.solve`, and its matrix
products' time: three n × n batched products per problem and iteration (Σ over iterations of the
problems still in the batch) at the rate one batched n × n product into preallocated memory runs
here, measured between the solves (median), as wall and CPU seconds; and the step's own three
products at their shapes (Z = [A_l | κC_l] is n × (n + 1): ZᵀZ, TᵀVᵀ and Z T with T
(n + 1) × (n + 1), `torch_eagle._solve`), in its slices of `SLICE` problems, timed the same
way; and all its products: those, the first bound's Gram matrix and squarings and the
certificates' two n × n products per problem checked; then the ratios to each (OpenMP threads
wait passively unless OMP_WAIT_POLICY says otherwise). --loop problems are then solved by the
NumPy solver one at a time, its seconds scaled to the batch (--loop 0: skipped). The load
average is printed before and after. Target (CPU): ≤ 1.0 s for 10,000 20 × 20 to 1e-10,
within 2× of the products' time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# OpenMP threads that spin while they wait lose their core to the other processes of a shared
# machine, and every product then waits for them (2 threads: 18 s instead of 1.7 s here);
# OMP_WAIT_POLICY=ACTIVE in the environment measures that
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from eagle_probe import torch_eagle  # noqa: E402
from eagle_probe.solvers import solve_eagle  # noqa: E402
from eagle_probe.torch_eagle import SLICE, SQUARINGS, solve_eagle_torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loop", type=int, default=500)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load = os.getloadavg()
    rng = np.random.default_rng(0)
    A = torch.from_numpy(rng.standard_normal((args.problems, args.n, args.n))).to(device)
    b = torch.from_numpy(rng.standard_normal((args.problems, args.n))).to(device)
    ref = torch.linalg.solve(A, b)
    product = torch.empty_like(A)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(f) -> tuple[float, float]:
        sync()
        w0, c0 = time.perf_counter(), time.process_time()
        f()
        sync()
        return time.perf_counter() - w0, time.process_time() - c0

    # the step's three products at their shapes, into preallocated memory (torch_eagle._solve)
    n = args.n
    Z = torch.randn(args.problems, n, n + 1, dtype=A.dtype, device=device)
    T = torch.randn(args.problems, n + 1, n + 1, dtype=A.dtype, device=device)
    Vt = torch.randn(args.problems, n + 1, n, dtype=A.dtype, device=device)
    P = torch.empty(min(SLICE, args.problems), n + 1, n + 1, dtype=A.dtype, device=device)
    newVt, newZ = torch.empty_like(Vt), torch.empty_like(Z)

    def step_products() -> None:  # a slice of SLICE problems at a time, as the solver runs them
        for i in range(0, args.problems, SLICE):
            j = min(args.problems, i + SLICE)
            torch.bmm(Z[i:j].mT, Z[i:j], out=P[: j - i])
            torch.bmm(T[i:j].mT, Vt[i:j], out=newVt[i:j])
            torch.bmm(Z[i:j], T[i:j], out=newZ[i:j])

    solve_eagle_torch(A[:100], b[:100])  # warm-up
    torch.bmm(A, A, out=product)
    step_products()
    runs, mms, steps = [], [], []
    for _ in range(args.repeat):
        runs.append(timed(lambda: solve_eagle_torch(A, b, rtol=1e-10)))
        mms += [timed(lambda: torch.bmm(A, A, out=product)) for _ in range(3)]
        steps += [timed(step_products) for _ in range(3)]
    checked = []  # problems at each certificate check: two n × n products each (G, GᵀG)
    certify = torch_eagle._certify

    def counted(At, *rest):
        checked.append(At.shape[0])
        return certify(At, *rest)

    torch_eagle._certify = counted
    try:
        x, info = solve_eagle_torch(A, b, rtol=1e-10)
    finally:
        torch_eagle._certify = certify
    work, its = solve_eagle_torch.last_work, solve_eagle_torch.last_iterations
    wall, cpu = (statistics.median(t[i] for t in runs) for i in (0, 1))
    mm_wall, mm_cpu = (statistics.median(t[i] for t in mms) for i in (0, 1))
    per_problem = work / args.problems
    products_wall, products_cpu = 3 * mm_wall * per_problem, 3 * mm_cpu * per_problem
    step_wall, step_cpu = (statistics.median(t[i] for t in steps) * per_problem for i in (0, 1))
    err = torch.linalg.vector_norm(x - ref, dim=1) / torch.linalg.vector_norm(ref, dim=1)
    codes, counts = torch.unique(info, return_counts=True)
    infos = ", ".join(f"{int(c)}: {int(k)}" for c, k in zip(codes, counts, strict=True))
    print(
        f"torch EAGLE {args.problems} x {args.n}x{args.n} on {device} (threads "
        f"{torch.get_num_threads()}, OMP_WAIT_POLICY {os.environ['OMP_WAIT_POLICY']}, load "
        f"{load[0]:.2f}): {wall:.3f} s wall, {cpu:.3f} s CPU "
        f"(median of {args.repeat}), {its} iterations (slowest), {per_problem:.1f} per problem, "
        f"info {{{infos}}}, max error {float(err.max()):.2e}"
    )
    print(
        f"  one batched {args.n}x{args.n} matmul {mm_wall * 1e3:.2f} ms wall, {mm_cpu * 1e3:.2f} "
        f"ms CPU ({2 * args.n**3 * args.problems / mm_wall / 1e9:.1f} GFLOP/s): products alone "
        f"{products_wall:.3f} s wall, {products_cpu:.3f} s CPU; ratio {wall / products_wall:.2f} "
        f"wall, {cpu / products_cpu:.2f} CPU"
    )
    print(
        f"  the step's own three products ({n}x{n + 1} and {n + 1}x{n + 1} operands): "
        f"{step_wall:.3f} s wall, {step_cpu:.3f} s CPU; ratio {wall / step_wall:.2f} wall, "
        f"{cpu / step_cpu:.2f} CPU"
    )
    # and every other product it runs: the first bound of ‖Ã‖₂ (its Gram matrix and SQUARINGS − 1
    # squarings, per problem) and the certificates' G = Ã M and GᵀG (per problem checked), at the
    # rate of one batched n × n product (their refinement's matrix-vector products not counted)
    others = (SQUARINGS * args.problems + 2 * sum(checked)) / args.problems
    all_wall, all_cpu = step_wall + others * mm_wall, step_cpu + others * mm_cpu
    print(
        f"  all its products: the step's, the first bound's {SQUARINGS} per problem and the "
        f"certificates' 2 per problem checked ({sum(checked)} checked): {all_wall:.3f} s wall, "
        f"{all_cpu:.3f} s CPU; ratio {wall / all_wall:.2f} wall, {cpu / all_cpu:.2f} CPU"
    )
    if args.loop > 0:
        An, bn = A[: args.loop].cpu().numpy(), b[: args.loop].cpu().numpy()
        t0 = time.perf_counter()
        for j in range(len(An)):
            solve_eagle(An[j], bn[j])
        loop = (time.perf_counter() - t0) * args.problems / len(An)
        print(f"  NumPy EAGLE one by one: {loop:.3f} s for {args.problems} (from {args.loop})")
    load = os.getloadavg()
    print(f"  load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
