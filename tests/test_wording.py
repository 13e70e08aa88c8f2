"""The words for an MSE against the zero predictor's and for the readout's sign (`wording.py`):
the ratio's direction and its NO_BETTER band, the flip threshold FLIP_FACTOR, the flag that fixes
a wrong sign."""

import math

import pytest

from eagle_probe import wording


def test_a_model_better_than_zero_is_below_it_by_the_ratio():
    assert wording.against_zero(0.01, 0.276) == "27.6× below the zero predictor's 0.276"
    assert wording.against_zero(0.5, 2.0, spec=".1f", mark="x") == (
        "4.0x below the zero predictor's 2"
    )


@pytest.mark.parametrize("mse", [1.0, 1.0 / 1.049, 1.049])
def test_within_five_percent_of_zero_is_no_better(mse):
    assert wording.against_zero(mse, 1.0) == "no better than the zero predictor's 1"


def test_the_no_better_band_ends_at_five_percent():
    assert wording.against_zero(1.0 / 1.051, 1.0).endswith("below the zero predictor's 1")
    assert (
        wording.against_zero(1.051, 1.0) == "no better than the zero predictor: 1.05× above its 1"
    )


def test_a_model_worse_than_zero_is_never_called_below_it():
    assert wording.against_zero(3.3, 1.0) == "no better than the zero predictor: 3.3× above its 1"
    assert "below" not in wording.against_zero(3.3, 1.0)


def test_non_finite_and_zero_errors():
    assert wording.against_zero(math.inf, 0.5) == (
        "no better than the zero predictor's 0.5 (its MSE is not finite)"
    )
    assert wording.against_zero(math.nan, 0.5).endswith("(its MSE is not finite)")
    # an MSE of exactly 0 is below any positive zero predictor, by more than any factor printed
    assert wording.against_zero(0.0, 0.5) == "> 10⁶× below the zero predictor's 0.5"
    assert wording.against_zero(0.0, 0.5, spec=".1f", mark="x") == (
        "> 10⁶x below the zero predictor's 0.5"
    )


def test_zero_against_a_zero_predictor_is_not_defined_and_never_divides():
    # every D is 0: the zero predictor is exact, so no ratio to it exists
    assert wording.against_zero(0.0, 0.0) == (
        "against the zero predictor not defined: both are 0 (every D is 0)"
    )
    assert wording.against_zero(0.3, 0.0) == "no better than the zero predictor, whose MSE is 0"


def test_a_huge_improvement_is_capped_not_printed_in_67_digits():
    text = wording.against_zero(1e-70, 1.0, spec=".1f", mark="x")
    assert text == "> 10⁶x below the zero predictor's 1"
    assert wording.against_zero(1e-5, 1.0, spec=".1f", mark="x").startswith("100000.0x below")


def test_readout_text_names_the_sign_and_the_slot():
    assert wording.readout_text(-1.0, samples=False) == (
        "readout -1: the prediction is minus the D slot; steps are stated in its frame"
    )
    assert wording.readout_text(1.0, samples=True) == (
        "readout +1: the prediction is the query's label entry; steps are stated in its frame"
    )
    learned = wording.readout_text(-0.25, samples=False, learned=True)
    assert learned.startswith("readout -1: the prediction is -0.25 × the D slot (learned)")


def test_readout_flag_only_when_the_negation_fits_clearly_better():
    assert wording.readout_flag(-1, mse=1.0, flipped_mse=0.51) is None  # not below 0.5 × MSE
    assert wording.readout_flag(-1, mse=1.0, flipped_mse=math.nan) is None
    line = wording.readout_flag(-1, mse=1.0, flipped_mse=0.49)
    assert line is not None and line.endswith("re-import with `--readout +1`")
    assert "MSE 0.49 against 1" in line
    assert len("warning: " + line) <= 100
    assert wording.readout_flag(+1, mse=2.0, flipped_mse=0.1).endswith("`--readout -1`")


def test_readout_hint_names_the_other_sign():
    assert "`eagle-probe import --readout +1`" in wording.readout_hint(-1)
    assert "readout=-1" in wording.readout_hint(+1)


# --- ratios and percentages for reading ------------------------------------------------------


@pytest.mark.parametrize(
    ("r", "suffix", "prefix"),
    [
        (1.35, "1.35×", "×1.35"),
        (999_999.0, "1e+06×", "×1e+06"),
        (1e6, "> 10⁶×", "×10⁶ or more"),
        (math.inf, "> 10⁶×", "×10⁶ or more"),
        (1e-7, "< 10⁻⁶×", "×10⁻⁶ or less"),
        (0.0, "0×", "×0"),
        (-0.0, "0×", "×0"),
        (math.nan, "not defined", "not defined"),
    ],
)
def test_times_has_readable_limits(r, suffix, prefix):
    assert wording.times(r) == suffix
    assert wording.times(r, prefix=True) == prefix


def test_ratio_of_zeros_and_infinities():
    assert wording.ratio(0.0, 0.0) == "not defined: both are 0"
    assert wording.ratio(1.0, 0.0) == "> 10⁶×"
    assert wording.ratio(math.inf, 2.0) == "> 10⁶×"
    assert wording.ratio(math.nan, 2.0) == "not defined (a number that is not finite)"
    assert wording.ratio(1.39, 1.0, spec=".2g") == "1.4×"
    assert wording.ratio(3.0, 4.0, spec=".2f", mark="x") == "0.75x"


@pytest.mark.parametrize("x", [-1e-7, -0.0, 0.0, 1e-7, -4.9e-6])
def test_a_percentage_that_rounds_to_zero_has_no_sign(x):
    # −0.0% on one CPU and +0.0% on another: the sign of a rounded zero is round-off
    assert wording.percent(x) == "0.0%"
    assert wording.percent(x, digits=2, signed=False) == "0.00%"


def test_a_zero_in_significant_digits_has_no_sign():
    assert wording.percent(-0.0, spec=".2g", signed=False) == "0%"
    assert wording.percent(-0.0, spec=".2g") == "0%"
    assert wording.percent(-2.6e-4, spec=".2g", signed=False) == "-0.026%"


def test_percent_signs_limits_and_nan():
    assert wording.percent(0.032) == "+3.2%"
    assert wording.percent(-0.004) == "-0.4%"
    assert wording.percent(0.0042, digits=2, signed=False) == "0.42%"
    assert wording.percent(12859050323465.082) == "> +10⁶%"
    assert wording.percent(-2e4) == "< -10⁶%"
    assert wording.percent(math.nan) == "not defined"


def test_change_is_a_percentage_then_a_factor_then_a_limit():
    assert wording.change(1.1, 1.0) == "+10.0%"
    assert wording.change(0.9999999, 1.0) == "0.0%"
    assert wording.change(11.0, 1.0) == "+1000.0%"  # the last percentage
    assert wording.change(12.0, 1.0) == "×12"
    assert wording.change(1.285905e13, 1.0) == "×10⁶ or more"
    assert wording.change(0.0, 0.0) == "not defined: both are 0"
    assert wording.change(1.0, 0.0) == "not defined (the network's MSE is 0)"
    assert wording.change(math.inf, 1.0) == "non-finite MSE"
    assert wording.change(1.0, math.nan) == "not defined (the network's MSE is not finite)"


def test_value_and_number_never_print_nan_inf_or_a_signed_zero():
    assert wording.value(None) == "skipped"
    assert wording.value(math.inf) == wording.value(math.nan) == "not finite"
    assert wording.value(-0.0) == "0"
    assert wording.value(-1e-5, ".1f") == "0.0"
    assert wording.value(0.00419) == "0.00419"
    assert wording.number(math.inf) == ">1e6" and wording.number(-math.inf) == "<-1e6"
    assert wording.number(-0.0) == "0" and wording.number(math.nan) == ""
