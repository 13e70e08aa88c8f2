"""The sample-token layout: forward, hooks, planted GD / GD++ / preconditioned GD recovered."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, assert_close
from von_oswald import GDPP, LSA, train

from eagle_probe import checkpoint, layouts
from eagle_probe.cli import main
from eagle_probe.extract import extract, runs_on
from eagle_probe.fit import VIEWS
from eagle_probe.fit.algorithm import R2_MIN
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig

# the views of a centralized model (the communication and sketch views read other regimes)
CENTRAL_VIEWS = {v for v in VIEWS if runs_on(v, "centralized")}

ROOT = Path(__file__).resolve().parents[1]
D, N = 4, 10
TASK = TaskConfig(task="least_squares", n=N, d=D, n_prime=1, d_prime=1, alpha=1.0)


def _reference(model: LinearTransformer, z0: np.ndarray) -> np.ndarray:
    """H = Zᵀ; H ← H + Σ_h ((H W_Q)(H W_K)ᵀ ⊙ M_s) H W_V W_Pᵀ / n; prediction −H[n:, d:]ᵀ."""
    cfg = model.cfg
    H = z0.swapaxes(-1, -2).copy()  # (b, n + n', d + d')
    M = np.zeros((cfg.n + cfg.n_prime,) * 2)
    M[:, : cfg.n] = 1.0
    for block in model.blocks:
        a = block.attn
        out = np.zeros_like(H)
        for h in range(cfg.heads):
            W_Q, W_K, W_V, W_P = (w[h].detach().numpy() for w in (a.W_Q, a.W_K, a.W_V, a.W_P))
            scores = (H @ W_Q) @ (H @ W_K).swapaxes(-1, -2) * M
            out += scores @ H @ W_V @ W_P.T / cfg.n
        H = H + out
    return -H[:, cfg.n :, cfg.d :].swapaxes(-1, -2)


def _random_model(**kw) -> LinearTransformer:
    cfg = ModelConfig(
        tokens="samples",
        n=N,
        d=D,
        n_prime=2,
        d_prime=2,
        n_layers=2,
        n_heads=2,
        normalize="none",
        dtype="float64",
        init_std=0.3,
        **kw,
    )
    return LinearTransformer(cfg, generator=torch.Generator().manual_seed(1)).eval()


def test_forward_matches_the_sample_layout_equation():
    model = _random_model()
    z0 = torch.randn(
        3, D + 2, N + 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    z0[:, D:, N:] = 0.0
    with torch.no_grad():
        got = model(z0).numpy()
    assert_close(got, _reference(model, z0.numpy()))


def test_hooks_carry_the_sample_stream():
    model = _random_model()
    z0 = torch.randn(5, D + 2, N + 2, dtype=torch.float64)
    _, cache = model.run_with_cache(z0)
    T, E = N + 2, D + 2
    assert cache["hook_embed"].shape == (5, T, E)
    torch.testing.assert_close(cache["hook_embed"], z0.transpose(1, 2))
    assert cache["blocks.1.attn.hook_attn_scores"].shape == (5, 2, T, T)
    assert cache["blocks.0.attn.hook_result"].shape == (5, T, 2, E)
    # no query row acts as a key
    # exact: the mask multiplies the query rows' scores by 0
    assert float(cache["blocks.0.attn.hook_attn_scores"][..., N:].abs().max()) == 0.0


def test_complete_keeps_the_block_semantics():
    """One Ahn GD layer predicts D = (η / n) B Aᵀ C."""
    eta = 0.8
    qk, vp = layouts.gd_products(D, 2, [eta])
    model = plants.samples(qk, vp, n=N, d=D, n_prime=3)
    g = torch.Generator().manual_seed(0)
    A, B, C = (
        torch.randn(2, *s, dtype=torch.float64, generator=g) for s in ((D, N), (2, N), (D, 3))
    )
    with torch.no_grad():
        got = model.complete(A, B, C)
    assert_close(got, eta / N * B @ A.transpose(1, 2) @ C)


def _algorithm(qk, vp, layers):
    model = plants.samples(qk, vp, n=N, d=D)
    assert model.cfg.n_layers == layers
    ex = extract(model, TASK, probe_batch_size=64, test_batch=64, tuning_batch=16, control=False)
    return ex, ex.views["algorithm"].json["layers"]


def _rel(got, want) -> float:
    got, want = np.asarray(got, float), np.asarray(want, float)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_planted_gd_is_order_zero_alone():
    etas = [0.5, 0.4, 0.3]
    ex, layers = _algorithm(*layouts.gd_products(D, 1, etas), 3)
    assert set(ex.views) == CENTRAL_VIEWS  # every view reads the sample layout
    for lay, eta in zip(layers, etas, strict=True):
        assert lay["label"] == "GD"
        assert lay["polynomial"]["orders"] == [0]
        assert _rel(lay["scalar"]["alpha_0"], -eta / N) < 1e-6
        assert lay["matrix"]["departure_from_scalar"] < RTOL  # a relative norm


def test_planted_gdpp_adds_the_data_preconditioning():
    """Layer 0 steps η_0 and moves the data by I − γ G / n; layer 1 steps η_1 through it:
    Δx_1 = (η_1 / n)(I − γ G / n)² r_1, orders 0, 1, 2 with α = −(η_1/n)(1, −2γ/n, γ²/n²)."""
    eta0, eta1, gamma = 0.5, 0.4, 0.3
    _, layers = _algorithm(*layouts.gdpp_products(D, 1, [eta0, eta1], [gamma, 0.0]), 2)
    assert layers[0]["label"] == "GD" and layers[0]["polynomial"]["orders"] == [0]
    assert _rel(layers[0]["scalar"]["alpha_0"], -eta0 / N) < 1e-6
    lay = layers[1]
    assert lay["label"] == "GD++"
    assert lay["polynomial"]["orders"] == [0, 1, 2]
    want = [-eta1 / N, 2 * eta1 * gamma / N**2, -eta1 * gamma**2 / N**3]
    for got, w in zip(lay["polynomial"]["alpha"], want, strict=True):
        assert abs(got - w) < 1e-6 * abs(w)
    assert lay["scalar"]["r2"] < R2_MIN  # plain GD does not explain it
    square = lay["squared_preconditioner"]
    assert abs(square["gamma"] / (gamma / N) - 1) < 1e-6 and square["square_gap"] < 1e-6


def test_planted_preconditioned_gd_recovers_the_matrix():
    rng = np.random.default_rng(5)
    etas = [0.5, 0.4]
    gammas = [np.eye(D) + 0.3 * rng.standard_normal((D, D)) for _ in etas]
    _, layers = _algorithm(*layouts.preconditioned_products(D, 1, etas, gammas), 2)
    for lay, eta, gamma in zip(layers, etas, gammas, strict=True):
        assert lay["label"] == "preconditioned GD"
        assert _rel(lay["matrix"]["gamma"], eta / N * gamma) < 1e-6
        assert lay["matrix"]["rel_residual"] < RTOL  # a relative norm
        assert lay["scalar"]["r2"] < R2_MIN and lay["polynomial"]["r2"] < R2_MIN


def test_imported_ahn_gd_is_order_zero_with_step_eta_over_n():
    eta = 0.7
    allparam = np.zeros((1, 1, 2, D + 1, D + 1))
    allparam[0, 0, 1, :D, :D] = -eta * np.eye(D)  # Q = −η [[I_d, 0], [0, 0]]
    allparam[0, 0, 0, D, D] = 1.0  # P = [[0, 0], [0, 1]]
    model, task = layouts.import_arrays("ahn", {"allparam": allparam}, n=N, dtype="float64")
    ex = extract(model, task, probe_batch_size=64, test_batch=64, tuning_batch=16, control=False)
    (lay,) = ex.views["algorithm"].json["layers"]
    assert lay["label"] == "GD" and lay["polynomial"]["orders"] == [0]
    assert _rel(lay["scalar"]["alpha_0"], -eta / N) < RTOL
    (row,) = ex.to_json()["layers"]
    assert row["label"] == "GD" and abs(row["c_step"] / (eta / N) - 1) < RTOL
    assert abs(row["a_step"]) < RTOL * eta / N  # no data preconditioning: plain GD
    assert ex.verdict["label"] == "GD" and "Verdict: GD." in ex.render()


def test_best_single_step_gain_is_one_over_n_plus_d_plus_one():
    """x ~ N(0, I_d), y = wᵀx, w ~ N(0, I/d): E(η x_qᵀ XᵀX w − x_qᵀ w)² = 1 − 2ηn + η²n(n+d+1)
    is least at η = 1/(n + d + 1). Checked by Monte Carlo on a grid of gains."""
    rng = np.random.default_rng(0)
    n, d, trials = 20, 10, 20000
    X = rng.standard_normal((trials, n, d))
    w = rng.standard_normal((trials, d)) / np.sqrt(d)
    xq = rng.standard_normal((trials, d))
    XtXw = np.einsum("tnd,tne,te->td", X, X, w)
    pred_unit = np.einsum("td,td->t", xq, XtXw)
    truth = np.einsum("td,td->t", xq, w)
    factors = np.linspace(0.7, 1.3, 13)
    risk = [np.mean((f / (n + d + 1) * pred_unit - truth) ** 2) for f in factors]
    assert factors[int(np.argmin(risk))] == pytest.approx(1.0)
    eta = 1 / (n + d + 1)
    assert np.mean((eta * pred_unit - truth) ** 2) == pytest.approx(1 - n / (n + d + 1), rel=0.03)


def test_shipped_one_layer_lsa_is_one_gd_step_with_the_optimal_gain():
    model, task, _ = checkpoint.load(ROOT / "trained_models" / "lsa_1layer.pt")
    assert model.cfg.tokens == "samples" and (task.n, task.d) == (20, 10)
    ex = extract(model, task, probe_batch_size=256, test_batch=256, tuning_batch=16, control=False)
    (lay,) = ex.views["algorithm"].json["layers"]
    want = -1 / (task.n + task.d + 1)
    assert abs(lay["scalar"]["alpha_0"] / want - 1) < 0.03
    assert lay["scalar"]["r2"] >= 0.999
    assert lay["label"] == "GD" and ex.verdict["label"] == "GD"
    from eagle_probe.fit import attribution

    figure = attribution.figures(ex)["attribution"]  # the XX, XY, YX, YY blocks drawn
    assert sum(len(ax.patches) for ax in figure.axes) == 8


def test_shipped_three_layer_lsa_is_gdpp():
    model, task, _ = checkpoint.load(ROOT / "trained_models" / "lsa_3layer.pt")
    ex = extract(model, task, probe_batch_size=256, test_batch=256, tuning_batch=16, control=False)
    layers = ex.views["algorithm"].json["layers"]
    assert [lay["label"] for lay in layers[1:]] == ["GD++", "GD++"]
    assert layers[1]["polynomial"]["orders"] == [0, 1, 2]
    assert layers[1]["squared_preconditioner"]["square_gap"] < 0.01  # α ∝ (1 − γλ)²
    assert ex.verdict["label"] == "GD++"


def test_cli_trains_a_sample_layout_model(tmp_path):
    out = tmp_path / "m.pt"
    argv = ["train", "--regime", "centralized", "--tokens", "samples", "--task", "least_squares"]
    argv += ["--alpha", "1", "--d", "3", "--n", "6", "--n-prime", "1", "--d-prime", "1"]
    argv += ["--layers", "1", "--normalize", "none", "--steps", "3", "--batch", "16"]
    argv += ["--eval-batch", "32", "--no-progress", "-o", str(out)]
    assert main(argv) == 0
    model, _, _ = checkpoint.load(out)
    assert model.cfg.tokens == "samples"
    assert tuple(model.blocks[0].attn.W_Q.shape) == (1, 4, 4)


def test_sample_layout_refuses_other_regimes():
    with pytest.raises(ValueError, match="sample layout"):
        ModelConfig(tokens="samples", regime="distributed", n=6, machines=3)
    with pytest.raises(ValueError, match="unknown tokens"):
        ModelConfig(tokens="rows")


def test_cli_extracts_a_sample_layout_model(tmp_path, capsys):
    import json

    out = tmp_path / "ex"
    path = ROOT / "trained_models" / "lsa_1layer.pt"
    assert main(["extract", str(path), "--out", str(out), "--probe-batch", "64"]) == 0
    data = json.loads((out / "extraction.json").read_text())
    assert data["model"]["tokens"] == "samples"
    assert set(data["views"]) == CENTRAL_VIEWS
    assert [lay["label"] for lay in data["layers"]] == ["GD"]
    assert data["views"]["verdict"]["model"]["label"] == "GD"
    assert (out / "report.html").is_file() and not (out / "solver.py").exists()
    assert data["export"]["solver"] is None and "EAGLE" in data["export"]["reason"]
    assert "Verdict: GD." in capsys.readouterr().out


# --- a researcher's own in-context regression models, trained here (not planted) ----------------

ND, NN = 3, 10  # d and N of the small models trained below


def _import(tmp_path: Path, state: dict, *flags: str) -> tuple[Path, str]:
    """`eagle-probe import --layout samples` of a state_dict; the checkpoint and what it printed."""
    torch.save(state, tmp_path / "source.pt")
    out = tmp_path / "model.pt"
    argv = ["import", "--layout", "samples", str(tmp_path / "source.pt"), "--n", str(NN)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv + [*flags, "-o", str(out)]) == 0
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def gdpp(tmp_path_factory):
    """Von Oswald et al.'s GD++ with two layers, trained by Adam from a random start: layer 0
    may only transform the data, layer 1 steps on the labels, and the model reads its prediction
    as +y_q. Saved as Hugging Face style nn.Linear weights, imported with --readout +1."""
    torch.manual_seed(0)
    source = GDPP(ND, 2, readout=1, label_steps="last").double()
    source = train(source, NN, ND, 100, seed=1, lr=5e-2, batch=256)
    path, printed = _import(
        tmp_path_factory.mktemp("gdpp"), source.linear_state_dict(), "--readout", "+1"
    )
    model, task, _ = checkpoint.load(path)
    ex = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=64)
    return source, printed, ex


def _off(got, want) -> float:
    return abs(float(got) / float(want) - 1.0)


def test_a_trained_two_layer_gdpp_is_named_gdpp_with_its_own_steps(gdpp):
    """γ_0 (layer 0's data transform) and η_1 (layer 1's step) are the source's own parameters
    over N; the table, the JSON and the algorithm view give them from the activations and from
    the weights to 2%, positive (downhill) although the model reads +y."""
    source, printed, ex = gdpp
    assert printed.splitlines()[0].startswith("readout +1")
    gamma0 = source.gamma[0].item() / NN
    eta1 = source.eta[1].item() / NN
    assert gamma0 > 0 and eta1 > 0  # what training found: a contraction, a descent step
    assert ex.verdict["label"] == "GD++" and ex.verdict["headline"].startswith("GD++, confidence")
    assert [lay["label"] for lay in ex.views["verdict"].json["layers"]] == ["GD++", "GD++"]
    table = ex.table()
    for column, want in (("gamma (act.)", gamma0), ("gamma (wts)", gamma0)):
        assert _off(table[column].iloc[0], want) <= 0.02, column
    for column in ("eta (act.)", "eta (wts)"):
        assert _off(table[column].iloc[1], eta1) <= 0.02, column
        assert abs(table[column].iloc[0]) <= 1e-6 * eta1  # layer 0 takes no step
    assert np.isnan(table["gamma (act.)"].iloc[1])  # the last layer's data never reach ŷ
    layers = ex.to_json()["layers"]
    assert (
        _off(layers[0]["gamma"], gamma0) <= 0.02
        and _off(layers[0]["gamma_weights"], gamma0) <= 0.02
    )
    assert _off(layers[1]["eta"], eta1) <= 0.02 and _off(layers[1]["eta_weights"], eta1) <= 0.02
    assert layers[1]["gamma"] is None
    algo = ex.views["algorithm"].json["layers"]
    assert algo[0]["fit"] == "stream" and algo[0]["step_share"] < 0.01
    assert _off(algo[0]["gdpp"]["gamma"], gamma0) <= 0.02
    assert _off(algo[1]["gdpp"]["eta"], eta1) <= 0.02
    assert _off(algo[1]["gdpp"]["eta_iterate"], eta1) <= 0.02  # α_0 = −η from the iterate
    # one contraction before the step: α ∝ (1 − γλ)², γ the source's own γ_0 / N
    assert _off(algo[1]["squared_preconditioner"]["gamma"], gamma0) <= 0.02
    assert not [w for w in ex.warnings if "--readout" in w]


def test_the_report_speaks_of_gdpp_and_its_figures_too(gdpp):
    from eagle_probe.plots import extraction_figures

    _, _, ex = gdpp
    lines = ex.render("m.pt").splitlines()
    assert lines[0].startswith("verdict: GD++, confidence")
    assert any(line.startswith("readout +1") for line in lines[:5])
    assert max(map(len, lines)) <= 100
    figures = extraction_figures(ex)
    for name, fig in figures.items():
        texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
        assert not [t for t in texts if "EAGLE" in t], (name, texts)
        assert not [t for t in texts if re.search(r"\de[+-]\d", t)], (name, texts)  # 10ⁿ
    assert "GD++" in figures["filters"].get_suptitle()
    bars = [p for ax in figures["attribution"].axes for p in ax.patches]
    assert len(bars) >= 4  # W_QK's XX and W_VP's XX, YY blocks of the two layers


def test_a_trained_one_layer_model_steps_as_its_weights_say():
    """von Oswald et al.'s LSA, one layer, a few hundred Adam steps: the GD step read from the
    activations, from the weights and from the iterate agree to 1%."""
    torch.manual_seed(1)
    source = train(LSA(ND, 1).double(), NN, ND, 150, seed=2, lr=2e-2, batch=256)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path, _ = _import(Path(tmp), source.state_dict())
        model, task, _ = checkpoint.load(path)
    ex = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=64, control=False)
    (lay,) = ex.views["verdict"].json["layers"]
    assert lay["label"] == "GD" and lay["eta"] > 0
    assert _off(lay["eta"], lay["eta_weights"]) <= 0.01
    assert _off(lay["eta_iterate"], lay["eta_weights"]) <= 0.01
    assert ex.table()["eta (wts)"].iloc[0] == lay["eta_weights"]
