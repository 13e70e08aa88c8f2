"""Benchmark: do distributed models send only C and D? The communication view over seed checkpoints.

Usage: python benchmarks/distributed_question.py CKPT [CKPT …] [--prompts 2048] [--json OUT]

For every distributed checkpoint: its test MSE on 8,192 fresh prompts (seed 12345, × below the
zero predictor), then `extract(…, views=("eagle", "fidelity", "projection", "communication"))` on
`--prompts` held-out prompts: whether A columns are sent (`a_columns_sent`), the layers that send,
the largest share of a head's ‖W_VP‖² reading or writing other machines' A/B columns, the MSE
ratios with that channel zeroed (reads and writes; writes alone) and, in the paper's architecture
(regime distributed: a C/D copy per machine), the A traffic's part of the cross-machine ‖W_VP‖²
energy and the MSE ratio with the writes into other machines' C/D copies zeroed. The paper reports
that its distributed models communicate only C and D; a model that sends A columns is not its
algorithm. Works on both distributed architectures (distributed-open: its values read every
machine, so it can send A columns the paper's cannot gather).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate
from eagle_probe.extract import extract


def one(path: Path, prompts: int) -> dict:
    model, task, metrics = checkpoint.load(path)
    if not model.cfg.spec.machines:
        raise SystemExit(f"{path}: a {model.cfg.regime} model, not a distributed one")
    test = evaluate(model, task, batch=8192, seed=12345)
    ex = extract(
        model,
        task,
        probe_batch_size=256,
        test_batch=prompts,
        control=False,
        views=("eagle", "fidelity", "projection", "communication"),
    )
    comm = ex.views["communication"].json
    shares = [h["cross_a_any_share"] for lay in comm["layers"] for h in lay["heads"]]
    return {
        "checkpoint": str(path),
        "regime": model.cfg.regime,
        "cross_a_fraction": comm.get("cross_a_fraction"),
        "cd_writes_zeroed": comm.get("cross_cd_ablation"),
        "steps": metrics.get("steps_done"),
        "lr": metrics.get("train_config", {}).get("lr"),
        "schedule": metrics.get("train_config", {}).get("schedule"),
        "mse": test["mse"],
        "below_zero": test["zero_mse"] / test["mse"],
        "a_columns_sent": comm["a_columns_sent"],
        "layers_sending": [lay["layer"] for lay in comm["layers"] if lay["a_columns_sent"]],
        "max_cross_a_any_share": max(shares),
        "channel_zeroed": comm["cross_a_any_ablation"],
        "writes_zeroed": comm["cross_a_ablation"],
        "read_as": ex.info["family"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--prompts", type=int, default=2048)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for path in args.checkpoints:
        row = one(path, args.prompts)
        rows.append(row)
        print(
            f"{path.name}: {row['steps']} steps, lr {row['lr']} {row['schedule']}; test MSE "
            f"{row['mse']:.3g} ({row['below_zero']:.1f}x); A columns sent: "
            f"{row['a_columns_sent']} (layers {row['layers_sending']}); max share "
            f"{row['max_cross_a_any_share']:.0%}; channel zeroed x{row['channel_zeroed']:.3g}, "
            f"writes zeroed x{row['writes_zeroed']:.3g}"
            + (
                f"; A traffic {row['cross_a_fraction']:.2%} of the cross-machine energy, C/D "
                f"writes zeroed x{row['cd_writes_zeroed']:.3g}"
                if row["cross_a_fraction"] is not None
                else ""
            )
            + f"; read as {row['read_as']}",
            flush=True,
        )
    sent = sum(r["a_columns_sent"] for r in rows)
    print(
        f"{sent} of {len(rows)} send A columns; median test MSE "
        f"{statistics.median(r['mse'] for r in rows):.3g}"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
