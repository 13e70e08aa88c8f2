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


# --- the steps' intervals over the probe prompts (bootstrap) --------------------------------------


def test_an_exact_stream_gives_intervals_of_no_width_around_its_steps():
    """Every prompt of Algorithm 1's own stream gives the same step: each resample does too."""
    table = eagle.fit_steps(capture(stream()), geometry())
    for name, want in (("a_step", A_STEPS), ("c_step", C_STEPS)):
        np.testing.assert_allclose(table[f"{name}_lo"], want, rtol=RTOL)
        np.testing.assert_allclose(table[f"{name}_hi"], want, rtol=RTOL)
    # η's maximum ‖A_l‖₂² is retaken on each resample: never above the batch's, so never above η
    assert (table.eta_hi <= table.eta * (1 + RTOL)).all()
    assert (table.eta_lo < table.eta).all()


def test_a_noisy_stream_gives_intervals_that_hold_the_step_and_shrink_with_more_prompts():
    Z = stream()
    rng = np.random.default_rng(3)
    Z[1:] += 2e-3 * rng.standard_normal(Z[1:].shape)  # every layer's update, noisy per prompt
    table = eagle.fit_steps(capture(Z), geometry())
    assert (table.a_step_lo < table.a_step).all() and (table.a_step < table.a_step_hi).all()
    assert (table.c_step_lo < table.c_step).all() and (table.c_step < table.c_step_hi).all()
    width = (table.c_step_hi - table.c_step_lo).to_numpy()
    few = eagle.fit_steps(capture(Z).first(4), geometry())
    assert ((few.c_step_hi - few.c_step_lo).to_numpy() > width).all()


def test_the_bootstrap_interval_covers_a_known_ratio_about_as_often_as_it_claims():
    """Per-prompt sums with a known ratio of means (−2): over 200 batches of 60 prompts the 95%
    interval of −Σ num / Σ den holds it 0.88–0.99 of the time (binomial 200 × 0.95: sd 0.015)."""
    rng = np.random.default_rng(11)
    counts = eagle.resample_counts(60, 0)
    held = 0
    for _ in range(200):
        den = rng.uniform(0.5, 1.5, 60)
        num = 2.0 * den + rng.standard_normal(60)
        lo, hi = eagle.step_intervals(counts, (num, den), np.ones(60))["step"]
        held += lo <= -2.0 <= hi
    assert 0.88 <= held / 200 <= 0.99
