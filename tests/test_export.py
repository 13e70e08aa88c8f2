import importlib.util

import numpy as np
import pytest
import torch
from conftest import run_numpy_only

from eagle_probe.export import solver_source, write_solver
from eagle_probe.extract import extract
from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
from eagle_probe.tasks import TaskConfig, make_generator, sample


def _load(path):
    spec = importlib.util.spec_from_file_location("exported_solver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    a, c = [0.006, 0.004, 0.003], [0.01, 0.009, 0.008]
    cfg = ModelConfig(n=10, d=8, n_layers=3, n_heads=2, normalize="none", dtype="float64")
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, a, c))
    task = TaskConfig(n=10, d=8, rank=5)
    data = extract(model, task, probe_batch_size=32, control=False, test_batch=32).to_json()
    data["model"]["sha256"] = "0" * 64
    path = write_solver(tmp_path_factory.mktemp("export") / "solver.py", data)
    return model, task, path


def test_faithful_export_reproduces_the_planted_network(planted):
    model, task, path = planted
    solver = _load(path)
    p = sample(task, 20, make_generator(9), dtype=torch.float64)
    with torch.no_grad():
        net = model(p.z0()).numpy()
    for i in range(20):
        A, B, C = p.A[i].numpy(), p.B[i].numpy(), p.C[i].numpy()
        before = [A.copy(), B.copy(), C.copy()]
        D = solver.complete(A, B, C, mode="faithful")
        np.testing.assert_allclose(D, net[i], rtol=1e-10, atol=1e-14)
        assert all(np.array_equal(x, y) for x, y in zip(before, (A, B, C), strict=True))


def test_normalized_export_solves_any_size_and_scale(planted):
    _, _, path = planted
    solver = _load(path)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 12)) @ rng.standard_normal((12, 64)) * 1e120
    A, B, C, D = X[:55, :60], X[55:, :60], X[:55, 60:], X[55:, 60:]
    est, info, its = solver.complete(A, B, C, return_info=True)
    assert info == 0 and its < 60
    assert np.linalg.norm(est - D) <= 1e-8 * np.linalg.norm(D)
    x, info = solver.lstsq(A.T, B[0])
    assert info == 0
    ref = np.linalg.lstsq(A.T, B[0], rcond=None)[0]
    assert np.linalg.norm(x - ref) <= 1e-8 * np.linalg.norm(ref)


def test_provenance_header(planted):
    _, _, path = planted
    text = path.read_text()
    assert text.startswith("# Exported by eagle-probe")
    assert "checkpoint sha256: " + "0" * 64 in text
    assert "per-layer fidelity" in text
    assert "\nimport numpy as np\n" in text and "import torch" not in text


def test_exported_file_runs_without_torch_scipy_or_eagle_probe(planted):
    _, _, path = planted
    check = (
        "A = np.random.default_rng(0).standard_normal((8, 10))\n"
        "D = m.complete(A, np.ones((2, 10)), np.ones((8, 2)), mode='faithful')\n"
        "assert D.shape == (2, 2) and np.all(np.isfinite(D))"
    )
    out = run_numpy_only(path, check)
    assert out.stdout.strip() == "ok", out.stderr


def test_faithful_refuses_other_sizes_for_sketched_models():
    data = {
        "model": {
            "regime": "constrained",
            "n": 4,
            "d": 4,
            "n_prime": 1,
            "d_prime": 1,
            "normalize": "none",
            "machines": 1,
        },
        "layers": [{"a_step": 0.1, "c_step": 0.1, "eta": 0.3, "gamma": 1.0, "fidelity": 0.0}],
    }
    ns: dict = {}
    exec(compile(solver_source(data, projectors=[np.eye(4).tolist()]), "solver", "exec"), ns)
    with pytest.raises(ValueError, match="training size"):
        ns["complete"](np.ones((3, 6)), np.ones((1, 6)), np.ones((3, 1)), mode="faithful")
