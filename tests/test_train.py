import copy
import json
import math
from dataclasses import replace

import pytest
import torch
from conftest import RTOL, TRAINED

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator
from eagle_probe.train import TrainConfig, _seeds, lr_factor, train

TASK = TaskConfig(n=6, d=6, n_prime=1, d_prime=1, rank=3)


def _cfg(**kwargs) -> ModelConfig:
    return ModelConfig(
        **(
            {"n": 6, "d": 6, "n_prime": 1, "d_prime": 1, "n_layers": 2, "normalize": "spectral"}
            | kwargs
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["centralized", "distributed", "constrained"])
def test_tiny_training_beats_the_zero_predictor(regime):
    cfg = _cfg(regime=regime, machines=2, rank=3, init_std=0.2)
    run = TrainConfig(
        steps=300,
        batch=128,
        lr=1e-2,
        schedule="warmup_cosine",
        eval_every=100,
        eval_batch=512,
        seed=1,
    )
    model, metrics = train(cfg, TASK, run, progress=False)
    result = evaluate(model, TASK, batch=2000, seed=3)
    untrained = evaluate(LinearTransformer(cfg, make_generator(1)), TASK, batch=2000, seed=3)
    assert result["improvement"] > 2.0 and untrained["improvement"] < 1.2, (result, untrained)
    assert metrics["steps_done"] == 300 and len(metrics["history"]) == 3
    assert metrics["best_val_mse"] == min(r["val_mse"] for r in metrics["history"])


def test_same_seed_same_model_and_training_moves_it():
    run = TrainConfig(steps=40, batch=64, lr=1e-2, eval_every=10, eval_batch=256, seed=4)
    a, metrics = train(_cfg(), TASK, run, progress=False)
    b, _ = train(_cfg(), TASK, run, progress=False)
    for key, value in a.state_dict().items():  # exact: one process, the same ops twice
        assert (value == b.state_dict()[key]).all()
    # ... and it is not the initialisation: training changed the weights and lowered the error
    init = LinearTransformer(_cfg(), generator=make_generator(_seeds(run.seed)[0]))
    moved = [
        float((value - init.state_dict()[key]).abs().max())
        for key, value in a.state_dict().items()
        if key.endswith(("W_Q", "W_K", "W_V", "W_P"))
    ]
    assert min(moved) > 1e-3, moved
    trained_mse = evaluate(a, TASK, batch=1000, seed=3)["mse"]
    assert trained_mse < 0.9 * evaluate(init, TASK, batch=1000, seed=3)["mse"]
    val = [row["val_mse"] for row in metrics["history"]]
    assert val[-1] < val[0]
    # and another seed gives another model
    c, _ = train(_cfg(), TASK, replace(run, seed=5), progress=False)
    assert not torch.equal(a.blocks[0].attn.W_Q, c.blocks[0].attn.W_Q)


def test_head_gains_are_trained_and_folded_into_w_p():
    """With --gain-lr the kept weights are a plain model computing what the gained model did."""
    from eagle_probe.tasks import sample
    from eagle_probe.train import _attach_gains, fold_gains

    cfg = _cfg(n_heads=2)
    gained = LinearTransformer(cfg, generator=make_generator(2))
    log_gain = _attach_gains(gained)
    with torch.no_grad():
        log_gain.copy_(torch.tensor([[0.7, -1.1], [2.0, 0.3]]))
    z0 = sample(TASK, 16, make_generator(3)).z0()
    plain = LinearTransformer(cfg)
    plain.load_state_dict(fold_gains(copy.deepcopy(gained.state_dict()), log_gain))
    expected = gained(z0)
    assert not torch.allclose(expected, LinearTransformer(cfg, generator=make_generator(2))(z0))
    torch.testing.assert_close(plain(z0), expected, rtol=1e-5, atol=1e-7)
    # training with gains moves them (W_P of a layer scales by their exponentials) and the model
    # it returns carries no hooks
    run = TrainConfig(steps=30, batch=64, lr=1e-3, gain_lr=5e-2, eval_every=10, eval_batch=256)
    model, metrics = train(cfg, TASK, run, progress=False)
    assert metrics["train_config"]["gain_lr"] == 5e-2
    assert all(not hp.fwd_hooks for hp in model.hook_dict.values())
    plain_run, _ = train(cfg, TASK, replace(run, gain_lr=0.0), progress=False)
    assert not torch.equal(model.blocks[0].attn.W_P, plain_run.blocks[0].attn.W_P)


@pytest.mark.parametrize("select, key", [("median", "val_median"), ("trimmed", "val_trimmed")])
def test_selection_rule_picks_the_kept_weights(select, key):
    run = TrainConfig(
        steps=40, batch=64, lr=2e-2, eval_every=10, eval_batch=256, seed=2, select=select
    )
    _, metrics = train(_cfg(normalize="none"), TASK, run, progress=False)
    values = [row[key] for row in metrics["history"]]
    best = min(range(len(values)), key=values.__getitem__)
    assert metrics["best_val_selected"] == values[best]
    assert metrics["best_step"] == metrics["history"][best]["step"]
    assert metrics["best_val_mse"] == metrics["history"][best]["val_mse"]


def test_trimmed_mean_drops_the_worst_prompt_in_a_hundred():
    """Training's `--select trimmed`: `evaluate.trimmed_mean` keeping TRIM (99%) of prompts."""
    from functools import partial

    from eagle_probe.evaluate import trimmed_mean
    from eagle_probe.train import TRIM

    _trimmed_mean = partial(trimmed_mean, keep=TRIM)

    errors = torch.tensor([1.0] * 99 + [1e30])
    assert _trimmed_mean(errors) == 1.0
    errors = torch.tensor([2.0] * 98 + [math.inf, math.nan])
    assert _trimmed_mean(errors) == math.inf  # two bad prompts in a hundred are not trimmed away
    # exact: integers below 2^24 sum exactly in float32, and 19503 / 198 = 98.5
    assert _trimmed_mean(torch.arange(200.0)) == sum(range(198)) / 198


def test_data_shards_default_to_one_per_process():
    assert TrainConfig().data_shards is None
    run = TrainConfig(steps=2, batch=32, eval_every=2, eval_batch=64, seed=4)
    _, metrics = train(_cfg(), TASK, run, progress=False)
    assert metrics["train_config"]["data_shards"] == 1 and metrics["processes"] == 1
    with pytest.raises(ValueError, match="must divide the batch"):
        TrainConfig(batch=30, data_shards=4)


def _values(model) -> list[torch.Tensor]:
    return [t for b in model.blocks for t in (b.attn.W_V, b.attn.W_P)]


def _queries(model) -> list[torch.Tensor]:
    return [t for b in model.blocks for t in (b.attn.W_Q, b.attn.W_K)]


def test_value_freezing_keeps_w_v_and_w_p_from_the_freeze_on():
    # Same seed, constant rate: the first 20 steps of a 40-step run are a 20-step run. Freezing the
    # last half must leave W_V, W_P exactly where the 20-step run left them, and only them.
    base = dict(batch=32, eval_every=10, eval_batch=64, keep_best=False, clip_qk=0.05, lr=1e-2)
    half, _ = train(_cfg(), TASK, TrainConfig(steps=20, **base), progress=False)
    frozen, _ = train(
        _cfg(), TASK, TrainConfig(steps=40, freeze_values_last=0.5, **base), progress=False
    )
    free, _ = train(_cfg(), TASK, TrainConfig(steps=40, **base), progress=False)
    for x, y in zip(_values(frozen), _values(half), strict=True):
        assert torch.equal(x, y)  # exact: the same 20 steps in one process, then no update
    for x, y in zip(_queries(frozen), _queries(half), strict=True):
        assert not torch.equal(x, y)
    for x, y in zip(_values(free), _values(half), strict=True):
        assert not torch.equal(x, y)


def test_a_run_resumed_past_the_freeze_step_keeps_w_v_and_w_p_frozen():
    # 8 of 16 steps done; freezing the last 3/4 puts the freeze step at 4, before the resume
    base = dict(batch=32, eval_every=4, eval_batch=64, keep_best=False, lr=1e-2)
    first, metrics = train(_cfg(), TASK, TrainConfig(steps=8, **base), progress=False)
    longer = TrainConfig(steps=16, freeze_values_last=0.75, **base)
    resumed, _ = train(_cfg(), TASK, longer, progress=False, resume=(first.state_dict(), metrics))
    for x, y in zip(_values(resumed), _values(first), strict=True):
        assert torch.equal(x, y)  # exact: frozen from the resume on, the checkpoint's tensors
    for x, y in zip(_queries(resumed), _queries(first), strict=True):
        assert not torch.equal(x, y)


def test_curriculum_moves_the_training_task_from_isotropic_to_the_target(monkeypatch):
    from eagle_probe import train as train_module

    seen = []
    real_sample = train_module.sample

    def recording_sample(config, batch, generator, **kwargs):
        if batch == 32:  # training batches (the validation set has eval_batch = 64 prompts)
            seen.append(config.alpha)
        return real_sample(config, batch, generator, **kwargs)

    monkeypatch.setattr(train_module, "sample", recording_sample)
    run = TrainConfig(
        steps=20, batch=32, eval_every=20, eval_batch=64, curriculum=True, curriculum_until=0.5
    )
    train(_cfg(), TASK, run, progress=False)
    # α_t = 1 + min(1, (t / 20) / 0.5) · (0.7 − 1): isotropic at the start, the target from t = 10
    expected = [1.0 + min(1.0, t / 10) * (TASK.alpha - 1.0) for t in range(20)]
    assert seen == pytest.approx(expected, abs=RTOL)
    assert TASK.alpha == 0.7


def test_warmup_cosine_schedule():
    cfg = TrainConfig(steps=100, schedule="warmup_cosine", warmup=0.1, final_lr_ratio=0.01)
    assert lr_factor(cfg, 0) == pytest.approx(0.1)
    assert lr_factor(cfg, 9) == pytest.approx(1.0)
    assert lr_factor(cfg, 99) == pytest.approx(0.01, abs=1e-3)
    assert lr_factor(TrainConfig(), 12345) == 1.0


def test_size_mismatch_between_model_and_task():
    with pytest.raises(ValueError, match="do not match"):
        train(_cfg(n=4), TASK, TrainConfig(steps=1), progress=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 0},
        {"lr": -1.0},
        {"schedule": "step"},
        {"warmup": 1.5},
        {"spike_factor": 0.5},
        {"gain_lr": -1e-2},
        {"select": "best"},
    ],
)
def test_bad_train_configs(kwargs):
    with pytest.raises(ValueError):
        TrainConfig(**kwargs)


def test_train_config_round_trips_and_refuses_unknown_fields():
    # every shipped checkpoint's training record is a TrainConfig, unchanged by the round trip
    # but for the fields added since it was written, which take their defaults
    for path in sorted(TRAINED.rglob("*.json")):
        record = json.loads(path.read_text()).get("train_config")
        if record is not None:
            assert TrainConfig.from_dict(record).to_dict() == TrainConfig().to_dict() | record
    with pytest.raises(ValueError, match="unknown train config field.*: stepz; the fields are"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ValueError, match="eval_batch must be a positive integer, got True"):
        TrainConfig(eval_batch=True)


def test_a_run_grown_from_a_checkpoint_starts_from_its_heads(tmp_path, capsys):
    from eagle_probe.cli import main
    from eagle_probe.train import grow

    source = LinearTransformer(_cfg(), make_generator(4))
    grown = LinearTransformer(_cfg(n_heads=3), make_generator(5))
    fresh = {k: v.clone() for k, v in grown.state_dict().items()}
    grow(grown, source)
    for name, value in source.state_dict().items():
        got = grown.state_dict()[name]
        if got.shape == value.shape:  # exact: copies
            assert torch.equal(got, value), name
        else:  # per head: the source's head first, the other two as initialised
            assert torch.equal(got[:1], value) and torch.equal(got[1:], fresh[name][1:]), name
    # the grown model with the extra heads' outputs zeroed is the source model
    with torch.no_grad():
        for block in grown.blocks:
            block.attn.W_P[1:] = 0.0
    z = torch.randn(4, 7, 7, generator=make_generator(0))
    assert torch.allclose(grown(z), source(z), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="2 heads per layer, more than the 1"):
        grow(source, LinearTransformer(_cfg(n_heads=2)))
    with pytest.raises(ValueError, match="n_layers 2 .this run: 3"):
        grow(LinearTransformer(_cfg(n_heads=2, n_layers=3)), source)

    src = tmp_path / "one_head.pt"
    checkpoint.save(src, source, TASK, {})
    out = tmp_path / "grown.pt"
    base = ["train", "--regime", "centralized", "--n", "6", "--d", "6", "--n-prime", "1"]
    base += ["--d-prime", "1", "--layers", "2", "--task-rank", "3", "--steps", "2"]
    base += ["--batch", "16", "--eval-every", "2", "--eval-batch", "64", "--no-progress"]
    assert main([*base, "--heads", "2", "--init-from", str(src), "-o", str(out)]) == 0
    metrics = checkpoint.load(out)[2]
    assert metrics["init_from"] == {"path": str(src), "sha256": checkpoint.sha256(src)}
    capsys.readouterr()
    assert main([*base, "--heads", "2", "--layers", "3", "--init-from", str(src), "-o",
                 str(tmp_path / "x.pt")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--init-from" in err and "n_layers 2 (this run: 3)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.pt").exists()
    assert main([*base, "--seeds", "2", "--init-from", str(src), "-o", str(tmp_path / "y.pt")]) == 2
    assert "does not combine" in capsys.readouterr().err
