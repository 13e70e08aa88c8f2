import math
import os
import signal
import subprocess
import sys
import time

import pytest

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator
from eagle_probe.train import TrainConfig, lr_factor, train

TASK = TaskConfig(n=6, d=6, n_prime=1, d_prime=1, rank=3)


def _cfg(**kwargs) -> ModelConfig:
    return ModelConfig(
        **(
            {"n": 6, "d": 6, "n_prime": 1, "d_prime": 1, "n_layers": 2, "normalize": "spectral"}
            | kwargs
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["centralized", "distributed", "constrained"])
def test_tiny_training_beats_the_zero_predictor(regime):
    cfg = _cfg(regime=regime, machines=2, rank=3, init_std=0.2)
    run = TrainConfig(
        steps=300,
        batch=128,
        lr=1e-2,
        schedule="warmup_cosine",
        eval_every=100,
        eval_batch=512,
        seed=1,
    )
    model, metrics = train(cfg, TASK, run, progress=False)
    result = evaluate(model, TASK, batch=2000, seed=3)
    untrained = evaluate(LinearTransformer(cfg, make_generator(1)), TASK, batch=2000, seed=3)
    assert result["improvement"] > 2.0 and untrained["improvement"] < 1.2, (result, untrained)
    assert metrics["steps_done"] == 300 and len(metrics["history"]) == 3
    assert metrics["best_val_mse"] == min(r["val_mse"] for r in metrics["history"])


def test_same_seed_same_model():
    run = TrainConfig(steps=20, batch=32, eval_every=10, eval_batch=64, seed=4)
    a, _ = train(_cfg(), TASK, run, progress=False)
    b, _ = train(_cfg(), TASK, run, progress=False)
    for key, value in a.state_dict().items():
        assert (value == b.state_dict()[key]).all()


def test_data_shards_default_to_one_per_process():
    assert TrainConfig().data_shards is None
    run = TrainConfig(steps=2, batch=32, eval_every=2, eval_batch=64, seed=4)
    _, metrics = train(_cfg(), TASK, run, progress=False)
    assert metrics["train_config"]["data_shards"] == 1 and metrics["processes"] == 1
    with pytest.raises(ValueError, match="must divide the batch"):
        TrainConfig(batch=30, data_shards=4)


def test_value_freezing_and_curriculum_run():
    run = TrainConfig(
        steps=40,
        batch=32,
        eval_every=20,
        eval_batch=64,
        freeze_values_last=0.5,
        curriculum=True,
        clip_qk=0.05,
    )
    model, metrics = train(_cfg(), TASK, run, progress=False)
    assert metrics["steps_done"] == 40


def test_warmup_cosine_schedule():
    cfg = TrainConfig(steps=100, schedule="warmup_cosine", warmup=0.1, final_lr_ratio=0.01)
    assert lr_factor(cfg, 0) == pytest.approx(0.1)
    assert lr_factor(cfg, 9) == pytest.approx(1.0)
    assert lr_factor(cfg, 99) == pytest.approx(0.01, abs=1e-3)
    assert lr_factor(TrainConfig(), 12345) == 1.0


def test_size_mismatch_between_model_and_task():
    with pytest.raises(ValueError, match="do not match"):
        train(_cfg(n=4), TASK, TrainConfig(steps=1), progress=False)


@pytest.mark.parametrize(
    "kwargs",
    [{"steps": 0}, {"lr": -1.0}, {"schedule": "step"}, {"warmup": 1.5}, {"spike_factor": 0.5}],
)
def test_bad_train_configs(kwargs):
    with pytest.raises(ValueError):
        TrainConfig(**kwargs)


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
    )
    deadline = time.time() + 90
    while not out.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    model, _, metrics = checkpoint.load(out)
    assert metrics["interrupted"] is True and 0 < metrics["steps_done"] < 100000
    assert math.isfinite(metrics["test"]["mse"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.pt"]
