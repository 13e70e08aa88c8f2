"""Test error of a model on fresh prompts of its task distribution.

The mean MSE alone hides the failure that matters here: constant steps tuned for typical prompts
blow up on the rare prompt with a large ‖A‖₂, so the median and the worst prompt are reported too.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import torch

from eagle_probe.model import LinearTransformer
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample


@torch.no_grad()
def prompt_errors(
    model: LinearTransformer, prompt: Prompt, *, reference: bool = True, chunk: int = 4096
) -> dict[str, torch.Tensor]:
    """Per-prompt MSE over the D block: (b,) for the model and, with `reference`, for the zero
    predictor, B A⁺ C and the model read with the other readout sign (its prediction negated),
    plus ‖A‖₂ per prompt."""
    out: dict[str, list[torch.Tensor]] = collections.defaultdict(list)
    device = model.readout_scale.device  # the model's device; the errors come back to the CPU
    for start in range(0, prompt.batch, chunk):
        part = prompt[start : start + chunk].to(torch.float64)
        pred = model(part.z0().to(model.cfg.torch_dtype).to(device)).to(torch.float64).cpu()
        out["model"].append((pred - part.D).square().mean(dim=(-1, -2)))
        if reference:
            out["zero"].append(part.D.square().mean(dim=(-1, -2)))
            out["flipped"].append((pred + part.D).square().mean(dim=(-1, -2)))  # −prediction
            out["optimal"].append((part.optimal() - part.D).square().mean(dim=(-1, -2)))
            out["norm_a"].append(torch.linalg.matrix_norm(part.A, ord=2))
    return {k: torch.cat(v) for k, v in out.items()}


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


# --- the words every command uses for an MSE against zero and for the readout -----------------

NO_BETTER = 1.05  # an MSE within 5% of the zero predictor's is no better than predicting zero


def against_zero(mse: float, zero: float, factor=lambda r: f"{r:.3g}×") -> str:
    """How an MSE stands against the zero predictor's: "27.6× below the zero predictor's 1.01",
    "no better than the zero predictor's 1.01" (within NO_BETTER), or "no better than the zero
    predictor: 3.3× above its 1.01". A model worse than predicting zero is never called below
    it. `factor` writes the ratio."""
    if not math.isfinite(mse):
        return f"no better than the zero predictor's {zero:.3g} (MSE {mse})"
    if mse <= 0:
        return "infinitely below the zero predictor"
    if zero / mse >= NO_BETTER:
        return f"{factor(zero / mse)} below the zero predictor's {zero:.3g}"
    if mse / zero <= NO_BETTER:
        return f"no better than the zero predictor's {zero:.3g}"
    return f"no better than the zero predictor: {factor(mse / zero)} above its {zero:.3g}"


# the other readout sign is flagged when it fits the held-out prompts at least this much better
FLIP_FACTOR = 0.5


def readout_sign(model: LinearTransformer) -> int:
    """−1 or +1: the sign the model reads its prediction with (a learned readout's sign)."""
    return -1 if float(model.readout_scale) < 0 else 1


def readout_text(scale: float, samples: bool, learned: bool = False) -> str:
    """One line naming the readout (prediction = `scale` × the D slot): the sign every step of
    the reports is stated in. `readout_text(float(model.readout_scale), model.cfg.samples,
    model.cfg.readout == "learned")` for a model."""
    sign = -1 if scale < 0 else 1
    slot = "the query's label entry" if samples else "the D slot"
    how = f"minus {slot}" if sign < 0 else slot
    if learned:
        how = f"{scale:.4g} × {slot} (learned)"
    return f"readout {sign:+d}: the prediction is {how}; steps are stated in its frame"


def model_readout_text(model: LinearTransformer) -> str:
    """`readout_text` of a model."""
    return readout_text(
        float(model.readout_scale), model.cfg.samples, model.cfg.readout == "learned"
    )


def readout_flag(sign: int, mse: float, flipped_mse: float) -> str | None:
    """One line when the model's predictions fit clearly better with the other readout sign
    (their negation's MSE below FLIP_FACTOR × the MSE, on the same prompts), naming the flag
    that fixes it; None otherwise."""
    if not (math.isfinite(flipped_mse) and flipped_mse < FLIP_FACTOR * mse):
        return None
    return (  # one line of at most 100 characters after "warning: "
        f"the predictions fit better negated (MSE {flipped_mse:.3g} against {mse:.3g}): "
        f"re-import with `--readout {-sign:+d}`"
    )


def readout_hint(sign: int) -> str:
    """What to do when a model's steps point uphill: the other readout sign's flag."""
    return (
        f"if the source model reads its prediction with the other sign, re-import it with "
        f"`eagle-probe import --readout {-sign:+d}` (or `layouts.from_module(..., "
        f"readout={-sign})`)"
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
