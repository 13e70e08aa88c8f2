"""The names the configs accept (`names.py`, importable without torch): the help lists them, so
they must be the names the configs validate against, and each limit is the one a config enforces."""

import pytest

from eagle_probe import names
from eagle_probe.model import ModelConfig
from eagle_probe.train import TrainConfig


def test_the_help_names_are_the_configs_names():
    from eagle_probe import model, regimes, tasks, train

    assert regimes.NAMES == model.REGIMES == tuple(regimes.REGIMES)
    assert names.TASKS == tuple(tasks.TASKS)
    assert names.SCHEDULES == train.SCHEDULES
    assert train.TrainConfig().steps == names.DEFAULT_STEPS


@pytest.mark.parametrize(
    "field, choices",
    [
        ("normalize", names.NORMALIZE),
        ("readout", names.READOUTS),
        ("token_mask", names.TOKEN_MASKS),
    ],
)
def test_a_model_config_takes_exactly_these_names(field, choices):
    for name in choices:
        assert getattr(ModelConfig(**{field: name}), field) == name
    with pytest.raises(
        ValueError, match=f"unknown {field} 'nope'; choose from {', '.join(choices)}"
    ):
        ModelConfig(**{field: "nope"})


def test_training_steps_stop_at_the_limit_and_schedules_are_these():
    assert TrainConfig(steps=names.MAX_STEPS).steps == names.MAX_STEPS
    with pytest.raises(ValueError, match="steps must be at most 1,000,000,000"):
        TrainConfig(steps=names.MAX_STEPS + 1)
    for schedule in names.SCHEDULES:
        assert TrainConfig(schedule=schedule).schedule == schedule
    with pytest.raises(ValueError, match="unknown schedule"):
        TrainConfig(schedule="nope")
