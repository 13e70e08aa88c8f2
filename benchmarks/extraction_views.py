"""Every view of the extraction on the shipped models, as the markdown tables of docs/results.md.

Usage: python benchmarks/extraction_views.py [MODEL.pt ...]

Per model: the verdict, the weight projection (network vs all layers projected, each layer
alone), the best EAGLE (optimal and distilled, with final gradients), and per layer the steps read
from activations and from weights, the Table-1 metric one-step and end-to-end (prompt units) with
its relative form and the untrained control's, the design form's R², the label.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from eagle_probe import checkpoint
from eagle_probe.extract import extract

MODELS = ["centralized", "centralized_8head", "distributed", "constrained"]


def g(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}"


def main() -> None:
    paths = sys.argv[1:] or [f"trained_models/{m}.pt" for m in MODELS]
    for path in paths:
        model, task, _ = checkpoint.load(path)
        t0 = time.perf_counter()
        ex = extract(model, task)
        seconds = time.perf_counter() - t0
        v = ex.views
        proj, opt = v["projection"].json, v["optimum"].json
        net = proj["network_mse"]
        print(f"### {Path(path).name} ({seconds:.0f} s)\n")
        print(f"Verdict: **{ex.verdict['label']}**. {ex.verdict['text']}\n")
        print(
            f"Projection: network {net:.3e}, all layers projected {proj['projected_mse']:.3e} "
            f"({(proj['projected_mse'] / net - 1) * 100:+.1f}%); each layer alone "
            + ", ".join(f"{(lay['mse'] / net - 1) * 100:+.1f}%" for lay in proj["layers"])
        )
        for name in ("optimal", "distilled"):
            f = opt[name]
            print(
                f"- {name}: MSE {f['mse']:.3e} ({f['mse'] / net:.2f}× network), a = "
                f"{[round(x, 3) for x in f['a_steps']]}, c = {[round(x, 3) for x in f['c_steps']]}"
                f", ‖∇‖ {f['gradient_norm']:.1e}, relative {f['relative_gradient']:.1e}"
            )
        ctrl = ex.control["fidelity"].json["layers"]
        print(
            "\n| layer | a act. | c act. | a wts | c wts | 1-step | rel 1-step | control rel | "
            "end-to-end | paper | R² | label |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        t = ex.layers
        for row, c in zip(t.itertuples(), ctrl, strict=True):
            print(
                f"| {row.layer} | {g(row.a_step)} | {g(row.c_step)} | {g(row.a_weights)} | "
                f"{g(row.c_weights)} | {row.fidelity_one_step:.2e} | "
                f"{row.fidelity_one_step_rel:.3g} | {c['one_step']['relative']:.3g} | "
                f"{row.fidelity:.2e} | {v['fidelity'].json['layers'][row.layer]['paper']:.2e} | "
                f"{row.r2:.3f} | {row.label} |"
            )
        for w in ex.warnings:
            print(f"- warning: {w}")
        print()


if __name__ == "__main__":
    main()
