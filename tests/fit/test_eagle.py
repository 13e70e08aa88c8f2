"""The EAGLE form fitted layer by layer (`fit/eagle.py`): on a stream that runs Algorithm 1
written out in NumPy (`conftest.numpy_eagle`, no network), the fit reads the steps back jointly
and per block, η and γ with the batch-max ‖A_l‖₂² taken here by SVD, and a zero one-step
residual; a departure in one block shows in that block's reading only."""

import numpy as np
import plants
import pytest
from conftest import RTOL, numpy_eagle

from eagle_probe import layouts
from eagle_probe.captured import Capture
from eagle_probe.fit import eagle

D, N, DP, NP, B = 6, 8, 2, 2, 16
A_STEPS, C_STEPS = [0.05, 0.03, 0.02], [0.09, 0.07, 0.04]


def geometry():
    return layouts.geometry_of(plants.eagle(A_STEPS, C_STEPS, n=N, d=D)[0], None)


def stream(seed=0):
    """(L + 1, b, T, E): Algorithm 1 from random prompts, the D slot carrying −D."""
    rng = np.random.default_rng(seed)
    A, Bm, C = (
        rng.standard_normal((B, D, N)),
        rng.standard_normal((B, DP, N)),
        rng.standard_normal((B, D, NP)),
    )
    Z = [
        np.concatenate([np.concatenate([A_l, C_l], -1), np.concatenate([B_l, -D_l], -1)], -2)
        for A_l, B_l, C_l, D_l in numpy_eagle(A, Bm, C, A_STEPS, C_STEPS)
    ]
    return np.stack(Z)


def capture(Z) -> Capture:
    L = Z.shape[0] - 1
    return Capture(
        d=D,
        n=N,
        Z=Z,
        scale=np.ones(B),
        x=np.zeros((L + 1, B, D, DP)),
        dx_heads=np.zeros((L, B, 1, D, DP)),
        linearity_deviation=np.zeros(L + 1),
        target=np.zeros((B, DP, NP)),
    )


def test_the_steps_of_algorithm_1_are_read_back_jointly_and_per_block():
    Z = stream()
    table = eagle.fit_steps(capture(Z), geometry())
    np.testing.assert_allclose(table.a_step, A_STEPS, rtol=RTOL)
    np.testing.assert_allclose(table.c_step, C_STEPS, rtol=RTOL)
    for col, want in (
        ("a_from_A", A_STEPS),
        ("a_from_B", A_STEPS),
        ("c_from_C", C_STEPS),
        ("c_from_D", C_STEPS),
    ):
        np.testing.assert_allclose(table[col], want, rtol=RTOL)
    assert (table.one_step_residual < RTOL).all()
    for layer in range(len(A_STEPS)):
        norm2 = max(np.linalg.svd(a, compute_uv=False)[0] ** 2 for a in Z[layer, :, :D, :N])
        assert table.eta[layer] == pytest.approx(A_STEPS[layer] * norm2, rel=RTOL)
        assert table.gamma[layer] == pytest.approx(C_STEPS[layer] * norm2, rel=RTOL)


def test_a_departure_in_the_c_block_shows_there_only():
    Z = stream()
    Z[2, :, :D, N:] += 1e-3 * np.random.default_rng(1).standard_normal((B, D, NP))  # layer 1's C
    table = eagle.fit_steps(capture(Z), geometry())
    assert table.one_step_residual[1] > 1e-6
    assert table.c_from_D[1] == pytest.approx(C_STEPS[1], rel=RTOL)
    assert table.c_from_C[1] != pytest.approx(C_STEPS[1], rel=1e-6)
    assert table.a_from_A[1] == pytest.approx(A_STEPS[1], rel=RTOL)


def test_each_call_returns_its_own_copy_of_the_kept_fit():
    cap, geo = capture(stream()), geometry()
    first = eagle.fit_steps(cap, geo)
    first.loc[0, "a_step"] = 99.0
    assert eagle.fit_steps(cap, geo).a_step[0] == pytest.approx(A_STEPS[0], rel=RTOL)


def test_the_family_choice_compares_the_prediction_gap_where_there_is_one():
    assert eagle.family_key([{"one_step_residual": 0.1, "prediction_gap": 0.2}]) == "prediction_gap"
    assert eagle.family_key([{"one_step_residual": 0.1}]) == "one_step_residual"
    assert eagle.family_key([]) == "one_step_residual"
