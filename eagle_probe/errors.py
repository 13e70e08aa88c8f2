"""Exceptions that carry a message meant for the user.

Library code raises these (or plain `ValueError` for bad arguments); the CLI turns both into a
one-line message and exit code 2.
"""

import signal


class EagleProbeError(ValueError):
    """A user-facing error: bad input, not a bug. The message says what to do."""


class CheckpointError(EagleProbeError):
    """A checkpoint file that is missing, unreadable, foreign or inconsistent."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by a signal other than SIGINT (SIGTERM, SIGHUP), or by
    SIGINT with a message of its own: handled like an interrupt. `signum` names the signal;
    the message, when given, is the one line that says what became of the work."""

    def __init__(self, signum: int = signal.SIGTERM, message: str = "") -> None:
        super().__init__(message)
        self.signum = int(signum)


def signal_of(stop: BaseException) -> int:
    """The signal behind an interrupt: a `Terminated`'s own, SIGINT for a plain
    KeyboardInterrupt (Python raises it for SIGINT)."""
    return getattr(stop, "signum", signal.SIGINT)


def signal_name(signum: int) -> str:
    """ "SIGTERM" for 15, and so on."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
