import json
import subprocess
import sys

import pytest

from eagle_probe.cli import main

TINY = [
    "--n",
    "6",
    "--d",
    "6",
    "--task-rank",
    "3",
    "--layers",
    "2",
    "--steps",
    "30",
    "--batch",
    "64",
    "--eval-every",
    "10",
    "--eval-batch",
    "256",
    "--no-progress",
    "--init-std",
    "0.05",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "tiny.pt"
    assert main(["train", "--regime", "centralized", *TINY, "-o", str(out)]) == 0
    return out


def test_train_writes_checkpoint_and_metrics_json(tiny_model):
    metrics = json.loads(tiny_model.with_suffix(".json").read_text())
    assert metrics["steps_done"] == 30 and "test" in metrics and "history" not in metrics
    assert metrics["command"].startswith("eagle-probe")
    names = sorted(p.name for p in tiny_model.parent.iterdir())
    assert names == ["tiny.json", "tiny.pt"]


def _by_hand(path, batch: int, seed: int) -> dict[str, float]:
    """The evaluate numbers computed here from the checkpoint, prompt by prompt."""
    import numpy as np
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.tasks import make_generator, sample

    model, task, _ = checkpoint.load(path)
    p = sample(task, batch, make_generator(seed), dtype=torch.float64)
    with torch.no_grad():
        pred = model(p.z0().to(model.cfg.torch_dtype)).to(torch.float64)
    err = (pred - p.D).square().mean(dim=(-1, -2)).numpy()
    zero = p.D.square().mean(dim=(-1, -2)).numpy()
    return {
        "mse": err.mean(),
        "zero_mse": zero.mean(),
        "median_mse": float(np.median(err)),
        "worst_mse": err.max(),
        "improvement": zero.mean() / err.mean(),
    }


def test_evaluate_json(tiny_model, capsys):
    assert main(["evaluate", str(tiny_model), "--json", "--batch", "501", "--seed", "7"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prompts"] == 501 and result["optimal_mse"] < 1e-20
    for key, value in _by_hand(tiny_model, 501, 7).items():
        assert result[key] == pytest.approx(value, rel=1e-6), key
    assert result["median_mse"] <= result["mse"] <= result["worst_mse"]
    assert result["mse"] < result["zero_mse"], "30 training steps already beat predicting 0"
    # --seed draws other prompts
    assert main(["evaluate", str(tiny_model), "--json", "--batch", "501", "--seed", "8"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["mse"] != result["mse"]
    assert other["mse"] == pytest.approx(_by_hand(tiny_model, 501, 8)["mse"], rel=1e-6)


def test_evaluate_table(tiny_model, capsys):
    assert main(["evaluate", str(tiny_model), "--batch", "101", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "101 fresh prompts" in out
    printed = {}
    for line in out.splitlines()[1:]:
        label, _, value = line.strip().rpartition("  ")
        printed[label.strip()] = value.strip()
    want = _by_hand(tiny_model, 101, 3)
    rows = {
        "test MSE": "mse",
        "zero predictor MSE": "zero_mse",
        "median prompt MSE": "median_mse",
        "worst prompt MSE": "worst_mse",
    }
    for label, key in rows.items():
        assert printed[label] == f"{want[key]:.3e}", (label, printed)
    if want["improvement"] >= 1.05:
        assert f"{want['improvement']:.1f}x below the zero predictor" in out
    else:  # never "below" a predictor it does not beat
        assert "below" not in out and "no better than the zero predictor" in out
    assert out.splitlines()[1].startswith("readout -1: the prediction is minus the D slot")


def test_existing_output_needs_force(tiny_model, capsys):
    code = main(["train", "--regime", "centralized", *TINY, "-o", str(tiny_model)])
    err = capsys.readouterr().err
    assert code == 2 and "already exists; pass --force" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv, match",
    [
        (["frobnicate"], "invalid choice"),
        (["train", "--regime", "federated", "-o", "x.pt"], "unknown regime 'federated'"),
        (["train", "--regime", "constrained", "--rank", "40", "-o", "x.pt"], "must not exceed"),
        (["train", "--regime", "distributed", "--machines", "4", "-o", "x.pt"], "must divide"),
        (["train", "--regime", "centralized", "--steps", "0", "-o", "x.pt"], "positive integer"),
        (["train", "--regime", "centralized", "--task", "sudoku", "-o", "x.pt"], "unknown task"),
        (["evaluate", "missing.pt"], "does not exist"),
    ],
)
def test_user_errors_are_one_line_exit_2(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.pt").exists()


def test_foreign_checkpoint(tmp_path, capsys):
    import torch

    path = tmp_path / "foreign.pt"
    torch.save({"a": torch.zeros(2)}, path)
    assert main(["evaluate", str(path)]) == 2
    assert "not an eagle-probe checkpoint" in capsys.readouterr().err


def test_python_dash_m_works_like_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "eagle_probe", "evaluate", "nope.pt"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "eagle-probe: error: checkpoint nope.pt does not exist"


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


def test_extract_prints_lines_of_at_most_100_characters(tiny_model, tmp_path, capsys):
    out = tmp_path / "ex"
    argv = ["extract", str(tiny_model), "--out", str(out), "--probe-batch", "32", "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("warning: the faithful export differs") for line in lines)
    text = [line for line in lines if not line.startswith("wrote ")]  # the paths are the user's
    assert max(map(len, text)) <= 100, max(text, key=len)
