"""`eagle-probe compare`: the network beside its extracted algorithm off the training
distribution."""

from __future__ import annotations

import argparse

from eagle_probe import names
from eagle_probe.cli.common import (
    Parser,
    add_force,
    add_model,
    add_results_out,
    add_seed,
    claim_dir,
    load_model,
    more_steps,
    out_dir,
    positive_int,
    publish_results,
)
from eagle_probe.errors import EagleProbeError

HELP = "score a checkpoint and its algorithm on shifted prompts"


def add_compare(parser: Parser) -> None:
    add_model(parser)
    add_results_out(parser, "compare")
    parser.add_argument(
        "--prompts", type=positive_int, default=256, help="prompts per sweep point (256)"
    )
    parser.add_argument(
        "--sweeps",
        default=None,
        help=f"comma-separated sweeps ({','.join(names.SWEEPS)}; default: the model's layout's, "
        "scale,kappa,rank,alpha,noise,samples or, in the sample layout, "
        "input_scale,query_scale,task_noise,samples)",
    )
    parser.add_argument(
        "--more-steps",
        type=more_steps,
        default=4,
        help="the algorithm is also run for this many times the network's layers (4; at most "
        "1000; feature layout)",
    )
    parser.add_argument(
        "--extraction",
        default=None,
        metavar="PATH",
        help="read the steps from this extraction of the model (extraction.json, or the folder "
        "`extract --out` wrote) instead of extracting again",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress reports")
    add_seed(parser, 0, "every prompt drawn")
    add_force(parser)


def run(args: argparse.Namespace) -> int:
    import time

    start = time.perf_counter()
    from eagle_probe import checkpoint
    from eagle_probe.compare import CompareConfig, compare
    from eagle_probe.plots import compare_figures

    sweeps = None
    if args.sweeps is not None:
        sweeps = tuple(s.strip() for s in args.sweeps.split(",") if s.strip())
    unknown = [s for s in sweeps or () if s not in names.SWEEPS]
    if unknown or sweeps == ():
        raise EagleProbeError(
            f"--sweeps: unknown sweep(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(names.SWEEPS)}"
        )
    if args.prompts < 2:
        raise EagleProbeError(f"--prompts must be at least 2, got {args.prompts}")
    out = out_dir(args.out, args.force)
    model, task = load_model(args)
    cfg = CompareConfig(
        prompts=args.prompts,
        sweeps=sweeps,
        more_steps=args.more_steps,
        seed=args.seed,
        sensitivity_prompts=min(32, args.prompts),
    )
    given = None if args.extraction is None else read_extraction(args.extraction, args.model, model)
    tmp = claim_dir(args, out)
    from eagle_probe.progress import reporter

    progress = None if args.no_progress else reporter()
    result = compare(model, task, cfg, extraction=given, progress=progress)
    result.json["model"]["checkpoint"] = str(args.model)
    result.json["model"]["sha256"] = checkpoint.sha256(args.model)
    publish_results(args, out, tmp, "compare", result, compare_figures, start)
    return 0


def read_extraction(path: str, checkpoint_path: str, model):
    """The extraction at `path` (extraction.json or the folder holding it), read back for
    `model` (`extract.load_extraction`); it must be of this very checkpoint where it records one
    (the sha256 `extract --out` writes)."""
    import json
    from pathlib import Path

    from eagle_probe import checkpoint
    from eagle_probe.extract import load_extraction

    file = Path(path)
    if file.is_dir():
        file = file / "extraction.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EagleProbeError(f"--extraction: no file {file}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise EagleProbeError(f"--extraction: {file} is not readable JSON ({err})") from None
    recorded = (data.get("model") or {}).get("sha256") if isinstance(data, dict) else None
    if recorded is not None and recorded != checkpoint.sha256(checkpoint_path):
        raise EagleProbeError(
            f"--extraction: {file} is an extraction of another checkpoint (sha256 "
            f"{recorded[:12]}…), not of {checkpoint_path}"
        )
    try:
        return load_extraction(data, model)
    except EagleProbeError as err:
        raise EagleProbeError(f"--extraction: {file}: {err}") from None
