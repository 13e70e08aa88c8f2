"""Shared fixtures. The suite never touches the network and runs on 2 CPU cores."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "trained_models"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on the 2 cores: one thread each, for torch here and for the
    # processes a test starts (commands, notebook kernels), so that no worker waits on the other's
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))


# --- planted models ------------------------------------------------------------------------------
# A planted model carries exact EAGLE weights (model.eagle_weights), so every number the extraction
# reports has a known answer. The shipped models all normalise their prompts; a planted model on
# the `none` path has prompt scale 1 and cannot show a bug in the scale, so every extraction,
# fidelity and export test runs on all three paths.

NORMALIZE_PATHS = ("none", "spectral", "frobenius")

# Steps per path (a_l, c_l per layer), sized so that η = a‖A_l‖² stays below 1 on the probes:
# without normalisation ‖A‖₂² is about 14 (median) on the small paper task below; the normalised
# prompts have ‖A‖₂ = 1 (spectral) or ≤ 1 (Frobenius).
PLANTED_STEPS = {
    "none": ([0.05, 0.04, 0.03], [0.09, 0.08, 0.07]),
    "spectral": ([0.4, 0.3, 0.2], [0.9, 0.7, 0.5]),
    "frobenius": ([0.5, 0.4, 0.3], [1.0, 0.8, 0.6]),
}


def planted_model(
    a_steps,
    c_steps,
    *,
    normalize: str = "none",
    heads: int = 1,
    dtype: str = "float64",
    n: int = 8,
    d: int = 6,
    n_prime: int = 2,
    d_prime: int = 2,
    rank: int = 4,
):
    """(model, task): a centralized model whose layer l runs one EAGLE step (a_l, c_l) on the
    prompt divided by its `normalize` norm of A, and the paper task of the same sizes."""
    from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
    from eagle_probe.tasks import TaskConfig

    cfg = ModelConfig(
        n=n,
        d=d,
        n_prime=n_prime,
        d_prime=d_prime,
        n_layers=len(a_steps),
        n_heads=heads,
        dtype=dtype,
        normalize=normalize,
    )
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, list(a_steps), list(c_steps)))
    model.eval()
    task = TaskConfig(n=n, d=d, n_prime=n_prime, d_prime=d_prime, rank=min(rank, n, d))
    return model, task


@pytest.fixture(params=NORMALIZE_PATHS)
def normalize(request) -> str:
    """Each prompt-normalisation path in turn."""
    return request.param


@pytest.fixture
def planted(normalize):
    """(model, task, a_steps, c_steps) of a 3-layer planted EAGLE model on each path."""
    a, c = PLANTED_STEPS[normalize]
    model, task = planted_model(a, c, normalize=normalize)
    return model, task, a, c


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
