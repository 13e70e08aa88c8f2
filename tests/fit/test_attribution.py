"""The attribution view (`fit/attribution.py`): ablating W_VP's C block of layer l of a planted
model is EAGLE with c_l = 0, run by the optimum's independent recursion. (A planted cross block
is tested with the projection in test_views.py.)"""

from dataclasses import replace

import pandas as pd
import plants
import pytest
from conftest import RTOL

from eagle_probe.extract import build_context
from eagle_probe.fit import attribution, optimum
from eagle_probe.fit.base import ViewResult


def test_attribution_equals_eagle_without_the_ablated_step(planted_extraction):
    ex, a, c = planted_extraction
    t = ex.views["attribution"].tables["attribution"]
    # planted EAGLE has W_QK = diag(I, 0): no C block of W_QK exists to ablate
    assert set(t[t["product"] == "W_QK"].block) == {"AA"}
    # zeroing W_VP's C block of layer l is EAGLE with c_l = 0, run by the independent recursion
    model, task = plants.eagle(a, c, normalize=ex.info["normalize"])
    ctx = build_context(model, task, probe_batch_size=8, test_batch=512, tuning_batch=8)
    for layer in range(len(a)):
        cut = list(c)
        cut[layer] = 0.0
        expected = optimum.eagle_mse(ctx.geometry, ctx.held_out, a, cut)
        row = t[(t.layer == layer) & (t["product"] == "W_VP") & (t.block == "CC")]
        assert row.mse.sum() / len(row) == pytest.approx(expected, rel=RTOL) or len(row) > 1


def test_attribution_bars_run_from_one_to_the_ratio_and_cut_blow_ups(report_planted):
    extraction = report_planted[2]
    rows = [
        (0, 0, "W_QK", "AA", 3.0),
        (0, 1, "W_VP", "CC", 0.5),
        (1, 0, "W_QK", "AC", 1e9),
        (1, 1, "W_VP", "AA", float("inf")),
    ]
    table = pd.DataFrame(rows, columns=["layer", "head", "product", "block", "ratio"])
    table["mse"] = table.ratio
    view = ViewResult("attribution", {}, {"attribution": table})
    ex = replace(
        extraction,
        views={**extraction.views, "attribution": view},
        geometry=replace(extraction.geometry, heads=2),
    )
    fig = attribution.figures(ex)["attribution"]
    titled = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert set(titled) == {f"{p}, layer {lay}" for p in ("W_QK", "W_VP") for lay in (0, 1)}

    def ends(ax):
        return sorted((bar.get_y(), bar.get_y() + bar.get_height()) for bar in ax.patches)

    cap = attribution.ATTRIBUTION_CAP
    assert ends(titled["W_QK, layer 0"]) == [(1.0, pytest.approx(3.0))]
    assert ends(titled["W_VP, layer 0"]) == [(1.0, pytest.approx(0.5))]  # zeroing it helps
    assert ends(titled["W_QK, layer 1"]) == [(1.0, pytest.approx(cap))]
    assert ends(titled["W_VP, layer 1"]) == [(1.0, pytest.approx(cap))]
    notes = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"1×10⁹", "not finite"} <= notes  # a power of ten written out, not 1e+09
    assert "cut at" in fig.get_suptitle()
