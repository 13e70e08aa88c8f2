"""What the command tests share: one tiny model trained by `eagle-probe train`, read by the
train, evaluate and extract tests."""

import os

import pytest
from filelock import FileLock

from eagle_probe.cli import main

# the sizes and schedule of the tiny model (and of the runs the train tests start themselves)
TINY = [
    "--n",
    "6",
    "--d",
    "6",
    "--task-rank",
    "3",
    "--layers",
    "2",
    "--steps",
    "30",
    "--batch",
    "64",
    "--eval-every",
    "10",
    "--eval-batch",
    "256",
    "--no-progress",
    "--init-std",
    "0.05",
]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny.pt (and tiny.json beside it, nothing else): 30 steps of `train` on the TINY sizes,
    trained once for the whole run; with `-n 2` the workers share it, the second waiting on the
    lock for what the first wrote."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's own directory, above each worker's
    out = root / "cli-tiny" / "tiny.pt"
    with FileLock(str(root / "cli-tiny.lock")):
        if not out.exists():
            out.parent.mkdir(exist_ok=True)
            assert main(["train", "--regime", "centralized", *TINY, "-o", str(out)]) == 0
    return out
