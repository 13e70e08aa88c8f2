"""The HTML report and the figures of an extraction, on a planted two-layer EAGLE model.

The planted steps are EAGLE's form but too large for prompts that are not normalised, so the model
is far worse than the zero predictor: the report must say so first, whatever the layers look like.
"""

import base64
import html
import re
import struct
from dataclasses import replace
from html.parser import HTMLParser

import plants
import pytest
from conftest import ROOT
from matplotlib.figure import Figure

from eagle_probe import fit, plots
from eagle_probe.errors import EagleProbeError
from eagle_probe.fit import VIEWS, ViewResult, register
from eagle_probe.report import write_report
from eagle_probe.wording import number

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HOSTILE = 'runs/<script>alert("x")</script>&<img src=x onerror=alert(1)>.pt'
A_STEPS, C_STEPS = plants.REPORT_STEPS
FIGURES = {"weights", "filters", "fidelity", "attribution", "projection_cost", "verdict_gaps"}


@pytest.fixture(scope="module")
def planted(report_planted):
    return report_planted[:2]


@pytest.fixture(scope="module")
def extraction(report_planted):
    return report_planted[2]


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
    assert verdict.startswith("Verdict: not EAGLE, confidence")
    assert "; ".join(extraction.verdict["reasons"]) in verdict  # the numbers it rests on
    assert f"{len(extraction.warnings)} warning" in verdict
    assert extraction.verdict["text"] in page.text["verdict-text"]  # the paragraph, after the table
    assert extraction.warnings
    for warning in extraction.warnings:
        assert warning in page.text["warnings"]
    assert any("zero predictor" in w for w in extraction.warnings)
    sections = [attrs.get("id") for tag, attrs in page.tags if tag == "section"]
    assert sections == ["verdict", "layers", "verdict-text", "warnings", "figures"]
    assert text.index('id="verdict"') < text.index('id="contents"') < text.index('id="layers"')
    # the contents link every section and figure, and every link lands on an id of the page
    links = [a["href"][1:] for tag, a in page.tags if tag == "a" and a.get("href", "")[:1] == "#"]
    ids = {a["id"] for _, a in page.tags if "id" in a}
    assert {"layers", "verdict-text", "warnings", "figures", "text"} <= set(links) <= ids
    assert {f"fig-{name}" for name in FIGURES} <= set(links)


def test_the_first_screen_holds_the_verdict_and_the_table(report):
    """Before the per-layer table the page has its title, the three-line verdict and the contents
    line only: at most 900 characters of text (about 8 lines of the page's 0.95em type at 1280 px:
    the headless-browser measurement is benchmarks/report_layout.py)."""
    _, _, _, text, _ = report
    before = text[text.index("<body>") : text.index('id="layers"')]
    words = html.unescape(re.sub(r"<[^>]+>", " ", before))
    assert len(" ".join(words.split())) <= 900


def test_the_page_gives_the_held_out_mse_with_its_tail(report, extraction):
    """The page's summary line names the median, the trimmed mean and the share of prompts worse
    than zero beside the mean (a mean alone hides its tail)."""
    _, _, _, text, _ = report
    net = extraction.network
    assert net["median_mse"] is not None and net["trimmed_mse"] is not None
    assert f"(median {number(net['median_mse'])}, 0.1%-trimmed {number(net['trimmed_mse'])}" in text
    assert "of prompts worse than zero)" in text


def test_the_layer_table_has_a_row_per_layer_and_units(report, extraction):
    _, _, _, _, page = report
    assert sum(1 for tag, _ in page.tags if tag == "tr") == 1 + len(A_STEPS)
    table = page.text["layers"]
    assert "prompt units" in table and "internal units" in table
    for column in extraction.table().columns:
        assert column in table
    # η, γ with their intervals over the probe prompts; the text report puts them under its table
    assert "eta 95%" in table and "over probe prompts" in table
    text = extraction.render()
    assert "95% intervals over the probe prompts (bootstrap): L0 eta " in text
    steps = extraction.views["eagle"].tables["eagle"]
    slack = 1e-4 * steps.gamma.abs()  # the float32 plant's steps differ from prompt to prompt
    assert (steps.gamma_lo <= steps.gamma + slack).all()
    assert (steps.gamma <= steps.gamma_hi + slack).all()


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


def test_every_view_figure_function_returns_figures(extraction):
    for view, spec in VIEWS.items():
        if spec.figures is None or view not in extraction.views:
            continue
        for name, fig in spec.figures(extraction).items():
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


def test_the_page_figures_are_every_figure_drawn_in_the_page_order(extraction):
    from eagle_probe.report import figure_pngs, png_bytes

    pngs = figure_pngs(extraction)
    figures = plots.extraction_figures(extraction)
    assert list(pngs) == list(figures)  # the page's order
    assert pngs == {name: png_bytes(fig) for name, fig in figures.items()}  # byte for byte


def test_a_throwaway_view_shows_its_text_and_figure_and_leaves_the_registry(extraction):
    """A view registered with a text renderer, a figure function and a caption, and nothing
    else edited: its lines join the text report and its figure the page (after the views of
    `fit.TEXT_ORDER` and `fit.FIGURE_ORDER`); unregistered, it is gone from both."""
    from eagle_probe.report import caption, render_text

    def draw(ex):
        fig = Figure()
        fig.subplots().set_title(f"throwaway {ex.views['throwaway'].json['value']}")
        return {"throwaway_steps": fig}

    register(
        "throwaway",
        text=lambda ex: [f"throwaway view: value {ex.views['throwaway'].json['value']}"],
        figures=draw,
        captions={"throwaway": lambda ex: "What the throwaway view shows."},
    )(lambda ctx: ViewResult("throwaway", {"value": 7}))
    try:
        ex = replace(
            extraction,
            views={**extraction.views, "throwaway": ViewResult("throwaway", {"value": 7})},
        )
        lines = render_text(ex, "m.pt").splitlines()
        weights = next(i for i, line in enumerate(lines) if line.startswith("weights ("))
        assert lines.index("throwaway view: value 7") > weights  # after the last of TEXT_ORDER
        figures = plots.extraction_figures(ex)
        assert list(figures)[-1] == "throwaway_steps"
        assert figures["throwaway_steps"].axes[0].get_title() == "throwaway 7"
        assert caption("throwaway_steps", ex) == "What the throwaway view shows."
    finally:
        del VIEWS["throwaway"]
    assert "throwaway" not in VIEWS and "throwaway" not in fit.shown("text")
    assert "throwaway_steps" not in plots.extraction_figures(ex)
    assert "throwaway view" not in render_text(ex, "m.pt")


# plants of several families and layouts, each with a report of several figures: (plants.eagle
# keywords, or the sample layout's GD++), the family its weights caption names
CAPTION_PLANTS = {
    "centralized, 3 heads": ({"heads": 3}, "centralized family (eagle)"),
    "distributed": ({"regime": "distributed", "machines": 3, "heads": 3}, "eagle-distributed"),
    "constrained": ({"regime": "constrained", "rank": 3, "heads": 1}, "sketch projector"),
    "GD++": (None, "GD++ adds a scalar XX block"),
}
SMALL = {"probe_batch_size": 32, "test_batch": 128, "tuning_batch": 32}


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in text.replace("; ", ". ").split(". ") if len(s.strip()) >= 25]


@pytest.mark.parametrize("name", list(CAPTION_PLANTS))
def test_no_caption_text_is_repeated_across_the_figures_of_a_report(name):
    from eagle_probe import layouts
    from eagle_probe.extract import extract
    from eagle_probe.fit.weights import figure_layers
    from eagle_probe.report import caption
    from eagle_probe.tasks import TaskConfig

    kw, family = CAPTION_PLANTS[name]
    if kw is None:
        qk, vp = layouts.gdpp_products(4, 1, [0.5, 0.4], [0.3, 0.2])
        task = TaskConfig(task="least_squares", n=10, d=4, n_prime=1, d_prime=1, alpha=1.0)
        model = plants.samples(qk, vp, n=10, d=4)
    else:
        model, task = plants.eagle(
            [0.35, 0.3, 0.25], [0.8, 0.7, 0.6], n=6, d=6, normalize="spectral", **kw
        )
    ex = extract(model, task, **SMALL)
    names = list(plots.extraction_figures(ex))
    captions = {fig: caption(fig, ex) for fig in names}
    assert all(captions.values()), captions
    assert len(set(captions.values())) == len(captions), captions
    seen: dict[str, str] = {}
    for fig, text in captions.items():
        for sentence in _sentences(text):
            assert sentence not in seen, f"{fig} repeats {seen.get(sentence)}'s {sentence!r}"
            seen[sentence] = fig
    weights = [fig for fig in names if fig.startswith("weights")]
    assert family in captions[weights[0]]
    if kw is not None and kw.get("regime") is not None:  # not the centralized family's shape
        assert "centralized" not in captions[weights[0]]
    for fig in weights:  # each figure names its own layers' heads, never another figure's
        shown = figure_layers(fig, ex.info["layers"])
        for other in set(range(ex.info["layers"])) - set(shown):
            assert f"layer {other} " not in captions[fig], (fig, captions[fig])
            assert f"layers {other}–" not in captions[fig], (fig, captions[fig])
    if name in ("centralized, 3 heads", "distributed"):  # 3 layers of 3 heads: two figures
        assert weights == ["weights_layers0-1", "weights_layer2"]


def test_a_notebook_shows_the_verdict_headline_and_the_layer_table(extraction):
    from eagle_probe.report import UNITS, notebook_html

    ex = replace(extraction, info={**extraction.info, "regime": HOSTILE})
    fragment = notebook_html(ex)
    page = Page()
    page.feed(fragment)
    page.close()
    tags = [tag for tag, _ in page.tags]
    # a fragment for a cell: no page of its own, no script, nothing loaded from outside
    assert not {"html", "head", "body", "script", "img", "link", "iframe"} & set(tags)
    assert not any({"src", "href"} & set(attrs) for _, attrs in page.tags)
    assert 'class="eagle-probe"' in fragment
    # every style rule is scoped to the fragment
    style = fragment.split("<style>")[1].split("</style>")[0]
    rules = [r.split("{")[0].strip() for r in style.split("}") if "{" in r]
    assert rules and all(
        sel.strip().startswith(".eagle-probe") for r in rules for sel in r.split(",")
    )
    # the headline first: label, family, confidence and the numbers it rests on
    assert html.escape(extraction.verdict["headline"]) in fragment
    assert fragment.index("confidence") < fragment.index("<table>")
    assert 'class="verdict not-eagle"' in fragment  # the planted model is worse than zero
    # the per-layer table: a row per layer under headers with their units
    table = extraction.table()
    assert tags.count("tr") == 1 + len(table)
    assert tags.count("th") == len(table.columns)
    for column in table.columns:
        assert f">{column}<" in fragment
        if column in UNITS:
            assert UNITS[column] in fragment
    # user text escaped
    assert "<script>alert" not in fragment and "&lt;script&gt;" in fragment
    # the warnings are there, folded
    assert f"Warnings ({len(extraction.warnings)})" in fragment


def test_jupyter_shows_an_extraction_with_the_notebook_view(extraction):
    from eagle_probe.report import notebook_html

    assert extraction._repr_html_() == notebook_html(extraction)


def test_the_training_curve_comes_first_with_its_kept_step_and_spikes(extraction, tmp_path):
    """A checkpoint's training record (`extract.training_record` of the shipped centralized
    model's metrics) is drawn as the first figure, captioned with its kept step and spike count."""
    from eagle_probe import checkpoint
    from eagle_probe.extract import training_record

    _, _, metrics = checkpoint.load(ROOT / "trained_models" / "centralized.pt")
    record = training_record(metrics)
    assert len(record["history"]) == len(metrics["history"]) and record["best_step"] > 0
    assert training_record({"history": []}) is None
    trained = replace(extraction, training=record)
    write_report(trained, tmp_path, "centralized.pt")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert (tmp_path / "training.png").stat().st_size > 10_000
    first = page.index("<figure")
    assert page.index('id="fig-training"') == first + len("<figure ")
    assert f"kept are step {record['best_step']}'s" in html.unescape(page)
    assert f"the {record['spike_count']} batches whose loss spiked" in page
    assert trained.to_json()["training"]["best_step"] == record["best_step"]


def test_a_spike_whose_loss_was_not_finite_is_counted_not_drawn():
    """Training stores a non-finite spike loss as None (data as JSON holds it): the curve draws
    the finite spikes and says how many it left out, where it raised a TypeError before."""
    from eagle_probe.plots import training_curve

    record = {
        "history": [{"step": s, "val_mse": 1.0 / s, "val_median": 0.5 / s} for s in (1, 2, 3)],
        "spikes": [{"step": 2, "loss": 40.0}, {"step": 3, "loss": None}],
        "best_step": 3,
    }
    fig = training_curve(record)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "loss spikes, batch loss (1; 1 not finite, not drawn)" in labels
    marks = [line for line in fig.axes[0].lines if line.get_marker() == "x"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [2]
