"""Every view on sample-layout models whose algorithm is known: GD, GD++ and preconditioned GD
planted from their equations (von Oswald et al. 2023, Ahn et al. 2023; `layouts.gd_products` and
its siblings, loaded by tests/plants.py).

Sample layout, rows [x, y]: one layer is H ← H + ((H W_QK Hᵀ) ⊙ M_s) H W_VP / n. In the blocks
of Z = Hᵀ that is ΔZ = W_VPᵀ (Z_s Z_sᵀ) W_QKᵀ Z / n over the n sample columns Z_s, so
  GD        W_QK = diag(I_d, 0), W_VP = diag(0, −η):     B += −(η/n) B AᵀA,  D += −(η/n) B AᵀC
  GD++      W_VP = diag(−γ I_d, −η) adds                 A += −(γ/n) A AᵀA,  C += −(γ/n) A AᵀC
  precond.  W_QK = diag(Γ, 0), W_VP = diag(0, −η):       B += B Aᵀ W A, D += B Aᵀ W C, W = −(η/n) Γᵀ
"""

from __future__ import annotations

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, assert_close
from probe_context import assert_jacobian_matches_finite_differences

from eagle_probe import layouts
from eagle_probe.extract import build_context, extract
from eagle_probe.fit import optimum
from eagle_probe.tasks import TaskConfig

D, N = 4, 10
E = D + 1
TASK = TaskConfig(task="least_squares", n=N, d=D, n_prime=1, d_prime=1, alpha=1.0)
ETAS, GAMMAS = [0.5, 0.4], [0.3, 0.2]
PRECONDITIONERS = [
    np.eye(D) + 0.3 * np.random.default_rng(5 + k).standard_normal((D, D)) for k in range(2)
]


def gd(etas=ETAS) -> tuple[np.ndarray, np.ndarray]:
    return layouts.gd_products(D, 1, etas)


def gdpp(etas=ETAS, gammas=GAMMAS) -> tuple[np.ndarray, np.ndarray]:
    return layouts.gdpp_products(D, 1, etas, gammas)


def preconditioned(etas=ETAS, gammas=PRECONDITIONERS) -> tuple[np.ndarray, np.ndarray]:
    return layouts.preconditioned_products(D, 1, etas, gammas)


def model_of(qk: np.ndarray, vp: np.ndarray, normalize: str = "none", n_prime: int = 1):
    return plants.samples(qk, vp, n=N, d=D, n_prime=n_prime, normalize=normalize)


def run(qk, vp, **kw):
    kw = {"probe_batch_size": 64, "test_batch": 256, "tuning_batch": 128, **kw}
    return extract(model_of(qk, vp), TASK, **kw)


@pytest.fixture(scope="module")
def extractions():
    return {
        "GD": run(*gd()),
        "GD++": run(*gdpp()),
        "preconditioned GD": run(*preconditioned()),
    }


def _rel(got, want) -> float:
    got, want = np.asarray(got, float), np.asarray(want, float)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _terms(ex) -> list[dict[str, np.ndarray]]:
    return [
        {t["name"]: np.asarray(t["coefficient"]) for t in lay["terms"]}
        for lay in ex.views["terms"].json["layers"]
    ]


def expected_terms(name: str) -> list[dict[str, np.ndarray]]:
    out = []
    for layer, eta in enumerate(ETAS):
        if name == "preconditioned GD":
            W = -eta / N * PRECONDITIONERS[layer].T
            out.append({"B+=BAt*W*A": W, "D+=BAt*W*C": W})
            continue
        terms = {"B+=BAtA": np.asarray(-eta / N), "D+=BAtC": np.asarray(-eta / N)}
        if name == "GD++":
            gamma = GAMMAS[layer]
            terms |= {"A+=AAtA": np.asarray(-gamma / N), "C+=AAtC": np.asarray(-gamma / N)}
        out.append(terms)
    return out


@pytest.mark.parametrize("name", ["GD", "GD++", "preconditioned GD"])
def test_terms_view_recovers_the_planted_algorithm_and_nothing_else(extractions, name):
    got = _terms(extractions[name])
    for layer, (have, want) in enumerate(zip(got, expected_terms(name), strict=True)):
        assert set(have) == set(want), (layer, sorted(have))
        for term, coef in want.items():
            assert _rel(have[term], coef) < 1e-6, (layer, term)


@pytest.mark.parametrize("name", ["GD", "GD++", "preconditioned GD"])
def test_verdict_names_the_planted_algorithm(extractions, name):
    ex = extractions[name]
    assert ex.verdict["label"] == name
    assert ex.verdict["text"].endswith(f"Verdict: {name}.")
    assert "no term outside GD, GD++ and preconditioned GD" in ex.verdict["text"]
    labels = [lay["label"] for lay in ex.views["verdict"].json["layers"]]
    # GD++'s first layer is a plain GD step on the iterate; it preconditions the next one's data
    assert labels == {"GD": ["GD", "GD"], "GD++": ["GD", "GD++"]}.get(name, [name, name])
    assert ex.table().verdict.tolist() == labels


def test_step_views_read_the_planted_gdpp_steps(extractions):
    ex = extractions["GD++"]
    a_want, c_want = np.array(GAMMAS) / N, np.array(ETAS) / N
    steps = ex.views["eagle"].tables["eagle"]
    assert _rel(steps.a_step, a_want) < RTOL and _rel(steps.c_step, c_want) < RTOL
    assert _rel(steps.a_from_C, a_want) < RTOL and _rel(steps.c_from_B, c_want) < RTOL
    assert "a_from_B" not in steps  # the sample layout ties A with C, B with D
    for lay in ex.views["fidelity"].json["layers"]:
        assert lay["one_step"]["relative"] < RTOL**2 and lay["end_to_end"]["relative"] < RTOL**2
        assert np.isnan(lay["paper"])
    proj = ex.views["projection"].json
    assert _rel([lay["a_step"] for lay in proj["layers"]], a_want) < RTOL
    assert _rel([lay["c_step"] for lay in proj["layers"]], c_want) < RTOL
    assert proj["projected_mse"] == pytest.approx(proj["network_mse"], rel=RTOL)
    assert proj["preconditioned_mse"] == pytest.approx(proj["network_mse"], rel=RTOL)
    # the GD++ steps imply the filter f_l = c_l m_l(λ)², m_{l+1} = m_l (1 − a_l λ m_l²), as EAGLE's
    for lay in ex.views["polynomial"].json["layers"]:
        assert lay["eagle_filter_gap"] < RTOL
    sym = ex.views["symbolic"].json["layers"][0]
    assert "0.05" in sym["B"] and "0.03" in sym["C"]  # B moves with c = η/n, C with a = γ/n


def test_optimum_distils_the_planted_steps_with_a_converged_optimizer(extractions):
    ex = extractions["GD++"]
    o = ex.views["optimum"].json
    dist = o["distilled"]
    assert _rel(dist["a_steps"], np.array(GAMMAS) / N) < 1e-6
    assert _rel(dist["c_steps"], np.array(ETAS) / N) < 1e-6
    assert dist["converged"] and dist["loss"] <= RTOL**2 * np.mean(ex.network_pred**2)  # MSE
    opt = o["optimal"]
    assert opt["converged"] and opt["relative_gradient"] <= optimum.GTOL
    assert o["optimal_mse"] < o["network_mse"]  # better GD++ steps than the planted ones


def test_weights_and_attribution_name_the_rows_x_and_y(extractions):
    ex = extractions["GD++"]
    heads = ex.views["weights"].json["heads"]
    assert heads[0]["W_QK"] == "diag(1 I_4, 0)" and heads[0]["W_VP"] == "diag(-0.3 I_4, -0.5 I_1)"
    assert set(heads[0]["qk_blocks"]) == {"XX", "XY", "YX", "YY", "offdiag_ratio"}
    # exact: the norm of a block of zeros, and of −0.5 alone
    assert heads[0]["qk_blocks"]["XY"] == 0.0 and heads[0]["vp_blocks"]["YY"] == 0.5
    att = ex.views["attribution"].json
    assert {(b["product"], b["block"]) for b in att["everywhere"]} == {
        ("W_QK", "XX"),
        ("W_VP", "XX"),
        ("W_VP", "YY"),
    }
    ratio = {(b["product"], b["block"]): b["ratio"] for b in att["everywhere"]}
    # without W_VP's YY block (the gradient step) the prediction stays 0
    zero = ex.network["zero_mse"] / ex.network["mse"]
    assert ratio["W_VP", "YY"] == pytest.approx(zero, rel=RTOL)


def test_preconditioned_gd_needs_the_free_block(extractions):
    proj = extractions["preconditioned GD"].views["projection"].json
    assert proj["preconditioned_mse"] == pytest.approx(proj["network_mse"], rel=RTOL)
    assert abs(proj["projected_mse"] / proj["network_mse"] - 1) > 0.01
    assert (
        extractions["preconditioned GD"].views["eagle"].json["layers"][0]["one_step_residual"] > 0.1
    )  # not one isotropic GD++ layer


@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_geometry_forward_is_the_network_in_the_sample_layout(normalize):
    g = torch.Generator().manual_seed(3)
    qk = 0.3 * torch.randn(2, 2, E, E, generator=g, dtype=torch.float64).numpy()
    vp = 0.3 * torch.randn(2, 2, E, E, generator=g, dtype=torch.float64).numpy()
    model = model_of(qk, vp, normalize)
    ctx = build_context(model, TASK, probe_batch_size=8, test_batch=32, tuning_batch=8)
    got = ctx.geometry.predict(ctx.held_out.z0, ctx.qk, ctx.vp)
    assert_close(got, ctx.network_pred)
    stream = ctx.geometry.stream(ctx.cap.Z[0] * ctx.cap.scale[:, None, None], ctx.qk, ctx.vp)
    assert_close(stream, ctx.cap.Z)


def test_jacobian_of_the_sample_family_matches_finite_differences():
    ctx = build_context(model_of(*gdpp()), TASK, probe_batch_size=8, test_batch=8, tuning_batch=16)
    geo, z0 = ctx.geometry, ctx.tuning.z0
    assert_jacobian_matches_finite_differences(geo, z0, np.array([0.02, 0.05, 0.04, 0.03]))


def test_no_eagle_solver_is_written_for_a_sample_layout_extraction(extractions):
    from eagle_probe.errors import EagleProbeError
    from eagle_probe.export import solver_source

    with pytest.raises(EagleProbeError, match="sample-layout"):
        solver_source(extractions["GD"].to_json())


def test_terms_recover_gdpp_split_over_heads_with_several_labels_and_queries():
    """Two heads carrying half of each step each, d' = n' = 2: the same four terms."""
    dp, L = 2, len(ETAS)
    width = D + dp
    qk, vp = np.zeros((L, 2, width, width)), np.zeros((L, 2, width, width))
    qk[:, :, :D, :D] = np.eye(D)
    for layer in range(L):
        vp[layer, :, D:, D:] = -ETAS[layer] / 2 * np.eye(dp)
        vp[layer, :, :D, :D] = -GAMMAS[layer] / 2 * np.eye(D)
    model = model_of(qk, vp, n_prime=2)
    task = TaskConfig(task="least_squares", n=N, d=D, n_prime=2, d_prime=dp, alpha=1.0)
    ex = extract(model, task, probe_batch_size=64, test_batch=64, tuning_batch=32)
    got = _terms(ex)
    for have, want in zip(got, expected_terms("GD++"), strict=True):
        assert set(have) == set(want)
        for term, coef in want.items():
            assert _rel(have[term], coef) < 1e-6, term
    assert ex.verdict["label"] == "GD++"
