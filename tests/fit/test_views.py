"""Several views of one extraction together, on planted models whose answer is known: a planted
cross block shows in the projection and the attribution; the fidelity, projection and attribution
score in prompt units at scales far from one. Each view alone is tested in its own file
(test_projection.py, test_fidelity.py, test_attribution.py, test_verdict.py, test_optimum.py)."""

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL, assert_close

from eagle_probe.extract import build_context, extract, run_views
from eagle_probe.fit.base import HeldOut
from eagle_probe.tasks import Prompt, make_generator, sample

A_STEPS, C_STEPS = plants.VIEW_STEPS


def test_a_planted_cross_block_shows_in_projection_and_attribution():
    model, task = plants.eagle(A_STEPS, C_STEPS, normalize="spectral")
    n, E = model.cfg.n, model.cfg.width
    # the block W_QK[:2, n:] (query A features × key C features) in layer 1 only
    plants.add_products(model, qk=plants.product_term(model, 1, 0, slice(0, 2), slice(n, E), 0.5))
    qk = model.W_QK().numpy()
    assert np.any(qk[1, 0, :n, n:]) and not np.any(qk[0, 0, :n, n:])
    ex = extract(model, task, probe_batch_size=64, test_batch=512, tuning_batch=256)
    p = ex.views["projection"].json
    assert p["layers"][1]["qk_outside"] > 0.01 and p["layers"][0]["qk_outside"] < 1e-12
    blocks = ex.views["attribution"].tables["attribution"]
    cross = blocks[(blocks["product"] == "W_QK") & (blocks.block == "AC")]
    assert list(cross.layer) == [1]


@pytest.mark.parametrize("normalize", ["spectral", "frobenius", "none"])
def test_views_in_prompt_units_at_scales_far_from_one(normalize):
    # The fidelity, projection and attribution views score in prompt units. A normalising model
    # sees the same internal prompts at every scale k, so each of their gaps and MSEs is k² times
    # the one at k = 1 (the steps, in internal units, do not move); on every path the view's own
    # NumPy forward of the network scores what the network's torch forward scores.
    a, c = A_STEPS, C_STEPS
    if normalize == "none":  # steps for ‖A‖₂² of about 16; s = 1 and no invariance to check
        a, c = [x / 16 for x in a], [x / 16 for x in c]
    model, task = plants.eagle(a, c, normalize=normalize)
    # a departure from EAGLE in layer 0
    plants.add_products(model, vp=plants.product_term(model, 0, 0, 1, 0, 0.3))
    probes = sample(task, 16, make_generator(5), dtype=torch.float64)
    held = sample(task, 16, make_generator(6), dtype=torch.float64)
    scales = (1.0, 1e-3, 1e3) if normalize != "none" else (1.0, 1e-3)
    out = {}
    for k in scales:
        z0, D = k * held.z0(), k * held.D
        ctx = build_context(
            model,
            task,
            probes=Prompt(probes.A * k, probes.B * k, probes.C * k, probes.D * k),
            held_out=HeldOut(z0=z0.numpy(), D=D.numpy()),
            tuning_batch=8,
        )
        run_views(ctx, ("eagle", "fidelity", "projection", "attribution"))
        proj = ctx.results["projection"].json
        with torch.no_grad():
            torch_mse = float(torch.mean((model(z0) - D) ** 2))
        assert proj["prompts"] == 16
        assert proj["network_mse"] == pytest.approx(torch_mse, rel=RTOL)
        fid = ctx.results["fidelity"].tables["fidelity"].sort_values(["reading", "layer"])
        attr = ctx.results["attribution"].tables["attribution"]
        out[k] = {
            "mse": np.array(
                [proj["network_mse"], proj["projected_mse"], *(la["mse"] for la in proj["layers"])]
            ),
            "fidelity": fid[["A", "B", "C", "D", "total"]].to_numpy(),
            "attribution": attr.mse.to_numpy(),
            "steps": np.array([[lay["a_step"], lay["c_step"]] for lay in proj["layers"]]),
        }
    assert out[1.0]["fidelity"][:, -1].max() > 1e-6, "layer 0 departs from EAGLE"
    assert out[1.0]["mse"][1] != pytest.approx(out[1.0]["mse"][0], rel=1e-3)
    for k in scales[1:] if normalize != "none" else ():
        for key in ("mse", "fidelity", "attribution"):
            want = k**2 * out[1.0][key]
            assert_close(out[k][key], want)
        np.testing.assert_allclose(out[k]["steps"], out[1.0]["steps"], rtol=RTOL)
