"""Seeds in one process: K runs of one training configuration trained together.

Every parameter of the K models is stacked on a leading seed axis and the K batches go through
batched forwards (`stacked_prediction`, all seeds at once, a slice of every seed's batch a pass),
so the Python and autograd overhead of a step is paid once for K seeds. Each seed keeps
everything a separate `train.train` run with that seed has: its initialisation, its training and
validation prompts (the same seeded streams, see `train._seeds`), its own Adam state (Adam is
elementwise, so one update of the stacked tensors is K independent optimisers; each seed counts
its own steps, as a skipped spike step is not a step; the update is torch's, bit for bit), its
own gradient-norm clip, spike log, validation, selection and kept weights. In float64 each
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
    fold_gains,
    held_out,
    plain_model,
    prompt_streams,
    resumed_step,
    run_steps,
    starting_model,
    stop_record,
    torchrun_env,
    values_frozen,
    with_shards,
)

BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which `train.train` uses
EPS = 1e-8
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


class _Adam:
    """torch.optim.Adam / AdamW (single-tensor update) on stacked tensors, one step count per
    seed: seed k's slice moves bit for bit as torch's optimiser on its own tensor would
    (`tests/test_ensemble.py` checks it in float32 and float64)."""

    def __init__(self, seeds: int, weight_decay: float) -> None:
        self.weight_decay = weight_decay
        self.state: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.seeds = seeds

    @torch.no_grad()
    def step(
        self,
        name: str,
        param: torch.Tensor,
        grad: torch.Tensor,
        lr: float,
        active: torch.Tensor,
        decay: bool,
    ) -> None:
        """Update `param` (K, …) with `grad` where `active` (K,) is True."""
        if name not in self.state:
            steps = torch.zeros(self.seeds, dtype=torch.float64)
            self.state[name] = (steps, torch.zeros_like(param), torch.zeros_like(param))
        steps, exp_avg, exp_avg_sq = self.state[name]
        beta1, beta2 = BETAS
        shape = (-1,) + (1,) * (param.ndim - 1)
        on = active.view(shape)
        steps += active.to(torch.float64)
        new_avg = exp_avg.lerp(grad, 1 - beta1)
        new_sq = (exp_avg_sq * beta2).addcmul_(grad, grad, value=1 - beta2)
        exp_avg.copy_(torch.where(on, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(on, new_sq, exp_avg_sq))
        # torch's order of operations, its bias corrections in Python floats: bit for bit
        counts = [max(1.0, c) for c in steps.tolist()]
        neg_step = [-lr / (1 - beta1**c) for c in counts]
        bias2_sqrt = [(1 - beta2**c) ** 0.5 for c in counts]
        neg_step_size = torch.tensor(neg_step, dtype=param.dtype).view(shape)  # (K, 1, …)
        bias2 = torch.tensor(bias2_sqrt, dtype=param.dtype).view(shape)
        moved = param * (1 - lr * self.weight_decay) if decay and self.weight_decay else param
        denom = (exp_avg_sq.sqrt() / bias2).add_(EPS)
        moved = moved + (neg_step_size * exp_avg) / denom  # addcdiv_(exp_avg, denom, -step_size)
        param.copy_(torch.where(on, moved, param))


def _clip(grads: list[torch.Tensor], max_norm: float) -> None:
    """`torch.nn.utils.clip_grad_norm_` applied to each seed's slice of the stacked gradients,
    bit for bit (`test_stacked_clip_is_torchs_clip_grad_norm_bit_for_bit`)."""
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1)  # (K, tensors)
    total = norms.norm(dim=1)  # (K,)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # (K,)
    for g in grads:
        g.mul_(coef.to(g.dtype).view((-1,) + (1,) * (g.ndim - 1)))


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
    batched forward-backward for all seeds (`_loss_and_grads`), each seed's own gradient-norm
    clips and Adam state (`_Adam`), W_V/W_P frozen from the freeze step on."""

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
        self.params = {name: p.requires_grad_() for name, p in stack_models(models).items()}
        self.template = {k: v for k, v in models[0].state_dict().items() if k not in self.params}
        self.log_gain = None
        if cfg.gain_lr > 0:
            shape = (K, model_cfg.n_layers, model_cfg.heads)
            self.log_gain = torch.zeros(shape, dtype=model_cfg.torch_dtype).requires_grad_()
        self.adam = _Adam(K, cfg.weight_decay)
        self.qk_names = [n for n in self.params if n.endswith(("W_Q", "W_K"))]
        self.value_names = {n for n in self.params if n.endswith(("W_V", "W_P"))}
        self.streams = [prompt_streams(cfg, s, start_step) for s in seeds]
        self.val_prompts = [held_out(task, cfg, s) for s in seeds]
        self.lr, self.gain_lr, self.frozen = cfg.lr, cfg.gain_lr, False
        self.trained: dict[str, torch.Tensor] = {}
        self.grads: dict[str, torch.Tensor] = {}

    def begin(self, step: int, factor: float) -> None:
        self.lr, self.gain_lr = self.cfg.lr * factor, self.cfg.gain_lr * factor
        self.frozen = values_frozen(self.cfg, step)

    def losses(self, batches: list[Batch]) -> list[float]:
        z0 = torch.stack([b.z0 for b in batches])  # (K, b, d + d', n + n')
        target = torch.stack([b.target for b in batches])  # (K, b, d', n')
        frozen = self.value_names if self.frozen else set()
        self.trained = {n: p for n, p in self.params.items() if n not in frozen}
        inputs = list(self.trained.values())
        names = [*self.trained]
        if self.log_gain is not None:
            inputs.append(self.log_gain)
            names.append("log_gain")
        losses, grads = _loss_and_grads(
            self.model_cfg, self.params, self.log_gain, z0, target, inputs
        )
        self.grads = dict(zip(names, grads, strict=True))
        return losses.tolist()

    def update(self, applied: list[bool]) -> None:
        on = torch.tensor(applied)
        if not on.any():
            return
        # a dropped seed's gradient (maybe NaN) stays in its own slices: every operation is
        # batched over the seed axis, and the updates below leave those seeds alone
        grads = self.grads
        if self.cfg.clip_qk > 0:
            _clip([grads[n] for n in self.qk_names], self.cfg.clip_qk)
        if self.cfg.clip > 0:
            _clip(list(grads.values()), self.cfg.clip)
        for name, p in self.trained.items():
            self.adam.step(name, p, grads[name], self.lr, on, decay=True)
        if self.log_gain is not None:
            gains = self.log_gain
            self.adam.step("log_gain", gains, grads["log_gain"], self.gain_lr, on, decay=False)

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
