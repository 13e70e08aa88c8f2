"""The words every command uses for an MSE against the zero predictor's, for the readout's
sign, for counts and for the numbers of the text report. Every ratio and percentage a report or
a command prints is written here (`times`, `ratio`, `percent`, `change`, `against_zero`), with
readable limits: never "inf%", "nan", a signed zero or a number of 67 digits. Standard library
only: the views (`eagle_probe.fit`) write them without torch."""

from __future__ import annotations

import math

NO_BETTER = 1.05  # an MSE within 5% of the zero predictor's is no better than predicting zero

# Readable limits of a ratio or a percentage: beyond them a sentence says "> 10⁶×" ("> +10⁶%")
# instead of printing 13 digits or "inf"; a ratio of two zeros is not defined and says so.
LIMIT = 1e6
BOTH_ZERO = "not defined: both are 0"
BREAKS = 10.0  # a change above +1000% is stated as the factor it multiplies by ("×23.4")


def plural(count: int, word: str) -> str:
    """ "1 layer", "4 layers"."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def number(x, digits: int = 3) -> str:
    """A number for the screen: never more than ~9 characters, never above 1e6 unscaled (an
    infinity is above it too), never a signed zero."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, str):
        return x
    x = float(x) + 0.0  # −0.0 prints as 0
    if abs(x) >= LIMIT:  # the table never shows a number above 1e6; JSON keeps the value
        return ">1e6" if x > 0 else "<-1e6"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return _unsigned_zero(f"{x:.{digits}g}")


def span(lo, hi, digits: int = 3) -> str:
    """An interval for a table cell, "1.3 to 1.33" (each end by `number`; a dash would read as a
    minus); "" where either end is missing or not finite."""
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return ""
    return f"{number(lo, digits)} to {number(hi, digits)}"


def value(x: float | None, spec: str = ".3g") -> str:
    """A number for a sentence, written by `spec`: "not finite" for an infinity or NaN,
    "skipped" for None (the number of a view that did not run), never a signed zero."""
    if x is None:
        return "skipped"
    x = float(x)
    if not math.isfinite(x):
        return "not finite"
    return _unsigned_zero(f"{x + 0.0:{spec}}")


def _unsigned_zero(text: str) -> str:
    """`text` without the sign of a number that prints as zero ("-0.0" → "0.0"): which sign a
    rounded zero carries differs between CPUs, so no report ever prints one."""
    if text[:1] in "+-" and not any(ch in "123456789" for ch in text.split("e")[0]):
        return text[1:]
    return text


def times(r: float, *, spec: str = ".3g", mark: str = "×", prefix: bool = False) -> str:
    """A ratio of two non-negative numbers for a sentence: "1.35×" (`spec` writes the number,
    `mark` follows it, or leads it with `prefix`: "×1.35"); "> 10⁶×" ("×10⁶ or more") from
    LIMIT up, an infinite ratio included; "< 10⁻⁶×" ("×10⁻⁶ or less") for a positive one below
    1 / LIMIT; "not defined" for NaN."""
    r = float(r) + 0.0
    if math.isnan(r):
        return "not defined"
    if r >= LIMIT:
        return f"{mark}10⁶ or more" if prefix else f"> 10⁶{mark}"
    if 0 < r < 1 / LIMIT:
        return f"{mark}10⁻⁶ or less" if prefix else f"< 10⁻⁶{mark}"
    text = _unsigned_zero(f"{r:{spec}}")
    return f"{mark}{text}" if prefix else f"{text}{mark}"


def ratio(num: float, den: float, *, spec: str = ".3g", mark: str = "×") -> str:
    """num / den by `times`: "not defined: both are 0" for 0 / 0, "> 10⁶×" for a positive number
    over 0 or an infinite one over a finite one, "not defined (a number that is not finite)"
    where either is otherwise not finite."""
    num, den = float(num), float(den)
    if num == 0 and den == 0:
        return BOTH_ZERO
    if math.isinf(num) and math.isfinite(den) and num > 0:
        return times(math.inf, mark=mark)
    if not (math.isfinite(num) and math.isfinite(den)):
        return "not defined (a number that is not finite)"
    if den == 0:
        return times(math.inf, mark=mark)
    return times(num / den, spec=spec, mark=mark)


def percent(x: float, *, digits: int = 1, signed: bool = True, spec: str | None = None) -> str:
    """A fraction as a percentage: "+3.2%" (`signed`) or "3.2%" with `digits` decimals (`spec`,
    e.g. ".2g", replaces them), never a signed zero ("0.0%" whatever the sign of a tiny x),
    "> +10⁶%" / "< -10⁶%" beyond LIMIT percent, "not defined" for NaN."""
    x = float(x)
    if math.isnan(x):
        return "not defined"
    if abs(x) * 100 >= LIMIT:
        sign = "+" if signed and x > 0 else ""
        return f"> {sign}10⁶%" if x > 0 else "< -10⁶%"
    spec = spec if spec is not None else f".{digits}f"
    text = f"{x * 100 + 0.0:{'+' if signed else ''}{spec}}"
    return _unsigned_zero(text) + "%"


def change(mse: float, net: float) -> str:
    """How much `mse` differs from the network's `net` on the same prompts: a percentage up to
    +1000% ("+3.2%", "0.0%"), the factor beyond ("×23.4", "×10⁶ or more"); "not defined: both are 0"
    when both are 0, "non-finite MSE" when `mse` is not finite, "not defined (the network's MSE
    is 0)" for a positive `mse` against 0."""
    mse, net = float(mse), float(net)
    if not math.isfinite(mse):
        return "non-finite MSE"
    if mse == 0 and net == 0:
        return BOTH_ZERO
    if not (math.isfinite(net) and net > 0):
        return f"not defined (the network's MSE is {value(net)})"
    cost = mse / net - 1.0
    if cost > BREAKS:
        return times(mse / net, prefix=True)
    return percent(cost)


def step_list(values) -> str:
    """A list of steps, each by `number`: "[0.3, 0.33]"."""
    return f"[{', '.join(number(v) for v in values)}]"


def against_zero(mse: float, zero: float, *, spec: str = ".3g", mark: str = "×") -> str:
    """How an MSE stands against the zero predictor's: "27.6× below the zero predictor's 1.01",
    "no better than the zero predictor's 1.01" (within NO_BETTER), or "no better than the zero
    predictor: 3.3× above its 1.01". A model worse than predicting zero is never called below
    it; the factor is written by `times` (`spec`, `mark`), so it is never infinite: an MSE of
    exactly 0 is "> 10⁶× below", and against a zero predictor whose MSE is 0 the comparison
    is "not defined: both are 0" or "no better than the zero predictor, whose MSE is 0"."""
    z = f"{zero:.3g}"
    if not math.isfinite(mse):
        return f"no better than the zero predictor's {z} (its MSE is {value(mse)})"
    if zero == 0:
        if mse == 0:
            return f"against the zero predictor {BOTH_ZERO} (every D is 0)"
        return "no better than the zero predictor, whose MSE is 0"
    if mse <= 0 or zero / mse >= NO_BETTER:
        factor = times(math.inf if mse <= 0 else zero / mse, spec=spec, mark=mark)
        return f"{factor} below the zero predictor's {z}"
    if mse / zero <= NO_BETTER:
        return f"no better than the zero predictor's {z}"
    factor = times(mse / zero, spec=spec, mark=mark)
    return f"no better than the zero predictor: {factor} above its {z}"


def tails_text(stats) -> str:
    """The tail of per-prompt errors beside their mean, from `evaluate.tails`' numbers (an
    extraction's `network`, `evaluate`'s summary): "median 0.0139, 0.1%-trimmed 0.0231, 0.488% of
    prompts worse than zero" (the trimmed mean drops the worst 0.1% of prompts,
    `evaluate.TRIM_KEEP`); what `stats` lacks is left out (an extraction written before these
    numbers: "")."""
    parts = []
    if stats.get("median_mse") is not None:
        parts.append(f"median {number(stats['median_mse'])}")
    if stats.get("trimmed_mse") is not None:
        parts.append(f"0.1%-trimmed {number(stats['trimmed_mse'])}")
    if stats.get("worse_than_zero") is not None:
        share = percent(stats["worse_than_zero"], signed=False, spec=".3g")
        parts.append(f"{share} of prompts worse than zero")
    return ", ".join(parts)


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
