"""The names the configs accept, importable without torch.

`model`, `train` and `tasks` validate against these; the command line lists them in its help, so
`eagle-probe --help` never has to import torch to spell them. The regime names are the registry's
(`regimes.NAMES`; that module imports no torch either).
"""

from __future__ import annotations

TOKEN_MASKS = ("visible", "block_diagonal", "sparse")
READOUTS = ("negate", "learned", "direct")
NORMALIZE = ("none", "frobenius", "spectral")
TASKS = ("paper", "least_squares", "nystrom", "completion")  # the keys of `tasks.TASKS`
SCHEDULES = ("constant", "warmup_cosine")
DEFAULT_STEPS = 20_000  # `TrainConfig.steps` default, the paper's run length
# Why a training run stopped (its metrics' `stopped`): every step done; a KeyboardInterrupt (SIGINT,
# or SIGTERM/SIGHUP under the command line) first; or validations ran and none had a finite loss.
STOPS = ("finished", "interrupted", "diverged")
MAX_STEPS = 10**9  # `TrainConfig.steps` limit: 12 days at 1 ms a step
MAX_SEEDS = 256  # seeds one process trains together (`ensemble.train_ensemble`, `train --seeds`)
# `CompareConfig.more_steps` limit: the algorithm runs more_steps × its layers steps on every prompt
# of every sweep point (1000 on a one-layer model: a minute on 2 CPU cores)
MAX_MORE_STEPS = 1000
# `compare.SWEEPS`: every sweep `eagle-probe compare --sweeps` takes
SWEEPS = (
    "scale",
    "kappa",
    "rank",
    "alpha",
    "noise",
    "samples",
    "input_scale",
    "query_scale",
    "task_noise",
)
# the environment variable naming a sweep's process id in its runs: a run stops once it is gone
PARENT_VARIABLE = "EAGLE_PROBE_PARENT"
