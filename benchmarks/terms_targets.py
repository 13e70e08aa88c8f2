"""Benchmark: the `terms` view against its targets.

Usage: python benchmarks/terms_targets.py [--quick]

Planted EAGLE (random sizes, 1–8 heads, float32 and float64 weights, raw and spectrally
normalised prompts): whether exactly the four EAGLE terms come back in every layer, the worst
relative error of their coefficients against −a_l, −a_l, −c_l, −c_l, and the largest frequency of
any other term. A planted W_QK cross block (query A/B features × key C features) in one layer:
whether it is named there and nowhere else. Shipped models: per-layer one-step fidelity of the
discovered terms (prompt units), the terms run from the input against the network's test MSE,
the terms with query A/B features and key C features, and the view's wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the plants the tests use
sys.path.insert(0, str(ROOT / "tests" / "fit"))  # the probe-context builder the tests use

import plants  # noqa: E402
from probe_context import TRAINED, make_context  # noqa: E402

from eagle_probe import checkpoint  # noqa: E402
from eagle_probe.fit import library as lib  # noqa: E402
from eagle_probe.fit.terms import terms_view  # noqa: E402

EAGLE = ("A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC")


def planted_rows(rng: np.random.Generator, trials: int) -> pd.DataFrame:
    rows = []
    for dtype in ("float32", "float64"):
        for trial in range(trials):
            normalize = ("none", "spectral")[trial % 2]
            layers, heads = int(rng.integers(2, 5)), int(rng.integers(1, 9))
            n, d = int(rng.integers(3, 19)), int(rng.integers(3, 19))
            n_prime, d_prime = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            scale = 1.0 if normalize == "spectral" else 0.02
            a = (scale * rng.uniform(0.1, 1.0, layers)).tolist()
            c = (scale * rng.uniform(0.1, 2.0, layers)).tolist()
            model, task = plants.eagle(
                a,
                c,
                heads=heads,
                dtype=dtype,
                normalize=normalize,
                n=n,
                d=d,
                n_prime=n_prime,
                d_prime=d_prime,
            )
            result = terms_view(make_context(model, task, probes=256, held_out=256, seed=trial))
            exact, err, other = True, 0.0, 0.0
            for layer, al, cl in zip(result.json["layers"], a, c, strict=True):
                names = [t["name"] for t in layer["terms"]]
                exact &= names == list(EAGLE)
                for t in layer["terms"]:
                    if t["name"] in EAGLE:
                        want = -al if t["target"] in "AB" else -cl
                        err = max(err, abs(t["coefficient"] - want) / abs(want))
                    else:
                        other = max(other, t["frequency"])
            rows.append(
                {
                    "dtype": dtype,
                    "normalize": normalize,
                    "layers": layers,
                    "heads": heads,
                    "sizes": f"{n},{d},{n_prime},{d_prime}",
                    "exact_four": exact,
                    "worst_rel_error": err,
                    "other_max_frequency": other,
                }
            )
    return pd.DataFrame(rows)


def cross_term_rows() -> pd.DataFrame:
    rows = []
    for heads, dtype in ((1, "float32"), (4, "float64")):
        a, c = [0.3, 0.5, 0.2], [0.7, 1.1, 0.9]
        model, task = plants.eagle(
            a, c, heads=heads, dtype=dtype, normalize="spectral", **plants.SMALL
        )
        plants.cross_block(model, layer=1)
        result = terms_view(make_context(model, task))
        for layer in result.json["layers"]:
            keyed = sorted(t["name"] for t in layer["terms"] if lib.parse(t["name"]).Q == "C")
            rows.append(
                {
                    "heads": heads,
                    "dtype": dtype,
                    "layer": layer["layer"],
                    "keyed_on_C": ", ".join(keyed) or "-",
                }
            )
    return pd.DataFrame(rows)


def shipped(name: str) -> None:
    model, task, _ = checkpoint.load(TRAINED / f"{name}.pt")
    ctx = make_context(model, task, probes=256, held_out=2048)
    t0 = time.perf_counter()
    result = terms_view(ctx)
    seconds = time.perf_counter() - t0
    print(f"\n== {name}: view {seconds:.2f} s (256 probes, {len(result.json['layers'])} layers)")
    print(result.tables["terms_layers"].to_string(index=False))
    print(result.tables["terms"].drop(columns=["kind"]).to_string(index=False))
    j = result.json
    print(
        f"run from input: {j['run_from_input_mse']:.4g}  network: {j['network_mse']:.4g}  "
        f"ratio {j['run_from_input_ratio']:.3f}"
    )
    cross = []
    for layer in j["layers"]:
        for t in layer["terms"]:
            term = lib.parse(t["name"])
            if lib.KIND[term.P] == "a" and term.Q == "C":  # query A/B features, key C features
                cross.append(f"{layer['layer']}:{t['name']} (share {t['share']:.3f})")
    print("terms with query A/B features and key C features:", ", ".join(cross) or "none")
    for w in result.warnings:
        print("warning:", w)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer planted trials")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pd.set_option("display.width", 200)
    rng = np.random.default_rng(2024)
    table = planted_rows(rng, 3 if args.quick else 8)
    print(table.to_string(index=False))
    print(
        f"planted: exact four terms in {table['exact_four'].mean():.0%} of models; worst "
        f"relative error float32 {table[table.dtype == 'float32'].worst_rel_error.max():.2e}, "
        f"float64 {table[table.dtype == 'float64'].worst_rel_error.max():.2e}; largest other "
        f"frequency {table.other_max_frequency.max():.2f}"
    )
    print(cross_term_rows().to_string(index=False))
    for name in ("centralized", "centralized_8head"):
        shipped(name)


if __name__ == "__main__":
    main()
