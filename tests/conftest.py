"""Shared fixtures. The suite never touches the network and runs on 2 CPU cores."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "trained_models"

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def trained() -> Path:
    return TRAINED


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
