"""Importers of other codebases' weights: the forward is reproduced, bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close

from eagle_probe import checkpoint, layouts
from eagle_probe.cli import main
from eagle_probe.errors import EagleProbeError
from eagle_probe.model import LinearTransformer, ModelConfig


def ahn_forward(allparam: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Ahn et al.'s forward, written from its equations: Z (N + 1, d + 1), rows [x_i, y_i], the
    query last with y = 0; per layer Attn = Z Q Zᵀ, key = Z Pᵀ, Output = Attn A_mask key / N,
    A_mask = I except A_mask[N, N] = 0, Z += Σ_h Output_h; prediction −Z[N, d]."""
    N = Z.shape[0] - 1
    d = Z.shape[1] - 1
    A_mask = np.eye(N + 1)
    A_mask[N, N] = 0.0
    for layer in allparam:
        total = np.zeros_like(Z)
        for head in layer:
            P, Q = head[0], head[1]
            attn = Z @ Q @ Z.T
            key = Z @ P.T
            total += attn @ A_mask @ key / N
        Z = Z + total
    return -Z[N, d]


def _prompt(rng: np.random.Generator, N: int, d: int) -> tuple[np.ndarray, torch.Tensor]:
    X = rng.standard_normal((N + 1, d))
    y = X[:N] @ rng.standard_normal(d)
    Z = np.zeros((N + 1, d + 1))
    Z[:, :d] = X
    Z[:N, d] = y
    # this project's block prompt [[A, C], [B, 0]] = Zᵀ
    return Z, torch.from_numpy(Z.T.copy()).unsqueeze(0)


def test_ahn_import_reproduces_the_source_forward_in_float64():
    rng = np.random.default_rng(3)
    N, d = 9, 4
    allparam = 0.3 * rng.standard_normal((2, 2, 2, d + 1, d + 1))
    model, task = layouts.import_arrays("ahn", {"allparam": allparam}, n=N, dtype="float64")
    assert model.cfg.tokens == "samples" and (task.n, task.d, task.d_prime) == (N, d, 1)
    for _ in range(5):
        Z, z0 = _prompt(rng, N, d)
        want = ahn_forward(allparam, Z)
        got = float(model(z0).detach()[0, 0, 0])
        assert abs(got - want) <= RTOL * abs(want)


def test_ahn_import_through_files_and_cli(tmp_path):
    rng = np.random.default_rng(4)
    N, d = 7, 3
    allparam = 0.3 * rng.standard_normal((2, 2, 2, d + 1, d + 1))
    np.savez(tmp_path / "w.npz", allparam=allparam)
    torch.save({"allparam": torch.from_numpy(allparam)}, tmp_path / "w.pt")
    Z, z0 = _prompt(rng, N, d)
    want = ahn_forward(allparam, Z)
    for name in ("w.npz", "w.pt"):
        out = tmp_path / f"{name}.model.pt"
        code = main(
            ["import", "--layout", "ahn", str(tmp_path / name), "--n", str(N)]
            + ["--dtype", "float64", "-o", str(out)]
        )
        assert code == 0
        model, _, _ = checkpoint.load(out)
        assert abs(float(model(z0).detach()[0, 0, 0]) - want) <= RTOL * abs(want)


def test_state_dict_import_round_trips_both_layouts(tmp_path):
    for tokens, layout in (("features", "eagle-probe"), ("samples", "samples")):
        cfg = ModelConfig(
            tokens=tokens,
            n=6,
            d=4,
            n_prime=1,
            d_prime=1,
            n_layers=2,
            n_heads=2,
            normalize="none",
            dtype="float64",
        )
        source = LinearTransformer(cfg, generator=torch.Generator().manual_seed(0))
        state = {
            k: v for k, v in source.state_dict().items() if k.endswith(("W_Q", "W_K", "W_V", "W_P"))
        }
        np.savez(tmp_path / f"{tokens}.npz", **{k: v.numpy() for k, v in state.items()})
        kwargs = {"d": 4, "d_prime": 1} if tokens == "features" else {}
        model, _ = layouts.import_file(
            layout, tmp_path / f"{tokens}.npz", n=6, dtype="float64", **kwargs
        )
        assert model.cfg.tokens == tokens
        z0 = torch.randn(3, 5, 7, dtype=torch.float64)
        assert_close(model(z0).detach(), source(z0).detach())


def test_products_round_trip():
    rng = np.random.default_rng(0)
    qk, vp = rng.standard_normal((2, 2, 2, 5, 5))
    cfg = layouts.sample_config(n=8, d=4, layers=2, heads=2)
    model = layouts.model_from_products(cfg, qk, vp)
    got_qk, got_vp = layouts.state_products(model)
    # exact: W_Q = W_QK, W_K = I (W_V, W_P likewise), and products with 1 and 0 do not round
    np.testing.assert_array_equal(got_qk, qk)
    np.testing.assert_array_equal(got_vp, vp)


def test_library_raises_on_bad_input():
    with pytest.raises(EagleProbeError, match="unknown layout"):
        layouts.import_arrays("keras", {}, n=3)
    with pytest.raises(EagleProbeError, match="positive integer"):
        layouts.import_arrays("ahn", {"allparam": np.zeros((1, 1, 2, 3, 3))}, n=2.5)
    with pytest.raises(EagleProbeError, match="NaN or Inf"):
        layouts.import_arrays("ahn", {"allparam": np.full((1, 1, 2, 3, 3), np.inf)}, n=2)
    weights = {"allparam": np.ones((1, 1, 2, 3, 3))}
    layouts.import_arrays("ahn", weights, n=2)
    np.testing.assert_array_equal(weights["allparam"], np.ones((1, 1, 2, 3, 3)))  # not mutated


def test_safetensors_file_is_read(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(6)
    N, d = 6, 3
    allparam = 0.3 * rng.standard_normal((1, 2, 2, d + 1, d + 1))
    st.save_file({"allparam": allparam}, str(tmp_path / "w.safetensors"))
    model, _ = layouts.import_file("ahn", tmp_path / "w.safetensors", n=N, dtype="float64")
    Z, z0 = _prompt(rng, N, d)
    want = ahn_forward(allparam, Z)
    assert abs(float(model(z0).detach()[0, 0, 0]) - want) <= RTOL * abs(want)


def test_a_distributed_state_dict_is_refused():
    cfg = ModelConfig(regime="distributed", n=6, d=4, n_prime=1, d_prime=1, machines=3)
    state = LinearTransformer(cfg).state_dict()
    arrays = {k: v.numpy() for k, v in state.items()}
    with pytest.raises(EagleProbeError, match="distributed"):
        layouts.import_arrays("eagle-probe", arrays, n=6)
