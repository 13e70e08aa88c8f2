"""Benchmark: every shipped model's test MSE with its tail, over several fresh draws of prompts.

Usage: python benchmarks/mse_tails.py [--draws 16] [--batch 8192] [--seed 100] [--threads 1]
           [--models centralized.pt,...] [--explain constrained.pt] [--blowup 10]
           [--extraction-seeds 60] [--json OUT]

A mean MSE hides its tail: one prompt whose error explodes moves it by orders of magnitude while
the median does not move. For each model (trained_models/centralized.pt, distributed.pt,
constrained.pt, centralized_8head.pt) and each draw k of `--batch` fresh prompts of its task
(seed `--seed` + k, k = 0 … draws − 1; the same prompts for every model of a task), prints the
numbers `evaluate.tails` gives: the mean, the median, the 0.1%-trimmed mean, the worst prompt and
the share of prompts worse than the zero predictor (a prompt's error above its own mean of D²),
beside the share above the zero predictor's mean MSE over the draw; then the interval over the
draws (`evaluate.over_draws`: smallest, median, largest).

Then the tail explained, for constrained.pt (`--explain`): every prompt of every draw whose error
is above `--blowup` × the zero predictor's MSE, read through the model's hooks on a float64 copy
(`capture.float64_copy`, `run_with_cache`, internal units): the Frobenius norm of the residual
stream entering the first layer and after each layer, each layer's growth (after over before)
against the median prompt's, the layer where the stream blows up (the largest growth over the
median prompt's), and what the prompt looks like: ‖A‖₂, σ_min of A (the smallest nonzero
singular value: A has rank `task.rank`) and the condition number σ₁ / σ_min, each with its
percentile among the draw's prompts. Last, the verdict's zero-predictor test on the held-out
prompts of `eagle-probe extract --seed s` for s = 0 … `--extraction-seeds` − 1 (4,096 prompts
from seed s + 7919): on how many seeds the mean fails it, and the 0.1%-trimmed mean the verdict
reads. Seeds 0–2 (and 7919 k + 1) are the training streams of a seed-0 run (`train._seeds`), so
the default draws start at 100.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from eagle_probe import checkpoint
from eagle_probe.capture import float64_copy
from eagle_probe.evaluate import TAIL_KEYS, over_draws, prompt_errors, reference_errors, tails
from eagle_probe.tasks import make_generator, sample

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("centralized.pt", "distributed.pt", "constrained.pt", "centralized_8head.pt")
# the per-draw columns: four MSEs, then two shares
COLUMNS = ("mse", "median_mse", "trimmed_mse", "worst_mse", "worse_than_zero", "above_zero_mean")


def draw_row(seed: int, errors: dict[str, torch.Tensor]) -> dict:
    """One draw's numbers: `tails` of the model's errors against the zero predictor's, the
    zero predictor's MSE, ‖A‖₂ of the worst prompt, and the share of prompts whose error is above
    the zero predictor's MSE over the whole draw (not each prompt's own)."""
    model, zero = errors["model"], errors["zero"]
    stats = tails(model, zero)
    worst = int(torch.where(torch.isfinite(model), model, math.inf).argmax())
    return {
        "seed": seed,
        **stats,
        "zero_mse": float(zero.mean()),
        "worst_index": worst,
        "worst_norm_a": float(errors["norm_a"][worst]),
        "above_zero_mean": float((~(model <= zero.mean())).double().mean()),
    }


def percentile(values: np.ndarray, x: float) -> float:
    """The share of `values` below `x`, in percent."""
    return float(np.mean(values < x) * 100)


@torch.no_grad()
def streams(model, prompts, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, the Frobenius norm of the residual stream entering layer 0 and after each
    layer (b, L + 1; internal units, float64 copy of the model, read through its hooks), and the
    float64 forward's per-prompt MSE (b,)."""
    m64 = float64_copy(model)
    L = m64.cfg.n_layers
    names = ["hook_embed"] + [f"blocks.{layer}.hook_resid_post" for layer in range(L)]
    norms, errors = [], []
    for start in range(0, prompts.batch, chunk):
        part = prompts[start : start + chunk]
        pred, cache = m64.run_with_cache(part.z0(), names_filter=lambda n: n in names)
        norms.append(np.stack([cache[n].norm(dim=(-1, -2)).numpy() for n in names], axis=1))
        errors.append((pred - part.D).square().mean(dim=(-1, -2)).numpy())
    return np.concatenate(norms), np.concatenate(errors)


def explain(model, task, draws: list[tuple[int, object, dict]], blowup: float) -> list[dict]:
    """Every prompt whose error is above `blowup` × its draw's zero-predictor MSE: where its
    stream blows up and what it looks like, against the draw's median prompt."""
    rows = []
    for seed, prompts, errors in draws:
        err = errors["model"].numpy()
        zero_mse = float(errors["zero"].mean())
        bad = np.flatnonzero(~(err <= blowup * zero_mse))
        if bad.size == 0:
            continue
        norms, err64 = streams(model, prompts)
        growth = norms[:, 1:] / norms[:, :-1]  # (b, L): each layer's after over before
        typical = np.median(growth, axis=0)
        sv = torch.linalg.svdvals(prompts.A).numpy()  # (b, n) descending
        r = task.rank
        norm_a, smin, cond = sv[:, 0], sv[:, r - 1], sv[:, 0] / sv[:, r - 1]
        for i in bad[np.argsort(-err[bad])]:
            rel = growth[i] / typical
            rows.append(
                {
                    "seed": seed,
                    "index": int(i),
                    "mse": float(err[i]),
                    "mse_float64": float(err64[i]),
                    "zero": float(errors["zero"][i]),
                    "norm_a": float(norm_a[i]),
                    "norm_a_pct": percentile(norm_a, norm_a[i]),
                    "sigma_min": float(smin[i]),
                    "sigma_min_pct": percentile(smin, smin[i]),
                    "next_sigma": float(sv[i, r]) if r < sv.shape[1] else 0.0,
                    "cond": float(cond[i]),
                    "cond_pct": percentile(cond, cond[i]),
                    "stream": norms[i].tolist(),
                    "stream_median": np.median(norms, axis=0).tolist(),
                    "growth": growth[i].tolist(),
                    "growth_median": typical.tolist(),
                    "blowup_layer": int(np.argmax(rel)),
                }
            )
    return rows


@torch.no_grad()
def zero_test_flips(model, task, seeds: list[int]) -> list[dict]:
    """Per extraction seed s (`eagle-probe extract --seed s`), the verdict's zero-predictor test
    on that extraction's held-out prompts (`extract.scoring_sets`: 4,096 prompts from seed
    s + 7919, scored by the float64 copy as `build_context` scores them): the mean and the
    0.1%-trimmed mean (`extract.held_out_tails`) against ZERO_FRACTION × the zero predictor's."""
    from eagle_probe.extract import held_out_tails, predict_chunked, scoring_sets
    from eagle_probe.fit.rules import ZERO_FRACTION
    from eagle_probe.layouts import geometry_of

    m64 = float64_copy(model)
    sizes = geometry_of(m64, None)
    out = []
    for s in seeds:
        held, _ = scoring_sets(task, sizes, 4096, 512, s)
        pred = predict_chunked(m64, held.z0, device=torch.device("cpu"), chunk=1024)
        stats = held_out_tails(held, pred)
        bound = ZERO_FRACTION * float(np.mean(held.D**2))
        mean = float(np.mean((pred - held.D) ** 2))
        out.append(
            {
                "seed": s,
                "mse": mean,
                "trimmed_mse": stats["trimmed_mse"],
                "worst_mse": stats["worst_mse"],
                "mean_working": bool(mean <= bound),
                "trimmed_working": bool(stats["trimmed_mse"] <= bound),
            }
        )
    return out


def fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=100, help="draw k uses seed SEED + k")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--explain", default="constrained.pt", help="the model whose tail is read")
    parser.add_argument("--blowup", type=float, default=10.0, help="× the zero predictor's MSE")
    parser.add_argument(
        "--extraction-seeds",
        type=int,
        default=60,
        help="extraction seeds 0 … N − 1 whose zero-predictor test is read (0: none)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every number as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    seeds = [args.seed + k for k in range(args.draws)]
    start = time.perf_counter()
    loaded = {
        name: checkpoint.load(ROOT / "trained_models" / name)[:2] for name in args.models.split(",")
    }
    rows: dict[str, list[dict]] = {name: [] for name in loaded}
    explained: list[dict] = []  # the explained model's blow-ups, read draw by draw
    for seed in seeds:
        drawn: dict = {}  # task -> (prompts, reference errors), drawn once for every model
        for name, (model, task) in loaded.items():
            if task not in drawn:
                prompts = sample(task, args.batch, make_generator(seed), dtype=torch.float64)
                drawn[task] = prompts, reference_errors(prompts)
            prompts, reference = drawn[task]
            errors = prompt_errors(model, prompts, reference=reference)
            rows[name].append(draw_row(seed, errors))
            if name == args.explain:
                explained += explain(model, task, [(seed, prompts, errors)], args.blowup)
    print(
        f"{args.draws} draws of {args.batch} fresh prompts, seeds {seeds[0]}–{seeds[-1]}; "
        "worse than zero: error above the prompt's own mean of D²; above zero's MSE: above the "
        "zero predictor's MSE over the draw"
    )
    out = {"draws": args.draws, "batch": args.batch, "seeds": seeds, "models": {}}
    head = (
        "| seed | mean | median | 0.1%-trimmed | worst | ‖A‖₂ of the worst | worse than zero "
        "| above zero's MSE |"
    )
    for name, per_draw in rows.items():
        spread = over_draws(per_draw, TAIL_KEYS + ("above_zero_mean",))
        print(f"\n{name}\n\n{head}\n|" + "---|" * 8)
        for r in per_draw:
            cells = [fmt(r[k]) for k in COLUMNS[:4]] + [f"{r['worst_norm_a']:.2f}"]
            cells += [f"{r[k]:.2%}" for k in COLUMNS[4:]]
            print(f"| {r['seed']} | " + " | ".join(cells) + " |")
        for what in ("low", "median", "high"):
            cells = [fmt(spread[k][what]) for k in COLUMNS[:4]] + [""]
            cells += [f"{spread[k][what]:.2%}" for k in COLUMNS[4:]]
            print(f"| **{what}** | " + " | ".join(cells) + " |")
        ratio = {k: spread[k]["high"] / spread[k]["low"] for k in COLUMNS[:4]}
        zero = np.median([r["zero_mse"] for r in per_draw])
        print(
            "\nhigh / low over draws: "
            + ", ".join(f"{k} {fmt(v)}" for k, v in ratio.items())
            + f"; zero predictor's MSE (median over draws) {fmt(zero)}"
        )
        out["models"][name] = {"draws": per_draw, "over_draws": spread}
    if args.explain in loaded:
        out["explained"] = {"model": args.explain, "blowup": args.blowup, "prompts": explained}
        print(
            f"\n{args.explain}: the {len(explained)} prompts above {args.blowup:g}× the zero "
            f"predictor's MSE (of {args.draws * args.batch}); ‖Z‖_F: the stream entering layer 0 "
            "and after each layer (internal units, float64 copy); growth: each layer's after over "
            "before, over the median prompt's; p: percentile among the draw's prompts\n"
        )
        print(
            "| seed, prompt | MSE | float64 | zero | ‖A‖₂ | σ_min | cond | ‖Z‖_F | growth / "
            "median's | blows up in |\n|" + "---|" * 10
        )
        for e in explained:
            stream = " → ".join(f"{x:.3g}" for x in e["stream"])
            rel = ", ".join(
                f"{g / t:.3g}" for g, t in zip(e["growth"], e["growth_median"], strict=True)
            )
            print(
                f"| {e['seed']}, #{e['index']} | {fmt(e['mse'])} | {fmt(e['mse_float64'])} | "
                f"{fmt(e['zero'])} | {e['norm_a']:.2f} (p{e['norm_a_pct']:.0f}) | "
                f"{e['sigma_min']:.3g} (p{e['sigma_min_pct']:.0f}) | "
                f"{e['cond']:.3g} (p{e['cond_pct']:.0f}) | {stream} | {rel} | "
                f"layer {e['blowup_layer']} |"
            )
        if explained:
            med, gm = explained[0]["stream_median"], explained[0]["growth_median"]
            print(
                f"| median prompt (seed {explained[0]['seed']}) | | | | | | | "
                + " → ".join(f"{x:.3g}" for x in med)
                + " | growth "
                + ", ".join(f"{x:.3g}" for x in gm)
                + " | |"
            )
    if args.explain in loaded and args.extraction_seeds > 0:
        model, task = loaded[args.explain]
        flips = zero_test_flips(model, task, list(range(args.extraction_seeds)))
        out["zero_test"] = {"model": args.explain, "seeds": flips}
        moved = [f for f in flips if f["mean_working"] != f["trimmed_working"]]
        print(
            f"\n{args.explain}, the verdict's zero-predictor test on the held-out prompts of "
            f"`extract --seed s`, s = 0 … {args.extraction_seeds - 1}: the mean fails it on "
            f"{sum(not f['mean_working'] for f in flips)} seeds, the 0.1%-trimmed mean on "
            f"{sum(not f['trimmed_working'] for f in flips)}"
        )
        for f in moved:
            print(
                f"  seed {f['seed']}: mean {fmt(f['mse'])}, 0.1%-trimmed {fmt(f['trimmed_mse'])}, "
                f"worst prompt {fmt(f['worst_mse'])}"
            )
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(checkpoint.jsonable(out), indent=1) + "\n")


if __name__ == "__main__":
    main()
