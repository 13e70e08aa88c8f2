"""The attribution view (`fit/attribution.py`): ablating W_VP's C block of layer l of a planted
model is EAGLE with c_l = 0, run by the optimum's independent recursion. (A planted cross block
is tested with the projection in test_views.py.)"""

import plants
import pytest

from eagle_probe.extract import build_context
from eagle_probe.fit import optimum


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
        assert row.mse.sum() / len(row) == pytest.approx(expected, rel=1e-9) or len(row) > 1
