"""Sweeps: a grid of seeds × regimes trained as parallel processes, then extracted.

Each run is `python -m eagle_probe train …` in its own process (so a crash stays contained and
the CPU count sets the parallelism); afterwards every checkpoint is evaluated and extracted and
the results are collected into one pandas table with a row per (regime, seed, layer).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from eagle_probe.errors import EagleProbeError


@dataclass(frozen=True)
class Run:
    regime: str
    seed: int
    path: Path


NAME = "{regime}_seed{seed}"  # checkpoint file stem of a run
TRAIN_OPTIONS = ["--schedule", "warmup_cosine", "--eval-batch", "2048"]  # when `extra` is None


def run_name(template: str, regime: str, seed: int) -> str:
    """The file stem of one run: `template` with {regime} and {seed} filled in."""
    try:
        name = template.format(regime=regime, seed=seed)
    except (KeyError, IndexError, ValueError) as exc:
        raise EagleProbeError(
            f"--name {template!r} may use only {{regime}} and {{seed}} ({exc})"
        ) from None
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise EagleProbeError(f"--name {template!r} does not give a plain file name")
    return name


def _command(run: Run, steps: int, batch: int, extra: list[str]) -> list[str]:
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
        *extra,
        "-o",
        str(run.path),
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
) -> pd.DataFrame:
    """Train every (regime, seed), `parallel` at a time, then extract; returns the table.

    `extra` are further `eagle-probe train` options (normalisation, schedule, rates, selection);
    `name` the checkpoint stem template. Each row carries the test mean, median and worst prompt
    MSE and both fidelity readings (one step and end to end) of its layer. `published`: the
    directory `out` will be moved to (the CLI writes into a temporary one); each checkpoint's
    recorded command then names the file where it ends up."""
    from eagle_probe import checkpoint
    from eagle_probe.extract import extract

    out.mkdir(parents=True, exist_ok=True)
    runs = [Run(r, s, out / f"{run_name(name, r, s)}.pt") for r in regimes for s in seeds]
    if len({run.path for run in runs}) < len(runs):
        raise EagleProbeError(f"--name {name!r} gives two runs the same file name")
    parallel = parallel or max(1, os.cpu_count() or 1)
    env = os.environ | {"OMP_NUM_THREADS": "1"}

    def train(run: Run) -> tuple[Run, int, float, str]:
        start = time.perf_counter()
        proc = subprocess.run(
            _command(run, steps, batch, TRAIN_OPTIONS if extra is None else extra),
            capture_output=True,
            text=True,
            env=env,
        )
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return run, proc.returncode, time.perf_counter() - start, tail

    rows = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for run, code, seconds, tail in pool.map(train, runs):
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
            if published is not None and isinstance(metrics.get("command"), str):
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
    if not rows:
        raise EagleProbeError("the sweep produced no runs")
    table = pd.DataFrame(rows)
    table.to_csv(out / "sweep.csv", index=False)
    return table


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
