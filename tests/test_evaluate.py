"""A model's test numbers (`evaluate.py`): the summary of per-prompt errors (the worst prompt is
the largest error, a non-finite one counted and taken as the worst), and `evaluate` against the
same prompts' errors computed here. The shipped checkpoints' recorded numbers are reproduced in
`test_shipped.py`; the command's table and JSON in `cli/test_evaluate.py`."""

import math

import numpy as np
import pytest
import torch
from conftest import RTOL
from plants import eagle as planted_model

from eagle_probe.evaluate import (
    evaluate,
    model_readout_text,
    over_draws,
    prompt_errors,
    readout_sign,
    reference_errors,
    summarize,
    tails,
    trimmed_mean,
)
from eagle_probe.tasks import make_generator, sample


def _errors(model: list[float]) -> dict[str, torch.Tensor]:
    """Per-prompt errors of four prompts: the model's as given, the references fixed."""
    return {
        "model": torch.tensor(model, dtype=torch.float64),
        "zero": torch.tensor([2.0, 2.0, 2.0, 2.0], dtype=torch.float64),
        "flipped": torch.tensor([5.0, 6.0, 7.0, 8.0], dtype=torch.float64),
        "optimal": torch.tensor([0.0, 0.0, 0.0, 0.4], dtype=torch.float64),
        "norm_a": torch.tensor([1.5, 9.0, 3.0, 2.0], dtype=torch.float64),
    }


def test_the_summary_reads_the_worst_prompt_by_its_error():
    got = summarize(_errors([1.0, 4.0, 2.0, 3.0]))
    # exact: means and ratios of small integers, dyadic but 0.8 = 2 / 2.5 (the same rounding)
    assert got == {
        "prompts": 4,
        "mse": 2.5,
        "zero_mse": 2.0,
        "optimal_mse": pytest.approx(0.1),
        "median_mse": 2.0,  # of an even count, the lower middle value
        "trimmed_mse": 2.0,  # (1 + 2 + 3) / 3: the worst prompt of four dropped (at least one)
        "trimmed_prompts": 1,
        "worst_mse": 4.0,
        "worse_than_zero": 0.5,  # 4 and 3 above the zero predictor's 2 (2 is not above it)
        "worse_than_zero_prompts": 2,
        "worst_norm_a": 9.0,  # ‖A‖₂ of the worst prompt, here also the largest
        "max_norm_a": 9.0,
        "nonfinite_prompts": 0,
        "improvement": 0.8,  # zero / mse: below 1, worse than predicting zero
        "flipped_mse": 6.5,
    }
    other = summarize(_errors([4.0, 1.0, 2.0, 3.0]))
    assert other["worst_mse"] == 4.0 and other["worst_norm_a"] == 1.5


def test_a_non_finite_prompt_is_counted_and_is_the_worst():
    got = summarize(_errors([1.0, 4.0, math.inf, 3.0]))
    assert got["nonfinite_prompts"] == 1 and got["worst_mse"] == math.inf
    assert got["worst_norm_a"] == 3.0 and math.isinf(got["mse"])
    assert math.isnan(got["improvement"])
    alone = summarize({"model": torch.tensor([1.0, math.nan, 3.0], dtype=torch.float64)})
    assert alone["nonfinite_prompts"] == 1 and alone["worst_mse"] == math.inf


def test_the_tail_statistics_of_errors_known_by_hand():
    """Ten prompts, one of them a blow-up: every number written down by hand. int(0.999 × 10) =
    9 prompts are kept, so the trimmed mean drops the blow-up alone."""
    errors = np.array([4.0, 1.0, 3.0, 2.0, 1e6, 1.0, 7.0, 2.0, 4.0, 3.0])
    zero = np.full(10, 2.5)  # each prompt's mean of D²
    got = tails(errors, zero)
    # exact: sums of small integers; 1000027 / 10 is the same rounding either way
    assert got == {
        "prompts": 10,
        "mse": 1000027 / 10,  # (27 + 10⁶) / 10
        "median_mse": 3.0,  # sorted 1 1 2 2 3 | 3 4 4 7 10⁶: the lower of the middle two
        "trimmed_mse": 3.0,  # (1 + 1 + 2 + 2 + 3 + 3 + 4 + 4 + 7) / 9 = 27 / 9
        "trimmed_prompts": 1,
        "worst_mse": 1e6,
        "worse_than_zero": 0.6,  # 3 3 4 4 7 10⁶ above 2.5: 6 of 10
        "worse_than_zero_prompts": 6,
    }
    assert trimmed_mean(errors) == 3.0 and trimmed_mean(errors, keep=0.5) == 1.8  # 9 / 5
    # a NaN prompt is worse than zero and the worst; a prompt equal to its zero is not worse
    odd = tails(np.array([1.0, math.nan, 2.5]), np.array([2.0, 2.0, 2.5]))
    assert odd["worse_than_zero_prompts"] == 1 and odd["worst_mse"] == math.inf
    assert odd["trimmed_mse"] == 1.75  # int(0.999 × 3) = 2 kept: (1 + 2.5) / 2
    with pytest.raises(ValueError, match="shape"):
        tails(errors, zero[:9])


def test_one_prompt_cannot_move_the_median_or_the_trimmed_mean():
    """8,192 prompts: the worst prompt made 10³⁰ or infinite moves the mean by 10²⁶ and leaves
    the median and the trimmed mean exactly where they were; any one prompt made 10³⁰ moves the
    median at most to its neighbour and the trimmed mean by at most the largest error over the
    8,183 prompts it keeps."""
    errors = torch.rand(8192, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    base = tails(errors)
    assert base["trimmed_prompts"] == 9  # 8192 − int(0.999 × 8192) = 8192 − 8183
    for blow_up in (1e30, math.inf):
        worst = errors.clone()
        worst[int(errors.argmax())] = blow_up
        got = tails(worst)
        assert got["mse"] > 1e26
        # exact: the same order statistics, the same sorted values summed
        assert got["median_mse"] == base["median_mse"]
        assert got["trimmed_mse"] == base["trimmed_mse"]
    ordered = errors.sort().values
    middle = (8192 - 1) // 2  # torch's median: the lower middle value
    for index in (0, int(errors.argmin()), int(errors.argsort()[middle]), 4096):
        moved = errors.clone()
        moved[index] = 1e30
        got = tails(moved)
        assert ordered[middle] <= got["median_mse"] <= ordered[middle + 1]
        assert abs(got["trimmed_mse"] - base["trimmed_mse"]) <= float(ordered[-1]) / 8183


def test_the_interval_over_draws():
    """Four draws' numbers, the interval written by hand: the smallest, the median (the mean of
    the middle two) and the largest; an infinite draw is the largest, a missing number skipped."""
    draws = [
        {"mse": 3.0, "median_mse": 1.0},
        {"mse": 1.0, "median_mse": 1.5},
        {"mse": math.inf, "median_mse": 1.0},
        {"mse": 2.0, "median_mse": None},
    ]
    got = over_draws(draws, keys=("mse", "median_mse", "trimmed_mse"))
    assert got == {
        "mse": {"draws": 4, "low": 1.0, "median": 2.5, "high": math.inf},
        "median_mse": {"draws": 3, "low": 1.0, "median": 1.0, "high": 1.5},
    }


def test_evaluate_equals_the_errors_of_the_same_prompts_computed_here():
    model, task = planted_model([0.05, 0.04], [0.09, 0.08], normalize="spectral", n=6, d=6)
    got = evaluate(model, task, batch=96, seed=7)
    p = sample(task, 96, make_generator(7), dtype=torch.float64)
    with torch.no_grad():
        pred = model(p.z0()).numpy()
    D, A = p.D.numpy(), p.A.numpy()
    err = ((pred - D) ** 2).mean(axis=(-1, -2))
    norm_a = np.linalg.svd(A, compute_uv=False)[:, 0]
    assert got["prompts"] == 96
    assert got["mse"] == pytest.approx(err.mean(), rel=RTOL)
    assert got["zero_mse"] == pytest.approx((D**2).mean(), rel=RTOL)
    assert got["worst_mse"] == pytest.approx(err.max(), rel=RTOL)
    assert got["worst_norm_a"] == pytest.approx(norm_a[err.argmax()], rel=RTOL)
    assert got["max_norm_a"] == pytest.approx(norm_a.max(), rel=RTOL)
    assert got["flipped_mse"] == pytest.approx(((pred + D) ** 2).mean(), rel=RTOL)
    kept = np.sort(err)[: int(0.999 * 96)]  # 95 of 96: the worst prompt dropped
    assert got["trimmed_mse"] == pytest.approx(kept.mean(), rel=RTOL)
    zero = (D**2).mean(axis=(-1, -2))
    # a prompt whose error is within round-off of its zero predictor's could fall either way
    assert not np.any(np.isclose(err, zero, rtol=1e-6))
    assert got["worse_than_zero"] == np.mean(err > zero)
    assert readout_sign(model) == -1
    assert model_readout_text(model).startswith("readout -1")


def test_reference_errors_passed_in_are_those_computed_with_the_model():
    """Several models scored on the same prompts compute the model-free errors once: passed in,
    they give every number that computing them beside the model gives; the errors of other
    prompts are refused."""
    model, task = planted_model([0.05, 0.04], [0.09, 0.08], normalize="spectral", n=6, d=6)
    p = sample(task, 50, make_generator(3), dtype=torch.float64)
    reference = reference_errors(p, chunk=16)
    assert sorted(reference) == ["norm_a", "optimal", "zero"]
    D = p.D.numpy()
    np.testing.assert_allclose(reference["zero"].numpy(), (D**2).mean(axis=(-1, -2)), rtol=RTOL)
    np.testing.assert_allclose(
        reference["norm_a"].numpy(), np.linalg.svd(p.A.numpy(), compute_uv=False)[:, 0], rtol=RTOL
    )
    whole = prompt_errors(model, p, chunk=16)
    passed = prompt_errors(model, p, reference=reference, chunk=16)
    assert sorted(passed) == sorted(whole) == ["flipped", "model", "norm_a", "optimal", "zero"]
    for key, value in whole.items():  # exact: the same chunks through the same ops
        assert torch.equal(passed[key], value), key
    assert summarize(passed) == summarize(whole)  # exact: equal tensors summarised
    assert sorted(prompt_errors(model, p, reference=False)) == ["model"]
    with pytest.raises(ValueError, match="do not belong to these 49 prompts"):
        prompt_errors(model, p[:49], reference=reference)


def test_a_learned_readout_in_training_is_read_without_torchs_warning():
    """A model built in memory keeps requires_grad on its learned readout scale; reading its
    sign must not meet torch's warning on converting a tensor that requires grad."""
    import warnings

    from eagle_probe.evaluate import model_readout_text, readout_sign
    from eagle_probe.model import LinearTransformer, ModelConfig

    model = LinearTransformer(ModelConfig(n=5, d=4, n_layers=1, readout="learned"))
    assert model.readout_scale.requires_grad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert readout_sign(model) in (-1, 1)
        assert "learned" in model_readout_text(model)
