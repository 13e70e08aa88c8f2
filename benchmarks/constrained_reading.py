"""Which algorithm does a compute-limited model run? Candidate families fitted end to end.

Usage: python benchmarks/constrained_reading.py [MODEL.pt ...] [--starts 12] [--tuning 1024]
       [--held-out 8192] [--draws 3] [--json OUT.json]

The paper's compute-limited EAGLE (Algorithm 1, M = 1, S of r random orthogonal rows):

    "UPDATE(A, B, C, D): Ã ← AS, B̃ ← BS, ρ ← ‖Ã‖₂⁻², A′ ← A − ηρ Ã ÃᵀÃ Sᵀ,
     B′ ← B − ηρ B̃ ÃᵀÃ Sᵀ, C′ ← C − γρ Ã Ãᵀ C, D′ ← D + γρ B̃ Ãᵀ C"

In attention terms (`Geometry.layer`: Z + ((Z W_QK Zᵀ) ⊙ M) Z W_VP) the scores A P Aᵀ read A
through the query/key sketch P = S Sᵀ and the values A P through the same sketch. Every family
below runs the same update with ρ recomputed from the current iterate at every step, steps
(η_l, γ_l) per layer unless said otherwise, and differs only in the sketches:

    sketched, two constants   P_l the layer's learned QK sketch (`Geometry.projector`), one (η, γ)
    sketched, per layer       the same, (η_l, γ_l): Algorithm 1 with the layer's own sketch
    values: last layer's      scores through P_l, values through the last layer's QK sketch P_{L−1}
    values: own W_VP          scores through P_l, values through the projector on the input side of
                              the layer's own W_VP A-block (its r largest left singular vectors)
    values: shared W_VP       scores through P_l, values through one projector for every layer:
                              the r-dimensional top of Σ_l V_l V_lᵀ over the layers' A-blocks V_l
    full Gram (S = I)         no sketch: what a full-width head would run (a reference)

and the extraction's own family, eagle-sketched with constant steps (`fit.optimum.fit_steps`,
the optimum view's Levenberg–Marquardt). The last layer's η moves nothing the readout sees (its A
update comes after its D update), so it is held at 0 and printed as —. Each family's steps are
fitted by least squares on `--tuning` prompts (scipy.optimize.least_squares, trust region)
from the one-step constants of view `algorithm1`, the paper's (η, γ) = (1, 1.9) and `--starts`
random ones; the fit with the lowest 0.1%-trimmed MSE on a validation draw is kept; it is
scored on `--draws` fresh draws of `--held-out` prompts beside the network on the same prompts:
mean, median and trimmed MSE, and network / family on each (below 1: the network is better
than the family's best). For Algorithm 1 itself (the scores' sketch as the values') it also
prints the relative one-step gaps of the fitted steps on the network's own layers
(`fit.algorithm1.score`: ‖Z_{l+1} − step(Z_l)‖² / ‖Z_{l+1} − Z_l‖², probe prompts).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from eagle_probe import checkpoint
from eagle_probe.evaluate import tails
from eagle_probe.extract import build_context, run_views
from eagle_probe.fit import algorithm1
from eagle_probe.fit.geometry import Geometry
from eagle_probe.fit.optimum import fit_steps
from eagle_probe.fit.optimum import predict as eagle_predict

ROOT = Path(__file__).resolve().parents[1]
PAPER = (1.0, 1.9)


def projector(U: np.ndarray) -> np.ndarray:
    return U @ U.T


def value_sketches(geo: Geometry, vp: np.ndarray, rank: int) -> dict[str, np.ndarray]:
    """Value projectors (L, n, n) per candidate (module text)."""
    n, L = geo.n, geo.layers
    V = [vp[layer].sum(0)[:n, :n] for layer in range(L)]  # (n, n) the A-blocks, heads summed
    own = np.stack([projector(np.linalg.svd(v)[0][:, :rank]) for v in V])
    total = sum(v @ v.T / max(np.linalg.norm(v, 2) ** 2, 1e-300) for v in V)
    w, U = np.linalg.eigh(total)
    shared = projector(U[:, np.argsort(w)[::-1][:rank]])
    return {
        "sketched": geo.projector,
        "values: last layer's": np.stack([geo.projector[-1]] * L),
        "values: own W_VP": own,
        "values: shared W_VP": np.stack([shared] * L),
        "full Gram (S = I)": np.stack([np.eye(n)] * L),
    }


def run(z0: np.ndarray, geo: Geometry, Pq, Pv, etas, gammas) -> np.ndarray:
    """Algorithm 1 with scores through Pq[l] and values through Pv[l], ρ = ‖A P_l‖₂⁻² recomputed
    from the current iterate: the prediction of D (b, d', n') in prompt units."""
    Z = geo.internal(z0).copy()
    d, n = geo.d, geo.n
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for layer, (eta, gamma) in enumerate(zip(etas, gammas, strict=True)):
            A, B, C = Z[:, :d, :n], Z[:, d:, :n], Z[:, :d, n:]
            P = Pq[layer]
            At = A.swapaxes(-1, -2)
            GA, GB = A @ P @ At, B @ P @ At  # (b, d, d), (b, d', d)  the scores
            ok = np.isfinite(GA).all(axis=(-2, -1))
            lam = np.full(len(Z), np.nan)
            lam[ok] = np.linalg.eigvalsh(GA[ok])[:, -1]  # ‖A P‖₂² = λ_max(A P Aᵀ)
            rho = np.where(lam > 0, 1.0 / lam, 0.0)[:, None, None]
            AV = A @ Pv[layer]
            FA, FB, FC, FD = GA @ AV, GB @ AV, GA @ C, GB @ C
            Z[:, :d, :n] -= eta * rho * FA
            Z[:, d:, :n] -= eta * rho * FB
            Z[:, :d, n:] -= gamma * rho * FC
            Z[:, d:, n:] -= gamma * rho * FD
    return geo.readout_of(Z, z0)


def prompt_mse(pred: np.ndarray, D: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.mean((pred - D) ** 2, axis=(-2, -1))


def fit_family(geo, tune, valid, Pq, Pv, starts, tied: bool) -> dict:
    """Least-squares steps from every start, the one with the lowest trimmed validation MSE."""
    L = geo.layers
    best = None
    scale = float(np.sqrt(tune.D.size))

    def unpack(theta):  # the last layer's η moves nothing the readout sees: held at 0
        if tied:
            return [theta[0]] * (L - 1) + [0.0], [theta[1]] * L
        return [*theta[: L - 1], 0.0], list(theta[L - 1 :])

    def residual(theta):
        r = (run(tune.z0, geo, Pq, Pv, *unpack(theta)) - tune.D).ravel() / scale
        return np.where(np.isfinite(r), r, 1e3)

    for etas, gammas in starts:
        x0 = np.array([etas[0], gammas[0]]) if tied else np.array([*etas[: L - 1], *gammas])
        try:
            sol = least_squares(residual, x0, method="trf", x_scale="jac", max_nfev=400)
        except (ValueError, np.linalg.LinAlgError):
            continue
        e, g = unpack(sol.x)
        v = tails(prompt_mse(run(valid.z0, geo, Pq, Pv, e, g), valid.D))["trimmed_mse"]
        if math.isfinite(v) and (best is None or v < best["validation_trimmed"]):
            best = {"etas": [float(x) for x in e], "gammas": [float(x) for x in g],
                    "validation_trimmed": v, "tuning_loss": float(2 * sol.cost)}  # fmt: skip
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=[str(ROOT / "trained_models/constrained.pt")])
    parser.add_argument("--starts", type=int, default=12, help="random starts per family (12)")
    parser.add_argument("--tuning", type=int, default=1024, help="prompts the steps fit (1024)")
    parser.add_argument("--held-out", type=int, default=8192, help="prompts per draw (8192)")
    parser.add_argument("--draws", type=int, default=3, help="held-out draws (3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", nargs="*", default=None, help="only these (names above)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()
    out = {}
    for path in args.models:
        out[Path(path).name] = reading(path, args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


def reading(path: str, args) -> dict:
    t0 = time.perf_counter()
    model, task, _ = checkpoint.load(path)
    ctx = build_context(model, task, probe_batch_size=256, seed=args.seed, test_batch=1024,
                        tuning_batch=args.tuning)  # fmt: skip
    run_views(ctx, ("eagle", "projection"))
    geo = algorithm1.algorithm_geometry(ctx.geometry)
    if geo.projector is None:
        raise SystemExit(f"{path}: no learned sketch (regime {geo.regime})")
    L, rank = geo.layers, int(model.cfg.rank)
    rng = np.random.default_rng(args.seed)
    one = algorithm1.fit_constants(ctx.cap, geo)  # view algorithm1's one-step constants
    starts = [(one["eta"], one["gamma"]),
              ([one["global_eta"]] * L, [one["global_gamma"]] * L),
              ([PAPER[0]] * L, [PAPER[1]] * L)]  # fmt: skip
    for _ in range(args.starts):
        starts.append((list(np.exp(rng.uniform(np.log(0.05), np.log(2.0), L))),
                       list(np.exp(rng.uniform(np.log(0.05), np.log(4.0), L)))))  # fmt: skip
    tune, valid = ctx.tuning, ctx.validation
    # this file's run with the scores' sketch as the values' is the view's Algorithm 1 exactly
    want = algorithm1.predict(tune.z0, geo, one["eta"], one["gamma"])
    got = run(tune.z0, geo, geo.projector, geo.projector, one["eta"], one["gamma"])
    assert np.allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max()), "not Algorithm 1"
    Pv = value_sketches(geo, ctx.vp, rank)
    families = {"sketched, two constants": (geo.projector, geo.projector, True)}
    for name, P in Pv.items():
        Pq = np.stack([np.eye(geo.n)] * L) if name.startswith("full") else geo.projector
        families[name if name != "sketched" else "sketched, per layer"] = (Pq, P, False)
    if args.families:
        families = {k: v for k, v in families.items() if k in args.families}
    fitted = {}
    for name, (Pq, P, tied) in families.items():
        t = time.perf_counter()
        fitted[name] = fit_family(geo, tune, valid, Pq, P, starts, tied)
        if P is geo.projector and fitted[name]:  # Algorithm 1 itself: its steps on each layer
            f = fitted[name]
            lays = algorithm1.score(ctx.cap, geo, f["etas"], f["gammas"])
            f["one_step_relative"] = [lay["one_step"]["relative"] for lay in lays]
        print(f"{name}: fitted in {time.perf_counter() - t:.0f} s", flush=True)
    # the extraction's own family, constant steps, the optimum view's fit from its starts
    proj = ctx.results["projection"].json["layers"]
    a0, c0 = [x["a_step"] for x in proj], [x["c_step"] for x in proj]
    const = fit_steps(ctx.geometry, tune, tune.D, a0, c0, max_iter=400)
    rows = {name: [] for name in [*fitted, "eagle-sketched, constant steps", "network"]}
    for k in range(args.draws):
        dctx = build_context(model, task, probe_batch_size=2, seed=args.seed + 1000 + k,
                             test_batch=args.held_out, tuning_batch=4, iterate=False)  # fmt: skip
        held = dctx.held_out
        zero = np.mean(held.D**2, axis=(-2, -1))
        preds = {"network": dctx.network_pred}
        preds["eagle-sketched, constant steps"] = eagle_predict(
            ctx.geometry, held.z0, const["a_steps"], const["c_steps"]
        )
        for name, (Pq, P, _) in families.items():
            f = fitted[name]
            preds[name] = run(held.z0, geo, Pq, P, f["etas"], f["gammas"])
        for name, pred in preds.items():
            rows[name].append(tails(prompt_mse(pred, held.D), zero))
    net = rows["network"]
    result = {"model": path, "rank": rank, "seconds": time.perf_counter() - t0, "families": {}}
    print(f"\n{Path(path).name}: network over family on {args.draws} draws of {args.held_out}"
          " prompts (min–max; below 1: the network is better)")  # fmt: skip
    print(f"{'family':34s} {'trimmed MSE':>20s} {'median MSE':>20s} {'net/fam trimmed':>16s}"
          f" {'net/fam median':>15s} {'net/fam mean':>15s}  steps")  # fmt: skip
    for name, draws in rows.items():
        stats = {key: [d[key] for d in draws] for key in ("mse", "median_mse", "trimmed_mse")}
        ratios = {key: [n[key] / d[key] for n, d in zip(net, draws, strict=True)]
                  for key in ("mse", "median_mse", "trimmed_mse")}  # fmt: skip
        steps = fitted.get(name)
        result["families"][name] = {"draws": draws, "ratios": ratios, "fit": steps}
        span = lambda v: f"{min(v):.3g}–{max(v):.3g}"  # noqa: E731
        text = ""
        if steps:
            text = (
                "η "
                + ", ".join(f"{x:.3g}" for x in steps["etas"][:-1])
                + ", —; γ "
                + ", ".join(f"{x:.3g}" for x in steps["gammas"])
            )
        if steps and "one_step_relative" in steps:
            text += "; one-step gaps " + ", ".join(f"{x:.2g}" for x in steps["one_step_relative"])
        print(f"{name:34s} {span(stats['trimmed_mse']):>20s} {span(stats['median_mse']):>20s} "
              f"{span(ratios['trimmed_mse']):>16s} {span(ratios['median_mse']):>15s} "
              f"{span(ratios['mse']):>15s}  {text}")  # fmt: skip
    print(f"({result['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
