"""Progress reports for long loops: a tqdm bar on a terminal, plain lines otherwise.

Library code takes a `Progress` (a callable wrapping an iterable) and stays silent without one;
the command line passes `reporter()`. On a terminal the bar is tqdm's, shown only once a loop has
run for `delay` seconds; when stderr is a file or a pipe, a loop that runs that long writes one
plain line (no carriage returns) at most every `every` seconds, and one when it ends.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TextIO, TypeVar

T = TypeVar("T")
Progress = Callable[[Iterable[T], str], Iterable[T]]


def reporter(stream: TextIO | None = None, *, delay: float = 2.0, every: float = 10.0) -> Progress:
    """A `Progress` writing to `stream` (default: sys.stderr)."""

    def wrap(items: Iterable[T], desc: str) -> Iterable[T]:
        out = sys.stderr if stream is None else stream
        if hasattr(out, "isatty") and out.isatty():
            from tqdm.auto import tqdm

            return tqdm(items, desc=desc, file=out, delay=delay, leave=False)
        return _lines(items, desc, out, delay, every)

    return wrap


@contextlib.contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Add the seconds the block takes to `timings[key]` (from 0 when absent; nothing when the
    block raises)."""
    start = time.perf_counter()
    yield
    timings[key] = timings.get(key, 0.0) + (time.perf_counter() - start)


def _lines(items: Iterable[T], desc: str, out: TextIO, delay: float, every: float) -> Iterator[T]:
    total = len(items) if isinstance(items, Sized) else None
    start = time.monotonic()
    last = start
    shown = False
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - start >= delay and now - last >= every or (not shown and now - start >= delay):
            of = f"/{total}" if total is not None else ""
            print(f"{desc}: {done}{of} ({now - start:.0f} s)", file=out, flush=True)
            last, shown = now, True
    if shown:
        print(f"{desc}: done ({time.monotonic() - start:.0f} s)", file=out, flush=True)
