"""The names the configs accept, importable without torch.

`model`, `train` and `tasks` validate against these; the command line lists them in its help, so
`eagle-probe --help` never has to import torch to spell them.
"""

from __future__ import annotations

REGIMES = ("centralized", "distributed", "distributed-open", "constrained")  # `regimes.REGIMES`
TOKEN_MASKS = ("visible", "block_diagonal", "sparse")
READOUTS = ("negate", "learned", "direct")
NORMALIZE = ("none", "frobenius", "spectral")
TASKS = ("paper", "least_squares", "nystrom", "completion")  # the keys of `tasks.TASKS`
SCHEDULES = ("constant", "warmup_cosine")
DEFAULT_STEPS = 20_000  # `TrainConfig.steps` default, the paper's run length
