"""`eagle-probe evaluate`: test MSE of a checkpoint on fresh prompts."""

from __future__ import annotations

import argparse
import json
import math

from eagle_probe.cli.common import (
    Parser,
    add_model,
    add_seed,
    load_model,
    memory_budget,
    positive_int,
)
from eagle_probe.errors import EagleProbeError
from eagle_probe.wording import percent

HELP = "test MSE of a checkpoint on fresh prompts"


def add_evaluate(parser: Parser) -> None:
    add_model(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_seed(parser, 12345, "the test prompts")
    parser.add_argument(
        "--batch", type=positive_int, default=8192, help="number of test prompts (8192)"
    )
    parser.add_argument(
        "--draws",
        type=positive_int,
        default=1,
        help="also evaluate on this many draws in all (seeds seed, seed + 1, …) and give each "
        "MSE's lowest, median and highest over them (1: the one draw)",
    )


def run(args: argparse.Namespace) -> int:
    from eagle_probe import budget, checkpoint
    from eagle_probe.evaluate import (
        against_zero,
        evaluate,
        model_readout_text,
        over_draws,
        readout_flag,
        readout_sign,
    )

    model, task = load_model(args)
    budget.check(budget.forward_bytes(model.cfg, args.batch), "--batch", memory_budget(args))
    model = model.to(args.device)
    result = evaluate(model, task, batch=args.batch, seed=args.seed)
    others = [
        evaluate(model, task, batch=args.batch, seed=args.seed + k) for k in range(1, args.draws)
    ]
    bad = [k for k in ("mse", "zero_mse", "worst_mse") if not math.isfinite(result[k])]
    if bad:
        raise EagleProbeError(
            f"{args.model}: the {bad[0].replace('_', ' ')} on {result['prompts']} prompts is "
            f"{result[bad[0]]}, not a finite number: the model's outputs overflow"
        )
    sign = readout_sign(model)
    flag = readout_flag(sign, result["mse"], result["flipped_mse"])
    result = {"model": str(args.model), "regime": model.cfg.regime, "task": task.task} | result
    result |= {"readout": sign, "readout_flag": flag}
    if others:  # one prompt can move a draw's mean: the interval over draws shows by how much
        result["over_draws"] = over_draws([result, *others])
    if args.json:
        print(json.dumps(checkpoint.jsonable(result)))
        return 0
    print(
        f"{args.model}: {model.cfg.regime}, {model.cfg.n_layers} layers, "
        f"{model.cfg.heads} head(s), task {task.task} (n={task.n}, d={task.d}, "
        f"n'={task.n_prime}, d'={task.d_prime}), {result['prompts']} fresh prompts"
    )
    print(model_readout_text(model))
    if flag is not None:
        print(f"warning: {flag}")
    rows = [
        ("test MSE", result["mse"]),
        ("zero predictor MSE", result["zero_mse"]),
        ("optimal B A+ C MSE", result["optimal_mse"]),
        ("median prompt MSE", result["median_mse"]),
        ("0.1%-trimmed MSE", result["trimmed_mse"]),  # the worst 0.1% of prompts dropped
        ("worst prompt MSE", result["worst_mse"]),
    ]
    for name, value in rows:
        print(f"  {name:<22}{value:.3e}")
    versus = against_zero(result["mse"], result["zero_mse"], spec=".1f", mark="x")
    print(f"  {'improvement':<22}{versus}")
    worse = percent(result["worse_than_zero"], signed=False, spec=".3g")
    print(
        f"  {'worse than zero':<22}{worse} of prompts ({result['worse_than_zero_prompts']} of "
        f"{result['prompts']}: error above the prompt's mean of D²)"
    )
    print(
        f"  {'worst prompt ‖A‖₂':<22}{result['worst_norm_a']:.2f} "
        f"(largest seen {result['max_norm_a']:.2f})"
    )
    if others:
        print(
            f"over {args.draws} draws of {args.batch} prompts (seeds {args.seed}–"
            f"{args.seed + args.draws - 1}): lowest / median / highest"
        )
        names = {
            "mse": "test MSE",
            "median_mse": "median prompt MSE",
            "trimmed_mse": "0.1%-trimmed MSE",
            "worst_mse": "worst prompt MSE",
        }
        for key, name in names.items():
            span = result["over_draws"][key]
            print(f"  {name:<22}{span['low']:.3e} / {span['median']:.3e} / {span['high']:.3e}")
        span = result["over_draws"]["worse_than_zero"]
        shares = " / ".join(
            percent(span[k], signed=False, spec=".3g") for k in ("low", "median", "high")
        )
        print(f"  {'worse than zero':<22}{shares}")
    return 0
