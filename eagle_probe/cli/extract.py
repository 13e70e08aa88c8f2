"""`eagle-probe extract`: recover the algorithm a checkpoint runs."""

from __future__ import annotations

import argparse
import json
import textwrap

from eagle_probe.cli.common import (
    Parser,
    add_force,
    add_model,
    add_seed,
    enter_claim,
    finite_outputs,
    memory_budget,
    out_dir,
    positive_int,
    publish,
    set_threads,
)
from eagle_probe.errors import EagleProbeError

HELP = "recover the algorithm a checkpoint runs"
EXPORT_GAP = 0.05  # extract warns when the faithful export is further than this from the network


def add_extract(parser: Parser) -> None:
    add_model(parser)
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="write DIR/extraction.json, solver.py, report.html and the figures (default: "
        "print only)",
    )
    parser.add_argument(
        "--probe-batch",
        type=positive_int,
        default=None,
        help="prompts in the probe batch (256; fewer for prompts above 2^22 / 256 entries)",
    )
    parser.add_argument(
        "--probe-chunk",
        type=positive_int,
        default=None,
        help="prompts captured at once, with their query probes (sized to about 256 MiB)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress reports")
    add_seed(parser, 0, "the probe prompts")
    parser.add_argument(
        "--no-control", action="store_true", help="skip the untrained-model control"
    )
    add_force(parser)


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, extract (capture, views, control, verdict), then write the outputs
    and print the report."""
    import time

    start = time.perf_counter()
    from eagle_probe import budget, checkpoint, files
    from eagle_probe.capture import default_probe_batch, default_threads
    from eagle_probe.extract import extract, extract_bytes, training_record
    from eagle_probe.progress import reporter

    out = out_dir(args.out, args.force)
    model, task, metrics = checkpoint.load(args.model, max_bytes=memory_budget(args))
    if not args.threads and default_threads(model.cfg) is not None:
        set_threads(default_threads(model.cfg))
    probes = args.probe_batch if args.probe_batch is not None else default_probe_batch(model.cfg)
    if probes < 2:
        raise EagleProbeError(f"--probe-batch must be at least 2, got {probes}")
    budget.check(
        extract_bytes(model.cfg, probes, args.probe_chunk),
        f"extracting this {model.cfg.n_layers}-layer, {model.cfg.heads}-head model "
        f"(n = {model.cfg.n}, d = {model.cfg.d}) with --probe-batch {probes}",
        memory_budget(args),
    )
    finite_outputs(model, task, str(args.model), "there is no algorithm to extract")
    claim = None if out is None else files.output_dir(out, force=args.force, stale=("solver.py",))
    tmp = enter_claim(args, claim) if claim is not None else None
    result = extract(
        model,
        task,
        probe_batch_size=probes,
        seed=args.seed,
        control=not args.no_control,
        chunk=args.probe_chunk,
        device=args.device,
        progress=None if args.no_progress else reporter(),
    )
    result.training = training_record(metrics)  # the report draws the training curve
    lines = [result.render(str(args.model))]  # printed once the outputs are written
    if out is not None:
        lines += _write(args, result, task, tmp, out, time.perf_counter() - start)
    print("\n".join(lines))
    return 0


def _write(args: argparse.Namespace, result, task, tmp, out, seconds: float) -> list[str]:
    """Write extraction.json, the solver (feature layout) and the report into the claimed
    folder `tmp`, publish it as `out`, and return the lines to print after the report."""
    import numpy as np

    from eagle_probe import checkpoint
    from eagle_probe.export import faithful_gap, write_solver
    from eagle_probe.files import jsonable
    from eagle_probe.report import write_report
    from eagle_probe.wording import percent, value

    payload = result.to_json()
    payload["model"]["checkpoint"] = str(args.model)
    payload["model"]["sha256"] = checkpoint.sha256(args.model)
    payload["timings"]["total"] = seconds
    lines = []
    if result.info["tokens"] == "samples":  # the exported solver runs EAGLE, not GD++
        payload["export"] = {
            "solver": None,
            "reason": "the exported solver runs EAGLE; a sample-layout model runs GD, GD++ "
            "or preconditioned GD (see views.verdict)",
        }
        written = f"wrote {out / 'extraction.json'} and {out / 'report.html'}"
    else:
        write_solver(tmp / "solver.py", payload, result.projectors)
        gap = faithful_gap(
            tmp / "solver.py", result.held_out.z0, result.network_pred, d=task.d, n=task.n
        )
        prompts = min(256, len(result.held_out.z0))
        payload["export"] = {"faithful_gap": gap, "prompts": prompts}
        # ‖D_network‖ = 0 on these prompts: a gap relative to it is not defined
        silent = not np.any(result.network_pred[:prompts])
        versus = "not defined: the network predicts 0 on each" if silent else value(gap)
        line = (
            f"exported solver, faithful mode, against the network on {prompts} held-out prompts: "
        )
        lines.append(textwrap.fill(f"{line}relative gap {versus}", 100, subsequent_indent="  "))
        if not gap <= EXPORT_GAP and not silent:
            warning = (
                f"the faithful export differs from the network by {percent(gap, signed=False)} "
                f"(> {EXPORT_GAP:.0%}): its constant EAGLE steps do not reproduce the network"
            )
            payload["warnings"].append(warning)
            lines.append(textwrap.fill(f"warning: {warning}", 100, subsequent_indent="  "))
        written = f"wrote {out / 'extraction.json'}, {out / 'solver.py'} and {out / 'report.html'}"
    (tmp / "extraction.json").write_text(json.dumps(jsonable(payload), indent=2) + "\n")
    write_report(result, tmp, str(args.model))
    publish(args)
    return [*lines, written]
