"""The words every command uses for an MSE against the zero predictor's, for the readout's
sign, for counts and for the numbers of the text report. Standard library only: the views
(`eagle_probe.fit`) write them without torch."""

from __future__ import annotations

import math

NO_BETTER = 1.05  # an MSE within 5% of the zero predictor's is no better than predicting zero


def plural(count: int, word: str) -> str:
    """ "1 layer", "4 layers"."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def number(x, digits: int = 3) -> str:
    """A number for the screen: never more than ~9 characters, never above 1e6 unscaled."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, str):
        return x
    x = float(x) + 0.0  # −0.0 prints as 0
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e6:  # the table never shows a number above 1e6; JSON keeps the value
        return ">1e6" if x > 0 else "<-1e6"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def change(mse: float, net: float) -> str:
    """How much `mse` differs from the network's `net`, in percent ("+3.2%"; "+nan%" without a
    positive `net`)."""
    return f"{(mse / net - 1) * 100 if net > 0 else math.nan:+.1f}%"


def step_list(values) -> str:
    """A list of steps, each by `number`: "[0.3, 0.33]"."""
    return f"[{', '.join(number(v) for v in values)}]"


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
