"""The solver file `extract` exports (`solver_template.py`), as shipped: no recovered layers, so
the theory's steps only; NumPy alone; its certificate tells a right answer from a wrong one.

The exported files, with a network's layers in them, are `test_export.py`'s."""

import numpy as np
import pytest
from conftest import run_numpy_only

from eagle_probe import solver_template


def test_template_imports_only_numpy():
    out = run_numpy_only(
        solver_template.__file__, "x, info = m.lstsq(np.eye(3), np.ones(3)); assert info == 0"
    )
    assert out.stdout.strip() == "ok", out.stderr


def _low_rank_blocks(seed: int):
    """A, B, C, D of X = [[A, C], [B, D]] with rank X = rank A = 4, so D = B A⁺ C exactly."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((9, 4)) @ rng.standard_normal((4, 10))
    return X[:7, :8], X[7:, :8], X[:7, 8:], X[7:, 8:]


def test_the_shipped_template_runs_the_theory_steps_to_the_answer():
    A, B, C, D = _low_rank_blocks(0)
    got, stats = solver_template.complete(A, B, C, return_stats=True)
    assert stats["info"] == 0 and stats["reason"] == "certified"
    assert stats["theory_steps"] == stats["iterations"] > 0 and stats["recovered_steps"] == 0
    np.testing.assert_allclose(got, D, rtol=0, atol=1e-9 * np.abs(D).max())
    assert solver_template.recovered_layers() == []
    b = np.random.default_rng(1).standard_normal(7)
    x, info = solver_template.lstsq(A, b)
    assert info == 0
    want = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.linalg.norm(x - want) <= 1e-9 * np.linalg.norm(want)
    with pytest.raises(ValueError, match="carries no recovered layers; use mode='normalized'"):
        solver_template.complete(A, B, C, mode="faithful")


def test_certify_tells_the_answer_from_one_off_by_a_millionth():
    A, B, C, D = _low_rank_blocks(2)
    right = solver_template.certify(A, B, C, D)
    assert right["certified"] and right["rank"] == 4
    assert right["error_estimate"] <= right["bound"] / 4
    wrong = solver_template.certify(A, B, C, D * (1 + 1e-6))
    assert not wrong["certified"]
    assert wrong["error_estimate"] == pytest.approx(1e-6, rel=1e-3)  # ‖δD‖_F / ‖D‖_F = 1e-6


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda A, B, C: solver_template.complete(A, B[:, :3], C), "B has 3 columns but A has 8"),
        (lambda A, B, C: solver_template.complete(A, B, C, eta=1.0), "eta must lie in (0, 1)"),
        (lambda A, B, C: solver_template.complete(A, B, C, gamma=2.0), "gamma must lie in (0, 2)"),
        (lambda A, B, C: solver_template.complete(A, B, C, mode="exact"), "unknown mode 'exact'"),
        (lambda A, B, C: solver_template.lstsq(A, np.ones(3)), "b has 3 rows but A has 7"),
        (lambda A, B, C: solver_template.complete(A * np.nan, B, C), "A contains NaN or Inf"),
    ],
)
def test_bad_blocks_and_options_are_refused_in_one_line(call, words):
    A, B, C, _ = _low_rank_blocks(3)
    with pytest.raises(ValueError) as err:
        call(A, B, C)
    assert words in str(err.value) and "\n" not in str(err.value)
