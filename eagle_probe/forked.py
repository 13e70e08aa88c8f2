"""Work done beside this process on a second CPU: a forked child computes bytes and sends them back
through a pipe. The report draws its figures this way and the extraction runs its independent views
this way; whatever fails or hangs there is simply done again here.

    job = Forked(fn)          # fork now; the child runs fn() -> bytes, sends it and exits
    data = job.result(wait)   # the bytes, or None (failed, or not done within `wait` seconds)
    job.close()               # stop the child if it still runs and collect it (idempotent)

A child never runs this process's exit handlers, never writes a file, and uses one torch thread
(a thread pool of the parent's does not survive the fork)."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def available() -> bool:
    """Whether work can be forked beside this process: fork exists and there is a second CPU."""
    return hasattr(os, "fork") and cpus() > 1


class Forked:
    """A forked child computing `fn()` (bytes); see the module docstring."""

    def __init__(self, fn: Callable[[], bytes], *, nice: int = 0) -> None:
        """`nice` > 0 lowers the child's priority by that much, so work beside this process
        takes the CPU this one leaves rather than sharing it equally."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, write, leave without the parent's exit handlers
            code = 1
            try:
                os.close(read)
                if nice > 0:
                    os.nice(nice)
                import torch

                torch.set_num_threads(1)
                data = fn()
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self.fd, self.started = pid, read, time.monotonic()
        self._closed = False

    def result(self, wait: float) -> bytes | None:
        """Every byte the child sent once it closed the pipe with success, or None when it failed
        or `wait` seconds pass first (the child is then stopped)."""
        if self.fd is None:
            return None
        deadline = time.monotonic() + wait
        chunks = []
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return None
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            _, status = os.waitpid(self.pid, 0)
            self._closed = True
            return b"".join(chunks) if status == 0 else None
        finally:
            self.close()

    def close(self) -> None:
        """Close the pipe, stop the child if it still runs, and collect it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self._closed:
            return
        self._closed = True
        try:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
