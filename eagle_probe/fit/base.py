"""One contract for every view of an extraction.

A view is a function `view(ctx: Context) -> ViewResult`: it reads the capture of the probe batch,
the products W_QK and W_VP, the regime's `Geometry`, the held-out prompts and the results of the
views that ran before it, and returns its tables (pandas, for people), its JSON (for
`extraction.json`) and its warnings. Registered beside it (`register`, one `ViewSpec` in `VIEWS`)
is what it shows a reader of an extraction: its lines of the text report, its figures and their
captions on the HTML page. `extract` runs the registered views in order; the text report, the
JSON and the figures loop over them, so a new view touches its module, `fit/__init__.py` (its
place in `ORDER`) and the schema doc.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from eagle_probe.captured import Capture
from eagle_probe.fit.geometry import Geometry

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# A view that scores on held-out prompts (NumPy forwards of products) spends at most about this
# many floating-point operations: every prompt of the paper's sizes, fewer as n, heads and layers
# grow (`Context.scoring`), never fewer than SCORING_FLOOR. Held-out and tuning prompts are drawn
# within DRAW_FLOPS for one forward of the network on them (`extract.scoring_prompts`). Every
# shipped model scores projection, weights and terms on all 4096 held-out prompts; attribution,
# the costliest (layers² × heads × blocks passes), on all 512 of its prompts for the one- and
# three-head models and on 115 for the eight-head ones.
VIEW_FLOPS = 4e10
DRAW_FLOPS = 2e10
SCORING_FLOOR = 4


def layer_flops(geometry: Geometry) -> float:
    """Flops of one layer of products on one prompt: scores and values, 4 h T E (T + E)."""
    T, E = geometry.tokens, geometry.width
    return 4.0 * geometry.heads * T * E * (T + E)


def affordable(
    geometry: Geometry,
    passes: float,
    available: int,
    *,
    limit: int | None = None,
    floor: int = SCORING_FLOOR,
    flops: float | None = None,
) -> int:
    """Prompts a computation of `passes` layer passes per prompt can afford within `flops`
    (default VIEW_FLOPS)."""
    flops = VIEW_FLOPS if flops is None else flops
    k = int(flops // max(passes * layer_flops(geometry), 1.0))
    k = max(k, floor)
    if limit is not None:
        k = min(k, limit)
    return max(1, min(k, available))


@dataclass(frozen=True)
class HeldOut:
    """Held-out prompts in prompt units (float64): never used to fit, only to score."""

    z0: np.ndarray  # (b, T, E)  visible prompts [[A, C], [B, 0]]
    D: np.ndarray  # (b, d', n')  the true D

    @property
    def prompts(self) -> int:
        return int(self.z0.shape[0])

    def first(self, k: int) -> HeldOut:
        """The first k prompts (all of them when k is larger)."""
        return self if k >= self.prompts else HeldOut(z0=self.z0[:k], D=self.D[:k])

    def mse(self, pred: np.ndarray) -> float:
        """Mean squared error of predictions (b, d', n') against the true D."""
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.mean((pred - self.D) ** 2))


@dataclass(frozen=True)
class Context:
    """What a view reads."""

    cap: Capture  # the probe batch through the network, internal units, float64
    qk: np.ndarray  # (L, h, E, E)  W_QK per layer and head, float64
    vp: np.ndarray  # (L, h, E, E)  W_VP per layer and head, float64
    geometry: Geometry  # the regime's shape
    held_out: HeldOut  # prompts the views score on
    tuning: HeldOut  # other fresh prompts, for views that tune parameters (optimum)
    network_pred: np.ndarray  # (b, d', n')  the network's predictions on `held_out`
    # the untrained control's view results (`extract.Control`: `.results`), for the verdict
    control: Any = None
    # fresh prompts that only check fitted steps for blow-ups (optimum), never fit or score
    validation: HeldOut | None = None
    results: dict[str, ViewResult] = field(default_factory=dict)  # views that ran before
    seed: int = 0  # seed for any randomness a view needs (bagging, ablations)
    task: Any = None  # the TaskConfig the prompts are drawn from (theory values), when known
    # every family's scores as the family choice computed them (`fit.eagle.choose_family`), for
    # view `eagle` to report instead of scoring the families again; None: not computed
    family_scores: list | None = None
    # the tail of the network's per-prompt errors on `held_out` (`evaluate.tails` against each
    # prompt's mean of D², computed by `extract.build_context`); None: the network was not scored
    network_tails: dict[str, Any] | None = None
    # the network run with its stream entering a layer replaced by a given state (an interchange
    # intervention through TransformerLens hooks: `capture.patched_predict`, with the model bound):
    # patched(z0, layer, state, where) -> predictions (b, d', n'); None: the views' NumPy forward
    patched: Callable[..., np.ndarray] | None = None
    # True for the untrained control's context (`extract.run_control`): a view may compute only
    # what is read of the control (the verdict's gaps, the interchange test's least whole-state
    # share)
    is_control: bool = False

    @property
    def network_mse(self) -> float:
        return self.held_out.mse(self.network_pred)

    @property
    def working_mse(self) -> float:
        """The held-out MSE the verdict holds against the zero predictor's (rule
        `no_better_than_zero`): the network's mean without its worst 0.1% of prompts
        (`network_tails`), which one prompt whose error explodes cannot move; the mean where no
        tail was computed."""
        if self.network_tails is None:
            return self.network_mse
        return float(self.network_tails["trimmed_mse"])

    @property
    def zero_mse(self) -> float:
        return float(np.mean(self.held_out.D**2))

    def scoring(
        self, passes: float, *, limit: int | None = None, floor: int = SCORING_FLOOR
    ) -> tuple[HeldOut, np.ndarray]:
        """The held-out prompts a view that runs `passes` layers per prompt can afford within
        `VIEW_FLOPS` (at least `floor`, at most `limit` and what there is), with the network's
        predictions on them. Paper-sized models get every prompt; views report the count."""
        k = affordable(self.geometry, passes, self.held_out.prompts, limit=limit, floor=floor)
        return self.held_out.first(k), self.network_pred[:k]

    def rng(self, salt: int) -> np.random.Generator:
        """A generator for one view, independent of the others'."""
        return np.random.default_rng([self.seed, salt])


@dataclass
class ViewResult:
    """What a view returns."""

    name: str
    json: dict[str, Any]  # goes under views[name] in extraction.json (data only)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # for people and notebooks
    warnings: list[str] = field(default_factory=list)  # one line each, printed and in JSON
    extra: dict[str, Any] = field(default_factory=dict)  # arrays for later views and figures


View = Callable[[Context], ViewResult]
# what `eagle_probe.extract.extract` returns (an `Extraction`): a view's text, figures and captions
# read its `views`, `geometry`, `network` and `info`; never imported here (extract imports fit)
Extraction = Any
Figures = dict[str, "Figure"]  # figure name -> matplotlib Figure


@dataclass(frozen=True)
class ViewSpec:
    """A registered view: what it computes and what it shows a reader of an extraction (figures
    drawn with `eagle_probe.drawing`, which loads matplotlib at the first one, not on import)."""

    run: View
    text: Callable[[Extraction], list[str]] | None = None  # its lines of the text report
    figures: Callable[[Extraction], Figures] | None = None  # its figures
    # figure name (or the start of its names) -> its caption on the HTML page: caption(ex) or
    # caption(ex, name), the figure's own name
    captions: dict[str, Callable[..., str]] = field(default_factory=dict)


VIEWS: dict[str, ViewSpec] = {}  # name -> view, in the order extract runs them


def register(
    name: str,
    *,
    text: Callable[[Extraction], list[str]] | None = None,
    figures: Callable[[Extraction], Figures] | None = None,
    captions: dict[str, Callable[..., str]] | None = None,
) -> Callable[[View], View]:
    """Decorator: add a view to `VIEWS` under `name` (registration order is run order), with its
    lines of the text report, its figures and their captions (`ViewSpec`)."""

    def wrap(fn: View) -> View:
        if name in VIEWS:
            raise ValueError(f"view {name!r} is registered twice")
        VIEWS[name] = ViewSpec(fn, text, figures, captions or {})
        return fn

    return wrap


def prompt_tails(pred: np.ndarray, D: np.ndarray) -> dict[str, Any]:
    """`evaluate.tails` of the per-prompt MSE of predictions (b, d', n') against D (a non-finite
    error counts as +inf): the mean beside the median and the 0.1%-trimmed mean, which one prompt
    cannot move. evaluate loads torch, so it is imported when a view runs, not with this module."""
    from eagle_probe.evaluate import tails

    with np.errstate(over="ignore", invalid="ignore"):
        errors = np.mean((pred - D) ** 2, axis=(-2, -1))
    return tails(np.where(np.isfinite(errors), errors, np.inf))


def prompt_units(cap: Capture) -> np.ndarray:
    """The factor that turns a squared gap of the stream (b, T, E) in internal units into prompt
    units: s² per prompt (b, 1, 1), or per column (b, 1, E) where each machine has its own
    scale (`Capture.units`)."""
    if cap.units is not None:
        return cap.units**2
    return (cap.scale**2)[:, None, None]


def table1(gap2: np.ndarray, cap: Capture) -> float:
    """The paper's Table-1 metric ‖·‖²_F / #entries in prompt units, of squared gaps of the
    stream (b, T, E) in internal units."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean(gap2 * prompt_units(cap)))


def table1_blocks(gap2: np.ndarray, cap: Capture, geometry: Geometry) -> dict[str, float]:
    """`table1` of squared stream gaps (b, T, E) per block (A, B, C, D) and in total."""
    units = prompt_units(cap)  # (b, 1, 1) or (b, 1, E)
    if units.shape[-1] == 1:
        unit_blocks = (units,) * 4
    else:  # the columns of each block: A/B the first n, C/D the rest
        n = geometry.split[0]
        unit_blocks = (units[..., :n], units[..., :n], units[..., n:], units[..., n:])
    out = {}
    with np.errstate(over="ignore", invalid="ignore"):
        for k, g, u in zip("ABCD", geometry.blocks(gap2), unit_blocks, strict=True):
            out[k] = float(np.mean(g * u))
        out["total"] = float(np.mean(gap2 * units))
    return out
