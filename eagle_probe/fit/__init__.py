"""Views of what a network computes, one module each, behind one contract (`fit.base`)."""

from eagle_probe.fit._legacy import *  # noqa: F401,F403
from eagle_probe.fit._legacy import (  # noqa: F401
    PolyFit,
    Structure,
    eagle_expansion,
    eagle_view,
    fidelity,
    fit_polynomial,
    polynomial_view,
)
