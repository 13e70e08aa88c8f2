"""The projection view (`fit/projection.py`) on the shared planted extraction: the products
projected onto EAGLE read the planted steps and cost nothing; its NumPy forward is the network's.
(A planted cross block is tested with the attribution in test_views.py.)"""

import numpy as np
import plants
import pytest
from conftest import RTOL

from eagle_probe.fit import projection


def test_projection_reads_the_planted_steps_and_costs_nothing(planted_extraction):
    ex, a, c = planted_extraction
    p = ex.views["projection"].json
    np.testing.assert_allclose([lay["a_step"] for lay in p["layers"]], a, rtol=RTOL)
    np.testing.assert_allclose([lay["c_step"] for lay in p["layers"]], c, rtol=RTOL)
    assert p["projected_mse"] == pytest.approx(p["network_mse"], rel=RTOL)
    # the NumPy forward of the products is the network's forward
    assert p["network_mse"] == pytest.approx(ex.network["mse"], rel=RTOL)
    # the median and the trimmed mean beside each mean: the network's, as the extraction's own
    # tails read them on the same held-out prompts, and the projection's equal to them
    assert p["prompts"] == ex.info["held_out_prompts"]
    assert p["network_median_mse"] == pytest.approx(ex.network["median_mse"], rel=RTOL)
    assert p["network_trimmed_mse"] == pytest.approx(ex.network["trimmed_mse"], rel=RTOL)
    for key in ("median_mse", "trimmed_mse"):
        assert p[f"projected_{key}"] == pytest.approx(p[f"network_{key}"], rel=RTOL)
    assert "median" in "\n".join(projection.report_lines(ex))


def test_projection_cost_shows_the_optimum_and_the_zero_predictor(report_planted):
    extraction = report_planted[2]
    fig = projection.figures(extraction)["projection_cost"]
    (ax,) = fig.axes
    bars = [t.get_text() for t in ax.get_yticklabels()]
    assert bars[0] == "network" and "all layers projected" in bars
    assert "best EAGLE, same depth (optimal)" in bars
    assert sum("projected alone" in b for b in bars) == len(plants.REPORT_STEPS[0])
    zero = extraction.network["zero_mse"]
    assert any(np.allclose(line.get_xdata(), zero) for line in ax.lines)
    assert ax.get_xscale() == "log"
