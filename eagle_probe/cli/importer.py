"""`eagle-probe import`: convert another codebase's weights into a checkpoint."""

from __future__ import annotations

import argparse

from eagle_probe.cli.common import (
    Parser,
    enter_claim,
    memory_budget,
    positive_int,
    publish,
)
from eagle_probe.errors import EagleProbeError

HELP = "convert another codebase's weights into a checkpoint"
SIGN_PROMPTS = 1024  # fresh prompts of the readout-sign check


def _readout(text: str) -> int:
    if text not in ("-1", "+1", "1"):
        raise argparse.ArgumentTypeError(
            f"must be -1 (the prediction is minus the query's label entry) or +1 (the entry "
            f"itself), got {text!r}"
        )
    return int(text)


def add_import(parser: Parser) -> None:
    parser.add_argument("weights", help="weights file (.pt, .npz or .safetensors)")
    parser.add_argument("--layout", required=True, help="eagle-probe, samples or ahn")
    parser.add_argument("--n", type=positive_int, required=True, help="samples n of the prompts")
    parser.add_argument("--n-prime", type=positive_int, default=1, help="queries n' (1)")
    parser.add_argument("--d", type=positive_int, default=None, help="feature layout: rows d of A")
    parser.add_argument("--d-prime", type=positive_int, default=None, help="outputs d' (1)")
    parser.add_argument(
        "--dtype", default="float64", help="float64 or float32 (float64: exact to round-off)"
    )
    parser.add_argument(
        "--heads",
        type=positive_int,
        default=None,
        help="heads side by side in each nn.Linear projection (read from 3-D weights, else 1)",
    )
    parser.add_argument(
        "--readout",
        type=_readout,
        default=-1,
        help="sign the source model reads its prediction with from the query's label entry: "
        "-1 (the negated entry, this project's convention) or +1 (-1)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the key mapping and write nothing"
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    parser.add_argument("-o", "--out", default=None, help="checkpoint to write")


def run(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint, files
    from eagle_probe.conventions import plan_import
    from eagle_probe.evaluate import evaluate, readout_flag, readout_text
    from eagle_probe.layouts import LAYOUTS, import_arrays, read_arrays
    from eagle_probe.wording import plural

    if args.layout not in LAYOUTS:
        raise EagleProbeError(f"unknown layout {args.layout!r}; choose from {', '.join(LAYOUTS)}")
    if args.out is None and not args.dry_run:
        raise EagleProbeError("-o/--out is required (or pass --dry-run to see the mapping only)")
    out = None
    if not args.dry_run:
        out = files.check_file(files.as_path(args.out, "-o/--out"), force=args.force)
    arrays = read_arrays(args.weights, max_bytes=memory_budget(args))
    # printed once the import has worked: a refused input gets its one line and nothing else
    lines = [readout_text(float(args.readout), samples=args.layout != "eagle-probe")]
    if args.layout != "ahn":
        lines += plan_import(arrays, heads=args.heads).lines()
    model, task = import_arrays(
        args.layout,
        arrays,
        n=args.n,
        n_prime=args.n_prime,
        d=args.d,
        d_prime=args.d_prime,
        dtype=args.dtype,
        heads=args.heads,
        readout=args.readout,
        max_bytes=memory_budget(args),
    )
    cfg = model.cfg
    # the readout sign never silent: the negated predictions against the truth on fresh prompts
    check = evaluate(model, task, batch=SIGN_PROMPTS, seed=0)
    flag = readout_flag(args.readout, check["mse"], check["flipped_mse"])
    print("\n".join(lines + ([f"warning: {flag}"] if flag is not None else [])))
    what = (
        f"{cfg.tokens} layout, {plural(cfg.n_layers, 'layer')} x {plural(cfg.heads, 'head')}, "
        f"d = {cfg.d}, "
        f"d' = {cfg.d_prime}, n = {cfg.n}, n' = {cfg.n_prime}, {cfg.dtype}, readout "
        f"{args.readout:+d}"
    )
    if args.dry_run:
        print(f"dry run, nothing written: would write {what}")
        return 0
    claim = enter_claim(args, files.output_files([out], force=args.force))
    metrics = {"imported": {"layout": args.layout, "from": str(args.weights)}}
    claim.write(out, lambda handle: checkpoint.dump(handle, model, task, metrics))
    publish(args)
    print(f"wrote {out}: {what}")
    return 0
