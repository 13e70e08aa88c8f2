"""Views of what a network computes, one module each, behind one contract (`fit.base`).

Importing the package registers the views in run order: eagle, fidelity, projection, weights,
attribution, optimum, polynomial, terms (where present), symbolic, verdict.
"""

import importlib

from eagle_probe.fit import (  # noqa: F401  (registration order is run order)
    attribution,
    eagle,
    fidelity,
    optimum,
    polynomial,
    projection,
    weights,
)
from eagle_probe.fit._legacy import (  # noqa: F401
    PolyFit,
    Structure,
    eagle_expansion,
    eagle_view,
    fit_polynomial,
    polynomial_view,
)
from eagle_probe.fit._legacy import (
    fidelity as fidelity_per_layer,
)
from eagle_probe.fit.base import VIEWS, Context, HeldOut, ViewResult, register  # noqa: F401
from eagle_probe.fit.geometry import Geometry  # noqa: F401

try:
    importlib.import_module("eagle_probe.fit.terms")
except ModuleNotFoundError as exc:  # the terms view ships in its own module
    if exc.name != "eagle_probe.fit.terms":
        raise

from eagle_probe.fit import symbolic, verdict  # noqa: E402,F401
