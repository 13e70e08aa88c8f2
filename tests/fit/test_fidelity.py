"""The fidelity view (`fit/fidelity.py`): zero on a planted model, one step and end to end, and in
prompt units (× k² for prompts × k on a normalising model)."""

import plants
import pytest
import torch
from conftest import RTOL

from eagle_probe.extract import build_context, run_views
from eagle_probe.fit import fidelity
from eagle_probe.tasks import Prompt, make_generator, sample


def test_fidelity_is_zero_one_step_and_end_to_end(planted_extraction):
    ex, _, _ = planted_extraction
    for lay in ex.views["fidelity"].json["layers"]:
        for reading in ("one_step", "end_to_end"):
            # mean squared gaps (entries of order one) and their ratio: squares, floor RTOL²
            assert lay[reading]["total"] < RTOL**2
            assert lay[reading]["relative"] < RTOL**2


@pytest.mark.parametrize("normalize", ["spectral", "frobenius"])
def test_fidelity_in_prompt_units_scales_with_the_square_of_the_prompt(normalize):
    model, task = plants.eagle(*plants.VIEW_STEPS, normalize=normalize)
    # a departure from EAGLE in layer 0
    plants.add_products(model, vp=plants.product_term(model, 0, 0, 1, 0, 0.3))
    probes = sample(task, 32, make_generator(5), dtype=torch.float64)
    out = []
    for k in (1.0, 10.0):
        scaled = Prompt(probes.A * k, probes.B * k, probes.C * k, probes.D * k)
        ctx = build_context(model, task, probes=scaled, test_batch=16, tuning_batch=16)
        run_views(ctx, ("eagle", "fidelity"))
        out.append(ctx.results["fidelity"].json["layers"][0]["one_step"])
    assert out[0]["total"] > 1e-8
    assert out[1]["total"] == pytest.approx(100 * out[0]["total"], rel=RTOL)
    assert out[1]["relative"] == pytest.approx(out[0]["relative"], rel=RTOL)


def test_fidelity_figure_shows_the_paper_only_where_it_has_numbers(report_planted):
    extraction = report_planted[2]
    fig = fidelity.figures(extraction)["fidelity"]
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "block A" in labels and "all blocks" in labels
    # the paper's Table 1 has 4 centralized layers, so it is drawn for this 2-layer model
    assert any("paper" in label for label in labels)
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
