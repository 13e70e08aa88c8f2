"""The distributed regime on real worker processes (torch.distributed: gloo on CPU).

Machine μ (rank μ) holds only its column block A^μ, B^μ of the prompt; C and D are replicated.
Each round every rank computes its local updates of C and D and one `all_reduce` sums them, so a
rank sends (d + d')·n' floats per round. Distributed gradient descent and consensus ADMM run on
the same process group for comparison. `run_local(world_size, fn, *args)` starts `world_size`
local processes on the loopback interface, runs fn(rank, world_size, *args) in each and returns
the results in rank order.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

from eagle_probe import eagle, solvers
from eagle_probe import solver_template as kernel

FLOAT_BYTES = 8  # float64
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn, args, queue) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    tdist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        queue.put((rank, fn(rank, world, *args)))
    finally:
        tdist.destroy_process_group()


def run_local(world_size: int, fn, *args, timeout: float = 600.0) -> list[Any]:
    """Run fn(rank, world_size, *args) on `world_size` local gloo processes; results by rank.

    `fn` must be importable (a module-level function)."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world_size, port, fn, args, queue))
        for r in range(world_size)
    ]
    # One BLAS thread per worker: the children read these when they import NumPy, and several
    # multithreaded workers spinning on one small machine slow every collective to a crawl.
    threads = {k: os.environ.get(k) for k in _THREAD_VARS}
    os.environ.update({k: "1" for k in _THREAD_VARS})
    try:
        for p in procs:
            p.start()
    finally:
        for k, v in threads.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"distributed run did not finish in {timeout:.0f} s")
            try:
                rank, value = queue.get(timeout=min(remaining, 1.0))
                results[rank] = value
            except Exception:  # noqa: BLE001 - queue.Empty: check for dead workers
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"worker exited with code {dead[0].exitcode}") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return [results[r] for r in range(world_size)]


def _allreduce(x: np.ndarray, stats: dict) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    tdist.all_reduce(t)
    stats["bytes_sent"] += t.numel() * FLOAT_BYTES
    stats["messages"] += 1
    return t.numpy()


def _one_message(stats: dict):
    """The machine sum of the baselines on real processes: this rank's one part, all-reduced."""

    def reduce(parts: list[np.ndarray]) -> np.ndarray:
        (part,) = parts
        return _allreduce(part, stats)

    return reduce


def _report(rounds: int, error: float, stats: dict) -> dict:
    """A baseline worker's result: rounds, error, bytes sent per round and the message counts."""
    return {
        "rounds": rounds,
        "error": error,
        "bytes_per_round": stats["bytes_sent"] / rounds,
        **stats,
    }


def _local_blocks(A: np.ndarray, B: np.ndarray, rank: int, world: int):
    """This rank's own columns A^μ, B^μ (copies), as lists of the one block it holds."""
    part = eagle.split_columns(A.shape[1], world)[rank]
    return [A[:, part].copy()], [B[:, part].copy()]


def eagle_worker(
    rank: int,
    world: int,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    rtol: float = 1e-10,
    maxiter: int = 500,
    eta: float | None = None,
    gamma: float | None = None,
) -> dict:
    """Distributed EAGLE on this rank's column block; the same arithmetic as
    `eagle.complete_distributed` (power-of-two scaling, stopping rule, info) with the
    machine sum done by all_reduce."""
    rtol, _, maxiter = kernel.check_options(rtol, 0.0, maxiter, eta, gamma)
    D = np.zeros((B.shape[0], C.shape[1]))
    stats = {"bytes_sent": 0, "messages": 0}
    counter = kernel.StepCounter()
    info, rounds = maxiter, 0
    start = time.perf_counter()
    if not (np.any(A) and np.any(B) and np.any(C)):  # the same on every rank: no messages
        info = 0
    else:
        part = eagle.split_columns(A.shape[1], world)[rank]
        As, Bs, C, e_out = eagle.scaled_blocks(A, B, C, [part])

        def all_ranks(updates):  # one message a round: [dC; dD] summed over the ranks
            ((dC, dD),) = updates
            both = _allreduce(np.concatenate([dC, dD], axis=0), stats)
            return both[: dC.shape[0]], both[dC.shape[0] :]

        D, info, rounds = eagle.column_rounds(
            As,
            Bs,
            C,
            all_ranks,
            machines=world,
            rtol=rtol,
            maxiter=maxiter,
            eta=eta,
            gamma=gamma,
            counter=counter,
            callback=None,
            e=e_out,
        )
        if info >= 0:
            D, ok = kernel.finish(D, e_out)
            info = info if ok else eagle.UNREPRESENTABLE
    return {
        "D": D,
        "rounds": rounds,
        "info": info,
        "seconds": time.perf_counter() - start,
        "bytes_per_round": stats["bytes_sent"] / max(rounds, 1),
        **stats,
        **{k: v for k, v in counter.stats(info, rounds).items() if k.endswith("_steps")},
    }


def gd_worker(
    rank: int,
    world: int,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    reference: np.ndarray,
    eps: float = 1e-8,
    maxiter: int = 20000,
) -> dict:
    """Distributed gradient descent on w (d' × d), step 1/‖A‖₂² (computed once, up front): the
    arithmetic of `solvers.distributed_gd`, the gradients summed by all_reduce."""
    stats = {"bytes_sent": 0, "messages": 0}
    _, rounds, err = solvers.gd_rounds(
        A, *_local_blocks(A, B, rank, world), C, reference, _one_message(stats), eps, maxiter
    )
    return _report(rounds, err, stats)


def admm_worker(
    rank: int,
    world: int,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    reference: np.ndarray,
    eps: float = 1e-8,
    maxiter: int = 20000,
    rho: float | None = None,
) -> dict:
    """Consensus ADMM on w, the arithmetic of `solvers.admm`: one all_reduce of w_μ + u_μ per
    round."""
    stats = {"bytes_sent": 0, "messages": 0}
    _, rounds, err = solvers.admm_rounds(
        *_local_blocks(A, B, rank, world),
        C,
        reference,
        solvers.admm_rho(A, world, rho),
        world,
        _one_message(stats),
        eps,
        maxiter,
    )
    return _report(rounds, err, stats)
