"""Sweeps on a cluster: a sweep written down as a plan, one line per run, run one line at a time.

    eagle-probe sweep … --plan runs.jsonl                 # write the plan, train nothing
    eagle-probe sweep --run runs.jsonl --index I          # run line I (what an array task does)
    eagle-probe sweep … --plan runs.jsonl --slurm runs.sbatch [--submit]

A plan line is a JSON object: its `index`, `regime`, `seeds` (one, or a group of consecutive seeds
trained together with `train --seeds`), the `outputs` it writes (absolute paths), and `options`,
every option of `eagle-probe train` with its value, defaults included, so a line is the run's
full configuration and does not change meaning when a default does. `argv` is the `train`
command line it runs, stating the same values (less --machines and --rank where the regime takes
none: `train` refuses them there). The Slurm script is a job array over the lines, one task a line.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eagle_probe import budget, files
from eagle_probe.errors import EagleProbeError
from eagle_probe.files import jsonable

FORMAT = "eagle-probe-plan"
VERSION = 1
MAX_LINES = 100_000  # a plan longer than this is refused on reading
# memory of reading a plan, per byte of its text: the text, its lines and the parsed objects (6.8
# measured for the lines `sweep --plan` writes)
PARSE_FACTOR = 10


def group_seeds(seeds: Sequence[int], size: int) -> list[list[int]]:
    """`seeds` in groups of at most `size` consecutive integers (`train --seed S --seeds K`
    trains S … S+K-1), in the order given."""
    if size < 1:
        raise EagleProbeError(f"--ensemble must be at least 1, got {size}")
    groups: list[list[int]] = []
    for seed in seeds:
        last = groups[-1] if groups else None
        if last is not None and len(last) < size and seed == last[-1] + 1:
            last.append(seed)
        else:
            groups.append([seed])
    return groups


def plan_line(
    index: int,
    regime: str,
    seeds: list[int],
    outputs: list[Path],
    options: dict[str, Any],
    argv: list[str],
) -> dict[str, Any]:
    """One line of a plan (see the module docstring)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "index": index,
        "regime": regime,
        "seeds": list(seeds),
        "outputs": [str(p) for p in outputs],
        "options": jsonable(options),
        "argv": list(argv),
    }


def plan_text(lines: list[dict[str, Any]]) -> str:
    """The plan file: one JSON object a line, in index order."""
    return "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)


def read_plan(path: str | Path, *, max_bytes: float = budget.DEFAULT_BYTES) -> list[dict[str, Any]]:
    """The lines of a plan file, checked (index i on line i, the fields a run needs). The plan
    must be a regular file (a FIFO or a device is refused before it is opened) whose text, read
    with its parsed lines (PARSE_FACTOR times its size), fits in `max_bytes`."""
    path = Path(path)
    try:
        st = files.input_file(path, "the plan", EagleProbeError)
    except EagleProbeError:
        if not os.path.lexists(path):
            raise EagleProbeError(
                f"no plan at {path}; write one with eagle-probe sweep --plan"
            ) from None
        raise
    budget.check(PARSE_FACTOR * st.st_size, f"the plan {path}", max_bytes)
    limit = int(max_bytes // PARSE_FACTOR)  # a file that grows while it is read stops here
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            budget.check(PARSE_FACTOR * len(data), f"the plan {path}", max_bytes)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EagleProbeError(f"cannot read the plan {path}: {exc}") from None
    rows = [row for row in text.splitlines() if row.strip()]
    if not rows:
        raise EagleProbeError(f"the plan {path} holds no run")
    if len(rows) > MAX_LINES:
        raise EagleProbeError(f"the plan {path} holds more than {MAX_LINES} runs")
    lines = []
    for number, row in enumerate(rows):
        try:
            line = json.loads(row)
        except json.JSONDecodeError as exc:
            raise EagleProbeError(f"{path} line {number + 1} is not JSON ({exc.msg})") from None
        _check_line(line, number, path)
        lines.append(line)
    return lines


def _check_line(line: Any, number: int, path: Path) -> None:
    where = f"{path} line {number + 1}"
    if not isinstance(line, dict) or line.get("format") != FORMAT:
        raise EagleProbeError(f"{where} is not a line of an eagle-probe plan")
    if line.get("version") != VERSION:
        raise EagleProbeError(
            f"{where} has plan version {line.get('version')!r}; this eagle-probe reads {VERSION}"
        )
    if line.get("index") != number:
        raise EagleProbeError(f"{where} has index {line.get('index')!r}, expected {number}")
    argv = line.get("argv")
    if not isinstance(argv, list) or not argv or argv[0] != "train":
        raise EagleProbeError(f"{where} has no train command (argv)")
    if not all(isinstance(a, str) for a in argv):
        raise EagleProbeError(f"{where}: argv must hold strings")
    outputs = line.get("outputs")
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise EagleProbeError(f"{where}: outputs must be a list of paths")


def select(lines: list[dict[str, Any]], index: int, path: str | Path) -> dict[str, Any]:
    """Line `index` of a plan read from `path`."""
    if not 0 <= index < len(lines):
        raise EagleProbeError(
            f"--index {index} is outside the plan {path} (runs 0 … {len(lines) - 1})"
        )
    return lines[index]


_SBATCH_SPECIAL = frozenset("\\\"'#")


def sbatch_word(value: str) -> str:
    """`value` as one word of an #SBATCH line, read back by sbatch as it is: a plain word as it
    is; otherwise in double quotes (spaces kept), with a backslash before each backslash, quote
    and # (sbatch ends a line's options at an unescaped #). A line break cannot be written in
    an #SBATCH line and is refused."""
    if "\n" in value or "\r" in value:
        raise EagleProbeError(f"{value!r} holds a line break; an #SBATCH option is one line")
    if value and not any(c.isspace() or c in _SBATCH_SPECIAL for c in value):
        return value
    escaped = "".join("\\" + c if c in _SBATCH_SPECIAL else c for c in value)
    return f'"{escaped}"'


def _literal(path: str) -> str:
    """A path in a Slurm file-name pattern (`--output`): each % doubled, so Slurm writes it as
    a % instead of replacing %j, %A, … by the job's numbers."""
    return path.replace("%", "%%")


def slurm_script(
    plan: Path,
    count: int,
    *,
    python: str,
    job_name: str = "eagle-probe",
    time: str = "04:00:00",
    cpus: int = 1,
    mem: str = "4G",
    partition: str | None = None,
    max_parallel: int | None = None,
    logs: Path | None = None,
    sbatch: Sequence[str] = (),
) -> str:
    """An `sbatch --array=0-(count-1)` script whose task I runs line I of `plan`.

    Resources are #SBATCH lines: `time`, `cpus` (also the task's thread count), `mem`,
    `partition`; `max_parallel` caps the tasks running at once (%N); `sbatch` holds further
    option lines verbatim (e.g. "--gres=gpu:1"). `python`: the interpreter with eagle-probe
    installed on the compute nodes; `logs`: the directory of the per-task output files."""
    if count < 1:
        raise EagleProbeError("the plan holds no run")
    for name, value in (("--slurm-time", time), ("--slurm-mem", mem), ("--job-name", job_name)):
        if not value or any(c.isspace() for c in value):
            raise EagleProbeError(f"{name} must be one word, got {value!r}")
    array = f"0-{count - 1}" + (f"%{max_parallel}" if max_parallel else "")
    logs = logs if logs is not None else plan.parent
    output = _literal(str(logs / job_name)) + "-%A_%a.out"  # job id, task index
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={sbatch_word(job_name)}",
        f"#SBATCH --array={array}",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --mem={sbatch_word(mem)}",
        f"#SBATCH --time={sbatch_word(time)}",
        f"#SBATCH --output={sbatch_word(output)}",
    ]
    if partition:
        head.append(f"#SBATCH --partition={sbatch_word(partition)}")
    for option in sbatch:
        if "\n" in option:
            raise EagleProbeError(f"--sbatch option {option!r} must be one line")
        head.append(f"#SBATCH {option}")
    run = (
        f"exec {shlex.quote(python)} -m eagle_probe sweep --run {shlex.quote(str(plan))} "
        '--index "$SLURM_ARRAY_TASK_ID" --threads "${SLURM_CPUS_PER_TASK:-1}"'
    )
    body = [
        "# one task a line of the plan; written by eagle-probe sweep --slurm",
        "set -euo pipefail",
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        run,
    ]
    return "\n".join(head + [""] + body) + "\n"
