"""Benchmark: wall clock of EAGLE against LAPACK lstsq on dense n × n problems.

Usage: python benchmarks/eagle_wallclock.py [--n 2000] [--repeats 1]

Every solver runs on the same κ-prescribed problem with the machine's default BLAS threads; the
table gives seconds, the ratio to LAPACK gelsd, iterations and the relative error.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from eagle_probe import solvers
from eagle_probe.bench import kappa_problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--kappas", default="1e2,1e4,1e6,1e8")
    args = parser.parse_args()
    rows = []
    for kappa in (float(k) for k in args.kappas.split(",")):
        A, b = kappa_problem(args.n, args.n, kappa, np.random.default_rng(0))
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        for name in ("lstsq", "eagle", "eagle_fast"):
            best = min(
                (solvers.run(name, A, b, reference=ref, record=False) for _ in range(args.repeats)),
                key=lambda r: r.seconds,
            )
            rows.append({"n": args.n, "kappa": kappa} | best.to_dict())
    table = pd.DataFrame(rows)
    base = table[table.solver == "lstsq"].set_index("kappa").seconds
    table["vs_lstsq"] = table.seconds / table.kappa.map(base)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
