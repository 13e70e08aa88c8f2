"""The `terms` view (`fit/terms.py`) on planted models and on the shipped models (the term library
is tested in test_library.py, the sparse optimizers in test_sparse.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL
from probe_context import TRAINED, make_context

from eagle_probe import checkpoint
from eagle_probe.fit import library as lib
from eagle_probe.fit.base import ViewResult
from eagle_probe.fit.terms import TermsConfig, figures, terms_view

EAGLE = ("A+=AAtA", "B+=BAtA", "C+=AAtC", "D+=BAtC")


# --- the view on planted models -------------------------------------------------------------------


def assert_eagle(result, a, c, rtol):
    layers = result.json["layers"]
    assert len(layers) == len(a)
    for layer, al, cl in zip(layers, a, c, strict=True):
        names = [t["name"] for t in layer["terms"]]
        assert names == list(EAGLE), f"layer {layer['layer']}: {names}"
        for term, want in zip(layer["terms"], (-al, -al, -cl, -cl), strict=True):
            assert term["kind"] == "scalar"
            assert term["coefficient"] == pytest.approx(want, rel=rtol)
            assert term["frequency"] == 1.0
            assert term["share"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "dtype, heads, normalize, rtol",
    [
        ("float32", 1, "spectral", 1e-6),
        ("float32", 3, "none", 1e-6),
        ("float32", 8, "spectral", 1e-6),
        ("float64", 1, "none", RTOL),
        ("float64", 5, "spectral", RTOL),
    ],
)
def test_planted_eagle_gives_exactly_the_four_terms(dtype, heads, normalize, rtol):
    if normalize == "spectral":
        a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    else:  # raw prompts: steps of the size of 1/‖A‖²
        a, c = [0.011, 0.017, 0.007], [0.021, 0.013, 0.029]
    model, task = plants.eagle(a, c, heads=heads, dtype=dtype, normalize=normalize, **plants.SMALL)
    ctx = make_context(model, task, probes=128, held_out=256)
    result = terms_view(ctx)
    assert_eagle(result, a, c, rtol)
    assert result.warnings == []
    for layer in result.json["layers"]:
        assert layer["one_step_fidelity"] < 1e-12
        assert layer["relative_residual"] < 1e-5
    assert result.json["run_from_input_mse"] == pytest.approx(ctx.network_mse, rel=1e-4)
    table = result.tables["terms"]
    assert list(table["term"]) == list(EAGLE) * len(a)
    json.dumps(result.json, allow_nan=False)  # plain data only


REGIME_CASES = [
    ("distributed", {"machines": 2}, "eagle-distributed"),
    ("distributed", {"machines": 3}, "eagle-distributed"),
    ("distributed", {"machines": 6}, "eagle-distributed"),
    ("constrained", {"rank": 3, "n_heads": 1}, "eagle-sketched"),
    ("constrained", {"rank": 3, "n_heads": 2}, "eagle-sketched"),
    ("constrained", {"rank": 5, "n_heads": 4}, "eagle-sketched"),
]
FAMILY_TERMS = {
    "eagle-distributed": ("A+=AAtA@local", "B+=BAtA@local", "C+=AAtC", "D+=BAtC"),
    "eagle-sketched": ("A+=AAtA@sketch", "B+=BAtA@sketch", "C+=AAtC@sketch", "D+=BAtC@sketch"),
    "eagle-over-machines": EAGLE,
}


@pytest.mark.parametrize(
    ("regime", "kw", "family", "dtype"),
    [(*case, "float64") for case in REGIME_CASES]
    + [("distributed", {"machines": 3}, "eagle-distributed", "float32")]
    + [("constrained", {"rank": 5, "n_heads": 2}, "eagle-sketched", "float32")],
    ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()) if isinstance(v, dict) else str(v),
)
def test_planted_regime_eagle_gives_exactly_its_familys_terms(regime, kw, family, dtype):
    from eagle_probe.layouts import plant
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig

    a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    cfg = ModelConfig(regime=regime, n=6, d=5, n_layers=3, normalize="spectral", dtype=dtype, **kw)
    model = plant(cfg, a, c, sketch_seed=5)
    ctx = make_context(model, TaskConfig(n=6, d=5, rank=4), probes=64, held_out=256)
    result = terms_view(ctx)
    rtol = RTOL if dtype == "float64" else 1e-5
    for layer, (a_l, c_l) in enumerate(zip(a, c, strict=True)):
        lay = result.json["layers"][layer]
        stable = {t["name"]: t for t in lay["terms"] if t["frequency"] >= 0.5}
        assert tuple(stable) == FAMILY_TERMS[family], (layer, list(stable))
        coef = [stable[name]["coefficient"] for name in FAMILY_TERMS[family]]
        np.testing.assert_allclose(coef, [-a_l, -a_l, -c_l, -c_l], rtol=rtol)
        assert lay["family"] == family
        assert lay["relative_residual"] < (RTOL if dtype == "float64" else 1e-5)
    assert result.json["family_terms"][family] == list(FAMILY_TERMS[family])
    assert result.json["run_from_input_mse"] == pytest.approx(ctx.network_mse, rel=1e-4)
    assert result.warnings == []


def test_a_distributed_network_that_sends_a_columns_is_read_as_the_centralized_update():
    """Planted eagle-over-machines (each head reads its machine's A columns and writes every
    machine's): the plain EAGLE terms, which the paper's distributed family does not have."""
    from eagle_probe.layouts import plant
    from eagle_probe.model import ModelConfig
    from eagle_probe.tasks import TaskConfig

    a, c = [0.31, 0.52], [0.71, 1.13]
    cfg = ModelConfig(
        regime="distributed-open",
        machines=2,
        n=6,
        d=5,
        n_layers=2,
        normalize="spectral",
        dtype="float64",
        vp_width=8,
    )
    model = plant(cfg, a, c, family="eagle-over-machines")
    ctx = make_context(model, TaskConfig(n=6, d=5, rank=4), probes=64, held_out=256)
    result = terms_view(ctx)
    for lay in result.json["layers"]:
        assert tuple(t["name"] for t in lay["terms"] if t["frequency"] >= 0.5) == EAGLE
        assert lay["family"] == "eagle-over-machines"


def test_planted_eagle_at_the_shipped_sizes():
    a, c = [1.3, 8.1, 1.8, 0.2], [1.3, 10.3, 65.4, 168.8]
    model, task = plants.eagle(a, c, heads=2, normalize="spectral", dtype="float32", n=18, d=18)
    model.load_state_dict(model.state_dict())
    ctx = make_context(model, task, probes=128, held_out=256)
    assert_eagle(terms_view(ctx), a, c, 1e-6)


def test_planted_cross_term_is_named_in_its_layer_only():
    a, c = [0.31, 0.52, 0.23], [0.71, 1.13, 0.97]
    model, task = plants.eagle(a, c, heads=2, normalize="spectral", **plants.SMALL)
    M = plants.cross_block(model, layer=1)
    result = terms_view(make_context(model, task, probes=128, held_out=256))
    cross = {"A+=A*W*CtA", "B+=B*W*CtA", "C+=A*W*CtC", "D+=B*W*CtC"}
    for layer in result.json["layers"]:
        names = {t["name"] for t in layer["terms"]}
        keyed_on_c = {n for n in names if lib.parse(n).Q == "C"}
        if layer["layer"] == 1:
            assert keyed_on_c == cross
            assert set(EAGLE) <= names
            for term in layer["terms"]:
                assert term["frequency"] == 1.0
                if term["name"] in ("A+=A*W*CtA", "B+=B*W*CtA"):
                    np.testing.assert_allclose(term["coefficient"], -a[1] * M, rtol=RTOL)
                if term["name"] in ("C+=A*W*CtC", "D+=B*W*CtC"):
                    np.testing.assert_allclose(term["coefficient"], -c[1] * M, rtol=RTOL)
                    assert term["nearest_scalar"] is None
            assert layer["one_step_fidelity"] < RTOL**2  # a mean squared gap
        else:
            assert names == set(EAGLE)


def test_unsupported_token_mask_is_reported_not_guessed():
    model, task = plants.eagle(
        [0.1, 0.2],
        [0.3, 0.4],
        normalize="spectral",
        dtype="float32",
        token_mask="sparse",
        mask_density=0.6,
        **plants.SMALL,
    )
    result = terms_view(make_context(model, task, probes=32, held_out=32))
    assert result.json["supported"] is False
    assert len(result.warnings) == 1 and "visible-row" in result.warnings[0]


def test_config_is_checked():
    with pytest.raises(ValueError):
        TermsConfig(stable=0.0)
    with pytest.raises(ValueError):
        TermsConfig(bags=-1)
    with pytest.raises(ValueError):
        TermsConfig(threshold=float("nan"))


def test_inputs_are_not_mutated():
    model, task = plants.eagle(
        [0.3, 0.2], [0.5, 0.7], normalize="spectral", dtype="float32", **plants.SMALL
    )
    ctx = make_context(model, task, probes=64, held_out=64)
    before = (ctx.cap.Z.copy(), ctx.held_out.z0.copy())
    terms_view(ctx)
    np.testing.assert_array_equal(ctx.cap.Z, before[0])  # exact: not written to
    np.testing.assert_array_equal(ctx.held_out.z0, before[1])


# --- the shipped models ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def centralized_terms():
    torch.set_num_threads(1)
    model, task, _ = checkpoint.load(TRAINED / "centralized.pt")
    ctx = make_context(model, task)
    return ctx, terms_view(ctx), model


def test_centralized_terms_are_faithful_one_step(centralized_terms):
    ctx, result, model = centralized_terms
    for layer in result.json["layers"]:
        assert layer["one_step_fidelity"] <= 1e-4, layer["layer"]
    # Every layer updates each block along EAGLE's direction for it (scalar, or with a matrix
    # coefficient: W_QK of layer 0 is dense); the C step's nearest scalar is −c_l, read here
    # from the raw weights: c_l = (mean diagonal of W_QK's A block) × (−mean diagonal of W_VP's
    # C block).
    n = ctx.geometry.n
    qk, ov = model.QK.AB[:, 0].numpy(), model.OV.AB[:, 0].numpy()
    directions = {"A": "AAtA", "B": "BAtA", "C": "AAtC", "D": "BAtC"}
    for layer in result.json["layers"]:
        terms = {t["name"]: t for t in layer["terms"]}
        for block, direction in directions.items():
            forms = {f"{block}+={direction}", f"{block}+={direction}*W"}
            forms |= {f"{block}+={direction[0]}*W*{direction[1:]}"}
            assert forms & set(terms), (layer["layer"], block, sorted(terms))
        index = layer["layer"]
        c_step = np.mean(np.diag(qk[index][:n, :n])) * -np.mean(np.diag(ov[index][n:, n:]))
        c_term = terms.get("C+=A*W*AtC") or terms.get("C+=AAtC*W") or terms["C+=AAtC"]
        scalar = c_term.get("nearest_scalar", c_term.get("coefficient"))
        assert scalar == pytest.approx(-c_step, rel=0.02), index
    mse, net = result.json["run_from_input_mse"], result.json["network_mse"]
    assert abs(mse / net - 1.0) < 0.1


@pytest.mark.bench  # about a minute on 2 cores: `pytest -m bench tests/fit/test_terms.py`
def test_eight_heads_terms_follow_eagle_and_rerun_close_to_the_network():
    """centralized_8head.pt: the head sums of every layer move each block along EAGLE's direction
    (scalar or matrix coefficient); the discovered terms, run from the input, stay within 25% of
    the network's MSE (measured: 1.2×)."""
    torch.set_num_threads(1)
    model, task, _ = checkpoint.load(TRAINED / "centralized_8head.pt")
    result = terms_view(make_context(model, task, held_out=512))
    directions = {"A": "AAtA", "B": "BAtA", "C": "AAtC", "D": "BAtC"}
    for layer in result.json["layers"]:
        names = {t["name"] for t in layer["terms"]}
        for block, direction in directions.items():
            forms = {f"{block}+={direction}", f"{block}+={direction}*W"}
            forms |= {f"{block}+={direction[0]}*W*{direction[1:]}"}
            assert forms & names, (layer["layer"], block, sorted(names))
    mse, net = result.json["run_from_input_mse"], result.json["network_mse"]
    assert mse < 1.25 * net, (mse, net)


def test_terms_figure_shows_inclusion_frequency_and_scalar_coefficients(report_planted):
    extraction = report_planted[2]
    layers = [
        {"layer": 0, "terms": [{"name": "A+=AAtA", "coefficient": -0.3, "frequency": 1.0}]},
        {
            "layer": 1,
            "terms": [
                {"name": "A+=AAtA", "coefficient": -0.2, "frequency": 0.9},
                {"name": "C+=ACtC", "coefficient": [[1.0]], "norm": 2.0, "frequency": 0.4},
            ],
        },
    ]
    view = ViewResult("terms", {"layers": layers})
    ex = replace(extraction, views={**extraction.views, "terms": view})
    fig = figures(ex)["terms"]
    ax = fig.axes[0]
    (image,) = ax.get_images()
    freq = np.asarray(image.get_array())
    np.testing.assert_array_equal(freq[0], [1.0, 0.9])  # A+=AAtA in both layers
    assert np.isnan(freq[1, 0]) and freq[1, 1] == 0.4  # C+=ACtC only in layer 1
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A+=AAtA", "C+=ACtC"]
    assert sorted(t.get_text() for t in ax.texts) == ["-0.2", "-0.3"]  # matrices get no number
    empty = replace(extraction, views={**extraction.views, "terms": ViewResult("terms", {})})
    assert figures(empty) == {}


def test_the_term_names_are_explained_once_where_they_are_printed():
    from types import SimpleNamespace

    from eagle_probe.fit.terms import NAMES_KEY, report_lines

    layer = {"layer": 0, "terms": [{"name": "A+=A*W*AtA", "frobenius": 2.0}]}
    ex = SimpleNamespace(views={"terms": SimpleNamespace(json={"layers": [layer]})})
    lines = report_lines(ex)
    assert "A+=A*W*AtA |W| 2" in lines[1] and lines.count(NAMES_KEY) == 1
    assert "A+=A*W*AtA is A·W·AᵀA" in NAMES_KEY and "A+=AAtA*W is A AᵀA·W" in NAMES_KEY
