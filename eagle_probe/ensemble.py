"""Seeds in one process: K runs of one training configuration trained together.

Every parameter of the K models is stacked on a leading seed axis and the K batches go through
batched forwards (`stacked_prediction`, all seeds at once, a slice of every seed's batch a pass),
so the Python and autograd overhead of a step is paid once for K seeds. Each seed keeps
everything a separate `train.train` run with that seed has: its initialisation, its training and
validation prompts (the same seeded streams, see `train._seeds`), its own step (`train.clip`
and torch's Adam on its slices of the stacked gradients and parameters, which are views of the
stacked ones; Adam is per tensor, and a seed whose step is dropped, a skipped spike, is left out
of it, its step count too), spike log, validation, selection and kept weights. In float64 each
seed's result equals the separate run's to rounding (tests/test_ensemble.py).

The batched forward computes the layer of `model.py`,

    Z ← Z + Σ_h ((Z W_QK^h Zᵀ) ⊙ M) Z W_VP^h,

with the products W_QK = W_Q W_Kᵀ and W_VP = W_V W_Pᵀ formed once per forward. When M is a column
mask (every token attends to the same key tokens: the visible mask, the sample layout) the
masked scores never need forming: (Z W_QK Zᵀ ⊙ M) Z = Z W_QK G with the Gram matrix
G = Z_keysᵀ Z_keys (E, E), shared by the heads. The spectral prompt scale ‖A‖₂ is read from the
largest eigenvalue of the smaller Gram matrix of A / ‖A‖_F (cheaper than an SVD, no overflow).
Measured speed-ups against sequential runs are in docs/training.md ("Seeds in one process").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from eagle_probe.model import (
    LinearTransformer,
    ModelConfig,
    head_selector,
    prompt_scale,
    qk_row_mask,
    readout,
    stream_weights,
    to_stream,
    token_mask,
)
from eagle_probe.names import MAX_SEEDS
from eagle_probe.tasks import TaskConfig
from eagle_probe.train import (
    Batch,
    RunClock,
    SeedLog,
    TrainConfig,
    check_in_dtype,
    check_sizes,
    clip,
    fold_gains,
    held_out,
    optimizer,
    plain_model,
    prompt_streams,
    resumed_step,
    run_steps,
    set_rate,
    starting_model,
    stop_record,
    torchrun_env,
    values_frozen,
    with_shards,
)

# prompts (over all seeds) per forward-backward pass of a training step; measured best on a
# 2-core CPU: 512 (K = 8, batch 1024: 25.5 ms per 1024 prompts, 38.7 ms in one pass)
PASS_PROMPTS = 512


def stack_models(models: Sequence[LinearTransformer]) -> dict[str, torch.Tensor]:
    """The models' parameters stacked on a leading seed axis: name -> (K, *shape)."""
    return {
        name: torch.stack([dict(m.named_parameters())[name].detach() for m in models]).clone()
        for name, _ in models[0].named_parameters()
    }


def _column_keys(cfg: ModelConfig) -> int | None:
    """The number of key tokens when the token mask is a column mask (all tokens attend to the
    first `keys` tokens, nothing else), else None."""
    mask = token_mask(cfg)  # (T, T)
    column = torch.zeros_like(mask)
    column[:, : cfg.keys] = 1.0
    return cfg.keys if torch.equal(mask, column) else None


def spectral_norm(A: torch.Tensor) -> torch.Tensor:
    """‖A‖₂ of matrices A (…, d, n) from the largest eigenvalue of the smaller Gram matrix of
    A / ‖A‖_F (cheaper than an SVD, no overflow): (…)."""
    tiny = torch.finfo(A.dtype).tiny
    fro = torch.linalg.matrix_norm(A, ord="fro").clamp_min(tiny)  # (…)
    unit = A / fro[..., None, None]  # ‖unit‖_F = 1: its Gram cannot overflow
    gram = unit @ unit.mT if A.shape[-2] <= A.shape[-1] else unit.mT @ unit
    top = torch.linalg.eigvalsh(gram)[..., -1].clamp_min(0.0)  # ‖unit‖₂²
    return fro * top.sqrt()


def stacked_prediction(
    cfg: ModelConfig,
    weights: dict[str, torch.Tensor],
    z0: torch.Tensor,
    *,
    log_gain: torch.Tensor | None = None,
) -> torch.Tensor:
    """K models' predictions of D, model k on its own prompts z0[k].

    `weights`: a `stack_models` dict (name -> (K, *shape)); z0: (K, b, d + d', n + n') block
    prompts; `log_gain` (K, L, h): each head's output multiplied by exp(g) (`TrainConfig.gain_lr`).
    Returns (K, b, d', n'), what `LinearTransformer.forward` gives for each model."""
    K, b = z0.shape[:2]
    dtype = cfg.torch_dtype
    h, E, T = cfg.heads, cfg.width, cfg.n_tokens
    z0 = z0.to(dtype)
    scale = prompt_scale(cfg, z0, spectral=spectral_norm)  # (K, b, 1, 1) or (K, b, 1, n + n')
    z = to_stream(cfg, z0 / scale)  # (K, b, T, E)
    selector = head_selector(cfg)
    selector = None if selector is None else selector.to(dtype)  # (h, E, head_input)
    key_norm = 1.0 / cfg.n if cfg.samples else 1.0
    keys = _column_keys(cfg)
    mask = token_mask(cfg).to(dtype) * key_norm  # (T, T)
    qk_mask = qk_row_mask(cfg).to(dtype)[None, :, :, None]  # (1, h, E, 1)
    for layer in range(cfg.n_layers):
        p = f"blocks.{layer}.attn."
        W_Q, W_K, W_V = (
            stream_weights(weights[p + name], selector, h) for name in ("W_Q", "W_K", "W_V")
        )  # (K, h, E, k) each, as the heads apply them to the stream
        W_Q, W_K = W_Q * qk_mask, W_K * qk_mask  # (K, h, E, qk)
        qk = (W_Q @ W_K.mT).permute(0, 2, 1, 3).reshape(K, E, h * E)  # (K, E, h·E)
        vp = W_V @ weights[p + "W_P"].mT  # (K, h, E, E)
        if log_gain is not None:
            vp = vp * log_gain[:, layer].exp()[:, :, None, None]
        y1 = z.reshape(K, b * T, E) @ qk  # (K, b·T, h·E): row (b, t), column (h, e) = z_t W_QK^h
        zb = z.reshape(K * b, T, E)  # (K·b, T, E)
        if keys is not None:
            seen = zb[:, :keys]  # (K·b, keys, E)
            gram = seen.mT @ seen  # (K·b, E, E)
            if key_norm != 1.0:
                gram = gram * key_norm
            y2 = y1.view(K * b, T * h, E) @ gram  # (K·b, T·h, E)
        else:
            scores = y1.view(K * b, T * h, E) @ zb.mT  # (K·b, T·h, T)
            scores = scores.view(K * b, T, h, T) * mask[:, None, :]
            y2 = scores.view(K * b, T * h, T) @ zb  # (K·b, T·h, E)
        out = y2.view(K, b * T, h * E) @ vp.reshape(K, h * E, E)  # (K, b·T, E), heads summed
        z = z + out.view(K, b, T, E)
    readout_scale = weights.get("readout_scale")
    if readout_scale is None:
        readout_scale = torch.tensor(-1.0 if cfg.readout != "direct" else 1.0, dtype=dtype)
    else:
        readout_scale = readout_scale.view(K, 1, 1, 1)
    return readout(cfg, z, scale, readout_scale)


def _loss_and_grads(
    cfg: ModelConfig,
    params: dict[str, torch.Tensor],
    log_gain: torch.Tensor | None,
    z0: torch.Tensor,
    target: torch.Tensor,
    inputs: list[torch.Tensor],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Each seed's training loss (K,) and the gradients of their sum for `inputs`.

    The batch goes through in passes of about PASS_PROMPTS prompts (all seeds, a slice of each
    seed's batch), the gradients summed: the same numbers as one pass over the whole batch, with
    activations small enough to stay in cache (one pass of K × 1024 prompts is memory-bound)."""
    K, b = target.shape[:2]
    count = b * target.shape[-2] * target.shape[-1]  # elements of one seed's D blocks
    size = max(1, PASS_PROMPTS // K)
    losses = torch.zeros(K, dtype=torch.float64)
    total = [torch.zeros_like(x) for x in inputs]
    for lo in range(0, b, size):
        pred = stacked_prediction(cfg, params, z0[:, lo : lo + size], log_gain=log_gain)
        part = (pred - target[:, lo : lo + size]).square().sum(dim=(1, 2, 3)) / count  # (K,)
        for t, g in zip(total, torch.autograd.grad(part.sum(), inputs), strict=True):
            t.add_(g)
        losses += part.detach().double()
    return losses, total


class _StackedStepper:
    """The `Stepper` of K seeds trained together: their parameters stacked on a seed axis, one
    batched forward-backward for all seeds (`_loss_and_grads`), then each seed's own step as
    `train.train` takes it (`train.clip` on its slices of the gradients, torch's Adam on its
    slices of the parameters), W_V/W_P frozen from the freeze step on."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        task: TaskConfig,
        cfg: TrainConfig,
        seeds: list[int],
        models: list[LinearTransformer],
        start_step: int,
    ) -> None:
        K = len(seeds)
        self.model_cfg, self.cfg = model_cfg, cfg
        # (K, …) each; seed k's parameters are the views [k], which its optimiser moves in place
        self.params = stack_models(models)
        self.template = {k: v for k, v in models[0].state_dict().items() if k not in self.params}
        self.log_gain = None
        if cfg.gain_lr > 0:
            shape = (K, model_cfg.n_layers, model_cfg.heads)
            self.log_gain = torch.zeros(shape, dtype=model_cfg.torch_dtype)
        self.seeds = [{name: p[k] for name, p in self.params.items()} for k in range(K)]
        self.gains = [] if self.log_gain is None else list(self.log_gain)  # (L, h) views
        self.optimizer = optimizer([p for own in self.seeds for p in own.values()], cfg, self.gains)
        self.qk_names = [n for n in self.params if n.endswith(("W_Q", "W_K"))]
        self.value_names = {n for n in self.params if n.endswith(("W_V", "W_P"))}
        self.streams = [prompt_streams(cfg, s, start_step) for s in seeds]
        self.val_prompts = [held_out(task, cfg, s) for s in seeds]
        self.frozen = False
        self.grads: dict[str, torch.Tensor] = {}

    def begin(self, step: int, factor: float) -> None:
        set_rate(self.optimizer, factor)
        self.frozen = values_frozen(self.cfg, step)

    def losses(self, batches: list[Batch]) -> list[float]:
        z0 = torch.stack([b.z0 for b in batches])  # (K, b, d + d', n + n')
        target = torch.stack([b.target for b in batches])  # (K, b, d', n')
        frozen = self.value_names if self.frozen else set()
        # aliases of the stacked parameters for autograd, the gradients of the trained ones
        inputs = {n: p.detach().requires_grad_(n not in frozen) for n, p in self.params.items()}
        gain = None if self.log_gain is None else self.log_gain.detach().requires_grad_()
        trained = {n: p for n, p in inputs.items() if n not in frozen}
        if gain is not None:
            trained["log_gain"] = gain
        losses, grads = _loss_and_grads(
            self.model_cfg, inputs, gain, z0, target, list(trained.values())
        )
        self.grads = dict(zip(trained, grads, strict=True))
        return losses.tolist()

    def update(self, applied: list[bool]) -> None:
        """Each applied seed's own clips and Adam step on its slices; a dropped seed's gradient
        (maybe NaN) is not read, and its parameters, moments and step count stay as they were."""
        for k, own in enumerate(self.seeds):
            gains = self.gains[k : k + 1]
            for name, p in [*own.items(), *(("log_gain", g) for g in gains)]:
                p.grad = self.grads[name][k] if applied[k] and name in self.grads else None
            if applied[k]:
                trained = [p for p in [*own.values(), *gains] if p.grad is not None]
                clip([own[n] for n in self.qk_names], trained, self.cfg)
        self.optimizer.step()

    @torch.no_grad()
    def validation_errors(self) -> list[dict[str, torch.Tensor]]:
        K, dtype = len(self.val_prompts), self.model_cfg.torch_dtype
        chunk = max(1, 4096 // K)
        errors: list[list[torch.Tensor]] = [[] for _ in range(K)]
        for lo in range(0, self.cfg.eval_batch, chunk):
            parts = [v[lo : lo + chunk] for v in self.val_prompts]
            z0 = torch.stack([p.z0().to(dtype) for p in parts])  # (K, c, d + d', n + n')
            pred = stacked_prediction(self.model_cfg, self.params, z0, log_gain=self.log_gain)
            pred = pred.double()
            for k, part in enumerate(parts):
                errors[k].append((pred[k] - part.D).square().mean(dim=(-1, -2)))
        return [{"model": torch.cat(e)} for e in errors]

    def state(self, k: int) -> dict[str, torch.Tensor]:
        """Seed k's state dict (buffers from the template), the head gains folded into W_P."""
        state = {name: value.clone() for name, value in self.template.items()}
        state |= {name: value[k].detach().clone() for name, value in self.params.items()}
        return fold_gains(state, None if self.log_gain is None else self.log_gain[k])


def _check_seeds(seeds: list[int], cfg: TrainConfig) -> None:
    """Refuse an empty, too long or repeating seed list, and a seed no configuration takes."""
    if not seeds:
        raise ValueError("give at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"at most {MAX_SEEDS} seeds train together, got {len(seeds)}")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"the seeds repeat: {seeds}")
    for seed in seeds:
        replace(cfg, seed=seed)  # each seed's config is valid


def _resume_step(
    resume: Sequence[tuple[dict[str, torch.Tensor], dict[str, Any]]] | None,
    K: int,
    cfg: TrainConfig,
) -> int:
    """The step every seed's checkpoint resumes from (0 for a fresh run); refused unless there is
    one checkpoint a seed and all have done the same steps."""
    if resume is None:
        return 0
    if len(resume) != K:
        raise ValueError(f"resume holds {len(resume)} checkpoints for {K} seeds")
    done = sorted({int(metrics.get("steps_done", 0)) for _, metrics in resume})
    if len(done) > 1:
        raise ValueError(
            f"the seeds' checkpoints have done different numbers of steps ({done}): resume "
            "them one at a time"
        )
    return resumed_step({"steps_done": done[0]}, cfg)


def train_ensemble(
    model_cfg: ModelConfig,
    task: TaskConfig,
    cfg: TrainConfig,
    seeds: Sequence[int],
    *,
    progress: bool = True,
    on_validate: Callable[[int, LinearTransformer, dict[str, Any]], None] | None = None,
    resume: Sequence[tuple[dict[str, torch.Tensor], dict[str, Any]]] | None = None,
) -> list[tuple[LinearTransformer, dict[str, Any]]]:
    """Train one model per seed of `seeds` with `cfg` (its own `seed` is replaced by each);
    return [(model, metrics)] in the order of `seeds`, each what `train.train` returns for that
    seed. `on_validate(index, model_with_best_weights, metrics)` runs for every seed after every
    validation. KeyboardInterrupt stops all seeds: their metrics say `interrupted: True` (and why
    each stopped, `train.stop_record`).

    `resume` (one (state_dict, metrics) per seed, all at the same `steps_done`) continues each
    seed as `train.train(resume=...)` continues it: from its checkpoint's weights, step count,
    history and spikes, with fresh optimiser moments and the prompt streams of the step reached."""
    seeds = list(seeds)
    _check_seeds(seeds, cfg)
    check_in_dtype(cfg, task, model_cfg.torch_dtype)
    if torchrun_env()[1] > 1:
        raise ValueError("seeds in one process do not combine with torchrun; launch one run")
    check_sizes(model_cfg, task)
    cfg = with_shards(cfg, 1)
    K = len(seeds)
    start_step = _resume_step(resume, K, cfg)
    states = [state for state, _ in resume] if resume is not None else [None] * K
    models = [starting_model(model_cfg, s, st) for s, st in zip(seeds, states, strict=True)]
    stepper = _StackedStepper(model_cfg, task, cfg, seeds, models, start_step)
    previous = [metrics for _, metrics in resume] if resume is not None else [{}] * K
    logs = [SeedLog.resumed(p, stepper.state(k)) for k, p in enumerate(previous)]
    clock = RunClock(start_step)

    def metrics(k: int) -> dict[str, Any]:
        record = clock.metrics(replace(cfg, seed=seeds[k]), logs[k], processes=1)
        return record | {"ensemble": {"seeds": seeds, "index": k}}  # the wall time is shared

    def validated(rows: list[dict[str, Any]]) -> None:
        if on_validate is not None:
            for k in range(K):
                on_validate(k, plain_model(model_cfg, logs[k].best["state"]), metrics(k))

    run_steps(
        cfg,
        task,
        stepper,
        logs,
        clock,
        dtype=model_cfg.torch_dtype,
        progress=progress,
        desc=f"train x{K}",
        on_validation=validated,
    )
    results = []
    for k, log in enumerate(logs):
        state = log.kept_state(cfg, partial(stepper.state, k))
        record = metrics(k)
        stopped = stop_record(clock.interrupted, log.history, record["best_val_selected"])
        results.append((plain_model(model_cfg, state), record | stopped))
    return results
