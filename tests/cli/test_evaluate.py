"""`eagle-probe evaluate` (`cli/evaluate.py`): its JSON and its table equal a computation by hand
on the same prompts, `--seed` draws others, and a foreign file is refused."""

import json

import pytest

from eagle_probe.cli import main


def _by_hand(path, batch: int, seed: int) -> dict[str, float]:
    """The evaluate numbers computed here from the checkpoint, prompt by prompt."""
    import numpy as np
    import torch

    from eagle_probe import checkpoint
    from eagle_probe.tasks import make_generator, sample

    model, task, _ = checkpoint.load(path)
    p = sample(task, batch, make_generator(seed), dtype=torch.float64)
    with torch.no_grad():
        pred = model(p.z0().to(model.cfg.torch_dtype)).to(torch.float64)
    err = (pred - p.D).square().mean(dim=(-1, -2)).numpy()
    zero = p.D.square().mean(dim=(-1, -2)).numpy()
    assert batch % 2 == 1, "an odd count has one middle value: np.median is torch's"
    return {
        "mse": err.mean(),
        "zero_mse": zero.mean(),
        "median_mse": float(np.median(err)),
        # the worst 0.1% of prompts dropped, at least one: int(0.999 × batch) kept
        "trimmed_mse": np.sort(err)[: int(0.999 * batch)].mean(),
        "worst_mse": err.max(),
        "improvement": zero.mean() / err.mean(),
        "worse_than_zero_prompts": int((err > zero).sum()),
    }


def test_evaluate_json(tiny_model, capsys):
    assert main(["evaluate", str(tiny_model), "--json", "--batch", "501", "--seed", "7"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prompts"] == 501 and result["optimal_mse"] < 1e-20
    for key, value in _by_hand(tiny_model, 501, 7).items():
        assert result[key] == pytest.approx(value, rel=1e-6), key
    assert result["median_mse"] <= result["mse"] <= result["worst_mse"]
    assert result["worse_than_zero"] == result["worse_than_zero_prompts"] / 501
    assert result["mse"] < result["zero_mse"], "30 training steps already beat predicting 0"
    # --seed draws other prompts
    assert main(["evaluate", str(tiny_model), "--json", "--batch", "501", "--seed", "8"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["mse"] != result["mse"]
    assert other["mse"] == pytest.approx(_by_hand(tiny_model, 501, 8)["mse"], rel=1e-6)


def test_draws_give_each_mse_over_the_draws_of_seeds_seed_on(tiny_model, capsys):
    """--draws K evaluates on seeds seed … seed + K − 1; each statistic's lowest, median and
    highest are those of the K single-draw evaluations, computed by hand."""
    argv = ["evaluate", str(tiny_model), "--json", "--batch", "101", "--seed", "3"]
    assert main([*argv, "--draws", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    hand = [_by_hand(tiny_model, 101, seed) for seed in (3, 4, 5)]
    assert result["mse"] == pytest.approx(hand[0]["mse"], rel=1e-6)  # the first draw's, as without
    for key in ("mse", "median_mse", "trimmed_mse", "worst_mse"):
        values = sorted(h[key] for h in hand)
        span = result["over_draws"][key]
        assert span["draws"] == 3
        got = [span["low"], span["median"], span["high"]]
        assert got == pytest.approx(values, rel=1e-6), key
    shares = sorted(h["worse_than_zero_prompts"] / 101 for h in hand)
    span = result["over_draws"]["worse_than_zero"]
    assert [span["low"], span["median"], span["high"]] == pytest.approx(shares)
    assert main([*argv[:2], *argv[3:], "--draws", "3"]) == 0
    out = capsys.readouterr().out
    assert "over 3 draws of 101 prompts (seeds 3–5): lowest / median / highest" in out
    values = sorted(h["median_mse"] for h in hand)
    assert f"median prompt MSE     {values[0]:.3e} / {values[1]:.3e} / {values[2]:.3e}" in out
    # one draw: no interval
    assert main(argv) == 0 and "over_draws" not in json.loads(capsys.readouterr().out)


def test_evaluate_table(tiny_model, capsys):
    assert main(["evaluate", str(tiny_model), "--batch", "101", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "101 fresh prompts" in out
    printed = {}
    for line in out.splitlines()[1:]:
        label, _, value = line.strip().rpartition("  ")
        printed[label.strip()] = value.strip()
    want = _by_hand(tiny_model, 101, 3)
    rows = {
        "test MSE": "mse",
        "zero predictor MSE": "zero_mse",
        "median prompt MSE": "median_mse",
        "0.1%-trimmed MSE": "trimmed_mse",
        "worst prompt MSE": "worst_mse",
    }
    for label, key in rows.items():
        assert printed[label] == f"{want[key]:.3e}", (label, printed)
    worse = want["worse_than_zero_prompts"]
    assert printed["worse than zero"].startswith(
        f"{worse / 101 * 100:.3g}% of prompts ({worse} of 101: error above the prompt's mean of D²)"
    )
    if want["improvement"] >= 1.05:
        assert f"{want['improvement']:.1f}x below the zero predictor" in out
    else:  # never "below" a predictor it does not beat
        assert "below" not in out and "no better than the zero predictor" in out
    assert out.splitlines()[1].startswith("readout -1: the prediction is minus the D slot")


def test_foreign_checkpoint(tmp_path, capsys):
    import torch

    path = tmp_path / "foreign.pt"
    torch.save({"a": torch.zeros(2)}, path)
    assert main(["evaluate", str(path)]) == 2
    assert "not an eagle-probe checkpoint" in capsys.readouterr().err
