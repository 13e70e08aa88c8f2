"""Off the training distribution: where a network and its extracted algorithm part ways.

`compare(model, task)` extracts the algorithm once (the views the faithful export and the
optimum need) and then, on sweeps of the prompt distribution, scores side by side

    network    the model itself (float64 copy of its weights)
    faithful   the extracted algorithm: the family the views read with the steps read from the
               activations, exactly what the exported solver's faithful mode runs (checked on a
               few prompts: `export_check`)
    optimum    the same family with the optimum view's steps (the best EAGLE of that depth)
    more       the faithful layers, then more steps of the family at the theory's η = 1/3, γ = 1
               (a = η / λ_max(K), c = γ / λ_max(A P Aᵀ) of the current iterate, per prompt),
               `more_steps` × L steps in all
    exact      B A⁺ C (float64 pseudo-inverse)
    cg, gd     CGLS and gradient descent on min ‖W A − B‖ from W = 0, D = W C, with the matrix
               products of L EAGLE steps: an EAGLE step costs 6 products (A Aᵀ, its product with
               A, B Aᵀ, its product with A, A Aᵀ C, B Aᵀ C), a CGLS or GD iteration 2, so both run
               3 L iterations; GD's step is 1 / ‖A‖₂²

Sweeps (each from the training task, one knob moved; every point of a sweep draws the same
random numbers, so a curve moves with its knob only):

    scale    A multiplied by s (×0.25 … ×4); the answer is then D / s exactly, since
             [[sA, C], [B, D/s]] is a row and column rescaling of X and keeps its rank
    kappa    A's spectrum geometric with condition number κ (1e1 … 1e6), each prompt rescaled
             so that ‖A‖₂ is the training prompts' median
    rank     the rank s of X; alpha the anisotropy α; noise the variance σ² added to X
    samples  the number n of columns of A: a feature-layout model's width fixes n, so it is
             listed under `skipped` with that reason

Sample layout (GD, GD++ and preconditioned GD models; von Oswald et al. 2023's sweeps). The
algorithm is GD++ with the steps read from the activations (the readout's frame), and the sweeps
by default are

    input_scale  every x (samples and queries) multiplied by s, the labels with them (y = W x)
    query_scale  the queries' x alone multiplied by s (their answers with them)
    task_noise   Gaussian noise of variance σ² on the samples' labels; D is the noiseless answer
    samples      the number n of context samples: the same weights run on n rows, so the
                 extracted steps, which carry the scores' 1/n, scale by n_train / n

("more" and the EAGLE half of the layer → iteration map have no GD++ counterpart and are left
out; no solver is exported, so there is no export check.)

Per point: the MSE of each (the mean, and beside it the median and 0.1%-trimmed mean over the
prompts, which one prompt cannot move), its MSE relative to the zero predictor's, the
network–algorithm gap ‖D_net − D_alg‖_F / ‖D_net‖_F (faithful and optimum), and the sensitivity
cosine: for k Gaussian directions V in C (and in A) shared by both, the central differences
∂D̂[V] of the network and of the faithful algorithm, stacked per prompt, their cosine averaged
over prompts (von Oswald et al.'s "model cos"; E[⟨J V, J' V⟩] = ⟨J, J'⟩_F, so it estimates the
Jacobians' cosine).

At the training distribution also: the interpolation path (1 − t) products_network + t
products_family (the family planted with the faithful steps, `families.Family.products`), MSE
and gap to the network along t; and the layer → iteration map (Fu et al.): each layer's D slot
against D after k steps of exact EAGLE (η = 1/3, γ = 1, ρ = ‖A_k‖₂⁻², Algorithm 1) and of GD,
as ‖D_layer − D_k‖² / ‖B A⁺ C‖², and the k closest to each layer.

The result's `json` is the compare.json schema in docs/extraction-schema.md.
"""

from __future__ import annotations

import math
import tempfile
import textwrap
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from eagle_probe import names, wording
from eagle_probe.errors import EagleProbeError
from eagle_probe.fit.base import prompt_tails
from eagle_probe.fit.geometry import Geometry
from eagle_probe.model import LinearTransformer
from eagle_probe.names import MAX_MORE_STEPS
from eagle_probe.progress import Progress, timed
from eagle_probe.tasks import TaskConfig, make_generator, sample

SCHEMA = "eagle-probe compare"
SCHEMA_VERSION = 1
ALGORITHMS = ("network", "faithful", "optimum", "more", "exact", "cg", "gd")
SWEEPS = names.SWEEPS
FEATURE_SWEEPS = SWEEPS[:6]  # the default of a feature-layout model
SAMPLE_SWEEPS = ("input_scale", "query_scale", "task_noise", "samples")  # of a sample-layout one
SAMPLE_ONLY = frozenset(SWEEPS) - frozenset(FEATURE_SWEEPS)
PRODUCTS_PER_STEP = 6  # matrix products of one EAGLE step (module text)
PRODUCTS_PER_ITERATION = 2  # of one CGLS or GD iteration
THEORY = (1.0 / 3.0, 1.0)  # (η, γ) of the extra steps and of the map's exact EAGLE
# a sweep point "follows" its algorithm while its gap is at most this many times the training
# point's (or below FOLLOW_FLOOR, round-off)
FOLLOW_FACTOR = 3.0
FOLLOW_FLOOR = 1e-9
FD_STEP = 1e-5  # central-difference step, relative to the perturbed block's Frobenius norm


def default_values(task: TaskConfig) -> dict[str, tuple[float, ...]]:
    """The default sweep values for a training task (rank up to min(d, n))."""
    top = min(task.d, task.n)
    ranks = sorted({r for r in (1, 2, 4, 6, 8, 10, 12, 14, 16, 18) if r <= top} | {task.rank})
    scales = tuple(float(2.0**e) for e in np.arange(-2.0, 2.01, 0.5))
    return {
        "scale": scales,
        "kappa": (1e1, 1e2, 1e3, 1e4, 1e5, 1e6),
        "rank": tuple(float(r) for r in ranks if r <= top),
        "alpha": tuple(sorted({0.4, 0.55, 0.7, 0.85, 1.0, task.alpha})),
        "noise": tuple(sorted({0.0, 1e-3, 1e-2, 1e-1, task.noise})),
        "input_scale": scales,
        "query_scale": scales,
        "task_noise": tuple(sorted({0.0, 1e-3, 1e-2, 1e-1, 1.0, task.noise})),
        "samples": tuple(
            float(n)
            for n in sorted(
                {max(1, task.n // 4), max(1, task.n // 2)} | {task.n, 2 * task.n, 4 * task.n}
            )
        ),
    }


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """How much of each reading `compare` computes."""

    prompts: int = 256  # prompts per sweep point
    sensitivity_prompts: int = 32  # of them, prompts the sensitivity cosine is taken on
    directions: int = 8  # random directions in C (and in A) of the sensitivity cosine
    more_steps: int = 4  # the algorithm run for this many times the network's layers
    interpolation_points: int = 11  # values of t in [0, 1]
    map_steps: int = 24  # exact-EAGLE steps of the layer → iteration map (GD: 4 × as many)
    # which sweeps to run; None: the layout's own (FEATURE_SWEEPS, or SAMPLE_SWEEPS)
    sweeps: tuple[str, ...] | None = None
    seed: int = 0  # seeds the extraction, every sweep's prompts and the directions

    def __post_init__(self) -> None:
        for name in ("prompts", "directions", "more_steps", "map_steps", "sensitivity_prompts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.prompts < 2:
            raise ValueError(f"prompts must be at least 2, got {self.prompts}")
        if self.more_steps > MAX_MORE_STEPS:
            raise ValueError(
                f"more_steps must be at most {MAX_MORE_STEPS} (the algorithm's steps on every "
                f"prompt of every sweep point, times the layers), got {self.more_steps}"
            )
        if not isinstance(self.interpolation_points, int) or self.interpolation_points < 2:
            raise ValueError(
                f"interpolation_points must be an integer >= 2, got {self.interpolation_points!r}"
            )
        unknown = [s for s in self.sweeps or () if s not in SWEEPS]
        if unknown:
            raise ValueError(f"unknown sweep(s) {', '.join(unknown)}; choose from {SWEEPS}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")

    def to_dict(self) -> dict:
        return asdict(self) | {"sweeps": None if self.sweeps is None else list(self.sweeps)}

    def for_layout(self, samples: bool) -> CompareConfig:
        """This configuration with its sweeps resolved for a model of that layout."""
        if self.sweeps is not None:
            return self
        return replace(self, sweeps=SAMPLE_SWEEPS if samples else FEATURE_SWEEPS)


@dataclass
class Comparison:
    """What `compare` returns: the JSON, one table per sweep, the interpolation and map tables."""

    json: dict[str, Any]
    sweeps: dict[str, pd.DataFrame]  # sweep -> one row per point
    interpolation: pd.DataFrame  # t, mse, gap
    iteration_map: dict[str, np.ndarray]  # "eagle" / "gd" -> (L, steps + 1) distances

    def render(self) -> str:
        """A few lines for people: per sweep the range the network follows its algorithm."""
        lines = [textwrap.fill(self.json["summary"]["text"], 100, subsequent_indent="  ")]
        for name, table in self.sweeps.items():
            cols = ["value", *[f"mse_{a}" for a in ALGORITHMS if f"mse_{a}" in table], "gap"]
            lines.append(f"\n{name}:")
            lines.append(table[cols].to_string(index=False, float_format=_fmt))
        return "\n".join(lines)


# --- the algorithms, on prompts z0 (b, T, E) in prompt units -----------------------------------


def run_family(geo: Geometry, z0: np.ndarray, a_steps, c_steps, extra: int = 0) -> np.ndarray:
    """The family `geo` reads with the given steps, then `extra` steps at the theory's (η, γ)
    normalised by the current iterate; the prediction (b, d', n') in prompt units."""
    Z = geo.internal(z0)
    L = len(a_steps)
    eta, gamma = THEORY
    with np.errstate(over="ignore", invalid="ignore"):
        for step in range(L + extra):
            at = min(step, L - 1)  # after the L layers: the last layer's sketch (sketched family)
            if step < L:
                a, c = float(a_steps[step]), float(c_steps[step])
            else:
                A = Z[:, : geo.d, : geo.n]
                P = geo.query_operator(at)
                K = geo.gram(A, at)  # (b, n, n)
                Kc = P @ (A.swapaxes(-1, -2) @ A) @ P  # (b, n, n): A P Aᵀ's spectrum
                top = _top(K)  # the same for Kc where it is K to the bit (no sketch)
                a = eta / top[:, None, None]
                c = gamma / (top if K.tobytes() == Kc.tobytes() else _top(Kc))[:, None, None]
            Z = geo.eagle_step(Z, at, a, c)
    return geo.readout_of(Z, z0)


def _top(K: np.ndarray) -> np.ndarray:
    """Largest eigenvalue of symmetric (b, k, k), floored at the smallest normal float."""
    with np.errstate(invalid="ignore"):
        top = np.linalg.eigvalsh(np.nan_to_num(K, posinf=0.0, neginf=0.0))[:, -1]
    return np.maximum(top, np.finfo(float).tiny)


def exact(z0: np.ndarray, d: int, n: int) -> np.ndarray:
    """B A⁺ C (b, d', n')."""
    A, B, C = z0[:, :d, :n], z0[:, d:, :n], z0[:, :d, n:]
    return B @ np.linalg.pinv(A, rcond=1e-10) @ C


def cgls(z0: np.ndarray, d: int, n: int, iterations: int) -> np.ndarray:
    """CGLS on min ‖Aᵀ x − Bᵀ‖ (x = Wᵀ, each output row its own CG), from x = 0: D = xᵀ C."""
    A, B, C = z0[:, :d, :n], z0[:, d:, :n], z0[:, :d, n:]
    Ac, r = A.swapaxes(-1, -2), B.swapaxes(-1, -2).copy()  # (b, n, d), (b, n, d')
    x = np.zeros(A.shape[:1] + (d, B.shape[1]))  # (b, d, d')
    s = A @ r  # Acᵀ r: (b, d, d')
    p = s.copy()
    gam = np.sum(s * s, axis=1, keepdims=True)  # (b, 1, d')
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(iterations):
            q = Ac @ p  # (b, n, d')
            qq = np.sum(q * q, axis=1, keepdims=True)
            alpha = np.where(qq > 0, gam / np.where(qq > 0, qq, 1.0), 0.0)
            x = x + alpha * p
            r = r - alpha * q
            s = A @ r
            new = np.sum(s * s, axis=1, keepdims=True)
            beta = np.where(gam > 0, new / np.where(gam > 0, gam, 1.0), 0.0)
            p = s + beta * p
            gam = new
    return x.swapaxes(-1, -2) @ C


def gd(z0: np.ndarray, d: int, n: int, iterations: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Gradient descent W ← W − τ (W A − B) Aᵀ, τ = 1 / ‖A‖₂², from W = 0: D = W C after
    `iterations` steps, and D after every step 0 … iterations."""
    A, B, C = z0[:, :d, :n], z0[:, d:, :n], z0[:, :d, n:]
    tau = 1.0 / np.maximum(np.linalg.norm(A, ord=2, axis=(-2, -1)), 1e-300) ** 2  # (b,)
    W = np.zeros(B.shape[:2] + (d,))  # (b, d', d)
    At = A.swapaxes(-1, -2)
    path = [W @ C]
    for _ in range(iterations):
        W = W - tau[:, None, None] * ((W @ A - B) @ At)
        path.append(W @ C)
    return path[-1], path


def theory_eagle(z0: np.ndarray, d: int, n: int, steps: int) -> list[np.ndarray]:
    """Algorithm 1 (S = I) with the theory's η = 1/3, γ = 1 and ρ = ‖A_k‖₂⁻²: D after every
    step 0 … steps (b, d', n') each."""
    eta, gamma = THEORY
    A, B, C = (x.copy() for x in (z0[:, :d, :n], z0[:, d:, :n], z0[:, :d, n:]))
    D = np.zeros(B.shape[:2] + C.shape[2:])
    path = [D]
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(steps):
            rho = 1.0 / np.maximum(np.linalg.norm(A, ord=2, axis=(-2, -1)), 1e-300) ** 2
            rho = rho[:, None, None]
            At = A.swapaxes(-1, -2)
            G, BAt = A @ At, B @ At  # (b, d, d), (b, d', d)
            A, B, C, D = (
                A - eta * rho * (G @ A),
                B - eta * rho * (BAt @ A),
                C - gamma * rho * (G @ C),
                D + gamma * rho * (BAt @ C),
            )
            path.append(D)
    return path


def _rel(x: np.ndarray, ref: np.ndarray) -> float:
    size = float(np.linalg.norm(ref))
    with np.errstate(over="ignore", invalid="ignore"):
        gap = float(np.linalg.norm(x - ref))
    return gap / size if size > 0 else (0.0 if gap == 0 else math.inf)


def _mse(x: np.ndarray, D: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean((x - D) ** 2))


def _cosine(u: np.ndarray, v: np.ndarray) -> float:
    """Mean over prompts of the cosine between u[i] and v[i] (flattened)."""
    u, v = u.reshape(len(u), -1), v.reshape(len(v), -1)
    nu, nv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
    ok = (nu > 0) & (nv > 0) & np.isfinite(nu) & np.isfinite(nv)
    if not ok.any():
        return math.nan
    return float(np.mean(np.sum(u[ok] * v[ok], axis=1) / (nu[ok] * nv[ok])))


# --- the comparison ---------------------------------------------------------------------------


class _Scorer:
    """Everything one sweep point needs: the network, the family and its steps."""

    def __init__(self, model: LinearTransformer, ex, cfg: CompareConfig) -> None:
        from eagle_probe.capture import float64_copy, probe_chunk

        self.model = float64_copy(model)
        self.chunk = probe_chunk(self.model.cfg)
        self.geo: Geometry = ex.geometry
        self.d, self.n = self.geo.d, self.geo.n
        self.L = self.geo.layers
        layers = ex.views["eagle"].tables["eagle"]  # the steps the activations give
        self.faithful = (list(layers.a_step), list(layers.c_step))
        opt = ex.views.get("optimum")
        best = opt.json.get("optimal") if opt is not None else None
        self.optimum = None if best is None else (list(best["a_steps"]), list(best["c_steps"]))
        self.cfg = cfg
        self.iterations = self.L * PRODUCTS_PER_STEP // PRODUCTS_PER_ITERATION

    def with_samples(self, n: int) -> _Scorer:
        """The same weights on prompts of n context samples (sample layout): the scores average
        over the n keys, so every step the extraction read, a = −q v / n_train, becomes
        a n_train / n."""
        import copy

        from eagle_probe.capture import probe_chunk
        from eagle_probe.extract import geometry_of

        out = copy.copy(self)
        cfg = replace(self.model.cfg, n=n)
        out.model = LinearTransformer(cfg)
        state = {k: v for k, v in self.model.state_dict().items() if not k.endswith(".mask")}
        out.model.load_state_dict(state, strict=False)  # the token mask is the new n's own
        out.model.eval()
        out.chunk = probe_chunk(cfg)
        out.geo, out.n = geometry_of(out.model, None), n
        factor = self.n / n
        out.faithful = tuple([factor * x for x in steps] for steps in self.faithful)
        if self.optimum is not None:
            out.optimum = tuple([factor * x for x in steps] for steps in self.optimum)
        return out

    def network(self, z0: np.ndarray) -> np.ndarray:
        from eagle_probe.extract import predict_chunked

        with torch.no_grad():
            return predict_chunked(
                self.model, z0, device=torch.device("cpu"), chunk=max(1, self.chunk)
            )

    def algorithm(self, z0: np.ndarray) -> np.ndarray:
        return run_family(self.geo, z0, *self.faithful)

    def predictions(self, z0: np.ndarray) -> dict[str, np.ndarray]:
        out = {"network": self.network(z0), "faithful": self.algorithm(z0)}
        if self.optimum is not None:
            out["optimum"] = run_family(self.geo, z0, *self.optimum)
        if not self.geo.samples:  # the theory's extra steps are EAGLE's
            extra = (self.cfg.more_steps - 1) * self.L
            out["more"] = run_family(self.geo, z0, *self.faithful, extra=extra)
        out["exact"] = exact(z0, self.d, self.n)
        out["cg"] = cgls(z0, self.d, self.n, self.iterations)
        out["gd"] = gd(z0, self.d, self.n, self.iterations)[0]
        return out

    def sensitivity(self, z0: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
        """Cosine of the network's and the algorithm's directional derivatives in C and A."""
        d, n, k = self.d, self.n, self.cfg.directions
        out = {}
        for block, rows, cols in (
            ("C", slice(0, d), slice(n, None)),
            ("A", slice(0, d), slice(0, n)),
        ):
            shape = z0[:, rows, cols].shape[1:]
            V = rng.standard_normal((k,) + shape)
            V /= np.linalg.norm(V.reshape(k, -1), axis=1)[:, None, None]  # (k, …) unit
            size = np.linalg.norm(z0[:, rows, cols], axis=(-2, -1))  # (b,)
            h = FD_STEP * np.maximum(size, 1e-300)  # (b,)
            plus = np.repeat(z0[:, None], k, axis=1).copy()  # (b, k, T, E)
            minus = plus.copy()
            step = h[:, None, None, None] * V[None]  # (b, k, …)
            plus[:, :, rows, cols] += step
            minus[:, :, rows, cols] -= step
            flat = np.concatenate([plus, minus], axis=1).reshape((-1,) + z0.shape[1:])
            b = z0.shape[0]
            grads = []
            for fn in (self.network, self.algorithm):
                y = fn(flat).reshape((b, 2 * k) + (-1,))
                grads.append((y[:, :k] - y[:, k:]) / (2 * h[:, None, None]))  # (b, k, d'n')
            out[block] = _cosine(*grads)
        return out


def _point_prompts(
    task: TaskConfig, sweep: str, value: float, batch: int, seed: int, train_norm: float
) -> tuple[np.ndarray, np.ndarray]:
    """Prompts (z0, D) of one sweep point, float64, prompt units."""
    if sweep in ("scale", "input_scale", "query_scale", "task_noise"):
        g = make_generator(seed)
        p = sample(task, batch, g, dtype=torch.float64)
        A, B, C, D = (t.numpy().copy() for t in (p.A, p.B, p.C, p.D))
        if sweep == "scale":
            A, D = A * value, D / value
        elif sweep == "input_scale":  # every x, and the labels y = W x with them
            A, B, C, D = (x * value for x in (A, B, C, D))
        elif sweep == "query_scale":
            C, D = C * value, D * value
        else:  # noisy labels of the samples; D stays the noiseless answer
            noise = torch.randn(B.shape, generator=g, dtype=torch.float64).numpy()
            B = B + math.sqrt(value) * noise
    elif sweep == "samples":
        n = int(value)
        rank = min(task.rank, n, task.d)
        p = sample(replace(task, n=n, rank=rank), batch, make_generator(seed), dtype=torch.float64)
        A, B, C, D = (t.numpy().copy() for t in (p.A, p.B, p.C, p.D))
    else:
        field = {"kappa": "kappa", "rank": "rank", "alpha": "alpha", "noise": "noise"}[sweep]
        cast = int(value) if sweep == "rank" else float(value)
        p = sample(replace(task, **{field: cast}), batch, make_generator(seed), dtype=torch.float64)
        A, B, C, D = (t.numpy().copy() for t in (p.A, p.B, p.C, p.D))
        if sweep == "kappa":  # ‖A‖₂ at the training prompts' median
            r = train_norm / np.maximum(np.linalg.norm(A, ord=2, axis=(-2, -1)), 1e-300)
            A, B, C, D = (x * r[:, None, None] for x in (A, B, C, D))
    z0 = np.concatenate(
        [np.concatenate([A, C], axis=-1), np.concatenate([B, np.zeros_like(D)], axis=-1)],
        axis=-2,
    )
    return z0, D


def skipped_sweeps(task: TaskConfig, geo: Geometry) -> dict[str, str]:
    """The sweeps the training task or layout do not offer, with the reason."""
    if geo.samples:
        out = {}
    else:
        out = {"samples": "the feature layout's width n + n' fixes the number of samples n"}
        out |= {s: "a sweep of the sample layout (tokens = rows [x, y])" for s in SAMPLE_ONLY}
    if task.task == "nystrom":
        out["kappa"] = "the kernel sets the nystrom task's spectrum; κ cannot be prescribed"
        out["rank"] = "the nystrom task has no rank parameter"
        out["alpha"] = "the nystrom task has no anisotropy parameter"
    elif task.kappa is not None:
        out["alpha"] = "the training task prescribes κ, which replaces the α spectrum"
    elif task.task == "least_squares":
        out["rank"] = "the least_squares task's rank is min(d, n) (no rank parameter)"
    elif task.task == "completion":
        out["alpha"] = "the completion task is isotropic (no anisotropy parameter)"
    return out


def _follows(values: list[float], gaps: list[float], train: int) -> tuple[float, float]:
    """The range of values around the training point (index `train`) whose gap stays within
    FOLLOW_FACTOR × the training point's (or below FOLLOW_FLOOR)."""
    limit = max(FOLLOW_FACTOR * gaps[train], FOLLOW_FLOOR)
    lo = hi = train
    while lo > 0 and gaps[lo - 1] <= limit:
        lo -= 1
    while hi < len(values) - 1 and gaps[hi + 1] <= limit:
        hi += 1
    return values[lo], values[hi]


def _training_value(task: TaskConfig, sweep: str) -> float | None:
    return {
        "scale": 1.0,
        "kappa": task.kappa,
        "rank": float(task.rank),
        "alpha": task.alpha,
        "noise": task.noise,
        "input_scale": 1.0,
        "query_scale": 1.0,
        "task_noise": task.noise,
        "samples": float(task.n),
    }[sweep]


def in_gauge(qk: np.ndarray, qk_f: np.ndarray, vp_f: np.ndarray) -> tuple[np.ndarray, ...]:
    """The family's products (L, h, E, E) in the network's gauge: each head's W_QK scaled by
    λ = ±‖W_QK^net‖_F / ‖W_QK^family‖_F (the sign of their inner product) and its W_VP by 1/λ.
    A head's scores times values, and so the layer, are unchanged; without it the straight path
    between W_QK = α I, W_VP = −a/α I and W_QK = I, W_VP = −a I passes through layers with steps
    up to (1 + α)² / (4 α) times a."""
    num = np.linalg.norm(qk, axis=(-2, -1))  # (L, h)
    den = np.linalg.norm(qk_f, axis=(-2, -1))
    sign = np.where(np.sum(qk * qk_f, axis=(-2, -1)) < 0, -1.0, 1.0)
    lam = np.where((num > 0) & (den > 0), sign * num / np.where(den > 0, den, 1.0), 1.0)
    return qk_f * lam[..., None, None], vp_f / lam[..., None, None]


def interpolation(
    model: LinearTransformer,
    geo: Geometry,
    a_steps,
    c_steps,
    z0: np.ndarray,
    D: np.ndarray,
    points: int,
) -> pd.DataFrame:
    """MSE and gap to the network along (1 − t) products_network + t products_family, the
    family's products in the network's gauge (`in_gauge`)."""
    from eagle_probe.fit import families
    from eagle_probe.layouts import state_products

    qk, vp = state_products(model)
    fam = families.of_geometry(geo)
    qk_f, vp_f = fam.products(geo, a_steps, c_steps, geo.projector)
    if qk_f.shape != qk.shape:
        raise EagleProbeError(
            f"the family's products {qk_f.shape} do not match the network's {qk.shape}"
        )
    qk_f, vp_f = in_gauge(qk, qk_f, vp_f)
    net = geo.predict(z0, qk, vp)
    rows = []
    for t in np.linspace(0.0, 1.0, points):
        pred = geo.predict(z0, (1 - t) * qk + t * qk_f, (1 - t) * vp + t * vp_f)
        rows.append({"t": float(t), "mse": _mse(pred, D), "gap": _rel(pred, net)})
    return pd.DataFrame(rows)


def iteration_map(
    geo: Geometry, qk: np.ndarray, vp: np.ndarray, z0: np.ndarray, steps: int
) -> dict[str, Any]:
    """Each layer's D slot against k steps of exact EAGLE (η = 1/3, γ = 1; not in the sample
    layout) and of GD: distances (L, k + 1) = ‖D_layer − D_k‖² / ‖B A⁺ C‖², and the closest k
    per layer."""
    stream = geo.stream(z0, qk, vp)  # (L + 1, b, T, E) internal units
    layers = [geo.readout_of(Z, z0) for Z in stream[1:]]  # L × (b, d', n')
    ref = float(np.sum(exact(z0, geo.d, geo.n) ** 2))
    out: dict[str, Any] = {}
    paths = {} if geo.samples else {"eagle": theory_eagle(z0, geo.d, geo.n, steps)}
    paths["gd"] = gd(z0, geo.d, geo.n, 4 * steps)[1]
    for name, path in paths.items():
        with np.errstate(over="ignore", invalid="ignore"):
            dist = np.array(
                [
                    [float(np.sum((D_l - D_k) ** 2)) / max(ref, 1e-300) for D_k in path]
                    for D_l in layers
                ]
            )
        safe = np.where(np.isfinite(dist), dist, np.inf)
        out[name] = {
            "steps": list(range(len(path))),
            "distance": dist,
            "closest": [int(np.argmin(row)) for row in safe],
            "closest_distance": [float(np.min(row)) for row in safe],
        }
    return out


def _default_extraction(
    model: LinearTransformer, task: TaskConfig, cfg: CompareConfig, progress: Progress | None = None
):
    """The extraction `compare` reads when none is given: the views its scorer needs."""
    from eagle_probe.extract import extract

    views = ("eagle", "fidelity", "projection", "optimum", "verdict")
    return extract(
        model,
        task,
        views=views + (("algorithm",) if model.cfg.samples else ()),  # the sample verdict's names
        seed=cfg.seed,
        test_batch=1024,
        tuning_batch=256,
        progress=progress,
    )


def _sweep_point(
    scorer: _Scorer,
    task: TaskConfig,
    sweep: str,
    value: float,
    seed: int,
    train_norm: float,
    cfg: CompareConfig,
    rng: np.random.Generator,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One value of a sweep: its JSON point (errors, gaps to the network, sensitivity cosines)
    and its table row."""
    z0, D = _point_prompts(task, sweep, value, cfg.prompts, seed, train_norm)
    here = scorer.with_samples(int(value)) if sweep == "samples" else scorer
    preds = here.predictions(z0)
    zero = float(np.mean(D**2))
    mse = {k: _mse(v, D) for k, v in preds.items()}
    # beside each mean, what one prompt cannot move: the median and the 0.1%-trimmed mean
    stats = {k: prompt_tails(v, D) for k, v in preds.items()}
    sens = here.sensitivity(z0[: cfg.sensitivity_prompts], rng)
    norms_a = np.linalg.norm(z0[:, : scorer.geo.d, : here.n], ord=2, axis=(-2, -1))
    point = {
        "value": float(value),
        "prompts": int(z0.shape[0]),
        "norm_a": float(np.median(norms_a)),
        "zero_mse": zero,
        "mse": mse,
        "median_mse": {k: v["median_mse"] for k, v in stats.items()},
        "trimmed_mse": {k: v["trimmed_mse"] for k, v in stats.items()},
        "relative_mse": {k: v / zero if zero > 0 else math.inf for k, v in mse.items()},
        "gap": {
            k: _rel(preds[k], preds["network"])
            for k in ("faithful", "optimum", "more")
            if k in preds
        },
        "sensitivity_cosine": sens,
    }
    row = (
        {"value": point["value"], "norm_a": point["norm_a"]}
        | {f"mse_{k}": v for k, v in mse.items()}
        | {f"median_{k}": v for k, v in point["median_mse"].items()}
        | {"gap": point["gap"]["faithful"]}
        | {f"gap_{k}": v for k, v in point["gap"].items()}
        | {f"cos_{k}": v for k, v in sens.items()}
    )
    return point, row


def _training_index(points: list[dict[str, Any]], train_value: float | None) -> int:
    """The sweep point nearest the training distribution (on a log scale where both are
    positive); without a training value, the point of the smallest faithful gap."""
    if train_value is None:
        return int(np.argmin([p["gap"]["faithful"] for p in points]))
    return int(
        np.argmin(
            [
                abs(math.log(v / train_value))
                if v > 0 and train_value > 0
                else abs(v - train_value)
                for v in (p["value"] for p in points)
            ]
        )
    )


def _run_sweep(
    scorer: _Scorer,
    task: TaskConfig,
    sweep: str,
    values: tuple[float, ...],
    train_norm: float,
    cfg: CompareConfig,
    rng: np.random.Generator,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """One sweep's JSON (its points, the training point, where the network follows its
    algorithm) and its table."""
    seed = cfg.seed + 1000 * (1 + SWEEPS.index(sweep))
    points, rows = [], []
    for value in values:
        point, row = _sweep_point(scorer, task, sweep, value, seed, train_norm, cfg, rng)
        points.append(point)
        rows.append(row)
    train_value = _training_value(task, sweep)
    train_index = _training_index(points, train_value)
    vals = [p["value"] for p in points]
    lo, hi = _follows(vals, [p["gap"]["faithful"] for p in points], train_index)
    record = {
        "parameter": _PARAMETER[sweep],
        "training_value": train_value,
        "training_index": train_index,
        "points": points,
        "follows": {"low": lo, "high": hi, "factor": FOLLOW_FACTOR, "floor": FOLLOW_FLOOR},
    }
    return record, pd.DataFrame(rows)


def _model_record(model: LinearTransformer, task: TaskConfig, extraction, geo) -> dict[str, Any]:
    samples = model.cfg.samples
    return {
        "regime": model.cfg.regime,
        "tokens": model.cfg.tokens,
        # the family the views read: GD++ in the sample layout (GD its γ = 0 case)
        "family": "GD++" if samples else extraction.info.get("family"),
        "verdict": extraction.verdict.get("label"),
        "layers": geo.layers,
        "heads": geo.heads,
        "normalize": geo.normalize,
        "task": task.to_dict(),
    }


def _steps_record(scorer: _Scorer, cfg: CompareConfig, samples: bool) -> dict[str, Any]:
    """The steps of every scored algorithm and the products a step or iteration costs."""
    more = {"total_steps": cfg.more_steps * scorer.geo.layers, "eta": THEORY[0], "gamma": THEORY[1]}
    optimum = scorer.optimum
    return {
        "faithful": {"a_steps": scorer.faithful[0], "c_steps": scorer.faithful[1]},
        "optimum": None if optimum is None else {"a_steps": optimum[0], "c_steps": optimum[1]},
        "more": None if samples else more,
        "baseline_iterations": scorer.iterations,
        "products_per_step": PRODUCTS_PER_STEP,
        "products_per_iteration": PRODUCTS_PER_ITERATION,
    }


def _interpolation_record(interp) -> dict[str, Any]:
    return {
        "to": "the family read, planted with the faithful steps",
        "t": interp.t.tolist(),
        "mse": interp.mse.tolist(),
        "gap": interp.gap.tolist(),
        "mse_range": float(interp.mse.max() - interp.mse.min()),
        "mse_relative_range": _spread(interp.mse.to_numpy()),
    }


def _iteration_map_record(imap: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        name: {
            "steps": m["steps"],
            "distance": m["distance"].tolist(),
            "closest": m["closest"],
            "closest_distance": m["closest_distance"],
        }
        for name, m in imap.items()
    }


def compare(
    model: LinearTransformer,
    task: TaskConfig,
    cfg: CompareConfig | None = None,
    *,
    values: dict[str, tuple[float, ...]] | None = None,
    extraction=None,
    progress: Progress | None = None,
) -> Comparison:
    """Score the network beside its extracted algorithm, the same run longer, B A⁺ C and the
    classical baselines on sweeps of the prompt distribution (module text). `values` replaces
    the default sweep values (`default_values`); `extraction` an extraction of this model with
    at least the views eagle, fidelity, projection and optimum; `progress` reports the
    extraction's stages and the sweeps."""
    from eagle_probe.files import jsonable
    from eagle_probe.layouts import state_products

    samples = model.cfg.samples
    cfg = (CompareConfig() if cfg is None else cfg).for_layout(samples)
    timings: dict[str, float] = {}
    with timed(timings, "extract"):
        if extraction is None:
            extraction = _default_extraction(model, task, cfg, progress)
    scorer = _Scorer(model, extraction, cfg)
    geo = scorer.geo
    grid = default_values(task) if values is None else values
    skipped = skipped_sweeps(task, geo)
    rng = np.random.default_rng([cfg.seed, 25])
    base = sample(task, cfg.prompts, make_generator(cfg.seed + 1), dtype=torch.float64)
    train_norm = float(np.median(np.linalg.norm(base.A.numpy(), ord=2, axis=(-2, -1))))

    with timed(timings, "export_check"):
        if samples:  # no solver is exported for the sample layout (it runs EAGLE)
            export_check = {"prompts": 0, "relative_gap": None, "reason": "no solver is exported"}
        else:
            export_check = _export_check(extraction, base, scorer)

    sweeps_json: dict[str, Any] = {}
    tables: dict[str, pd.DataFrame] = {}
    order = cfg.sweeps if progress is None else progress(cfg.sweeps, "sweeps")
    for sweep in order:
        if sweep in skipped:
            continue
        if sweep not in grid:
            skipped[sweep] = "no values given"
            continue
        with timed(timings, sweep):
            sweeps_json[sweep], tables[sweep] = _run_sweep(
                scorer, task, sweep, grid[sweep], train_norm, cfg, rng
            )

    with timed(timings, "interpolation"):
        z0 = base.z0().numpy()
        interp = interpolation(
            scorer.model, geo, *scorer.faithful, z0, base.D.numpy(), cfg.interpolation_points
        )
    with timed(timings, "iteration_map"):
        qk, vp = state_products(scorer.model)
        imap = iteration_map(geo, qk, vp, z0, cfg.map_steps)

    out = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "model": _model_record(model, task, extraction, geo),
        "config": cfg.to_dict(),
        "algorithms": {
            k: _SAMPLE_DESCRIPTIONS.get(k, v) if samples else v
            for k, v in _DESCRIPTIONS.items()
            if not (samples and k == "more")
        },
        "steps": _steps_record(scorer, cfg, samples),
        "training_norm_a": train_norm,
        "export_check": export_check,
        "sweeps": sweeps_json,
        "skipped": {k: v for k, v in skipped.items() if k in cfg.sweeps},
        "interpolation": _interpolation_record(interp),
        "iteration_map": _iteration_map_record(imap),
        "summary": _summary(sweeps_json, interp),
        "timings": timings,
    }
    return Comparison(
        json=jsonable(out),
        sweeps=tables,
        interpolation=interp,
        iteration_map={k: m["distance"] for k, m in imap.items()},
    )


_PARAMETER = {
    "input_scale": "factor s on every x, the labels with them",
    "query_scale": "factor s on the queries' x (answers with them)",
    "task_noise": "variance σ² of the noise on the samples' labels",
    "samples": "number n of context samples",
    "scale": "factor s on A (answer D / s)",
    "kappa": "condition number of A (‖A‖₂ at the training median)",
    "rank": "rank s of X",
    "alpha": "anisotropy α of the row covariance diag(α^i)",
    "noise": "variance σ² of the noise added to X",
}

_SAMPLE_DESCRIPTIONS = {
    "faithful": "the extracted algorithm: GD++ with the steps (γ, η) read from the activations",
    "optimum": "GD++ with the optimum view's steps",
}
_DESCRIPTIONS = {
    "network": "the model (float64 copy of its weights)",
    "faithful": "the extracted algorithm: the family read, steps read from the activations "
    "(the exported solver's faithful mode)",
    "optimum": "the same family with the optimum view's steps",
    "more": "the faithful layers, then the family at η = 1/3, γ = 1 (normalised per step)",
    "exact": "B A⁺ C",
    "cg": "CGLS on min ‖W A − B‖ from 0 with L EAGLE steps' matrix products",
    "gd": "gradient descent (step 1/‖A‖₂²) with L EAGLE steps' matrix products",
}


def _export_check(extraction, base, scorer: _Scorer, prompts: int = 16) -> dict[str, Any]:
    """The exported solver's faithful mode against `run_family` on a few training prompts."""
    from eagle_probe.export import load_solver, solver_source

    payload = extraction.to_json()
    z0 = base.z0().numpy()[:prompts]
    d, n = scorer.d, scorer.n
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "solver.py"
        path.write_text(solver_source(payload, extraction.projectors))
        solver = load_solver(path)
        out = np.stack(
            [solver.complete(z[:d, :n], z[d:, :n], z[:d, n:], mode="faithful") for z in z0]
        )
    return {"prompts": int(len(z0)), "relative_gap": _rel(scorer.algorithm(z0), out)}


def _spread(v: np.ndarray) -> float:
    """(max − min) / mean of positive values (0 for a constant, inf if not finite)."""
    if not np.all(np.isfinite(v)):
        return math.inf
    mean = float(np.mean(v))
    return float(v.max() - v.min()) / mean if mean > 0 else 0.0


def _summary(sweeps: dict[str, Any], interp: pd.DataFrame) -> dict[str, Any]:
    parts, worst = [], 0.0
    for name, s in sweeps.items():
        gaps = [p["gap"]["faithful"] for p in s["points"]]
        worst = max(worst, max(gaps))
        f = s["follows"]
        vals = [p["value"] for p in s["points"]]
        whole = f["low"] == vals[0] and f["high"] == vals[-1]
        parts.append(
            f"{name} {_fmt(f['low'])}…{_fmt(f['high'])}"
            + (" (all)" if whole else f" of {_fmt(vals[0])}…{_fmt(vals[-1])}")
        )
    text = (
        "the network follows its extracted algorithm (gap within "
        f"{FOLLOW_FACTOR:g}× the training point's) over: "
        + "; ".join(parts)
        + f". Largest gap {_fmt(worst)}; along the interpolation the MSE varies by "
        f"{_fmt(_spread(interp.mse.to_numpy()))} of its mean."
    )
    return {"text": text, "max_gap": worst}


def _fmt(x: float) -> str:
    """A number of the text: 3 significant digits, "not finite" for inf or NaN
    (`wording.value`)."""
    return wording.value(x)
