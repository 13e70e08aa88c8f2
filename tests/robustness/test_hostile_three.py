"""Hostile inputs, part three: budgets on every path, imports that refuse what the tool refuses,
special files, sweeps that clean up, and one-line errors.

Every refusal is an `EagleProbeError` (library) or one line on stderr with exit code 2 (CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle_probe import bench, checkpoint, layouts
from eagle_probe.budget import GIB
from eagle_probe.cli import main
from eagle_probe.errors import CheckpointError, EagleProbeError
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator

SMALL = ModelConfig(n=6, d=5, n_layers=2)
SMALL_TASK = TaskConfig(n=6, d=5, rank=3)


def _good(path: Path) -> Path:
    checkpoint.save(path, LinearTransformer(SMALL, generator=make_generator(0)), SMALL_TASK)
    return path


def _feature_arrays(cfg: ModelConfig = SMALL) -> dict[str, np.ndarray]:
    state = LinearTransformer(cfg, generator=make_generator(0)).state_dict()
    return {k: v.to(torch.float64).numpy() for k, v in state.items()}


# --- 1. memory budgets checked before allocating ---------------------------------------------


def test_an_expanded_tensor_is_held_to_the_budget_before_it_is_copied(tmp_path):
    # 4 bytes of storage declaring 2 × 8000 × 8000 entries (1.4 GiB as float32 and float64)
    torch.save(torch.zeros(1, 1, 1, 1, 1).expand(1, 1, 2, 8000, 8000), tmp_path / "w.pt")
    assert (tmp_path / "w.pt").stat().st_size < 10_000
    with pytest.raises(EagleProbeError, match="budget of 0.5 GiB.*--max-memory"):
        layouts.read_arrays(tmp_path / "w.pt", max_bytes=0.5 * GIB)


def test_a_compressed_npz_is_held_to_the_budget_it_declares(tmp_path):
    np.savez_compressed(tmp_path / "w.npz", allparam=np.zeros((1, 1, 2, 3000, 3000)))
    assert (tmp_path / "w.npz").stat().st_size < 300_000
    with pytest.raises(EagleProbeError, match="budget of 0.1 GiB"):
        layouts.read_arrays(tmp_path / "w.npz", max_bytes=0.1 * GIB)


def test_import_holds_the_model_a_large_n_declares_to_the_budget():
    allparam = np.zeros((1, 1, 2, 4, 4))
    with pytest.raises(EagleProbeError, match="budget"):  # the (n + n')² mask: 7.2 GB
        layouts.import_arrays("ahn", {"allparam": allparam}, n=30_000, max_bytes=GIB)
    with pytest.raises(EagleProbeError, match="budget"):
        layouts.import_arrays("ahn", {"allparam": allparam}, n=10**12)


@pytest.mark.parametrize("task", ["paper", "completion"])
def test_the_task_rank_is_bounded_by_n_and_d(task):
    with pytest.raises(ValueError, match=r"min\(n, d\) = 5"):
        TaskConfig(task=task, n=6, d=5, rank=6)
    assert TaskConfig(task=task, n=6, d=5, rank=5).rank == 5
    assert TaskConfig(task=task, n=6, d=5).rank == 5 and TaskConfig(task=task).rank == 10


def test_a_checkpoint_whose_task_rank_exceeds_n_is_refused_on_load(tmp_path):
    path = _good(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    payload["task_config"]["rank"] = 100_000
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="rank"):
        checkpoint.load(path)


def test_bench_holds_a_matrix_to_the_gram_matrices_its_solver_builds(tmp_path):
    path = tmp_path / "wide.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n1 5000 1\n1 1 1.0\n")
    assert path.stat().st_size < 100
    with pytest.raises(EagleProbeError, match="wide.mtx.*budget"):
        bench.read_matrix(path, max_bytes=0.05 * GIB)


# --- 4. bench refuses special files and a missing data directory ----------------------------


def test_bench_refuses_a_fifo_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "m.mtx")
    code = (
        "import sys\nfrom pathlib import Path\nfrom eagle_probe import bench\n"
        "try:\n    bench.read_matrix(Path(sys.argv[1]))\nexcept ValueError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.mtx")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "not a regular file" in out.stdout, out.stdout + out.stderr


def test_bench_refuses_a_link_to_a_device_before_reading(tmp_path):
    (tmp_path / "z.mtx").symlink_to("/dev/zero")
    with pytest.raises(EagleProbeError, match="z.mtx: not a regular file"):
        bench.read_matrix(tmp_path / "z.mtx")


def test_bench_reports_an_integer_entry_beyond_any_integer_type(tmp_path):
    path = tmp_path / "big.mtx"
    path.write_text(
        "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 99999999999999999999999\n"
    )
    with pytest.raises(EagleProbeError, match="big.mtx"):
        bench.read_matrix(path)


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_a_suitesparse_directory_that_holds_nothing_is_an_error(kind, tmp_path, monkeypatch):
    where = tmp_path / "data"
    if kind == "file":
        where.write_text("not a directory")
    elif kind == "empty":
        where.mkdir()
    monkeypatch.setenv("EAGLE_PROBE_SUITESPARSE", str(where))
    with pytest.raises(EagleProbeError, match="EAGLE_PROBE_SUITESPARSE"):
        bench.suitesparse_files()
    monkeypatch.delenv("EAGLE_PROBE_SUITESPARSE")
    assert len(bench.suitesparse_files()) == 8  # the shipped matrices


# --- 5. import refuses weights the tool would refuse ------------------------------------------


def test_import_refuses_float64_weights_beyond_float32():
    arrays = {"allparam": np.full((1, 1, 2, 4, 4), 1e308)}
    with pytest.raises(EagleProbeError, match="not finite in float32.*--dtype float64"):
        layouts.import_arrays("ahn", arrays, n=5)
    arrays = _feature_arrays()
    arrays["blocks.0.attn.W_Q"] = arrays["blocks.0.attn.W_Q"] * 1e45
    with pytest.raises(EagleProbeError, match="not finite in float32"):
        layouts.import_arrays("eagle-probe", arrays, n=6, n_prime=2)
    model, _ = layouts.import_arrays("eagle-probe", _feature_arrays(), n=6, n_prime=2)
    assert model.cfg.d == 5  # the stored mask still fixes d


@pytest.mark.parametrize(
    "mask",
    [np.array([["1"] * 7] * 7), np.array(1.0), np.ones((7, 6)), np.ones((7, 7), dtype=complex)],
    ids=["strings", "0-d", "not square", "complex"],
)
def test_import_refuses_a_mask_that_is_not_a_square_real_array(mask):
    arrays = _feature_arrays() | {"blocks.0.attn.mask": mask}
    with pytest.raises(EagleProbeError, match="blocks.0.attn.mask"):
        layouts.import_arrays("eagle-probe", arrays, n=6, n_prime=2)


def _tensors() -> dict[str, torch.Tensor]:
    shape = (1, 1, 2, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "sparse": torch.randn(3, 3).to_sparse(),
            "meta": torch.empty(shape, device="meta"),
            "conjugate": torch.randn(shape, dtype=torch.complex64).conj(),
            "nested": torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),
            "qint8": torch.quantize_per_tensor(torch.randn(shape), 0.1, 0, torch.qint8),
        }


@pytest.mark.parametrize("kind", sorted(_tensors()))
def test_import_refuses_tensors_without_plain_dense_real_data_quietly(kind, tmp_path):
    torch.save({"allparam": _tensors()[kind]}, tmp_path / "w.pt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EagleProbeError, match="w.pt: weight allparam"):
            layouts.read_arrays(tmp_path / "w.pt")
    assert not caught, [str(w.message) for w in caught]


def test_a_longdouble_npz_beyond_float64_is_refused_quietly(tmp_path):
    np.savez(tmp_path / "w.npz", allparam=np.full((1, 1, 2, 3, 3), np.longdouble("1e400")))
    arrays = layouts.read_arrays(tmp_path / "w.npz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EagleProbeError, match="NaN or Inf"):
            layouts.import_arrays("ahn", arrays, n=5)
    assert not caught, [str(w.message) for w in caught]


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_import_names_what_a_weights_path_is(kind, tmp_path):
    path = tmp_path / "w.pt"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    word = "is a directory" if kind == "directory" else "not a regular file"
    with pytest.raises(EagleProbeError, match=word):
        layouts.read_arrays(path)


# --- 8. misleading errors ----------------------------------------------------------------------


def test_a_checkpoint_whose_name_is_not_utf8_loads(tmp_path):
    path = Path(os.fsdecode(os.fsencode(tmp_path) + b"/m\xff.pt"))
    _good(path)
    model, task, _ = checkpoint.load(path)
    assert task == SMALL_TASK and model.cfg == SMALL


# --- 2, 3. sweeps: failures and signals --------------------------------------------------------

SWEEP = ["sweep", "--regimes", "centralized", "--seeds", "1", "--steps", "2", "--batch", "8"]
SWEEP += ["--eval-batch", "16", "--parallel", "1"]


def _one_line_error(capsys, code, *words):
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize("bad", [["--batch", "1000000000"], ["--lr", "1e30"]], ids=["batch", "lr"])
def test_a_sweep_whose_runs_all_fail_publishes_nothing(bad, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main([*SWEEP, *bad, "--out", "sb"])
    _one_line_error(capsys, code, "every run of the sweep failed", "centralized seed 0")
    assert sorted(os.listdir(tmp_path)) == []


def test_a_sweep_passes_its_memory_budget_to_its_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main([*SWEEP, "--max-memory", "0.000001", "--out", "sb"])
    _one_line_error(capsys, code, "every run of the sweep failed", "budget")
    assert sorted(os.listdir(tmp_path)) == []


def test_a_sweep_table_names_the_runs_that_failed(tmp_path):
    from eagle_probe.sweep import failures, run_sweep

    (tmp_path / "centralized_seed1.pt").mkdir()  # seed 1 cannot write its checkpoint
    small = ["--n", "6", "--d", "6", "--layers", "1", "--eval-batch", "16", "--select", "mean"]
    table = run_sweep(
        ["centralized"],
        [0, 1],
        tmp_path,
        steps=2,
        batch=8,
        parallel=2,
        extra=small,
        log=lambda _: None,
    )
    assert set(table[table.status == "ok"].seed) == {0}
    (line,) = failures(table)
    assert line.startswith("centralized seed 1: failed:") and "directory" in line


@pytest.mark.parametrize(
    "template",
    ["{seed:>1000000000}", "{regime.__class__.__mro__}{seed}", "{seed!r}{regime}", "{0}{seed}"],
)
def test_sweep_names_take_only_the_plain_fields(template):
    from eagle_probe.sweep import run_name

    with pytest.raises(EagleProbeError, match="only {regime} and {seed}, as plain fields"):
        run_name(template, "centralized", 0)
    assert run_name("{regime}-{seed}", "centralized", 3) == "centralized-3"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat_line = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat_line.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_long_sweep(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    argv = [sys.executable, "-m", "eagle_probe", *SWEEP[:6], "100000000", "--batch", "8"]
    argv += ["--seeds", "2", "--parallel", "2", "--out", "sb"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        children = _children(proc.pid)
        if len(children) == 2:
            time.sleep(3)  # the children are past their imports
            return proc, children
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the sweep did not start its runs")


def _kill_all(proc: subprocess.Popen, children: list[int]) -> None:
    """Kill a sweep and its runs if they are still there (a failed test leaves nothing running:
    each run would train for hours)."""
    import signal

    if proc.poll() is None:
        proc.kill()
        proc.communicate()
    for child in children:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_stops_a_sweep_like_an_interrupt(tmp_path):
    import signal
    import time

    proc, children = _start_long_sweep(tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        _kill_all(proc, children)
    assert proc.returncode == 143, err
    lines = err.decode().strip().splitlines()
    assert lines == ["eagle-probe: terminated (SIGTERM); nothing written"], lines
    time.sleep(0.5)
    assert not any(_alive(c) for c in children)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_the_runs_of_a_killed_sweep_die_with_it(tmp_path):
    import signal
    import time

    proc, children = _start_long_sweep(tmp_path)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [c for c in children if _alive(c)]
    finally:
        _kill_all(proc, children)
    assert not alive


# --- 6-8. one-line errors, non-finite results, outputs before printing --------------------------

PLANT = ["plant", "--n", "6", "--d", "5", "--a-steps", "0.1", "--c-steps", "0.2"]


def test_plant_holds_its_factorisations_to_the_budget(tmp_path, capsys):
    code = main([*PLANT[:1], "--n", "1500", *PLANT[5:], "--max-memory", "0.2", "-o", "p.pt"])
    _one_line_error(capsys, code, "planting", "budget of 0.2 GiB", "--max-memory")
    assert not (tmp_path / "p.pt").exists()


@pytest.mark.parametrize(
    "dtype, word", [("float32", "not finite in float32"), ("float64", "planted steps overflow")]
)
def test_a_plant_whose_numbers_are_not_finite_is_refused(dtype, word, tmp_path, capsys):
    out = tmp_path / "p.pt"
    argv = [*PLANT[:5], "--a-steps", "1e308", "--c-steps", "1e308", "--dtype", dtype]
    _one_line_error(capsys, main([*argv, "-o", str(out)]), word)
    assert os.listdir(tmp_path) == []


def test_evaluate_refuses_a_model_whose_outputs_overflow(tmp_path, capsys):
    path = tmp_path / "p.pt"
    assert main([*PLANT, "--dtype", "float64", "-o", str(path)]) == 0
    payload = torch.load(path, weights_only=True)
    for key, value in payload["state_dict"].items():
        if key.endswith(("W_Q", "W_V")):
            payload["state_dict"][key] = value * 1e150  # finite weights, outputs beyond float64
    torch.save(payload, path)
    capsys.readouterr()
    _one_line_error(capsys, main(["evaluate", str(path), "--batch", "64"]), "not a finite number")


def test_extract_of_a_model_whose_outputs_overflow_is_one_line(tmp_path, capsys):
    path = tmp_path / "p.pt"
    assert main([*PLANT, "--dtype", "float64", "-o", str(path)]) == 0
    payload = torch.load(path, weights_only=True)
    for key, value in payload["state_dict"].items():
        if key.endswith(("W_Q", "W_V")):
            payload["state_dict"][key] = value * 1e150
    torch.save(payload, path)
    capsys.readouterr()
    code = main(
        ["extract", str(path), "--no-control", "--no-progress", "--out", str(tmp_path / "x")]
    )
    _one_line_error(capsys, code, "not finite", "no algorithm to extract")
    assert os.listdir(tmp_path) == ["p.pt"]


def test_a_failed_torch_allocation_is_an_out_of_memory_line(tmp_path, capsys):
    path = _good(tmp_path / "m.pt")
    argv = ["evaluate", str(path), "--batch", str(10**11), "--max-memory", "1e9"]
    _one_line_error(capsys, main(argv), "out of memory", "--max-memory")


@pytest.mark.parametrize("count", ["1000000", "2147483648"])
def test_an_absurd_thread_count_is_a_usage_error(count, tmp_path):
    path = _good(tmp_path / "m.pt")
    argv = [sys.executable, "-m", "eagle_probe", "evaluate", str(path), "--threads", count]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "at most" in out.stderr


@pytest.mark.slow
def test_an_ascii_terminal_gets_the_outputs_and_replacement_characters(tmp_path):
    path = _good(tmp_path / "m.pt")
    env = os.environ | {"PYTHONIOENCODING": "ascii"}
    extract = ["extract", str(path), "--out", str(tmp_path / "x"), "--probe-batch", "16"]
    extract += ["--no-control", "--no-progress"]
    for argv in (["evaluate", str(path), "--batch", "64"], extract):
        out = subprocess.run(
            [sys.executable, "-m", "eagle_probe", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        assert "?" in out.stdout  # ‖A‖₂ and the like, replaced
    assert (tmp_path / "x" / "extraction.json").is_file() and (
        tmp_path / "x" / "solver.py"
    ).is_file()


# --- 9. minor ------------------------------------------------------------------------------------


def test_force_drops_an_earlier_run_s_stale_outputs(tmp_path):
    from eagle_probe import files

    out = tmp_path / "x"
    out.mkdir()
    (out / "solver.py").write_text("old")
    (out / "keep.txt").write_text("mine")
    with files.output_dir(out, force=True, stale=("solver.py",)) as tmp:
        (tmp / "extraction.json").write_text("{}")
    assert sorted(os.listdir(out)) == ["extraction.json", "keep.txt"]


def test_force_refuses_a_link_in_the_output_directory_before_the_work(tmp_path):
    from eagle_probe import files

    out = tmp_path / "b"
    out.mkdir()
    (out / "summary.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(EagleProbeError, match="summary.md is a symbolic link"):
        files.check_dir(out, force=True)


@pytest.mark.parametrize("length", [234, 251])
def test_output_names_up_to_the_file_system_limit_are_written(length, tmp_path, capsys):
    out = tmp_path / ("m" * length + ".pt")
    assert main([*PLANT, "-o", str(out)]) == 0, capsys.readouterr().err
    assert checkpoint.load(out)[0].cfg.n == 6
    assert os.listdir(tmp_path) == [out.name]


def test_the_solver_refuses_inputs_it_would_misread():
    from eagle_probe import eagle

    rng = np.random.default_rng(0)
    A, b = rng.standard_normal((8, 6)), rng.standard_normal(8)
    B, C = rng.standard_normal((2, 6)), rng.standard_normal((8, 2))
    with pytest.raises(ValueError, match="real numbers"):
        eagle.lstsq(np.ones((8, 6), dtype="m8[s]"), b)
    with pytest.raises(ValueError, match="masked array"):
        eagle.lstsq(np.ma.masked_array(A, mask=A > 1), b)
    for x0 in (np.zeros((1, 6)), np.zeros((3, 2)), np.zeros((6, 1))):
        with pytest.raises(ValueError, match=r"x0 has shape .* needs an x0 of shape \(6,\)"):
            eagle.lstsq(A, b, x0=x0)
    with pytest.raises(ValueError, match="numpy.random.Generator"):
        eagle.complete_sketched(A, B, C, 3, rng=np.random.RandomState(0))
    Dm, _ = eagle.complete_distributed(A, B, C, np.int64(2))
    Dr, _ = eagle.complete_sketched(A, B, C, np.int64(6), rng=np.random.default_rng(0))
    assert np.allclose(Dm, eagle.complete_distributed(A, B, C, 2)[0])
    assert Dr.shape == (2, 2) and np.all(np.isfinite(Dr))


def test_a_diverged_run_says_no_weights_were_kept_not_a_finite_number(tmp_path, capsys):
    argv = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--layers", "1"]
    argv += ["--steps", "4", "--batch", "16", "--eval-every", "2", "--eval-batch", "32"]
    argv += ["--no-progress", "--lr", "1e30", "-o", str(tmp_path / "m.pt")]
    _one_line_error(capsys, main(argv), "diverged", "no validation had a finite loss")
    assert os.listdir(tmp_path) == []
