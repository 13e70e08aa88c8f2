"""Sweeps: a grid of seeds × regimes trained as parallel processes, then extracted.

Each run is `python -m eagle_probe train …` in its own process (so a crash stays contained and
the CPU count sets the parallelism); afterwards every checkpoint is evaluated and extracted and
the results are collected into one pandas table with a row per (regime, seed, layer).
"""

from __future__ import annotations

import itertools
import math
import os
import string
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from eagle_probe.errors import EagleProbeError
from eagle_probe.names import PARENT_VARIABLE


@dataclass(frozen=True)
class Run:
    regime: str
    seed: int
    path: Path


NAME = "{regime}_seed{seed}"  # checkpoint file stem of a run
TRAIN_OPTIONS = ["--schedule", "warmup_cosine", "--eval-batch", "2048"]  # when `extra` is None


def run_name(template: str, regime: str, seed: int) -> str:
    """The file stem of one run: `template` with {regime} and {seed} filled in (plain fields:
    no attribute, index, conversion or format spec)."""
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
        plain = all(
            f in ("regime", "seed") and not spec and conv is None
            for _, f, spec, conv in string.Formatter().parse(template)
            if f is not None
        )
    except ValueError as exc:
        raise EagleProbeError(f"--name {template!r} is not a valid template ({exc})") from None
    if not plain:
        raise EagleProbeError(
            f"--name {template!r} may use only {{regime}} and {{seed}}, as plain fields without "
            f"a format spec, conversion or attribute (found {', '.join(fields) or 'none'})"
        )
    name = template.format(regime=regime, seed=seed)
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise EagleProbeError(f"--name {template!r} does not give a plain file name")
    return name


def _command(
    run: Run, steps: int, batch: int, extra: list[str], seeds: int = 1, out: Path | None = None
) -> list[str]:
    """The `train` command of `run`; `seeds` > 1: of seeds run.seed … +seeds-1 together,
    written to `out` (a path with {seed} in it)."""
    return [
        sys.executable,
        "-m",
        "eagle_probe",
        "train",
        "--regime",
        run.regime,
        "--seed",
        str(run.seed),
        "--steps",
        str(steps),
        "--batch",
        str(batch),
        "--eval-every",
        str(max(1, steps // 8)),
        "--threads",
        "1",
        "--no-progress",
        "--force",
        *(["--seeds", str(seeds)] if seeds > 1 else []),
        *extra,
        "-o",
        str(out if out is not None else run.path),
    ]


def run_sweep(
    regimes: list[str],
    seeds: list[int],
    out: Path,
    *,
    steps: int,
    batch: int,
    parallel: int | None = None,
    extra: list[str] | None = None,
    name: str = NAME,
    published: Path | None = None,
    log=print,
    max_bytes: float | None = None,
    ensemble: int = 1,
) -> pd.DataFrame:
    """Train every (regime, seed), `parallel` at a time, then extract; returns the table.

    `extra` are further `eagle-probe train` options (normalisation, schedule, rates, selection);
    `name` the checkpoint stem template. Each row carries the test mean, median and worst prompt
    MSE and both fidelity readings (one step and end to end) of its layer. `published`: the
    directory `out` will be moved to (the CLI writes into a temporary one); each checkpoint's
    recorded command then names the file where it ends up. `ensemble`: up to this many consecutive
    seeds of a regime train together in one process (`train --seeds`). `max_bytes`: the memory
    budget of the
    sweep, shared by the `parallel` training processes (each gets its share as --max-memory).

    Runs that fail are rows with status "failed: …"; when every run fails nothing is written and
    the error names them. An interrupt (KeyboardInterrupt; the command line raises one for SIGTERM
    and SIGHUP too) stops the sweep: running children are stopped and waited for, no further run
    starts, and the interrupt goes on; children die with the sweep even when it is killed."""
    out.mkdir(parents=True, exist_ok=True)
    runs = [Run(r, s, out / f"{run_name(name, r, s)}.pt") for r in regimes for s in seeds]
    if len({run.path for run in runs}) < len(runs):
        raise EagleProbeError(f"--name {name!r} gives two runs the same file name")
    parallel = parallel or max(1, os.cpu_count() or 1)
    # each run stops as on SIGTERM once this process is gone (`cli.common._watch_parent`)
    env = os.environ | {"OMP_NUM_THREADS": "1", PARENT_VARIABLE: str(os.getpid())}
    options = list(TRAIN_OPTIONS if extra is None else extra)
    if max_bytes is not None:  # the children run at once: each gets its share of the budget
        options += ["--max-memory", repr(max_bytes / min(parallel, len(runs)) / 2**30)]
    live: set[subprocess.Popen] = set()
    lock, stopping = threading.Lock(), threading.Event()

    from eagle_probe.plan import group_seeds

    groups = [
        [Run(r, s, out / f"{run_name(name, r, s)}.pt") for s in group]
        for r in regimes
        for group in group_seeds(seeds, ensemble)
    ]

    def train(group: list[Run]) -> list[tuple[Run, int, float, str]]:
        run, count = group[0], len(group)
        shared = out / f"{name.replace('{regime}', run.regime)}.pt" if count > 1 else None
        start = time.perf_counter()
        with lock:
            if stopping.is_set():
                return [(r, -1, 0.0, "not started: the sweep was stopped") for r in group]
            proc = subprocess.Popen(
                _command(run, steps, batch, options, count, shared),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            live.add(proc)
        try:
            _, err = proc.communicate()
        finally:
            with lock:
                live.discard(proc)
        tail = (err.strip().splitlines() or [""])[-1]
        seconds = time.perf_counter() - start
        return [(r, proc.returncode, seconds, tail) for r in group]

    def stop() -> None:  # no run starts from now on; the running ones stop (and are waited for)
        with lock:
            stopping.set()
            for proc in live:
                proc.terminate()

    rows = _train_and_extract(groups, train, stop, parallel, published, log)
    failed = [row for row in rows if row["status"] != "ok"]
    if len({(r["regime"], r["seed"]) for r in failed}) == len(runs):
        raise EagleProbeError(
            f"every run of the sweep failed ({len(runs)}); nothing written - "
            + "; ".join(f"{r['regime']} seed {r['seed']}: {r['status']}" for r in failed[:3])
        )
    table = pd.DataFrame(rows)
    table.to_csv(out / "sweep.csv", index=False)
    return table


def collect(lines: list[dict], log=print) -> pd.DataFrame:
    """The sweep table of a plan's runs trained elsewhere (`sweep --plan`, then `--run` per line,
    e.g. a Slurm array): every output of every line loaded and extracted as `run_sweep` does; an
    output that is missing or unfinished (its task failed, was stopped or still runs: `train`
    publishes its best weights at every validation) is a row "failed: …". When no output is
    finished nothing is returned and the error names them."""
    from eagle_probe import checkpoint

    results = []
    for line in lines:
        for seed, output in zip(line["seeds"], line["outputs"], strict=True):
            run, path = Run(line["regime"], int(seed), Path(output)), Path(output)
            if not path.is_file():
                reason = f"no checkpoint at {path} (line {line['index']} failed or runs still)"
                results.append((run, 1, 0.0, reason))
                continue
            metrics = checkpoint.load(path)[2]
            # `train` publishes its best weights at every validation: finished is its test block
            # and summary written, every step done, not interrupted
            done, steps = metrics.get("steps_done"), metrics.get("train_config", {}).get("steps")
            if (
                "test" not in metrics
                or metrics.get("interrupted")
                or not path.with_suffix(".json").is_file()
                or done != steps
            ):
                reason = f"unfinished: {path} holds {done} of {steps} steps, no test yet"
                results.append((run, 1, 0.0, reason))
                continue
            seconds = metrics.get("wall_seconds")
            results.append((run, 0, float(seconds) if seconds is not None else math.nan, ""))
    if all(code != 0 for _, code, _, _ in results):
        raise EagleProbeError(
            f"no run of the plan has finished ({len(results)} missing or unfinished); nothing "
            "written - " + "; ".join(tail for *_, tail in results[:3])
        )
    return pd.DataFrame(_rows(results, None, log))


def failures(table: pd.DataFrame) -> list[str]:
    """One line per failed run of a sweep table: "regime seed N: failed: reason"."""
    failed = table[table.status != "ok"]
    return [f"{r.regime} seed {r.seed}: {r.status}" for r in failed.itertuples()]


def _train_and_extract(runs, train, stop, parallel: int, published, log) -> list[dict]:
    """Rows of the sweep table; on any exception (an interrupt, SIGTERM, a failed extraction)
    `stop()` runs before the pool waits for its threads."""
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        try:
            done = itertools.chain.from_iterable(pool.map(train, runs))  # runs: groups of runs
            return _rows(done, published, log)
        except BaseException:
            stop()
            raise


def _rows(results, published: Path | None, log) -> list[dict]:
    from eagle_probe import checkpoint
    from eagle_probe.extract import extract

    rows = []
    for run, code, seconds, tail in results:
        log(f"{run.regime} seed {run.seed}: exit {code} in {seconds:.0f} s")
        if code != 0:
            rows.append(
                {
                    "regime": run.regime,
                    "seed": run.seed,
                    "layer": None,
                    "status": f"failed: {tail}",
                }
            )
            continue
        model, task, metrics = checkpoint.load(run.path)
        if published is not None and "command" in metrics:  # a string (`check_metrics`)
            _record_path(run.path, published / run.path.name, model, task, metrics)
        ex = extract(
            model,
            task,
            probe_batch_size=128,
            seed=run.seed,
            control=False,
            test_batch=1024,
            views=("eagle", "fidelity", "polynomial"),  # the columns the sweep table reads
        )
        test = metrics.get("test", {})
        for layer in ex.layers.itertuples():
            rows.append(
                {
                    "regime": run.regime,
                    "seed": run.seed,
                    "model": run.path.name,
                    "layer": layer.layer,
                    "status": "ok",
                    "train_seconds": seconds,
                    "improvement": test.get("improvement"),
                    "mse": test.get("mse"),
                    "median_mse": test.get("median_mse"),
                    "worst_mse": test.get("worst_mse"),
                    "zero_mse": test.get("zero_mse"),
                    "eta": layer.eta,
                    "gamma": layer.gamma,
                    "fidelity": layer.fidelity,
                    "fidelity_one_step": layer.fidelity_one_step,
                    "r2": layer.r2,
                }
            )
    return rows


def _record_path(path: Path, final: Path, model, task, metrics: dict) -> None:
    """Rewrite the `-o` of the recorded training command (checkpoint and its .json) to `final`."""
    import json

    from eagle_probe import checkpoint

    metrics["command"] = metrics["command"].replace(str(path), str(final))
    checkpoint.save(path, model, task, metrics)
    record = path.with_suffix(".json")
    if record.is_file():
        data = json.loads(record.read_text())
        data["command"] = metrics["command"]
        record.write_text(json.dumps(data, indent=2) + "\n")


def spread(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation across seeds of η, γ, fidelity and R², per regime and layer."""
    ok = table[table.status == "ok"]
    columns = ["improvement", "eta", "gamma", "fidelity_one_step", "fidelity", "r2"]
    return ok.groupby(["regime", "layer"])[columns].agg(["mean", "std"])
