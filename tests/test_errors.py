"""The exceptions meant for the user (`errors.py`): they are `ValueError`s (what a library caller
catches for bad input), a stop by signal is an interrupt that carries its signal and its line,
and signals are named."""

import signal

import pytest

from eagle_probe.errors import (
    CheckpointError,
    EagleProbeError,
    Terminated,
    signal_name,
    signal_of,
)


def test_user_errors_are_value_errors_and_checkpoint_errors_user_errors():
    assert issubclass(EagleProbeError, ValueError)
    assert issubclass(CheckpointError, EagleProbeError)
    with pytest.raises(ValueError, match="^checkpoint x.pt does not exist$"):
        raise CheckpointError("checkpoint x.pt does not exist")


def test_a_stop_by_signal_is_an_interrupt_with_its_signal_and_its_line():
    stop = Terminated(signal.SIGHUP, "stopped at step 40; wrote run.pt")
    assert isinstance(stop, KeyboardInterrupt) and not isinstance(stop, Exception)
    assert signal_of(stop) == signal.SIGHUP and str(stop) == "stopped at step 40; wrote run.pt"
    assert signal_of(Terminated()) == signal.SIGTERM and str(Terminated()) == ""
    assert signal_of(KeyboardInterrupt()) == signal.SIGINT  # what Python raises for SIGINT


@pytest.mark.parametrize(
    "signum, name",
    [
        (signal.SIGINT, "SIGINT"),
        (signal.SIGTERM, "SIGTERM"),
        (signal.SIGHUP, "SIGHUP"),
        (0, "signal 0"),
    ],
)
def test_signals_are_named(signum, name):
    assert signal_name(signum) == name
