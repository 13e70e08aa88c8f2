"""The analysis helpers ablate exactly the head they name."""

import pytest
import torch

from eagle_probe.analysis import _mse, head_ablation
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
        assert table.loc[(layer, head), "mse"] == pytest.approx(_mse(zeroed, prompt), rel=1e-12)
    assert table.mse_ratio.nunique() == len(table)  # every head matters differently
