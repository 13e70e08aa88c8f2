"""The projection view (`fit/projection.py`) on the shared planted extraction: the products
projected onto EAGLE read the planted steps and cost nothing; its NumPy forward is the network's.
(A planted cross block is tested with the attribution in test_views.py.)"""

import numpy as np
import pytest


def test_projection_reads_the_planted_steps_and_costs_nothing(planted_extraction):
    ex, a, c = planted_extraction
    p = ex.views["projection"].json
    np.testing.assert_allclose([lay["a_step"] for lay in p["layers"]], a, rtol=1e-10)
    np.testing.assert_allclose([lay["c_step"] for lay in p["layers"]], c, rtol=1e-10)
    assert p["projected_mse"] == pytest.approx(p["network_mse"], rel=1e-9)
    # the NumPy forward of the products is the network's forward
    assert p["network_mse"] == pytest.approx(ex.network["mse"], rel=1e-9)
