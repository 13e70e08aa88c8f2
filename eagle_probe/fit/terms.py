"""The `terms` view: which block-product terms each layer adds, found by sparse regression.

Per layer l and target block X ∈ {A, B, C, D}, the captured update ΔX = X_{l+1} − X_l is regressed
on the term library (`fit.library`, form (1) there) in two stages:

1. scalar terms (`X+=PQtR`), by sequential thresholded least squares (`sparse.stlsq`);
2. only where those leave more than `explain` of ‖ΔX‖ unexplained, matrix families
   (`X+=P*W*QtR`, `X+=PQtR*W`, `X+=P*U*QtR*V`), added one at a time along a forward path
   (`sparse.forward_groups`); a matrix family supersedes the scalar term it nests.

Stability selection: the selection runs on `bags` random halves of the probe prompts; a term's
`frequency` is the fraction of bags that chose it, and the terms kept are those chosen in at least
`stable` of them. They are refitted on all probe prompts (scalar supports exactly, by an orthogonal
factorisation of the explicit design). The fit is per target block: the blocks share no
coefficients, so their regressions decouple.

JSON (`views.terms`, every field in docs/extraction-schema.md): per layer the terms with their
coefficients, frequencies and shares, the one-step fidelity (Table-1 metric, prompt units) and the
relative residual; and the discovered terms run layer by layer from held-out prompts, scored
against the true D next to the network.

Sample layout. Its layer on H = Zᵀ, H ← H + Σ_h ((H W_QK^h Hᵀ) ⊙ M_s) H W_VP^h / n, is the
feature layout's form (1) for the stream H, whose visible rows are the n samples [Aᵀ Bᵀ]: H's
blocks are [[Aᵀ, Bᵀ], [Cᵀ, Dᵀ]]. So the library runs on H unchanged (`stream_context`), and each
term X_H += P_H·W1·Q_Hᵀ·R_H·W2 is reported transposed back, X += W2ᵀ·R·Qᵀ·W1ᵀ·P, in the blocks
of Z (`sample_term`): `X+=RQtP` scalar, `X+=RQt*W*P` (W = W1ᵀ, features of Q × features of P),
`X+=W*RQtP` (W = W2ᵀ), `X+=V*RQt*U*P` (the lifted coefficient of both, transposed alike). The
coefficients include the scores' 1/n. GD is `B+=BAtA` and `D+=BAtC` with −η/n; GD++ adds
`A+=AAtA` and `C+=AAtC` with −γ/n; preconditioned GD is `B+=BAt*W*A` and `D+=BAt*W*C` with
W = −(η/n) Γᵀ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from eagle_probe import drawing as draw
from eagle_probe.fit import families, sparse
from eagle_probe.fit import library as lib
from eagle_probe.fit.base import (
    Context,
    Extraction,
    Figures,
    HeldOut,
    ViewResult,
    affordable,
    register,
    table1,
)
from eagle_probe.fit.geometry import Geometry
from eagle_probe.wording import number, percent


@dataclass(frozen=True, kw_only=True)
class TermsConfig:
    """Settings of the term discovery."""

    threshold: float = 1e-3  # STLSQ: drop a scalar term whose contribution is < this × ‖ΔX‖
    explain: float = 0.02  # scalar terms explain ΔX when they leave ≤ this relative residual
    min_gain: float = 0.25  # the matrix path stops when a step lowers the residual < this factor
    max_matrix: int = 3  # at most this many matrix families per target block
    identifiable: float = 0.5  # a matrix family enters only if its unknowns per column are ≤
    # this × the probe rows it is fitted on (unknowns ≤ this × observations for W1 families)
    max_features: int = 256  # and only if its per-column design has at most this many features
    bags: int = 12  # stability selection: number of random halves of the probe prompts
    bag_fraction: float = 0.5  # prompts per bag, as a fraction
    stable: float = 0.5  # keep a term chosen in at least this fraction of the bags
    residual_warning: float = 0.05  # warn when a layer's terms leave more of its update

    def __post_init__(self) -> None:
        for name in ("threshold", "explain", "min_gain", "identifiable", "residual_warning"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value < np.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("max_matrix", "bags", "max_features"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("bag_fraction", "stable"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1], got {value!r}")


@dataclass
class Fitted:
    """One discovered term with its refitted coefficient."""

    term: lib.Term
    coef: np.ndarray  # () scalar or the matrix of `term.shape`
    frequency: float  # inclusion frequency over the bags
    share: float = 0.0  # ⟨its contribution, ΔX⟩ / ‖ΔX‖² on all probe prompts


# --- selection for one target block ---------------------------------------------------------------


def _rows(term: lib.Term, g: Geometry) -> int:
    return g.d if lib.TOP[term.target] else g.d_prime


def _candidates(
    X: str, g: Geometry, prompts: int, cfg: TermsConfig, structures: tuple[str, ...] = ()
) -> list[lib.Term]:
    """The library's families for X that the probe batch can identify (with the regime terms
    of `structures`)."""
    kx = g.n if lib.KIND[X] == "a" else g.n_prime
    size = {"a": g.n, "c": g.n_prime}
    out = []
    for term in lib.library((X,), structures):
        if (
            term.free == "both"
            and size[lib.KIND[term.Q]] == 1
            and lib.KIND[term.R] == lib.KIND[term.P]
        ):
            # one column of Q's kind: P·U·QᵀR·V is P·W·RᵀQ, the W1 family with key and value
            # swapped, exactly; leave the duplicate out so the simpler family names the term
            continue
        rows = prompts * _rows(term, g)
        features = term.shared_features(g)
        if term.free in ("W2", "both") and features > min(
            cfg.identifiable * rows, cfg.max_features
        ):
            continue
        if term.free == "W1" and term.size(g) > cfg.identifiable * rows * kx:
            continue
        out.append(term)
    return out


def _problem(terms: list[lib.Term], f: lib.Factors, y: np.ndarray, g: Geometry):
    def own(i: int):
        """Shared families (W2, bilinear): normal matrix FᵀF ⊗ I, solved column by column."""
        if terms[i].free not in ("W2", "both"):
            return None
        solve = sparse.psd_solver(lib.shared_gram(terms[i], f))
        m = terms[i].shared_features(g)

        def structured(b: np.ndarray) -> np.ndarray:
            # b (m·kX, …): the coefficient's rows are (feature, column) pairs, C order
            return solve(b.reshape(m, -1)).reshape(b.shape)

        return structured

    return sparse.NormalProblem(
        sizes=[t.size(g) for t in terms],
        gram_block=lambda i, j: lib.gram(terms[i], terms[j], f, g),
        rhs_block=lambda i: lib.rhs(terms[i], f, y),
        yy=float(np.sum(y * y)),
        own_solver=own,
    )


def _levels(terms: list[lib.Term]) -> list[int]:
    """Priority levels of a support listed scalars first, then matrix families in order: all
    scalar terms together, then each matrix family on its own."""
    scalars = sum(t.free == "none" for t in terms)
    return [scalars] + [1] * (len(terms) - scalars)


@dataclass
class Selection:
    """What the selection chose for one target block on one set of prompts."""

    scalars: list[lib.Term]  # scalar terms kept by STLSQ
    matrices: list[lib.Term]  # matrix families, in the order the forward path added them
    scalar_residual: float  # relative residual of the scalar terms alone

    @property
    def terms(self) -> list[lib.Term]:
        nested = {t.scalar_name for t in self.matrices}
        return [t for t in self.scalars if t.name not in nested] + self.matrices


def select(
    X: str,
    f: lib.Factors,
    y: np.ndarray,
    g: Geometry,
    cfg: TermsConfig,
    prompts: int,
    candidates: list[lib.Term] | None = None,
) -> Selection:
    """Choose the terms for target X on factors f and update y (b, rows, kX). `prompts` (the
    whole probe batch) sets which families are identifiable, so every bag sees the same
    candidates (`candidates`: `_candidates` of these arguments, where already listed)."""
    terms = candidates or _candidates(X, g, prompts, cfg, tuple(f.structures))
    problem = _problem(terms, f, y, g)
    if problem.yy <= 0.0:
        return Selection([], [], 0.0)
    scalars = [i for i, t in enumerate(terms) if t.free == "none"]
    support, _ = sparse.stlsq(problem, scalars, cfg.threshold)
    _, scalar_res = problem.fit(support)
    if scalar_res <= cfg.explain or cfg.max_matrix == 0:
        return Selection([terms[i] for i in support], [], scalar_res)
    matrices = [i for i, t in enumerate(terms) if t.free != "none"]
    path, _ = sparse.forward_groups(
        problem,
        support,
        matrices,
        tol=cfg.explain,
        min_gain=cfg.min_gain,
        max_groups=cfg.max_matrix,
    )
    nested = {terms[i].scalar_name for i in path if terms[i].free != "none"}
    path = [i for i in path if terms[i].name not in nested]
    path, _ = sparse.stlsq(problem, path, cfg.threshold)
    chosen = [terms[i] for i in path]
    return Selection(
        [t for t in chosen if t.free == "none"], [t for t in chosen if t.free != "none"], scalar_res
    )


def bag_terms(
    X: str,
    f: lib.Factors,
    y: np.ndarray,
    g: Geometry,
    cfg: TermsConfig,
    prompts: int,
    parts: dict[str, np.ndarray],
    candidates: list[lib.Term] | None = None,
) -> list[str]:
    """The terms one bag (factors f, update y of its prompts) includes for target X.

    Scalar terms: STLSQ reruns on the bag. Matrix families: where the bag's scalar terms do not
    explain ΔX, each family of the all-prompt support counts as included when, on the bag's
    prompts, dropping its contribution (`parts`: name -> contribution with the all-prompt
    coefficients, on the bag's prompts) raises the residual of the all-prompt fit by more than
    the factor `min_gain` (the path's entry test, without refitting per bag). `candidates`:
    `_candidates` of these arguments, where already listed.
    """
    terms = candidates or _candidates(X, g, prompts, cfg, tuple(f.structures))
    scalars = [t for t in terms if t.free == "none"]
    problem = _problem(scalars, f, y, g)
    if problem.yy <= 0.0:
        return []
    support, _ = sparse.stlsq(problem, list(range(len(scalars))), cfg.threshold)
    names = [scalars[i].name for i in support]
    _, scalar_res = problem.fit(support)
    matrices = [n for n in parts if lib.parse(n).free != "none"]
    if scalar_res <= cfg.explain or not matrices:
        return names
    r = y - sum(parts.values())
    res = float(np.linalg.norm(r))
    kept = [n for n in matrices if res <= float(np.linalg.norm(r + parts[n])) * (1 - cfg.min_gain)]
    nested = {lib.parse(n).scalar_name for n in kept}
    return [n for n in names if n not in nested] + kept


class Contributions:
    """The contributions `lib.apply(term, coef, f)` of one stream's factors, each computed once:
    the bags, the pruning, the fit and the layer's one-step run read the same ones (read-only).
    Keyed by the term and the coefficient's exact value."""

    def __init__(
        self, g: Geometry, Z: np.ndarray, structures: dict[str, list] | None = None
    ) -> None:
        self._of = (g, Z, structures)  # the stream (b, T, E), its factors made on first need
        self._factors: lib.Factors | None = None
        self._kept: dict[tuple, np.ndarray] = {}

    @property
    def factors(self) -> lib.Factors:
        """`lib.Factors.of` the stream."""
        if self._factors is None:
            self._factors = lib.Factors.of(*self._of)
        return self._factors

    def __call__(self, term: lib.Term, coef: np.ndarray | float) -> np.ndarray:
        c = np.asarray(coef, dtype=np.float64)
        key = (term, c.shape, c.tobytes())
        if key not in self._kept:
            part = lib.apply(term, coef, self.factors)
            part.flags.writeable = False  # shared by every reader
            self._kept[key] = part
        return self._kept[key]


def _prune(
    support: list[lib.Term],
    coefs: list[np.ndarray],
    f: lib.Factors,
    y: np.ndarray,
    g,
    cfg,
    contribution: Contributions,
) -> tuple[list[lib.Term], list[np.ndarray]]:
    """Drop terms whose contribution is below `threshold` × ‖ΔX‖ and refit (STLSQ's last step
    on the final support)."""
    norm = float(np.linalg.norm(y))
    keep = [
        i
        for i, (t, c) in enumerate(zip(support, coefs, strict=True))
        if float(np.linalg.norm(contribution(t, c))) >= cfg.threshold * norm
    ]
    if len(keep) == len(support):
        return support, coefs
    support = [support[i] for i in keep]
    return support, refit(support, f, y, g)


def refit(
    support: list[lib.Term], f: lib.Factors, y: np.ndarray, g: Geometry, exact_limit: int = 64
) -> list[np.ndarray]:
    """Least squares of y on the support (listed scalars first, then matrix families in
    priority order; `_levels`) over all probe prompts: exact (orthogonal factorisation of the
    explicit design) when the support has at most `exact_limit` unknowns, else through the
    normal equations."""
    if not support:
        return []
    sizes = [t.size(g) for t in support]
    levels = _levels(support)
    if sum(sizes) <= exact_limit:
        design = np.concatenate([lib.design(t, f, g) for t in support], axis=1)
        counts = np.cumsum([0] + levels)
        cols = [sum(sizes[a:b]) for a, b in zip(counts[:-1], counts[1:], strict=False)]
        coefs = sparse.split(sparse.refit_qr(design, y, cols), sizes)
    else:
        coefs, _ = _problem(support, f, y, g).fit(range(len(support)), levels, exact=True)
    return [c.reshape(t.shape(g)) for c, t in zip(coefs, support, strict=True)]


def _target(Z: np.ndarray, X: str, g: Geometry) -> np.ndarray:
    return dict(zip(lib.TARGETS, g.blocks(Z), strict=True))[X]


def discover_layer(
    Z_in: np.ndarray,
    Z_out: np.ndarray,
    g: Geometry,
    cfg: TermsConfig,
    rng: np.random.Generator,
    structures: dict[str, list] | None = None,
    contribution: Contributions | None = None,
) -> tuple[list[Fitted], dict[str, dict]]:
    """The terms of one layer from its input and output streams (b, T, E), internal units:
    (fitted terms over all targets, per-target diagnostics). `structures`: the matrices of the
    regime terms the library holds for this layer (`families.term_structures`); `contribution`:
    where the terms' contributions on Z_in are kept (for `apply_layer` on Z_in)."""
    contribution = contribution or Contributions(g, Z_in, structures)
    f = contribution.factors
    b = f.prompts
    subsets = sparse.bags(b, cfg.bags, cfg.bag_fraction, rng) if cfg.bags else []
    bag_factors = [f.subset(idx) for idx in subsets]  # shared by the four targets (and caches)
    fitted: list[Fitted] = []
    info: dict[str, dict] = {}
    for X in lib.TARGETS:
        y = _target(Z_out, X, g) - _target(Z_in, X, g)
        yy = float(np.sum(y * y))
        terms = _candidates(X, g, b, cfg, tuple(f.structures))  # every bag's too
        chosen = select(X, f, y, g, cfg, b, terms)
        support = chosen.terms
        coefs = refit(support, f, y, g)
        if subsets:
            parts = {t.name: contribution(t, c) for t, c in zip(support, coefs, strict=True)}
            picks = [
                bag_terms(X, fb, y[idx], g, cfg, b, {n: p[idx] for n, p in parts.items()}, terms)
                for idx, fb in zip(subsets, bag_factors, strict=True)
            ]
            freq = sparse.inclusion_frequency(picks, sorted({n for p in picks for n in p}))
            order = [t.name for t in lib.library((X,), tuple(f.structures)) if t.free == "none"]
            order += [t.name for t in chosen.matrices]
            kept = [lib.parse(n) for n in order if freq.get(n, 0.0) >= cfg.stable]
            nested = {t.scalar_name for t in kept if t.free != "none"}
            kept = [t for t in kept if t.name not in nested]
            if [t.name for t in kept] != [t.name for t in support]:
                support, coefs = kept, refit(kept, f, y, g)
        else:
            freq = {t.name: 1.0 for t in support}
        support, coefs = _prune(support, coefs, f, y, g, cfg, contribution)
        fit = np.zeros_like(y)
        for t, c in zip(support, coefs, strict=True):
            part = contribution(t, c)
            fit += part
            share = float(np.sum(part * y)) / yy if yy > 0 else 0.0
            fitted.append(Fitted(t, c, freq.get(t.name, 0.0), share))
        res = float(np.sqrt(np.sum((y - fit) ** 2) / yy)) if yy > 0 else 0.0
        info[X] = {
            "update_norm": float(np.sqrt(yy / b)),
            "relative_residual": res,
            "scalar_residual": float(chosen.scalar_residual),
            "unstable": sorted(n for n, q in freq.items() if 0.0 < q < cfg.stable),
        }
    return fitted, info


def apply_layer(
    Z: np.ndarray,
    fitted: list[Fitted],
    g: Geometry,
    structures: dict[str, list] | None = None,
    contribution: Contributions | None = None,
) -> np.ndarray:
    """One layer of discovered terms on a stream Z (b, T, E): Z + Σ_terms contributions
    (`contribution`: those of Z, where they were kept)."""
    contribution = contribution or Contributions(g, Z, structures)
    out = Z.copy()
    d, n = g.d, g.n
    where = {
        "A": (slice(None, d), slice(None, n)),
        "B": (slice(d, None), slice(None, n)),
        "C": (slice(None, d), slice(n, None)),
        "D": (slice(d, None), slice(n, None)),
    }
    with np.errstate(over="ignore", invalid="ignore"):
        for t in fitted:
            rows, cols = where[t.term.target]
            out[:, rows, cols] += contribution(t.term, t.coef)
    return out


# --- JSON and tables ------------------------------------------------------------------------------


def _term_json(t: Fitted) -> dict:
    out = {
        "name": t.term.name,
        "target": t.term.target,
        "kind": t.term.kind,
        "free": None if t.term.free == "none" else t.term.free,
        "frequency": t.frequency,
        "share": t.share,
    }
    if t.term.free == "none":
        out["coefficient"] = float(t.coef)
        return out
    W = np.asarray(t.coef)
    out["coefficient"] = W.tolist()
    out["shape"] = list(W.shape)
    out["frobenius"] = float(np.linalg.norm(W))
    square = W.shape[0] == W.shape[1] and t.term.free != "both"
    out["nearest_scalar"] = float(np.trace(W) / W.shape[0]) if square else None
    if square:
        off = W - out["nearest_scalar"] * np.eye(W.shape[0])
        out["off_scalar"] = float(np.linalg.norm(off) / max(np.linalg.norm(W), 1e-300))
    if t.term.free == "both":
        out["singular_values"] = [float(s) for s in np.linalg.svd(W, compute_uv=False)[:8]]
    return out


def _row(layer: int, t: Fitted) -> dict:
    scalar = t.term.free == "none"
    W = np.asarray(t.coef)
    square = not scalar and W.shape[0] == W.shape[1] and t.term.free != "both"
    return {
        "layer": layer,
        "target": t.term.target,
        "term": t.term.name,
        "kind": t.term.kind,
        "coefficient": float(t.coef) if scalar else np.nan,
        "nearest_scalar": float(np.trace(W) / W.shape[0]) if square else np.nan,
        "frobenius": abs(float(t.coef)) if scalar else float(np.linalg.norm(W)),
        "frequency": t.frequency,
        "share": t.share,
    }


# --- the view -------------------------------------------------------------------------------------


# Cost of the discovery in layer passes of the products per probe prompt (`fit.base`): the
# normal equations of four targets on all prompts and on the bags, about 40 L / h. Paper-sized
# models use every probe prompt; large ones the first the views' budget affords (at least
# TERMS_FLOOR), reported as `probe_prompts`.
TERMS_PASSES_PER_LAYER = 40
TERMS_FLOOR = 16


def family_match(names: list[str], structures: tuple[str, ...], geo: Geometry) -> str | None:
    """The first family the regime admits (the paper's first) whose terms hold every one of
    `names` (a layer's stable terms), or None: the layer's terms are no family's."""
    for fam in families.for_geometry(geo):
        if set(names) <= set(fam.terms(structures)):
            return fam.name
    return None


def discover(
    ctx: Context, cfg: TermsConfig | None = None, structured: bool = True
) -> tuple[list[list[Fitted]], dict, list[dict]]:
    """Discover every layer's terms from the capture; returns (terms per layer, layer JSONs,
    the regime terms' matrices per layer). `structured`: the library holds the regime's own
    terms (`families.term_structures`; not for the sample layout's stream)."""
    cfg = cfg or TermsConfig()
    g = ctx.geometry
    passes = TERMS_PASSES_PER_LAYER * g.layers / g.heads
    cap = ctx.cap.first(affordable(g, passes, ctx.cap.Z.shape[1], floor=TERMS_FLOOR))
    rng = ctx.rng(0x7E4D5)
    per_layer, layers, structures = [], [], []
    for layer in range(cap.Z.shape[0] - 1):
        Z_in, Z_out = cap.Z[layer], cap.Z[layer + 1]
        mats = families.term_structures(g, layer) if structured else {}
        kept = Contributions(g, Z_in, mats)
        fitted, info = discover_layer(Z_in, Z_out, g, cfg, rng, mats, kept)
        step = apply_layer(Z_in, fitted, g, mats, kept)
        gap2 = (step - Z_out) ** 2
        dz = np.sum((Z_out - Z_in) ** 2)
        stable = [t.term.name for t in fitted if t.frequency >= cfg.stable]
        layers.append(
            {
                "layer": layer,
                "terms": [_term_json(t) for t in fitted],
                "one_step_fidelity": table1(gap2, cap),
                "relative_residual": float(np.sqrt(np.sum(gap2) / dz)) if dz > 0 else 0.0,
                "targets": info,
                "regime_terms": sorted(mats),
                "family": family_match(stable, tuple(mats), g) if structured else None,
            }
        )
        per_layer.append(fitted)
        structures.append(mats)
    fams = families.for_geometry(g) if structured else ()
    return (
        per_layer,
        {
            "layers": layers,
            "config": asdict(cfg),
            "probe_prompts": int(cap.Z.shape[1]),
            "family_terms": {f.name: list(f.terms()) for f in fams},
        },
        structures,
    )


def run_from_input(
    z0: np.ndarray,
    per_layer: list[list[Fitted]],
    g: Geometry,
    structures: list[dict] | None = None,
) -> np.ndarray:
    """Predictions (b, d', n') of the discovered terms applied layer by layer from prompts z0
    (b, T, E) in prompt units."""
    Z = g.internal(z0)
    for layer, fitted in enumerate(per_layer):
        Z = apply_layer(Z, fitted, g, structures[layer] if structures else None)
    return g.readout_of(Z, z0)


# --- the sample layout: the library on H = Zᵀ ---------------------------------------------------

H_TO_Z = {"A": "A", "B": "C", "C": "B", "D": "D"}  # block of H = [[Aᵀ, Bᵀ], [Cᵀ, Dᵀ]] -> of Z


def stream_context(ctx: Context) -> Context:
    """The sample layout's context in the stream's orientation H = Zᵀ, read as a feature-layout
    geometry (d ↔ n, d' ↔ n'; its visible rows are the n samples), with the scores' 1/n."""
    g, cap = ctx.geometry, ctx.cap
    gh = replace(g, d=g.n, n=g.d, d_prime=g.n_prime, n_prime=g.d_prime, layout="features")

    def t(x: np.ndarray) -> np.ndarray:
        return x.swapaxes(-1, -2)

    return replace(
        ctx,
        cap=replace(cap, Z=t(cap.Z), d=g.n, n=g.d),
        geometry=gh,
        held_out=HeldOut(z0=t(ctx.held_out.z0), D=t(ctx.held_out.D)),
        network_pred=t(ctx.network_pred),
    )


def sample_term(
    term: lib.Term, coef: np.ndarray | float, gh: Geometry
) -> tuple[str, str, np.ndarray]:
    """(name, target, coefficient) of a term of H (geometry `gh`) in the blocks of Z: the
    transpose X += W2ᵀ·R·Qᵀ·W1ᵀ·P of X_H += P_H·W1·Q_Hᵀ·R_H·W2 (module text)."""
    X, P, Q, R = (H_TO_Z[x] for x in (term.target, term.P, term.Q, term.R))
    W = np.asarray(coef, dtype=np.float64)
    if term.free == "none":
        return f"{X}+={R}{Q}t{P}", X, W
    if term.free == "W1":
        return f"{X}+={R}{Q}t*W*{P}", X, W.T
    if term.free == "W2":
        return f"{X}+=W*{R}{Q}t{P}", X, W.T
    # lifted K = Σ_h vec(W1) vec(W2)ᵀ -> Σ_h vec(W1ᵀ) vec(W2ᵀ)ᵀ
    k = {"a": gh.n, "c": gh.n_prime}
    kp, kq, kr, kx = (k[lib.KIND[x]] for x in (term.P, term.Q, term.R, term.target))
    if W.ndim == 2:
        W = W.reshape(kp, kq, kr, kx).transpose(1, 0, 3, 2).reshape(kq * kp, kx * kr)
    return f"{X}+=V*{R}{Q}t*U*{P}", X, W


def _to_sample_blocks(out: dict, per_layer: list[list[Fitted]], gh: Geometry) -> None:
    """Rename the terms and targets of `discover`'s JSON from H's blocks to Z's (in place);
    matrix coefficients are transposed (their trace, norms and singular values are unchanged)."""
    for lay, fitted in zip(out["layers"], per_layer, strict=True):
        for entry, t in zip(lay["terms"], fitted, strict=True):
            name, target, W = sample_term(t.term, t.coef, gh)
            entry["name"], entry["target"] = name, target
            if t.term.free != "none":
                entry["coefficient"] = W.tolist()
                entry["shape"] = list(W.shape)
        targets = {H_TO_Z[k]: v for k, v in lay["targets"].items()}
        lay["targets"] = {k: targets[k] for k in lib.TARGETS}
        for info in lay["targets"].values():
            info["unstable"] = [sample_term(lib.parse(n), 0.0, gh)[0] for n in info["unstable"]]


# --- what the view shows: its lines of the text report, its figure and the figure's caption ------
def report_lines(ex: Extraction) -> list[str]:
    t = ex.views["terms"].json
    lines = ["discovered terms (coefficient, inclusion frequency):"]
    for lay in t.get("layers", []):
        parts = []
        for term in lay.get("terms", []):
            coef = term.get("coefficient")
            text = (
                number(coef)
                if isinstance(coef, (int, float))
                else f"|W| {number(term.get('frobenius'))}"
            )
            parts.append(f"{term['name']} {text} ({term.get('frequency', 1.0):.2f})")
        fid = lay.get("one_step_fidelity")
        lines.append(f"  L{lay['layer']}: " + "; ".join(parts) + f"   [1-step fid {number(fid)}]")
    if "run_from_input_mse" in t:
        lines.append(f"  run from the input: MSE {number(t['run_from_input_mse'])}")
    return lines + [NAMES_KEY]


# the term names, explained once where they are printed (`fit.library` module text)
NAMES_KEY = (
    "  (names: X+=PQtR adds a multiple of P·Qᵀ·R to block X, e.g. A+=AAtA is A AᵀA, EAGLE's "
    "A-step; *W marks a free matrix coefficient where it sits: A+=A*W*AtA is A·W·AᵀA, "
    "A+=AAtA*W is A AᵀA·W, a matrix in place of the scalar step; |W| its Frobenius norm; "
    "@local: each machine's own Gram, @sketch: through the layer's sketch; a term the family "
    "does not have matters by its size next to the family's terms and by the 1-step fidelity)"
)


def figures(ex: Extraction) -> Figures:
    """Inclusion frequency of every discovered term per layer (terms view), coefficients printed."""
    layers = ex.views["terms"].json.get("layers", [])
    names = list(dict.fromkeys(t["name"] for lay in layers for t in lay.get("terms", [])))
    if not names:
        return {}
    L = len(layers)
    freq = np.full((len(names), L), np.nan)
    coef: dict[tuple[int, int], str] = {}
    for j, lay in enumerate(layers):
        for t in lay.get("terms", []):
            i = names.index(t["name"])
            freq[i, j] = float(t.get("frequency", 1.0))
            c = t.get("coefficient")
            if isinstance(c, (int, float)):
                coef[(i, j)] = f"{c:.3g}"
    # wide enough for the title and the longest term name, whatever the layers
    fig = draw.figure(max(6.5, 1.1 * L + 3), 0.34 * len(names) + 1.8)
    ax = fig.subplots()
    im = draw.fraction_map(ax, freq, "Greens", coef.items())
    ax.set_yticks(range(len(names)), names, fontsize=8, family="monospace")
    draw.layer_axis(ax, range(L))
    fig.colorbar(im, ax=ax, label="inclusion frequency (fraction of bags)")
    ax.set_title("Discovered terms: inclusion frequency, scalar coefficients printed", fontsize=10)
    return {"terms": fig}


def caption(ex: Extraction) -> str:
    """What the terms figure should show for this model: its families' own terms."""
    if ex.geometry.samples:
        return (
            "Dark cells are terms selected in almost every bag, written in the blocks of Z: GD is "
            "B+=BAtA and D+=BAtC, GD++ adds A+=AAtA and C+=AAtC, preconditioned GD has "
            "B+=BAt*W*A and D+=BAt*W*C."
        )
    fams = ex.views["terms"].json.get("family_terms") or {
        "eagle": ["A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC"]
    }
    listed = "; ".join(f"{name}: {', '.join(terms)}" for name, terms in fams.items())
    text = (
        "Dark cells are terms selected in almost every bag, the number the refitted "
        "coefficient (matrix coefficients print none). A layer running one of the regime's "
        f"families has that family's terms dark and nothing else ({listed})"
    )
    if any("@local" in t for terms in fams.values() for t in terms):
        text += "; @local sums over machines with each machine's own Gram A^μ A^μᵀ"
    if any("@sketch" in t for terms in fams.values() for t in terms):
        text += "; @sketch puts the layer's sketch projector P on the A blocks"
    return text + "." + _terms_here(ex)


def _terms_here(ex: Extraction) -> str:
    """What this model's terms figure shows: the family's terms with scalar or matrix
    coefficients, and the terms beyond it, by layer."""
    from eagle_probe.fit.verdict import term_kinds

    fam = families.of_geometry(ex.geometry)
    extra, matrix = term_kinds(ex.views["terms"].json, fam)

    def where(items: list) -> str:
        shown = [f"{name} (layer {', '.join(map(str, ls))})" for name, ls in items[:4]]
        return ", ".join(shown) + (f" and {len(items) - 4} more" if len(items) > 4 else "")

    parts = []
    if matrix:
        parts.append(f"{fam.name}'s terms are selected with matrix coefficients: {where(matrix)}")
    if extra:
        parts.append(f"terms {fam.name} does not have: {where(extra)}")
    if not parts:
        return f" Here {fam.name}'s terms and nothing else are selected."
    return " Here " + "; ".join(parts) + "."


@register("terms", text=report_lines, figures=figures, captions={"terms": caption})
def terms_view(ctx: Context, cfg: TermsConfig | None = None) -> ViewResult:
    """Sparse discovery of each layer's block-product terms (see the module docstring)."""
    cfg = cfg or TermsConfig()
    samples = ctx.geometry.samples
    if samples:
        ctx = stream_context(ctx)
    g = ctx.geometry
    try:
        lib.check_mask(g)
    except ValueError as exc:
        return ViewResult("terms", {"supported": False, "layers": []}, warnings=[f"terms: {exc}"])
    per_layer, out, structures = discover(ctx, cfg, structured=not samples)
    if samples:
        _to_sample_blocks(out, per_layer, g)
        out["orientation"] = "samples: terms of H = Zᵀ written in the blocks of Z"
    held, net_pred = ctx.scoring(3 * g.layers)  # a layer of terms costs about 3 of products
    pred = run_from_input(held.z0, per_layer, g, structures)
    mse = held.mse(pred)
    net = held.mse(net_pred)
    out["supported"] = True
    out["run_from_input_mse"] = mse
    out["network_mse"] = net
    out["zero_mse"] = float(np.mean(held.D**2))
    out["prompts"] = held.prompts
    out["run_from_input_ratio"] = mse / net if net > 0 else None

    warnings = []
    for layer in out["layers"]:
        if layer["relative_residual"] > cfg.residual_warning:
            worst = max(layer["targets"].items(), key=lambda kv: kv[1]["relative_residual"])
            warnings.append(
                f"terms: layer {layer['layer']}'s discovered terms leave "
                f"{percent(layer['relative_residual'], signed=False)} of its update unexplained "
                f"(most in {worst[0]}: {percent(worst[1]['relative_residual'], signed=False)})"
            )
        for X, info in layer["targets"].items():
            if info["unstable"]:
                warnings.append(
                    f"terms: layer {layer['layer']}, block {X}: unstable term(s) "
                    f"{', '.join(info['unstable'])} (chosen in some bags, below {cfg.stable:.0%})"
                )
    if not np.isfinite(mse):
        warnings.append("terms: the discovered terms, run from the input, blow up (non-finite)")
    elif net > 0 and abs(mse / net - 1.0) > 0.1:
        warnings.append(
            f"terms: the discovered terms, run from the input, give MSE {mse:.3g} against the "
            f"network's {net:.3g} ({percent(mse / net - 1.0, digits=0)})"
        )

    rows = [_row(layer, t) for layer, fitted in enumerate(per_layer) for t in fitted]
    if samples:
        for row, entry in zip(
            rows, [e for lay in out["layers"] for e in lay["terms"]], strict=True
        ):
            row["term"], row["target"] = entry["name"], entry["target"]
    table = pd.DataFrame(
        rows,
        columns=[
            "layer",
            "target",
            "term",
            "kind",
            "coefficient",
            "nearest_scalar",
            "frobenius",
            "frequency",
            "share",
        ],
    )
    summary = pd.DataFrame(
        [
            {
                "layer": layer["layer"],
                "terms": len(layer["terms"]),
                "one_step_fidelity": layer["one_step_fidelity"],
                "relative_residual": layer["relative_residual"],
            }
            for layer in out["layers"]
        ]
    )
    return ViewResult("terms", out, {"terms": table, "terms_layers": summary}, warnings)
