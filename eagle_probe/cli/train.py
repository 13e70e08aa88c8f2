"""`eagle-probe train`: train a model and write a checkpoint."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

from eagle_probe import __version__
from eagle_probe.cli.common import (
    Parser,
    enter_claim,
    finite_float32,
    init_std,
    memory_budget,
    positive_int,
    publish,
    seed_count,
    seed_value,
    step_count,
)
from eagle_probe.errors import EagleProbeError, Terminated
from eagle_probe.names import (
    DEFAULT_STEPS,
    NORMALIZE,
    READOUTS,
    SCHEDULES,
    TASKS,
    TOKEN_MASKS,
)
from eagle_probe.regimes import NAMES as REGIMES

HELP = "train a model and write a checkpoint"


def _check_share_heads(args: argparse.Namespace) -> None:
    """--share-heads / --no-share-heads only where the machines could share weights."""
    from eagle_probe import regimes

    if args.share_heads is None or args.regime not in regimes.REGIMES:
        return
    if not regimes.get(args.regime).sharable:
        flag = "--share-heads" if args.share_heads else "--no-share-heads"
        raise EagleProbeError(
            f"{flag} applies to the distributed regime only (its machines share W_Q, W_K, W_V), "
            f"not to {args.regime}"
        )


# the options that shape one kind of regime: destination -> (the `Regime` flag of the regimes
# that take it, what it sets there)
REGIME_ONLY = {
    "machines": ("machines", "the column blocks M"),
    "rank": ("ranked", "the query/key width r"),
}


def foreign_options(regime: str) -> list[str]:
    """The destinations in REGIME_ONLY that `regime` does not take (none for a name the registry
    does not hold: the model's configuration refuses it by name)."""
    from eagle_probe import regimes

    if regime not in regimes.REGIMES:
        return []
    spec = regimes.get(regime)
    return [dest for dest, (flag, _) in REGIME_ONLY.items() if not getattr(spec, flag)]


def check_regime_options(args: argparse.Namespace) -> None:
    """--machines only in the regimes with machines, --rank only in the one of rank r: elsewhere
    they would shape nothing. Left out, they keep their defaults (unused there)."""
    from eagle_probe import regimes

    given = getattr(args, "given", set())
    for dest in foreign_options(args.regime):
        if dest in given:
            flag, what = REGIME_ONLY[dest]
            takers = [name for name, spec in regimes.REGIMES.items() if getattr(spec, flag)]
            which = f"{' and '.join(takers)} regime{'s' if len(takers) > 1 else ''}"
            raise EagleProbeError(
                f"--{dest} ({what}) applies to the {which} only, not to {args.regime}"
            )


def add_train(parser: Parser) -> None:
    _add_architecture(parser)
    _add_prompt_task(parser)
    _add_model_form(parser)
    _add_optimiser(parser)
    _add_run(parser)


def _add_architecture(parser: Parser) -> None:
    """The regime and its shape: layers, heads, machines, rank."""
    parser.add_argument(
        "--regime",
        required=True,
        help=f"one of {', '.join(REGIMES)} (distributed and constrained are the paper's "
        "architectures; distributed-open lets values read every machine)",
    )
    parser.add_argument("--task", default="paper", help=f"one of {', '.join(TASKS)} (paper)")
    parser.add_argument("--layers", type=positive_int, default=4, help="attention layers (4)")
    parser.add_argument(
        "--heads",
        type=positive_int,
        default=None,
        help="heads per layer (1; distributed: one per machine; constrained: more than the "
        "paper's one builds the multi-head variant)",
    )
    parser.add_argument(
        "--machines",
        type=positive_int,
        default=3,
        help="distributed: machines M, must divide n (3)",
    )
    parser.add_argument(
        "--share-heads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="distributed: the machines share one W_Q, W_K, W_V (the paper's, the default); "
        "--no-share-heads gives each machine its own (an ablation)",
    )
    parser.add_argument(
        "--rank", type=positive_int, default=5, help="constrained: query/key width r <= n (5)"
    )


def _add_prompt_task(parser: Parser) -> None:
    """The prompt sizes and the task distribution."""
    # --columns/--rows: aliases that torchrun's own option parser does not mistake for its own
    parser.add_argument("--n", "--columns", type=positive_int, default=18, help="columns of A (18)")
    parser.add_argument("--d", "--rows", type=positive_int, default=18, help="rows of A (18)")
    parser.add_argument("--n-prime", type=positive_int, default=2, help="columns of C, D (2)")
    parser.add_argument("--d-prime", type=positive_int, default=2, help="rows of B, D (2)")
    parser.add_argument(
        "--task-rank",
        type=positive_int,
        default=None,
        help="rank s of the prompt matrices X, at most min(n, d) (10, or min(n, d) if smaller)",
    )
    parser.add_argument(
        "--alpha",
        type=finite_float32,
        default=0.7,
        help="anisotropy α of the paper distribution (0.7)",
    )
    parser.add_argument(
        "--kappa",
        type=finite_float32,
        default=None,
        help="prescribe the condition number of A instead",
    )
    parser.add_argument("--noise", type=finite_float32, default=0.0, help="noise variance σ² (0)")


def _add_model_form(parser: Parser) -> None:
    """The mask, readout, normalisation, token layout and initialisation."""
    parser.add_argument(
        "--token-mask", default="visible", help=f"one of {', '.join(TOKEN_MASKS)} (visible)"
    )
    parser.add_argument(
        "--readout", default="negate", help=f"one of {', '.join(READOUTS)} (negate)"
    )
    parser.add_argument(
        "--normalize",
        default="spectral",
        help=f"one of {', '.join(NORMALIZE)}; divide each prompt by that norm of A "
        "(spectral; none is the paper's plain model, unstable to train)",
    )
    parser.add_argument("--init", default="normal", help="normal or orthogonal_half (normal)")
    parser.add_argument(
        "--tokens",
        default="features",
        help="token layout: features (d + d' rows, the default) or samples",
    )
    parser.add_argument(
        "--init-std", type=init_std, default=0.02, help="std of the random initialisation (0.02)"
    )
    parser.add_argument(
        "--init-from",
        default=None,
        metavar="CKPT",
        help="start from a checkpoint's weights: its heads become the first heads of this model "
        "(same sizes and regime, at most --heads heads), the others initialised at random",
    )


def _add_optimiser(parser: Parser) -> None:
    """The optimiser, its schedule and clips, and how batches are drawn."""
    parser.add_argument(
        "--steps",
        type=step_count,
        default=None,
        help=f"optimiser steps ({DEFAULT_STEPS}; with --resume: the checkpoint's)",
    )
    parser.add_argument("--batch", type=positive_int, default=1024, help="prompts per step (1024)")
    parser.add_argument("--lr", type=finite_float32, default=1e-3, help="Adam learning rate (1e-3)")
    parser.add_argument(
        "--schedule", default="constant", help=f"one of {', '.join(SCHEDULES)} (constant)"
    )
    parser.add_argument(
        "--warmup",
        type=finite_float32,
        default=0.1,
        help="warm-up fraction for warmup_cosine (0.1)",
    )
    parser.add_argument("--clip", type=finite_float32, default=0.1, help="gradient-norm clip (0.1)")
    parser.add_argument(
        "--weight-decay",
        type=finite_float32,
        default=0.0,
        help="decoupled AdamW weight decay (0: plain Adam, the paper's)",
    )
    parser.add_argument(
        "--select",
        default="mean",
        help="validation number that picks the kept weights: mean, median or trimmed (mean over "
        "the best 99%% of prompts; mean)",
    )
    parser.add_argument(
        "--gain-lr",
        type=finite_float32,
        default=0.0,
        help="learning rate of a trained log-gain per layer and head, folded into W_P (0: off)",
    )
    parser.add_argument(
        "--clip-qk",
        type=finite_float32,
        default=0.0,
        help="separate clip for W_Q/W_K gradients (0: off)",
    )
    parser.add_argument(
        "--freeze-values-last",
        type=finite_float32,
        default=0.0,
        help="fraction of steps at the end with W_V, W_P frozen (0)",
    )
    parser.add_argument("--curriculum", action="store_true", help="grow difficulty from α = 1")
    parser.add_argument("--skip-spikes", action="store_true", help="skip loss-spike updates")
    parser.add_argument(
        "--data-shards",
        type=positive_int,
        default=None,
        help="draw each batch as this many seeded chunks, a multiple of the torchrun processes "
        "(default: one per process, so 1 without torchrun)",
    )


def _add_run(parser: Parser) -> None:
    """Validation, seeds, progress, resuming, timeline steps and the output."""
    parser.add_argument(
        "--eval-every", type=positive_int, default=250, help="validation period in steps (250)"
    )
    parser.add_argument(
        "--eval-batch", type=positive_int, default=8192, help="held-out validation prompts (8192)"
    )
    parser.add_argument("--seed", type=seed_value, default=0, help="random seed (0)")
    parser.add_argument(
        "--seeds",
        type=seed_count,
        default=1,
        metavar="K",
        help="train seeds --seed … --seed+K-1 together in one process, one checkpoint each: "
        "-o with {seed} in it, or STEM_seedS.pt (1)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run stored in --out (its configs; --steps may extend); with --seeds, "
        "the checkpoints of those seeds, together",
    )
    parser.add_argument(
        "--save-every",
        type=positive_int,
        default=None,
        metavar="K",
        help="also keep the weights of step 0, every K steps and the last in OUT.steps/ "
        "(step_NNNNNNNN.pt, for eagle-probe timeline)",
    )
    parser.add_argument("-o", "--out", required=True, help="checkpoint to write (model.pt)")


def _train_outputs(out: Path) -> list[Path]:
    """The checkpoint and the run summary beside it: the two files `train` writes."""
    summary = out.with_suffix(".json")
    if summary == out:
        raise EagleProbeError(
            f"-o {out}: the run summary is written beside the checkpoint as {summary}; give the "
            f"checkpoint another name, like {out.with_suffix('.pt')}"
        )
    return [out, summary]


def _training_record(out: Path, previous: dict[str, Any]) -> dict[str, Any]:
    """The training record of a checkpoint to resume (its metrics' types and ranges are checked
    on loading, `checkpoint.check_metrics`)."""
    record = previous.get("train_config")
    if record is None:
        raise EagleProbeError(f"{out} holds no training record to resume from")
    return dict(record)


def _resumed_config(path: Path, record: dict[str, Any], steps: int | None):
    """The TrainConfig a resumed run continues with: the checkpoint's training record, --steps
    (when given) extending it."""
    from eagle_probe.train import TrainConfig

    fields = dict(record) | ({"steps": steps} if steps is not None else {})
    try:
        return TrainConfig.from_dict(fields)
    except (TypeError, ValueError) as exc:
        raise EagleProbeError(f"{path} holds an invalid training record: {exc}") from None


def _lead_process() -> bool:
    """False in the extra processes of a torchrun launch (rank 0 owns the outputs)."""
    from eagle_probe.train import torchrun_env

    return torchrun_env()[0] == 0


def _exit_code(metrics: dict[str, Any]) -> int:
    """0 for a finished run; 128 + the signal for one an interrupt stopped (its best weights
    written), as for any command a signal stops."""
    if not metrics["interrupted"]:
        return 0
    return 128 + signal.Signals[metrics["signal"]]


def _spikes(metrics: dict[str, Any]) -> str:
    """The run's loss spikes for its last line: "no loss spikes", or "15 loss spikes (steps 812 to
    1,960, largest loss 7.68e+05)" with how many were not finite and how many skipped
    (`--skip-spikes`); the steps are those of the logged spikes (the last 200)."""
    from eagle_probe.wording import number, plural

    count = metrics.get("spike_count", 0)
    if not count:
        return "no loss spikes"
    logged = metrics.get("spikes", [])
    steps = [f"{s['step']:,}" for s in logged]
    losses = [s["loss"] for s in logged if s.get("loss") is not None]
    where = []
    if steps:
        where.append(f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]} to {steps[-1]}")
    if losses:
        where.append(f"largest loss {number(max(losses))}")
    if len(losses) < len(logged):
        where.append(f"{len(logged) - len(losses)} not finite")
    if metrics.get("skipped_steps", 0):
        where.append(f"{metrics['skipped_steps']} skipped")
    return plural(count, "loss spike") + (f" ({', '.join(where)})" if where else "")


def final_line(metrics: dict[str, Any], out) -> str:
    """The last line of a one-seed run: how it ended, where it wrote, the test MSE against the
    zero predictor's (their ratio with readable limits, `wording.ratio`), the worst prompt, the
    loss spikes and the time."""
    from eagle_probe.wording import ratio

    test = metrics["test"]
    better = ratio(test["zero_mse"], test["mse"], spec=".1f", mark="x")
    return (
        f"{_status(metrics)}: wrote {out} | test MSE {test['mse']:.3e} (zero predictor "
        f"{test['zero_mse']:.3e}, {better}) | worst prompt {test['worst_mse']:.2e} | "
        f"{_spikes(metrics)} | {metrics['wall_seconds']:.0f} s"
    )


def _status(metrics: dict[str, Any]) -> str:
    """How the run ended, for its last line: "done" or "interrupted (SIGTERM) at step …"."""
    if not metrics["interrupted"]:
        return "done"
    steps = metrics["train_config"]["steps"]
    return (
        f"interrupted ({metrics['signal']}) at step {metrics['steps_done']:,} of {steps:,}, "
        "best weights so far"
    )


def _unvalidated(metrics: dict[str, Any]) -> Terminated:
    """The stop of a run interrupted before its first validation: no weights were kept, so
    nothing is written (a signal, not a divergence)."""
    cfg = metrics["train_config"]
    first = min(cfg["eval_every"], cfg["steps"])
    return Terminated(
        signal.Signals[metrics["signal"]],
        f"interrupted ({metrics['signal']}) at step {metrics['steps_done']:,} of "
        f"{cfg['steps']:,}, before the first validation (step {first:,}), so no weights were "
        "kept; nothing written - a lower --eval-every keeps weights sooner",
    )


def _left(path: Path, metrics: dict[str, Any], published: set) -> str:
    """What a run whose kept weights cannot be finished leaves on disk: nothing, or the
    checkpoint an earlier validation published (no summary beside it)."""
    if path not in published:
        return "nothing written"
    return (
        f"{path} holds the weights of its best validation (step "
        f"{metrics.get('best_step')}), written before the test; no summary written"
    )


def _diverged(metrics: dict[str, Any], decisive: str) -> str | None:
    """Why the kept weights cannot be written (None: they can): no validation was finite, or
    the number they were selected by is not finite on the test prompts."""
    if metrics["stopped"] == "diverged":
        return "no validation had a finite loss, so no weights were kept"
    value = metrics["test"][decisive]
    return None if math.isfinite(value) else f"test {decisive.replace('_', ' ')} {value}"


def _check_combinations(args: argparse.Namespace) -> None:
    """Refuse the options that do not combine: --seeds with --save-every or torchrun,
    --init-from with --resume or --seeds."""
    if args.seeds > 1 and (args.save_every is not None or not _lead_process()):
        raise EagleProbeError(
            "--seeds trains its seeds in one process: it does not combine with --save-every "
            "or torchrun; run those one seed at a time"
        )
    if args.init_from is not None and (args.resume or args.seeds > 1):
        raise EagleProbeError(
            "--init-from starts one fresh run from a checkpoint's weights: it does not combine "
            "with --resume (which continues the run in --out) or --seeds"
        )


def _fresh_configs(args: argparse.Namespace):
    """The model, task and training configurations of a fresh run, from the options."""
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig
    from eagle_probe.train import TrainConfig

    task = TaskConfig(
        task=args.task,
        n=args.n,
        d=args.d,
        n_prime=args.n_prime,
        d_prime=args.d_prime,
        noise=args.noise,
        rank=args.task_rank,
        alpha=args.alpha,
        kappa=args.kappa,
    )
    _check_share_heads(args)
    model_cfg = ModelConfig(
        regime=args.regime,
        n=args.n,
        d=args.d,
        n_prime=args.n_prime,
        d_prime=args.d_prime,
        n_layers=args.layers,
        n_heads=args.heads,
        machines=args.machines,
        share_heads=True if args.share_heads is None else args.share_heads,
        rank=args.rank,
        token_mask=args.token_mask,
        readout=args.readout,
        normalize=args.normalize,
        init=args.init,
        init_std=args.init_std,
        tokens=args.tokens,
    )
    train_cfg = TrainConfig(
        steps=args.steps if args.steps is not None else TrainConfig().steps,
        batch=args.batch,
        lr=args.lr,
        schedule=args.schedule,
        warmup=args.warmup,
        clip=args.clip,
        clip_qk=args.clip_qk,
        weight_decay=args.weight_decay,
        gain_lr=args.gain_lr,
        select=args.select,
        freeze_values_last=args.freeze_values_last,
        curriculum=args.curriculum,
        skip_spikes=args.skip_spikes,
        data_shards=args.data_shards,
        eval_every=args.eval_every,
        eval_batch=args.eval_batch,
        seed=args.seed,
    )
    return model_cfg, task, train_cfg


def _check_budget(args: argparse.Namespace, model_cfg, train_cfg) -> None:
    """Refuse a model, --batch, --eval-batch or --seeds beyond the memory budget."""
    from eagle_probe import budget

    limit = memory_budget(args)
    budget.check_model(model_cfg, limit)
    budget.check(budget.forward_bytes(model_cfg, train_cfg.batch, training=True), "--batch", limit)
    budget.check(
        budget.forward_bytes(model_cfg, max(train_cfg.eval_batch, 8192)), "--eval-batch", limit
    )
    if args.seeds > 1:
        # per seed: weights, gradients and Adam's two moments, its batch and its held-out prompts
        # (float64 blocks); once: a validation pass over 4096 prompts
        prompt = 2 * model_cfg.n_tokens * model_cfg.width * 8
        per_seed = 4 * budget.model_bytes(model_cfg)
        per_seed += (train_cfg.batch + train_cfg.eval_batch) * prompt
        need = args.seeds * per_seed + budget.forward_bytes(model_cfg, 4096)
        budget.check(need, f"--seeds {args.seeds}", limit)


def _attach_init_source(args: argparse.Namespace, source, model_cfg) -> None:
    """Check that the --init-from model can start this one; keep it and its hash on `args`."""
    from eagle_probe import checkpoint
    from eagle_probe.train import check_growable

    try:
        check_growable(source.cfg, model_cfg)
    except ValueError as exc:
        raise EagleProbeError(f"--init-from {args.init_from}: {exc}") from None
    args.init_source = source
    args.init_sha256 = checkpoint.sha256(args.init_from)


def run(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint, files

    _check_combinations(args)
    check_regime_options(args)
    source = None
    if args.init_from is not None:
        source, _, _ = checkpoint.load(args.init_from, max_bytes=memory_budget(args))
    out = files.as_path(args.out, "-o/--out")
    paths = _run_paths(args, out)
    outputs = [p for path in paths for p in _train_outputs(path)]
    resume = None
    if args.resume:
        model_cfg, task, train_cfg, resume = _resumed(args, paths)
    else:
        model_cfg, task, train_cfg = _fresh_configs(args)
    _check_budget(args, model_cfg, train_cfg)
    if source is not None:
        _attach_init_source(args, source, model_cfg)
    if not _lead_process():
        return _train_and_finish(args, out, paths, model_cfg, task, train_cfg, resume, None)
    replace = outputs if resume is not None else []
    claim = enter_claim(args, files.output_files(outputs, force=args.force, replace=replace))
    if args.save_every is not None:  # the run directory of `timeline`, published with the rest
        steps_dir = files.check_dir(out.with_suffix(".steps"), force=args.force, what="run dir")
        args.steps_dir = enter_claim(args, files.output_dir(steps_dir, force=args.force))
    return _train_and_finish(args, out, paths, model_cfg, task, train_cfg, resume, claim)


def _train_and_finish(args, out, paths, *rest) -> int:
    """`_run_training` with the stop signals of its end held: the first SIGINT, SIGTERM or SIGHUP
    stops the training, and any signal once the training has ended (a second one, or a first
    one during the wrap-up) waits until the files are written whole (`common.first_stop_only`),
    then ends the command with 128 + the signal and a line saying so. A stop that escapes the
    training outside its loop (the instant between its last step and its return) names the
    checkpoints the validations had already written."""
    from eagle_probe.cli.common import first_stop_only
    from eagle_probe.errors import signal_name, signal_of

    args.published = set()  # the checkpoints written so far (`_run_training`'s `write`)
    with first_stop_only() as args.stops:
        try:
            code = _run_training(args, out, paths, *rest)
        except KeyboardInterrupt as stop:
            kept = [str(p) for p in paths if p in args.published]
            if not kept or (isinstance(stop, Terminated) and str(stop)):
                raise  # nothing written yet, or a stop that says what became of the work
            name = signal_name(signal_of(stop))
            raise Terminated(
                signal_of(stop),
                f"stopped ({name}) as the training ended: {', '.join(kept)} hold(s) the weights "
                "of the last validation (--resume continues from them); the run summary was not "
                "written",
            ) from None
    held = list(dict.fromkeys(args.stops.held))
    if held:
        names = ", ".join(signal_name(s) for s in held)
        print(
            f"eagle-probe: {names} came while the run's files were written; held until they "
            "were whole",
            file=sys.stderr,
        )
        if code == 0:
            return 128 + held[0]
    return code


def _provenance(args: argparse.Namespace) -> dict[str, Any]:
    """What every checkpoint and summary of the run records about the command and machine."""
    argv = " ".join(sys.argv[1:]) if sys.argv else ""
    provenance = {
        "command": f"eagle-probe {argv}".strip(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "eagle_probe": __version__,
    }
    if getattr(args, "init_source", None) is not None:
        provenance["init_from"] = {"path": str(args.init_from), "sha256": args.init_sha256}
    return provenance


def _trained(args, model_cfg, task, train_cfg, resume, write, save_step):
    """[(model, metrics)] per seed: `train.train` for one seed (under torchrun: None in all but
    the first process), `ensemble.train_ensemble` for --seeds; `write(k, model, metrics)` after
    every validation."""
    from eagle_probe.ensemble import train_ensemble
    from eagle_probe.train import train

    if args.seeds > 1:
        seeds = list(range(train_cfg.seed, train_cfg.seed + args.seeds))
        return train_ensemble(
            model_cfg,
            task,
            train_cfg,
            seeds,
            progress=not args.no_progress,
            on_validate=write,
            resume=resume,
        )
    model, metrics = train(
        model_cfg,
        task,
        train_cfg,
        progress=not args.no_progress,
        on_validate=lambda model, metrics: write(0, model, metrics),
        resume=None if resume is None else resume[0],
        save_every=args.save_every or 0,
        on_save=save_step,
        init_from=getattr(args, "init_source", None),
    )
    if metrics.get("processes", 1) > 1:
        import torch.distributed as tdist

        if tdist.get_rank() != 0:
            return None  # rank 0 writes the checkpoint and reports
    return [(model, metrics)]


def _run_training(args, out, paths, model_cfg, task, train_cfg, resume, claim) -> int:
    """Train the seed (or the --seeds) into `paths` (`_run_paths`) and publish through `claim`
    (None: a torchrun worker that writes nothing); `resume`: one (state, metrics) per seed, or
    None."""
    from eagle_probe import checkpoint
    from eagle_probe.cli.common import EXIT_USER
    from eagle_probe.evaluate import against_zero, evaluate
    from eagle_probe.timeline import checkpoint_name

    provenance = _provenance(args)

    def write(k: int, model, metrics: dict[str, Any]) -> None:
        # Nothing is published before a validation has given finite numbers.
        if claim is None or metrics.get("best_val_selected") is None:
            return
        payload = checkpoint.jsonable(metrics | provenance)
        claim.write(paths[k], lambda handle: checkpoint.dump(handle, model, task, payload))
        args.published.add(paths[k])

    def save_step(step: int, model, info: dict[str, Any]) -> None:
        steps_dir = getattr(args, "steps_dir", None)
        if claim is not None and steps_dir is not None:
            checkpoint.save(steps_dir / checkpoint_name(step), model, task, info)

    results = _trained(args, model_cfg, task, train_cfg, resume, write, save_step)
    args.stops.hold()  # stops from here on wait until the files are whole (`_train_and_finish`)
    if results is None:
        return 0
    first = results[0][1]
    if first["stopped"] == "interrupted" and first.get("best_val_selected") is None:
        raise _unvalidated(first)  # the seeds validate together: none has kept weights
    decisive = "mse" if train_cfg.select == "mean" else "median_mse"
    diverged, lines = [], []
    for k, (model, metrics) in enumerate(results):
        seed = metrics["train_config"]["seed"]
        if metrics["stopped"] != "diverged":
            metrics["test"] = evaluate(model, task)
        # the number the kept weights were selected by must be finite on the test prompts too
        reason = _diverged(metrics, decisive)
        if reason is not None and len(results) == 1:
            raise EagleProbeError(
                f"training diverged ({reason}); {_left(paths[k], metrics, args.published)} - "
                "lower --lr or --init-std"
            )
        if reason is not None:
            diverged.append((seed, _left(paths[k], metrics, args.published)))
            continue
        write(k, model, metrics)
        summary = {key: v for key, v in metrics.items() if key not in ("history", "spikes")}
        claim.write_text(
            paths[k].with_suffix(".json"),
            json.dumps(checkpoint.jsonable(summary | provenance), indent=2) + "\n",
        )
        test = metrics["test"]
        lines.append(
            f"seed {seed}: wrote {paths[k]} | test MSE {test['mse']:.3e} "
            f"({against_zero(test['mse'], test['zero_mse'], spec='.1f', mark='x')}) | "
            f"{_spikes(metrics)}"
        )
    publish(args)
    if len(results) == 1:
        print(final_line(first, out))
        return _exit_code(first)
    print("\n".join(lines))
    print(
        f"{_status(first)}: {len(lines)} of {len(results)} seeds in {first['wall_seconds']:.0f} s"
    )
    if diverged:
        print(
            "eagle-probe: error: "
            + "; ".join(f"seed {seed} diverged: {left}" for seed, left in diverged)
            + " - lower --lr or --init-std",
            file=sys.stderr,
        )
        return EXIT_USER
    return _exit_code(first)


def seed_paths(out: Path, seeds: list[int]) -> list[Path]:
    """The checkpoint of each seed of `train --seeds`: `out` with {seed} filled in, or
    STEM_seedS.SUFFIX when `out` has no {seed}."""
    if "{seed}" in out.name:
        paths = [out.with_name(out.name.replace("{seed}", str(s))) for s in seeds]
    else:
        paths = [out.with_name(f"{out.stem}_seed{s}{out.suffix}") for s in seeds]
    if "{" in paths[0].name or "}" in paths[0].name:
        raise EagleProbeError(f"-o {out}: only {{seed}} may be filled in, once per seed")
    return paths


def _run_paths(args, out: Path) -> list[Path]:
    """The checkpoint of each seed the run trains: -o itself for one seed, the `seed_paths` of
    --seed … --seed+K-1 for --seeds K."""
    from eagle_probe.cli.common import SEED_LIMIT

    if args.seeds == 1:
        return [out]
    seeds = list(range(args.seed, args.seed + args.seeds))
    if seeds[-1] >= SEED_LIMIT:
        raise EagleProbeError(f"--seed {seeds[0]} --seeds {args.seeds} passes 2**32")
    return seed_paths(out, seeds)


def _resumed(args, paths: list[Path]):
    """`train --resume`: the checkpoints at `paths` (one a seed) to continue, as each was
    trained; with --seeds their training records must agree but for the seed, each holding its
    own. Returns (model config, task, train config, [(state, metrics)] per seed)."""
    from eagle_probe import checkpoint

    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        what = "an existing checkpoint at" if len(paths) == 1 else "the seeds' checkpoints: no"
        raise EagleProbeError(f"--resume needs {what} {', '.join(missing)}")
    loaded = [checkpoint.load(p, max_bytes=memory_budget(args)) for p in paths]
    records = [_training_record(p, prev) for p, (_, _, prev) in zip(paths, loaded, strict=True)]
    for k, (path, record) in enumerate(zip(paths, records, strict=True)):
        if len(paths) > 1 and record.get("seed") != args.seed + k:
            raise EagleProbeError(f"{path} holds seed {record.get('seed')}, not {args.seed + k}")
    first = {k: v for k, v in records[0].items() if k != "seed"}
    model_cfg, task = loaded[0][0].cfg, loaded[0][1]
    for path, record, (model, other_task, _) in zip(paths, records, loaded, strict=True):
        same = {k: v for k, v in record.items() if k != "seed"} == first
        if not same or model.cfg != model_cfg or other_task != task:
            raise EagleProbeError(
                f"{path} was trained with another configuration than {paths[0]}: resume them "
                "one at a time"
            )
    _check_resumed_options(args, paths[0], model_cfg, task, records[0])
    train_cfg = _resumed_config(paths[0], records[0], args.steps)
    return model_cfg, task, train_cfg, [(model.state_dict(), prev) for model, _, prev in loaded]


# The options a resumed run takes from its checkpoint: option (its destination) -> (config, field).
# Given on the command line, each must say what the checkpoint says; --steps alone may differ.
_MODEL_OPTIONS = ("regime", "n", "d", "n_prime", "d_prime", "machines", "share_heads", "rank")
_MODEL_OPTIONS += ("token_mask", "readout", "normalize", "init", "init_std", "tokens")
_TRAIN_OPTIONS = ("batch", "lr", "schedule", "warmup", "clip", "clip_qk", "weight_decay")
_TRAIN_OPTIONS += ("gain_lr", "select", "freeze_values_last", "curriculum", "skip_spikes")
_TRAIN_OPTIONS += ("data_shards", "eval_every", "eval_batch", "seed")
RESUMED_OPTIONS = {
    **{name: ("model", name) for name in _MODEL_OPTIONS},
    "layers": ("model", "n_layers"),
    "heads": ("model", "n_heads"),
    "task": ("task", "task"),
    "task_rank": ("task", "rank"),
    "alpha": ("task", "alpha"),
    "kappa": ("task", "kappa"),
    "noise": ("task", "noise"),
    **{name: ("train", name) for name in _TRAIN_OPTIONS},
}


def _check_resumed_options(args: argparse.Namespace, path: Path, model_cfg, task, record) -> None:
    """Refuse options given with --resume that contradict the run in `path` (its model, task
    and training record): the run continues as it was configured, so such an option would be
    ignored without a word."""
    sources = {"model": model_cfg.to_dict(), "task": task.to_dict(), "train": record}
    given = getattr(args, "given", set())
    contradictions = []
    for dest, (source, field) in RESUMED_OPTIONS.items():
        if dest not in given or (dest == "seed" and args.seeds > 1):  # seeds: checked per file
            continue
        value, stored = getattr(args, dest), sources[source].get(field)
        if value != stored:
            flag = ("--no-" if value is False else "--") + dest.replace("_", "-")
            shown = flag if isinstance(value, bool) else f"{flag} {value!r}"  # a switch, or not
            contradictions.append(f"{shown} (the run's: {stored!r})")
    if contradictions:
        raise EagleProbeError(
            f"--resume continues the run in {path} as it was configured, and "
            f"{', '.join(contradictions)} contradict{'s' if len(contradictions) == 1 else ''} "
            "it; leave such options out (--steps may extend the run), or start a new run with "
            "--force"
        )
