"""Exceptions that carry a message meant for the user.

Library code raises these (or plain `ValueError` for bad arguments); the CLI turns both into a
one-line message and exit code 2.
"""


class EagleProbeError(ValueError):
    """A user-facing error: bad input, not a bug. The message says what to do."""


class CheckpointError(EagleProbeError):
    """A checkpoint file that is missing, unreadable, foreign or inconsistent."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM): handled like an interrupt, reported as SIGTERM."""
