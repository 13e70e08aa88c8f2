"""Memory budgets: sizes are checked against a stated budget before anything is allocated.

The estimates are deliberately simple upper bounds (element counts × bytes, times the number of
copies a step holds at once); they exist to refuse a request that cannot fit with one line that
names the flag, not to predict memory use to the byte. The CLI passes `--max-memory` (GiB).
"""

from __future__ import annotations

import math
from dataclasses import replace

from eagle_probe.errors import EagleProbeError

GIB = 2**30
DEFAULT_BYTES = 4 * GIB  # --max-memory 4
MAX_LAYERS = 1024  # building a model is O(layers) Python objects; more is a mistake, not a model
MAX_RUNS = 10_000  # sweep: seeds × regimes


def check(nbytes: float, what: str, budget: float = DEFAULT_BYTES) -> None:
    """Raise unless `nbytes` fits in `budget` bytes."""
    if not math.isfinite(nbytes) or nbytes > budget:
        raise EagleProbeError(
            f"{what} needs about {_gib(nbytes)} of memory, above the budget of {_gib(budget)}; "
            "pass a smaller size, or raise the budget with --max-memory GIB"
        )


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.3g} GiB" if math.isfinite(nbytes) else "unbounded"


def model_elements(cfg) -> int:
    """Parameters and buffers of a `ModelConfig`'s model, computed without building it."""
    h, E, T = cfg.heads, cfg.width, cfg.n_tokens
    per_layer = h * E * (2 * cfg.qk + 2 * cfg.vp) + h * E + T * T
    return cfg.n_layers * per_layer + 1


def model_bytes(cfg) -> int:
    return model_elements(cfg) * (8 if cfg.dtype == "float64" else 4)


def check_model(cfg, budget: float = DEFAULT_BYTES, what: str = "the model") -> None:
    if cfg.n_layers > MAX_LAYERS:
        raise EagleProbeError(
            f"{what} has {cfg.n_layers} layers, above the limit of {MAX_LAYERS}; this is not a "
            "model eagle-probe can build"
        )
    check(model_bytes(cfg), what, budget)


def plant_bytes(cfg) -> int:
    """Planting a model: the model built for its geometry, for the factored state and as the
    result, and the checkpoint's copy; in float64 the products W_QK, W_VP (L, h, E, E), one
    layer's factors (4 of h × E × k) and each head's SVD (about 8 E × k arrays). For one layer and
    head at n = 3000: 1.52 GB measured peak, 1.7 GB estimated."""
    h, E, L = cfg.heads, cfg.width, cfg.n_layers
    k = max(E, cfg.qk, cfg.vp)
    return 4 * model_bytes(cfg) + 8 * (2 * L * h * E * E + 6 * h * E * k + 8 * E * k)


def forward_bytes(cfg, batch: int, *, training: bool = False) -> int:
    """A forward pass on `batch` prompts with every hook's activation kept (as capture and
    autograd do) in the model's dtype, twice that when training (gradients), plus the float64
    prompts. On CPU it is 1.3 to 1.9 times the measured peak (n = 18 to 48, 1 to 8 heads)."""
    h, E, T = cfg.heads, cfg.width, cfg.n_tokens
    per_layer = 4 * T * E + h * T * (2 * cfg.qk + 2 * cfg.vp + T + E)
    itemsize = 8 if cfg.dtype == "float64" else 4
    activations = batch * cfg.n_layers * per_layer * itemsize * (2 if training else 1)
    prompts = batch * 4 * T * E * 8
    return activations + prompts + model_bytes(cfg) * (4 if training else 1)


def draw_bytes(task, batch: int = 1) -> int:
    """Float64 bytes drawing `batch` prompts of a `TaskConfig` holds beyond the prompts: the
    points a nystrom kernel is evaluated on, (max(n, d) + d' + n') × kernel_dim a prompt
    (measured: 1.08 GB above the interpreter for 2,048 prompts at kernel_dim 3000, n = d = 18;
    estimated 1.08 GB). The other tasks draw factors no larger than their prompts (their rank s
    is at most min(n, d)), which `forward_bytes` counts."""
    if task.task != "nystrom":
        return 0
    return 8 * batch * (max(task.n, task.d) + task.d_prime + task.n_prime) * task.kernel_dim


# the most prompts a command draws at once by default (`evaluate`'s --batch)
DRAW_PROMPTS = 8192


def check_draw(task, max_bytes: float, what: str) -> None:
    """Refuse a task whose draw of DRAW_PROMPTS prompts does not fit the memory budget: the
    commands hold their batches' forwards to the budget (`forward_bytes`), and a nystrom task's
    kernel points can cost far more than its prompts (kernel_dim 3000 at n = d = 18: 4.3 GB for
    8,192 prompts, 24 kB a prompt against a forward's few kB)."""
    need = draw_bytes(task, DRAW_PROMPTS)
    if need > max_bytes:
        per_point = draw_bytes(replace(task, kernel_dim=1), DRAW_PROMPTS)
        raise EagleProbeError(
            f"{what}: its nystrom task draws each prompt from {task.kernel_dim}-dimensional "
            f"points, {_gib(need)} for {DRAW_PROMPTS:,} prompts, over the memory budget of "
            f"{_gib(max_bytes)}; raise --max-memory, or use kernel_dim of at most "
            f"{int(max_bytes // per_point):,}"
        )
