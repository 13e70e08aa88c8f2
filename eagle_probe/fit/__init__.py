"""Views of what a network computes, one module each, behind one contract (`fit.base`): each
module registers its view with its lines of the text report, its figures and their captions.

Importing the package registers every view; `ORDER` is the order `extract` runs them in (a view
may read the results of the views before it); `TEXT_ORDER` and `FIGURE_ORDER` the order a reader
sees their text and figures in (`shown`).
"""

from eagle_probe.fit import (  # noqa: F401  (importing a view module registers it)
    algorithm,
    algorithm1,
    attribution,
    causal,
    communication,
    eagle,
    fidelity,
    optimum,
    polynomial,
    projection,
    sketch,
    symbolic,
    terms,
    verdict,
    weights,
)
from eagle_probe.fit.base import VIEWS, Context, HeldOut, ViewResult, register  # noqa: F401
from eagle_probe.fit.geometry import Geometry  # noqa: F401
from eagle_probe.fit.polynomial import PolyFit, eagle_expansion, fit_polynomial  # noqa: F401

ORDER = (
    "eagle",
    "fidelity",
    "algorithm1",
    "projection",
    "weights",
    "communication",
    "sketch",
    "attribution",
    "causal",
    "optimum",
    "polynomial",
    "terms",
    "symbolic",
    "algorithm",
    "verdict",
)
missing = set(VIEWS) ^ set(ORDER)
if missing:
    raise ImportError(f"views registered and ORDER disagree: {sorted(missing)}")

# the order of the views' paragraphs in the text report and of their figures on the page (the
# cost of the projection before the optimum; the weights first), not the run order
TEXT_ORDER = ("projection", "optimum", "causal", "algorithm1", "terms", "weights")
FIGURE_ORDER = (
    "weights",
    "communication",
    "sketch",
    "polynomial",
    "fidelity",
    "causal",
    "attribution",
    "projection",
    "verdict",
    "terms",
)


def shown(part: str) -> list[str]:
    """The views with a `part` ("text" or "figures"), in the order a reader sees them: those of
    `TEXT_ORDER` (`FIGURE_ORDER`) first, any other after them in registration order."""
    first = TEXT_ORDER if part == "text" else FIGURE_ORDER
    have = [name for name, spec in VIEWS.items() if getattr(spec, part) is not None]
    return [v for v in first if v in have] + [v for v in have if v not in first]
