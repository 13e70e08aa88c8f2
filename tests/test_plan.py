"""Sweeps on a cluster: a plan of runs, one line run by index, a Slurm array script submitted to a
stand-in `sbatch` that runs the array's tasks here, one after another."""

import json
import os
import stat
import sys

import pytest
import torch

from eagle_probe import checkpoint, plan
from eagle_probe.cli import main
from eagle_probe.errors import EagleProbeError

# Runs the tasks of `#SBATCH --array=A-B` of the script it is given, as Slurm would, one by one.
STAND_IN = """#!{python}
import os, re, subprocess, sys
script = sys.argv[-1]
text = open(script).read()
first, last = map(int, re.search(r"^#SBATCH --array=(\\d+)-(\\d+)", text, re.M).groups())
cpus = re.search(r"^#SBATCH --cpus-per-task=(\\d+)", text, re.M).group(1)
for task in range(first, last + 1):
    env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), SLURM_CPUS_PER_TASK=cpus)
    done = subprocess.run(["bash", script], env=env)
    if done.returncode:
        sys.exit(f"task {{task}} failed with {{done.returncode}}")
print("Submitted batch job 4242")
"""

SWEEP = ["sweep", "--regimes", "centralized", "--steps", "4", "--batch", "16"]
SWEEP += ["--eval-batch", "32", "--lr", "0.01"]


def _stand_in(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(STAND_IN.format(python=sys.executable))
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.slow
def test_plan_slurm_round_trip_through_a_stand_in_sbatch(tmp_path, monkeypatch, capsys):
    _stand_in(tmp_path, monkeypatch)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    runs, script, out = tmp_path / "runs.jsonl", tmp_path / "runs.sbatch", tmp_path / "out"
    argv = [*SWEEP, "--seeds", "0,1,2", "--ensemble", "2", "--out", str(out)]
    argv += ["--plan", str(runs), "--slurm", str(script), "--submit"]
    argv += ["--slurm-time", "00:10:00", "--slurm-mem", "2G", "--sbatch=--gres=gpu:1"]
    assert main(argv) == 0
    assert "Submitted batch job 4242" in capsys.readouterr().out
    lines = plan.read_plan(runs)
    assert [line["seeds"] for line in lines] == [[0, 1], [2]]
    text = script.read_text()
    for want in ("--array=0-1", "--time=00:10:00", "--mem=2G", "#SBATCH --gres=gpu:1"):
        assert want in text
    # every seed's checkpoint was written by its array task, with the plan's configuration
    for line in lines:
        assert line["options"]["steps"] == 4 and line["options"]["lr"] == 0.01
        for seed, output in zip(line["seeds"], line["outputs"], strict=True):
            model, _, metrics = checkpoint.load(output)
            assert metrics["train_config"]["seed"] == seed
            assert metrics["train_config"]["steps"] == 4 and metrics["steps_done"] == 4
    # a line run again by index is the same run: the same weights, bit for bit
    alone = tmp_path / "again"
    alone.mkdir()
    line = dict(lines[1], outputs=[str(alone / "seed2.pt")])
    line["argv"] = [*line["argv"][:-2], "--out", str(alone / "seed2.pt")]
    again = tmp_path / "again.jsonl"
    again.write_text(json.dumps(dict(line, index=0)) + "\n")
    assert main(["sweep", "--run", str(again), "--index", "0"]) == 0
    first = checkpoint.load(lines[1]["outputs"][0])[0].state_dict()
    second = checkpoint.load(alone / "seed2.pt")[0].state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    # and a seed trained in the ensemble line is its separate run (float32 rounding)
    together = checkpoint.load(lines[0]["outputs"][1])[0].state_dict()
    solo = tmp_path / "solo.pt"
    argv = [*lines[0]["argv"][1:-2], "--out", str(solo)]
    argv[argv.index("--seed") + 1], argv[argv.index("--seeds") + 1] = "1", "1"
    assert main(["train", *argv]) == 0
    for key, value in checkpoint.load(solo)[0].state_dict().items():
        assert float((together[key] - value).norm() / value.norm().clamp_min(1e-30)) < 1e-5


def test_plan_lines_state_every_train_option(tmp_path):
    runs = tmp_path / "runs.jsonl"
    assert main([*SWEEP, "--seeds", "3", "--out", str(tmp_path / "o"), "--plan", str(runs)]) == 0
    lines = plan.read_plan(runs)
    assert [line["seeds"] for line in lines] == [[0], [1], [2]]
    options = lines[0]["options"]
    # defaults are written out, not left to the version that runs the line
    assert options["clip"] == 0.1 and options["layers"] == 4 and options["schedule"]
    assert "--clip" in lines[0]["argv"] and "--init-std" in lines[0]["argv"]
    # the options of other regimes keep their values but are not stated: train refuses them
    assert options["rank"] == 5 and options["machines"] == 3
    assert "--rank" not in lines[0]["argv"] and "--machines" not in lines[0]["argv"]
    assert lines[2]["outputs"] == [str((tmp_path / "o" / "centralized_seed2.pt").resolve())]
    assert not (tmp_path / "o").exists()  # nothing trained


def test_a_single_seed_is_a_list_with_a_trailing_comma(tmp_path):
    runs = tmp_path / "runs.jsonl"
    argv = [*SWEEP, "--seeds", "5,", "--out", str(tmp_path / "o"), "--plan", str(runs)]
    assert main(argv) == 0
    assert [line["seeds"] for line in plan.read_plan(runs)] == [[5]]


def test_group_seeds():
    assert plan.group_seeds([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3], [4]]
    assert plan.group_seeds([0, 5, 6, 9], 3) == [[0], [5, 6], [9]]
    assert plan.group_seeds([3, 2], 4) == [[3], [2]]


@pytest.mark.parametrize(
    "argv, match",
    [
        (["sweep", "--run", "missing.jsonl", "--index", "0"], "no plan at"),
        (["sweep", "--index", "0"], "go together"),
        (["sweep", "--slurm", "x.sbatch"], "add --plan"),
        (["sweep", "--plan", "p.jsonl", "--submit"], "go with --slurm"),
        (["sweep", "--plan", "p.jsonl", "--ensemble", "2", "--name", "{regime}"], "{seed}"),
    ],
)
def test_plan_user_errors(argv, match, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_bad_plans_and_indices(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"format": "something else"}\n')
    with pytest.raises(EagleProbeError, match="not a line of an eagle-probe plan"):
        plan.read_plan(path)
    line = plan.plan_line(0, "centralized", [0], [tmp_path / "a.pt"], {}, ["train"])
    path.write_text(plan.plan_text([line, dict(line, index=5)]))
    with pytest.raises(EagleProbeError, match="index 5, expected 1"):
        plan.read_plan(path)
    path.write_text(plan.plan_text([line]))
    with pytest.raises(EagleProbeError, match="outside the plan"):
        plan.select(plan.read_plan(path), 1, path)
    with pytest.raises(EagleProbeError, match="one word"):
        plan.slurm_script(path, 1, python="python", time="1 hour")


@pytest.mark.slow
def test_local_sweep_trains_seed_groups_in_one_process(tmp_path):
    from eagle_probe.sweep import run_sweep

    extra = ["--eval-batch", "32", "--lr", "0.01"]
    table = run_sweep(
        ["centralized"],
        [0, 1, 2],
        tmp_path,
        steps=4,
        batch=16,
        extra=extra,
        ensemble=2,
        log=lambda m: None,
    )
    assert (table.status == "ok").all() and sorted(set(table.seed)) == [0, 1, 2]
    commands = {
        s: checkpoint.load(tmp_path / f"centralized_seed{s}.pt")[2]["command"] for s in (0, 1, 2)
    }
    assert "--seeds 2" in commands[0] and commands[0] == commands[1]
    assert "--seeds" not in commands[2]


def test_collect_extracts_what_the_plans_runs_wrote(tmp_path, capsys):
    import pandas as pd

    runs, out, table = tmp_path / "runs.jsonl", tmp_path / "out", tmp_path / "table"
    argv = [*SWEEP, "--seeds", "0,1", "--out", str(out), "--plan", str(runs)]
    assert main(argv) == 0
    assert main(["sweep", "--run", str(runs), "--index", "0"]) == 0  # seed 1's line not run
    capsys.readouterr()
    assert main(["sweep", "--collect", str(runs), "--out", str(table)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "1 of 2 runs failed" in err[0] and "centralized_seed1.pt" in err[0]
    rows = pd.read_csv(table / "sweep.csv")
    ok = rows[rows.status == "ok"]
    assert set(ok.seed) == {0} and sorted(ok.layer) == list(range(4))  # the default 4 layers
    assert ok.improvement.notna().all() and ok.eta.notna().all()
    assert rows[rows.seed == 1].status.str.startswith("failed: no checkpoint").all()
    # a checkpoint published mid-run (no summary beside it yet) is not a finished run
    first = out / "centralized_seed0.pt"
    (out / "centralized_seed1.pt").write_bytes(first.read_bytes())
    assert main(["sweep", "--collect", str(runs), "--out", str(table), "--force"]) == 2
    capsys.readouterr()
    rows = pd.read_csv(table / "sweep.csv")
    assert rows[rows.seed == 1].status.str.startswith("failed: unfinished").all()
    # the missing line run, collected again (--force replaces the table): every run is in it
    assert main(["sweep", "--run", str(runs), "--index", "1"]) == 0
    assert main(["sweep", "--collect", str(runs), "--out", str(table)]) == 2  # claimed already
    assert main(["sweep", "--collect", str(runs), "--out", str(table), "--force"]) == 0
    rows = pd.read_csv(table / "sweep.csv")
    assert (rows.status == "ok").all() and set(rows.seed) == {0, 1}


def test_collect_with_no_checkpoint_writes_nothing(tmp_path, capsys):
    runs, table = tmp_path / "runs.jsonl", tmp_path / "table"
    assert main([*SWEEP, "--seeds", "2", "--out", str(tmp_path / "o"), "--plan", str(runs)]) == 0
    capsys.readouterr()
    assert main(["sweep", "--collect", str(runs), "--out", str(table)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run of the plan has finished (2 missing or unfinished)" in err[0]
    assert not (table / "sweep.csv").exists()
