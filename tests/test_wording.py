"""The words for an MSE against the zero predictor's and for the readout's sign (`wording.py`):
the ratio's direction and its NO_BETTER band, the flip threshold FLIP_FACTOR, the flag that fixes
a wrong sign."""

import math

import pytest

from eagle_probe import wording


def test_a_model_better_than_zero_is_below_it_by_the_ratio():
    assert wording.against_zero(0.01, 0.276) == "27.6× below the zero predictor's 0.276"
    assert wording.against_zero(0.5, 2.0, factor=lambda r: f"{r:.1f} times") == (
        "4.0 times below the zero predictor's 2"
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
    assert (
        wording.against_zero(math.inf, 0.5) == "no better than the zero predictor's 0.5 (MSE inf)"
    )
    assert "(MSE nan)" in wording.against_zero(math.nan, 0.5)
    assert wording.against_zero(0.0, 0.5) == "infinitely below the zero predictor"


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
