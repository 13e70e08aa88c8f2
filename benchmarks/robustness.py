"""Robustness measurements: solver scale sweep, rank-deficient stopping, hostile-checkpoint memory.

Usage: python benchmarks/robustness.py

Prints
  1. `lstsq` over A and b scaled by 10^±300 (info and relative error against the minimum-norm
     answer of the unscaled problem, "n/r" where that answer is not representable in float64);
     the same for `complete` with one of A, B, C scaled, and for the distributed and sketched
     solvers;
  2. iterations and relative error of `lstsq` and `complete` on 200 × 200 problems of rank 120;
  3. the peak resident memory of a fresh process loading a < 10 KB checkpoint whose config
     declares n = 20,000 (and the interpreter alone, for comparison).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from eagle_probe import solver_template as eagle


def _problem(m, n, kappa, rng, rank=None):
    k = min(m, n) if rank is None else rank
    U, _ = np.linalg.qr(rng.standard_normal((m, k)))
    V, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return (U * np.logspace(0, -np.log10(kappa), k)) @ V.T


def _rel(x, ref):
    top = np.max(np.abs(ref))
    return np.linalg.norm(x / top - ref / top) / np.linalg.norm(ref / top)


def _representable(x):
    top = np.max(np.abs(x))
    return np.all(np.isfinite(x)) and top >= np.finfo(float).tiny


def scale_sweep() -> None:
    rng = np.random.default_rng(0)
    A, b = _problem(30, 20, 1e3, rng), rng.standard_normal(30)
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    sbs = [1e-300, 1e-155, 1.0, 1e155, 1e300]
    print("lstsq: info:relative error; rows A × s_A, columns b × s_b", [f"{s:.0e}" for s in sbs])
    for sa in [1e-310, 1e-300, 1e-200, 1e-154, 1e-100, 1.0, 1e100, 1e154, 1e200, 1e300]:
        cells = []
        for sb in sbs:
            x, info = eagle.lstsq(A * sa, b * sb)
            with np.errstate(over="ignore", under="ignore"):
                if sa > 1e-308:
                    true = ref * (sb / sa) if np.isfinite(sb / sa) else ref * sb / sa
                else:  # a subnormal A has lost digits: the reference is for A as stored
                    stored = np.linalg.lstsq(np.ldexp(A * sa, 1000), b, rcond=None)[0]
                    true = np.ldexp(stored * sb, 1000)
            ok = _representable(true)
            cells.append(f"{info}:{_rel(x, true):.0e}" if ok and info == 0 else f"{info}:n/r")
        print(f"  A×{sa:.0e}  " + "  ".join(cells))
    X = rng.standard_normal((14, 5)) @ rng.standard_normal((5, 16))
    A, B, C = X[:12, :12], X[12:, :12], X[:12, 12:]
    D = B @ np.linalg.pinv(A, rcond=1e-12) @ C
    print("complete / distributed (3 machines) / sketched (r = 6): info:relative error")
    for s in [1e-300, 1e-200, 1e-120, 1e-154, 1.0, 1e154, 1e200, 1e300]:
        cells = []
        for which in "ABC":
            blocks = {"A": A, "B": B, "C": C}
            blocks[which] = blocks[which] * s
            f = 1 / s if which == "A" else s
            Dn, info, _ = eagle.complete(**blocks, return_info=True)
            Dd, sd = eagle.complete_distributed(**blocks, machines=3)
            Ds, ss = eagle.complete_sketched(
                **blocks, r=6, rng=np.random.default_rng(0), maxiter=3000
            )
            cells.append(
                f"{which}: {info}:{_rel(Dn / f, D):.0e} {sd['info']}:{_rel(Dd / f, D):.0e} "
                f"{ss['info']}:{_rel(Ds / f, D):.0e}"
            )
        print(f"  ×{s:.0e}  " + " | ".join(cells))


def rank_deficient() -> None:
    print("200 × 200, rank 120: iterations, relative error, info")
    for label, kappa in [
        ("gaussian product", None),
        ("κ 1e2", 1e2),
        ("κ 1e4", 1e4),
        ("κ 1e6", 1e6),
        ("κ 1e8", 1e8),
    ]:
        rng = np.random.default_rng(0)
        if kappa is None:
            A = rng.standard_normal((200, 120)) @ rng.standard_normal((120, 200))
        else:
            A = _problem(200, 200, kappa, rng, rank=120)
        b = rng.standard_normal(200)
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        stats: dict = {}
        x, info = eagle.lstsq(A, b, stats=stats)
        B, C = rng.standard_normal((3, 200)), rng.standard_normal((200, 3))
        Dref = B @ np.linalg.lstsq(A, C, rcond=None)[0]
        D, dinfo, dit = eagle.complete(A, B, C, return_info=True)
        print(
            f"  {label:17s} lstsq {stats['iterations']:3d} {_rel(x, ref):.1e} info {info:3d}"
            f" | complete {dit:3d} {_rel(D, Dref):.1e} info {dinfo:3d}"
        )


def hostile_memory() -> None:
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.model import LinearTransformer, ModelConfig
    from eagle_probe.tasks import TaskConfig, make_generator

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bomb.pt"
        cfg = ModelConfig(n=6, d=5, n_layers=2)
        model = LinearTransformer(cfg, generator=make_generator(0))
        checkpoint.save(path, model, TaskConfig(n=6, d=5, rank=3))
        payload = torch.load(path, weights_only=True)
        payload["model_config"].update(n=20000, d=20000)
        payload["task_config"].update(n=20000, d=20000)
        torch.save(payload, path)
        code = (
            "import resource, sys\nfrom eagle_probe import checkpoint\n"
            "if sys.argv[2] == 'load':\n"
            "    try:\n        checkpoint.load(sys.argv[1], max_bytes=float(sys.argv[3]))\n"
            "    except Exception as e:\n        print(str(e)[:90])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        )
        print(f"peak RSS, fresh process, {path.stat().st_size} byte checkpoint declaring n = 20000")
        for what, budget in [("import only", "0"), ("load", str(4 * 2**30)), ("load", "1e12")]:
            out = (
                subprocess.run(
                    [sys.executable, "-c", code, str(path), what, budget],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                .stdout.strip()
                .splitlines()
            )
            note = out[0] if len(out) > 1 else ""
            print(
                f"  {what:11s} budget {float(budget):.0e} B: {int(out[-1]) / 1024:.0f} MiB  {note}"
            )


if __name__ == "__main__":
    warnings.simplefilter("ignore", RuntimeWarning)
    scale_sweep()
    rank_deficient()
    hostile_memory()
