"""Hostile inputs, part two: file names, outputs, budgets, solvers at the edges of float64.

Every case: exit code 2 with one line naming the problem (or a correct result), no traceback, no
file left behind, no other file touched."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle_probe import checkpoint, files
from eagle_probe.cli import main
from eagle_probe.errors import CheckpointError
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator

SMALL = ModelConfig(n=6, d=5, n_layers=2)
SMALL_TASK = TaskConfig(n=6, d=5, rank=3)
TRAIN = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--task-rank", "3"]
TINY = [*TRAIN, "--layers", "1", "--steps", "4", "--batch", "16", "--eval-every", "2"]
TINY += ["--eval-batch", "32", "--no-progress"]


def _good(path: Path) -> Path:
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK)
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_line_error(capsys, code, *words):
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


# --- 1. code through file names ------------------------------------------------------------


@pytest.mark.slow
def test_a_checkpoint_name_holding_python_cannot_run_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = 'm\nimport os; os.system("touch PWNED")\n#.pt'
    _good(tmp_path / name)
    assert main(["extract", name, "--out", "out", "--no-control", "--probe-batch", "16"]) == 0
    source = (tmp_path / "out" / "solver.py").read_text()
    assert "\nimport os; os.system" not in source
    out = subprocess.run(
        [sys.executable, "-c", "import solver; print(repr(solver.PROVENANCE['checkpoint']))"],
        cwd=tmp_path / "out",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(name)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out" / "PWNED").exists()


# --- 2. outputs overwritten or replaced ------------------------------------------------------


def test_train_refuses_to_overwrite_the_metrics_beside_the_checkpoint(tmp_path, capsys):
    (tmp_path / "m.json").write_text("precious")
    code = main([*TINY, "-o", str(tmp_path / "m.pt")])
    _one_line_error(capsys, code, "m.json", "already exists")
    assert (tmp_path / "m.json").read_text() == "precious" and _listing(tmp_path) == ["m.json"]


def test_train_refuses_a_checkpoint_named_like_its_summary(tmp_path, capsys):
    code = main([*TINY, "-o", str(tmp_path / "run.json")])
    _one_line_error(capsys, code, "run.json", "summary")
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dangling_symlink", "directory"])
@pytest.mark.parametrize("command", ["train", "plant"])
def test_force_replaces_regular_files_only(kind, command, tmp_path, capsys):
    target = tmp_path / "o.pt"
    other = tmp_path / "other.pt"
    other.write_bytes(b"keep")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        target.symlink_to(other)
    elif kind == "dangling_symlink":
        target.symlink_to(tmp_path / "nowhere.pt")
    else:
        target.mkdir()
    before = _listing(tmp_path)
    argv = (
        [*TINY, "--force", "-o", str(target)]
        if command == "train"
        else ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--force", "-o", str(target)]
    )
    _one_line_error(capsys, main(argv), str(target))
    assert _listing(tmp_path) == before and other.read_bytes() == b"keep"
    mode = os.lstat(target).st_mode
    assert {
        "fifo": stat.S_ISFIFO,
        "symlink": stat.S_ISLNK,
        "dangling_symlink": stat.S_ISLNK,
        "directory": stat.S_ISDIR,
    }[kind](mode)


def test_force_on_a_character_device_is_refused_before_any_work(capsys):
    # /dev/null is a character device: refused by the check, nothing is opened for writing
    code = main(["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--force", "-o", "/dev/null"])
    _one_line_error(capsys, code, "character device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not os.path.exists("/dev/null.json")


def test_force_replaces_a_regular_file(tmp_path):
    target = tmp_path / "o.pt"
    target.write_bytes(b"old")
    assert (
        main(["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--force", "-o", str(target)]) == 0
    )
    assert checkpoint.load(target)[0].cfg.n_layers == 1
    assert _listing(tmp_path) == ["o.pt"]


# --- 3. two runs, one output ------------------------------------------------------------------


def test_a_file_that_appears_during_the_run_is_not_overwritten(tmp_path):
    target = tmp_path / "m.pt"
    with pytest.raises(files.OutputError, match="appeared"):
        with files.output_files([target]) as claim:
            target.write_bytes(b"the other run")
            claim.write(target, lambda f: f.write(b"mine"))
    assert target.read_bytes() == b"the other run" and _listing(tmp_path) == ["m.pt"]


def test_a_directory_filled_during_the_run_is_not_overwritten(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(files.OutputError, match="another run"):
        with files.output_dir(target) as tmp:
            (tmp / "extraction.json").write_text("mine")
            target.mkdir()
            (target / "extraction.json").write_text("theirs")
    assert (target / "extraction.json").read_text() == "theirs"
    assert _listing(tmp_path) == ["out", "out/extraction.json"]


def test_a_replaced_checkpoint_is_not_overwritten_by_the_next_validation(tmp_path):
    target = tmp_path / "m.pt"
    with pytest.raises(files.OutputError, match="replaced by someone else"):
        with files.output_files([target]) as claim:
            claim.write(target, lambda f: f.write(b"first"))
            target.unlink()
            target.write_bytes(b"theirs")
            claim.write(target, lambda f: f.write(b"second"))
    assert target.read_bytes() == b"theirs"


def test_runs_racing_for_one_output_one_wins_the_others_say_so(tmp_path, monkeypatch):
    """Four `plant` runs at once (threads released together after their checks): exactly one
    publishes, the others exit 2 without touching its file."""
    import threading

    import eagle_probe.checkpoint as ckpt

    out = tmp_path / "same.pt"
    barrier = threading.Barrier(4)
    real_dump = ckpt.dump

    def dump(*args, **kwargs):  # every run has passed its checks before anyone writes
        barrier.wait(timeout=60)
        return real_dump(*args, **kwargs)

    monkeypatch.setattr(ckpt, "dump", dump)
    codes = []
    argv = ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "-o", str(out)]
    threads = [threading.Thread(target=lambda: codes.append(main(argv))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(codes) == [0, 2, 2, 2]
    assert _listing(tmp_path) == ["same.pt"]
    checkpoint.load(out)


# --- 4. partial results -------------------------------------------------------------------------


def test_an_interrupted_command_leaves_no_output_and_no_debris(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with files.output_dir(target) as tmp:
            (tmp / "extraction.json").write_text("{}")
            raise KeyboardInterrupt
    assert _listing(tmp_path) == []


def test_a_staging_directory_being_created_is_not_taken_for_debris(tmp_path):
    """A run creates its staging directory under a NEW name and locks it before it takes its
    PARTIAL name; another run's sweep in between must leave it alone (it once removed it, and the
    run failed). One under the NEW name for over an hour is a killed run's debris."""
    fresh = tmp_path / f".out{files.NEW}abc"
    fresh.mkdir()
    old = tmp_path / f".out{files.NEW}old"
    old.mkdir()
    hours_ago = time.time() - 2 * files.NEW_DEBRIS_AGE
    os.utime(old, (hours_ago, hours_ago))
    with files.output_dir(tmp_path / "out") as tmp:
        (tmp / "extraction.json").write_text("{}")
        assert tmp.name.startswith(f".out{files.PARTIAL}")
    assert fresh.is_dir() and not old.exists()
    assert (tmp_path / "out" / "extraction.json").is_file()


def test_debris_of_a_killed_run_is_cleared_and_does_not_block_a_rerun(tmp_path):
    # a staging directory whose owner died: its lock is free
    debris = tmp_path / f".out{files.PARTIAL}dead"
    debris.mkdir()
    (debris / "extraction.json").write_text("half")
    with files.output_dir(tmp_path / "out") as tmp:
        (tmp / "extraction.json").write_text("{}")
    assert _listing(tmp_path) == ["out", "out/extraction.json"]


def test_a_live_runs_staging_directory_is_left_alone(tmp_path):
    with pytest.raises(files.OutputError, match="another run"):
        with files.output_dir(tmp_path / "out") as first:
            (first / "y").write_text("first")
            with files.output_dir(tmp_path / "out") as second:  # must not sweep `first`
                (second / "x").write_text("second")
            assert (first / "y").exists()
    assert _listing(tmp_path) == ["out", "out/x"]


def test_a_full_disk_is_one_line_exit_2_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import eagle_probe.checkpoint as ckpt

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "dump", full)
    code = main(["plant", "--a-steps", "0.1", "--c-steps", "0.1", "-o", str(tmp_path / "p.pt")])
    _one_line_error(capsys, code, "No space left on device")
    assert _listing(tmp_path) == []


@pytest.mark.slow
def test_extract_failing_after_its_first_file_leaves_no_output(tmp_path, capsys, monkeypatch):
    import eagle_probe.export as export

    def boom(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    _good(tmp_path / "m.pt")
    monkeypatch.setattr(export, "write_solver", boom)
    monkeypatch.chdir(tmp_path)
    code = main(["extract", "m.pt", "--out", "out", "--no-control", "--probe-batch", "16"])
    assert code == 2
    assert _listing(tmp_path) == ["m.pt"]


# --- 5. resource bombs ---------------------------------------------------------------------


def _config_bomb(tmp_path: Path, **fields) -> Path:
    path = _good(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    payload["model_config"].update(fields)
    payload["task_config"].update({k: v for k, v in fields.items() if k in ("n", "d")})
    torch.save(payload, path)
    assert path.stat().st_size < 10_000
    return path


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"n": 20000, "d": 20000}, ["memory"]),
        ({"n": 2000, "d": 2000}, ["has shape (1, 8, 8), config expects (1, 2002, 2002)"]),
        ({"n_layers": 100000}, ["100000 layers"]),
        ({"n": 10**12, "d": 10**12}, ["memory"]),
    ],
)
@pytest.mark.parametrize("command", ["evaluate", "extract"])
def test_small_checkpoints_declaring_huge_models(fields, words, command, tmp_path, capsys):
    path = _config_bomb(tmp_path, **fields)
    _one_line_error(capsys, main([command, str(path)]), *words)


def _mutated(tmp_path, mutate):
    path = _good(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    mutate(payload)
    torch.save(payload, path)
    return path


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda p: p["metrics"].update(big=torch.zeros(10)), ["tensor", "metrics.big"]),
        (lambda p: p["model_config"].update(n=torch.tensor(6)), ["tensor"]),
        (lambda p: p.update(extra=torch.zeros(3)), ["does not name", "extra"]),
        (lambda p: p.update(format_version=True), ["format version True"]),
        (lambda p: p.update(format_version=1.0), ["format version 1.0"]),
        (lambda p: p.update(metrics=[1, 2]), ["metrics"]),
        (
            lambda p: p["state_dict"].update(
                {
                    "blocks.0.attn.W_Q": torch.zeros(1).expand(
                        *p["state_dict"]["blocks.0.attn.W_Q"].shape
                    )
                }
            ),
            ["not stored densely"],
        ),
        (
            lambda p: p["state_dict"].update(
                {"blocks.0.attn.W_Q": p["state_dict"]["blocks.0.attn.W_Q"].to_sparse()}
            ),
            ["sparse"],
        ),
        (
            lambda p: p["state_dict"]["blocks.0.attn.mask"].fill_(1.0),
            ["buffer blocks.0.attn.mask", "fixed"],
        ),
        (lambda p: p["state_dict"]["blocks.1.attn.qk_mask"].fill_(0.0), ["qk_mask"]),
        (lambda p: p["state_dict"]["readout_scale"].fill_(3.0), ["readout_scale"]),
        (lambda p: p["metrics"].update(x=Path("x")), ["refused"]),
    ],
    ids=[
        "tensor_in_metrics",
        "tensor_in_config",
        "unnamed_entry",
        "version_true",
        "version_float",
        "metrics_not_dict",
        "stride_zero_view",
        "sparse_weight",
        "mask_overwritten",
        "qk_mask_overwritten",
        "fixed_readout_overwritten",
        "foreign_object",
    ],
)
def test_checkpoints_holding_what_the_format_does_not_name(mutate, words, tmp_path, capsys):
    try:
        path = _mutated(tmp_path, mutate)
    except Exception:  # noqa: BLE001 - torch itself refuses to save this object
        pytest.skip("torch cannot save this payload")
    _one_line_error(capsys, main(["evaluate", str(path)]), *words)


def test_weights_sharing_one_storage_are_refused(tmp_path):
    path = _good(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    state = payload["state_dict"]
    one = torch.zeros(max(v.numel() for v in state.values()))
    for key, value in state.items():  # every weight a view of the same small storage
        state[key] = one[: value.numel()].view(value.shape).to(value.dtype)
    payload["state_dict"] = {k: v if v.dtype == one.dtype else v for k, v in state.items()}
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="share storage"):
        checkpoint.load(path)


def test_compressed_archive_entries_are_refused(tmp_path, capsys):
    good = _good(tmp_path / "good.pt")
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    _one_line_error(capsys, main(["evaluate", str(bad)]), "compressed")


@pytest.mark.parametrize(
    "argv, words",
    [
        ([*TRAIN, "--batch", "3000000", "-o", "o.pt"], ["--batch", "--max-memory"]),
        ([*TRAIN, "--eval-batch", "300000000", "-o", "o.pt"], ["--eval-batch"]),
        (["extract", "m.pt", "--probe-batch", "1000000000"], ["--probe-batch"]),
        (["evaluate", "m.pt", "--batch", "1000000000"], ["--batch"]),
        (["sweep", "--seeds", "1000000000", "--out", "s"], ["more than"]),
        (["sweep", "--seeds", "1e9", "--out", "s"], ["--seeds"]),
        (
            ["plant", "--n", "30000", "--a-steps", "0.1", "--c-steps", "0.1", "-o", "p.pt"],
            ["memory"],
        ),
        (
            ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--max-memory", "1e-6", "-o", "p.pt"],
            ["budget"],
        ),
        ([*TRAIN, "--layers", "5000", "-o", "o.pt"], ["layers"]),
        (["evaluate", "m.pt", "--max-memory", "0"], ["positive"]),
        (["evaluate", "m.pt", "--max-memory", "1e-7"], ["budget"]),
    ],
)
def test_huge_sizes_are_refused_before_allocating(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    before = _listing(tmp_path)
    _one_line_error(capsys, main(argv), *words)
    assert _listing(tmp_path) == before


def test_memory_error_anywhere_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import eagle_probe.cli as cli

    def oom(args):
        raise MemoryError

    monkeypatch.setattr(cli, "cmd_evaluate", oom)
    _one_line_error(capsys, main(["evaluate", str(_good(tmp_path / "m.pt"))]), "out of memory")


def _loader_rss(path: Path) -> int:
    code = (
        "import resource, sys\n"
        "from eagle_probe import checkpoint\n"
        "try:\n    checkpoint.load(sys.argv[1])\n"
        "except Exception as e:\n    print(type(e).__name__)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    return int(out.stdout.strip().splitlines()[-1]) * 1024


@pytest.mark.slow
def test_loading_a_10kb_hostile_checkpoint_stays_under_1gb(tmp_path):
    path = _config_bomb(tmp_path, n=20000, d=20000)
    assert _loader_rss(path) < 2**30


# --- 6. non-finite training --------------------------------------------------------------------


def test_an_initialisation_that_overflows_is_refused(tmp_path, capsys):
    code = main([*TINY, "--init-std", "1e300", "-o", str(tmp_path / "m.pt")])
    _one_line_error(capsys, code, "--init-std")
    assert _listing(tmp_path) == []


@pytest.mark.slow
def test_diverged_training_writes_nothing(tmp_path, capsys):
    code = main(
        [*TINY, "--init-std", "10", "--lr", "1e30", "--clip", "1e30", "-o", str(tmp_path / "m.pt")]
    )
    if code == 0:  # it happened to stay finite: then the checkpoint must load and evaluate
        model, task, metrics = checkpoint.load(tmp_path / "m.pt")
        assert np.isfinite(metrics["test"]["mse"])
        return
    _one_line_error(capsys, code, "diverged")
    assert _listing(tmp_path) == []


def test_a_run_whose_kept_weights_fail_the_test_says_what_it_left(tmp_path, capsys, monkeypatch):
    """A validation published m.pt; the test prompts then give a non-finite MSE: the line names
    the checkpoint on disk instead of saying that nothing was written."""
    import eagle_probe.evaluate as evaluate_module

    real = evaluate_module.evaluate

    def failing(model, task, **kwargs):
        return real(model, task, **kwargs) | {"mse": float("nan")}

    monkeypatch.setattr(evaluate_module, "evaluate", failing)
    code = main([*TINY, "-o", str(tmp_path / "m.pt")])
    _one_line_error(capsys, code, "diverged", "m.pt holds the weights of its best validation")
    assert _listing(tmp_path) == ["m.pt"]  # no summary beside it


# --- 8. bench refuses bad data ------------------------------------------------------------------

MTX = {
    "nan": (
        "%%MatrixMarket matrix array real general\n3 3\n" + "1\n" * 4 + "nan\n" + "1\n" * 4,
        "NaN",
    ),
    "complex": (
        "%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 1 1.0 2.0\n",
        "complex",
    ),
    "huge": ("%%MatrixMarket matrix coordinate real general\n30000 30000 1\n1 1 1.0\n", "memory"),
    "garbage": ("hello\n", "not a readable"),
    "inf": ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 inf\n", "NaN or Inf"),
}


@pytest.mark.parametrize("case", sorted(MTX))
def test_bench_checks_every_matrix_before_solving(case, tmp_path, monkeypatch, capsys):
    text, word = MTX[case]
    data = tmp_path / "mtx"
    data.mkdir()
    (data / f"{case}.mtx").write_text(text)
    monkeypatch.setenv("EAGLE_PROBE_SUITESPARSE", str(data))
    monkeypatch.chdir(tmp_path)
    code = main(["bench", "--suite", "real", "--out", "b"])
    err = _one_line_error(capsys, code, word)
    assert f"{case}.mtx" in err
    assert _listing(tmp_path) == ["mtx", f"mtx/{case}.mtx"]


# --- 9. smaller ones -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["extract", "m.pt", "--out", ""],
        ["bench", "--out", ""],
        ["sweep", "--out", ""],
        [*TINY, "-o", ""],
        ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "-o", ""],
    ],
    ids=["extract", "bench", "sweep", "train", "plant"],
)
def test_empty_output_paths(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    _one_line_error(capsys, main(argv), "empty")
    assert _listing(tmp_path) == ["m.pt"]


@pytest.mark.parametrize(
    "out, words",
    [
        ("dangling", ["symbolic link"]),
        ("/proc/eagle-probe-x", ["cannot write"]),
        ("ro/x", ["cannot write"]),
        ("m.pt/x", ["under a file"]),
    ],
)
def test_bad_output_paths_fail_before_the_work(out, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(
        "eagle_probe.extract.extract", lambda *a, **k: pytest.fail("worked before checking")
    )
    if out.startswith("ro/"):
        if os.geteuid() == 0:  # root writes into read-only directories: use a read-only mount
            out = "/proc/sys/eagle-probe-x"
        else:
            os.chmod(tmp_path / "ro", 0o500)
    before = _listing(tmp_path)
    _one_line_error(capsys, main(["extract", "m.pt", "--out", out]), *words)
    assert _listing(tmp_path) == before


def test_summary_path_existing_as_a_directory_fails_before_training(tmp_path, capsys):
    (tmp_path / "x.json").mkdir()
    code = main([*TINY, "-o", str(tmp_path / "x.pt")])
    _one_line_error(capsys, code, "x.json", "directory")
    assert _listing(tmp_path) == ["x.json"]


@pytest.mark.parametrize(
    "record",
    [
        {"train_config": "steps=10"},
        {"train_config": {"steps": "many"}},
        {"train_config": {"bogus": 1}},
        {"train_config": {"steps": 10}, "history": "none"},
        {"train_config": {"steps": 10}, "history": [1, 2]},
        {"train_config": {"steps": 10}, "steps_done": -4},
        {"train_config": {"steps": 10}, "best_val_mse": "low"},
    ],
)
def test_bad_training_records_under_resume(record, tmp_path, capsys):
    path = tmp_path / "m.pt"
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK, record)
    before = path.read_bytes()
    code = main(["train", "--regime", "centralized", "--resume", "-o", str(path)])
    _one_line_error(capsys, code)
    assert path.read_bytes() == before and _listing(tmp_path) == ["m.pt"]


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "m.pt", "--nonsense", "--debug"],
        ["evaluate", "--debug"],
        ["--debug", "frobnicate"],
        ["train", "--debug", "--regime"],
    ],
)
def test_usage_errors_never_print_a_traceback(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    _one_line_error(capsys, main(argv), "--help")


def test_debug_after_the_subcommand_shows_tracebacks_of_real_errors(tmp_path, monkeypatch):
    import eagle_probe.cli as cli

    def boom(args):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cli, "cmd_evaluate", boom)
    with pytest.raises(RuntimeError, match="kaboom"):
        main(["evaluate", str(_good(tmp_path / "m.pt")), "--debug"])


def test_an_unreadable_checkpoint_says_so(tmp_path, capsys, monkeypatch):
    path = _good(tmp_path / "m.pt")

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(checkpoint, "open", denied, raising=False)
    err = _one_line_error(capsys, main(["evaluate", str(path)]), "Permission denied")
    assert "corrupt" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_a_mode_000_checkpoint_says_permission_denied(tmp_path, capsys):
    path = _good(tmp_path / "m.pt")
    path.chmod(0)
    _one_line_error(capsys, main(["evaluate", str(path)]), "Permission denied")


@pytest.mark.parametrize("flag", ["--seed"])
@pytest.mark.parametrize("command", ["train", "evaluate", "extract", "bench"])
def test_seeds_too_large_name_the_flag(flag, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _good(tmp_path / "m.pt")
    argv = {
        "train": [*TINY, "-o", "o.pt"],
        "evaluate": ["evaluate", "m.pt"],
        "extract": ["extract", "m.pt"],
        "bench": ["bench"],
    }[command]
    _one_line_error(capsys, main([*argv, flag, "9223372036854775807"]), flag, "2**32")


def test_train_without_steps_uses_the_documented_default(monkeypatch, tmp_path):
    import eagle_probe.cli as cli
    import eagle_probe.cli.train as cli_train

    seen = {}

    def fake(args, out, paths, model_cfg, task, train_cfg, resume, claim):
        seen["steps"] = train_cfg.steps
        return 0

    monkeypatch.setattr(cli_train, "_run_training", fake)
    assert main([*TRAIN, "-o", str(tmp_path / "m.pt")]) == 0
    assert seen["steps"] == 20000
    assert (
        "20000" in cli.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    )


@pytest.mark.parametrize(
    "content, words",
    [
        (json.dumps({"mse": 1.0}).encode(), ["JSON file, not a checkpoint"]),
        (b"  [1, 2, 3]", ["JSON file"]),
        (b"\x80\x04K\x01.", ["pickle"]),
    ],
    ids=["json_object", "json_list", "bare_pickle"],
)
@pytest.mark.parametrize("command", ["evaluate", "extract"])
def test_files_that_are_not_checkpoints_are_named_plainly(
    content, words, command, tmp_path, capsys
):
    path = tmp_path / "metrics.json"
    path.write_bytes(content)
    err = _one_line_error(capsys, main([command, str(path)]), *words)
    assert err.rstrip().endswith((")", "checkpoint", "archive)"))


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_special_files_as_checkpoints(special, tmp_path, capsys):
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "fifo.pt"
        os.mkfifo(path)
    _one_line_error(capsys, main(["evaluate", str(path)]), "not a regular file")


def test_expected_shapes_match_the_built_model():
    for cfg in (
        SMALL,
        ModelConfig(regime="distributed", n=6, d=4, machines=3, n_layers=2),
        ModelConfig(regime="constrained", n=8, d=4, rank=3, readout="learned", n_layers=3),
        ModelConfig(n=5, d=4, token_mask="sparse", dtype="float64", n_heads=2),
    ):
        built = {k: tuple(v.shape) for k, v in LinearTransformer(cfg).state_dict().items()}
        assert checkpoint.expected_shapes(cfg) == built


# --- 7. the exported solvers at extreme scales (the faithful constrained/distributed path) -----


@pytest.mark.parametrize("regime", ["distributed", "constrained"])
@pytest.mark.parametrize("normalize", ["spectral", "frobenius"])
@pytest.mark.parametrize("scale", [1e-154, 1e154, 1e300])
def test_exported_faithful_solvers_at_extreme_scales(regime, normalize, scale):
    from eagle_probe.export import solver_source

    data = {
        "model": {
            "regime": regime,
            "n": 4,
            "d": 4,
            "n_prime": 1,
            "d_prime": 1,
            "normalize": normalize,
            "machines": 2,
        },
        "layers": [{"a_step": 0.2, "c_step": 0.3, "eta": 0.2, "gamma": 0.3, "fidelity": 0.0}] * 2,
    }
    projectors = [np.eye(4).tolist()] * 2 if regime == "constrained" else None
    ns: dict = {}
    exec(compile(solver_source(data, projectors), "solver", "exec"), ns)
    rng = np.random.default_rng(0)
    A, B, C = rng.standard_normal((4, 4)), rng.standard_normal((1, 4)), rng.standard_normal((4, 1))
    D1, info1, _ = ns["complete"](A, B, C, mode="faithful", return_info=True)
    D2, info2, _ = ns["complete"](
        A * scale, B * scale, C * scale, mode="faithful", return_info=True
    )
    # The faithful mode runs its two layers as they are: info is that depth (no certificate).
    assert info1 == 2 and info2 == 2
    np.testing.assert_allclose(D2 / scale, D1, rtol=1e-9)


def test_force_writes_into_an_existing_directory_replacing_regular_files_only(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "extraction.json").write_text("old")
    with files.output_dir(out, force=True) as tmp:
        (tmp / "extraction.json").write_text("new")
        (tmp / "solver.py").write_text("x = 1\n")
    assert (out / "extraction.json").read_text() == "new"
    assert (out / "notes.txt").read_text() == "mine" and (out / "solver.py").exists()
    (out / "solver.py").unlink()
    (out / "solver.py").mkdir()  # a directory where a file is to go: refused, nothing moved
    with pytest.raises(files.OutputError, match="not replaced by a file"):
        with files.output_dir(out, force=True) as tmp:
            (tmp / "extraction.json").write_text("newer")
            (tmp / "solver.py").write_text("x = 2\n")
    assert (out / "extraction.json").read_text() == "new"
    assert _listing(tmp_path) == ["out", "out/extraction.json", "out/notes.txt", "out/solver.py"]


def test_without_force_an_empty_directory_is_filled_and_a_full_one_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with files.output_dir(tmp_path / "empty") as tmp:
        (tmp / "a").write_text("a")
    assert (tmp_path / "empty" / "a").read_text() == "a"
    with pytest.raises(files.OutputError, match="pass --force"):
        files.check_dir(tmp_path / "empty")
