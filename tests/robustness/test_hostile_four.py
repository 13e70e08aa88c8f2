"""Hostile inputs, part four: signals that leave nothing behind, interrupted training told as
interrupted, Slurm paths, numeric flags bounded by the dtype they feed, contradicting import
sizes, checkpoint metadata, skipped views, environment variables and matplotlib's chatter.

Each test uses another command, size or flag than the case that found the hole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.errors import Terminated
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator
from eagle_probe.train import TrainConfig, train

SMALL = ModelConfig(n=5, d=4, n_layers=2)
SMALL_TASK = TaskConfig(n=5, d=4, rank=2)
TRAIN = ["train", "--regime", "centralized", "--n", "5", "--d", "4", "--task-rank", "2"]
TRAIN += ["--layers", "1", "--batch", "8", "--eval-batch", "16", "--no-progress"]


def _good(path: Path) -> Path:
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK)
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_line(capsys, code: int, expected: int, *words: str) -> str:
    err = capsys.readouterr().err
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def _wait_for(root: Path, pattern: str, timeout: float = 120.0) -> Path:
    """The first path under `root` matching `pattern`, waited for (a failure after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"nothing matching {pattern} appeared in {timeout:.0f} s")


# --- 1. SIGTERM and SIGHUP unwind every command as SIGINT does -----------------------------


def _blocked(*args, **kwargs):
    """A command's work that runs until a signal stops it (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError("no signal arrived")


@pytest.mark.parametrize(
    "command, work, signum",
    [
        ("extract", "eagle_probe.extract.extract", signal.SIGHUP),
        ("timeline", "eagle_probe.timeline.timeline", signal.SIGTERM),
    ],
)
def test_a_signal_removes_the_staging_directory_and_says_so(
    command, work, signum, tmp_path, monkeypatch, capsys
):
    _good(tmp_path / "m.pt")
    (tmp_path / "run").mkdir()
    _good(tmp_path / "run" / "step_00000000.pt")
    argv = {
        "extract": ["extract", "m.pt", "--out", "x", "--no-progress"],
        "timeline": ["timeline", "run", "--out", "x"],
    }[command]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(work, _blocked)

    def unexpected(signum, frame):  # only reached when the command installs no handler
        raise AssertionError(f"{signal.Signals(signum).name} reached no handler of the command")

    previous = signal.signal(signum, unexpected)
    try:
        stager = threading.Thread(
            target=lambda: (
                _wait_for(tmp_path, ".x.eagle-probe-partial-*"),
                os.kill(os.getpid(), signum),
            ),
            daemon=True,
        )
        stager.start()
        code = main(argv)
        stager.join(timeout=5)
    finally:
        signal.signal(signum, previous)
    _one_line(capsys, code, 128 + signum, signal.Signals(signum).name, "nothing written")
    assert not [p for p in _listing(tmp_path) if p.startswith(".")]
    assert not (tmp_path / "x").exists()


def test_a_signal_this_process_ignores_stays_ignored():
    from eagle_probe.cli.common import stop_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with stop_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGHUP, previous)


# --- 2. training says why it stopped -------------------------------------------------------


def _stop_at(step: int, stop: KeyboardInterrupt):
    def on_save(done: int, model, info) -> None:
        if done == step:
            raise stop

    return on_save


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Terminated(signal.SIGHUP)])
def test_training_records_an_interrupt_before_any_validation(stop):
    cfg = TrainConfig(steps=50, batch=8, eval_every=40, eval_batch=16)
    _, metrics = train(
        SMALL, SMALL_TASK, cfg, progress=False, save_every=1, on_save=_stop_at(3, stop)
    )
    assert metrics["stopped"] == "interrupted" and metrics["interrupted"] is True
    assert metrics["signal"] == ("SIGINT" if type(stop) is KeyboardInterrupt else "SIGHUP")
    assert 0 < metrics["steps_done"] < 40 and metrics["best_val_selected"] is None


def test_training_records_a_finished_and_a_diverged_run():
    from eagle_probe.train import stop_record

    cfg = TrainConfig(steps=4, batch=8, eval_every=2, eval_batch=16)
    _, done = train(SMALL, SMALL_TASK, cfg, progress=False)
    assert (done["stopped"], done["interrupted"], done["signal"]) == ("finished", False, None)
    validated = [{"step": 2, "val_selected": None}]  # a validation ran, none was finite
    assert stop_record(None, validated, None)["stopped"] == "diverged"
    assert stop_record(Terminated(signal.SIGTERM), validated, None)["stopped"] == "diverged"
    assert stop_record(Terminated(signal.SIGTERM), [], None) == {
        "stopped": "interrupted",
        "interrupted": True,
        "signal": "SIGTERM",
    }


@pytest.mark.slow
def test_sigterm_before_the_first_validation_is_an_interrupt_not_a_divergence(tmp_path):
    argv = [*TRAIN, "--steps", "10000000", "--eval-every", "5000000", "--save-every", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_probe", *argv, "-o", "m.pt"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    try:  # step 1's weights are kept once the first step ran: the loop is under way
        _wait_for(tmp_path, ".m.steps.eagle-probe-partial-*/step_00000001.pt")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:  # a failed test leaves no run behind (it would train for hours)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "diverged" not in err, err
    assert "interrupted (SIGTERM)" in err and "before the first validation" in err, err
    assert _listing(tmp_path) == []


# --- 3. the Slurm script quotes and escapes its paths --------------------------------------


def _sbatch_words(line: str) -> list[str]:
    """The words sbatch reads from an #SBATCH line (Slurm's src/sbatch/opt.c, `_get_argument`:
    a backslash escapes the next character, quotes group, an unquoted # ends the options)."""
    words, word, quote, escape, i = [], None, None, False, 0
    text = line.removeprefix("#SBATCH")
    while i < len(text):
        c = text[i]
        i += 1
        if escape:
            word, escape = (word or "") + c, False
        elif c == "\\":
            escape, word = True, word or ""
        elif quote:
            word = word + c if c != quote else word
            quote = None if c == quote else quote
        elif c in "\"'":
            quote, word = c, word or ""
        elif c == "#":
            break
        elif c.isspace():
            if word is not None:
                words.append(word)
            word = None
        else:
            word = (word or "") + c
    assert quote is None, f"unmatched quote in {line!r}"
    return words + ([word] if word is not None else [])


def test_slurm_script_paths_survive_sbatchs_reading(tmp_path, monkeypatch, capsys):
    import shlex

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs #2 \"a\" 'b' 50%u\\x"
    argv = ["sweep", "--regimes", "constrained", "--seeds", "2", "--out", str(out)]
    argv += ["--plan", "p 1%.jsonl", "--slurm", "s.sbatch", "--job-name", "ep%x"]
    argv += ["--slurm-partition", "gpu#1"]
    assert main(argv) == 0, capsys.readouterr().err
    script = (tmp_path / "s.sbatch").read_text().splitlines()
    options = dict(
        w.removeprefix("--").split("=", 1)
        for line in script
        if line.startswith("#SBATCH")
        for w in _sbatch_words(line)
    )
    # the file-name pattern: every % of the path doubled, only Slurm's own %A and %a left
    assert options["output"] == str(out).replace("%", "%%") + "/ep%%x-%A_%a.out"
    assert options["job-name"] == "ep%x" and options["partition"] == "gpu#1"
    body = shlex.split(next(line for line in script if line.startswith("exec ")))
    assert body[body.index("--run") + 1] == str(tmp_path / "p 1%.jsonl")


def test_a_line_break_cannot_enter_an_sbatch_line(tmp_path):
    from eagle_probe import plan
    from eagle_probe.errors import EagleProbeError

    with pytest.raises(EagleProbeError, match="line break"):
        plan.slurm_script(tmp_path / "p.jsonl", 2, python="python", logs=tmp_path / "a\nb")


# --- 4. numeric options bounded by the dtype they feed and the work they ask for -------------


@pytest.mark.parametrize(
    "argv, option",
    [
        ([*TRAIN, "--noise", "1e39", "-o", "m.pt"], "--noise"),
        ([*TRAIN, "--clip=-4e38", "-o", "m.pt"], "--clip"),
        ([*TRAIN, "--weight-decay", "1e300", "-o", "m.pt"], "--weight-decay"),
        ([*TRAIN, "--steps", "10000000000", "-o", "m.pt"], "--steps"),
        ([*TRAIN, "--seeds", "257", "-o", "m.pt"], "--seeds"),
        (["sweep", "--gain-lr", "1e39", "--out", "s"], "--gain-lr"),
        (["sweep", "--steps", "2000000000", "--plan", "p.jsonl"], "--steps"),
        (["compare", "m.pt", "--out", "c", "--more-steps", "1001"], "--more-steps"),
    ],
)
def test_numeric_options_beyond_their_dtype_or_budget_are_one_line(
    argv, option, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    _one_line(capsys, main(argv), 2, f"argument {option}:")
    assert _listing(tmp_path) == ["m.pt"]


def test_a_refused_more_steps_names_what_it_would_cost(tmp_path, monkeypatch, capsys):
    from eagle_probe.compare import CompareConfig

    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, main(["compare", "m.pt", "--out", "c", "--more-steps", "5000"]), 2)
    assert "5,000" in err and "minutes per layer" in err
    with pytest.raises(ValueError, match="more_steps must be at most 1000"):
        CompareConfig(more_steps=1001)
    assert CompareConfig(more_steps=1000).more_steps == 1000


# --- 10. numbers beyond float range never reach the training loop ---------------------------


def test_training_refuses_a_rate_beyond_the_models_dtype_before_any_step():
    from eagle_probe.train import check_in_dtype

    reached = []
    cfg = TrainConfig(steps=4, batch=8, eval_every=2, eval_batch=16, gain_lr=1e39)
    with pytest.raises(ValueError, match="gain_lr .* beyond the range of float32"):
        train(SMALL, SMALL_TASK, cfg, progress=False, save_every=1, on_save=reached.append)
    assert reached == []
    noisy = TaskConfig(n=5, d=4, rank=2, noise=1e39)
    with pytest.raises(ValueError, match="noise"):
        check_in_dtype(TrainConfig(), noisy, torch.float32)
    check_in_dtype(cfg, SMALL_TASK, torch.float64)  # 1e39 is a float64


def test_a_resumed_record_with_a_rate_beyond_float32_is_refused(tmp_path, capsys):
    record = {"train_config": TrainConfig(steps=10, lr=1e300).to_dict(), "steps_done": 4}
    path = tmp_path / "m.pt"
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK, record)
    before = path.read_bytes()
    code = main(["train", "--regime", "centralized", "--resume", "--no-progress", "-o", str(path)])
    _one_line(capsys, code, 2, "lr", "float32")
    assert path.read_bytes() == before and _listing(tmp_path) == ["m.pt"]


# --- 5. every importer refuses size flags the weights contradict ----------------------------


def _state_arrays(cfg: ModelConfig) -> dict:
    state = LinearTransformer(cfg, generator=make_generator(0)).state_dict()
    return {k: v.to(torch.float64).numpy() for k, v in state.items()}


@pytest.mark.parametrize(
    "layout, weights, flags, words",
    [
        ("ahn", "ahn.npz", ["--d-prime", "2"], ["--d-prime 2", "gives 1"]),
        ("ahn", "ahn.npz", ["--heads", "3"], ["--heads 3", "gives 2"]),
        ("eagle-probe", "feature.npz", ["--d", "3", "--d-prime", "2"], ["--d 3", "gives 4"]),
        ("eagle-probe", "feature.npz", ["--d-prime", "1"], ["--d-prime 1", "gives 2"]),
        ("eagle-probe", "feature.npz", ["--heads", "2"], ["--heads 2", "gives 1"]),
    ],
)
def test_size_flags_that_contradict_the_weights_are_refused(
    layout, weights, flags, words, tmp_path, monkeypatch, capsys
):
    import numpy as np

    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "ahn.npz", allparam=np.zeros((1, 2, 2, 6, 6)))  # d = 5, 2 heads
    np.savez(tmp_path / "feature.npz", **_state_arrays(SMALL))  # d = 4, d' = 2, 1 head
    before = _listing(tmp_path)
    argv = ["import", weights, "--layout", layout, "--n", "5", "--n-prime", "2", *flags]
    argv += ["-o", "imp.pt"]
    _one_line(capsys, main(argv), 2, *words)
    assert _listing(tmp_path) == before


def test_size_flags_that_agree_with_the_weights_are_accepted():
    import numpy as np

    from eagle_probe.layouts import import_arrays

    allparam = {"allparam": np.zeros((1, 2, 2, 6, 6))}
    model, _ = import_arrays("ahn", allparam, n=5, d=5, d_prime=1, heads=2)
    assert (model.cfg.d, model.cfg.d_prime, model.cfg.n_heads) == (5, 1, 2)
    model, _ = import_arrays("eagle-probe", _state_arrays(SMALL), n=5, n_prime=2, d=4, d_prime=2)
    assert (model.cfg.d, model.cfg.d_prime) == (4, 2)


# --- 6. metadata read back from a checkpoint is checked by one schema -----------------------


@pytest.mark.parametrize(
    "metrics, entry",
    [
        ({"spikes": [{"step": 2**70}]}, "spikes[0].step"),
        ({"spikes": [{"step": 3, "loss": "high"}]}, "spikes[0].loss"),
        ({"spikes": [{"loss": 1.0}]}, "spikes[0]"),
        ({"spikes": {"step": 3}}, "spikes"),
        ({"history": [{"step": True}]}, "history[0].step"),
        ({"history": [{"step": 4, "val_mse": -1.0}]}, "history[0].val_mse"),
        ({"step": -1}, "step"),
        ({"train_loss": float("inf")}, "train_loss"),
        ({"steps_done": 4.0}, "steps_done"),
        ({"interrupted": "no"}, "interrupted"),
        ({"stopped": "bored"}, "stopped"),
        ({"test": {"mse": "0.1"}}, "test.mse"),
        ({"wall_seconds": "x" * 500}, "wall_seconds"),
        ({"train_config": [1]}, "train_config"),
    ],
)
def test_metrics_that_break_the_schema_are_one_line_naming_the_entry(metrics, entry, tmp_path):
    from eagle_probe.errors import CheckpointError

    path = tmp_path / "m.pt"
    checkpoint.save(
        path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK, metrics
    )
    with pytest.raises(CheckpointError, match="invalid metrics") as caught:
        checkpoint.load(path)
    message = str(caught.value)
    assert f": {entry} is " in message and len(message) < 300 and "\n" not in message


def test_metrics_of_a_real_run_and_of_other_tools_pass_the_schema(tmp_path):
    cfg = TrainConfig(steps=4, batch=8, eval_every=2, eval_batch=16)
    model, metrics = train(SMALL, SMALL_TASK, cfg, progress=False)
    notes = {"note": "x", "values": [1.0, 2.0], "planted": {"a_steps": [0.1]}}
    checkpoint.save(tmp_path / "m.pt", model, SMALL_TASK, checkpoint.jsonable(metrics) | notes)
    assert checkpoint.load(tmp_path / "m.pt")[2]["stopped"] == "finished"


def _bad_run(root: Path) -> None:
    """A run directory whose second checkpoint records a train loss that is not a number."""
    (root / "run").mkdir()
    model = LinearTransformer(SMALL, generator=make_generator(0))
    checkpoint.save(root / "run" / "step_00000000.pt", model, SMALL_TASK, {"step": 0})
    bad = {"step": 5, "train_loss": "0.3", "spikes": []}
    checkpoint.save(root / "run" / "step_00000005.pt", model, SMALL_TASK, bad)


def test_commands_reading_bad_metrics_say_so_in_one_line_and_write_nothing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    _bad_run(tmp_path)
    before = _listing(tmp_path)
    _one_line(capsys, main(["timeline", "run", "--out", "t"]), 2, "train_loss", "step_00000005")
    assert _listing(tmp_path) == before
    # the checkpoint a plan's run left, read back by sweep --collect
    plan = ["sweep", "--regimes", "centralized", "--seeds", "1", "--out", "o", "--plan", "p.jsonl"]
    assert main(plan) == 0
    (tmp_path / "o").mkdir()
    record = {"train_config": {"steps": 4}, "steps_done": -4, "test": {"mse": 0.1}}
    model = LinearTransformer(SMALL, generator=make_generator(0))
    checkpoint.save(tmp_path / "o" / "centralized_seed0.pt", model, SMALL_TASK, record)
    (tmp_path / "o" / "centralized_seed0.json").write_text("{}")
    before = _listing(tmp_path)
    capsys.readouterr()
    _one_line(capsys, main(["sweep", "--collect", "p.jsonl", "--out", "o"]), 2, "steps_done")
    assert _listing(tmp_path) == before


# --- 7. a view that did not run reads "skipped", never "nan" --------------------------------


@pytest.mark.slow
def test_a_skipped_control_reads_skipped_in_the_summary_and_the_report(
    tmp_path, monkeypatch, capsys
):
    import json
    import re

    monkeypatch.chdir(tmp_path)
    plant = ["plant", "--n", "5", "--d", "4", "--a-steps", "0.1,0.05", "--c-steps", "0.2,0.1"]
    assert main([*plant, "--dtype", "float64", "-o", "p.pt"]) == 0
    capsys.readouterr()
    assert main(["extract", "p.pt", "--out", "x", "--no-control", "--no-progress"]) == 0
    summary = " ".join(capsys.readouterr().out.split())  # the summary's lines joined
    report = re.sub(r"\s+", " ", (tmp_path / "x" / "report.html").read_text())
    for text in (summary, report):
        assert "untrained control skipped" in text
        assert not re.search(r"\bnan\b", text, re.I)
    verdict = json.loads((tmp_path / "x" / "extraction.json").read_text())["views"]["verdict"]
    assert all(lay["control_relative"] is None for lay in verdict["layers"])


# --- 8. environment variables are named in their errors -----------------------------------


@pytest.mark.parametrize(
    "env, name",
    [
        ({"WORLD_SIZE": "2", "RANK": "two"}, "RANK"),
        ({"WORLD_SIZE": "3", "RANK": "3"}, "RANK"),
        ({"WORLD_SIZE": "-1"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "http"}, "MASTER_PORT"),
    ],
)
@pytest.mark.parametrize("seeds", ["1", "2"])
def test_a_malformed_torchrun_variable_is_named(env, name, seeds, tmp_path, monkeypatch, capsys):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = [*TRAIN, "--steps", "2", "--seeds", seeds, "-o", str(tmp_path / "m.pt")]
    _one_line(capsys, main(argv), 2, f"environment variable {name}=")
    assert _listing(tmp_path) == []


def test_one_process_reads_no_rank(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "7")  # not torchrun's: one process does not read it
    argv = [*TRAIN, "--steps", "2", "--eval-every", "2", "-o", str(tmp_path / "m.pt")]
    assert main(argv) == 0, capsys.readouterr().err
    assert _listing(tmp_path) == ["m.json", "m.pt"]


# --- 9. matplotlib's notices about an unusable MPLCONFIGDIR become one warning of ours -------

IMPORT_PLOTS = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import eagle_probe.plots
for w in caught:
    print(w.category.__name__, w.message)
"""


@pytest.mark.slow  # an unusable directory makes matplotlib build its font cache afresh
@pytest.mark.parametrize("usable", [False, True])
def test_an_unusable_mplconfigdir_is_one_warning_and_no_chatter(usable, tmp_path):
    import matplotlib

    (tmp_path / "a_file").write_text("not a directory")
    # a directory under a regular file cannot be made; this process's own one is usable
    config = matplotlib.get_configdir() if usable else str(tmp_path / "a_file" / "config")
    env = os.environ | {"MPLCONFIGDIR": config, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PLOTS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    mine = [line for line in done.stdout.splitlines() if "MPLCONFIGDIR" in line]
    assert len(mine) == (0 if usable else 1), done.stdout
    if not usable:
        assert config in mine[0] and "writable directory" in mine[0]
