"""Memory budgets (`budget.py`): a request above the budget is refused with one line naming the
flag, before anything is allocated; the model's size estimate counts what the model holds."""

import math

import pytest
import torch

from eagle_probe import budget
from eagle_probe.errors import EagleProbeError
from eagle_probe.model import LinearTransformer, ModelConfig


def test_a_size_at_the_budget_fits_and_one_byte_more_is_refused():
    budget.check(1024, "the probes", budget=1024)
    with pytest.raises(EagleProbeError) as err:
        budget.check(1025, "the probes", budget=1024)
    message = str(err.value)
    assert message.startswith("the probes needs about ")
    assert "raise the budget with --max-memory GIB" in message and "\n" not in message


@pytest.mark.parametrize("nbytes", [math.inf, math.nan])
def test_an_unbounded_size_is_refused(nbytes):
    with pytest.raises(EagleProbeError, match="needs about unbounded of memory"):
        budget.check(nbytes, "the sweep")


def test_the_message_states_both_sizes_in_gib():
    with pytest.raises(EagleProbeError, match=r"about 6 GiB of memory, above the budget of 4 GiB"):
        budget.check(6 * budget.GIB, "the model")


@pytest.mark.parametrize(
    "kw, exact",
    [
        ({"n": 6, "d": 5, "n_layers": 2}, True),
        ({"n": 8, "d": 6, "n_layers": 3, "n_heads": 2, "dtype": "float64"}, True),
        ({"tokens": "samples", "n": 7, "d": 3, "n_layers": 2}, True),
        # machines share one W_Q, W_K, W_V of their block's width: the estimate is an upper bound
        ({"regime": "distributed", "n": 6, "d": 4, "n_layers": 1, "machines": 3}, False),
    ],
)
def test_model_elements_count_every_parameter_and_buffer(kw, exact):
    cfg = ModelConfig(**kw)
    held = sum(t.numel() for t in LinearTransformer(cfg).state_dict().values())
    assert budget.model_elements(cfg) == held if exact else budget.model_elements(cfg) > held
    itemsize = torch.finfo(cfg.torch_dtype).bits // 8
    assert budget.model_bytes(cfg) == budget.model_elements(cfg) * itemsize


def test_too_many_layers_are_refused_before_building():
    cfg = ModelConfig(n=4, d=4, n_layers=budget.MAX_LAYERS + 1)
    with pytest.raises(EagleProbeError, match=f"above the limit of {budget.MAX_LAYERS}"):
        budget.check_model(cfg)
    budget.check_model(ModelConfig(n=4, d=4, n_layers=budget.MAX_LAYERS), budget=math.inf)


def test_a_model_above_the_budget_is_refused():
    cfg = ModelConfig(n=4, d=4, n_layers=2)
    budget.check_model(cfg, budget.model_bytes(cfg))
    with pytest.raises(EagleProbeError, match="^the model needs about"):
        budget.check_model(cfg, budget.model_bytes(cfg) - 1)


def test_training_holds_twice_the_activations_and_four_copies_of_the_model():
    cfg = ModelConfig(n=6, d=5, n_layers=2)
    prompts = 8 * 4 * cfg.n_tokens * cfg.width * 8
    plain = budget.forward_bytes(cfg, 8)
    trained = budget.forward_bytes(cfg, 8, training=True)
    activations = plain - prompts - budget.model_bytes(cfg)
    assert activations > 0
    assert trained == 2 * activations + prompts + 4 * budget.model_bytes(cfg)
    assert budget.forward_bytes(cfg, 16) - prompts * 2 == 2 * activations + budget.model_bytes(cfg)
