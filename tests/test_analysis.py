"""The analysis helpers ablate exactly the head they name."""

import pytest
import torch
from conftest import RTOL

from eagle_probe.analysis import _mse, greedy_pruning, head_ablation
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator, sample


def test_head_ablation_equals_zeroing_that_heads_projection():
    cfg = ModelConfig(n=6, d=5, n_layers=2, n_heads=3, dtype="float64", init_std=0.2)
    task = TaskConfig(n=6, d=5, rank=3)
    model = LinearTransformer(cfg, generator=make_generator(0))
    table = head_ablation(model, task, batch=64, seed=3).set_index(["layer", "head"])
    prompt = sample(task, 64, make_generator(3), dtype=torch.float64)
    for layer, head in ((0, 1), (1, 2)):
        zeroed = LinearTransformer(cfg)
        zeroed.load_state_dict(model.state_dict())
        with torch.no_grad():
            zeroed.blocks[layer].attn.W_P[head] = 0.0
        assert table.loc[(layer, head), "mse"] == pytest.approx(_mse(zeroed, prompt), rel=RTOL)
    assert table.mse_ratio.nunique() == len(table)  # every head matters differently


def test_greedy_pruning_removes_the_head_whose_removal_hurts_least_at_every_step():
    """Every step, recomputed here by zeroing the W_P of the heads removed so far and of each
    candidate in turn: the head removed is the cheapest one, and the MSE is that model's."""
    cfg = ModelConfig(n=6, d=5, n_layers=3, n_heads=3, dtype="float64", init_std=0.2)
    task = TaskConfig(n=6, d=5, rank=3)
    model = LinearTransformer(cfg, generator=make_generator(0))
    prompt = sample(task, 64, make_generator(3), dtype=torch.float64)
    table = greedy_pruning(model, task, batch=64, seed=3, candidates=3)
    assert list(table.heads_left) == list(range(9, 2, -1))

    def zeroed(heads):
        pruned = LinearTransformer(cfg)
        pruned.load_state_dict(model.state_dict())
        with torch.no_grad():
            for layer, head in heads:
                pruned.blocks[layer].attn.W_P[head] = 0.0
        return _mse(pruned, prompt)

    assert table.mse.iloc[0] == pytest.approx(zeroed([]), rel=RTOL)
    removed = []
    for row in table.iloc[1:].itertuples():
        left = [(lay, h) for lay in range(3) for h in range(3) if (lay, h) not in removed]
        trials = {
            (lay, h): zeroed([*removed, (lay, h)])
            for lay, h in left
            if sum(r[0] == lay for r in removed) < 2  # one head per layer stays
        }
        cheapest = min(trials, key=trials.get)
        assert row.removed == f"L{cheapest[0]}H{cheapest[1]}"
        assert row.mse == pytest.approx(trials[cheapest], rel=RTOL)
        removed.append(cheapest)
    assert sorted(lay for lay, _ in removed) == [0, 0, 1, 1, 2, 2]
