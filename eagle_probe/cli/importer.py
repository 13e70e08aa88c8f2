"""`eagle-probe import`: convert another codebase's weights into a checkpoint."""

from __future__ import annotations

import argparse

from eagle_probe.cli.common import (
    Parser,
    _claim,
    _positive_int,
    _publish,
)

HELP = "convert another codebase's weights into a checkpoint"


def _add_import(parser: Parser) -> None:
    parser.add_argument("weights", help="weights file (.pt, .npz or .safetensors)")
    parser.add_argument("--layout", required=True, help="eagle-probe, samples or ahn")
    parser.add_argument("--n", type=_positive_int, required=True, help="samples n of the prompts")
    parser.add_argument("--n-prime", type=_positive_int, default=1, help="queries n' (1)")
    parser.add_argument("--d", type=_positive_int, default=None, help="feature layout: rows d of A")
    parser.add_argument("--d-prime", type=_positive_int, default=None, help="outputs d' (1)")
    parser.add_argument("--dtype", default="float32", help="float32 or float64 (float32)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")
    parser.add_argument("-o", "--out", required=True, help="checkpoint to write")


def run(args: argparse.Namespace) -> int:
    from eagle_probe import checkpoint, files
    from eagle_probe.layouts import import_file

    out = files.check_file(files.as_path(args.out, "-o/--out"), force=args.force)
    model, task = import_file(
        args.layout,
        args.weights,
        n=args.n,
        n_prime=args.n_prime,
        d=args.d,
        d_prime=args.d_prime,
        dtype=args.dtype,
    )
    cfg = model.cfg
    claim = _claim(args, files.output_files([out], force=args.force))
    metrics = {"imported": {"layout": args.layout, "from": str(args.weights)}}
    claim.write(out, lambda handle: checkpoint.dump(handle, model, task, metrics))
    _publish(args)
    print(
        f"wrote {out}: {cfg.tokens} layout, {cfg.n_layers} layers x {cfg.heads} head(s), "
        f"d = {cfg.d}, d' = {cfg.d_prime}, n = {cfg.n}, n' = {cfg.n_prime}, {cfg.dtype}"
    )
    return 0
