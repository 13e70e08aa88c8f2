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
from eagle_probe.tasks import Prompt, TaskConfig, sample  # noqa: E402

__all__ = ["CheckpointError", "EagleProbeError", "Prompt", "TaskConfig", "__version__", "sample"]
