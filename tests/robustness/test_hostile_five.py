"""Hostile inputs, part five: memory budgets on the paths that skipped them (a foreign file's
views, a checkpoint's task, plan files), torchrun variables left in the environment, a changed
model used without notice (missing config fields, importing the project's own checkpoint,
`--resume` with other options), rates whose Adam step overflows, a second stop signal during
training's wrap-up, library internals as the user's error line, and an unusable MPLCONFIGDIR.

Each class is held on an input of its own; docs/robustness.md lists them."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle_probe import budget, checkpoint
from eagle_probe.cli import main
from eagle_probe.errors import CheckpointError, EagleProbeError
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator, sample
from eagle_probe.train import TrainConfig, check_in_dtype

SMALL = ModelConfig(n=5, d=4, n_layers=2)
SMALL_TASK = TaskConfig(n=5, d=4, rank=2)
TRAIN = ["train", "--regime", "centralized", "--n", "5", "--d", "4", "--task-rank", "2"]
TRAIN += ["--layers", "1", "--batch", "8", "--eval-batch", "16", "--no-progress"]
GIB = 2**30


def _good(path: Path, cfg: ModelConfig = SMALL, task: TaskConfig = SMALL_TASK) -> Path:
    checkpoint.save(path, LinearTransformer(cfg, generator=make_generator(0)), task)
    return path


def _edited(path: Path, edit) -> Path:
    """A checkpoint of SMALL whose raw payload `edit(payload)` changed, written to `path`."""
    _good(path)
    payload = torch.load(path, weights_only=True)
    edit(payload)
    torch.save(payload, path)
    return path


def _one_line(err: str, code: int, expected: int, *words: str) -> None:
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def _command(argv: list[str], env: dict | None = None, timeout: float = 300, **kwargs):
    """`python -m eagle_probe argv` in a fresh process: (exit code, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "eagle_probe", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"OMP_NUM_THREADS": "1"} | (env or {}),
        **kwargs,
    )
    return done.returncode, done.stderr


def _default_sigint() -> None:
    """In a child about to start: SIGINT as the default (the test may run as a background job,
    whose children inherit SIGINT ignored; Python then raises no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# --- 1. memory budgets on every input path -----------------------------------------------------


def _peak_rss_of_loading(path: Path, max_bytes: float) -> tuple[str, int]:
    """(the error's text, peak RSS in bytes) of `checkpoint.load` in a fresh process."""
    code = (
        "import resource, sys\n"
        "from eagle_probe import checkpoint\n"
        "try:\n    checkpoint.load(sys.argv[1], max_bytes=float(sys.argv[2]))\n"
        "except Exception as e:\n    print(e)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), repr(max_bytes)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    return "\n".join(lines[:-1]), int(lines[-1]) * 1024


@pytest.mark.slow
def test_a_foreign_torch_files_huge_view_is_held_to_the_budget_before_its_copy(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"w": torch.zeros(1).expand(15000, 15000)}, path)  # one stored number
    assert path.stat().st_size < 4096
    error, peak = _peak_rss_of_loading(path, 0.5 * GIB)
    assert "not an eagle-probe checkpoint" in error and "budget of 0.5 GiB" in error, error
    assert peak < GIB  # its float64 copy alone would be 1.7 GiB (2.2 GB peak measured before)


def test_a_checkpoints_task_is_held_to_the_budget_of_its_prompts(tmp_path, capsys):
    path = _edited(tmp_path / "m.pt", lambda p: p["task_config"].update(task="nystrom"))
    checkpoint.load(path)  # kernel_dim 3: 8,192 prompts' points take 4.3 MB
    path = _edited(
        tmp_path / "wide.pt", lambda p: p["task_config"].update(task="nystrom", kernel_dim=3000)
    )
    with pytest.raises(EagleProbeError, match="kernel_dim of at most"):
        checkpoint.load(path, max_bytes=0.5 * 2**30)  # 1.65 GiB for 8,192 prompts
    checkpoint.load(path, max_bytes=8 * 2**30)  # within a budget that holds it
    code = main(["evaluate", str(path), "--max-memory", "0.5", "--batch", "4096"])
    _one_line(capsys.readouterr().err, code, 2, "kernel_dim", "3000")
    # a small model's task may draw from points wider than its prompts: the budget decides
    path = _edited(
        tmp_path / "small.pt", lambda p: p["task_config"].update(task="nystrom", kernel_dim=50)
    )
    checkpoint.load(path)


def test_draw_bytes_counts_the_kernel_points_of_a_batch():
    task = TaskConfig(task="nystrom", n=18, d=18, kernel_dim=3000)
    assert budget.draw_bytes(task, 2048) == 8 * 2048 * (18 + 2 + 2) * 3000  # 1.08 GB
    assert budget.draw_bytes(TaskConfig(), 2048) == 0  # the paper's factors: prompt-sized


@pytest.mark.parametrize("kind", ["device", "fifo", "oversized"])
def test_a_plan_is_a_regular_file_within_the_budget(kind, tmp_path):
    if kind == "device":
        plan = "/dev/zero"
    elif kind == "fifo":
        plan = str(tmp_path / "runs.jsonl")
        os.mkfifo(plan)  # opened for reading, it would wait for a writer forever
    else:
        plan = str(tmp_path / "runs.jsonl")
        Path(plan).write_bytes(b" " * (30 * 2**20))
    # the address-space limit keeps the machine from filling up if the plan is read whole (the
    # command reads it before it imports torch)
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))  # noqa: E731
    argv = ["sweep", "--run", plan, "--index", "0", "--max-memory", "0.2"]
    code, err = _command(argv, timeout=120, preexec_fn=limit)
    words = ("budget of 0.2 GiB",) if kind == "oversized" else ("not a regular file",)
    _one_line(err, code, 2, plan, *words)


# --- 2. torchrun variables left in the environment ---------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_env(port: int) -> dict[str, str]:
    return {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


@pytest.mark.slow
def test_a_rendezvous_nobody_joins_ends_in_one_line(tmp_path):
    env = _torchrun_env(_free_port()) | {"EAGLE_PROBE_RENDEZVOUS_TIMEOUT": "2"}
    start = time.monotonic()
    argv = [*TRAIN, "--steps", "3", "-o", str(tmp_path / "m.pt")]
    code, err = _command(argv, env=env, timeout=120)
    _one_line(err, code, 2, "WORLD_SIZE=2", "within 2 s", "unset")
    assert time.monotonic() - start < 120
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_wait_for_the_torchrun_group(sig, tmp_path):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", *TRAIN, "--steps", "3", "-o", str(tmp_path / "m.pt")],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"} | _torchrun_env(port),
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # rank 0 hosts the store
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    _one_line(err, proc.returncode, 128 + sig)
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.slow
def test_the_rendezvous_timeout_is_a_positive_number_of_seconds(tmp_path):
    # in a process of its own: a wait that nothing bounds would hold the test's process too
    env = _torchrun_env(_free_port()) | {"EAGLE_PROBE_RENDEZVOUS_TIMEOUT": "soon"}
    argv = [*TRAIN, "--steps", "3", "-o", str(tmp_path / "m.pt")]
    code, err = _command(argv, env=env, timeout=120)
    _one_line(err, code, 2, "EAGLE_PROBE_RENDEZVOUS_TIMEOUT='soon'")


# --- 3. a changed model is never used without notice -------------------------------------------


@pytest.mark.parametrize(
    "where, field",
    [("model_config", "normalize"), ("model_config", "readout"), ("task_config", "task")],
)
def test_a_config_field_left_out_is_refused_by_name(where, field, tmp_path, capsys):
    path = _edited(tmp_path / "m.pt", lambda p: p[where].pop(field))
    with pytest.raises(CheckpointError, match=f"no field '{field}'"):
        checkpoint.load(path)
    code = main(["evaluate", str(path)])
    _one_line(capsys.readouterr().err, code, 2, repr(field))


def test_the_fields_older_files_predate_read_as_they_were(tmp_path):
    def older(payload):  # format 1, before the sample layout and the machines' own weights
        payload["format_version"] = 1
        del payload["model_config"]["tokens"], payload["model_config"]["share_heads"]

    model, _, _ = checkpoint.load(_edited(tmp_path / "old.pt", older))
    assert model.cfg.tokens == "features" and model.cfg.share_heads is True
    path = _edited(tmp_path / "two.pt", lambda p: p["model_config"].pop("tokens"))
    with pytest.raises(CheckpointError, match="no field 'tokens'"):  # format 2 names it
        checkpoint.load(path)


def test_every_shipped_checkpoint_names_its_fields():
    root = Path(__file__).resolve().parents[2] / "trained_models"
    paths = sorted(root.rglob("*.pt"))
    assert len(paths) >= 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # format-1 files say how they are read
        for path in paths:
            checkpoint.load(path)


def test_importing_an_eagle_probe_checkpoint_is_refused(tmp_path, capsys):
    path = _good(tmp_path / "m.pt", ModelConfig(n=5, d=4, n_layers=1, normalize="spectral"))
    out = tmp_path / "imported.pt"
    argv = ["import", "--layout", "eagle-probe", str(path), "--n", "5", "-o", str(out)]
    code = main(argv)
    _one_line(capsys.readouterr().err, code, 2, "eagle-probe checkpoint", "drop")
    assert not out.exists()


@pytest.mark.slow
def test_resume_refuses_options_that_contradict_the_run(tmp_path, capsys):
    out = tmp_path / "m.pt"
    assert main([*TRAIN, "--steps", "4", "--eval-every", "2", "-o", str(out)]) == 0
    capsys.readouterr()
    before = out.read_bytes()
    for extra, words in [
        (["--lr", "0.01"], ["--lr 0.01", "0.001"]),
        (["--n", "6", "--normalize", "none"], ["--n 6", "--normalize 'none'"]),
        (["--no-share-heads"], ["--no-share-heads"]),
    ]:
        code = main([*TRAIN, "--steps", "6", *extra, "--resume", "-o", str(out)])
        _one_line(capsys.readouterr().err, code, 2, "--resume", *words)
    assert out.read_bytes() == before
    assert main([*TRAIN, "--steps", "6", "--lr", "1e-3", "--resume", "-o", str(out)]) == 0


# --- 4. rates whose first Adam step leaves the dtype -------------------------------------------


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"lr": 4e37}, "lr 4e+37"),
        ({"lr": 3e38}, "lr 3e+38"),
        ({"gain_lr": 3e38}, "gain_lr 3e+38"),
        ({"lr": 1e30, "weight_decay": 1e10}, "weight_decay"),
    ],
)
def test_a_rate_whose_adam_step_overflows_is_refused(fields, word):
    with pytest.raises(ValueError, match=re.escape(word)):
        check_in_dtype(TrainConfig(**fields), SMALL_TASK, torch.float32)
    check_in_dtype(TrainConfig(**fields), SMALL_TASK, torch.float64)  # float64 holds the steps


def test_the_largest_rate_adam_can_step_with_is_accepted():
    check_in_dtype(TrainConfig(lr=3.4e37), SMALL_TASK, torch.float32)


@pytest.mark.parametrize("flag, value", [("--lr", "4e37"), ("--gain-lr", "3e38")])
def test_train_refuses_an_overflowing_step_in_one_line(flag, value, tmp_path, capsys):
    code = main([*TRAIN, "--steps", "2", flag, value, "-o", str(tmp_path / "m.pt")])
    _one_line(capsys.readouterr().err, code, 2, "Adam's first step", "at most 3.4e+37")
    assert sorted(os.listdir(tmp_path)) == []


# --- 5. a second stop signal during training's wrap-up -----------------------------------------


@pytest.mark.slow
def test_a_second_signal_waits_until_the_files_are_whole(tmp_path):
    out = tmp_path / "m.pt"
    argv = [*TRAIN, "--steps", "100000", "--eval-every", "20", "--save-every", "50"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", *argv, "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 300
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
        # both pending at once: Python runs SIGINT's handler first, SIGTERM's right after it,
        # while the interrupted run is being wound up
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGTERM)
        stdout, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "interrupted (SIGINT)" in stdout and "SIGTERM" in err and "held" in err, err
    assert "nothing written" not in err and "Traceback" not in err, err
    _, _, metrics = checkpoint.load(out)
    summary = json.loads(out.with_suffix(".json").read_text())
    assert metrics["stopped"] == summary["stopped"] == "interrupted"
    assert metrics["steps_done"] == summary["steps_done"] > 0
    assert (tmp_path / "m.steps" / "step_00000000.pt").exists()
    assert sorted(os.listdir(tmp_path)) == ["m.json", "m.pt", "m.steps"]


def test_the_latch_raises_the_first_stop_and_holds_the_rest():
    from eagle_probe.cli.common import first_stop_only
    from eagle_probe.errors import Terminated

    # signal.raise_signal runs the handler before it returns (kill() to the process may be taken
    # by another thread, and the handler then runs at some later bytecode: a race on a busy CPU).
    # Under nohup SIGHUP arrives ignored, and the latch leaves an ignored signal alone: the test
    # starts from the default disposition
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        _latch_rounds(first_stop_only, Terminated)
    finally:
        signal.signal(signal.SIGHUP, hup)


def _latch_rounds(first_stop_only, Terminated):
    before = signal.getsignal(signal.SIGTERM)
    with first_stop_only() as latch:
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGHUP)  # after the first stop: held
        assert latch.held == [signal.SIGHUP]
    assert signal.getsignal(signal.SIGTERM) is before
    with first_stop_only() as latch:
        latch.hold()  # the work is done: even a first stop waits for the files
        signal.raise_signal(signal.SIGTERM)
        assert latch.held == [signal.SIGTERM]


def test_an_ignored_sigint_stays_ignored_under_the_latch():
    from eagle_probe.cli.common import first_stop_only

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job
    try:
        with first_stop_only():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# --- 6. library internals never reach the user's error line ------------------------------------


def test_a_distributed_plant_on_one_machine_runs_the_centralized_steps(tmp_path, capsys):
    from conftest import numpy_eagle

    out = tmp_path / "one.pt"
    argv = ["plant", "--regime", "distributed", "--machines", "1", "--n", "6", "--d", "4"]
    argv += ["--a-steps", "0.01,0.02", "--c-steps", "0.03,0.01", "--dtype", "float64"]
    assert main([*argv, "-o", str(out)]) == 0, capsys.readouterr().err
    model, task, _ = checkpoint.load(out)
    assert model.cfg.machines == 1 and model.cfg.heads == 1
    p = sample(task, 16, make_generator(3), dtype=torch.float64)
    with torch.no_grad():
        got = model(p.z0()).numpy()
    A, B, C = (t.numpy() for t in (p.A, p.B, p.C))
    want = numpy_eagle(A, B, C, [0.01, 0.02], [0.03, 0.01])[-1][3]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("where", ["model_config", "task_config"])
def test_a_config_key_that_is_not_a_string_is_named(where, tmp_path, capsys):
    path = _edited(tmp_path / "m.pt", lambda p: p[where].update({7: 1}))
    with pytest.raises(CheckpointError, match="field names must be strings, got 7"):
        checkpoint.load(path)
    code = main(["evaluate", str(path)])
    _one_line(capsys.readouterr().err, code, 2, "field names must be strings")


def test_a_learned_readout_is_read_without_torchs_warning(tmp_path, capsys):
    from eagle_probe.evaluate import model_readout_text, readout_sign

    cfg = ModelConfig(n=5, d=4, n_layers=1, readout="learned")
    path = _good(tmp_path / "m.pt", cfg)
    model, _, _ = checkpoint.load(path)
    assert not any(p.requires_grad for p in model.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's requires_grad UserWarning among them
        assert readout_sign(model) == -1 and model_readout_text(model)
    code = main(["evaluate", str(path), "--batch", "64"])
    err = capsys.readouterr().err
    assert code == 0 and "requires_grad" not in err and "warning" not in err, err


# --- 7. an unusable MPLCONFIGDIR is one line ---------------------------------------------------


@pytest.mark.slow
def test_an_mplconfigdir_that_is_a_file_is_one_line(tmp_path):
    _good(tmp_path / "m.pt", ModelConfig(n=5, d=4, n_layers=1, normalize="none"))
    (tmp_path / "a_file").write_text("not a directory")
    env = {"MPLCONFIGDIR": str(tmp_path / "a_file")}
    argv = ["extract", str(tmp_path / "m.pt"), "--out", str(tmp_path / "x"), "--no-progress"]
    code, err = _command([*argv, "--no-control"], env=env, cwd=tmp_path)
    assert code == 0, err
    assert err.strip().splitlines() == [
        f"eagle-probe: warning: MPLCONFIGDIR={tmp_path / 'a_file'} is not a writable directory, "
        "so matplotlib used a temporary one (its font cache rebuilt each run); point "
        "MPLCONFIGDIR at a writable directory, or unset it (UserWarning)"
    ]
    assert (tmp_path / "a_file").read_text() == "not a directory"
