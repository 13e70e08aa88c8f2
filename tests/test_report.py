"""The HTML report and the figures of an extraction, on a planted two-layer EAGLE model.

The planted steps are EAGLE's form but too large for prompts that are not normalised, so the model
is far worse than the zero predictor: the report must say so first, whatever the layers look like.
"""

import base64
import struct
from dataclasses import replace
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import plants
import pytest
import torch
from matplotlib.figure import Figure

from eagle_probe import plots
from eagle_probe.errors import EagleProbeError
from eagle_probe.extract import extract
from eagle_probe.fit.base import ViewResult
from eagle_probe.report import write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HOSTILE = 'runs/<script>alert("x")</script>&<img src=x onerror=alert(1)>.pt'
A_STEPS, C_STEPS = [0.3, 0.2], [0.4, 0.3]
FIGURES = {"weights", "filters", "fidelity", "attribution", "projection_cost", "verdict_gaps"}
VIEWS = (  # every view with a figure, and the optimum (its bars join the projection's cost)
    "eagle",
    "fidelity",
    "projection",
    "weights",
    "attribution",
    "optimum",
    "polynomial",
    "verdict",
)


@pytest.fixture(scope="module")
def planted():
    return plants.eagle(A_STEPS, C_STEPS, n=6, d=6, dtype="float32")


@pytest.fixture(scope="module")
def extraction(planted):
    model, task = planted
    return extract(model, task, probe_batch_size=64, test_batch=256, tuning_batch=256, views=VIEWS)


class Page(HTMLParser):
    """Collects tags with their attributes, and the text under each section id."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: dict[str, str] = {}
        self._section: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "section":
            self._section.append(attrs.get("id", ""))
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag == "section" and self._section:
            self._section.pop()
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._section:
            key = self._section[-1]
            self.text[key] = self.text.get(key, "") + data


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the first chunk, right after the signature)."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR", "PNG without IHDR first"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def report(extraction, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    out = root / "out"
    out.mkdir()
    written = write_report(extraction, out, HOSTILE)
    text = (out / "report.html").read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    page.close()
    return root, out, written, text, page


def test_every_image_is_an_embedded_png_of_sensible_size(report):
    _, out, _, _, page = report
    imgs = [attrs for tag, attrs in page.tags if tag == "img"]
    assert len(imgs) >= len(FIGURES)
    for attrs in imgs:
        src = attrs["src"]
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        data = base64.b64decode(src[len(prefix) :], validate=True)
        width, height = png_size(data)
        assert width > 100 and height > 100
        # the same figure lies beside the page as a PNG file, byte for byte
        assert (out / f"{attrs['alt']}.png").read_bytes() == data


def test_each_expected_figure_is_on_the_page_with_a_caption(report):
    _, _, _, text, page = report
    names = {attrs["alt"] for tag, attrs in page.tags if tag == "img"}
    assert FIGURES <= names
    assert text.count("<figcaption>") == len(names)
    for name in FIGURES:
        assert f'id="fig-{name}"' in text


def test_the_verdict_comes_first_and_the_warnings_follow(report, extraction):
    _, _, _, text, page = report
    assert extraction.network["mse"] > extraction.network["zero_mse"]  # the planted steps diverge
    verdict = page.text["verdict"]
    assert extraction.verdict["text"] in verdict
    assert "Verdict: not EAGLE." in verdict
    assert extraction.warnings
    for warning in extraction.warnings:
        assert warning in page.text["warnings"]
    assert any("zero predictor" in w for w in extraction.warnings)
    sections = [attrs.get("id") for tag, attrs in page.tags if tag == "section"]
    assert sections[0] == "verdict"
    assert text.index('id="verdict"') < text.index('id="layers"') < text.index('id="figures"')


def test_the_layer_table_has_a_row_per_layer_and_units(report, extraction):
    _, _, _, _, page = report
    assert sum(1 for tag, _ in page.tags if tag == "tr") == 1 + len(A_STEPS)
    table = page.text["layers"]
    assert "prompt units" in table and "internal units" in table
    for column in extraction.table().columns:
        assert column in table


def test_user_text_is_escaped_and_nothing_is_loaded_from_outside(report):
    _, _, _, text, page = report
    assert "<script" not in text.lower()
    assert "&lt;script&gt;" in text
    assert page.title == f"eagle-probe report: {HOSTILE}"  # escaped, so it reads back intact
    assert not any(tag in ("script", "link", "iframe", "object") for tag, _ in page.tags)
    assert "onerror" not in {k for _, attrs in page.tags for k in attrs}
    for _, attrs in page.tags:
        for key in ("src", "href"):
            if key in attrs:
                assert attrs[key].startswith(("data:", "#")), attrs[key]


def test_writes_stay_in_the_output_directory(report):
    root, out, written, _, _ = report
    assert sorted(p.name for p in root.iterdir()) == ["out"]
    assert sorted(written) == sorted(out.iterdir())
    assert {p.name for p in written} == {"report.html"} | {f"{f}.png" for f in FIGURES}


def test_a_missing_directory_is_an_error(extraction, tmp_path):
    with pytest.raises(EagleProbeError, match="does not exist"):
        write_report(extraction, tmp_path / "absent", "m")
    assert list(tmp_path.iterdir()) == []


def test_heatmaps_centre_the_colours_and_mark_the_block_boundary(extraction, planted):
    model, _ = planted
    qk = model.W_QK().to(torch.float64).numpy()
    vp = model.W_VP().to(torch.float64).numpy()
    figs = plots.extraction_heatmaps(extraction)
    assert list(figs) == ["weights"]  # 2 layers x 1 head fit in one figure
    fig = figs["weights"]
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 2 * 2  # W_QK and W_VP per layer
    shown = sorted(float(np.abs(im.get_array()).max()) for im in images)
    np.testing.assert_allclose(shown, sorted(np.abs(np.concatenate([qk, vp])).max(axis=(1, 2, 3))))
    n = model.cfg.n
    for im in images:
        lo, hi = im.get_clim()
        assert lo == -hi and hi > 0
        assert im.get_cmap().name == "RdBu_r"
        lines = [ln.get_xdata()[0] for ln in im.axes.lines]
        assert n - 0.5 in lines
    # one colour bar per heatmap
    assert len(fig.axes) == 2 * len(images)


def test_heatmaps_draw_the_networks_own_products_when_the_weights_view_carries_them(extraction):
    rng = np.random.default_rng(0)
    qk = extraction.views["projection"].extra["qk"] + rng.normal(size=(2, 1, 8, 8))
    vp = extraction.views["projection"].extra["vp"] + rng.normal(size=(2, 1, 8, 8))
    weights = replace(extraction.views["weights"], extra={"qk": qk, "vp": vp})
    ex = replace(extraction, views={**extraction.views, "weights": weights})
    fig = plots.extraction_heatmaps(ex)["weights"]
    drawn = [np.asarray(im.get_array()) for ax in fig.axes for im in ax.get_images()]
    expected = [qk[0, 0], qk[1, 0], vp[0, 0], vp[1, 0]]  # top row W_QK, bottom row W_VP
    for got, want in zip(drawn, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert "projected" not in fig.get_suptitle()
    assert "projected" not in plots.extraction_heatmaps(extraction)["weights"].get_suptitle()
    bare = replace(extraction.views["weights"], extra={})  # without them: the projection's
    ex = replace(extraction, views={**extraction.views, "weights": bare})
    assert "projected" in plots.extraction_heatmaps(ex)["weights"].get_suptitle()


def test_fidelity_figure_shows_the_paper_only_where_it_has_numbers(extraction):
    fig = plots.extraction_fidelity(extraction)["fidelity"]
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "block A" in labels and "all blocks" in labels
    # the paper's Table 1 has 4 centralized layers, so it is drawn for this 2-layer model
    assert any("paper" in label for label in labels)
    for ax in fig.axes:
        assert ax.get_yscale() == "log"


def test_projection_cost_shows_the_optimum_and_the_zero_predictor(extraction):
    fig = plots.extraction_projection_cost(extraction)["projection_cost"]
    (ax,) = fig.axes
    bars = [t.get_text() for t in ax.get_yticklabels()]
    assert bars[0] == "network" and "all layers projected" in bars
    assert "best EAGLE, same depth (optimal)" in bars
    assert sum("projected alone" in b for b in bars) == len(A_STEPS)
    zero = extraction.network["zero_mse"]
    assert any(np.allclose(line.get_xdata(), zero) for line in ax.lines)
    assert ax.get_xscale() == "log"


def test_every_view_figure_function_returns_figures(extraction):
    for view, fn in plots.VIEW_FIGURES.items():
        if view not in extraction.views:
            continue
        for name, fig in fn(extraction).items():
            assert isinstance(fig, Figure), (view, name)
            assert fig.get_suptitle() or any(ax.get_title() for ax in fig.axes), name


def test_cli_extract_out_writes_the_report(planted, extraction, tmp_path, monkeypatch, capsys):
    import eagle_probe.extract
    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    model, task = planted
    ckpt = tmp_path / "planted<b>.pt"
    checkpoint.save(ckpt, model, task)
    # the extraction itself is tested elsewhere; here only what the CLI does with it
    monkeypatch.setattr(eagle_probe.extract, "extract", lambda *args, **kwargs: extraction)
    out = tmp_path / "out"
    assert main(["extract", str(ckpt), "--out", str(out)]) == 0
    assert "report.html" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"extraction.json", "solver.py", "report.html"} <= names
    assert {f"{f}.png" for f in FIGURES} <= names
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "planted&lt;b&gt;.pt" in page and "planted<b>" not in page


def test_attribution_bars_run_from_one_to_the_ratio_and_cut_blow_ups(extraction):
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
    fig = plots.extraction_attribution(ex)["attribution"]
    titled = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert set(titled) == {f"{p}, layer {lay}" for p in ("W_QK", "W_VP") for lay in (0, 1)}

    def ends(ax):
        return sorted((bar.get_y(), bar.get_y() + bar.get_height()) for bar in ax.patches)

    cap = plots.ATTRIBUTION_CAP
    assert ends(titled["W_QK, layer 0"]) == [(1.0, pytest.approx(3.0))]
    assert ends(titled["W_VP, layer 0"]) == [(1.0, pytest.approx(0.5))]  # zeroing it helps
    assert ends(titled["W_QK, layer 1"]) == [(1.0, pytest.approx(cap))]
    assert ends(titled["W_VP, layer 1"]) == [(1.0, pytest.approx(cap))]
    notes = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"1×10⁹", "not finite"} <= notes  # a power of ten written out, not 1e+09
    assert "cut at" in fig.get_suptitle()


def test_terms_figure_shows_inclusion_frequency_and_scalar_coefficients(extraction):
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
    fig = plots.extraction_terms(ex)["terms"]
    ax = fig.axes[0]
    (image,) = ax.get_images()
    freq = np.asarray(image.get_array())
    np.testing.assert_array_equal(freq[0], [1.0, 0.9])  # A+=AAtA in both layers
    assert np.isnan(freq[1, 0]) and freq[1, 1] == 0.4  # C+=ACtC only in layer 1
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A+=AAtA", "C+=ACtC"]
    assert sorted(t.get_text() for t in ax.texts) == ["-0.2", "-0.3"]  # matrices get no number
    empty = replace(extraction, views={**extraction.views, "terms": ViewResult("terms", {})})
    assert plots.extraction_terms(empty) == {}


def test_the_page_figures_are_every_figure_drawn_in_the_page_order(extraction):
    from eagle_probe.report import figure_pngs, png_bytes

    pngs = figure_pngs(extraction)
    figures = plots.extraction_figures(extraction)
    assert list(pngs) == list(figures)  # the page's order
    assert pngs == {name: png_bytes(fig) for name, fig in figures.items()}  # byte for byte
