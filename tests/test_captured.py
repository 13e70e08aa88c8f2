"""What a capture holds (`captured.py`): the blocks of the stream, the first k probes of every
array, the batch-max ‖A_l‖₂² (SVD here), and A Aᵀ, its eigenvalues and A Bᵀ of the input prompt,
computed once and read-only."""

import numpy as np
import pytest
from conftest import RTOL

from eagle_probe.captured import Capture

L, B, D, DP, N, NP, H = 2, 5, 3, 2, 4, 1, 2


@pytest.fixture
def cap() -> Capture:
    rng = np.random.default_rng(0)
    return Capture(
        d=D,
        n=N,
        Z=rng.standard_normal((L + 1, B, D + DP, N + NP)),
        scale=rng.random(B) + 0.5,
        x=rng.standard_normal((L + 1, B, D, DP)),
        dx_heads=rng.standard_normal((L, B, H, D, DP)),
        linearity_deviation=np.zeros(L + 1),
        target=rng.standard_normal((B, DP, NP)),
        units=rng.random((B, 1, N + NP)),
    )


def test_sizes_and_blocks(cap):
    assert (cap.layers, cap.heads) == (L, H)
    A, Bb, C, Dd = cap.blocks(1)
    Z = cap.Z[1]
    # exact: slices of the stream, nothing computed
    np.testing.assert_array_equal(A, Z[:, :D, :N])
    np.testing.assert_array_equal(Bb, Z[:, D:, :N])
    np.testing.assert_array_equal(C, Z[:, :D, N:])
    np.testing.assert_array_equal(Dd, Z[:, D:, N:])


def test_first_k_takes_the_first_probes_of_every_array(cap):
    two = cap.first(2)
    # exact: the first rows of each array, nothing computed
    for name in ("scale", "units", "target"):
        np.testing.assert_array_equal(getattr(two, name), getattr(cap, name)[:2])
    for name in ("Z", "x", "dx_heads"):
        np.testing.assert_array_equal(getattr(two, name), getattr(cap, name)[:, :2])
    assert cap.first(B) is cap


def test_a_norm2_is_the_batch_max_of_the_squared_spectral_norm(cap):
    for layer in range(L + 1):
        A = cap.Z[layer, :, :D, :N]
        per_prompt = np.array([np.linalg.svd(a, compute_uv=False)[0] ** 2 for a in A])
        # np.linalg.norm(ord=2) there, an SVD per prompt here
        assert cap.a_norm2(layer) == pytest.approx(per_prompt.max(), rel=RTOL)
        assert cap.a_norm2(layer) > 1.01 * per_prompt.mean()  # the max, not the mean


def test_a_stream_that_overflowed_has_an_infinite_a_norm(cap):
    Z = cap.Z.copy()
    Z[2, 0, 0, 0] = np.inf
    bad = Capture(**{**cap.__dict__, "Z": Z})
    assert bad.a_norm2(2) == float("inf") and np.isfinite(bad.a_norm2(1))


def test_normal_matrix_eigenvalues_and_rhs_of_the_input_prompt(cap):
    A, Bb = cap.Z[0, :, :D, :N], cap.Z[0, :, D:, :N]
    G = cap.normal_matrix()
    # exact: the same products and eigvalsh call on the same blocks, in this process
    np.testing.assert_array_equal(G, A @ A.transpose(0, 2, 1))
    np.testing.assert_array_equal(cap.normal_rhs(), A @ Bb.transpose(0, 2, 1))
    eig = cap.normal_eigenvalues()
    np.testing.assert_array_equal(eig, np.linalg.eigvalsh(A @ A.transpose(0, 2, 1)))
    assert (np.diff(eig, axis=-1) >= 0).all()
    assert cap.normal_matrix() is G  # computed once
    for array in (G, eig, cap.normal_rhs()):
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0] = 1.0
