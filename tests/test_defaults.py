"""One set of defaults: the CLI's train and plant defaults are the configs' defaults."""

import dataclasses

import pytest
from conftest import ROOT

from eagle_probe.cli import build_parser
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig
from eagle_probe.train import TrainConfig

# train option dest -> (config class, field)
TRAIN_OPTIONS = {
    "layers": (ModelConfig, "n_layers"),
    "heads": (ModelConfig, "n_heads"),
    "machines": (ModelConfig, "machines"),
    "rank": (ModelConfig, "rank"),
    "token_mask": (ModelConfig, "token_mask"),
    "readout": (ModelConfig, "readout"),
    "normalize": (ModelConfig, "normalize"),
    "init": (ModelConfig, "init"),
    "init_std": (ModelConfig, "init_std"),
    "tokens": (ModelConfig, "tokens"),
    "task": (TaskConfig, "task"),
    "n": (TaskConfig, "n"),
    "d": (TaskConfig, "d"),
    "n_prime": (TaskConfig, "n_prime"),
    "d_prime": (TaskConfig, "d_prime"),
    "task_rank": (TaskConfig, "rank"),
    "alpha": (TaskConfig, "alpha"),
    "kappa": (TaskConfig, "kappa"),
    "noise": (TaskConfig, "noise"),
    "batch": (TrainConfig, "batch"),
    "lr": (TrainConfig, "lr"),
    "schedule": (TrainConfig, "schedule"),
    "warmup": (TrainConfig, "warmup"),
    "clip": (TrainConfig, "clip"),
    "clip_qk": (TrainConfig, "clip_qk"),
    "weight_decay": (TrainConfig, "weight_decay"),
    "gain_lr": (TrainConfig, "gain_lr"),
    "select": (TrainConfig, "select"),
    "freeze_values_last": (TrainConfig, "freeze_values_last"),
    "curriculum": (TrainConfig, "curriculum"),
    "skip_spikes": (TrainConfig, "skip_spikes"),
    "data_shards": (TrainConfig, "data_shards"),
    "eval_every": (TrainConfig, "eval_every"),
    "eval_batch": (TrainConfig, "eval_batch"),
    "seed": (TrainConfig, "seed"),
}


def _defaults(command: str) -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {a.dest: a.default for a in sub.choices[command]._actions}


def _field_default(cls, name):
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


@pytest.mark.parametrize("dest", sorted(TRAIN_OPTIONS))
def test_train_option_defaults_equal_the_config_defaults(dest):
    cls, field = TRAIN_OPTIONS[dest]
    assert _defaults("train")[dest] == _field_default(cls, field), f"--{dest} vs {cls.__name__}"


def test_model_and_task_sizes_agree():
    for name in ("n", "d", "n_prime", "d_prime"):
        assert _field_default(ModelConfig, name) == _field_default(TaskConfig, name)


def test_every_train_option_with_a_config_field_is_checked():
    skip = {"help", "regime", "steps", "threads", "no_progress", "force", "resume", "out"}
    skip |= {"debug", "max_memory", "device"}  # options every command (that computes) takes
    skip |= {"seeds", "save_every"}  # how many runs, which weights are kept: no config field
    skip |= {"init_from"}  # the weights a run starts from: a file, recorded in the metrics
    # unset: the regime's own (the distributed machines share, ModelConfig's True); the flag is
    # refused outside the distributed regime
    skip |= {"share_heads"}
    assert _defaults("train")["share_heads"] is None and ModelConfig().share_heads is True
    assert set(_defaults("train")) - skip == set(TRAIN_OPTIONS)
    # --steps defaults to None so that --resume can keep the checkpoint's; a new run takes
    # TrainConfig's 20000, which the help names
    assert _defaults("train")["steps"] is None and TrainConfig().steps == 20_000


def test_plant_defaults_are_the_model_defaults():
    plant, model = _defaults("plant"), ModelConfig()
    assert (plant["n"], plant["d"], plant["n_prime"], plant["d_prime"]) == (
        model.n,
        model.d,
        model.n_prime,
        model.d_prime,
    )
    # --heads unset is the model's default head count (1, or one per machine when distributed)
    heads = ModelConfig(n_heads=plant["heads"]).heads
    assert heads == model.heads and plant["dtype"] == model.dtype


def test_python_default_model_is_the_normalised_one():
    assert ModelConfig().normalize == "spectral"


def test_api_doc_lists_every_config_default():
    text = (ROOT / "docs" / "api.md").read_text()
    for cls in (ModelConfig, TaskConfig, TrainConfig):
        for f in dataclasses.fields(cls):
            shown = f"`{f.name}={f.default!r}`"
            assert shown in text, f"{cls.__name__}.{f.name}: docs/api.md should show {shown}"
