"""Work done beside this process on a second CPU: a forked child computes bytes and sends them back
through a pipe. The report draws its figures this way and the extraction runs its independent views
this way; whatever fails or hangs there is simply done again here.

    job = Forked(fn)          # fork now; the child runs fn() -> bytes, sends it and exits
    data = job.result(wait)   # the bytes, or None (failed, or not done within `wait` seconds)
    job.close()               # stop the child if it still runs and collect it (idempotent)

A child never runs this process's exit handlers, never writes a file, uses one thread in torch and
in the OpenBLAS of NumPy and SciPy (a thread pool of the parent's does not survive the fork), dies
with this process (Linux), and sends back the warnings it raised, which `result` raises here. Its
cyclic garbage collector never scans the objects it inherited (`gc.freeze` first thing): a scan
writes to every object, so each page of them would be copied from the parent's, and an extraction
of centralized.pt spent 0.5 s of CPU doing that."""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def available() -> bool:
    """Whether work can be forked beside this process: fork exists and there is a second CPU."""
    return hasattr(os, "fork") and cpus() > 1


def set_threads(count: int) -> None:
    """Use `count` CPU threads in torch, in NumPy's OpenBLAS (where it can be reached) and in
    child processes."""
    import ctypes
    import glob

    import numpy as np
    import torch

    torch.set_num_threads(count)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(count)
    # NumPy's and SciPy's wheels each bundle an OpenBLAS (SciPy's runs scipy.linalg, e.g. the
    # Cholesky factorisations of the term fits), each with its own thread count
    site = os.path.join(os.path.dirname(np.__file__), os.pardir)
    libs = [p for d in ("numpy.libs", "scipy.libs") for p in glob.glob(os.path.join(site, d, "*"))]
    for path in libs:
        if "openblas" not in os.path.basename(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for fn in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads",
        ):
            if hasattr(lib, fn):
                getattr(lib, fn)(count)
                break


def _die_with(parent: int) -> None:
    """In a forked child: be killed when `parent` dies, even by SIGKILL (Linux prctl
    PR_SET_PDEATHSIG), so no work outlives the process that asked for it."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the call above
        os._exit(1)


class Forked:
    """A forked child computing `fn()` (bytes); see the module docstring."""

    def __init__(self, fn: Callable[[], bytes], *, nice: int = 0) -> None:
        """`nice` > 0 lowers the child's priority by that much, so work beside this process
        takes the CPU this one leaves rather than sharing it equally."""
        read, write = os.pipe()
        parent = os.getpid()
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns on every fork of a process with threads (torch's own are
                # idle here); a child that hangs on a lock one of them held is stopped at its
                # deadline and its work done here (`result`)
                warnings.filterwarnings("ignore", "This process .* fork", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the child: compute, write, leave without the parent's exit handlers
            code = 1
            try:
                gc.freeze()
                os.close(read)
                _die_with(parent)
                if nice > 0:
                    os.nice(nice)
                set_threads(1)
                with warnings.catch_warnings(record=True) as caught:
                    data = fn()
                seen = list(dict.fromkeys((str(w.message), w.category) for w in caught))
                raised = pickle.dumps(seen)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(len(raised).to_bytes(8, "little") + raised)
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
            if status != 0:
                return None
            data = b"".join(chunks)
            size = int.from_bytes(data[:8], "little")
            for message, category in pickle.loads(data[8 : 8 + size]):  # our own child's
                warnings.warn(message, category, stacklevel=2)
            return data[8 + size :]
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
