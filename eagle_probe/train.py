"""Training: Adam on the MSE of the D block, fresh prompts every step.

Defaults follow the paper (lr 1e-3 constant, batch 1024, 20,000 steps, gradient-norm clip 0.1).
Options from the seed text: linear warm-up then cosine decay, freezing W_V/W_P at the end, a
separate clip for the query/key gradients, orthogonal-half initialisation (a model option), a
curriculum.

Loss spikes. A model with constant steps is stable only for prompts whose ‖A‖₂ is below a threshold
its steps set; a batch holding a rarer, larger A produces a spike. Every step whose loss exceeds
`spike_factor` × the running median is logged with that batch's max ‖A‖₂, and can be skipped.
Because the training loss can look fine while the test error explodes on rare prompts, the model is
validated on a large fixed held-out set and the best validated weights are kept (`keep_best`).
"""

from __future__ import annotations

import collections
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple, Protocol

import torch
from tqdm import tqdm

from eagle_probe.config import StrictDict, check_positive_ints
from eagle_probe.errors import EagleProbeError, signal_name, signal_of
from eagle_probe.evaluate import prompt_errors, summarize, trimmed_mean
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.names import DEFAULT_STEPS, MAX_STEPS, SCHEDULES
from eagle_probe.tasks import Curriculum, Prompt, TaskConfig, make_generator, sample
from eagle_probe.wording import number, plural

# What the best checkpoint is chosen by, on the held-out prompts: the mean prompt MSE; the median;
# or the mean over the best 99% of prompts ("trimmed"), which a few rare large-‖A‖ prompts whose
# error explodes under constant steps cannot dominate, while a failure on many prompts still counts.
SELECTIONS = ("mean", "median", "trimmed")
TRIM = 0.99


@dataclass(frozen=True, kw_only=True)
class TrainConfig(StrictDict):
    """One training run."""

    KIND = "train config"

    steps: int = DEFAULT_STEPS  # optimiser steps, a fresh batch each
    batch: int = 1024  # prompts per step
    lr: float = 1e-3  # Adam learning rate (peak rate with warmup_cosine)
    schedule: str = "constant"  # one of SCHEDULES
    warmup: float = 0.1  # warmup_cosine: fraction of steps of linear warm-up
    final_lr_ratio: float = 0.01  # warmup_cosine: last rate / peak rate
    weight_decay: float = 0.0  # decoupled (AdamW) weight decay; 0 is the paper's plain Adam
    # > 0: each head's output is multiplied during training by exp(g), g a trained log-gain per
    # layer and head updated at this rate; the gains are folded into W_P in every saved state, so
    # the checkpoint is a plain model. It lets a layer's step size move multiplicatively.
    gain_lr: float = 0.0
    select: str = "mean"  # one of SELECTIONS: the validation number that picks the kept weights
    clip: float = 0.1  # global gradient-norm clip (0 disables)
    clip_qk: float = 0.0  # separate norm clip for the W_Q/W_K gradients (0 disables)
    freeze_values_last: float = 0.0  # fraction of steps at the end with W_V, W_P frozen
    curriculum: bool = False  # grow difficulty from an isotropic task to the target one
    curriculum_start: float = 1.0  # curriculum: starting α (or κ)
    curriculum_until: float = 0.5  # curriculum: fraction of steps to reach the target task
    spike_factor: float = 10.0  # a step is a spike when loss > factor × running median
    skip_spikes: bool = False  # drop the update of a spike step instead of applying it
    eval_every: int = 250  # validate every this many steps (and at the end)
    eval_batch: int = 8192  # size of the fixed held-out validation set
    keep_best: bool = True  # return the weights with the best validation MSE
    seed: int = 0  # seeds initialisation, training prompts and the validation set
    # the batch is drawn as this many chunks, each from its own seeded stream, split over the
    # processes; None: one chunk per process (1 without torchrun, the world size under it)
    data_shards: int | None = None

    def __post_init__(self) -> None:
        if self.select not in SELECTIONS:
            raise ValueError(f"unknown selection {self.select!r}; choose from {SELECTIONS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose from {SCHEDULES}")
        optional = ["data_shards"] if self.data_shards is not None else []
        check_positive_ints(self, ["steps", "batch", "eval_every", "eval_batch", *optional])
        if self.steps > MAX_STEPS:
            raise ValueError(f"steps must be at most {MAX_STEPS:,}, got {self.steps!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        for name in ("warmup", "freeze_values_last"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)!r}")
        for name in ("clip", "clip_qk", "final_lr_ratio", "weight_decay", "gain_lr"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.spike_factor > 1.0:
            raise ValueError(f"spike_factor must be > 1, got {self.spike_factor!r}")
        if self.data_shards is not None and self.batch % self.data_shards:
            raise ValueError(
                f"data_shards={self.data_shards} must divide the batch of {self.batch} prompts"
            )
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        Curriculum(start=self.curriculum_start, until=self.curriculum_until)


def stop_record(
    stop: KeyboardInterrupt | None, history: list[dict[str, Any]], best_selected: float | None
) -> dict[str, Any]:
    """Why a run stopped, for its metrics: `stopped` (one of names.STOPS: "diverged" once
    validations ran and none was finite, interrupted or not), `interrupted` and `signal` (the
    interrupting signal's name, None when none interrupted it)."""
    if history and best_selected is None:
        stopped = "diverged"
    else:
        stopped = "finished" if stop is None else "interrupted"
    name = None if stop is None else signal_name(signal_of(stop))
    return {"stopped": stopped, "interrupted": stop is not None, "signal": name}


# torch's Adam β1, which `optimizer` keeps: the first step divides the rate by its bias
# correction 1 − β1, so each weight moves by up to rate / (1 − β1) = 10 × the rate
ADAM_BETA1 = 0.9


def check_in_dtype(cfg: TrainConfig, task: TaskConfig, dtype: torch.dtype) -> None:
    """Raise ValueError unless every rate, clip and decay of `cfg` and the task's noise variance
    are finite numbers of `dtype`, the dtype the model trains in (a larger variance overflows in
    the first prompts), and so are the steps Adam takes with them: the first step of a rate,
    rate / (1 − β1), and AdamW's decay factor 1 − lr · weight_decay (beyond the dtype, torch
    fails inside the first update)."""
    top = torch.finfo(dtype).max
    kind = str(dtype).removeprefix("torch.")
    named = [(k, getattr(cfg, k)) for k in ("lr", "gain_lr", "weight_decay", "clip", "clip_qk")]
    for name, value in [*named, ("final_lr_ratio", cfg.final_lr_ratio), ("noise", task.noise)]:
        if not abs(value) <= top:
            raise ValueError(
                f"{name} {value!r} is beyond the range of {kind} (at most {top:.3g}), the dtype "
                f"the model trains in; pass a smaller {name}"
            )
    for name, rate in (("lr", cfg.lr), ("gain_lr", cfg.gain_lr)):
        if not rate / (1 - ADAM_BETA1) <= top:
            raise ValueError(
                f"{name} {rate!r} makes Adam's first step {rate / (1 - ADAM_BETA1):.3g} "
                f"(the rate / (1 - beta1) = 10 x the rate), beyond the range of {kind} (at most "
                f"{top:.3g}), the dtype the model trains in; pass a {name} of at most "
                f"{top * (1 - ADAM_BETA1):.3g}"
            )
    if not cfg.lr * cfg.weight_decay <= top:
        raise ValueError(
            f"lr {cfg.lr!r} x weight_decay {cfg.weight_decay!r} = {cfg.lr * cfg.weight_decay:.3g}, "
            f"AdamW's decay of every weight a step, is beyond the range of {kind} (at most "
            f"{top:.3g}); pass a smaller lr or weight_decay"
        )


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Multiplier of the peak learning rate at `step` (0-based)."""
    if cfg.schedule == "constant":
        return 1.0
    warm = int(cfg.warmup * cfg.steps)
    if step < warm:
        return (step + 1) / warm
    t = (step - warm) / max(1, cfg.steps - warm)
    return cfg.final_lr_ratio + (1 - cfg.final_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def _env_int(name: str, default: int, low: int, high: int) -> int:
    """The integer environment variable `name` (`default` when unset), in [low, high]; any other
    value is refused naming the variable (torchrun sets these: unset, one process trains)."""
    import os

    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise EagleProbeError(
            f"environment variable {name}={text!r} is not an integer in [{low}, {high}]; torchrun "
            "sets it for each process it starts (without WORLD_SIZE one process trains)"
        )
    return value


def torchrun_env() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun states them in RANK and WORLD_SIZE ((0, 1)
    without torchrun), each checked, and with more than one process MASTER_PORT too: a value
    that is not a fitting integer is refused in one line naming its variable."""
    world = _env_int("WORLD_SIZE", 1, 1, 2**31 - 1)
    if world == 1:  # one process: whatever else the environment says is not ours to read
        return 0, 1
    _env_int("MASTER_PORT", 29500, 1, 65535)
    return _env_int("RANK", 0, 0, world - 1), world


# How long a process launched with WORLD_SIZE > 1 waits for the others to join its group: torchrun
# starts them together, so they meet within seconds; a wait this long means nobody is coming
# (torchrun variables left over in the environment). RENDEZVOUS_VARIABLE sets it in seconds.
RENDEZVOUS_SECONDS = 60.0
RENDEZVOUS_VARIABLE = "EAGLE_PROBE_RENDEZVOUS_TIMEOUT"


def rendezvous_timeout() -> float:
    """Seconds to wait for the torchrun group: RENDEZVOUS_VARIABLE, else RENDEZVOUS_SECONDS."""
    import os

    text = os.environ.get(RENDEZVOUS_VARIABLE)
    if text is None:
        return RENDEZVOUS_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise EagleProbeError(
            f"environment variable {RENDEZVOUS_VARIABLE}={text!r} is not a positive number of "
            "seconds (how long a torchrun process waits for the others)"
        )
    return value


def _process_group(timeout: float | None = None) -> tuple[int, int]:
    """(rank, world size): joins the torch.distributed group when launched by torchrun, waiting
    at most `timeout` seconds (`rendezvous_timeout()` when None) for the other processes."""
    import torch.distributed as tdist

    rank, world = torchrun_env()
    if world <= 1:
        return 0, 1
    if not tdist.is_initialized():
        _join_group(rank, world, rendezvous_timeout() if timeout is None else timeout)
    return tdist.get_rank(), tdist.get_world_size()


def _join_group(rank: int, world: int, timeout: float) -> None:
    """`init_process_group("gloo")` run in a helper thread and waited for here. torch waits for
    the other processes inside C++, where no Python signal handler runs, so a SIGINT or SIGTERM
    would wait with it; waited for in Python, they stop the command at once, and after `timeout`
    seconds a one-line error says who was waited for (a helper still waiting ends with the
    process)."""
    import os
    import threading

    import torch.distributed as tdist

    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            tdist.init_process_group("gloo")
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(exc)
        else:
            outcome.append(None)

    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    helper = threading.Thread(target=join, name="eagle-probe-rendezvous", daemon=True)
    helper.start()
    deadline = time.monotonic() + timeout
    while helper.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            raise EagleProbeError(
                f"the torchrun group did not form within {timeout:g} s: process {rank} of "
                f"WORLD_SIZE={world} waited at {where} for the others; without torchrun, unset "
                "WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT (left from another launch) to "
                f"train in one process ({RENDEZVOUS_VARIABLE} sets the wait in seconds)"
            )
        helper.join(min(left, 0.1))
    failure = outcome[0] if outcome else None
    if isinstance(failure, RuntimeError):  # torch's store and network errors
        raise EagleProbeError(
            f"joining the torchrun group at {where} (process {rank} of {world}) failed: "
            f"{str(failure).strip().splitlines()[0] if str(failure).strip() else failure!r}"
        ) from failure
    if failure is not None:
        raise failure


def _global_mean(value: float, world: int) -> float:
    """The loss averaged over all processes (every rank then takes the same decisions)."""
    if world == 1:
        return value
    import torch.distributed as tdist

    t = torch.tensor([value], dtype=torch.float64)
    tdist.all_reduce(t)
    return float(t) / world


def _seeds(seed: int) -> tuple[int, int, int]:
    """Independent streams for initialisation, training prompts and validation prompts."""
    return 3 * seed, 3 * seed + 1, 3 * seed + 2


def held_out(task: TaskConfig, cfg: TrainConfig, seed: int) -> Prompt:
    """The fixed validation prompts of the run with `seed` (cfg.eval_batch of them, float64)."""
    return sample(task, cfg.eval_batch, make_generator(_seeds(seed)[2]), dtype=torch.float64)


def values_frozen(cfg: TrainConfig, step: int) -> bool:
    """True when W_V, W_P are frozen at `step` (0-based): at every step from the freeze step
    cfg.steps - ⌊freeze_values_last · steps⌋ on, whatever step a run started or resumed from."""
    freeze_at = cfg.steps - int(cfg.freeze_values_last * cfg.steps)
    return cfg.freeze_values_last > 0 and step >= freeze_at


def prompt_streams(
    cfg: TrainConfig, seed: int, start_step: int = 0, rank: int = 0, world: int = 1
) -> list[torch.Generator]:
    """The training-prompt streams of the run with `seed` from `start_step` (a resumed run draws
    from streams seeded by the step it starts from), one per data shard this process draws.

    Shard j of every batch comes from its own stream, so a run on `world` processes that each
    draw their own shards sees exactly the prompts of a one-process run with the same shards."""
    data_seed = _seeds(seed)[1]
    offset = 7919 * start_step
    if cfg.data_shards == 1:
        return [make_generator(data_seed + offset)]
    return [
        make_generator(1_000_003 * (data_seed + 1) + 101 * shard + offset)
        for shard in range(rank, cfg.data_shards, world)
    ]


def check_growable(source: ModelConfig, target: ModelConfig) -> None:
    """Raise ValueError unless a model of config `source` can start one of `target` (`grow`):
    the same configuration but for the head count, and no more heads than the target has."""
    if source.n_heads > target.n_heads:
        raise ValueError(
            f"it has {source.n_heads} heads per layer, more than the {target.n_heads} of this run"
        )
    differ = [
        f"{k} {getattr(source, k)!r} (this run: {getattr(target, k)!r})"
        for k in source.__dataclass_fields__
        if k not in ("n_heads", "init", "init_std", "dtype")
        and getattr(source, k) != getattr(target, k)
    ]
    if differ:
        raise ValueError("its model differs from this run's: " + "; ".join(differ))


def grow(model: LinearTransformer, source: LinearTransformer) -> None:
    """Copy `source`'s weights into `model` (in place): a per-head parameter (h, …) fills the
    first heads, the others keep their values; every other parameter is copied whole."""
    check_growable(source.cfg, model.cfg)
    target = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in source.named_parameters():
            t = target[name]
            if t.shape == value.shape:
                t.copy_(value)
            else:  # (h, E, w) per head: the source's heads first
                t[: value.shape[0]].copy_(value)


def check_sizes(model_cfg: ModelConfig, task: TaskConfig) -> None:
    """Raise ValueError unless the model's sizes (n, d, n', d') are the task's."""
    sizes = (model_cfg.n, model_cfg.d, model_cfg.n_prime, model_cfg.d_prime)
    if sizes != (task.n, task.d, task.n_prime, task.d_prime):
        raise ValueError(
            f"model sizes (n, d, n', d') = {sizes} do not match the task's "
            f"{(task.n, task.d, task.n_prime, task.d_prime)}"
        )


def resumed_step(metrics: dict[str, Any], cfg: TrainConfig) -> int:
    """The step a checkpoint with `metrics` resumes from; refused unless it is below cfg.steps."""
    start_step = int(metrics.get("steps_done", 0))
    if not 0 <= start_step < cfg.steps:
        raise ValueError(
            f"the checkpoint has done {start_step} of {cfg.steps} steps; pass a larger "
            "--steps to continue it"
        )
    return start_step


class Batch(NamedTuple):
    """One seed's training prompts of a step: its shards' prompts, and their block prompts z0 and
    hidden D blocks joined over the shards."""

    parts: list[Prompt]
    z0: torch.Tensor
    target: torch.Tensor

    @classmethod
    def draw(
        cls, task: TaskConfig, streams: list[torch.Generator], size: int, dtype: torch.dtype
    ) -> Batch:
        """`size` prompts of `task` from each stream, in `dtype`."""
        parts = [sample(task, size, g, dtype=dtype) for g in streams]
        return cls(parts, torch.cat([p.z0() for p in parts]), torch.cat([p.D for p in parts]))

    def norms_a(self) -> torch.Tensor:
        """‖A‖₂ of every prompt of the batch (float64)."""
        return torch.linalg.matrix_norm(
            torch.cat([p.A for p in self.parts]).detach().double(), ord=2
        )


@dataclass
class SeedLog:
    """What one seed's run records while it trains: the spike log, the running losses the spike
    test compares against, the validation history and the best validated weights."""

    history: list[dict[str, Any]]
    spikes: list[dict[str, Any]]
    best: dict[str, Any]
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=200))
    window_loss: float = 0.0
    window_steps: int = 0
    skipped: int = 0

    @classmethod
    def resumed(cls, previous: dict[str, Any], state: dict[str, torch.Tensor]) -> SeedLog:
        """The log a run continues from its checkpoint's `previous` metrics ({} for a fresh run);
        `state`: the weights it starts with, the best until a validation beats them."""
        best_val = previous.get("best_val_mse")
        best_selected = previous.get("best_val_selected", best_val)
        best = {
            "val_selected": best_selected if best_selected is not None else math.inf,
            "val_mse": best_val if best_val is not None else math.inf,
            "step": previous.get("best_step", 0),
            "state": state,
        }
        return cls(list(previous.get("history", [])), list(previous.get("spikes", [])), best)

    def judge(self, cfg: TrainConfig, step: int, value: float, batch: Batch) -> bool:
        """Log the step's training loss `value`; True when its update is to be applied, False when
        it is dropped (a spike with `skip_spikes`, or a loss that is not finite)."""
        recent = self.recent
        median = self.running_median() if len(recent) >= 20 else math.inf
        is_spike = not math.isfinite(value) or value > cfg.spike_factor * median
        drop = is_spike and (cfg.skip_spikes or not math.isfinite(value))
        if is_spike:
            norm = batch.norms_a()
            self.spikes.append(
                {
                    "step": step,
                    "loss": value if math.isfinite(value) else None,
                    "running_median": median if math.isfinite(median) else None,
                    "batch_max_norm_a": float(norm.max()),
                    "batch_median_norm_a": float(norm.median()),
                    "skipped": bool(drop),
                }
            )
        if drop:
            self.skipped += 1
        else:
            recent.append(value)
            self.window_loss += value
            self.window_steps += 1
        return not drop

    def running_median(self) -> float:
        """The (upper) median of the last 200 kept losses: the spike test's yardstick and the
        loss the progress bar shows, which one spike cannot move; NaN before any step."""
        recent = sorted(self.recent)
        return recent[len(recent) // 2] if recent else math.nan

    def validated(
        self,
        cfg: TrainConfig,
        step: int,
        errors: dict[str, torch.Tensor],
        lr: float,
        seconds: float,
        state: Callable[[], dict[str, torch.Tensor]],
    ) -> dict[str, Any]:
        """Record a validation at `step` from the held-out prompt errors (`evaluate.summarize`'s
        input), keep `state()` when it is the best so far, start a new loss window; the row."""
        summary = summarize(errors)
        trimmed = trimmed_mean(errors["model"], TRIM)
        val = {"mean": summary["mse"], "median": summary["median_mse"], "trimmed": trimmed}[
            cfg.select
        ]
        val = val if math.isfinite(val) else math.inf
        row = {
            "step": step,
            "train_loss": self.window_loss / max(1, self.window_steps),
            "val_mse": summary["mse"],
            "val_median": summary["median_mse"],
            "val_trimmed": trimmed,
            "val_worst": summary["worst_mse"],
            "val_selected": val if math.isfinite(val) else None,
            "lr": lr,
            "seconds": seconds,
        }
        self.history.append(row)
        if val < self.best["val_selected"]:
            self.best.update(
                val_selected=val,
                val_mse=summary["mse"] if math.isfinite(summary["mse"]) else math.inf,
                step=step,
                state=state(),
            )
        self.window_loss, self.window_steps = 0.0, 0
        return row

    def kept_state(
        self, cfg: TrainConfig, current: Callable[[], dict[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """The weights the run returns: the best validated ones with `keep_best` once a
        validation ran, else `current()`."""
        return self.best["state"] if cfg.keep_best and self.history else current()


@dataclass
class RunClock:
    """Where a run is: the step it started from, the step it is at, when it started and the
    interrupt that stopped it (None while none has)."""

    start_step: int
    step: int = 0
    start: float = field(default_factory=time.perf_counter)
    interrupted: KeyboardInterrupt | None = None

    def __post_init__(self) -> None:
        self.step = self.start_step

    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def metrics(self, cfg: TrainConfig, log: SeedLog, processes: int) -> dict[str, Any]:
        """A seed's metrics as a checkpoint records them (`cfg`: that seed's configuration)."""
        step = self.step
        steps_done = step if self.interrupted is not None or step >= cfg.steps else step + 1
        elapsed = self.seconds()
        best = log.best
        return {
            "train_config": cfg.to_dict(),
            "steps_done": steps_done,
            "wall_seconds": elapsed,
            "seconds_per_step": elapsed / max(1, steps_done - self.start_step),
            "resumed_from_step": self.start_step,
            "best_step": best["step"],
            "best_val_mse": best["val_mse"] if math.isfinite(best["val_mse"]) else None,
            "best_val_selected": (
                best["val_selected"] if math.isfinite(best["val_selected"]) else None
            ),
            "skipped_steps": log.skipped,
            "spikes": log.spikes[-200:],
            "spike_count": len(log.spikes),
            "history": log.history,
            "torch": str(torch.__version__),
            "processes": processes,
            "threads": torch.get_num_threads(),
        }


class Stepper(Protocol):
    """The model side of a training step for one or more seeds trained together (`run_steps`):
    `streams[k]`, seed k's prompt streams; the losses of a step's batches, then the update of
    the seeds whose step is applied; the held-out errors and weights of each seed."""

    streams: list[list[torch.Generator]]

    def begin(self, step: int, factor: float) -> None:
        """Set the learning rates (peak × `factor`) and freezing for `step`."""

    def losses(self, batches: list[Batch]) -> list[float]:
        """Each seed's training loss on its batch."""

    def update(self, applied: list[bool]) -> None:
        """One optimiser step for each seed whose entry of `applied` is True."""

    def validation_errors(self) -> list[dict[str, torch.Tensor]]:
        """Each seed's per-prompt errors on its held-out prompts (`evaluate.summarize`'s input)."""

    def state(self, k: int) -> dict[str, torch.Tensor]:
        """Seed k's current weights as a plain model's state dict."""


def run_steps(
    cfg: TrainConfig,
    task: TaskConfig,
    stepper: Stepper,
    logs: list[SeedLog],
    clock: RunClock,
    *,
    dtype: torch.dtype,
    progress: bool,
    desc: str = "train",
    on_validation: Callable[[list[dict[str, Any]]], None] | None = None,
    after_step: Callable[[int, list[float]], None] | None = None,
) -> None:
    """The training loop of every run, from `clock.start_step` to cfg.steps: each step sets the
    rates, draws each seed's batch (the curriculum's task at that point), judges each seed's loss
    (`SeedLog.judge`) and applies the kept updates; every eval_every steps and after the last it
    validates every seed and calls `on_validation(rows)`; `after_step(steps_done, losses)` ends
    each step. A KeyboardInterrupt ends the loop, kept in `clock.interrupted`."""
    curriculum = (
        Curriculum(start=cfg.curriculum_start, until=cfg.curriculum_until)
        if cfg.curriculum
        else None
    )
    shard_batch = cfg.batch // cfg.data_shards
    lr = cfg.lr
    bar = tqdm(
        total=cfg.steps,
        initial=clock.start_step,
        disable=not progress,
        desc=desc,
        unit="step",
        smoothing=0.05,
    )
    try:
        for step in range(clock.start_step, cfg.steps):
            clock.step = step
            factor = lr_factor(cfg, step)
            lr = cfg.lr * factor
            stepper.begin(step, factor)
            step_task = curriculum.at(task, step / cfg.steps) if curriculum else task
            batches = [Batch.draw(step_task, s, shard_batch, dtype) for s in stepper.streams]
            values = stepper.losses(batches)
            applied = [
                log.judge(cfg, step, value, batch)
                for log, value, batch in zip(logs, values, batches, strict=True)
            ]
            stepper.update(applied)
            if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
                rows = [
                    log.validated(
                        cfg, step + 1, errors, lr, clock.seconds(), partial(stepper.state, k)
                    )
                    for k, (log, errors) in enumerate(
                        zip(logs, stepper.validation_errors(), strict=True)
                    )
                ]
                if len(rows) == 1:
                    bar.set_postfix_str(bar_text(logs[0], rows[0]))
                if on_validation is not None:
                    on_validation(rows)
            if after_step is not None:
                after_step(step + 1, values)
            bar.update(1)
    except KeyboardInterrupt as stop:
        clock.interrupted = stop
    finally:
        bar.close()


def bar_text(log: SeedLog, row: dict[str, Any]) -> str:
    """The progress bar's numbers after a validation: the median of the last (up to 200) kept
    training losses, not a window mean one spike can inflate a thousandfold; the spikes so far;
    the validation MSE."""
    kept = len(log.recent)
    return (
        f"loss {number(log.running_median())} (median of {kept}), "
        f"{plural(len(log.spikes), 'spike')}, val {number(row['val_mse'])}"
    )


def optimizer(
    params: list[torch.Tensor], cfg: TrainConfig, gains: list[torch.Tensor]
) -> torch.optim.Optimizer:
    """Adam (AdamW with weight decay) on the models' parameters and the head log-gains (their own
    rate, no decay); each group keeps its peak rate as `base_lr`. Adam is per tensor: the tensors
    of several models in one optimiser move as in one optimiser each, and a tensor whose `grad`
    is None is left alone, its step count too."""
    groups: list[dict[str, Any]] = [{"params": params, "base_lr": cfg.lr}]
    if gains:
        groups.append({"params": gains, "base_lr": cfg.gain_lr, "weight_decay": 0.0})
    if cfg.weight_decay > 0:
        return torch.optim.AdamW(
            groups, lr=cfg.lr, betas=(ADAM_BETA1, 0.999), weight_decay=cfg.weight_decay
        )
    return torch.optim.Adam(groups, lr=cfg.lr, betas=(ADAM_BETA1, 0.999))


def set_rate(optimizer: torch.optim.Optimizer, factor: float) -> None:
    """Every group of `optimizer` at `factor` times its peak rate (the schedule's step)."""
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor


def clip(qk: list[torch.Tensor], trained: list[torch.Tensor], cfg: TrainConfig) -> None:
    """One model's gradient-norm clips, before its Adam step: the query/key weights `qk` to
    `clip_qk`, then everything it trains (`trained`, head gains included) to `clip`."""
    if cfg.clip_qk > 0:
        torch.nn.utils.clip_grad_norm_(qk, cfg.clip_qk)
    if cfg.clip > 0:
        torch.nn.utils.clip_grad_norm_(trained, cfg.clip)


class _ModelStepper:
    """The `Stepper` of one model: torch.optim Adam, the gradient-norm clips, W_V/W_P frozen from
    the freeze step on, and under torchrun one DistributedDataParallel model a process."""

    def __init__(
        self, model: LinearTransformer, task: TaskConfig, cfg: TrainConfig, start_step: int
    ) -> None:
        self.model, self.cfg = model, cfg
        self.rank, self.world = _process_group()
        self.streams = [prompt_streams(cfg, cfg.seed, start_step, self.rank, self.world)]
        self.net = model
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(model)
        self.val_prompts = held_out(task, cfg, cfg.seed)
        self.log_gain = _attach_gains(model) if cfg.gain_lr > 0 else None
        gains = [self.log_gain] if self.log_gain is not None else []
        self.optimizer = optimizer(list(model.parameters()), cfg, gains)
        named = list(model.named_parameters())
        self.qk_params = [p for n, p in named if n.endswith(("W_Q", "W_K"))]
        self.value_params = [p for n, p in named if n.endswith(("W_V", "W_P"))]
        self.loss: torch.Tensor | None = None

    def begin(self, step: int, factor: float) -> None:
        set_rate(self.optimizer, factor)
        if values_frozen(self.cfg, step):
            for p in self.value_params:
                p.requires_grad_(False)
                p.grad = None

    def losses(self, batches: list[Batch]) -> list[float]:
        (batch,) = batches
        self.loss = (self.net(batch.z0) - batch.target).square().mean()
        return [_global_mean(float(self.loss.detach()), self.world)]

    def update(self, applied: list[bool]) -> None:
        loss, optimizer = self.loss, self.optimizer
        if not applied[0]:
            if self.world > 1:  # DDP needs the backward pass it prepared for; drop its result
                loss.backward()
                optimizer.zero_grad(set_to_none=True)
            return
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trained = [p for p in self.model.parameters() if p.requires_grad]
        gains = [self.log_gain] if self.log_gain is not None else []
        clip(self.qk_params, trained + gains, self.cfg)
        optimizer.step()

    def validation_errors(self) -> list[dict[str, torch.Tensor]]:
        self.model.eval()
        errors = prompt_errors(self.model, self.val_prompts, reference=False)
        self.model.train()
        return [errors]

    def state(self, k: int = 0) -> dict[str, torch.Tensor]:
        return fold_gains(copy.deepcopy(self.model.state_dict()), self.log_gain)

    def model_with(self, state: dict[str, torch.Tensor]) -> LinearTransformer:
        """A plain model carrying `state` (the training model keeps its weights)."""
        return plain_model(self.model.cfg, state)


def with_shards(cfg: TrainConfig, world: int) -> TrainConfig:
    """`cfg` with the data shards that run on `world` processes (one each unless set), refused
    unless they split over the processes and split the batch evenly."""
    shards = world if cfg.data_shards is None else cfg.data_shards
    if shards % world:
        raise ValueError(
            f"{world} processes need data_shards to be a multiple of {world} "
            f"(got {cfg.data_shards}); pass --data-shards {world} or leave it unset"
        )
    if cfg.batch % shards:
        raise ValueError(
            f"a batch of {cfg.batch} prompts does not split into {shards} equal shards "
            f"(one per process); pass a --batch that {shards} divides"
        )
    return replace(cfg, data_shards=shards)


def starting_model(
    model_cfg: ModelConfig,
    seed: int,
    state: dict[str, torch.Tensor] | None = None,
    init_from: LinearTransformer | None = None,
) -> LinearTransformer:
    """Seed `seed`'s initialisation, grown from `init_from` or carrying a resumed `state`."""
    model = LinearTransformer(model_cfg, generator=make_generator(_seeds(seed)[0]))
    if init_from is not None:
        if state is not None:
            raise ValueError("init_from starts a fresh run; resume continues one: pass one")
        grow(model, init_from)
    if state is not None:
        model.load_state_dict(state)
    return model


class _Snapshots:
    """`train`'s timeline checkpoints: `on_save(step, model, info)` at the steps `save_every`
    names (on the first process only), each with the spikes since the one before."""

    def __init__(
        self,
        stepper: _ModelStepper,
        log: SeedLog,
        save_every: int,
        on_save: Callable[[int, LinearTransformer, dict[str, Any]], None] | None,
    ) -> None:
        self.stepper, self.log, self.save_every, self.on_save = stepper, log, save_every, on_save
        self.saved_spikes = len(log.spikes)

    def __call__(self, done: int, loss: float | None) -> None:
        if not self.save_every or self.on_save is None or self.stepper.rank != 0:
            return
        spikes = self.log.spikes
        info = {"step": done, "train_loss": loss, "spikes": spikes[self.saved_spikes :]}
        self.saved_spikes = len(spikes)
        self.on_save(done, self.stepper.model_with(self.stepper.state()), info)

    def after_step(self, done: int, values: list[float]) -> None:
        if self.save_every and (done % self.save_every == 0 or done == self.stepper.cfg.steps):
            (value,) = values
            self(done, value if math.isfinite(value) else None)


def train(
    model_cfg: ModelConfig,
    task: TaskConfig,
    cfg: TrainConfig,
    *,
    progress: bool = True,
    on_validate: Callable[[LinearTransformer, dict[str, Any]], None] | None = None,
    resume: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None,
    save_every: int = 0,
    on_save: Callable[[int, LinearTransformer, dict[str, Any]], None] | None = None,
    init_from: LinearTransformer | None = None,
) -> tuple[LinearTransformer, dict[str, Any]]:
    """Train a fresh model; return it (best validated weights if `keep_best`) and its metrics.

    `resume=(state_dict, metrics)` continues a run from a checkpoint: its weights (the best
    validated ones), its step count, history and spike log; the optimiser state starts afresh
    and the training prompts come from a new stream (seeded by the seed and the step reached).

    `on_validate(model_with_best_weights, metrics)` runs after every validation, e.g. to write a
    checkpoint, so an interrupted run keeps its progress. KeyboardInterrupt stops training early:
    the metrics then say `interrupted: True` and the best weights so far are returned.

    `save_every` K > 0 calls `on_save(step, model_with_current_weights, info)` at step 0 (a fresh
    run), every K steps and after the last, info = {"step", "train_loss" (of that step),
    "spikes" (those since the previous call)}: the checkpoints of a timeline.

    `init_from` starts a fresh run from another model's weights (`grow`: its heads become the
    first heads, the others keep their random initialisation).

    The metrics say why the run stopped (`stop_record`: finished, interrupted, diverged).
    """
    if not isinstance(save_every, int) or isinstance(save_every, bool) or save_every < 0:
        raise ValueError(f"save_every must be a non-negative integer, got {save_every!r}")
    check_in_dtype(cfg, task, model_cfg.torch_dtype)
    check_sizes(model_cfg, task)
    model = starting_model(model_cfg, cfg.seed, None if resume is None else resume[0], init_from)
    start_step = 0 if resume is None else resumed_step(resume[1], cfg)
    model.train()
    cfg = with_shards(cfg, _process_group()[1])  # the metrics record the shards that ran
    stepper = _ModelStepper(model, task, cfg, start_step)
    log = SeedLog.resumed(resume[1] if resume is not None else {}, stepper.state())
    clock = RunClock(start_step)
    snapshots = _Snapshots(stepper, log, save_every, on_save)

    def validated(rows: list[dict[str, Any]]) -> None:
        if on_validate is not None and stepper.rank == 0:
            metrics = clock.metrics(cfg, log, stepper.world)
            on_validate(stepper.model_with(log.best["state"]), metrics)

    if start_step == 0:
        snapshots(0, None)
    run_steps(
        cfg,
        task,
        stepper,
        [log],
        clock,
        dtype=model_cfg.torch_dtype,
        progress=progress,
        on_validation=validated,
        after_step=snapshots.after_step,
    )
    state = log.kept_state(cfg, stepper.state)
    if stepper.log_gain is not None:
        model.reset_hooks(including_permanent=True)
    final = stepper.model_with(state)
    metrics = clock.metrics(cfg, log, stepper.world)
    return final, metrics | stop_record(
        clock.interrupted, log.history, metrics["best_val_selected"]
    )


def _attach_gains(model: LinearTransformer) -> torch.Tensor:
    """A zero log-gain per layer and head, applied to each head's output by permanent hooks."""
    cfg = model.cfg
    log_gain = torch.nn.Parameter(torch.zeros(cfg.n_layers, cfg.heads, dtype=cfg.torch_dtype))

    def scaler(layer: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def hook(result: torch.Tensor, hook: Any) -> torch.Tensor:  # (b, T, h, E)
            return result * log_gain[layer].exp().view(1, 1, -1, 1)

        return hook

    for layer in range(cfg.n_layers):
        model.add_hook(f"blocks.{layer}.attn.hook_result", scaler(layer), is_permanent=True)
    return log_gain


def fold_gains(
    state: dict[str, torch.Tensor], log_gain: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """`state` (changed in place, returned) with each head's gain exp(g) multiplied into its W_P;
    `log_gain` (L, h), None: no gains."""
    if log_gain is not None:
        for layer, gains in enumerate(log_gain.detach().exp()):  # (h,) a layer
            key = f"blocks.{layer}.attn.W_P"
            state[key] = state[key] * gains.view(-1, 1, 1).to(state[key].dtype)
    return state


def plain_model(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> LinearTransformer:
    """A model of `cfg` carrying `state`, in eval mode."""
    model = LinearTransformer(cfg)
    model.load_state_dict(state)
    model.eval()
    return model
