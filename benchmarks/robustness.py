"""Robustness measurements: solver scale sweep, rank-deficient stopping, hostile-checkpoint memory.

Usage: python benchmarks/robustness.py

Prints
  1. `lstsq` over A and b scaled by 10^±300 (info and relative error against the minimum-norm
     answer of the unscaled problem, "n/r" where that answer is not representable in float64);
     the same for `complete` with one of A, B, C scaled, and for the distributed and sketched
     solvers;
  2. iterations and relative error of `lstsq` and `complete` on 200 × 200 problems of rank 120;
  3. the peak resident memory of a fresh process loading a < 10 KB checkpoint whose config
     declares n = 20,000 (and the interpreter alone, for comparison);
  4. hostile command-line cases (`--hostile-only` runs just these): each runs `python -m
     eagle_probe …` in a fresh process on small crafted inputs (weights declaring gigabytes,
     special files, overflowing steps, absurd sizes, a failing or signalled sweep); a case holds
     when its exit code is the expected one (2: one line on stderr, no traceback, the expected
     words, no output left behind), it ends within its time limit and its peak resident memory
     stays under 1 GiB. Prints one line per case and the counts (cases, held). The cases of
     Robustness IV (names "IV-k …": signals, interrupted training, Slurm paths, bounded numeric
     options, contradicting import sizes, checkpoint metadata, skipped views, environment
     variables, matplotlib's notices, numbers beyond float32) are counted per class as well;
     `--only WORD …` runs the cases whose name holds one of the words (`--only IV-`: those).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eagle_probe import eagle


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


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]  # after `python -m eagle_probe`, run in the case directory
    code: int = 2  # expected exit code
    words: tuple[str, ...] = ()  # expected in stderr
    left: tuple[str, ...] = ()  # outputs that must not exist afterwards
    env: tuple[tuple[str, str], ...] = ()
    term_after: float | None = None  # send SIGTERM after this many seconds
    # send this signal once a path matching the glob appears in the case directory
    signal_on: tuple[str, int] | None = None
    absent: tuple[str, ...] = ()  # regular expressions found nowhere in stdout and stderr
    contents: tuple[tuple[str, str], ...] = ()  # (file, text it holds, spaces collapsed)
    stderr_lines: int | None = None  # lines on stderr of a case that succeeds


def _make_inputs(root: Path) -> None:
    """Crafted inputs, each under 10 KB."""
    import numpy as np
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.layouts import plant
    from eagle_probe.model import LinearTransformer, ModelConfig
    from eagle_probe.tasks import TaskConfig, make_generator

    warnings.simplefilter("ignore")
    torch.save(torch.zeros(1, 1, 1, 1, 1).expand(1, 1, 2, 8000, 8000), root / "expanded.pt")
    np.savez_compressed(root / "zeros.npz", allparam=np.zeros((1, 1, 2, 3000, 3000)))
    np.savez(root / "small.npz", allparam=np.zeros((1, 1, 2, 4, 4)))
    np.savez(root / "big_values.npz", allparam=np.full((1, 1, 2, 4, 4), 1e308))
    np.savez(root / "longdouble.npz", allparam=np.full((1, 1, 2, 3, 3), np.longdouble("1e400")))
    shape = (1, 1, 2, 3, 3)
    tensors = {
        "sparse": torch.randn(3, 3).to_sparse(),
        "meta": torch.empty(shape, device="meta"),
        "conjugate": torch.randn(shape, dtype=torch.complex64).conj(),
        "nested": torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),
        "qint8": torch.quantize_per_tensor(torch.randn(shape), 0.1, 0, torch.qint8),
    }
    for kind, tensor in tensors.items():
        torch.save({"allparam": tensor}, root / f"{kind}.pt")
    cfg, task = ModelConfig(n=6, d=5, n_layers=1), TaskConfig(n=6, d=5, rank=3)
    model = LinearTransformer(cfg, generator=make_generator(0))
    checkpoint.save(root / "m.pt", model, task)
    checkpoint.save(Path(os.fsdecode(os.fsencode(root) + b"/m\xff.pt")), model, task)
    state = {k: v.to(torch.float64).numpy() for k, v in model.state_dict().items()}
    np.savez(root / "state.npz", **state)  # d = 5, d' = 2 in its token mask
    np.savez(
        root / "string_mask.npz", **(state | {"blocks.0.attn.mask": np.array([["1"] * 7] * 7)})
    )
    np.savez(root / "scalar_mask.npz", **(state | {"blocks.0.attn.mask": np.array(1.0)}))
    np.savez(
        root / "wq_1e45.npz", **(state | {"blocks.0.attn.W_Q": state["blocks.0.attn.W_Q"] * 1e45})
    )
    payload = torch.load(root / "m.pt", weights_only=True)
    for rank, name in ((1000, "rank1000.pt"), (100_000, "rank1e5.pt")):
        payload["task_config"]["rank"] = rank
        torch.save(payload, root / name)
    planted = plant(ModelConfig(n=6, d=5, n_layers=1, dtype="float64"), [0.1], [0.2])
    overflow = {  # finite weights whose outputs overflow float64
        k: v * 1e150 if k.endswith(("W_Q", "W_V")) else v for k, v in planted.state_dict().items()
    }
    planted.load_state_dict(overflow)
    checkpoint.save(root / "overflow.pt", planted, task)
    for name, text in {
        "wide": "%%MatrixMarket matrix coordinate real general\n1 5000 1\n1 1 1.0\n",
        "int_overflow": "%%MatrixMarket matrix coordinate integer general\n2 2 1\n"
        "1 1 99999999999999999999999\n",
    }.items():
        (root / name).mkdir()
        (root / name / f"{name}.mtx").write_text(text)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "m.mtx")
    (root / "devzero").mkdir()
    (root / "devzero" / "z.mtx").symlink_to("/dev/zero")
    (root / "a_file").write_text("not a directory")
    os.mkfifo(root / "w.pt")
    (root / "weights_dir.pt").mkdir()
    (root / "b_force").mkdir()
    (root / "b_force" / "summary.md").symlink_to(root / "elsewhere.md")
    checkpoint.save(
        root / "planted.pt", plant(ModelConfig(n=6, d=5, n_layers=1), [0.1], [0.2]), task
    )
    (root / "run").mkdir()  # a run directory whose checkpoint records spikes at steps "x" and 5
    spikes = [{"step": "x", "loss": 1.0}, {"step": 5, "loss": 2.0}]
    checkpoint.save(root / "run" / "step_00000005.pt", model, task, {"step": 5, "spikes": spikes})


PLANT = ["plant", "--a-steps", "0.1", "--c-steps", "0.2"]
SWEEP = ["sweep", "--regimes", "centralized", "--seeds", "1", "--steps", "2", "--batch", "8"]
SWEEP += ["--eval-batch", "16", "--parallel", "1", "--out", "sb"]
IMPORT = ["import", "--layout", "ahn", "--n", "5", "-o", "imp.pt"]
FEATURE = ["import", "--layout", "eagle-probe", "--n", "6", "--n-prime", "2", "--dtype", "float32"]
FEATURE += ["-o", "imp.pt"]
REAL = ["bench", "--suite", "real", "--out", "b"]


def _cases() -> list[Case]:
    budget = ("budget", "--max-memory")
    cases = [
        Case(
            "import: expanded tensor, --max-memory 0.5",
            [*IMPORT, "expanded.pt", "--max-memory", "0.5"],
            words=budget,
            left=("imp.pt",),
        ),
        Case(
            "import: compressed .npz, --max-memory 0.1",
            [*IMPORT, "zeros.npz", "--max-memory", "0.1"],
            words=budget,
            left=("imp.pt",),
        ),
        Case(
            "import: --n 30000",
            [*IMPORT[:4], "30000", *IMPORT[5:], "small.npz"],
            words=budget,
            left=("imp.pt",),
        ),
        Case("import: --n 1e12", [*IMPORT[:4], "1e12", *IMPORT[5:], "small.npz"], left=("imp.pt",)),
        Case(
            "evaluate: task rank 1000",
            ["evaluate", "rank1000.pt", "--max-memory", "1"],
            words=("rank",),
        ),
        Case("evaluate: task rank 1e5", ["evaluate", "rank1e5.pt"], words=("rank",)),
        Case(
            "train: --task-rank 1000",
            [
                "train",
                "--regime",
                "centralized",
                "--task-rank",
                "1000",
                "--steps",
                "2",
                "-o",
                "t.pt",
            ],
            words=("rank",),
            left=("t.pt",),
        ),
        Case(
            "bench: 1 x 5000 matrix, --max-memory 0.05",
            [*REAL, "--max-memory", "0.05"],
            words=budget,
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "wide"),),
        ),
        Case(
            "sweep: --max-memory 0.001",
            [*SWEEP, "--max-memory", "0.001"],
            words=("budget",),
            left=("sb",),
        ),
        Case(
            "sweep: --parallel 4 --max-memory 0.3",
            [*SWEEP[:-4], "--seeds", "4", "--parallel", "4", "--max-memory", "0.3", "--out", "sb"],
            words=("budget",),
            left=("sb",),
        ),
        Case(
            "sweep: --name {seed:>1000000000}",
            [*SWEEP, "--name", "{seed:>1000000000}"],
            words=("plain fields",),
            left=("sb",),
        ),
        Case(
            "sweep: --name {regime.__class__.__mro__}{seed}",
            [*SWEEP, "--name", "{regime.__class__.__mro__}{seed}"],
            words=("plain fields",),
            left=("sb",),
        ),
        Case(
            "plant: --n 6000 --max-memory 0.55",
            [*PLANT, "--n", "6000", "--max-memory", "0.55", "-o", "p.pt"],
            words=budget,
            left=("p.pt",),
        ),
        Case(
            "sweep: all runs fail (--batch 1e9)",
            [*SWEEP[:-2], "--batch", "1000000000", "--out", "sb"],
            words=("every run",),
            left=("sb",),
        ),
        Case(
            "sweep: all runs fail (--lr 1e30)",
            [*SWEEP, "--lr", "1e30"],
            words=("every run",),
            left=("sb",),
        ),
        Case(
            "sweep: SIGTERM",
            [*SWEEP[:6], "100000000", *SWEEP[7:]],
            code=143,
            words=("SIGTERM",),
            left=("sb",),
            term_after=15.0,
        ),
        Case(
            "bench: FIFO named m.mtx",
            REAL,
            words=("not a regular file",),
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "fifo"),),
        ),
        Case(
            "bench: link to /dev/zero",
            REAL,
            words=("not a regular file",),
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "devzero"),),
        ),
        Case(
            "bench: missing data directory",
            REAL,
            words=("does not exist",),
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "nowhere"),),
        ),
        Case(
            "bench: data directory is a file",
            REAL,
            words=("not a directory",),
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "a_file"),),
        ),
        Case(
            "bench: integer entry beyond int64",
            REAL,
            words=("int_overflow.mtx",),
            left=("b",),
            env=(("EAGLE_PROBE_SUITESPARSE", "int_overflow"),),
        ),
        Case(
            "bench --force: link in --out",
            ["bench", "--out", "b_force", "--force"],
            words=("symbolic link",),
        ),
        Case(
            "import: allparam 1e308 in float32",
            [*IMPORT, "big_values.npz", "--dtype", "float32"],
            words=("not finite in float32",),
            left=("imp.pt",),
        ),
        Case(
            "import: W_Q x 1e45 in float32",
            [*FEATURE, "wq_1e45.npz"],
            words=("not finite in float32",),
            left=("imp.pt",),
        ),
        Case(
            "import: string mask", [*FEATURE, "string_mask.npz"], words=("mask",), left=("imp.pt",)
        ),
        Case("import: 0-d mask", [*FEATURE, "scalar_mask.npz"], words=("mask",), left=("imp.pt",)),
        Case(
            "import: longdouble beyond float64",
            [*IMPORT, "longdouble.npz"],
            words=("NaN or Inf",),
            left=("imp.pt",),
        ),
    ]
    for kind in ("sparse", "meta", "conjugate", "nested", "qint8"):
        cases.append(
            Case(
                f"import: {kind} tensor",
                [*IMPORT, f"{kind}.pt"],
                words=("weight allparam",),
                left=("imp.pt",),
            )
        )
    cases += [
        Case(
            "evaluate: --batch 1e11 --max-memory 1e9",
            ["evaluate", "m.pt", "--batch", str(10**11), "--max-memory", "1e9"],
            words=("out of memory",),
        ),
        Case(
            "plant: --a-steps 1e308 (float32)",
            [*PLANT[:2], "1e308", *PLANT[3:], "-o", "p.pt"],
            words=("not finite",),
            left=("p.pt",),
        ),
        Case(
            "plant: steps 1e308 (float64)",
            [
                "plant",
                "--a-steps",
                "1e308",
                "--c-steps",
                "1e308",
                "--dtype",
                "float64",
                "-o",
                "p.pt",
            ],
            words=("overflow",),
            left=("p.pt",),
        ),
        Case(
            "evaluate: outputs overflow",
            ["evaluate", "overflow.pt"],
            words=("not a finite number",),
        ),
        Case(
            "extract: outputs overflow",
            ["extract", "overflow.pt", "--out", "x", "--no-progress"],
            words=("not finite",),
            left=("x",),
        ),
        Case("--threads 1000000", ["evaluate", "m.pt", "--threads", "1000000"], words=("at most",)),
        Case(
            "--threads 2147483648",
            ["evaluate", "m.pt", "--threads", "2147483648"],
            words=("at most",),
        ),
        Case(
            "import: a directory",
            [*IMPORT, "weights_dir.pt"],
            words=("is a directory",),
            left=("imp.pt",),
        ),
        Case("import: a FIFO", [*IMPORT, "w.pt"], words=("not a regular file",), left=("imp.pt",)),
        Case(
            "import: /dev/zero",
            [*IMPORT, "/dev/zero"],
            words=("not a regular file",),
            left=("imp.pt",),
        ),
        Case(
            "evaluate: non-UTF-8 file name",
            ["evaluate", os.fsdecode(b"m\xff.pt"), "--batch", "64"],
            code=0,
        ),
        Case(
            "evaluate: PYTHONIOENCODING=ascii",
            ["evaluate", "m.pt", "--batch", "64"],
            code=0,
            env=(("PYTHONIOENCODING", "ascii"),),
        ),
        Case(
            "plant: 240-character output name",
            [*PLANT, "--n", "6", "--d", "5", "-o", "p" * 237 + ".pt"],
            code=0,
        ),
    ]
    return cases + _cases_iv()


TRAIN = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--task-rank", "3"]
TRAIN += ["--layers", "1", "--batch", "8", "--eval-batch", "16", "--no-progress"]
STAGED = ".{}.eagle-probe-partial-*"  # the staging directory of an output


def _cases_iv() -> list[Case]:
    """The ten classes of Robustness IV, each as the case that found it and a variant."""
    term, hup, intr = signal.SIGTERM, signal.SIGHUP, signal.SIGINT
    slow_train = [*TRAIN, "--steps", "3000", "--eval-every", "2000", "--save-every", "1"]
    first_step = ".t.steps.eagle-probe-partial-*/step_00000001.pt"
    plan = ["sweep", "--regimes", "centralized", "--seeds", "1", "--plan", "p.jsonl"]
    return [
        Case(
            "IV-1 signals: compare, SIGTERM",
            ["compare", "m.pt", "--out", "X"],
            code=143,
            words=("SIGTERM", "nothing written"),
            left=("X", STAGED.format("X")),
            signal_on=(STAGED.format("X"), term),
        ),
        Case(
            "IV-1 signals: extract, SIGHUP",
            ["extract", "m.pt", "--out", "X", "--no-progress"],
            code=129,
            words=("SIGHUP", "nothing written"),
            left=("X", STAGED.format("X")),
            signal_on=(STAGED.format("X"), hup),
        ),
        Case(
            "IV-2 interrupted training: SIGINT before the first validation",
            [*slow_train, "-o", "t.pt"],
            code=130,
            words=("interrupted (SIGINT)", "before the first validation"),
            left=("t.pt", "t.json", "t.steps", STAGED.format("t.pt"), STAGED.format("t.steps")),
            signal_on=(first_step, intr),
            absent=("diverged",),
        ),
        Case(
            "IV-2 interrupted training: SIGTERM before the first validation",
            [*slow_train, "-o", "t.pt"],
            code=143,
            words=("interrupted (SIGTERM)", "before the first validation"),
            left=("t.pt", "t.json", "t.steps", STAGED.format("t.pt"), STAGED.format("t.steps")),
            signal_on=(first_step, term),
            absent=("diverged",),
        ),
        Case(
            "IV-3 Slurm paths: --out '/ROOT/o 4%j'",
            [*plan, "--out", "o 4%j", "--slurm", "s.sbatch"],
            code=0,
            contents=(("s.sbatch", '/o 4%%j/eagle-probe-%A_%a.out"'),),
        ),
        Case(
            "IV-3 Slurm paths: --out 'o #1', --job-name a%b",
            [*plan, "--out", "o #1", "--job-name", "a%b", "--slurm", "s.sbatch", "--force"],
            code=0,
            contents=(("s.sbatch", '/o \\#1/a%%b-%A_%a.out"'),),
        ),
        Case(
            "IV-4 bounded options: compare --more-steps 1e9",
            ["compare", "m.pt", "--out", "X", "--more-steps", "1000000000"],
            words=("--more-steps", "days"),
            left=("X",),
        ),
        Case(
            "IV-4 bounded options: train --steps 1e10",
            [*TRAIN, "--steps", "10000000000", "-o", "t.pt"],
            words=("--steps", "at most"),
            left=("t.pt",),
        ),
        Case(
            "IV-5 import sizes: ahn --d 7 (weights: d = 3)",
            [*IMPORT, "small.npz", "--d", "7"],
            words=("--d 7", "contradicts"),
            left=("imp.pt",),
        ),
        Case(
            "IV-5 import sizes: eagle-probe --d-prime 1 (mask: d' = 2)",
            [*FEATURE[:7], "--d-prime", "1", "state.npz", "-o", "imp.pt"],
            words=("--d-prime 1", "contradicts"),
            left=("imp.pt",),
        ),
        Case(
            "IV-6 checkpoint metadata: timeline, spikes at steps 'x' and 5",
            ["timeline", "run", "--out", "tl"],
            words=("spikes[0].step",),
            left=("tl",),
        ),
        Case(
            "IV-7 skipped views: extract --no-control",
            ["extract", "planted.pt", "--out", "x7", "--no-control", "--no-progress"],
            code=0,
            absent=(r"\bnan\b",),
            contents=(("x7/report.html", "untrained control skipped"),),
        ),
        Case(
            "IV-8 environment: WORLD_SIZE=abc train",
            [*TRAIN, "--steps", "2", "-o", "t.pt"],
            words=("WORLD_SIZE",),
            left=("t.pt",),
            env=(("WORLD_SIZE", "abc"),),
        ),
        Case(
            "IV-8 environment: WORLD_SIZE=2 RANK=x train",
            [*TRAIN, "--steps", "2", "-o", "t.pt"],
            words=("RANK",),
            left=("t.pt",),
            env=(("WORLD_SIZE", "2"), ("RANK", "x")),
        ),
        Case(
            "IV-9 matplotlib: MPLCONFIGDIR a file, extract",
            ["extract", "planted.pt", "--out", "x9", "--no-progress"],
            code=0,
            words=("MPLCONFIGDIR",),
            env=(("MPLCONFIGDIR", "a_file"),),
            stderr_lines=1,
        ),
        Case(
            "IV-10 float range: sweep --lr 1e300",
            [*SWEEP, "--lr", "1e300"],
            words=("--lr", "float32"),
            left=("sb",),
        ),
        Case(
            "IV-10 float range: train --gain-lr 1e39",
            [*TRAIN, "--steps", "2", "--gain-lr", "1e39", "-o", "t.pt"],
            words=("--gain-lr", "float32"),
            left=("t.pt",),
        ),
    ]


def _run_case(case: Case, root: Path, limit: float = 180.0) -> tuple[bool, str, float, float]:
    """(held, reason, peak RSS in GiB, seconds) of one case in a fresh process."""
    env = os.environ | {"OMP_NUM_THREADS": "1"} | dict(case.env)
    for key, value in case.env:
        if key in ("EAGLE_PROBE_SUITESPARSE", "MPLCONFIGDIR"):
            env[key] = str(root / value)
    start = time.monotonic()
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", *case.argv],
        cwd=root,
        env=env,
        stdout=out,
        stderr=subprocess.PIPE,
    )
    termed = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.monotonic() - start
        if case.term_after is not None and not termed and elapsed > case.term_after:
            proc.send_signal(signal.SIGTERM)
            termed = True
        if case.signal_on is not None and not termed and any(root.glob(case.signal_on[0])):
            proc.send_signal(case.signal_on[1])
            termed = True
        if elapsed > limit:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return False, f"still running after {limit:.0f} s", usage.ru_maxrss / 2**20, elapsed
        time.sleep(0.05)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace").strip()
    proc.stderr.close()
    peak = usage.ru_maxrss / 2**20  # KiB -> GiB
    lines = err.splitlines()
    reasons = []
    if code != case.code:
        reasons.append(f"exit {code}, expected {case.code}")
    if case.code != 0 and (len(lines) != 1 or "Traceback" in err):
        reasons.append(f"{len(lines)} lines on stderr")
    reasons += [f"no {w!r} in stderr" for w in case.words if w not in err]
    reasons += [f"{name} left behind" for name in case.left if any(root.glob(name))]
    reasons += _checks_iv(case, root, err, out)
    if peak > 1.0:
        reasons.append(f"peak {peak:.2f} GiB")
    shown = lines[-1][:110] if lines else ""
    return not reasons, "; ".join(reasons) or shown, peak, seconds


def _checks_iv(case: Case, root: Path, err: str, out) -> list[str]:
    """What failed of a case's stdout/stderr patterns, file contents and stderr line count."""
    import re

    out.seek(0)
    text = out.read().decode(errors="replace") + "\n" + err
    out.close()
    reasons = [f"{p!r} in the output" for p in case.absent if re.search(p, text, re.I)]
    for name, want in case.contents:
        path = root / name
        held = " ".join(path.read_text(errors="replace").split()) if path.is_file() else ""
        if want not in held:
            reasons.append(f"no {want!r} in {name}")
    lines = len(err.splitlines())
    if case.stderr_lines is not None and lines != case.stderr_lines:
        reasons.append(f"{lines} lines on stderr, expected {case.stderr_lines}")
    return reasons


def hostile_cases() -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _make_inputs(root)
        cases = _selected(_cases())
        held = 0
        worst = 0.0
        classes: dict[str, list[int]] = {}
        print("hostile cases: held?, peak RSS, seconds, case: last stderr line or what failed")
        for case in cases:
            ok, reason, peak, seconds = _run_case(case, root)
            held += ok
            worst = max(worst, peak)
            mark = "held" if ok else "FAIL"
            print(f"  {mark} {peak:5.2f} GiB {seconds:5.1f} s  {case.name}: {reason}")
            if case.name.startswith("IV-"):
                counts = classes.setdefault(case.name.split(":")[0], [0, 0])
                counts[0], counts[1] = counts[0] + 1, counts[1] + ok
            for name in case.left:  # a failed case's debris must not decide the next one
                for path in root.glob(name):
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        for name, (count, ok) in classes.items():
            print(f"  {name}: {count} cases, {ok} held, {count - ok} failing")
        print(f"hostile cases: {len(cases)} cases, {held} held; largest peak {worst:.2f} GiB")
        return len(cases), held


def _selected(cases: list[Case]) -> list[Case]:
    """The cases named by `--only WORD …` (all without it)."""
    if "--only" not in sys.argv:
        return cases
    words = sys.argv[sys.argv.index("--only") + 1 :]
    return [case for case in cases if any(word in case.name for word in words)]


if __name__ == "__main__":
    warnings.simplefilter("ignore", RuntimeWarning)
    if "--hostile-only" not in sys.argv:
        scale_sweep()
        rank_deficient()
        hostile_memory()
    hostile_cases()
