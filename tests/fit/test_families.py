"""Ground truth in every regime: exact plants of each family come out as that family.

The reference algorithms below are written from the families' definitions (the module text
of `eagle_probe.fit.families`) in plain NumPy, independently of the package's own steps.
"""

import importlib.util

import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close

from eagle_probe.export import write_solver
from eagle_probe.extract import extract
from eagle_probe.fit import families
from eagle_probe.layouts import narrow_products_to_state, plant, state_products
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator, sample

N = D = 6
# steps on the spectrally normalised prompts (‖A‖₂ = 1): every step contracts
A_STEPS, C_STEPS = [0.35, 0.3, 0.25], [0.8, 0.7, 0.6]


def reference(A, B, C, family, a_steps, c_steps, machines=1, projectors=None):
    """D after the family's steps from (A, B, C), one prompt, plain NumPy."""
    n = A.shape[1]
    Dh = np.zeros((B.shape[0], C.shape[1]))
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        if family == "eagle":
            G = A @ A.T
            A, B, C, Dh = A - a * G @ A, B - a * (B @ A.T) @ A, C - c * G @ C, Dh + c * B @ A.T @ C
        elif family == "eagle-distributed":
            size = n // machines
            A1, B1, dC, dD = A.copy(), B.copy(), 0.0, 0.0
            for mu in range(machines):
                cols = slice(mu * size, (mu + 1) * size)
                Am, Bm = A[:, cols], B[:, cols]
                G = Am @ Am.T
                A1[:, cols], B1[:, cols] = Am - a * G @ Am, Bm - a * (Bm @ Am.T) @ Am
                dC, dD = dC + G @ C, dD + Bm @ Am.T @ C
            A, B, C, Dh = A1, B1, C - c * dC, Dh + c * dD
        else:  # eagle-sketched, Algorithm 1 with Ã = A S, B̃ = B S, i.e. P = S Sᵀ
            P = projectors[layer]
            G, BPAt = A @ P @ A.T, B @ P @ A.T
            A, B, C, Dh = A - a * G @ A @ P, B - a * BPAt @ A @ P, C - c * G @ C, Dh + c * BPAt @ C
    return Dh


CASES = [
    ("centralized", {"n_heads": 1}, "eagle"),
    ("centralized", {"n_heads": 8}, "eagle"),
    ("distributed", {"machines": 2}, "eagle-distributed"),
    ("distributed", {"machines": 3}, "eagle-distributed"),
    ("distributed", {"machines": 6}, "eagle-distributed"),
    ("distributed-open", {"machines": 3}, "eagle-distributed"),
    ("constrained", {"rank": 3, "n_heads": 1}, "eagle-sketched"),
    ("constrained", {"rank": 5, "n_heads": 4}, "eagle-sketched"),
]
IDS = [f"{r}-{'-'.join(f'{k}{v}' for k, v in kw.items())}" for r, kw, _ in CASES]


def _cfg(regime, kw, normalize="spectral", dtype="float64"):
    return ModelConfig(regime=regime, n=N, d=D, n_layers=3, normalize=normalize, dtype=dtype, **kw)


TASK = TaskConfig(n=N, d=D, rank=4)
# the views a family's reading touches (term discovery has its own tests)
VIEWS = (
    "eagle",
    "fidelity",
    "projection",
    "weights",
    "communication",
    "sketch",
    "causal",
    "verdict",
)


@pytest.mark.parametrize(("regime", "kw", "family"), CASES, ids=IDS)
def test_plant_runs_its_family_exactly(regime, kw, family):
    cfg = _cfg(regime, kw, normalize="none")
    model = plant(cfg, A_STEPS, C_STEPS, sketch_seed=3)
    S = families.random_sketches(N, cfg.rank, 3, np.random.default_rng(3))
    projectors = np.einsum("lnr,lmr->lnm", S, S)
    p = sample(TASK, 8, make_generator(1), dtype=torch.float64)
    scale = np.linalg.norm(p.A.numpy(), ord=2, axis=(-2, -1)).max()
    z0 = p.z0() / scale  # prompts with ‖A‖₂ ≤ 1, so the steps above contract
    with torch.no_grad():
        pred = model(z0).numpy()
    for i in range(8):
        A, B, C = (x[i].numpy() / scale for x in (p.A, p.B, p.C))
        ref = reference(A, B, C, family, A_STEPS, C_STEPS, cfg.machines, projectors)
        assert_close(pred[i], ref)


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def extracted(request, tmp_path_factory):
    regime, kw, family = request.param
    model = plant(_cfg(regime, kw), A_STEPS, C_STEPS, sketch_seed=5)
    result = extract(model, TASK, probe_batch_size=32, test_batch=128, tuning_batch=32, views=VIEWS)
    path = write_solver(
        tmp_path_factory.mktemp("solver") / "solver.py", result.to_json(), result.projectors
    )
    return model, family, result, path


def test_extraction_recovers_steps_family_and_labels(extracted):
    _, family, result, _ = extracted
    eagle = result.views["eagle"].json
    assert eagle["family_name"] == family
    steps = [(lay["a_step"], lay["c_step"]) for lay in eagle["layers"]]
    np.testing.assert_allclose(np.array(steps), np.array([A_STEPS, C_STEPS]).T, rtol=RTOL)
    proj = result.views["projection"].json
    np.testing.assert_allclose([lay["a_step"] for lay in proj["layers"]], A_STEPS, rtol=RTOL)
    np.testing.assert_allclose([lay["c_step"] for lay in proj["layers"]], C_STEPS, rtol=RTOL)
    assert proj["prediction_gap"] <= RTOL
    shapes = result.weights
    assert not (shapes.W_QK.str.contains("dense") | shapes.W_VP.str.contains("dense")).any()
    own = {"eagle": " I_", "eagle-distributed": " I[", "eagle-sketched": " P_"}[family]
    assert shapes.W_QK.str.contains(own, regex=False).all()
    verdict = result.views["verdict"].json
    assert [lay["label"] for lay in verdict["layers"]] == ["EAGLE"] * 3
    assert verdict["model"]["label"] == "EAGLE"
    assert verdict["model"]["family"] == family


def test_the_interchange_test_finds_every_exact_plant_carried_and_its_control_not(extracted):
    """Swapping the family's state into the plant (through its hooks) or the plant's into the
    family leaves the output as it was, at every interior layer and for every block that the
    earlier layers change; the untrained control's own fitted family does not."""
    _, _, result, _ = extracted
    causal = result.views["causal"].json
    assert causal["forward"] == "model hooks"
    for lay in causal["layers"]:
        for direction in ("algorithm_into_network", "network_into_algorithm"):
            shares = [x for x in lay[direction].values() if np.isfinite(x)]
            assert np.isfinite(lay[direction]["all"]), (lay["layer"], direction)
            assert min(shares) >= 0.999, (lay["layer"], direction, lay[direction])
    control = result.control["causal"].json["summary"]["algorithm_into_network"]
    assert control["min"] <= 0.5


def test_faithful_export_equals_the_planted_network(extracted):
    model, family, result, path = extracted
    spec = importlib.util.spec_from_file_location("solver_" + family.replace("-", "_"), path)
    solver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solver)
    assert solver.REGIME == families.get(family).export
    p = sample(TASK, 10, make_generator(11), dtype=torch.float64)
    with torch.no_grad():
        net = model(p.z0() * 1e3).numpy()  # far from the training scale: the normalisation
    for i in range(10):
        A, B, C = (x[i].numpy() * 1e3 for x in (p.A, p.B, p.C))
        assert_close(solver.complete(A, B, C, mode="faithful"), net[i])


def test_float32_plant_gives_its_steps_to_single_precision():
    model = plant(_cfg("distributed", {"machines": 3}, dtype="float32"), A_STEPS, C_STEPS)
    result = extract(
        model,
        TASK,
        probe_batch_size=32,
        test_batch=64,
        tuning_batch=16,
        views=("eagle",),
        control=False,
    )
    layers = result.views["eagle"].json["layers"]
    np.testing.assert_allclose([lay["a_step"] for lay in layers], A_STEPS, rtol=1e-6)
    np.testing.assert_allclose([lay["c_step"] for lay in layers], C_STEPS, rtol=1e-6)


@pytest.mark.parametrize("regime", ["distributed", "distributed-open"])
def test_a_network_that_sends_a_columns_is_not_the_papers_distributed_family(regime):
    """One head of one layer writes its A update into another machine's columns: the verdict
    must not call the model eagle-distributed (both architectures can hold the write: it reads
    only the head's own columns)."""
    cfg = _cfg(regime, {"machines": 3})
    qk, vp = state_products(plant(cfg, A_STEPS, C_STEPS))
    size = N // 3
    vp[1, 0, :size, size : 2 * size] = -A_STEPS[1] * np.eye(size)  # machine 0 → machine 1
    model = LinearTransformer(cfg)
    model.load_state_dict(narrow_products_to_state(cfg, qk, vp))
    result = extract(
        model.eval(), TASK, probe_batch_size=32, test_batch=128, tuning_batch=32, views=VIEWS
    )
    assert result.views["verdict"].json["model"]["family"] != "eagle-distributed"
    assert result.views["communication"].json["layers"][1]["a_columns_sent"]
    labels = [lay["label"] for lay in result.views["verdict"].json["layers"]]
    assert labels[0] == labels[2] == "EAGLE"
    if regime == "distributed-open":  # with C/D copies the same write is a smaller part of the
        assert labels[1] != "EAGLE"  # layer's update (every copy moves): it stays a one-step fit


def test_plant_refuses_what_the_architecture_cannot_hold():
    cfg = _cfg("distributed-open", {"machines": 3})
    with pytest.raises(Exception, match="rank"):
        plant(cfg, A_STEPS, C_STEPS, family="eagle-over-machines")
    with pytest.raises(Exception, match="runs in a"):
        plant(cfg, A_STEPS, C_STEPS, family="eagle-sketched")
    # the paper's architecture: values read only their machine, so no head can gather A Aᵀ A
    paper = _cfg("distributed", {"machines": 3})
    with pytest.raises(Exception, match="runs in a distributed-open model"):
        plant(paper, A_STEPS, C_STEPS, family="eagle-over-machines")


@pytest.mark.parametrize(
    "args",
    [
        ["--regime", "distributed", "--machines", "4", "--n", "6"],
        ["--regime", "constrained", "--rank", "0"],
        ["--regime", "constrained", "--rank", "19"],
        ["--regime", "constrained", "--sketch-seed", "x"],
        ["--regime", "elsewhere"],
    ],
)
def test_plant_cli_bad_input_is_one_line_and_writes_nothing(args, tmp_path, capsys):
    from eagle_probe.cli import main

    out = tmp_path / "m.pt"
    code = main(["plant", *args, "--a-steps", "0.1", "--c-steps", "0.2", "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and not out.exists()
