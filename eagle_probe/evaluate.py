"""Test error of a model on fresh prompts of its task distribution.

The mean MSE alone hides the failure that matters here: constant steps tuned for typical prompts
blow up on the rare prompt with a large ‖A‖₂, so the median and the worst prompt are reported too.
`tails` turns per-prompt squared errors into every number that describes them beside the mean
(the median, the mean without the worst 0.1% of prompts, the share of prompts worse than
predicting zero), and `over_draws` into the interval over several draws of prompts: one prompt
of 8,192 moved constrained.pt's mean from 2.4e-2 to 72.5 while its median stayed at 1.4e-2.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
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

# The trimmed mean drops the worst 0.1% of prompts, rounded up (at least one: 9 of 8,192, 5 of
# the extraction's 4,096): one prompt whose error explodes cannot move it, a failure on one
# prompt in a hundred still does. Training's `--select trimmed` reads the same function with its
# own share kept (`train.TRIM`, 99%).
TRIM_KEEP = 0.999
# the numbers `tails` returns, in the order they are printed
TAIL_KEYS = ("mse", "median_mse", "trimmed_mse", "worst_mse", "worse_than_zero")


def trimmed_mean(errors: Any, keep: float = TRIM_KEEP) -> float:
    """Mean of the smallest `keep` share of per-prompt errors: max(1, int(keep × count)) of
    them, the worst dropped (a non-finite error counts as the largest). A tensor or an array."""
    errors = torch.as_tensor(errors)
    values = torch.where(torch.isfinite(errors), errors, torch.full_like(errors, math.inf))
    kept = max(1, int(keep * values.numel()))
    return float(values.sort().values[:kept].mean())


def tails(errors: Any, zero: Any = None, *, keep: float = TRIM_KEEP) -> dict[str, Any]:
    """Per-prompt squared errors (b,) of a model (tensor or array) as the numbers that show
    their tail beside their mean: `mse` (the mean), `median_mse` (torch's median: of an even
    count, the lower middle value), `trimmed_mse` (`trimmed_mean`: without the worst
    `trimmed_prompts` prompts), `worst_mse` (the largest error; inf when one is not finite)
    and, given the zero predictor's per-prompt errors `zero` (each prompt's mean of
    D²), `worse_than_zero`: the share of prompts whose error is above (or not finite) that
    prompt's zero-predictor error, with their count `worse_than_zero_prompts`."""
    errors = torch.as_tensor(errors)
    if errors.numel() == 0:
        raise ValueError("no prompts: the statistics of an empty set of errors are not defined")
    finite = torch.isfinite(errors)
    out = {
        "prompts": int(errors.numel()),
        "mse": float(errors.mean()),
        "median_mse": float(errors.median()),
        "trimmed_mse": trimmed_mean(errors, keep),
        "trimmed_prompts": int(errors.numel()) - max(1, int(keep * errors.numel())),
        "worst_mse": float(torch.where(finite, errors, math.inf).max()),
    }
    if zero is not None:
        zero = torch.as_tensor(zero)
        if zero.shape != errors.shape:
            shape = tuple(zero.shape)
            raise ValueError(f"zero-predictor errors of shape {shape} for {out['prompts']} prompts")
        worse = int((~(errors <= zero)).sum())  # NaN counts as worse
        out |= {"worse_than_zero": worse / out["prompts"], "worse_than_zero_prompts": worse}
    return out


def over_draws(draws: Sequence[Mapping[str, Any]], keys: Sequence[str] = TAIL_KEYS) -> dict:
    """The interval over several draws of prompts of each number in `keys` that every draw
    carries (`tails` or `summarize` of each draw): {key: {"draws", "low", "median", "high"}},
    the smallest, the median (of an even count, the mean of the two middle values) and the
    largest over the draws; a non-finite draw is taken as it is (inf is the largest)."""
    out = {}
    for key in keys:
        values = [float(d[key]) for d in draws if d.get(key) is not None]
        values = sorted(math.inf if math.isnan(v) else v for v in values)
        if not values:
            continue
        k = len(values)
        mid = values[k // 2] if k % 2 else 0.5 * (values[k // 2 - 1] + values[k // 2])
        out[key] = {"draws": k, "low": values[0], "median": mid, "high": values[-1]}
    return out


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
    """The numbers `eagle-probe evaluate` prints (NaN/Inf become None in JSON): `tails` of the
    model's errors (against the zero predictor's, when `errors` has them) and the references."""
    model = errors["model"]
    stats = tails(model, errors.get("zero"))
    finite = torch.isfinite(model)
    if "zero" not in errors:
        return stats | {"nonfinite_prompts": int((~finite).sum())}
    mse = stats["mse"]
    zero = float(errors["zero"].mean())
    worst = int(torch.argmax(torch.where(finite, model, torch.full_like(model, math.inf))))
    return {
        "prompts": stats["prompts"],
        "mse": mse,
        "zero_mse": zero,
        "optimal_mse": float(errors["optimal"].mean()),
        "median_mse": stats["median_mse"],
        "trimmed_mse": stats["trimmed_mse"],
        "trimmed_prompts": stats["trimmed_prompts"],
        "worst_mse": float(model[worst]),
        "worse_than_zero": stats["worse_than_zero"],
        "worse_than_zero_prompts": stats["worse_than_zero_prompts"],
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
