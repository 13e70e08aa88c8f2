"""The views' contract (`fit/base.py`): the Table-1 metric in prompt units (× s² per prompt, or
per column where every machine has its own scale), per block; the held-out prompts; the flop
budget a view scores within; one generator per view; the registry refuses a name twice."""

import numpy as np
import pytest
from conftest import RTOL

from eagle_probe.captured import Capture
from eagle_probe.fit import base
from eagle_probe.fit.geometry import Geometry

D, N, DP, NP = 3, 4, 2, 2  # A (d, n), B (d', n), C (d, n'), D (d', n')


def geometry(heads=1) -> Geometry:
    mask = np.zeros((D + DP, D + DP))
    mask[:, :D] = 1.0
    return Geometry(
        regime="centralized", d=D, n=N, d_prime=DP, n_prime=NP, heads=heads, layers=1, mask=mask
    )


def capture(scale, units=None, b=3) -> Capture:
    rng = np.random.default_rng(0)
    return Capture(
        d=D,
        n=N,
        Z=rng.standard_normal((2, b, D + DP, N + NP)),
        scale=np.asarray(scale, dtype=float),
        x=np.zeros((2, b, D, DP)),
        dx_heads=np.zeros((1, b, 1, D, DP)),
        linearity_deviation=np.zeros(2),
        target=np.zeros((b, DP, NP)),
        units=units,
    )


def test_table1_is_the_mean_squared_gap_times_the_squared_prompt_scale():
    cap = capture([1.0, 2.0, 10.0])
    gap2 = np.random.default_rng(1).random((3, D + DP, N + NP))
    expected = np.mean([gap2[i] * s**2 for i, s in enumerate([1.0, 2.0, 10.0])])
    assert base.table1(gap2, cap) == pytest.approx(expected, rel=RTOL)
    assert base.prompt_units(cap).shape == (3, 1, 1)


def test_table1_blocks_split_the_stream_and_sum_to_the_total():
    s = np.array([1.0, 3.0, 0.5])
    cap = capture(s)
    gap2 = np.random.default_rng(2).random((3, D + DP, N + NP))
    out = base.table1_blocks(gap2, cap, geometry())
    w = s[:, None, None] ** 2
    assert out["A"] == pytest.approx(np.mean(gap2[:, :D, :N] * w), rel=RTOL)
    assert out["B"] == pytest.approx(np.mean(gap2[:, D:, :N] * w), rel=RTOL)
    assert out["C"] == pytest.approx(np.mean(gap2[:, :D, N:] * w), rel=RTOL)
    assert out["D"] == pytest.approx(np.mean(gap2[:, D:, N:] * w), rel=RTOL)
    sizes = {"A": D * N, "B": DP * N, "C": D * NP, "D": DP * NP}
    total = sum(out[k] * sizes[k] for k in "ABCD") / ((D + DP) * (N + NP))
    assert out["total"] == pytest.approx(total, rel=RTOL)


def test_per_column_units_scale_each_column_by_its_own_machine():
    # two machines' A/B columns at scales 2 and 5, the C/D columns at 1
    cols = np.array([2.0, 2.0, 5.0, 5.0, 1.0, 1.0])
    units = np.broadcast_to(cols, (3, 1, N + NP)).copy()
    cap = capture(np.ones(3), units=units)
    gap2 = np.ones((3, D + DP, N + NP))
    out = base.table1_blocks(gap2, cap, geometry())
    assert out["A"] == pytest.approx(np.mean(cols[:N] ** 2))
    assert out["C"] == pytest.approx(1.0)
    assert base.table1(gap2, cap) == pytest.approx(np.mean(cols**2))


def test_held_out_prompts_score_and_take_the_first_k():
    D_true = np.arange(12.0).reshape(3, 2, 2)
    held = base.HeldOut(z0=np.zeros((3, 5, 6)), D=D_true)
    assert held.prompts == 3
    assert held.mse(D_true + 2.0) == pytest.approx(4.0)
    assert held.first(2).prompts == 2 and held.first(2).D[1].tolist() == D_true[1].tolist()
    assert held.first(7) is held


def test_a_view_affords_what_its_flops_allow_within_floor_limit_and_count():
    g = geometry(heads=2)
    per = base.layer_flops(g)
    assert per == 4.0 * 2 * (D + DP) * (N + NP) * ((D + DP) + (N + NP))
    assert base.affordable(g, 3, 1000, flops=30 * 3 * per) == 30
    assert base.affordable(g, 3, 1000, flops=30 * 3 * per, limit=10) == 10
    assert base.affordable(g, 3, 20, flops=30 * 3 * per) == 20  # no more than there is
    assert base.affordable(g, 3, 1000, flops=1.0) == base.SCORING_FLOOR
    assert base.affordable(g, 3, 1000, flops=1.0, floor=0) == 1  # at least one prompt


def test_each_view_gets_its_own_reproducible_generator():
    ctx = base.Context(*[None] * 5, tuning=None, network_pred=None, seed=7)
    a, b = ctx.rng(1).random(4), ctx.rng(2).random(4)
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(a, ctx.rng(1).random(4))  # exact: one seed, one generator
    other = base.Context(*[None] * 5, tuning=None, network_pred=None, seed=8)
    assert not np.allclose(a, other.rng(1).random(4))


def test_a_view_name_is_registered_once_in_run_order(monkeypatch):
    monkeypatch.setattr(base, "VIEWS", {})

    @base.register("first")
    def first(ctx):
        return base.ViewResult("first", {})

    base.register("second")(lambda ctx: base.ViewResult("second", {}))
    assert list(base.VIEWS) == ["first", "second"] and base.VIEWS["first"].run is first
    with pytest.raises(ValueError, match="'first' is registered twice"):
        base.register("first")(first)


def test_every_view_that_shows_text_or_figures_is_in_its_written_order():
    from eagle_probe import fit

    assert fit.shown("text") == list(fit.TEXT_ORDER)
    assert fit.shown("figures") == list(fit.FIGURE_ORDER)
