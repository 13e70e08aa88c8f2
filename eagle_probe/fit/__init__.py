"""Views of what a network computes, one module each, behind one contract (`fit.base`).

Importing the package registers every view; `ORDER` is the order `extract` runs them in (a view
may read the results of the views before it).
"""

from eagle_probe.fit import (  # noqa: F401  (importing a view module registers it)
    algorithm,
    attribution,
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
    "projection",
    "weights",
    "communication",
    "sketch",
    "attribution",
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
