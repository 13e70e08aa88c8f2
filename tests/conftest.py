"""Shared fixtures. The suite never touches the network and runs on 2 CPU cores."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "trained_models"
SHARED = ROOT.parent / "shared"

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def trained() -> Path:
    return TRAINED
