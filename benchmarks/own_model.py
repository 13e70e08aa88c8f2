"""Benchmark: a researcher's own model through `eagle-probe import` and `extract`.

Usage: python benchmarks/own_model.py [--steps 300] [--seed 0] [--json OUT]

Trains von Oswald et al.'s linear self-attention (tests/von_oswald.py: tokens [x_i, y_i], the
query [x_q, 0] last, nn.Linear W_Q/W_K/W_V/W_P without bias, ŷ = −y_q) with 1 and 2 layers on
d = 5, N = 20 for a few hundred Adam steps (300 at lr 1e-2, 500 at 3e-2 for two layers, cosine
decay), saves each as a plain state_dict and runs the CLI as a user would. Targets:
`eagle-probe import --layout samples FILE --n 20` with no other flag gives a checkpoint whose
forward equals the source's to 1e-12 relative (float64); `extract` names the 1-layer model GD
with α_0 within 2% of −1/(N + d + 1) (measured: GD, α_0 −0.03864 against −0.03846, +0.5%; the
2-layer one GD then GD++; forwards equal to 1e-16 and 3e-16); a TransformerLens-style dict with
non-zero biases is refused in one line naming them; `extract trained_models/centralized.pt`
prints the label, family and confidence in its first 3 lines and no line over 100 characters; a
model read with the wrong readout sign gets the readout hint. About 45 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from von_oswald import LSA, draw, tokens, train  # noqa: E402

from eagle_probe import checkpoint  # noqa: E402
from eagle_probe.cli import main as cli  # noqa: E402

N, D = 20, 5


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(argv)
    return code, out.getvalue(), err.getvalue()


def forward_gap(source: LSA, path: Path, prompts: int = 256) -> float:
    model, _, _ = checkpoint.load(path)
    x, y, x_q, _ = draw(prompts, N, D, torch.Generator().manual_seed(99))
    e = tokens(x, y, x_q)  # (b, N + 1, d + 1)
    with torch.no_grad():
        want = source(e)
        got = model(e.transpose(1, 2))[:, 0, 0]
    return float((got - want).abs().max() / want.abs().max())


def report_shape(text: str) -> dict:
    lines = text.splitlines()
    return {"first_lines": lines[:3], "longest_line": max(map(len, lines))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="Adam steps of the 1-layer model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict = {}
    theory = -1.0 / (N + D + 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for layers in (1, 2):
            torch.manual_seed(args.seed + layers)
            start = time.perf_counter()
            # two layers: more steps at a higher rate, so the second layer settles on GD++
            steps, lr = (args.steps, 1e-2) if layers == 1 else (args.steps + 200, 3e-2)
            source = train(LSA(D, layers).double(), N, D, steps, seed=args.seed + layers, lr=lr)
            trained = time.perf_counter() - start
            torch.save(source.state_dict(), tmp / f"lsa{layers}.pt")
            argv = ["import", "--layout", "samples", str(tmp / f"lsa{layers}.pt"), "--n", str(N)]
            code, out, err = run(argv + ["-o", str(tmp / f"model{layers}.pt")])
            assert code == 0, err
            gap = forward_gap(source, tmp / f"model{layers}.pt")
            start = time.perf_counter()
            code, text, err = run(["extract", str(tmp / f"model{layers}.pt"), "--no-progress"])
            seconds = time.perf_counter() - start
            assert code == 0, err
            row = {
                "adam_steps": steps,
                "train_s": trained,
                "import_message": out.splitlines(),
                "forward_gap": gap,
                "extract_s": seconds,
                **report_shape(text),
            }
            from eagle_probe.extract import extract

            model, task, _ = checkpoint.load(tmp / f"model{layers}.pt")
            ex = extract(model, task, control=False)
            row["labels"] = [lay["label"] for lay in ex.views["verdict"].json["layers"]]
            row["verdict"] = ex.verdict["headline"]
            if layers == 1:
                lay = ex.views["verdict"].json["layers"][0]
                row |= {
                    "label": lay["label"],
                    "alpha_0": lay["alpha_0"],
                    "theory": theory,
                    "alpha_0_off": lay["alpha_0"] / theory - 1.0,
                }
            results[f"lsa_{layers}layer"] = row
        # the wrong readout sign: a +y model imported as −y
        torch.manual_seed(7)
        plus = train(LSA(D, 1, readout=1).double(), N, D, args.steps, seed=7)
        torch.save(plus.state_dict(), tmp / "plus.pt")
        run(
            ["import", "--layout", "samples", str(tmp / "plus.pt"), "--n", str(N)]
            + ["-o", str(tmp / "plus_model.pt")]
        )
        code, text, _ = run(["extract", str(tmp / "plus_model.pt"), "--no-progress"])
        results["wrong_sign"] = {
            "first_lines": text.splitlines()[:3],
            "readout_hint": "--readout +1" in text,
        }
        # TransformerLens-style dict with biases
        rng = np.random.default_rng(0)
        E = D + 1
        tl = {
            f"blocks.0.attn.W_{w}": torch.from_numpy(rng.standard_normal((1, E, E))) for w in "QKVP"
        }
        tl["blocks.0.attn.W_O"] = torch.from_numpy(rng.standard_normal((1, E, E)))
        tl["blocks.0.attn.b_Q"] = torch.full((1, E), 0.5, dtype=torch.float64)
        tl["embed.W_E"] = torch.ones(3, E, dtype=torch.float64)
        tl["unembed.W_U"] = torch.ones(E, 3, dtype=torch.float64)
        torch.save(tl, tmp / "tl.pt")
        code, _, err = run(
            ["import", "--layout", "samples", str(tmp / "tl.pt"), "--n", str(N)]
            + ["-o", str(tmp / "tl_model.pt")]
        )
        results["tl_biases"] = {
            "exit": code,
            "lines": len(err.strip().splitlines()),
            "message": err.strip(),
            "written": (tmp / "tl_model.pt").exists(),
        }
    start = time.perf_counter()
    code, text, _ = run(
        ["extract", str(ROOT / "trained_models" / "centralized.pt"), "--no-progress"]
    )
    results["centralized"] = {"extract_s": time.perf_counter() - start, **report_shape(text)}
    for name, row in results.items():
        print(f"{name}:")
        for key, value in row.items():
            if isinstance(value, list):
                print(f"  {key}:")
                for line in value:
                    print(f"    {line}")
            else:
                print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
