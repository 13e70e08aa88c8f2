"""Work the views share or skip gives the numbers of the plain computation: the layer through
the key Gram, merged heads, a NaN stream left uncomputed, the optimum's normalised starts from
the kept singular values, and the capture's spectral norms computed once."""

import numpy as np
import pytest
from conftest import RTOL
from plants import eagle as planted_model

from eagle_probe.capture import capture, probe_batch
from eagle_probe.extract import geometry_of
from eagle_probe.fit import optimum
from eagle_probe.fit.geometry import Geometry, merge_heads


def geometry(samples: bool, mask: np.ndarray, heads: int = 3) -> Geometry:
    return Geometry(
        regime="centralized",
        d=6,
        n=8,
        d_prime=2,
        n_prime=2,
        heads=heads,
        layers=1,
        mask=mask,
        layout="samples" if samples else "features",
    )


def through_scores(g: Geometry, Z: np.ndarray, qk: np.ndarray, vp: np.ndarray) -> np.ndarray:
    """Z + Σ_h ((H W_QK^h Hᵀ) ⊙ M) H W_VP^h on H = Z (features) or Zᵀ (samples), head by head."""
    H = Z.swapaxes(-1, -2) if g.samples else Z
    m = g.mask * g.key_scale
    out = H + sum(((H @ q @ H.swapaxes(-1, -2)) * m) @ H @ v for q, v in zip(qk, vp, strict=True))
    return out.swapaxes(-1, -2) if g.samples else out


@pytest.mark.parametrize("samples", [False, True])
def test_the_layer_through_the_key_gram_is_the_layer_through_the_scores(samples):
    rng = np.random.default_rng(0)
    T, E = (10, 8) if samples else (8, 10)  # the stream as the layers see it is (b, T, E)
    mask = np.zeros((T, T))
    mask[:, : (8 if samples else 6)] = 1.0  # every token attends to the same keys
    g = geometry(samples, mask)
    Z = rng.standard_normal((300, 8, 10))  # more prompts than one chunk
    qk, vp = rng.standard_normal((2, 3, E, E))
    qk[2] = qk[0]  # heads 0 and 2 share W_QK: merged
    want = through_scores(g, Z, qk, vp)
    got = g.layer(Z, qk, vp)
    assert got.shape == Z.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * np.abs(want).max())


def test_a_mask_that_differs_between_tokens_keeps_the_scores():
    rng = np.random.default_rng(1)
    mask = np.zeros((8, 8))
    mask[:, :6] = 1.0
    mask[:4, 3:6] = 0.0  # block-diagonal-like: tokens see different keys
    g = geometry(False, mask)
    Z = rng.standard_normal((20, 8, 10))
    qk, vp = rng.standard_normal((2, 3, 10, 10))
    want = through_scores(g, Z, qk, vp)
    np.testing.assert_allclose(g.layer(Z, qk, vp), want, rtol=0, atol=RTOL * np.abs(want).max())


def test_heads_with_equal_w_qk_merge_into_one_with_the_summed_w_vp():
    rng = np.random.default_rng(2)
    qk, vp = rng.standard_normal((2, 4, 5, 5))
    qk[1], qk[3] = qk[0], qk[2]
    mqk, mvp = merge_heads(qk, vp)
    assert mqk.shape[0] == 2
    np.testing.assert_array_equal(mqk, qk[[0, 2]])  # exact: copies
    np.testing.assert_allclose(mvp, np.stack([vp[0] + vp[1], vp[2] + vp[3]]), rtol=RTOL)
    q, v = rng.standard_normal((2, 3, 5, 5))
    assert merge_heads(q, v)[0] is q  # nothing to merge: the same arrays


def test_a_stream_that_is_nan_everywhere_stays_nan_with_its_shape():
    mask = np.zeros((8, 8))
    mask[:, :6] = 1.0
    g = geometry(False, mask)
    Z = np.full((3, 8, 10), np.nan)
    out = g.layer(Z, np.ones((3, 10, 10)), np.zeros((3, 10, 10)))
    assert out.shape == Z.shape and np.isnan(out).all() and out is not Z
    partly = Z.copy()
    partly[0, 0, 0] = 1.0  # one finite entry: computed as usual
    qk, vp = np.zeros((2, 3, 10, 10))
    with np.errstate(invalid="ignore"):  # exact: zero products add exact zeros, or NaN
        np.testing.assert_array_equal(g.layer(partly, qk, vp), through_scores(g, partly, qk, vp))


def svd_normalised_steps(geo, z0, eta, gamma):
    """The normalisation of `optimum.normalised_steps` with an SVD of every A_l."""
    A = geo.blocks(z0 / geo.prompt_scale(z0)[:, None, None])[0]
    a_steps, c_steps = [], []
    for e, g in zip(eta, gamma, strict=True):
        norm2 = float(np.linalg.norm(A, ord=2, axis=(-2, -1)).max() ** 2)
        a_steps.append(e / norm2)
        c_steps.append(g / norm2)
        A = A - a_steps[-1] * (A @ (A.swapaxes(-1, -2) @ A))
    return a_steps, c_steps


@pytest.mark.parametrize("normalize", ["none", "spectral"])
def test_normalised_starts_from_singular_values_match_an_svd_of_every_layer(normalize):
    model, task = planted_model([0.05, 0.04, 0.03], [0.09, 0.08, 0.07], normalize=normalize)
    cap = capture(model, probe_batch(task, 32, 0))
    geo = geometry_of(model, model.W_QK().detach().numpy())
    assert optimum.spectral(geo)
    z0 = probe_batch(task, 32, 3).z0().numpy()
    eta, gamma = [1.3, 0.4, 2.0], [1.9, 0.7, 1.1]
    got = optimum.normalised_steps(geo, z0, eta, gamma)
    want = svd_normalised_steps(geo, z0, eta, gamma)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    # the capture's batch-max spectral norms: computed once, the SVD's numbers
    A = cap.blocks(1)[0]
    # exact: the same NumPy calls on the same arrays
    assert cap.a_norm2(1) == float(np.linalg.norm(A, ord=2, axis=(-2, -1)).max() ** 2)
    np.testing.assert_array_equal(cap.normal_eigenvalues(), np.linalg.eigvalsh(cap.normal_matrix()))
