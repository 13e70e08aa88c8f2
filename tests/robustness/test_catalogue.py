"""A catalogue of bad inputs: each gets exit code 2, one line naming the problem, no traceback,
and leaves no file behind."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator

SMALL = ModelConfig(n=6, d=5, n_layers=2)
SMALL_TASK = TaskConfig(n=6, d=5, rank=3)


def _good(path: Path) -> Path:
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK)
    return path


def _mutated(mutate):
    def make(tmp: Path) -> Path:
        path = _good(tmp / "m.pt")
        payload = torch.load(path, weights_only=True)
        mutate(payload)
        torch.save(payload, path)
        return path

    return make


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch EXPLOITED",))


def _write(data: bytes):
    def make(tmp: Path) -> Path:
        path = tmp / "m.pt"
        path.write_bytes(data)
        return path

    return make


def _torch_file(obj):
    def make(tmp: Path) -> Path:
        path = tmp / "m.pt"
        torch.save(obj, path)
        return path

    return make


def _truncated(tmp: Path) -> Path:
    path = _good(tmp / "m.pt")
    path.write_bytes(path.read_bytes()[:300])
    return path


def _pickle_exploit(tmp: Path) -> Path:
    path = tmp / "m.pt"
    torch.save({"format": "eagle-probe", "x": _Exploit()}, path)
    return path


def _raw_pickle(tmp: Path) -> Path:
    path = tmp / "m.pt"
    path.write_bytes(pickle.dumps(_Exploit()))
    return path


def _sd(name):
    return lambda p: p["state_dict"][name]


CHECKPOINTS = {
    "missing": (lambda tmp: tmp / "absent.pt", "does not exist"),
    "directory": (lambda tmp: tmp, "is a directory"),
    "empty": (_write(b""), "is empty"),
    "truncated": (_truncated, "not a readable torch file"),
    "random_bytes": (_write(os.urandom(4096)), "checkpoint"),
    "text_file": (_write(b"hello world\n" * 10), "checkpoint"),
    "pickle_running_code": (_pickle_exploit, "refused"),
    "raw_pickle_running_code": (_raw_pickle, "checkpoint"),
    "foreign_dict": (_torch_file({"weights": torch.zeros(3)}), "not an eagle-probe checkpoint"),
    "foreign_tensor": (_torch_file(torch.zeros(3)), "not an eagle-probe checkpoint"),
    "older_version": (_mutated(lambda p: p.update(format_version=0)), "format version 0"),
    "newer_version": (_mutated(lambda p: p.update(format_version=3)), "format version 3"),
    "no_state_dict": (_mutated(lambda p: p.pop("state_dict")), "state_dict"),
    "bad_regime": (_mutated(lambda p: p["model_config"].update(regime="x")), "unknown regime"),
    "unknown_config_field": (_mutated(lambda p: p["model_config"].update(foo=1)), "foo"),
    "config_weights_mismatch": (
        _mutated(lambda p: p["model_config"].update(n_layers=3)),
        "do not match its config",
    ),
    "extra_weight": (
        _mutated(lambda p: p["state_dict"].update(extra=torch.zeros(1))),
        "unexpected",
    ),
    "wrong_shape": (
        _mutated(lambda p: p["state_dict"].update({"blocks.0.attn.W_V": torch.zeros(1, 8, 2)})),
        "has shape",
    ),
    "wrong_dtype": (
        _mutated(
            lambda p: p["state_dict"].update(
                {"blocks.0.attn.W_V": p["state_dict"]["blocks.0.attn.W_V"].half()}
            )
        ),
        "float16",
    ),
    "nan_weight": (
        _mutated(lambda p: _sd("blocks.0.attn.W_Q")(p).fill_(float("nan"))),
        "NaN or Inf",
    ),
    "inf_weight": (
        _mutated(lambda p: _sd("blocks.1.attn.W_P")(p).fill_(float("inf"))),
        "NaN or Inf",
    ),
    "task_size_mismatch": (_mutated(lambda p: p["task_config"].update(n=9)), "disagree on sizes"),
}


@pytest.mark.parametrize("command", ["evaluate", "extract"])
@pytest.mark.parametrize("case", list(CHECKPOINTS))
def test_bad_checkpoints(case, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    make, message = CHECKPOINTS[case]
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main([command, str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "EXPLOITED").exists(), "a checkpoint executed code"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


TRAIN = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--steps", "2"]
ARGS = {
    "unknown_subcommand": (["frobnicate"], "invalid choice"),
    "unknown_regime": (["train", "--regime", "federated", "-o", "o.pt"], "unknown regime"),
    "unknown_task": ([*TRAIN, "--task", "sudoku", "-o", "o.pt"], "unknown task"),
    "rank_above_n": (
        ["train", "--regime", "constrained", "--rank", "30", "-o", "o.pt"],
        "must not exceed",
    ),
    "zero_machines": (
        ["train", "--regime", "distributed", "--machines", "0", "-o", "o.pt"],
        "positive integer",
    ),
    "machines_not_dividing": (
        ["train", "--regime", "distributed", "--machines", "4", "-o", "o.pt"],
        "must divide",
    ),
    "zero_steps": ([*TRAIN[:-1], "0", "-o", "o.pt"], "positive integer"),
    "negative_batch": ([*TRAIN, "--batch", "-5", "-o", "o.pt"], "positive integer"),
    "text_lr": ([*TRAIN, "--lr", "fast", "-o", "o.pt"], "expected a number"),
    "nan_lr": ([*TRAIN, "--lr", "nan", "-o", "o.pt"], "finite number"),
    "negative_seed": ([*TRAIN, "--seed", "-1", "-o", "o.pt"], "integer >= 0"),
    "bad_token_mask": ([*TRAIN, "--token-mask", "diag", "-o", "o.pt"], "unknown token_mask"),
    "bad_readout": ([*TRAIN, "--readout", "abs", "-o", "o.pt"], "unknown readout"),
    "bad_normalize": ([*TRAIN, "--normalize", "l1", "-o", "o.pt"], "unknown normalize"),
    "bad_schedule": ([*TRAIN, "--schedule", "step", "-o", "o.pt"], "unknown schedule"),
    "missing_output": (TRAIN, "required"),
    "output_under_a_file": ([*TRAIN, "-o", "afile/o.pt"], "not a directory"),
    "step_lists_differ": (
        ["plant", "--a-steps", "0.1,0.2", "--c-steps", "0.1", "-o", "p.pt"],
        "has 2 values",
    ),
    "step_not_a_number": (
        ["plant", "--a-steps", "a", "--c-steps", "0.1", "-o", "p.pt"],
        "comma-separated",
    ),
    "step_inf": (["plant", "--a-steps", "inf", "--c-steps", "0.1", "-o", "p.pt"], "finite"),
    "empty_steps": (["plant", "--a-steps", ",", "--c-steps", "0.1", "-o", "p.pt"], "one or more"),
    "plant_bad_dtype": (
        ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--dtype", "int8", "-o", "p.pt"],
        "unknown dtype",
    ),
    "plant_zero_size": (
        ["plant", "--n", "0", "--a-steps", "0.1", "--c-steps", "0.1", "-o", "p.pt"],
        "positive integer",
    ),
    "bench_bad_suite": (["bench", "--suite", "huge", "--out", "b"], "unknown suite"),
    "extract_zero_probe": (["extract", "model.pt", "--probe-batch", "0"], "positive integer"),
    "extract_out_is_file": (["extract", "model.pt", "--out", "afile"], "not a directory"),
    "extract_out_under_file": (["extract", "model.pt", "--out", "afile/x"], "not a directory"),
}


@pytest.mark.parametrize("case", list(ARGS))
def test_bad_arguments(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "model.pt")
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv, message = ARGS[case]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    "command",
    [
        ["plant", "--a-steps", "0.1", "--c-steps", "0.1"],
        ["train", "--regime", "centralized", "--steps", "1"],
    ],
)
def test_existing_output_is_not_overwritten_without_force(command, tmp_path, capsys):
    out = tmp_path / "o.pt"
    out.write_bytes(b"precious")
    assert main([*command, "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"


def test_internal_errors_exit_1_and_debug_shows_the_traceback(monkeypatch, capsys, tmp_path):
    import eagle_probe.cli as cli

    def boom(args):
        raise RuntimeError("kaboom")

    path = _good(tmp_path / "m.pt")
    monkeypatch.setattr(cli, "cmd_evaluate", boom)
    assert main(["evaluate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "internal error" in err and "kaboom" in err and "Traceback" not in err
    with pytest.raises(RuntimeError, match="kaboom"):
        main(["--debug", "evaluate", str(path)])


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_model_refuses_non_finite_prompts(value):
    model = LinearTransformer(SMALL, generator=make_generator(0))
    z0 = torch.zeros(2, *SMALL.prompt_shape)
    z0[1, 0, 0] = value
    with pytest.raises(ValueError, match="NaN or Inf"):
        model(z0)


@pytest.mark.parametrize("kappa", [1e12, 1e14])
def test_solver_on_extreme_condition_numbers_never_returns_silent_garbage(kappa):
    import numpy as np

    from eagle_probe import eagle

    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    V, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    A = (U * np.logspace(0, -np.log10(kappa), 40)) @ V.T
    b = A @ rng.standard_normal(40)
    stats = {}
    x, info = eagle.lstsq(A, b, stats=stats)
    # info > 0 is an honest "no certificate" (100·κ̂·eps approaches 1 here); info 0 must be right.
    assert info >= 0 and np.all(np.isfinite(x))
    assert np.linalg.norm(A @ x - b) <= 1e-6 * np.linalg.norm(b)
    assert info == 0 or stats["reason"] in eagle.REASONS
