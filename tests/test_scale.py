"""Extraction at scale: the command line's --threads, --device, --probe-batch and memory checks,
progress reports, and views scoring on the held-out prompts they can afford."""

import io

import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close
from plants import eagle as planted_model

from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.extract import build_context, run_views
from eagle_probe.fit import base
from eagle_probe.progress import reporter


@pytest.fixture(scope="module")
def planted_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "planted.pt"
    code = main(
        ["plant", "--n", "8", "--d", "6", "--a-steps", "0.05,0.04", "--c-steps", "0.09,0.08"]
        + ["--dtype", "float64", "-o", str(path)]
    )
    assert code == 0
    return path


def one_line_exit_2(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


COMPUTING = {
    "extract": ["extract", "m.pt"],
    "evaluate": ["evaluate", "m.pt"],
    "bench": ["bench"],
    "sweep": ["sweep"],
    "train": ["train", "--regime", "centralized", "-o", "x.pt"],
    "import": ["import", "w.pt", "--layout", "ahn", "--n", "4", "-o", "x.pt"],
}


@pytest.mark.parametrize("command", sorted(COMPUTING))
@pytest.mark.parametrize("threads", ["0", "-3", "two"])
def test_bad_thread_counts_are_refused_on_every_computing_command(
    command, threads, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    one_line_exit_2(COMPUTING[command] + ["--threads", threads], "--threads", capsys)


@pytest.mark.parametrize("command", sorted(COMPUTING))
def test_a_missing_device_is_refused_before_any_work(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
    one_line_exit_2(COMPUTING[command] + ["--device", missing], f"--device {missing}", capsys)
    one_line_exit_2(COMPUTING[command] + ["--device", "cuda:7"], "--device cuda:7", capsys)
    one_line_exit_2(COMPUTING[command] + ["--device", "tpu9"], "not a torch device", capsys)
    assert not (tmp_path / "x.pt").exists()


def test_probe_batch_and_chunk_must_be_positive(planted_file, capsys):
    one_line_exit_2(["extract", str(planted_file), "--probe-batch", "0"], "--probe-batch", capsys)
    one_line_exit_2(["extract", str(planted_file), "--probe-chunk", "0"], "--probe-chunk", capsys)
    one_line_exit_2(["extract", str(planted_file), "--probe-batch", "1"], "at least 2", capsys)


def test_a_model_above_the_memory_budget_is_refused_from_an_estimate(tmp_path, capsys):
    path = tmp_path / "big.pt"
    steps = ",".join(["0.0001"] * 8)
    code = main(
        ["plant", "--n", "96", "--d", "96", "--heads", "2", "--a-steps", steps]
        + ["--c-steps", steps, "-o", str(path)]
    )
    assert code == 0
    capsys.readouterr()
    one_line_exit_2(
        ["extract", str(path), "--max-memory", "0.1"], "above the budget of 0.1 GiB", capsys
    )


def test_extract_runs_with_threads_device_and_chunks(planted_file, capsys):
    before = torch.get_num_threads()
    try:
        code = main(
            ["extract", str(planted_file), "--threads", "1", "--device", "cpu"]
            + ["--probe-batch", "16", "--probe-chunk", "5", "--no-control"]
        )
        assert code == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr()
    assert "0.05" in out.out and "\r" not in out.err


def test_plain_progress_lines_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    items = list(reporter(stream, delay=0.0, every=0.0)(range(3), "capture"))
    text = stream.getvalue()
    assert items == [0, 1, 2] and "\r" not in text
    assert text.splitlines() == [
        "capture: 1/3 (0 s)",
        "capture: 2/3 (0 s)",
        "capture: 3/3 (0 s)",
    ] + ["capture: done (0 s)"]
    quiet = io.StringIO()
    assert list(reporter(quiet, delay=60.0)(range(3), "capture")) == [0, 1, 2]
    assert quiet.getvalue() == ""


def test_views_score_on_the_prompts_their_budget_affords(monkeypatch):
    model, task = planted_model([0.05, 0.04], [0.09, 0.08], heads=2)
    ctx = build_context(model, task, probe_batch_size=16, test_batch=200, tuning_batch=16)
    monkeypatch.setattr(base, "VIEW_FLOPS", 100 * base.layer_flops(ctx.geometry))
    run_views(ctx, ("eagle", "projection", "weights", "attribution"))
    proj, wts = ctx.results["projection"].json, ctx.results["weights"].json
    att = ctx.results["attribution"].json
    for view in (proj, wts, att):
        assert base.SCORING_FLOOR <= view["prompts"] < 200
    k = proj["prompts"]
    held = ctx.held_out.first(k)
    # the projection's NumPy forward against the torch forward's predictions
    assert proj["network_mse"] == pytest.approx(held.mse(ctx.network_pred[:k]), rel=RTOL)
    # the planted model is its own projection: the projected MSE is the network's on those prompts
    assert proj["projected_mse"] == pytest.approx(proj["network_mse"], rel=RTOL)
    # and those are fewer prompts than the whole held-out batch: another MSE, beyond round-off
    assert not np.isclose(proj["network_mse"], ctx.network_mse, rtol=RTOL, atol=0)


def test_a_checkpoint_round_trip_keeps_the_default_probe_batch(planted_file):
    model, task, _ = checkpoint.load(planted_file)
    ctx = build_context(model, task, test_batch=8, tuning_batch=8)
    assert ctx.cap.Z.shape[1] == 256


def test_a_control_too_costly_to_probe_runs_the_views_the_verdict_reads(monkeypatch):
    from eagle_probe import extract as extract_module

    model, task = planted_model([0.05, 0.04], [0.09, 0.08])
    monkeypatch.setattr(extract_module, "CONTROL_PROBE_FLOPS", 0.0)
    ex = extract_module.extract(
        model,
        task,
        probe_batch_size=16,
        test_batch=32,
        tuning_batch=16,
        views=("eagle", "fidelity", "polynomial", "verdict"),
    )
    assert ex.info["control_views"] == ["eagle", "fidelity"] == list(ex.control)
    labels = ex.views["verdict"].json["layers"]
    assert all(np.isfinite(lay["control_relative"]) for lay in labels)


@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_the_spectral_jacobian_equals_the_tangent_propagation(normalize):
    from eagle_probe.fit import optimum
    from eagle_probe.fit.geometry import Geometry
    from eagle_probe.tasks import TaskConfig, make_generator, sample

    prompt = sample(TaskConfig(n=8, d=6, rank=4), 7, make_generator(3), dtype=torch.float64)
    z0 = prompt.z0().numpy()
    geo = Geometry(
        regime="centralized",
        d=6,
        n=8,
        d_prime=2,
        n_prime=2,
        heads=1,
        layers=3,
        mask=np.ones((8, 8)),
        normalize=normalize,
    )
    assert optimum.spectral(geo)
    rng = np.random.default_rng(0)
    a, c = rng.uniform(0.01, 0.3, 3), rng.uniform(0.05, 0.5, 3)
    pred, jac = optimum.eagle_jacobian(geo, z0, a, c)
    factors = optimum.spectral_factors(geo, z0)
    spred, sjac = optimum.spectral_jacobian(geo, factors, a, c)
    assert_close(spred, pred)  # the singular basis against the forward-mode tangents
    assert_close(sjac, jac)
    # exact: spectral_predict runs spectral_jacobian's recursion and product, without the adjoint
    np.testing.assert_array_equal(optimum.spectral_predict(geo, factors, a, c), spred)


def test_a_large_control_probes_the_first_prompts_its_budget_affords(monkeypatch):
    from eagle_probe import extract as extract_module

    model, task = planted_model([0.05, 0.04], [0.09, 0.08])
    monkeypatch.setattr(base, "VIEW_FLOPS", 1.0)
    ex = extract_module.extract(
        model,
        task,
        probe_batch_size=40,
        test_batch=32,
        tuning_batch=16,
        views=("eagle", "fidelity", "terms", "verdict"),
    )
    assert ex.info["probe_batch"] == 40
    terms = ex.views["terms"].json
    assert terms["probe_prompts"] == 16 and terms["prompts"] == base.SCORING_FLOOR
    assert max(lay["relative_residual"] for lay in terms["layers"]) < RTOL  # a relative norm
    assert ex.info["control_probe_batch"] == extract_module.CONTROL_FLOOR < 40
    assert len(ex.control["fidelity"].json["layers"]) == 2


def test_capture_never_moves_or_changes_the_callers_model():
    from eagle_probe.capture import capture, on_device, probe_batch

    model, task = planted_model([0.05, 0.04], [0.09, 0.08])  # float64: float64_copy returns it
    before = {k: v.clone() for k, v in model.state_dict().items()}
    capture(model, probe_batch(task, 8, 0), device="cpu")
    assert on_device(model, torch.device("cpu")) is model
    for k, v in model.state_dict().items():
        # exact: weights not written to
        assert v.device.type == "cpu" and torch.equal(v, before[k])
