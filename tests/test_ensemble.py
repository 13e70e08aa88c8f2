"""Seeds in one process: each seed of `train_ensemble` is the separate `train` run (float64).

The stacked run computes with batched products over the seeds, the separate run with one model's:
different BLAS kernels, which agree here to the bit but need not on another CPU, so the weights and
metrics are compared to conftest.RTOL. A seed's own optimiser step is the same torch calls on the
same values in both, and stays exact."""

from dataclasses import replace

import pytest
import torch
from conftest import RTOL

from eagle_probe import ensemble
from eagle_probe.ensemble import spectral_norm, stack_models, stacked_prediction, train_ensemble
from eagle_probe.model import LinearTransformer, ModelConfig, prompt_scale
from eagle_probe.tasks import TaskConfig, make_generator, sample
from eagle_probe.train import TrainConfig, train, with_shards

TASK = TaskConfig(n=6, d=6, n_prime=1, d_prime=1, rank=3)
BASE = {"n": 6, "d": 6, "n_prime": 1, "d_prime": 1, "n_layers": 2, "dtype": "float64"}
RUN = TrainConfig(steps=24, batch=32, lr=1e-2, eval_every=8, eval_batch=64, clip=0.1)

MODELS = {
    "centralized-2-heads": {"n_heads": 2},
    "distributed": {"regime": "distributed", "machines": 2},
    "distributed-open": {"regime": "distributed-open", "machines": 3},
    "constrained": {"regime": "constrained", "rank": 3, "n_heads": 2},
    "samples": {"tokens": "samples"},
    "block-diagonal": {"token_mask": "block_diagonal", "shards": 2},
    "sparse-frobenius": {"token_mask": "sparse", "normalize": "frobenius"},
    "learned-none": {"readout": "learned", "normalize": "none", "init_std": 0.05},
}


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


@pytest.mark.parametrize("name", list(MODELS))
def test_stacked_prediction_is_each_models_forward(name):
    cfg = ModelConfig(**(BASE | MODELS[name]))
    models = [LinearTransformer(cfg, generator=make_generator(s)) for s in (3, 4, 5)]
    prompts = [sample(TASK, 16, make_generator(10 + k), dtype=torch.float64) for k in range(3)]
    z0 = torch.stack([p.z0() for p in prompts])  # (3, 16, 7, 7)
    with torch.no_grad():
        got = stacked_prediction(cfg, stack_models(models), z0)
    for k, model in enumerate(models):
        want = model(z0[k]).detach()
        assert _relative(got[k], want) < RTOL, name


def test_spectral_scale_is_the_norm_of_a_at_every_magnitude():
    cfg = ModelConfig(**BASE)
    z0 = sample(TASK, 64, make_generator(2), dtype=torch.float64).z0()
    for magnitude in (1e-150, 1e-3, 1.0, 1e150):
        z = z0 * magnitude
        want = torch.linalg.matrix_norm(z[:, :6, :6], ord=2)
        got = prompt_scale(cfg, z, spectral=spectral_norm)[:, 0, 0]
        assert float(((got - want) / want).abs().max()) < RTOL, magnitude


RUNS = {
    "plain": ({}, {}),
    "two-heads-adamw-cosine": (
        {"n_heads": 2},
        {"weight_decay": 0.05, "schedule": "warmup_cosine", "select": "trimmed"},
    ),
    "distributed-clip-qk-freeze": (
        {"regime": "distributed", "machines": 2},
        {"clip_qk": 0.05, "freeze_values_last": 0.25, "select": "median"},
    ),
    "constrained-gains-shards": (
        {"regime": "constrained", "rank": 3},
        {"gain_lr": 0.05, "data_shards": 2},
    ),
    "samples-curriculum": ({"tokens": "samples"}, {"curriculum": True, "curriculum_start": 1.0}),
    "block-diagonal-spikes-skipped": (
        {"token_mask": "block_diagonal", "shards": 2},
        {"spike_factor": 1.05, "skip_spikes": True},
    ),
    "learned-readout-no-clip": ({"readout": "learned"}, {"clip": 0.0, "keep_best": False}),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_each_seed_equals_its_separate_run(name, monkeypatch):
    monkeypatch.setattr(ensemble, "PASS_PROMPTS", 20)  # a step in passes of 6 prompts a seed
    model_kw, run_kw = RUNS[name]
    cfg = ModelConfig(**(BASE | model_kw))
    run = replace(RUN, **run_kw)
    seeds = [0, 3, 7]
    together = train_ensemble(cfg, TASK, run, seeds, progress=False)
    assert len(together) == len(seeds)
    for seed, (model, metrics) in zip(seeds, together, strict=True):
        alone, expected = train(cfg, TASK, replace(run, seed=seed), progress=False)
        state, want = model.state_dict(), alone.state_dict()
        assert state.keys() == want.keys()
        for key, value in want.items():
            assert _relative(state[key], value) < RTOL, (name, seed, key)
        assert metrics["best_step"] == expected["best_step"]
        assert metrics["steps_done"] == expected["steps_done"] == run.steps
        assert metrics["train_config"] == expected["train_config"]
        assert metrics["skipped_steps"] == expected["skipped_steps"]
        assert [s["step"] for s in metrics["spikes"]] == [s["step"] for s in expected["spikes"]]
        for row, ref in zip(metrics["history"], expected["history"], strict=True):
            for column in ("train_loss", "val_mse", "val_median", "val_trimmed", "lr"):
                assert row[column] == pytest.approx(ref[column], rel=RTOL), (name, column)
    if run_kw.get("skip_spikes"):
        assert any(m["skipped_steps"] for _, m in together)  # the rule was exercised
    # the seeds are different runs
    first, second = together[0][0].state_dict(), together[1][0].state_dict()
    assert not torch.equal(first["blocks.0.attn.W_Q"], second["blocks.0.attn.W_Q"])


@pytest.mark.parametrize("name", ["plain", "constrained-gains-shards"])
def test_a_resumed_ensemble_equals_each_seeds_resumed_run(name, monkeypatch):
    monkeypatch.setattr(ensemble, "PASS_PROMPTS", 20)
    model_kw, run_kw = RUNS[name]
    cfg = ModelConfig(**(BASE | model_kw))
    first = replace(RUN, steps=16, **run_kw)
    seeds = [2, 5]
    halfway = train_ensemble(cfg, TASK, first, seeds, progress=False)
    resume = [(model.state_dict(), metrics) for model, metrics in halfway]
    longer = replace(first, steps=32)
    together = train_ensemble(cfg, TASK, longer, seeds, progress=False, resume=resume)
    for seed, (state, metrics), (model, got) in zip(seeds, resume, together, strict=True):
        alone, want = train(
            cfg, TASK, replace(longer, seed=seed), progress=False, resume=(state, metrics)
        )
        for key, value in alone.state_dict().items():
            assert _relative(model.state_dict()[key], value) < RTOL, (name, seed, key)
        assert got["resumed_from_step"] == want["resumed_from_step"] == 16
        assert got["steps_done"] == want["steps_done"] == 32
        assert got["best_step"] == want["best_step"]
        assert [r["step"] for r in got["history"]] == [r["step"] for r in want["history"]]
        assert [r["step"] for r in got["history"]] == [8, 16, 24, 32]
        for row, ref in zip(got["history"], want["history"], strict=True):
            assert row["val_mse"] == pytest.approx(ref["val_mse"], rel=RTOL)
    # the second half moved the weights (it trained, from the checkpoint's)
    assert not torch.equal(
        together[0][0].state_dict()["blocks.0.attn.W_Q"], resume[0][0]["blocks.0.attn.W_Q"]
    )


def test_resume_errors():
    cfg = ModelConfig(**BASE)
    run = replace(RUN, steps=8, eval_every=4)
    done = train_ensemble(cfg, TASK, run, [0, 1], progress=False)
    resume = [(m.state_dict(), metrics) for m, metrics in done]
    with pytest.raises(ValueError, match="pass a larger --steps"):
        train_ensemble(cfg, TASK, run, [0, 1], progress=False, resume=resume)
    uneven = [resume[0], (resume[1][0], resume[1][1] | {"steps_done": 4})]
    with pytest.raises(ValueError, match="different numbers of steps"):
        train_ensemble(cfg, TASK, replace(run, steps=12), [0, 1], progress=False, resume=uneven)
    with pytest.raises(ValueError, match="2 seeds"):
        train_ensemble(cfg, TASK, run, [0, 1], progress=False, resume=resume[:1])


def test_clipping_is_per_seed():
    """A seed whose gradient is clipped does not scale another seed's update."""
    cfg = ModelConfig(**BASE)
    run = replace(RUN, steps=3, eval_every=3)
    big = replace(run, clip=1e-4)
    (model, _), *_ = train_ensemble(cfg, TASK, big, [0, 1], progress=False)
    alone, _ = train(cfg, TASK, replace(big, seed=0), progress=False)
    for key, value in alone.state_dict().items():
        assert _relative(model.state_dict()[key], value) < RTOL


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_a_dropped_seed_keeps_its_weights_and_adam_state_while_the_others_step(weight_decay):
    """A seed whose step is dropped (a skipped spike) neither moves nor counts the step, even
    with a NaN gradient; a seed that steps moves as its own torch Adam (AdamW) with its own
    gradient-norm clips (query/key, then everything with the head gains) would."""
    cfg = ModelConfig(**(BASE | {"dtype": "float32"}))
    run = replace(RUN, clip=0.5, clip_qk=0.2, weight_decay=weight_decay, gain_lr=0.05)
    run = with_shards(run, 1)
    models = [LinearTransformer(cfg, generator=make_generator(s)) for s in (0, 1, 2)]
    stepper = ensemble._StackedStepper(cfg, TASK, run, [0, 1, 2], models, 0)
    gen = torch.Generator().manual_seed(3)
    kind = torch.optim.AdamW if weight_decay else torch.optim.Adam
    extra = {"weight_decay": weight_decay} if weight_decay else {}
    alone = {n: p[0].clone() for n, p in stepper.params.items()}
    gain = stepper.log_gain[0].clone()
    groups = [{"params": list(alone.values())}, {"params": [gain], "lr": 0.05, "weight_decay": 0}]
    own = kind(groups, lr=run.lr, **extra)
    qk = [p for n, p in alone.items() if n.endswith(("W_Q", "W_K"))]
    for step, applied in enumerate(([True, True, False], [True, False, True])):
        before = {n: p.clone() for n, p in stepper.params.items()}
        grads = {n: torch.randn(p.shape, generator=gen) for n, p in stepper.params.items()}
        grads["log_gain"] = torch.randn(stepper.log_gain.shape, generator=gen)
        for g in grads.values():
            g[applied.index(False)] = float("nan")
        stepper.grads = {n: g.clone() for n, g in grads.items()}
        stepper.begin(step, 1.0)
        stepper.update(applied)
        for n, p in stepper.params.items():
            for k, stepped in enumerate(applied):
                # exact: a dropped seed's slice is not written at all
                assert torch.equal(p[k], before[n][k]) is not stepped, (step, n, k)
        for n, p in alone.items():
            p.grad = grads[n][0].clone()
        gain.grad = grads["log_gain"][0].clone()
        assert torch.nn.utils.clip_grad_norm_(qk, 0.2) > 0.2  # both clips bite
        assert torch.nn.utils.clip_grad_norm_([*alone.values(), gain], 0.5) > 0.5
        own.step()
        for n, p in alone.items():  # exact: the same clip_grad_norm_ and Adam step, same values
            assert torch.equal(stepper.params[n][0], p), (step, n)
        assert torch.equal(stepper.log_gain[0], gain), step  # exact: the gain's same step
    counts = [
        [int(stepper.optimizer.state[p]["step"]) for p in seed.values()] for seed in stepper.seeds
    ]
    assert counts == [[2] * len(alone), [1] * len(alone), [1] * len(alone)]


def test_ensemble_callbacks_and_errors():
    cfg = ModelConfig(**BASE)
    seen = []
    train_ensemble(
        cfg,
        TASK,
        replace(RUN, steps=8, eval_every=4),
        [1, 2],
        progress=False,
        on_validate=lambda k, model, metrics: seen.append((k, metrics["history"][-1]["step"])),
    )
    assert seen == [(0, 4), (1, 4), (0, 8), (1, 8)]
    with pytest.raises(ValueError, match="repeat"):
        train_ensemble(cfg, TASK, RUN, [1, 1], progress=False)
    with pytest.raises(ValueError, match="at least one seed"):
        train_ensemble(cfg, TASK, RUN, [], progress=False)
    with pytest.raises(ValueError, match="seed must be"):
        train_ensemble(cfg, TASK, RUN, [-1], progress=False)
    with pytest.raises(ValueError, match="do not match"):
        train_ensemble(cfg, replace(TASK, n=8, d=8), RUN, [0], progress=False)
