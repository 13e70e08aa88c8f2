"""Test error of a model on fresh prompts of its task distribution.

The mean MSE alone hides the failure that matters here: constant steps tuned for typical prompts
blow up on the rare prompt with a large ‖A‖₂, so the median and the worst prompt are reported too.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any

import torch

from eagle_probe.model import LinearTransformer
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample
from eagle_probe.wording import (  # noqa: F401  (the words every command uses, here too)
    FLIP_FACTOR,
    NO_BETTER,
    against_zero,
    readout_flag,
    readout_hint,
    readout_text,
)


@torch.no_grad()
def reference_errors(prompt: Prompt, *, chunk: int = 4096) -> dict[str, torch.Tensor]:
    """The part of `prompt_errors` no model changes: per-prompt MSE over the D block (b,) of the
    zero predictor and of B A⁺ C, and ‖A‖₂ per prompt. Models scored on the same prompts need it
    once (`prompt_errors(..., reference=...)`)."""
    out: dict[str, list[torch.Tensor]] = collections.defaultdict(list)
    for start in range(0, prompt.batch, chunk):
        part = prompt[start : start + chunk].to(torch.float64)
        out["zero"].append(part.D.square().mean(dim=(-1, -2)))
        out["optimal"].append((part.optimal() - part.D).square().mean(dim=(-1, -2)))
        out["norm_a"].append(torch.linalg.matrix_norm(part.A, ord=2))
    return {k: torch.cat(v) for k, v in out.items()}


@torch.no_grad()
def prompt_errors(
    model: LinearTransformer,
    prompt: Prompt,
    *,
    reference: bool | Mapping[str, torch.Tensor] = True,
    chunk: int = 4096,
) -> dict[str, torch.Tensor]:
    """Per-prompt MSE over the D block: (b,) for the model and, with `reference`, for the model
    read with the other readout sign (its prediction negated), with `reference_errors` beside
    (the zero predictor, B A⁺ C and ‖A‖₂ per prompt): computed here when `reference` is True, or
    passed in as `reference_errors` returned them for the same prompts."""
    if not isinstance(reference, bool):
        wrong = {k: tuple(v.shape) for k, v in reference.items() if v.shape != (prompt.batch,)}
        if wrong:
            raise ValueError(
                f"reference errors of shape {wrong} do not belong to these {prompt.batch} "
                "prompts; pass reference_errors(prompt) of the same prompts"
            )
    out: dict[str, list[torch.Tensor]] = collections.defaultdict(list)
    device = model.readout_scale.device  # the model's device; the errors come back to the CPU
    for start in range(0, prompt.batch, chunk):
        part = prompt[start : start + chunk].to(torch.float64)
        pred = model(part.z0().to(model.cfg.torch_dtype).to(device)).to(torch.float64).cpu()
        out["model"].append((pred - part.D).square().mean(dim=(-1, -2)))
        if reference is not False:
            out["flipped"].append((pred + part.D).square().mean(dim=(-1, -2)))  # −prediction
    errors = {k: torch.cat(v) for k, v in out.items()}
    if reference is True:
        errors |= reference_errors(prompt, chunk=chunk)
    elif reference is not False:
        errors |= dict(reference)
    return errors


def per_prompt_errors(
    model: LinearTransformer, task: TaskConfig, batch: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """`prompt_errors` on `batch` fresh prompts of `task` drawn with `generator`."""
    return prompt_errors(model, sample(task, batch, generator, dtype=torch.float64))


def summarize(errors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The numbers `eagle-probe evaluate` prints (NaN/Inf become None in JSON)."""
    model = errors["model"]
    if "zero" not in errors:
        finite = torch.isfinite(model)
        return {
            "prompts": int(model.numel()),
            "mse": float(model.mean()),
            "median_mse": float(model.median()),
            "worst_mse": float(torch.where(finite, model, math.inf).max()),
            "nonfinite_prompts": int((~finite).sum()),
        }
    finite = torch.isfinite(model)
    mse = float(model.mean())
    zero = float(errors["zero"].mean())
    worst = int(torch.argmax(torch.where(finite, model, torch.full_like(model, math.inf))))
    return {
        "prompts": int(model.numel()),
        "mse": mse,
        "zero_mse": zero,
        "optimal_mse": float(errors["optimal"].mean()),
        "median_mse": float(model.median()),
        "worst_mse": float(model[worst]),
        "worst_norm_a": float(errors["norm_a"][worst]),
        "max_norm_a": float(errors["norm_a"].max()),
        "nonfinite_prompts": int((~finite).sum()),
        "improvement": zero / mse if mse > 0 and math.isfinite(mse) else math.nan,
        "flipped_mse": float(errors["flipped"].mean()),
    }


def readout_sign(model: LinearTransformer) -> int:
    """−1 or +1: the sign the model reads its prediction with (a learned readout's sign)."""
    return -1 if float(model.readout_scale.detach()) < 0 else 1


def model_readout_text(model: LinearTransformer) -> str:
    """`readout_text` of a model."""
    return readout_text(
        float(model.readout_scale.detach()), model.cfg.samples, model.cfg.readout == "learned"
    )


def evaluate(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    batch: int = 8192,
    seed: int = 12345,
) -> dict[str, Any]:
    """Summary of `model` on `batch` fresh prompts of `task` drawn from `seed`."""
    return summarize(per_prompt_errors(model, task, batch, make_generator(seed)))
