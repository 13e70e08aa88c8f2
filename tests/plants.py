"""Planted models: networks whose weights run a known algorithm exactly, so that every number an
extraction reports has a known answer. The tests and the benchmarks build their plants here, on the
package's own builders: `layouts.plant` for the families of the feature layout, the
`layouts.*_products` of the sample layout with `layouts.model_from_products`, and departures from
a plant written as terms added to its products (W_QK, W_VP), never as edits of one factor."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eagle_probe import layouts
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig

# The shipped models all normalise their prompts; a planted model on the `none` path has prompt
# scale 1 and cannot show a bug in the scale, so the extraction, fidelity and export tests run on
# all three paths.
NORMALIZE_PATHS = ("none", "spectral", "frobenius")

# Steps per path (a_l, c_l per layer), sized so that η = a‖A_l‖² stays below 1 on the probes:
# without normalisation ‖A‖₂² is about 14 (median) on the small paper task of `eagle`; the
# normalised prompts have ‖A‖₂ = 1 (spectral) or ≤ 1 (Frobenius).
PLANTED_STEPS = {
    "none": ([0.05, 0.04, 0.03], [0.09, 0.08, 0.07]),
    "spectral": ([0.4, 0.3, 0.2], [0.9, 0.7, 0.5]),
    "frobenius": ([0.5, 0.4, 0.3], [1.0, 0.8, 0.6]),
}

# Steps of the views' shared planted extraction (`conftest.planted_extraction`), normalised paths.
VIEW_STEPS = ([0.9, 0.6, 0.4], [1.1, 0.8, 0.5])

# Steps of the report's planted two-layer model (`conftest.report_planted`): EAGLE's form, but too
# large for prompts that are not normalised, so the model is far worse than the zero predictor.
REPORT_STEPS = ([0.3, 0.2], [0.4, 0.3])

# The fit views' small prompts (n, d, n', d'): d' = 3 ≠ n' = 2, so a transposed block cannot fit.
SMALL = {"n": 6, "d": 5, "n_prime": 2, "d_prime": 3}


def eagle(
    a_steps: Sequence[float],
    c_steps: Sequence[float],
    *,
    normalize: str = "none",
    heads: int = 1,
    dtype: str = "float64",
    n: int = 8,
    d: int = 6,
    n_prime: int = 2,
    d_prime: int = 2,
    rank: int = 4,
    **cfg,
) -> tuple[LinearTransformer, TaskConfig]:
    """(model, task): a model (centralized unless `cfg` names another regime) whose layer l runs
    one step (a_l, c_l) of its regime's EAGLE family on the prompt divided by its `normalize` norm
    of A (`layouts.plant`), and the paper task of the same sizes. `cfg` goes to ModelConfig;
    `family` and `sketch_seed` go to `layouts.plant`."""
    plant_kw = {k: cfg.pop(k) for k in ("family", "sketch_seed", "cross_a") if k in cfg}
    model_cfg = ModelConfig(
        n=n,
        d=d,
        n_prime=n_prime,
        d_prime=d_prime,
        n_layers=len(a_steps),
        n_heads=heads,
        dtype=dtype,
        normalize=normalize,
        **cfg,
    )
    model = layouts.plant(model_cfg, list(a_steps), list(c_steps), **plant_kw)
    task = TaskConfig(n=n, d=d, n_prime=n_prime, d_prime=d_prime, rank=min(rank, n, d))
    return model, task


def add_products(
    model: LinearTransformer, *, qk: np.ndarray | None = None, vp: np.ndarray | None = None
) -> LinearTransformer:
    """`model` with qk and vp (L, h, E, E, block orientation, `layouts.state_products`) added to
    its products W_QK and W_VP, in place, by the package's loader (`layouts.products_to_state`:
    W_Q = W_QK, W_V = W_VP exactly, so a zero block stays exactly zero); returns the model."""
    QK, VP = layouts.state_products(model)
    if qk is not None:
        QK = QK + qk
    if vp is not None:
        VP = VP + vp
    model.load_state_dict(layouts.products_to_state(model.cfg, QK, VP))
    return model.eval()


def product_term(
    model: LinearTransformer, layer: int, head: int | slice, rows, cols, value
) -> np.ndarray:
    """A zero (L, h, E, E) array but for `value` at [layer, head, rows, cols]: one term for
    `add_products`."""
    cfg = model.cfg
    term = np.zeros((cfg.n_layers, cfg.heads, cfg.width, cfg.width))
    term[layer, head, rows, cols] = value
    return term


def cross_block(
    model: LinearTransformer, layer: int, seed: int = 1, scale: float = 0.3
) -> np.ndarray:
    """Add to one layer of a planted model a W_QK block between the query's A/B features and the
    key's C features (W_QK[:n, n:] = M in every head), in place; returns M (n, n')."""
    cfg = model.cfg
    M = scale * np.random.default_rng(seed).standard_normal((cfg.n, cfg.n_prime))
    everywhere, a_rows, c_cols = slice(None), slice(0, cfg.n), slice(cfg.n, None)
    add_products(model, qk=product_term(model, layer, everywhere, a_rows, c_cols, M))
    return M


def samples(
    qk: np.ndarray,
    vp: np.ndarray,
    *,
    n: int,
    d: int,
    n_prime: int = 1,
    normalize: str = "none",
    dtype: str = "float64",
) -> LinearTransformer:
    """A sample-layout model running the products qk, vp (L, h, E, E) of `layouts.gd_products`,
    `gdpp_products` or `preconditioned_products` (d' = E − d)."""
    L, h, E = qk.shape[:3]
    return layouts.model_from_products(
        layouts.sample_config(
            n=n,
            d=d,
            layers=L,
            heads=h,
            n_prime=n_prime,
            d_prime=E - d,
            normalize=normalize,
            dtype=dtype,
        ),
        qk,
        vp,
    )
