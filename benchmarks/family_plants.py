"""Ground truth in every regime: exact plants of each algorithm family through the whole extraction.

For every case (centralized 1–8 heads; distributed M = 2, 3, 6; sketched r = 3, 5 with 1–4 heads
and a per-layer random orthogonal sketch; the distributed plant that runs the centralized update
across machines; float64 and float32 weights) this plants the family with `layouts.plant`,
extracts it, writes the solver and prints one row: the largest relative error of the recovered
steps (eagle and projection views), the layer labels and the verdict's family, whether term
discovery found exactly the family's terms (`views.terms.layers[l].family`, nothing else stable)
and its largest relative residual, what the communication view says of A columns, the sketch
view's ranks and largest projector gap, and the faithful export's largest relative difference
from the network on prompts 1000× the training scale.

    python benchmarks/family_plants.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle_probe.capture import float64_copy  # noqa: E402
from eagle_probe.export import write_solver  # noqa: E402
from eagle_probe.extract import extract  # noqa: E402
from eagle_probe.layouts import plant  # noqa: E402
from eagle_probe.model import ModelConfig  # noqa: E402
from eagle_probe.tasks import TaskConfig, make_generator, sample  # noqa: E402

N = D = 6
A_STEPS, C_STEPS = [0.35, 0.3, 0.25], [0.8, 0.7, 0.6]
VIEWS = (
    "eagle", "fidelity", "projection", "weights", "terms", "communication", "sketch", "verdict",
)  # fmt: skip
CASES = [
    ("centralized", {"n_heads": 1}, None),
    ("centralized", {"n_heads": 2}, None),
    ("centralized", {"n_heads": 8}, None),
    ("distributed", {"machines": 2}, None),
    ("distributed", {"machines": 3}, None),
    ("distributed", {"machines": 6}, None),
    ("constrained", {"rank": 3, "n_heads": 1}, None),
    ("constrained", {"rank": 3, "n_heads": 4}, None),
    ("constrained", {"rank": 5, "n_heads": 1}, None),
    ("constrained", {"rank": 5, "n_heads": 2}, None),
    ("constrained", {"rank": 5, "n_heads": 4}, None),
    ("distributed", {"machines": 2, "vp_width": 8}, "eagle-over-machines"),
]


def rel(x, y) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-300)))


def run_case(regime: str, kw: dict, family: str | None, dtype: str, tmp: Path) -> dict:
    cfg = ModelConfig(regime=regime, n=N, d=D, n_layers=3, normalize="spectral", dtype=dtype, **kw)
    model = plant(cfg, A_STEPS, C_STEPS, sketch_seed=5, family=family)
    task = TaskConfig(n=N, d=D, rank=4)
    start = time.perf_counter()
    res = extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=64, views=VIEWS)
    seconds = time.perf_counter() - start
    eagle, proj = res.views["eagle"].json, res.views["projection"].json
    steps = np.array([[lay["a_step"], lay["c_step"]] for lay in eagle["layers"]])
    proj_steps = np.array([[lay["a_step"], lay["c_step"]] for lay in proj["layers"]])
    truth = np.array([A_STEPS, C_STEPS]).T
    verdict = res.views["verdict"].json
    terms = res.views["terms"].json["layers"]
    comm = res.views["communication"].json if "communication" in res.views else {}
    sketch = res.views["sketch"].json if "sketch" in res.views else {}
    path = write_solver(tmp / f"solver_{regime}_{len(list(tmp.iterdir()))}.py", res.to_json(),
                        res.projectors)  # fmt: skip
    spec = importlib.util.spec_from_file_location(path.stem, path)
    solver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solver)
    p = sample(task, 16, make_generator(11), dtype=torch.float64)
    with torch.no_grad():
        net = float64_copy(model)(p.z0() * 1e3).numpy()
    export = max(
        rel(solver.complete(*(x[i].numpy() * 1e3 for x in (p.A, p.B, p.C)), mode="faithful"),
            net[i])
        for i in range(16)
    )  # fmt: skip
    return {
        "case": f"{family or regime} {' '.join(f'{k}={v}' for k, v in kw.items())} {dtype}",
        "steps": max(rel(steps, truth), rel(proj_steps, truth)),
        "labels": "/".join(sorted({lay["label"] for lay in verdict["layers"]})),
        "family": verdict["model"].get("family"),
        "terms": "/".join(sorted({str(lay["family"]) for lay in terms})),
        "terms_res": max(lay["relative_residual"] for lay in terms),
        "a_sent": comm.get("a_columns_sent") if comm.get("layers") else None,
        "ranks": sorted({h["rank"] for lay in sketch.get("layers", []) for h in lay["heads"]}),
        "gap": max(
            (h["projector_gap"] for lay in sketch.get("layers", []) for h in lay["heads"]),
            default=None,
        ),
        "export": export,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="float64 only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dtypes = ("float64",) if args.quick else ("float64", "float32")
    print(
        "| case | steps (rel) | labels | verdict family | terms family | terms residual | "
        "A sent | sketch ranks | max gap | export (rel) | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            for regime, kw, family in CASES:
                r = run_case(regime, kw, family, dtype, Path(tmp))
                gap = "—" if r["gap"] is None else f"{r['gap']:.1e}"
                print(
                    f"| {r['case']} | {r['steps']:.1e} | {r['labels']} | {r['family']} | "
                    f"{r['terms']} | {r['terms_res']:.1e} | {r['a_sent']} | "
                    f"{r['ranks'] or '—'} | {gap} | {r['export']:.1e} | {r['seconds']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
