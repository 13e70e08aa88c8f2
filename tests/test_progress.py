"""Progress reports (`progress.py`): nothing before `delay`, one plain line at most every `every`
seconds on a file or a pipe (no carriage returns), one when the loop ends; items pass unchanged."""

import io

import pytest

from eagle_probe import progress


class Clock:
    """time.monotonic for progress: each call advances by `tick` seconds."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@pytest.fixture
def clock(monkeypatch):
    def install(tick: float) -> Clock:
        c = Clock(tick)
        monkeypatch.setattr(progress.time, "monotonic", c)
        return c

    return install


def test_a_short_loop_writes_nothing_and_passes_its_items(clock):
    clock(0.01)
    out = io.StringIO()
    items = list(progress.reporter(out, delay=2.0, every=10.0)(range(5), "fit"))
    assert items == [0, 1, 2, 3, 4]
    assert out.getvalue() == ""


def test_a_long_loop_writes_plain_lines_at_most_every_interval(clock):
    clock(1.0)  # each monotonic() call is one second later
    out = io.StringIO()
    items = list(progress.reporter(out, delay=2.0, every=3.0)(list("abcdefghij"), "views"))
    assert items == list("abcdefghij")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[-1].startswith("views: done (") and lines[-1].endswith(" s)")
    counts = lines[:-1]
    assert counts and all(line.startswith("views: ") and "/10 (" in line for line in counts)
    seconds = [int(line.split("(")[1].split(" ")[0]) for line in counts]
    assert seconds[0] >= 2  # not before `delay`
    assert all(b - a >= 3 for a, b in zip(seconds, seconds[1:], strict=False))  # `every` apart


def test_an_iterable_without_a_length_is_counted_without_a_total(clock):
    clock(5.0)
    out = io.StringIO()
    list(progress.reporter(out, delay=2.0, every=1.0)(iter(range(3)), "run"))
    first = out.getvalue().splitlines()[0]
    assert first.startswith("run: 1 (") and "/" not in first
