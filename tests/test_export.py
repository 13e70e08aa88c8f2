import ast
import importlib.util
import json
import subprocess
import sys

import numpy as np
import plants
import pytest
import torch
from conftest import assert_close, numpy_eagle, prompt_norm, run_numpy_only
from plants import NORMALIZE_PATHS, PLANTED_STEPS

from eagle_probe import solver_template
from eagle_probe.export import solver_source, write_solver
from eagle_probe.extract import extract
from eagle_probe.layouts import plant
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator, sample


def _load(path):
    spec = importlib.util.spec_from_file_location("exported_solver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Steps per prompt-normalisation path (the shipped models normalise by ‖A‖₂; on the `none` path
# the prompt scale is 1 and a forgotten scale cannot show): η = a‖A‖² stays in (0, 1) on all three.
EXPORT_STEPS = {
    "none": ([0.006, 0.004, 0.003], [0.01, 0.009, 0.008]),
    "spectral": PLANTED_STEPS["spectral"],
    "frobenius": PLANTED_STEPS["frobenius"],
}
# Prompts at scales far from 1: a normalising solver must undo its own scale exactly.
SCALES = np.geomspace(1e-3, 1e3, 7)


@pytest.fixture(scope="module", params=NORMALIZE_PATHS)
def planted(request, tmp_path_factory):
    """(model, task, solver path, a, c): a 3-layer, 2-head planted model on each path, exported."""
    a, c = EXPORT_STEPS[request.param]
    model, task = plants.eagle(a, c, normalize=request.param, heads=2, n=10, d=8, rank=5)
    data = extract(
        model, task, probe_batch_size=32, control=False, test_batch=32, tuning_batch=32
    ).to_json()
    data["model"]["sha256"] = "0" * 64
    path = write_solver(tmp_path_factory.mktemp("export") / "solver.py", data)
    return model, task, path, a, c


def _network(model, A, B, C):
    """The network's own prediction of D on one prompt (A, B, C), in prompt units."""
    z0 = np.block([[A, C], [B, np.zeros((B.shape[0], C.shape[1]))]])
    with torch.no_grad():
        return model(torch.from_numpy(z0)[None]).numpy()[0]


def test_faithful_export_reproduces_the_planted_network(planted):
    model, task, path, a, c = planted
    solver = _load(path)
    assert solver.NORMALIZE == model.cfg.normalize
    p = sample(task, 2 * len(SCALES), make_generator(9), dtype=torch.float64)
    with torch.no_grad():
        net = model(p.z0()).numpy()
    for i in range(len(SCALES)):  # prompts of the task's own scale
        A, B, C = p.A[i].numpy(), p.B[i].numpy(), p.C[i].numpy()
        before = [A.copy(), B.copy(), C.copy()]
        D = solver.complete(A, B, C, mode="faithful")
        assert_close(D, net[i])  # NumPy's layers against the torch forward
        # exact: inputs not written to
        assert all(np.array_equal(x, y) for x, y in zip(before, (A, B, C), strict=True))
    for i, k in enumerate(SCALES, start=len(SCALES)):  # and at scales 1e-3 … 1e3
        A, B, C = k * p.A[i].numpy(), k * p.B[i].numpy(), k * p.C[i].numpy()
        D = solver.complete(A, B, C, mode="faithful")
        want = _network(model, A, B, C)
        assert np.all(np.isfinite(want))
        assert_close(D, want)
        # the same from Algorithm 1 in NumPy on the prompt divided by its own norm, times it
        s = prompt_norm(A[None], model.cfg.normalize)[0]
        eagle = s * numpy_eagle(A / s, B / s, C / s, a, c)[-1][3]
        assert_close(D, eagle)  # the planted steps, fitted back to RTOL


def test_normalized_export_solves_any_size_and_scale(planted):
    _, _, path, _, _ = planted
    solver = _load(path)
    rng = np.random.default_rng(0)
    X0 = rng.standard_normal((60, 12)) @ rng.standard_normal((12, 64))
    for k in (1e-3, 1e3, 1e120):
        X = X0 * k
        A, B, C, D = X[:55, :60], X[55:, :60], X[:55, 60:], X[55:, 60:]
        est, info, its = solver.complete(A, B, C, return_info=True)
        assert info == 0 and its < 60
        assert np.linalg.norm(est - D) <= 1e-8 * np.linalg.norm(D)
        x, info = solver.lstsq(A.T, B[0])
        assert info == 0
        ref = np.linalg.lstsq(A.T, B[0], rcond=None)[0]
        assert np.linalg.norm(x - ref) <= 1e-8 * np.linalg.norm(ref)


# Every regime the solver exports: (model regime, planted family) -> the solver's REGIME.
# eagle-over-machines writes every machine's A columns: its heads need the full value width.
EXPORTED_REGIMES = [
    ("distributed", "eagle-distributed", "distributed", None),
    ("distributed-open", "eagle-distributed", "distributed", None),
    ("distributed-open", "eagle-over-machines", "centralized", 8),
    ("constrained", "eagle-sketched", "constrained", None),
]


@pytest.mark.parametrize("normalize", NORMALIZE_PATHS)
@pytest.mark.parametrize("regime, family, exported, vp_width", EXPORTED_REGIMES)
def test_faithful_export_of_every_regime_reproduces_the_network_at_any_scale(
    regime, family, exported, vp_width, normalize, tmp_path
):
    a, c = (
        ([0.03, 0.02, 0.01], [0.06, 0.05, 0.04])
        if normalize == "none"
        else ([0.4, 0.3, 0.2], [0.9, 0.7, 0.5])
    )
    cfg = ModelConfig(
        n=6,
        d=5,
        n_layers=3,
        regime=regime,
        machines=3,
        rank=3,
        normalize=normalize,
        dtype="float64",
        vp_width=vp_width,
    )
    model = plant(cfg, a, c, family=family)
    task = TaskConfig(n=6, d=5, rank=4)
    ex = extract(
        model,
        task,
        probe_batch_size=16,
        control=False,
        test_batch=16,
        tuning_batch=16,
        views=("eagle", "fidelity"),
    )
    solver = _load(write_solver(tmp_path / "solver.py", ex.to_json(), ex.projectors))
    assert (solver.REGIME, solver.NORMALIZE) == (exported, normalize)
    p = sample(task, len(SCALES), make_generator(9), dtype=torch.float64)
    for i, k in enumerate(SCALES):
        A, B, C = k * p.A[i].numpy(), k * p.B[i].numpy(), k * p.C[i].numpy()
        D = solver.complete(A, B, C, mode="faithful")
        want = _network(model, A, B, C)
        assert np.all(np.isfinite(want))
        assert_close(D, want)


def test_provenance_header(planted):
    _, _, path, _, _ = planted
    text = path.read_text()
    assert text.startswith("# Exported by eagle-probe")
    assert 'checkpoint sha256: "' + "0" * 64 + '"' in text
    assert "per-layer fidelity" in text
    assert "\nimport numpy as np\n" in text and "import torch" not in text
    # the planted layers' η, γ contract: 3 of the network's steps, then the theory's
    module = _load(path)
    for i, lay in enumerate(module.LAYERS):
        step = f"#   step {i + 1}: η = {lay['eta']:.4g}, γ = {lay['gamma']:.4g}"
        assert f"{step}, the network's layer {i}" in text
    assert "#   step 4 and after: the theory's η = 1/3, γ = 1" in text
    # and how well each is known: its 95% interval over the probe prompts, around it
    assert "# η_l, γ_l read from the activations, 95% intervals over the probe prompts:" in text
    for i, lay in enumerate(module.LAYERS):
        line = next(x for x in text.splitlines() if x.startswith(f"#   layer {i}: η = "))
        lo, hi = map(float, line.split("(")[1].split(")")[0].split(" to "))
        assert lo <= lay["eta"] * (1 + 1e-3) and lay["eta"] <= hi * (1 + 1e-3)
    assert module.PROVENANCE["recovered_layers"] == [0, 1, 2]
    assert module.recovered_layers() == [0, 1, 2]


def test_return_info_counts_recovered_and_theory_steps(planted):
    _, _, path, _, _ = planted
    solver = _load(path)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((10, 5)) @ rng.standard_normal((5, 12)) * 1e-3
    A, B, C = X[:8, :10], X[8:, :10], X[:8, 10:]
    D, stats = solver.complete(A, B, C, return_stats=True)
    assert stats["info"] == 0 and stats["iterations"] > 3
    assert stats["recovered_steps"] == 3
    assert stats["theory_steps"] == stats["iterations"] - 3 and stats["given_steps"] == 0
    assert np.allclose(D, solver.complete(A, B, C))  # the default return is unchanged
    D2, info, its = solver.complete(A, B, C, return_info=True)
    assert info == 0 and its == stats["iterations"]
    counts = {}
    solver.lstsq(A.T, B[0], stats=counts)
    assert counts["recovered_steps"] == 3 and counts["theory_steps"] == counts["iterations"] - 3
    # with eta/gamma given, no step is attributed to the network or the theory
    _, given = solver.complete(A, B, C, eta=0.4, gamma=1.0, return_stats=True)
    assert given["given_steps"] == given["iterations"] and given["recovered_steps"] == 0


def _layers_solver(etas, gammas, regime="centralized", verdict=None):
    """The source of a solver whose layers have the given η, γ (a_l = c_l = 0.1)."""
    data = {
        "model": {"regime": regime, "n": 4, "d": 4, "n_prime": 1, "d_prime": 1},
        "layers": [
            {"a_step": 0.1, "c_step": 0.1, "eta": e, "gamma": g, "fidelity": 0.0}
            for e, g in zip(etas, gammas, strict=True)
        ],
    }
    data["model"] |= {"normalize": "none", "machines": 2 if regime == "distributed" else 1}
    if verdict is not None:
        data["views"] = {"verdict": {"model": {"label": verdict, "confidence": "high"}}}
    source = solver_source(data)
    ns: dict = {}
    exec(compile(source, "solver", "exec"), ns)
    return source, ns


def test_each_step_takes_the_networks_a_clipped_or_the_theorys_steps_and_says_which():
    # layer 0 contracts; layer 1 overshoots (η > 1); layer 2 steps uphill; layer 3 has no η
    source, ns = _layers_solver([0.3, 1.7, -0.2, None], [1.0, 2.5, 1.0, 1.0])
    header = source[: source.index('"""')]
    assert "#   step 1: η = 0.3, γ = 1, the network's layer 0" in header
    assert (
        "#   step 2: η = 0.6, γ = 1.95, layer 1's η = 1.7, γ = 2.5 clipped to η ≤ 0.6, γ ≤ 1.95"
        in header
    )
    assert "#   step 3: η = 0.3333, γ = 1, the theory's (layer 2 steps uphill" in header
    assert (
        "#   step 4: η = 0.3333, γ = 1, the theory's (layer 3 steps uphill or not at all: η = none"
        in header
    )
    assert "#   step 5 and after: the theory's η = 1/3, γ = 1" in header
    rule = ns["step_rule"]
    # exact: the rule returns the layer's own values or its constants, nothing computed
    assert rule({"eta": 0.3, "gamma": 1.0}) == (0.3, 1.0, "recovered")
    assert rule({"eta": 1.7, "gamma": 2.5}) == (0.6, 1.95, "clipped")
    assert rule({"eta": 0.3, "gamma": 2.5}) == (0.3, 1.95, "clipped")
    assert rule({"eta": -0.2, "gamma": 1.0})[2] == rule(None)[2] == "theory"
    A = np.random.default_rng(0).standard_normal((4, 4))
    _, stats = ns["complete"](A, np.ones((1, 4)), np.ones((4, 1)), return_stats=True)
    # the steps the header names, in the order it names them
    assert stats["info"] == 0 and stats["iterations"] > 4
    assert (stats["recovered_steps"], stats["clipped_steps"]) == (1, 1)
    assert stats["theory_steps"] == stats["iterations"] - 2 and stats["given_steps"] == 0
    assert [ns["step_coefficients"](i, None, None) for i in range(5)] == [
        (0.3, 1.0, "recovered"),
        (0.6, 1.95, "clipped"),
        (1 / 3, 1.0, "theory"),
        (1 / 3, 1.0, "theory"),
        (1 / 3, 1.0, "theory"),
    ]


def test_steps_of_another_iteration_are_not_taken_for_centralized_ones():
    source, ns = _layers_solver([0.3, 0.4], [1.0, 1.0], regime="distributed")
    header = source[: source.index('"""')]
    assert "mode='normalized' is centralized EAGLE" in header
    assert "the network's steps belong to its distributed" in header
    A = np.random.default_rng(0).standard_normal((4, 4))
    _, stats = ns["complete"](A, np.ones((1, 4)), np.ones((4, 1)), return_stats=True)
    assert stats["info"] == 0 and stats["theory_steps"] == stats["iterations"]


def test_a_not_eagle_verdict_is_the_files_first_line():
    source, _ = _layers_solver([0.3], [1.0], verdict="not EAGLE")
    first = source.splitlines()[0]
    assert first.startswith('# NOT EAGLE: the verdict on this network is "not EAGLE"')
    source, _ = _layers_solver([0.3], [1.0], verdict="EAGLE")
    assert source.startswith("# Exported by eagle-probe") and "NOT EAGLE" not in source


NASTY_NAMES = [
    'm\nimport os; os.system("touch PWNED")\n#.pt',
    "m\r\nimport os\r\n.pt",
    "a\u2028b\u0085c\x0cd.pt",
    "q\"\"\"'''\\.pt",
    "\x00\x1b[31m.pt",
]


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_provenance_values_are_written_as_data(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = {
        "model": {
            "regime": "centralized",
            "n": 4,
            "d": 4,
            "n_prime": 1,
            "d_prime": 1,
            "normalize": "none",
            "machines": 1,
            "checkpoint": name,
            "sha256": name,
        },
        "layers": [{"a_step": 0.1, "c_step": 0.1, "eta": 0.3, "gamma": 1.0, "fidelity": 0.1}],
    }
    path = write_solver(tmp_path / "solver.py", data)
    text = path.read_text()
    header = text[: text.index('"""')]
    assert all(line.startswith("#") for line in header.split("\n") if line)
    module = _load(path)
    assert not (tmp_path / "PWNED").exists()
    assert module.PROVENANCE["checkpoint"] == name
    assert module.PROVENANCE["checkpoint_sha256"] == name
    line = next(ln for ln in header.split("\n") if ln.startswith("# checkpoint: "))
    assert json.loads(line[len("# checkpoint: ") :]) == name


def test_exported_file_runs_without_torch_scipy_or_eagle_probe(planted):
    _, _, path, _, _ = planted
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


def _run_demo(path, cwd):
    """Run a solver file as a script; its two lines are `complete: STATS` and `certify: RESULT`."""
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.strip().splitlines())
    return ast.literal_eval(lines["complete"]), ast.literal_eval(lines["certify"])


def test_the_template_runs_as_a_script_and_solves_its_demo(tmp_path):
    stats, check = _run_demo(solver_template.__file__, tmp_path)
    assert stats["info"] == 0 and stats["reason"] == "certified"
    assert stats["theory_steps"] == stats["iterations"] > 0 and stats["recovered_steps"] == 0
    assert check["certified"] and check["rank"] == 6
    assert check["error_estimate"] <= check["bound"] / 4


def test_a_written_solver_runs_as_a_script_and_solves_its_demo(planted, tmp_path):
    _, _, path, _, _ = planted
    stats, check = _run_demo(path, tmp_path)
    assert stats["info"] == 0 and stats["reason"] == "certified"
    assert stats["recovered_steps"] == 3  # the planted layers' η, γ drive the first steps
    assert stats["recovered_steps"] + stats["theory_steps"] == stats["iterations"]
    assert check["certified"] and check["rank"] == 6
    assert check["error_estimate"] <= check["bound"] / 4


# Algorithm 1 as the paper writes it (mode="algorithm1"): each regime's own form.
ALGORITHM1_FORMS = {
    "centralized": ("centralized", 1),
    "distributed": ("distributed", 3),
    "distributed-open": ("distributed", 3),
    "constrained": ("constrained", 1),
}


@pytest.mark.parametrize("regime", list(ALGORITHM1_FORMS))
def test_algorithm1_mode_runs_the_views_algorithm_1_at_any_scale(regime, tmp_path):
    """The exported mode="algorithm1" (the paper's loop in prompt units, per machine, on the
    sketches) against the view's NumPy run on the network's internal stream, with the fitted
    global constants the data block carries; L steps, info L, no certificate."""
    from eagle_probe.fit import algorithm1

    cfg = ModelConfig(
        n=6, d=5, n_layers=3, regime=regime, machines=3, rank=3, normalize="spectral",
        dtype="float64",
    )  # fmt: skip
    model = plant(cfg, [0.4, 0.3, 0.2], [0.9, 0.7, 0.5])
    task = TaskConfig(n=6, d=5, rank=4)
    ex = extract(model, task, probe_batch_size=16, control=False, test_batch=16, tuning_batch=16,
                 views=("eagle", "fidelity", "algorithm1"))  # fmt: skip
    data = ex.to_json()
    path = write_solver(tmp_path / "solver.py", data, ex.projectors)
    solver = _load(path)
    g = data["views"]["algorithm1"]["readings"]["global"]
    form, machines = ALGORITHM1_FORMS[regime]
    want = {"eta": g["eta"], "gamma": g["gamma"], "steps": 3, "form": form, "machines": machines}
    assert solver.ALGORITHM1 == want
    line = next(ln for ln in path.read_text().split("\n") if ln.startswith("# mode='algorithm1'"))
    assert f"η = {g['eta']:.4g}, γ = {g['gamma']:.4g}" in line and "3 steps" in line
    geo = algorithm1.algorithm_geometry(ex.geometry)
    z0 = sample(task, len(SCALES), make_generator(9), dtype=torch.float64).z0().numpy()
    for z, k in zip(z0, SCALES, strict=True):
        A, B, C = k * z[:5, :6], k * z[5:, :6], k * z[:5, 6:]
        D, stats = solver.complete(A, B, C, mode="algorithm1", return_stats=True)
        ran = algorithm1.predict(k * z[None], geo, [g["eta"]] * 3, [g["gamma"]] * 3)[0]
        assert_close(D, ran)
        assert (stats["info"], stats["iterations"], stats["reason"]) == (3, 3, "fixed depth")


def test_algorithm1_mode_needs_its_constants_and_the_sketches_size():
    A, B, C = np.ones((3, 4)), np.ones((1, 4)), np.ones((3, 1))
    with pytest.raises(ValueError, match="no fitted Algorithm 1 constants"):
        solver_template.complete(A, B, C, mode="algorithm1")
    with pytest.raises(ValueError, match="algorithm1, faithful, normalized"):
        solver_template.complete(A, B, C, mode="other")
    data = {
        "model": {"regime": "constrained", "n": 4, "d": 3, "n_prime": 1, "d_prime": 1,
                  "normalize": "none", "machines": 1},
        "layers": [{"a_step": 0.1, "c_step": 0.1, "eta": 0.3, "gamma": 1.0, "fidelity": 0.0}],
        "views": {"algorithm1": {"supported": True, "form": "constrained", "machines": 1,
                                 "readings": {"global": {"eta": 0.5, "gamma": 1.0,
                                                         "layers": [{"layer": 0}]}}}},
    }  # fmt: skip
    ns: dict = {}
    exec(compile(solver_source(data, projectors=[np.eye(4).tolist()]), "solver", "exec"), ns)
    assert ns["complete"](A, B, C, mode="algorithm1").shape == (1, 1)
    with pytest.raises(ValueError, match="not n = 6"):
        ns["complete"](np.ones((3, 6)), np.ones((1, 6)), np.ones((3, 1)), mode="algorithm1")
    data["views"]["algorithm1"]["readings"]["global"]["eta"] = None  # not finite in the JSON
    assert "ALGORITHM1 = None" in solver_source(data, projectors=[np.eye(4).tolist()])


def test_algorithm1_mode_runs_without_torch_scipy_or_eagle_probe(tmp_path):
    model, task = plants.eagle([0.4, 0.3], [0.9, 0.7], normalize="spectral", n=6, d=5)
    ex = extract(model, task, probe_batch_size=16, control=False, test_batch=16, tuning_batch=16,
                 views=("eagle", "fidelity", "algorithm1"))  # fmt: skip
    path = write_solver(tmp_path / "solver.py", ex.to_json())
    check = (
        "A = np.random.default_rng(0).standard_normal((5, 6))\n"
        "D = m.complete(A, np.ones((2, 6)), np.ones((5, 2)), mode='algorithm1')\n"
        "assert D.shape == (2, 2) and np.all(np.isfinite(D))"
    )
    out = run_numpy_only(path, check)
    assert out.stdout.strip() == "ok", out.stderr
