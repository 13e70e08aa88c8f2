import json

import numpy as np
import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.capture import capture, probe_batch
from eagle_probe.cli import main
from eagle_probe.errors import EagleProbeError
from eagle_probe.extract import extract
from eagle_probe.fit import eagle_expansion, fit_polynomial
from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
from eagle_probe.tasks import Prompt, TaskConfig


def planted(a, c, *, heads=1, dtype="float64", n=8, d=6, n_prime=2, d_prime=2):
    cfg = ModelConfig(
        n=n,
        d=d,
        n_prime=n_prime,
        d_prime=d_prime,
        n_layers=len(a),
        n_heads=heads,
        normalize="none",  # the planted steps act on the prompt itself
        dtype=dtype,
    )
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, a, c))
    task = TaskConfig(n=n, d=d, n_prime=n_prime, d_prime=d_prime, rank=min(4, n, d))
    return model, task


CASES = [
    ([0.05, 0.04, 0.03], [0.09, 0.08, 0.07], 1),
    ([0.02, 0.0, 0.05, 0.01], [0.1, 0.05, 0.02, 0.08], 3),
    ([0.01], [0.2], 2),
]


@pytest.mark.parametrize("a, c, heads", CASES)
@pytest.mark.parametrize("dtype, tol", [("float64", 1e-8), ("float32", 1e-4)])
def test_planted_steps_are_recovered(a, c, heads, dtype, tol):
    model, task = planted(a, c, heads=heads, dtype=dtype)
    ex = extract(model, task, probe_batch_size=64, control=False, test_batch=64, tuning_batch=64)
    np.testing.assert_allclose(ex.layers.a_step, a, rtol=tol, atol=tol * max(a))
    np.testing.assert_allclose(ex.layers.c_step, c, rtol=tol)
    assert (ex.layers.r2 > 1 - 1e-10).all() and (ex.layers.one_step_residual < 1e-6).all()
    assert (ex.layers.fidelity < 1e-20).all()
    # the readout-sign convention: the D slot moves by -c B Aᵀ C, like C moves by -c A Aᵀ C
    np.testing.assert_allclose(ex.layers.c_from_D, ex.layers.c_from_C, rtol=1e-6)
    # each head carries 1/heads of every layer's update
    shares = ex.fits[ex.fits["head"] >= 0].share
    np.testing.assert_allclose(shares, 1 / heads, rtol=1e-6)


def test_gradient_descent_plants_have_only_order_zero():
    model, task = planted([0, 0, 0, 0], [0.02, 0.03, 0.01, 0.02], heads=2)
    ex = extract(model, task, probe_batch_size=64, control=False, test_batch=64, tuning_batch=64)
    assert all(list(o) == [0] for o in ex.fits.orders)
    assert set(ex.terms.order) == {0}
    layer_terms = ex.terms[ex.terms["head"] == -1]
    np.testing.assert_allclose(layer_terms.alpha, [-0.02, -0.03, -0.01, -0.02], rtol=1e-9)
    assert (ex.layers.a_step.abs() < 1e-12).all()


def test_design_form_matches_the_eagle_expansion_at_low_depth():
    a, c = [0.04, 0.03, 0.02], [0.1, 0.09, 0.08]
    model, task = planted(a, c)
    ex = extract(model, task, probe_batch_size=64, control=False, test_batch=64, tuning_batch=64)
    expected = eagle_expansion(a, c)
    for layer in (0, 1):
        fitted = ex.terms[(ex.terms.layer == layer) & (ex.terms["head"] == -1)]
        np.testing.assert_allclose(fitted.alpha, -expected[layer], rtol=1e-7, atol=1e-12)
        assert list(fitted.order) == list(range(2 * layer + 1))
    assert (ex.layers.expansion_gap < 1e-6).all()


def test_expansion_orders_follow_the_recursion():
    degrees = [len(b) - 1 for b in eagle_expansion([0.1] * 4, [0.2] * 4)]
    assert degrees == [0, 2, 8, 26]


def test_polynomial_fit_recovers_a_known_filter_and_picks_its_degree():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((40, 6, 6))
    G = M @ M.transpose(0, 2, 1) / 6
    r = rng.standard_normal((40, 6, 2))
    beta = np.array([-0.5, 0.2, -0.03])
    dx = beta[0] * r + beta[1] * G @ r + beta[2] * G @ G @ r
    fit = fit_polynomial(G, r, dx)
    assert fit.degree == 2 and fit.r2 > 1 - 1e-12
    np.testing.assert_allclose(fit.beta, beta, rtol=1e-8)


def test_query_linearity_is_measured():
    model, task = planted([0.05, 0.04], [0.09, 0.08])
    cap = capture(model, probe_batch(task, 16, 0))
    assert (cap.linearity_deviation < 1e-12).all()
    # a value path from A into the C/D columns makes D affine, not linear, in the query
    with torch.no_grad():
        model.blocks[0].attn.W_P[0, -1, 0] = 0.3
    cap = capture(model, probe_batch(task, 16, 0))
    assert cap.linearity_deviation[1:].max() > 1e-3


def test_untrained_control_is_separated_from_a_planted_model():
    model, task = planted([0.05, 0.04, 0.03], [0.09, 0.08, 0.07])
    ex = extract(model, task, probe_batch_size=64, test_batch=64, tuning_batch=64, seed=3)
    ctrl_r2 = [lay["r2"] for lay in ex.control["polynomial"].json["layers"]]
    ctrl_gap = [lay["one_step"]["relative"] for lay in ex.control["fidelity"].json["layers"]]
    assert all(r < 0.5 for r in ctrl_r2) and (ex.layers.r2 > 0.999).all()
    assert all(g > 0.5 for g in ctrl_gap)
    assert (ex.layers.fidelity_rel < 1e-12).all() and (
        ex.layers.fidelity_one_step_rel < 1e-12
    ).all()


def test_weight_structure_and_simplified_model():
    model, task = planted([0.05, 0.04], [0.09, 0.08], heads=2)
    ex = extract(model, task, probe_batch_size=32, control=False, test_batch=256, tuning_batch=32)
    assert ex.weights.W_QK.tolist() == ["diag(1 I_8, 0)"] * 4
    assert ex.weights.W_VP.iloc[0] == "diag(-0.025 I_8, -0.045 I_2)"
    assert ex.test["simplified_mse"] == pytest.approx(ex.test["mse"], rel=1e-9)


def test_degenerate_probe_is_refused():
    model, _ = planted([0.05], [0.09])
    zero = Prompt(
        torch.zeros(2, 6, 8), torch.ones(2, 2, 8), torch.ones(2, 6, 2), torch.zeros(2, 2, 2)
    )
    with pytest.raises(EagleProbeError, match="all zero"):
        capture(model, zero)


def test_cli_plant_then_extract(tmp_path, capsys):
    ckpt = tmp_path / "planted.pt"
    assert (
        main(
            [
                "plant",
                "--n",
                "8",
                "--d",
                "6",
                "--a-steps",
                "0.05,0.04",
                "--c-steps",
                "0.09,0.08",
                "--heads",
                "2",
                "--dtype",
                "float64",
                "-o",
                str(ckpt),
            ]
        )
        == 0
    )
    out = tmp_path / "ex"
    assert main(["extract", str(ckpt), "--out", str(out), "--probe-batch", "32"]) == 0
    printed = capsys.readouterr().out
    assert "layer" in printed and "fid 1-step" in printed and "W_QK = diag(1 I_8, 0)" in printed
    data = json.loads((out / "extraction.json").read_text())
    assert data["model"]["sha256"] == checkpoint.sha256(ckpt)
    layers = data["layers"]
    assert [round(lay["a_step"], 10) for lay in layers] == [0.05, 0.04]
    for key in ("a_step", "c_step", "eta", "gamma", "fidelity", "fidelity_one_step", "label"):
        assert key in layers[0]
    for view in ("eagle", "fidelity", "projection", "optimum", "polynomial", "verdict"):
        assert view in data["views"]
    proj = data["views"]["projection"]["layers"]
    assert [round(lay["a_step"], 10) for lay in proj] == [0.05, 0.04]
    # an existing, non-empty output directory needs --force
    assert main(["extract", str(ckpt), "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["plant", "--a-steps", "0.1,0.2", "--c-steps", "0.1", "-o", "p.pt"], "has 2 values"),
        (["plant", "--a-steps", "x", "--c-steps", "0.1", "-o", "p.pt"], "comma-separated"),
        (["plant", "--a-steps", "0.1", "--c-steps", "nan", "-o", "p.pt"], "finite"),
        (
            ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--dtype", "int8", "-o", "p.pt"],
            "unknown dtype",
        ),
    ],
)
def test_plant_user_errors(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "p.pt").exists()
