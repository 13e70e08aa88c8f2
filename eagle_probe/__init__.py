"""eagle-probe: extract the numerical algorithm a linear-attention transformer learns.

The package keeps TransformerLens and the Hugging Face stack offline: nothing here ever reaches
for the network.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

__version__ = "0.1.0"

from eagle_probe.errors import CheckpointError, EagleProbeError  # noqa: E402

_FROM_TASKS = ("Prompt", "TaskConfig", "sample")  # imported on first use: `tasks` imports torch


def __getattr__(name: str):
    if name in _FROM_TASKS:
        from eagle_probe import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module 'eagle_probe' has no attribute {name!r}")


__all__ = ["CheckpointError", "EagleProbeError", "Prompt", "TaskConfig", "__version__", "sample"]
