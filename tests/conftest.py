"""Shared fixtures. The suite never touches the network and runs on 2 CPU cores."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import plants  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from plants import NORMALIZE_PATHS, PLANTED_STEPS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "trained_models"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on the 2 cores: one thread each, for torch here and for the
    # processes a test starts (commands, notebook kernels), so that no worker waits on the other's
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))


# --- tolerances (docs/testing.md, "Tolerances that hold on any CPU") ----------------------------
# BLAS kernels differ between CPUs (Intel, AMD, ARM) and thread counts: the same float64 product
# differs in its last bits, a float32 forward in its last digits. A comparison of such results,
# with another route computed here or with a number stored on another machine, uses these; an
# exact one (the same operations on the same inputs in this process) says so and why in a
# comment that starts `# exact` (docs/testing.md lists them).
RTOL = 1e-7  # float64 work through BLAS: round-off 1e-16 × conditioning, far below this
RTOL_FLOAT32 = 1e-4  # results of a float32 forward (eps 6e-8, grown through the layers)


def assert_close(got, want, rtol: float = RTOL) -> None:
    """`got` equals `want` to `rtol` relative, entries near zero held to `rtol` × the largest
    |want| (their own relative error is round-off divided by a cancellation)."""
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.abs(want).max()))


# --- planted models ------------------------------------------------------------------------------
# Built in plants.py (on the package's `layouts.plant`): every extraction, fidelity and export test
# runs on the three prompt-normalisation paths.


@pytest.fixture(params=NORMALIZE_PATHS)
def normalize(request) -> str:
    """Each prompt-normalisation path in turn."""
    return request.param


@pytest.fixture
def planted(normalize):
    """(model, task, a_steps, c_steps) of a 3-layer planted EAGLE model on each path."""
    a, c = PLANTED_STEPS[normalize]
    model, task = plants.eagle(a, c, normalize=normalize)
    return model, task, a, c


@pytest.fixture(scope="session", params=[("spectral", 1), ("frobenius", 3), ("none", 2)])
def planted_extraction(request):
    """(extraction, a_steps, c_steps) of a 3-layer planted EAGLE model with every view, on each
    path (1, 3 and 2 heads): the views' tests in tests/fit read its known answer."""
    import torch

    from eagle_probe.extract import extract
    from eagle_probe.tasks import TaskConfig, make_generator, sample

    normalize, heads = request.param
    a, c = plants.VIEW_STEPS
    if normalize == "none":  # steps in prompt units: η/‖A‖², ‖A‖₂ the typical spectral norm
        p = sample(TaskConfig(n=8, d=6, rank=4), 512, make_generator(9), dtype=torch.float64)
        s2 = 4 * float(torch.linalg.matrix_norm(p.A, ord=2).median() ** 2)  # stable, slow
        a, c = [x / s2 for x in a], [x / s2 for x in c]
    model, task = plants.eagle(a, c, heads=heads, normalize=normalize)
    ex = extract(model, task, probe_batch_size=64, test_batch=512, tuning_batch=256)
    return ex, a, c


@pytest.fixture(scope="session")
def report_planted():
    """(model, task, extraction) of the report's planted two-layer model (n = d = 6, float32,
    `plants.REPORT_STEPS`) with every view that has a figure and the optimum (its bars join the
    projection's cost): the report's tests and the views' figure tests read it."""
    from eagle_probe.extract import extract

    model, task = plants.eagle(*plants.REPORT_STEPS, n=6, d=6, dtype="float32")
    views = (
        "eagle",
        "fidelity",
        "projection",
        "weights",
        "attribution",
        "optimum",
        "polynomial",
        "verdict",
    )
    ex = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=256, views=views)
    return model, task, ex


def prompt_norm(A, normalize: str):
    """The scale a model with `normalize` divides each prompt by, computed here from the
    singular values (NumPy), independently of the model: A (b, d, n) → (b,)."""
    import numpy as np

    A = np.asarray(A, dtype=np.float64)
    if normalize == "none":
        return np.ones(A.shape[0])
    sv = np.linalg.svd(A, compute_uv=False)  # (b, min(d, n))
    return sv[:, 0] if normalize == "spectral" else np.sqrt(np.sum(sv**2, axis=-1))


def numpy_eagle(A, B, C, a_steps, c_steps):
    """Algorithm 1 of the paper with S = I, written out in NumPy: every iterate
    [(A_l, B_l, C_l, D_l) for l = 0..L] with D_0 = 0 (D_l is the estimate, not the negated slot)."""
    import numpy as np

    D = np.zeros((*B.shape[:-1], C.shape[-1]))
    out = [(A, B, C, D)]
    for a, c in zip(a_steps, c_steps, strict=True):
        At = np.swapaxes(A, -1, -2)
        gram = At @ A
        A, B, C, D = A - a * A @ gram, B - a * B @ gram, C - c * A @ At @ C, D + c * B @ At @ C
        out.append((A, B, C, D))
    return out


def run_numpy_only(module_path, check: str):
    """Load `module_path` in a fresh interpreter where torch, transformer_lens, scipy and
    eagle_probe cannot be imported, run `check` (Python using `m` and `np`), and return the
    completed process; it prints 'ok' when everything passed."""
    import subprocess
    import sys

    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformer_lens', 'scipy', 'eagle_probe'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import importlib.util, numpy as np\n"
        f"spec = importlib.util.spec_from_file_location('s', {str(module_path)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"{check}\n"
        "print('ok')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
