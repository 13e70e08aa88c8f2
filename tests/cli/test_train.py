"""`eagle-probe train` (`cli/train.py`): the checkpoint and its metrics JSON, --force, --resume,
--save-every's run directory, --seeds (one checkpoint per seed, resumed together), and a signal
that stops a run leaving complete checkpoints."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from cli.conftest import TINY
from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.timeline import checkpoint_name


def test_train_writes_checkpoint_and_metrics_json(tiny_model):
    metrics = json.loads(tiny_model.with_suffix(".json").read_text())
    assert metrics["steps_done"] == 30 and "test" in metrics and "history" not in metrics
    assert metrics["command"].startswith("eagle-probe")
    names = sorted(p.name for p in tiny_model.parent.iterdir())
    assert names == ["tiny.json", "tiny.pt"]


def test_existing_output_needs_force(tiny_model, capsys):
    code = main(["train", "--regime", "centralized", *TINY, "-o", str(tiny_model)])
    err = capsys.readouterr().err
    assert code == 2 and "already exists; pass --force" in err and len(err.splitlines()) == 1


def test_resume_continues_a_run(tmp_path):
    out = tmp_path / "r.pt"
    assert main(["train", "--regime", "centralized", *TINY, "-o", str(out)]) == 0
    first = json.loads(out.with_suffix(".json").read_text())
    assert first["steps_done"] == 30
    assert (
        main(
            [
                "train",
                "--regime",
                "centralized",
                "--resume",
                "--steps",
                "50",
                "--no-progress",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    second = json.loads(out.with_suffix(".json").read_text())
    assert second["steps_done"] == 50 and second["resumed_from_step"] == 30
    from eagle_probe import checkpoint

    _, _, metrics = checkpoint.load(out)
    assert [r["step"] for r in metrics["history"]][-1] == 50


def test_resume_refuses_a_finished_or_missing_run(tmp_path, capsys):
    out = tmp_path / "r.pt"
    assert main(["train", "--regime", "centralized", "--resume", "-o", str(out)]) == 2
    assert "needs an existing checkpoint" in capsys.readouterr().err
    assert main(["train", "--regime", "centralized", *TINY, "-o", str(out)]) == 0
    assert (
        main(["train", "--regime", "centralized", "--resume", "--no-progress", "-o", str(out)]) == 2
    )
    assert "pass a larger --steps" in capsys.readouterr().err


# the --seeds runs: 4 steps, a 1 × 1 D block
SEEDS_TINY = ["--regime", "centralized", "--n", "6", "--d", "6", "--n-prime", "1", "--d-prime", "1"]
SEEDS_TINY += ["--layers", "2", "--steps", "4", "--batch", "16", "--eval-every", "2"]
SEEDS_TINY += ["--eval-batch", "32", "--no-progress"]


def test_cli_train_seeds_writes_one_checkpoint_per_seed(tmp_path, capsys):
    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    out = tmp_path / "c_{seed}_run.pt"
    assert main(["train", *SEEDS_TINY, "--seed", "5", "--seeds", "2", "-o", str(out)]) == 0
    assert "2 of 2 seeds" in capsys.readouterr().out
    for seed in (5, 6):
        path = tmp_path / f"c_{seed}_run.pt"
        model, task, metrics = checkpoint.load(path)
        assert metrics["train_config"]["seed"] == seed and metrics["ensemble"]["seeds"] == [5, 6]
        assert metrics["test"]["mse"] > 0 and path.with_suffix(".json").is_file()
    plain = tmp_path / "plain.pt"
    assert main(["train", *SEEDS_TINY, "--seeds", "2", "-o", str(plain)]) == 0
    assert (tmp_path / "plain_seed0.pt").is_file() and (tmp_path / "plain_seed1.pt").is_file()
    assert not plain.exists()


def test_cli_train_seeds_resume_continues_every_seed(tmp_path, capsys):
    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    out = tmp_path / "r_{seed}.pt"
    assert main(["train", *SEEDS_TINY, "--seed", "3", "--seeds", "2", "-o", str(out)]) == 0
    before = {s: checkpoint.load(tmp_path / f"r_{s}.pt")[2]["steps_done"] for s in (3, 4)}
    argv = ["train", "--regime", "centralized", "--seed", "3", "--seeds", "2", "--resume"]
    argv += ["--steps", "8", "--no-progress"]
    assert main([*argv, "-o", str(out)]) == 0
    assert "2 of 2 seeds" in capsys.readouterr().out
    for seed in (3, 4):
        _, _, metrics = checkpoint.load(tmp_path / f"r_{seed}.pt")
        assert before[seed] == 4 and metrics["resumed_from_step"] == 4
        assert metrics["steps_done"] == 8 and metrics["train_config"]["seed"] == seed
        assert [r["step"] for r in metrics["history"]] == [2, 4, 6, 8]
    # a seed whose checkpoint is another configuration's: one line, nothing replaced
    other = tmp_path / "o_{seed}.pt"
    assert main(["train", *SEEDS_TINY, "--seed", "3", "--seeds", "2", "-o", str(other)]) == 0
    assert main(["train", *SEEDS_TINY, "--lr", "0.5", "--seed", "4", "-o", str(tmp_path / "o_4.pt"),
                 "--force"]) == 0  # fmt: skip
    capsys.readouterr()
    kept = (tmp_path / "o_3.pt").read_bytes()
    assert main([*argv, "--steps", "12", "-o", str(other)]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "o_3.pt").read_bytes() == kept


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--resume"], "needs the seeds' checkpoints: no"),
        (["--save-every", "2"], "does not combine with --save-every"),
        (["--seed", "4294967295"], "passes 2**32"),
        (["--seeds", "256", "--eval-batch", "1000", "--max-memory", "0.1"], "--seeds 256 needs"),
    ],
)
def test_cli_train_seeds_user_errors(extra, match, tmp_path, capsys):
    from eagle_probe.cli import main

    argv = ["train", *SEEDS_TINY, "--seeds", "2", *extra, "-o", str(tmp_path / "m.pt")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sigterm_stops_all_seeds_with_their_best_weights_written(tmp_path):
    import math
    import os
    import signal
    import subprocess
    import sys
    import time

    from eagle_probe import checkpoint

    out = tmp_path / "run_{seed}.pt"
    argv = [*SEEDS_TINY, "--steps", "100000", "--eval-every", "20", "--seeds", "2", "-o", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", "train", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    first, second = tmp_path / "run_0.pt", tmp_path / "run_1.pt"
    deadline = time.time() + 90
    while not second.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert second.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    for seed, path in ((0, first), (1, second)):
        _, _, metrics = checkpoint.load(path)
        assert metrics["interrupted"] is True and 0 < metrics["steps_done"] < 100000
        assert metrics["train_config"]["seed"] == seed and math.isfinite(metrics["test"]["mse"])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["run_0.json", "run_0.pt", "run_1.json", "run_1.pt"]


def _default_sigint() -> None:
    """SIGINT as the default in the child about to start. A suite launched as a background job
    (`make test &`, nohup, some CI runners) passes SIGINT on ignored, and Python then raises no
    KeyboardInterrupt; the command keeps that choice, as a background job's should (Ctrl-C at
    the terminal is not meant for it), so a test that sends SIGINT restores it in its child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_training_leaves_a_complete_checkpoint(tmp_path, sig):
    out = tmp_path / "run.pt"
    cmd = [
        sys.executable,
        "-m",
        "eagle_probe",
        "train",
        "--regime",
        "centralized",
        "--n",
        "6",
        "--d",
        "6",
        "--task-rank",
        "3",
        "--layers",
        "2",
        "--steps",
        "100000",
        "--batch",
        "64",
        "--eval-every",
        "20",
        "--eval-batch",
        "128",
        "--no-progress",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        preexec_fn=_default_sigint,
    )
    try:  # the run is never left behind, whatever fails (it would train for hours)
        deadline = time.time() + 600  # a bound for a stuck run, far above a loaded machine's time
        while not out.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, err  # as any command a signal stops
    model, _, metrics = checkpoint.load(out)
    assert metrics["interrupted"] is True and 0 < metrics["steps_done"] < 100000
    assert metrics["stopped"] == "interrupted" and metrics["signal"] == sig.name
    assert math.isfinite(metrics["test"]["mse"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.pt"]


def test_cli_train_save_every_writes_the_run_directory(tmp_path):
    out = tmp_path / "run" / "tiny.pt"  # a folder that does not exist yet is made
    argv = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--task-rank", "3"]
    argv += ["--layers", "2", "--steps", "25", "--batch", "32", "--eval-every", "10"]
    argv += ["--eval-batch", "128", "--no-progress", "--save-every", "10", "-o", str(out)]
    assert main(argv) == 0
    steps_dir = tmp_path / "run" / "tiny.steps"
    assert sorted(p.name for p in steps_dir.iterdir()) == [
        checkpoint_name(s) for s in (0, 10, 20, 25)
    ]
