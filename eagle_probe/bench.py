"""Benchmarks: the recovered solver against the network and against classical solvers.

`run_bench(suite, out_dir)` writes one CSV per section, PNG plots and `summary.md`, and returns the
tables. Suites are parameter grids:

  quick   small sizes, a few minutes on 2 CPU cores (what the tests exercise)
  paper   the paper's sizes (n = d = 240 and 2000; distributed n = d = 1000)
  real    the SuiteSparse matrices, an RBF Nyström extrapolation, MovieLens-100K if present
"""

from __future__ import annotations

import importlib.util
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eagle_probe import eagle, solvers
from eagle_probe import solver_template as kernel

# The eight SuiteSparse (HB group) matrices ship as package data; see that folder's README.md for
# their provenance and LICENSE.md for their licence (CC BY 4.0).
DEFAULT_SUITESPARSE = Path(__file__).resolve().parent / "data" / "suitesparse"


def suitesparse_dir(root: Path | None = None) -> Path:
    """Where `real` reads its .mtx files: $EAGLE_PROBE_SUITESPARSE, else `root`, else the
    matrices shipped with the package."""
    return Path(os.environ.get("EAGLE_PROBE_SUITESPARSE") or root or DEFAULT_SUITESPARSE)


def suitesparse_files(root: Path | None = None) -> list[Path]:
    """The .mtx files `real` reads. A directory named by $EAGLE_PROBE_SUITESPARSE (or `root`)
    must exist and hold at least one; the shipped one may be absent (an install without data)."""
    from eagle_probe.errors import EagleProbeError

    chosen = os.environ.get("EAGLE_PROBE_SUITESPARSE") or root
    where = suitesparse_dir(root)
    if chosen is None and not where.is_dir():
        return []
    source = "$EAGLE_PROBE_SUITESPARSE" if os.environ.get("EAGLE_PROBE_SUITESPARSE") else "root"
    if not where.is_dir():
        state = "does not exist" if not where.exists() else "is not a directory"
        raise EagleProbeError(
            f"{source} {where} {state}; point it at a directory of .mtx files, or unset it to use "
            "the matrices shipped with eagle-probe"
        )
    files = sorted(where.glob("*.mtx"))
    if not files and chosen is not None:
        raise EagleProbeError(f"{source} {where} holds no .mtx files")
    return files


@dataclass(frozen=True)
class Suite:
    kappas: tuple[float, ...]
    sizes: tuple[int, ...]
    baselines: tuple[str, ...]
    maxiter: int  # cap for the iterative baselines
    dist_size: int
    machines: tuple[int, ...]
    dist_eps: float
    dist_maxiter: int
    sketch_size: int
    sketch_steps: int
    fidelity: bool
    real: bool
    centralized: bool = True


SUITES = {
    "quick": Suite(
        kappas=(1e2, 1e4),
        sizes=(60,),
        baselines=("lstsq", "cg", "lsmr", "gd", "newton_schulz"),
        maxiter=5000,
        dist_size=60,
        machines=(1, 3),
        dist_eps=1e-6,
        dist_maxiter=3000,
        sketch_size=48,
        sketch_steps=150,
        fidelity=True,
        real=False,
    ),
    "paper": Suite(
        kappas=(1e2, 1e4, 1e6, 1e8),
        sizes=(240, 2000),
        baselines=("lstsq", "cg", "lsqr", "lsmr", "gd", "lbfgs", "newton_schulz"),
        maxiter=20000,
        dist_size=1000,
        machines=(1, 3, 5, 8),
        dist_eps=1e-6,
        dist_maxiter=20000,
        sketch_size=240,
        sketch_steps=400,
        fidelity=True,
        real=False,
    ),
    "real": Suite(
        kappas=(),
        sizes=(),
        baselines=("lstsq", "cg", "lsmr"),
        maxiter=20000,
        dist_size=0,
        machines=(),
        dist_eps=0,
        dist_maxiter=0,
        sketch_size=0,
        sketch_steps=0,
        fidelity=False,
        real=True,
        centralized=False,
    ),
}


def geometric_matrix(m: int, n: int, rank: int, kappa: float, rng: np.random.Generator):
    """U diag(σ) Vᵀ (m, n) of rank `rank`, σ geometric from 1 to 1/κ, U and V orthonormal
    columns from Gaussian draws (U's first)."""
    U, _ = np.linalg.qr(rng.standard_normal((m, rank)))
    V, _ = np.linalg.qr(rng.standard_normal((n, rank)))
    return (U * np.logspace(0, -math.log10(kappa), rank)) @ V.T


def completion(A: np.ndarray, B: np.ndarray, C: np.ndarray, rcond: float) -> np.ndarray:
    """The exact D = B A⁺ C, A⁺ with singular values below rcond · σ_1 cut off."""
    return B @ np.linalg.pinv(A, rcond=rcond) @ C


def kappa_problem(m: int, n: int, kappa: float, rng: np.random.Generator):
    """Dense A (m, n) with singular values geometric from 1 to 1/κ; b with a residual part."""
    return geometric_matrix(m, n, min(m, n), kappa, rng), rng.standard_normal(m)


def block_problem(d: int, n: int, rank: int, kappa: float, rng: np.random.Generator, q: int = 2):
    """Blocks of a rank-`rank` X = [[A, C], [B, D]] whose A has condition number κ."""
    X = geometric_matrix(d + q, n + q, rank, kappa, rng)
    A, B, C = X[:d, :n], X[d:, :n], X[:d, n:]
    return A, B, C, completion(A, B, C, 1e-13)


def allowance(kappa: float) -> float:
    """The error a solver reporting success may have on a problem of condition number κ:
    max(1e-6, 1e3 · κ · eps) (what float64 allows, with room)."""
    return max(1e-6, 1e3 * kappa * float(np.finfo(np.float64).eps))


def wrong_success(info: int, error: float, kappa: float) -> bool:
    """A wrong "success": info 0 with an error against the reference above the allowance."""
    return bool(info == 0 and not error <= allowance(kappa))


def condition_number(A: np.ndarray) -> float:
    """σ_1/σ_r over the singular values above numpy's lstsq cutoff max(m, n) · eps · σ_1 (the
    κ̂ of EAGLE's certificate); 1 for a zero A."""
    if not np.any(A):
        return 1.0
    s, rank, _ = kernel.singular_values(A)
    return float(s[0] / s[rank - 1])


# --- sections -----------------------------------------------------------------------------

OWN_MAXITER = ("eagle", "newton_schulz")  # run at their own maxiter, not the suite's cap


def _run(name: str, A, b, ref, suite: Suite, *, record: bool) -> solvers.Run:
    """`solvers.run` as every section runs it: rtol 1e-10, the suite's iteration cap for the
    iterative baselines."""
    maxiter = None if name in OWN_MAXITER else suite.maxiter
    return solvers.run(name, A, b, reference=ref, rtol=1e-10, maxiter=maxiter, record=record)


def _row(r: solvers.Run, kappa: float) -> dict:
    """A table row of run `r` on a problem of condition number κ, with its wrong-success flag."""
    return {"kappa": kappa} | r.to_dict() | {"wrong_success": wrong_success(r.info, r.error, kappa)}


def centralized(suite: Suite, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every solver on κ-prescribed dense problems; returns (summary, per-iteration history)."""
    rows, hist = [], []
    for n in suite.sizes:
        for kappa in suite.kappas:
            A, b = kappa_problem(n, n, kappa, rng)
            ref = np.linalg.lstsq(A, b, rcond=None)[0]
            names = ("eagle", "eagle_fast") + tuple(
                s for s in suite.baselines if not (n > 500 and s in ("gd", "lbfgs", "lsqr"))
            )
            for name in names:
                r = _run(name, A, b, ref, suite, record=n <= 500)
                if n > 500:  # clean timing: rerun without the history callback
                    r = _run(name, A, b, ref, suite, record=False)
                rows.append({"n": n} | _row(r, kappa))
                hist += [
                    {"n": n, "kappa": kappa, "solver": name, "iteration": i + 1, "error": e}
                    for i, e in enumerate(r.history)
                ]
    table = pd.DataFrame(rows)
    for _, group in table.groupby(["n", "kappa"]):
        base = group[group.solver == "lstsq"].seconds
        if len(base):
            table.loc[group.index, "time_vs_lstsq"] = group.seconds / float(base.iloc[0])
    return table, pd.DataFrame(hist)


def distributed(suite: Suite, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rounds and floats per machine to reach eps: EAGLE vs distributed GD vs ADMM; then a
    diversity-index sweep for EAGLE."""
    d = n = suite.dist_size
    A, B, C, ref = block_problem(d, n, rank=10, kappa=10.0, rng=rng)
    rows = []
    for M in suite.machines:
        div = solvers.diversity_index(A, M)
        for fn in (solvers.distributed_eagle, solvers.distributed_gd, solvers.admm):
            start = time.perf_counter()
            res = fn(A, B, C, M, ref, eps=suite.dist_eps, maxiter=suite.dist_maxiter)
            res = dict(res)
            res.pop("rho", None)
            rows.append(
                {"machines": M, "diversity": div, "seconds": time.perf_counter() - start}
                | res
                | {
                    "floats_total": res["rounds"] * res["floats_per_round"],
                    "reached": res["error"] <= suite.dist_eps,
                }
            )
    table = pd.DataFrame(rows)
    sweep = []
    M = max(suite.machines)
    for overlap in (1.0, 0.3, 0.1, 0.03, 0.01):
        Ad, Bd, Cd, refd = diverse_problem(d, M, overlap, rng)
        res = solvers.distributed_eagle(
            Ad, Bd, Cd, M, refd, eps=suite.dist_eps, maxiter=min(2000, suite.dist_maxiter)
        )
        sweep.append(
            {"machines": M, "overlap": overlap, "diversity": solvers.diversity_index(Ad, M)} | res
        )
    return table, pd.DataFrame(sweep)


def diverse_problem(
    d: int,
    machines: int,
    overlap: float,
    rng: np.random.Generator,
    rank: int = 12,
    per_machine: int = 6,
):
    """Machines whose column spaces cover a shared `rank`-dim space unevenly.

    Machine μ's columns span Q (E_μ + overlap · N_μ): E_μ picks `per_machine` coordinates of its
    own (cyclically), N_μ is Gaussian. overlap → 0 leaves each machine its own few directions;
    larger overlap mixes them. The diversity index is measured, not set.
    """
    Q, _ = np.linalg.qr(rng.standard_normal((d + 2, rank)))
    cols = []
    for mu in range(machines):
        E = np.zeros((rank, per_machine))
        start = (mu * rank) // machines
        E[(start + np.arange(per_machine)) % rank, np.arange(per_machine)] = 1.0
        cols.append(Q @ (E + overlap * rng.standard_normal((rank, per_machine))))
    X = np.hstack(cols + [Q @ rng.standard_normal((rank, 2))])
    A, B, C = X[:d, :-2], X[d:, :-2], X[:d, -2:]
    return A, B, C, completion(A, B, C, 1e-13)


def constrained(suite: Suite, rng: np.random.Generator) -> pd.DataFrame:
    """Sketched EAGLE vs sketched SGD at equal FLOPs for r ∈ {n/8, n/4, n/2, n}."""
    n = suite.sketch_size
    A, B, C, ref = block_problem(n, n, rank=n // 4, kappa=10.0, rng=rng)
    rows = []
    for frac in (8, 4, 2, 1):
        r = max(1, n // frac)
        e_err, e_flops = solvers.sketched_eagle_errors(
            A, B, C, r, np.random.default_rng(1), ref, steps=suite.sketch_steps
        )
        budget = e_flops * len(e_err)
        s_steps = int(
            budget // solvers.sketched_sgd(A, B, C, r, np.random.default_rng(2), ref, steps=1)[1]
        )
        s_err, s_flops = solvers.sketched_sgd(
            A, B, C, r, np.random.default_rng(2), ref, steps=max(1, s_steps)
        )
        for frac_budget in (0.25, 0.5, 1.0):
            fl = frac_budget * budget
            e_at = e_err[max(0, min(len(e_err), int(fl // e_flops)) - 1)]
            s_at = s_err[max(0, min(len(s_err), int(fl // s_flops)) - 1)]
            rows.append(
                {
                    "n": n,
                    "r": r,
                    "flops": fl,
                    "eagle_error": e_at,
                    "sgd_error": s_at,
                    "ratio_sgd_over_eagle": s_at / max(e_at, 1e-300),
                }
            )
    return pd.DataFrame(rows)


def read_matrix(path: Path, max_bytes: float = 4 * 2**30) -> np.ndarray:
    """A Matrix Market file as a dense real float64 array, checked before any solver sees it:
    the declared size against the memory budget (before reading), then a real field, at least
    one row and column, and finite entries. Errors name the file."""
    import scipy.io

    from eagle_probe.budget import check
    from eagle_probe.errors import EagleProbeError

    try:
        st = os.stat(path)  # follows a symbolic link: its target is what would be read
    except OSError as exc:
        raise EagleProbeError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise EagleProbeError(
            f"{path}: not a regular file (a directory, FIFO, device or socket, or a link to one)"
        )
    check(st.st_size, f"{path} (its {st.st_size} bytes of text)", max_bytes)
    try:
        rows, cols, _, _, field, _ = scipy.io.mminfo(str(path))
    except (OSError, ValueError, IndexError, TypeError, OverflowError) as exc:
        raise EagleProbeError(f"{path}: not a readable Matrix Market file ({exc})") from None
    if field not in ("real", "integer", "pattern"):
        raise EagleProbeError(f"{path}: a {field} matrix; the benchmarks take real matrices only")
    if rows < 1 or cols < 1:
        raise EagleProbeError(f"{path}: declares a {rows} x {cols} matrix; need at least 1 x 1")
    # Four copies of the dense matrix and ten of the solvers' Gram-sized (max(m, n)²) work arrays:
    # EAGLE works on A Aᵀ-sized products (1 × 5000: 1.83 GiB peak with the interpreter, 1.86 GiB
    # estimated).
    check(
        8.0 * (4 * rows * cols + 10 * max(rows, cols) ** 2),
        f"{path} ({rows} x {cols}, dense, with its solver's copies and Gram matrices)",
        max_bytes,
    )
    try:
        A = scipy.io.mmread(str(path))
        A = np.asarray(A.todense() if hasattr(A, "todense") else A)
    except (OSError, ValueError, IndexError, TypeError, OverflowError) as exc:
        raise EagleProbeError(f"{path}: not a readable Matrix Market file ({exc})") from None
    if np.iscomplexobj(A) or not np.issubdtype(A.dtype, np.number):
        raise EagleProbeError(f"{path}: entries of type {A.dtype}; need real numbers")
    A = A.astype(np.float64)
    if A.shape != (rows, cols):
        raise EagleProbeError(f"{path}: holds a {A.shape} array but declares {rows} x {cols}")
    if not np.all(np.isfinite(A)):
        raise EagleProbeError(f"{path}: contains NaN or Inf entries")
    return A


def real_data(
    suite: Suite, rng: np.random.Generator, root: Path | None = None, max_bytes: float = 4 * 2**30
) -> tuple[pd.DataFrame, list[str]]:
    """SuiteSparse matrices as least-squares problems, an RBF Nyström slice, MovieLens.

    b = A x_true with x_true Gaussian; the reference is numpy's lstsq (rcond = max(m, n)·eps),
    the minimum-norm solution for the singular matrices."""
    notes = []
    files = suitesparse_files(root)
    rows = []
    if not files:
        notes.append(f"SuiteSparse matrices not found under {suitesparse_dir(root)}: skipped")
    matrices = [(path, read_matrix(path, max_bytes)) for path in files]  # all checked first
    for path, A in matrices:
        # A consistent right-hand side: the reference is then sensitive to κ, not κ².
        b = A @ rng.standard_normal(A.shape[1])
        start = time.perf_counter()
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        t_ref = time.perf_counter() - start
        kappa = condition_number(A)
        for name in ("eagle",) + suite.baselines:
            r = _run(name, A, b, ref, suite, record=False)
            rows.append(
                {"matrix": path.stem, "m": A.shape[0], "n": A.shape[1]}
                | _row(r, kappa)
                | {"reached_1e-8": r.error <= 1e-8, "lstsq_seconds": t_ref}
            )
    table = pd.DataFrame(rows)
    nys = nystrom_rbf(rng)
    table = pd.concat([table, nys], ignore_index=True)
    ml = movielens()
    if ml is not None:
        table = pd.concat([table, ml], ignore_index=True)
    notes.append(movielens_note())
    return table, notes


def nystrom_rbf(rng: np.random.Generator, landmarks: int = 240, dim: int = 3) -> pd.DataFrame:
    """Extrapolate an RBF kernel to unseen points from landmarks: EAGLE vs the exact B A⁺ C."""
    pts = rng.standard_normal((landmarks + 4, dim))
    K = np.exp(-np.square(pts[:, None] - pts[None]).sum(-1) / (2 * 1.5**2))
    A, B, C, D = (
        K[:landmarks, :landmarks],
        K[landmarks:, :landmarks],
        K[:landmarks, landmarks:],
        K[landmarks:, landmarks:],
    )
    exact = completion(A, B, C, 1e-10)
    start = time.perf_counter()
    est, info, its = eagle.complete(A, B, C, rtol=1e-10, return_info=True)
    seconds = time.perf_counter() - start
    error = float(np.linalg.norm(est - exact) / np.linalg.norm(exact))
    return pd.DataFrame(
        [
            {
                "matrix": "nystrom_rbf",
                "m": landmarks,
                "n": landmarks,
                "solver": "eagle",
                "info": info,
                "iterations": its,
                "seconds": seconds,
                "error": error,
                # exact is B A⁺ C at the cutoff 1e-10: the allowance uses that κ
                "wrong_success": wrong_success(info, error, 1e10),
                "error_vs_truth": float(np.linalg.norm(est - D) / np.linalg.norm(D)),
            }
        ]
    )


def movielens_file() -> Path | None:
    """ml-100k.inter as shipped inside the PyPI package recbole (read, never imported)."""
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(list(spec.submodule_search_locations)[0])
    path = base / "dataset_example" / "ml-100k" / "ml-100k.inter"
    return path if path.is_file() else None


def movielens(users: int = 300, items: int = 300, hidden: int = 50) -> pd.DataFrame | None:
    """Low-rank completion of a hidden block of MovieLens-100K ratings.

    The `users` most active users and `items` most rated items form X (ratings centred by their
    mean; unobserved visible entries set to 0). The last `hidden` users × `hidden` items are the
    D block; errors are RMSE over its observed ratings. EAGLE's iterates (early stopping is a
    spectral filter) are compared with the mean rating, the exact B A⁺ C and rank-k Nyström.
    """
    path = movielens_file()
    if path is None:
        return None
    data = np.loadtxt(path, skiprows=1, usecols=(0, 1, 2))
    u_ids, u_counts = np.unique(data[:, 0], return_counts=True)
    i_ids, i_counts = np.unique(data[:, 1], return_counts=True)
    top_u = u_ids[np.argsort(-u_counts)[:users]]
    top_i = i_ids[np.argsort(-i_counts)[:items]]
    u_pos = {u: k for k, u in enumerate(top_u)}
    i_pos = {i: k for k, i in enumerate(top_i)}
    R = np.full((users, items), np.nan)
    for u, i, r in data:
        if u in u_pos and i in i_pos:
            R[u_pos[u], i_pos[i]] = r
    d, n = users - hidden, items - hidden
    mean = float(np.nanmean(R[:d, :]))  # the hidden block's ratings are not used
    X = np.nan_to_num(R - mean)
    A, B, C = X[:d, :n], X[d:, :n], X[:d, n:]
    truth = R[d:, n:] - mean
    seen = ~np.isnan(truth)

    def rmse(D):
        return float(np.sqrt(np.mean((D[seen] - truth[seen]) ** 2)))

    rows = [{"method": "mean rating", "rmse": rmse(np.zeros_like(truth))}]
    for steps in (1, 2, 3, 5, 8, 12):
        D = eagle.complete(A, B, C, rtol=0.0, maxiter=steps)
        rows.append({"method": f"EAGLE, {steps} steps", "rmse": rmse(D)})
    D, info, its = eagle.complete(A, B, C, return_info=True)
    rows.append({"method": f"EAGLE to convergence ({its} steps)", "rmse": rmse(D)})
    rows.append({"method": "exact B A⁺ C", "rmse": rmse(completion(A, B, C, 1e-10))})
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    for k in (5, 10, 20):
        pinv_k = (Vt[:k].T / s[:k]) @ U[:, :k].T
        rows.append({"method": f"rank-{k} Nyström", "rmse": rmse(B @ pinv_k @ C)})
    table = pd.DataFrame(rows)
    table.insert(0, "matrix", "movielens_100k")
    table["observed_hidden_ratings"] = int(seen.sum())
    return table


def movielens_note() -> str:
    if movielens_file() is None:
        return "MovieLens-100K: skipped (install the optional `recbole` package with --no-deps)"
    return "MovieLens-100K: read from the recbole package's ml-100k.inter (not redistributed)"


def model_fidelity(model, task, paper: list[float]) -> pd.DataFrame:
    """Table-1 fidelity of one model per layer and reading: the EAGLE steps fitted on 256 probe
    prompts (seed 0), scored on 512 others (seed 1), against the paper's values `paper`."""
    from eagle_probe.capture import probe_batch
    from eagle_probe.extract import build_context, extract
    from eagle_probe.fit.fidelity import fidelity_table

    ex = extract(
        model, task, probe_batch_size=256, seed=0, control=False, views=("eagle", "fidelity")
    )
    held = build_context(
        model, task, probes=probe_batch(task, 512, 1), test_batch=8, tuning_batch=8
    )
    table = fidelity_table(held, ex.layers.a_step.to_numpy(), ex.layers.c_step.to_numpy())
    rows = []
    for row in table.itertuples():
        ref = paper[row.layer] if row.layer < len(paper) else math.nan
        rows.append(
            {
                "layer": row.layer,  # 0-based, as everywhere in eagle-probe
                "reading": row.reading,
                "fidelity": row.total,
                "relative": row.relative,
                "paper": ref,
                "better_than_paper": row.total <= ref,
            }
        )
    return pd.DataFrame(rows)


def fidelity(rng: np.random.Generator, models: Path) -> pd.DataFrame:
    """The extracted EAGLE against the network on held-out probes, per layer, in the paper's
    Table-1 metric: one step at a time and end to end (see eagle_probe.fit.fidelity)."""
    from eagle_probe import checkpoint
    from eagle_probe.fit.fidelity import paper_table1

    parts = []
    for name in ("centralized", "distributed", "constrained"):
        path = models / f"{name}.pt"
        if not path.exists():
            continue
        model, task, _ = checkpoint.load(path)
        parts.append(model_fidelity(model, task, paper_table1(name)).assign(model=name))
    if not parts:
        return pd.DataFrame(
            columns=[
                "model",
                "layer",
                "reading",
                "fidelity",
                "relative",
                "paper",
                "better_than_paper",
            ]
        )
    table = pd.concat(parts, ignore_index=True)
    return table[["model"] + [c for c in table.columns if c != "model"]]


def model_algorithm1(model, task, paper: list[float] | None = None) -> pd.DataFrame:
    """Algorithm 1 as the paper writes it (view `algorithm1`: ρ = ‖Ã_l‖₂⁻² recomputed every
    step, the regime's own form) per layer, reading and constants (`global`: the two constants;
    `per_layer`: η_l, γ_l), as `model_fidelity` scores the constant steps: fitted on 256 probe
    prompts (seed 0), Table 1 on 512 others (seed 1) in prompt units, against `paper` (default:
    the paper's Table 1 of the model's regime). Each row also carries the constants and the
    held-out MSE of the algorithm run for L steps beside the network's on the same prompts."""
    from eagle_probe.capture import probe_batch
    from eagle_probe.extract import build_context, run_views
    from eagle_probe.fit import algorithm1
    from eagle_probe.fit.fidelity import paper_table1

    paper = paper_table1(model.cfg.regime) if paper is None else paper
    # the extraction's context less what the view does not read (the implicit iterate), with as
    # many held-out prompts as it scores its MSEs on
    ctx = build_context(model, task, probe_batch_size=256, seed=0, iterate=False,
                        test_batch=algorithm1.HELD_OUT_PROMPTS, tuning_batch=8)  # fmt: skip
    run_views(ctx, ["algorithm1"])
    view = ctx.results["algorithm1"].json
    if not view["supported"]:
        raise ValueError(f"Algorithm 1 is not scored on this model: {view['reason']}")
    held = build_context(
        model, task, probes=probe_batch(task, 512, 1), test_batch=8, tuning_batch=8, iterate=False
    )
    geo = algorithm1.algorithm_geometry(held.geometry)
    rows = []
    for constants in algorithm1.READINGS:
        fitted = view["readings"][constants]
        etas = [lay["eta"] for lay in fitted["layers"]]
        gammas = [lay["gamma"] for lay in fitted["layers"]]
        for lay in algorithm1.score(held.cap, geo, etas, gammas):
            ref = paper[lay["layer"]] if lay["layer"] < len(paper) else math.nan
            for reading in ("one_step", "end_to_end"):
                rows.append(
                    {
                        "layer": lay["layer"],  # 0-based, as everywhere in eagle-probe
                        "constants": constants,
                        "reading": reading,
                        "fidelity": lay[reading]["total"],
                        "relative": lay[reading]["relative"],
                        "paper": ref,
                        "better_than_paper": lay[reading]["total"] <= ref,
                        "eta": lay["eta"],
                        "gamma": lay["gamma"],
                        "mse": fitted["mse"],
                        "network_mse": view["network_mse"],
                        "network_over_algorithm": fitted["network_over_algorithm"],
                    }
                )
    return pd.DataFrame(rows)


SEED_NAME = r"(?P<recipe>[a-z][a-z0-9_]*?)_seed(?P<seed>\d+)\.pt"


def seed_files(folder: Path, recipes: set[str] | None = None) -> list[tuple[Path, str, int]]:
    """Every `{recipe}_seed{k}.pt` in `folder` (only the named `recipes` when given), sorted by
    name: (path, recipe, k)."""
    import re

    out = []
    for path in sorted(folder.glob("*.pt")):
        match = re.fullmatch(SEED_NAME, path.name)
        if match and (recipes is None or match["recipe"] in recipes):
            out.append((path, match["recipe"], int(match["seed"])))
    return out


def _no_seeds(folder: Path, recipes: set[str] | None) -> ValueError:
    which = f" of the recipes {sorted(recipes)}" if recipes is not None else ""
    return ValueError(f"no {{recipe}}_seed{{k}}.pt checkpoint{which} in {folder}")


def seed_algorithm1(folder: Path, *, recipes: set[str] | None = None) -> pd.DataFrame:
    """Algorithm 1 as the paper writes it on every `{recipe}_seed{k}.pt` in `folder`
    (`model_algorithm1`): one row per model, constants, layer and reading, with its recipe, seed
    and regime."""
    from eagle_probe import checkpoint

    parts = []
    for path, recipe, seed in seed_files(folder, recipes):
        model, task, _ = checkpoint.load(path)
        key = {"recipe": recipe, "seed": seed, "regime": model.cfg.regime}
        parts.append(model_algorithm1(model, task).assign(**key))
    if not parts:
        raise _no_seeds(folder, recipes)
    return pd.concat(parts, ignore_index=True)


def seeds(
    folder: Path,
    *,
    batch: int = 20_000,
    seed: int = 2026,
    recipes: set[str] | None = None,
    fidelity: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Every `{recipe}_seed{k}.pt` in `folder` (models of the paper distribution, any regime;
    only the named `recipes` when given): (tests, fidelity). tests: one row per model with its
    regime, the mean, median and worst prompt MSE on `batch` fresh prompts (`evaluate`'s, drawn
    once for all models of a task) and × below the zero predictor for the mean and the median;
    fidelity: one row per model, layer and reading (`model_fidelity`, beside the paper's Table 1
    of the model's regime), or None when `fidelity` is False (the test numbers alone)."""
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.evaluate import prompt_errors, reference_errors, summarize
    from eagle_probe.fit.fidelity import paper_table1
    from eagle_probe.tasks import make_generator, sample

    tests, parts = [], []
    drawn: dict = {}  # task -> (its `batch` prompts from `seed`, their reference errors)
    for path, recipe, seed_k in seed_files(folder, recipes):
        model, task, metrics = checkpoint.load(path)
        if task not in drawn:  # `evaluate`'s prompts, drawn once for every model of the task
            prompts = sample(task, batch, make_generator(seed), dtype=torch.float64)
            drawn[task] = prompts, reference_errors(prompts)
        prompts, reference = drawn[task]
        result = summarize(prompt_errors(model, prompts, reference=reference))
        zero = result["zero_mse"]
        key = {"recipe": recipe, "seed": seed_k, "regime": model.cfg.regime}
        tests.append(
            key
            | {
                "mse": result["mse"],
                "median_mse": result["median_mse"],
                "worst_mse": result["worst_mse"],
                "below_zero_mean": zero / result["mse"],
                "below_zero_median": zero / result["median_mse"],
                "nonfinite": result["nonfinite_prompts"],
                "select": metrics.get("train_config", {}).get("select", "mean"),
                "train_s": metrics.get("wall_seconds"),
            }
        )
        if fidelity:
            table1 = model_fidelity(model, task, paper_table1(model.cfg.regime))
            parts.append(table1.assign(**key))
    if not tests:
        raise _no_seeds(folder, recipes)
    return pd.DataFrame(tests), pd.concat(parts, ignore_index=True) if fidelity else None


def seed_summary(fidelity: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as mean ± sd over seeds: one row per recipe, layer and reading, the paper beside.
    Rows of `seed_algorithm1` are also split by their `constants` (`global`, `per_layer`) and
    carry the mean ± sd of the fitted η, γ."""
    keys = ["recipe", "regime", "reading", "layer"]
    if "constants" in fidelity:
        keys.insert(2, "constants")
    grouped = fidelity.groupby(keys)
    table = grouped.fidelity.agg(["mean", "std", "count"]).reset_index()
    table["paper"] = grouped.paper.first().values
    for name in ("eta", "gamma"):
        if name in fidelity:
            table[f"{name}_mean"] = grouped[name].mean().values
            table[f"{name}_std"] = grouped[name].std().values
    return table


# --- driver -------------------------------------------------------------------------------


DEVICE_BATCH = (10_000, 20)  # batched problems and their size n (n × n) of `device_batch`
DEVICE_LOOP = 500  # problems the NumPy baselines solve one by one (their time scaled to the batch)


def device_batch(
    device, rng: np.random.Generator, *, problems: int = DEVICE_BATCH[0], n: int = DEVICE_BATCH[1]
) -> pd.DataFrame:
    """Many small problems at once on a torch device: EAGLE in torch (float64 and float32) and
    torch.linalg.lstsq (each driver the device has) on `problems` Gaussian n × n problems,
    beside the NumPy EAGLE and LAPACK lstsq solving DEVICE_LOOP of them one by one (their
    seconds scaled to the whole batch). Errors against float64 `torch.linalg.solve`; for the
    torch EAGLE also the time of its matrix products alone (the batched-matmul rate measured
    here times the products it performed: three n × n products per problem and iteration)."""
    import torch

    from eagle_probe.torch_eagle import DRIVERS, lstsq_torch, solve_eagle_torch

    device = torch.device(device)
    A64 = torch.from_numpy(rng.standard_normal((problems, n, n))).to(device)
    b64 = torch.from_numpy(rng.standard_normal((problems, n))).to(device)
    ref = torch.linalg.solve(A64, b64)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(fn):
        fn()  # warm-up (kernels, allocator)
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        return out, time.perf_counter() - t0

    def error(x) -> float:
        e = torch.linalg.vector_norm(x.to(torch.float64) - ref, dim=1)
        return float((e / torch.linalg.vector_norm(ref, dim=1)).max())

    rows = []
    for dtype in (torch.float64, torch.float32):
        A, b = A64.to(dtype), b64.to(dtype)
        (x, info), seconds = timed(lambda A=A, b=b: solve_eagle_torch(A, b, rtol=1e-10))
        work = solve_eagle_torch.last_work
        _, mm = timed(lambda A=A: torch.bmm(A, A))
        rows.append(
            {
                "method": f"eagle torch ({str(dtype).removeprefix('torch.')})",
                "device": str(device),
                "problems": problems,
                "n": n,
                "seconds": seconds,
                "error": error(x),
                "uncertified": int((info != 0).sum()),
                "iterations": solve_eagle_torch.last_iterations,
                "products_seconds": 3 * mm * work / problems,
            }
        )
    for driver in DRIVERS["cpu" if device.type == "cpu" else "cuda"]:
        (x, used), seconds = timed(lambda driver=driver: lstsq_torch(A64, b64, driver=driver))
        rows.append(
            {
                "method": f"torch lstsq ({used})",
                "device": str(device),
                "problems": problems,
                "n": n,
                "seconds": seconds,
                "error": error(x),
            }
        )
    An, bn, refn = A64[:DEVICE_LOOP].cpu().numpy(), b64[:DEVICE_LOOP].cpu().numpy(), ref.cpu()
    for name in ("eagle", "lstsq"):
        method = solvers.solver(name)
        t0 = time.perf_counter()
        xs = [method(An[j], bn[j])[0] for j in range(len(An))]
        seconds = (time.perf_counter() - t0) * problems / len(An)
        x = torch.from_numpy(np.stack(xs))
        e = torch.linalg.vector_norm(x - refn[: len(An)], dim=1)
        rows.append(
            {
                "method": f"numpy {name} (one by one, scaled)",
                "device": "cpu",
                "problems": problems,
                "n": n,
                "seconds": seconds,
                "error": float((e / torch.linalg.vector_norm(refn[: len(An)], dim=1)).max()),
            }
        )
    return pd.DataFrame(rows)


def run_bench(
    suite_name: str,
    out: Path,
    *,
    seed: int = 0,
    models: Path | None = None,
    log=print,
    max_bytes: float = 4 * 2**30,
    device=None,
) -> dict[str, pd.DataFrame]:
    """Run suite `suite_name` into `out`; with a torch `device`, also `device_batch` there."""
    if suite_name not in SUITES:
        raise ValueError(f"unknown suite {suite_name!r}; choose from {', '.join(SUITES)}")
    suite = SUITES[suite_name]
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tables: dict[str, pd.DataFrame] = {}
    notes: list[str] = []
    models = models or Path(__file__).resolve().parents[1] / "trained_models"
    if suite.real:  # a bad data directory or matrix fails before the other sections run
        for path in suitesparse_files():
            read_matrix(path, max_bytes)
    if suite.fidelity:
        log("fidelity: exported faithful solver vs network")
        tables["fidelity"] = fidelity(rng, models)
    if suite.centralized:
        log("centralized: κ sweep")
        tables["centralized"], tables["centralized_history"] = centralized(suite, rng)
        log("distributed: machines and diversity")
        tables["distributed"], tables["diversity"] = distributed(suite, rng)
        log("constrained: sketch sizes at equal FLOPs")
        tables["constrained"] = constrained(suite, rng)
    if suite.real:
        log("real data")
        tables["real"], notes = real_data(suite, rng, max_bytes=max_bytes)
    if device is not None:
        log(
            f"device: {DEVICE_BATCH[0]} batched {DEVICE_BATCH[1]} × {DEVICE_BATCH[1]} problems on "
            f"{device}"
        )
        tables["device"] = device_batch(device, rng)
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    figures = plots(tables)
    for name, fig in figures.items():
        fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    (out / "summary.md").write_text(summary(suite_name, tables, notes))
    return tables


def plots(tables: dict[str, pd.DataFrame]) -> dict:
    from eagle_probe.drawing import load_matplotlib

    matplotlib = load_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    hist = tables.get("centralized_history")
    if hist is not None and len(hist):
        groups = list(hist.groupby(["n", "kappa"]))
        fig, axes = plt.subplots(
            1,
            len(groups),
            figsize=(4.2 * len(groups) + 1.8, 3.6),
            squeeze=False,
            sharey=True,
            layout="constrained",
        )
        final = tables.get("centralized")
        styles = ["-", "--", "-.", ":"]
        solvers_seen = sorted(set(hist.solver) | set(final.solver if final is not None else []))
        for ax, ((n, kappa), g) in zip(axes[0], groups, strict=True):
            for i, solver in enumerate(solvers_seen):
                s = g[g.solver == solver]
                color = f"C{i}"
                if len(s) >= 2:  # a curve: the error after every iteration
                    ax.loglog(
                        s.iteration,
                        s.error.clip(lower=1e-17),
                        styles[i % len(styles)],
                        color=color,
                        lw=1.6,
                        label=solver,
                    )
                elif final is not None:  # direct or unrecorded: its final error, one marker
                    row = final[(final.n == n) & (final.kappa == kappa) & (final.solver == solver)]
                    if len(row):
                        its, err = int(row.iterations.iloc[0]), float(row.error.iloc[0])
                        tag = "direct" if solver == "lstsq" else "final error only"
                        if err < 1e-17:
                            tag += ", exact: drawn at 1e-17"
                        ax.loglog(
                            max(its, 1),
                            max(err, 1e-17),
                            "D",
                            color=color,
                            ms=6,
                            label=f"{solver} ({tag})",
                        )
            ax.set(title=f"n = {n}, κ = {kappa:.0e}", xlabel="iteration")
        axes[0][0].set_ylabel("‖x − x_lstsq‖ / ‖x_lstsq‖")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", fontsize=8)
        figs["centralized_error_vs_iteration"] = fig
    dist = tables.get("distributed")
    if dist is not None and len(dist):
        fig, ax = plt.subplots(figsize=(5, 3.6), layout="constrained")
        for method, g in dist.groupby("method"):
            ax.semilogy(g.machines, g.floats_total, "o-", label=method)
        ax.set(xlabel="machines M", ylabel="floats sent per machine to ε")
        ax.legend()
        figs["distributed_communication"] = fig
    con = tables.get("constrained")
    if con is not None and len(con):
        fig, ax = plt.subplots(figsize=(5, 3.6), layout="constrained")
        full = con[con.flops == con.groupby("r").flops.transform("max")]
        ax.semilogy(full.r, full.eagle_error, "o-", label="sketched EAGLE")
        ax.semilogy(full.r, full.sgd_error, "s-", label="sketched SGD")
        ax.set(xlabel="sketch size r", ylabel="error at equal FLOPs")
        ax.legend()
        figs["constrained_equal_flops"] = fig
    return figs


# What each section measures, the figures that show it, and what its columns mean.
SECTIONS = {
    "fidelity": (
        "How closely the exported faithful solver (EAGLE with the constant steps extracted from "
        "each shipped network) follows that network, layer by layer, on 512 held-out prompts: "
        "the paper's Table 1 metric.",
        [],
    ),
    "centralized": (
        "Every solver on dense least-squares problems with a prescribed condition number κ, "
        "run to rtol 1e-10 (iterative baselines capped at the suite's maxiter).",
        ["centralized_error_vs_iteration.png"],
    ),
    "distributed": (
        "Machines that each hold a column block of A and exchange only vectors: rounds and "
        "floats sent until the error is below the suite's ε, EAGLE against distributed gradient "
        "descent and ADMM.",
        ["distributed_communication.png"],
    ),
    "diversity": (
        "Distributed EAGLE's rounds against the diversity index of the machines' column spaces "
        "(fewer rounds expected with more diversity).",
        [],
    ),
    "constrained": (
        "Sketched EAGLE against sketched SGD at equal FLOP budgets, per sketch size r.",
        ["constrained_equal_flops.png"],
    ),
    "device": (
        "Many small problems at once on the torch device of --device: EAGLE in torch (batched, "
        "float64 and float32, certified to rtol 1e-10 or its precision) and torch.linalg.lstsq "
        "(driver named) beside the NumPy solvers run one by one.",
        [],
    ),
    "real": (
        "Real matrices (SuiteSparse, shipped with the package), an RBF Nyström extrapolation and, "
        "when available, MovieLens-100K; the reference is numpy's lstsq.",
        [],
    ),
}
COLUMNS = {
    "model": "shipped checkpoint (trained_models/NAME.pt)",
    "layer": "layer, 0-based (the paper's layer 1 is layer 0)",
    "reading": "one_step: the network's stream entering the layer through one EAGLE step; "
    "end_to_end: EAGLE run from the input (docs/extraction-schema.md, views.fidelity)",
    "fidelity": "‖Z_network − Z_EAGLE‖²_F / #entries after the layer (prompt units)",
    "relative": "the same squared gap over the squared change (one step: the layer's own update; "
    "end to end: the change since the input)",
    "paper": "the paper's Table 1 fidelity for the same regime and layer",
    "better_than_paper": "verdict: True when `fidelity` ≤ `paper`, i.e. our extracted solver "
    "follows our network at least as closely as the paper's followed theirs. False is a "
    "measured result, not a failure of the run: one step at a time the centralized model's "
    "layers 0, 2 and 3 beat the paper while layer 1's A/B update departs, and end to end that "
    "departure is carried into every later layer (docs/results.md); the paper's values come "
    "from the paper's own models",
    "n": "columns of A (unknowns)",
    "m": "rows of A",
    "kappa": "condition number of A",
    "solver": "solver (eagle_probe.solvers.SOLVERS)",
    "method": "method",
    "info": "verdict: 0 converged (EAGLE: certified, its error within its bound), > 0 stopped "
    "without converging (the iterations used), < 0 broke down",
    "iterations": "iterations (matrix-matrix steps for EAGLE, matrix-vector for CG/LSMR/GD)",
    "seconds": "wall-clock seconds of the solve",
    "flops": "floating-point operations, counted from the matrix sizes",
    "error": "‖x − x_lstsq‖ / ‖x_lstsq‖ (completion: ‖D − B A⁺ C‖ / ‖B A⁺ C‖)",
    "time_vs_lstsq": "seconds / numpy lstsq's seconds on the same problem",
    "machines": "machines M",
    "diversity": "diversity index: smallest positive eigenvalue of the mean of the machines' "
    "range projections (1: every machine sees the whole column space)",
    "rounds": "communication rounds",
    "floats_per_round": "floats one machine sends per round",
    "floats_total": "floats one machine sends in all",
    "reached": "verdict: True when the error got below the suite's ε",
    "overlap": "how much the machines' column spaces overlap (1: fully)",
    "r": "sketch size r",
    "eagle_error": "sketched EAGLE's error at this FLOP budget",
    "sgd_error": "sketched SGD's error at this FLOP budget",
    "ratio_sgd_over_eagle": "sgd_error / eagle_error (> 1: EAGLE is better)",
    "matrix": "matrix (SuiteSparse name, or a synthetic problem)",
    "reached_1e-8": "verdict: True when the error is at most 1e-8",
    "lstsq_seconds": "seconds numpy's lstsq took for the reference",
    "wrong_success": "verdict: True marks a wrong success, info 0 with an error above "
    "max(1e-6, 1e3 · κ · eps) against the reference (κ on the numerical range)",
    "error_vs_truth": "error against the true held-out block (not against B A⁺ C)",
    "device": "torch device of the row (cpu, cuda:0, …)",
    "problems": "problems solved at once (batched)",
    "uncertified": "problems whose info is not 0 (no certificate)",
    "products_seconds": "seconds the torch EAGLE's matrix products alone take at the batched "
    "matmul rate measured here (three n × n products per problem and iteration)",
}
VERDICTS = ("better_than_paper", "reached", "reached_1e-8", "wrong_success")


def summary(suite_name: str, tables: dict[str, pd.DataFrame], notes: list[str]) -> str:
    lines = [
        f"# eagle-probe bench: {suite_name}",
        "",
        "Each section says what it measures, shows its figures and explains its columns; "
        "verdict columns (True/False, `info`) are counted under the table.",
        "",
    ]
    for name, table in tables.items():
        if name.endswith("history"):
            continue
        about, figures = SECTIONS.get(name, ("", []))
        lines += [f"## {name}", ""]
        if about:
            lines += [about, ""]
        lines += [f"![{name}: {figure}]({figure})" for figure in figures]
        if figures:
            lines.append("")
        lines += [
            table.to_markdown(index=False, floatfmt=".3g")
            if _has_tabulate()
            else "```\n" + table.to_string(index=False) + "\n```",
            "",
        ]
        for column in VERDICTS:
            if column in table:
                values = table[column].dropna().astype(bool)
                lines.append(f"`{column}`: True in {int(values.sum())} of {len(values)} rows.")
        if "info" in table:
            converged = int((table["info"] == 0).sum())
            lines.append(f"`info`: 0 (converged) in {converged} of {len(table)} rows.")
        lines += ["", "Columns:", ""]
        lines += [f"- `{c}`: {COLUMNS[c]}" for c in table.columns if c in COLUMNS]
        lines.append("")
    if notes:
        lines += ["## notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def _has_tabulate() -> bool:
    return importlib.util.find_spec("tabulate") is not None
