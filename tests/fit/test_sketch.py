"""View `sketch` on sketched plants: every head's W_QK A-block is exactly the layer's projector
S Sᵀ of rank r (`layouts.plant`, eagle-sketched), and W_VP's A-block a multiple of it."""

import re

import numpy as np
import pytest
from conftest import ROOT, RTOL
from probe_context import make_context

from eagle_probe import layouts
from eagle_probe.fit import VIEWS
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig

A_STEPS, C_STEPS = [0.01, 0.01], [0.03, 0.03]


def _view(rank: int, heads: int):
    cfg = ModelConfig(
        regime="constrained", rank=rank, n_heads=heads, n=6, d=6, n_layers=2, normalize="none",
        dtype="float64",
    )  # fmt: skip
    model = layouts.plant(cfg, A_STEPS, C_STEPS, sketch_seed=3)
    ctx = make_context(model, TaskConfig(n=6, d=6, rank=3), probes=8, held_out=8)
    return VIEWS["sketch"].run(ctx)


@pytest.mark.parametrize("rank", [3, 5])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_sketched_plant_is_a_scaled_projector_on_one_sketch(rank, heads):
    view = _view(rank, heads)
    for lay in view.json["layers"]:
        assert lay["span"] == rank  # the plant's heads share the layer's sketch
        for head in lay["heads"]:
            assert head["rank"] == rank
            assert head["alpha"] == pytest.approx(1.0, rel=RTOL)
            assert head["projector_gap"] <= RTOL
            assert head["vp_rescaled_difference"] <= RTOL
            assert head["vp_in_sketch_share"] == pytest.approx(1.0, abs=RTOL)
    assert not view.json["span_full"]
    assert f"span {rank} of 6 dimensions in every layer" in view.json["sentence"]
    spectra = view.tables["spectra"]
    assert len(spectra) == 2 * heads * 6
    # the plant's normalised spectrum is the random sketch's: r ones, then zeros
    np.testing.assert_allclose(spectra.network, spectra.random_sketch, atol=RTOL)


def test_a_full_rank_sketch_says_the_family_is_the_centralized_one():
    view = _view(6, 1).json
    assert view["span_full"]
    assert "the sketched family is then the centralized one" in view["sentence"]


def test_every_field_is_in_the_schema_doc():
    text = (ROOT / "docs" / "extraction-schema.md").read_text()
    documented = set(re.findall(r"`([A-Za-z_0-9-]+)`", text))
    view = _view(3, 2).json
    keys = set(view) | set(view["layers"][0]) | set(view["layers"][0]["heads"][0])
    assert "`views.sketch`" in text
    assert keys <= documented


def test_the_report_draws_the_spectra_only_where_the_view_ran():
    from eagle_probe.extract import extract
    from eagle_probe.plots import extraction_figures

    cfg = ModelConfig(
        regime="constrained", rank=3, n_heads=2, n=6, d=6, n_layers=2, dtype="float64"
    )
    model = layouts.plant(cfg, A_STEPS, C_STEPS)
    ex = extract(
        model, TaskConfig(n=6, d=6, rank=3), views=("sketch", "communication"), control=False,
        probe_batch_size=8, test_batch=32, tuning_batch=8,
    )  # fmt: skip
    assert "communication" not in ex.views  # a distributed model's view only
    assert "sketch" in extraction_figures(ex)
    ex.views.pop("sketch")
    assert "sketch" not in extraction_figures(ex)


def test_the_angles_between_layers_tell_one_shared_sketch_from_one_per_layer():
    """The plant draws its own sketch per layer: large principal angles, "not one shared
    subspace". The same sketch in both layers: angles 0, "one sketch shared by every layer"."""
    from eagle_probe.fit import sketch

    per_layer = _view(3, 1).json
    assert per_layer["shared"][0]["layers"] == [0, 1]
    assert per_layer["shared"][0]["largest_deg"] > 20
    assert "not one shared subspace" in per_layer["sentence"]
    S = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 3)))[0]
    P = np.zeros((2, 1, 8, 8))
    P[:, 0, :6, :6] = S @ S.T
    same = sketch.shared_subspace(P, 6)
    assert same[0]["largest_deg"] == pytest.approx(0.0, abs=1e-5)
    assert len(same[0]["angles_deg"]) == 3
    tilted = sketch.principal_angles(S, np.linalg.qr(S + 0.1 * np.eye(6, 3))[0])
    assert 0 < tilted.max() < 90


def test_in_its_sketch_basis_a_sketched_plant_is_a_scaled_identity_in_the_corner():
    view = _view(3, 2)
    basis = view.extra["sketch_basis"]  # (L, 2, n, n)
    assert basis.shape == (2, 2, 6, 6)
    for layer in range(2):
        for W in basis[layer]:
            scale = np.abs(W).max()
            corner = W[:3, :3]
            assert np.abs(W).sum() - np.abs(corner).sum() <= 1e-9 * scale * W.size
            level = np.diag(corner).mean()
            np.testing.assert_allclose(corner, level * np.eye(3), atol=1e-9 * scale)
