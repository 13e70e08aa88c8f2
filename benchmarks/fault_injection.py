"""Fault injection: does the test suite notice a wrong number?

Usage: python benchmarks/fault_injection.py [--only NAME ...] [--list] [--suite] [--markdown OUT]

Each fault is one small edit of the package (a string replaced in one file) that gives wrong
numbers without crashing. For every fault the script copies the repository to a temporary
directory, applies the edit there (the working tree is never touched), runs the test files that
cover the edited code, and records whether any test failed and which. The same test files are
first run on the unmodified copy: a fault only counts as detected when those pass without it.
With --suite every fault runs the whole suite instead (`pytest -x`, notebooks excluded). A fault
whose text does not occur exactly once in its file stops the script (exit 2) before any run.

Prints a Markdown table (fault, file, detected, failing tests). Runtime: a few minutes per fault
on 2 CPU cores (the slow tests of the named files run too).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", ".pytest_cache", "__pycache__", "out", "bench_out", ".ruff_cache"}


@dataclass(frozen=True)
class Fault:
    name: str  # short description: what the bug does
    path: str  # file the edit applies to, relative to the repository root
    old: str  # text replaced (must occur exactly once)
    new: str  # its replacement
    tests: tuple[str, ...]  # test files (or node ids) that cover the edited code


FIT_TESTS = ("tests/test_extract.py", "tests/test_shipped.py")
MODEL_TESTS = ("tests/test_model.py", "tests/test_shipped.py", "tests/test_extract.py")
EXPORT_TESTS = ("tests/test_export.py", "tests/test_extract.py")
SOLVER_TESTS = (
    "tests/test_eagle_solver.py",
    "tests/test_solver_template.py",
    "tests/test_solvers.py",
    "tests/test_export.py",
    "tests/robustness/test_hostile.py",
)
# the exported solver.py of every shipped model, and its contract
EXPORTED_TESTS = (
    "tests/test_exported_solvers.py",
    "tests/test_export.py",
    "tests/test_solver_template.py",
    "tests/test_solver_honesty.py",
)
# the normalised paths: exports and views on planted models of every normalisation, at any scale
# the view tests on the planted extraction, each view's in the file that mirrors its module
VIEW_FILES = (
    "tests/fit/test_views.py",
    "tests/fit/test_projection.py",
    "tests/fit/test_fidelity.py",
    "tests/fit/test_attribution.py",
    "tests/fit/test_verdict.py",
    "tests/fit/test_optimum.py",
)
SCALE_TESTS = (
    "tests/test_export.py",
    "tests/test_exported_solvers.py",
    "tests/test_extract.py",
    *VIEW_FILES,
)
VIEW_TESTS = ("tests/test_extract.py", *VIEW_FILES)
SUITE = ("tests",)  # --suite: the whole suite, `pytest -x`, notebooks excluded

FAULTS = [
    Fault(
        "η, γ with the batch-mean instead of the batch-max ‖A_l‖₂",
        "eagle_probe/captured.py",
        "return float(self.a_norms2(layer).max())",
        "return float(self.a_norms2(layer).mean())",
        FIT_TESTS,
    ),
    Fault(
        "Table-1 fidelity without the prompt-unit conversion (× s²)",
        "eagle_probe/fit/base.py",
        "    units = prompt_units(cap)  # (b, 1, 1) or (b, 1, E)\n",
        "    units = np.ones_like(prompt_units(cap))  # (b, 1, 1) or (b, 1, E)\n",
        FIT_TESTS,
    ),
    Fault(
        "prompt scale: spectral and Frobenius swapped",
        "eagle_probe/model.py",
        '    if cfg.normalize == "frobenius":\n'
        '        norm = torch.linalg.matrix_norm(A, ord="fro")',
        '    if cfg.normalize != "frobenius":\n'
        '        norm = torch.linalg.matrix_norm(A, ord="fro")',
        MODEL_TESTS,
    ),
    Fault(
        "fitter's prompt units: spectral and Frobenius swapped",
        "eagle_probe/fit/geometry.py",
        'ord_ = "fro" if normalize == "frobenius" else 2',
        'ord_ = 2 if normalize == "frobenius" else "fro"',
        FIT_TESTS,
    ),
    Fault(
        "faithful solver returns D without the prompt scale",
        "eagle_probe/solver_template.py",
        "        D = D * s\n",
        "        D = D\n",
        SCALE_TESTS,
    ),
    Fault(
        "faithful solver applies the prompt scale to D twice",
        "eagle_probe/solver_template.py",
        "        D = D * s\n",
        "        D = D * s * s\n",
        SCALE_TESTS,
    ),
    Fault(
        "faithful solver scales A and B but not C",
        "eagle_probe/solver_template.py",
        "    A, B, C = A / cols, B / cols, C / s\n",
        "    A, B, C = A / cols, B / cols, C\n",
        SCALE_TESTS,
    ),
    Fault(
        "faithful solver scales A and C but not B",
        "eagle_probe/solver_template.py",
        "    A, B, C = A / cols, B / cols, C / s\n",
        "    A, B, C = A / cols, B, C / s\n",
        SCALE_TESTS,
    ),
    Fault(
        "faithful solver's spectral prompt scale is the Frobenius norm",
        "eagle_probe/solver_template.py",
        'spectral = NORMALIZE == "spectral"',
        "spectral = False",
        SCALE_TESTS,
    ),
    Fault(
        "faithful solver's Frobenius prompt scale is the spectral norm",
        "eagle_probe/solver_template.py",
        'spectral = NORMALIZE == "spectral"',
        'spectral = NORMALIZE != "none"',
        SCALE_TESTS,
    ),
    Fault(
        "Table-1 fidelity in prompt units × s instead of × s²",
        "eagle_probe/fit/base.py",
        "    return (cap.scale**2)[:, None, None]\n",
        "    return cap.scale[:, None, None]\n",
        VIEW_TESTS,
    ),
    Fault(
        "capture records a prompt scale of 1",
        "eagle_probe/capture.py",
        "        scale[sl] = s.cpu().numpy()\n",
        "        scale[sl] = 1.0\n",
        VIEW_TESTS,
    ),
    Fault(
        "views' NumPy readout without the prompt scale (× s)",
        "eagle_probe/fit/geometry.py",
        "            return self.readout * self.read_d(Z[:, self.d :, self.n :]) * s\n",
        "            return self.readout * self.read_d(Z[:, self.d :, self.n :])\n",
        VIEW_TESTS,
    ),
    Fault(
        "views' NumPy forward on the prompt not divided by its scale",
        "eagle_probe/fit/geometry.py",
        "        Z = z0 / self.scales(z0)\n",
        "        Z = z0\n",
        VIEW_TESTS,
    ),
    Fault(
        "attribution's ablated MSE without the prompt scale (× s)",
        "eagle_probe/fit/attribution.py",
        "            return held.mse(geo.readout_of(Z, held.z0))\n",
        "            return held.mse(geo.readout * geo.read_d(Z[:, geo.d :, geo.n :]))\n",
        VIEW_TESTS,
    ),
    Fault(
        "evaluate picks the worst prompt with argmin",
        "eagle_probe/evaluate.py",
        "worst = int(torch.argmax(",
        "worst = int(torch.argmin(",
        ("tests/test_evaluate.py", "tests/test_shipped.py", "tests/cli/test_evaluate.py"),
    ),
    Fault(
        "the certified EAGLE iteration without its non-finite check",
        "eagle_probe/solver_template.py",
        "        A, B, C, dD = _eagle_update(A, B, C, K, e, g)\n        D = D + dD\n"
        "        if not np.all(np.isfinite(D)) or (watch_a and not np.all(np.isfinite(A))):\n"
        '            return D, NONFINITE, "non-finite", it\n',
        "        A, B, C, dD = _eagle_update(A, B, C, K, e, g)\n        D = D + dD\n",
        SOLVER_TESTS,
    ),
    Fault(
        "lstsq ignores x0",
        "eagle_probe/solver_template.py",
        "x, info, it = _lstsq(A, b, x0, options,",
        "x, info, it = _lstsq(A, b, 0 * x0, options,",
        SOLVER_TESTS,
    ),
    Fault(
        "complete's certificate accepts any estimate",
        "eagle_probe/solver_template.py",
        '        if estimate * CERT_MARGIN <= bound:\n            best.status = "certified"\n'
        "            return best, C\n",
        '        if True:\n            best.status = "certified"\n            return best, C\n',
        EXPORTED_TESTS,
    ),
    Fault(
        "lstsq's certificate accepts any estimate",
        "eagle_probe/solver_template.py",
        '        if estimate * CERT_MARGIN <= bound:\n            best.status = "certified"\n'
        "            return best\n",
        '        if True:\n            best.status = "certified"\n            return best\n',
        EXPORTED_TESTS,
    ),
    Fault(
        "the exported solver's certificate off by default",
        "eagle_probe/solver_template.py",
        "gamma, counter, checker if check else None)",
        "gamma, counter, None)",
        EXPORTED_TESTS,
    ),
    Fault(
        "a network's overshooting η taken unclipped",
        "eagle_probe/solver_template.py",
        '    return min(float(e), ETA_MAX), min(float(g), GAMMA_MAX), "clipped"',
        '    return float(e), min(float(g), GAMMA_MAX), "clipped"',
        EXPORTED_TESTS,
    ),
    Fault(
        "least squares: queries C drawn at twice the scale of A",
        "eagle_probe/tasks.py",
        "C = _randn(g, b, cfg.d, cfg.n_prime) * scale",
        "C = _randn(g, b, cfg.d, cfg.n_prime) * scale * 2",
        ("tests/test_tasks.py",),
    ),
    Fault(
        "THEORY_ETA = 0.5",
        "eagle_probe/solver_template.py",
        "THEORY_ETA, THEORY_GAMMA = 1.0 / 3.0, 1.0",
        "THEORY_ETA, THEORY_GAMMA = 0.5, 1.0",
        SOLVER_TESTS,
    ),
    Fault(
        "fitted C-step with the wrong sign",
        "eagle_probe/fit/eagle.py",
        "        a, c = (float(_ratio(np.sum(x), np.sum(y))) for x, y in (a_sums, c_sums))\n",
        "        a, c = (float(_ratio(np.sum(x), np.sum(y))) for x, y in (a_sums, c_sums))\n"
        "        c = -c\n",
        FIT_TESTS,
    ),
    Fault(
        "design-form fit stuck at degree 0",
        "eagle_probe/fit/polynomial.py",
        "    for K in range(max_degree + 1):",
        "    for K in range(1):",
        FIT_TESTS,
    ),
    Fault(
        "implicit iterate x = v (readout sign dropped)",
        "eagle_probe/capture.py",
        "x = sign * v.swapaxes(-1, -2)",
        "x = v.swapaxes(-1, -2)",
        FIT_TESTS,
    ),
    Fault(
        "no token mask",
        "eagle_probe/model.py",
        "scores = self.hook_attn_scores(scores * (self.mask * self.key_norm))",
        "scores = self.hook_attn_scores(scores * self.key_norm)",
        MODEL_TESTS,
    ),
    Fault(
        "readout +1 instead of −1",
        "eagle_probe/model.py",
        'torch.tensor(-1.0 if cfg.readout != "direct" else 1.0',
        'torch.tensor(1.0 if cfg.readout != "direct" else 1.0',
        MODEL_TESTS,
    ),
    Fault(
        "checkpoints loaded with weights_only=False",
        "eagle_probe/checkpoint.py",
        'torch.load(name, map_location="cpu", weights_only=True, mmap=True)',
        'torch.load(name, map_location="cpu", weights_only=False, mmap=True)',
        ("tests/test_checkpoint.py",),
    ),
    Fault(
        "export writes no layers",
        "eagle_probe/export.py",
        'f"LAYERS = {_layer_list(layers)}"',
        'f"LAYERS = {_layer_list([])}"',
        EXPORT_TESTS,
    ),
    # faults behind the tests that used to be unable to fail
    Fault(
        "training never applies its updates",
        "eagle_probe/train.py",
        "        optimizer.step()\n",
        "        pass\n",
        ("tests/test_train.py::test_same_seed_same_model_and_training_moves_it",),
    ),
    Fault(
        "value freezing does not freeze",
        "eagle_probe/train.py",
        "                p.requires_grad_(False)\n",
        "                p.requires_grad_(True)\n",
        ("tests/test_train.py::test_value_freezing_keeps_w_v_and_w_p_from_the_freeze_on",),
    ),
    Fault(
        "curriculum ignored",
        "eagle_probe/train.py",
        "step_task = curriculum.at(task, step / cfg.steps) if curriculum else task",
        "step_task = task",
        (
            "tests/test_train.py::test_curriculum_moves_the_training_task_from_isotropic_to_the_target",
        ),
    ),
    Fault(
        "evaluate CLI ignores --seed",
        "eagle_probe/cli/evaluate.py",
        "result = evaluate(model, task, batch=args.batch, seed=args.seed)",
        "result = evaluate(model, task, batch=args.batch, seed=12345)",
        ("tests/cli/test_evaluate.py",),
    ),
    Fault(
        "evaluate table prints the median as the test MSE",
        "eagle_probe/cli/evaluate.py",
        '("test MSE", result["mse"]),',
        '("test MSE", result["median_mse"]),',
        ("tests/cli/test_evaluate.py",),
    ),
    Fault(
        "bench runs only the first κ of its grid",
        "eagle_probe/bench.py",
        "        for kappa in suite.kappas:\n            A, b = kappa_problem(",
        "        for kappa in suite.kappas[:1]:\n            A, b = kappa_problem(",
        ("tests/test_bench.py",),
    ),
    Fault(
        "bench fidelity table reports the relative gap as the fidelity",
        "eagle_probe/bench.py",
        '"fidelity": row.total,',
        '"fidelity": row.relative,',
        ("tests/test_bench.py",),
    ),
]


def copy_repo(dest: Path) -> None:
    def ignore(_dir: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIP}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def run_tests(repo: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, list[str], float]:
    present = tuple(t for t in tests if (repo / t.split("::")[0]).exists())
    if not present:
        return -1, [], 0.0
    env = os.environ | {
        "PYTHONPATH": str(repo),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    args = ["-x", "--ignore=tests/test_notebooks.py", "tests"] if tests == SUITE else present
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, ["(timed out)"], time.perf_counter() - t0
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, flags=re.M)
    errors = re.findall(r"^ERROR (\S+)", proc.stdout, flags=re.M)
    return proc.returncode, failed + errors, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="faults whose name contains")
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per test run")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--suite",
        action="store_true",
        help="run the whole suite with -x (notebooks excluded) instead of each fault's files",
    )
    args = parser.parse_args()
    faults = [
        f for f in FAULTS if not args.only or any(s.lower() in f.name.lower() for s in args.only)
    ]
    if args.suite:
        faults = [replace(f, tests=SUITE) for f in faults]
    if args.list:
        for f in faults:
            print(f"{f.name}  [{f.path}]  tests: {' '.join(f.tests)}")
        return
    missing = [f for f in faults if (ROOT / f.path).read_text().count(f.old) != 1]
    if missing:  # a fault whose target moved would report "not detected" for the wrong reason
        for f in missing:
            n = (ROOT / f.path).read_text().count(f.old)
            print(
                f"fault {f.name!r}: its text occurs {n} times in {f.path} (need 1)", file=sys.stderr
            )
        sys.exit(2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="eagle-faults-") as tmp:
        clean = Path(tmp) / "clean"
        copy_repo(clean)
        baseline: dict[tuple[str, ...], tuple[int, list[str]]] = {}
        for fault in faults:
            if fault.tests not in baseline:
                rc, failed, secs = run_tests(clean, fault.tests, args.timeout)
                baseline[fault.tests] = (rc, failed)
                print(
                    f"baseline {' '.join(fault.tests)}: rc {rc} ({secs:.0f} s) {' '.join(failed)}",
                    flush=True,
                )
            repo = Path(tmp) / "mutant"
            if repo.exists():
                shutil.rmtree(repo)
            copy_repo(repo)
            target = repo / fault.path
            text = target.read_text()
            count = text.count(fault.old)
            if count != 1:
                sys.exit(f"{fault.name}: NOT APPLIED ({count} matches in the copy of {fault.path})")
            target.write_text(text.replace(fault.old, fault.new))
            rc, failed, secs = run_tests(repo, fault.tests, args.timeout)
            base_rc, base_failed = baseline[fault.tests]
            new_failures = [t for t in failed if t not in base_failed]
            if rc == -1:
                verdict = "no test file present"
            elif new_failures:
                verdict = "yes"
            elif rc not in (0, 1, 5):
                verdict = f"error (pytest exit {rc})"
            else:
                verdict = "no"
            rows.append((fault, verdict, new_failures, secs))
            print(f"{fault.name}: {verdict} ({secs:.0f} s) {' '.join(new_failures)}", flush=True)
    lines = [
        "| fault injected | file | detected | failing tests | time |",
        "|---|---|---|---|---|",
    ]
    for fault, verdict, failed, secs in rows:
        names = sorted({t.split("[")[0] for t in failed})
        shown = ", ".join(f"`{n}`" for n in names[:4]) + (" …" if len(names) > 4 else "")
        lines.append(f"| {fault.name} | `{fault.path}` | {verdict} | {shown} | {secs:.0f} s |")
    table = "\n".join(lines)
    print()
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")


if __name__ == "__main__":
    main()
