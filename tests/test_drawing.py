"""The helpers every figure draws with (`eagle_probe.drawing`)."""

import numpy as np
import pytest

from eagle_probe import drawing


def test_positive_keeps_finite_values_floors_the_rest_and_drops_non_finite():
    out = drawing.positive([3.0, 0.0, -2.0, np.inf, np.nan, 1e-30], 1e-12)
    np.testing.assert_array_equal(out[:3], [3.0, 1e-12, 1e-12])
    assert np.isnan(out[3:5]).all()
    assert out[5] == 1e-12


def test_floor_is_a_decade_below_the_smallest_positive_finite_value():
    assert drawing.floor([5.0, 0.0, -1.0], [np.nan, 2e-3, np.inf]) == pytest.approx(2e-4)
    assert drawing.floor([0.0, -1.0, np.nan]) == 1e-12
    assert drawing.floor([]) == 1e-12


@pytest.mark.parametrize(
    "x, text",
    [
        (0.5, "0.5"),
        (1234.5, "1.23×10³"),
        (3e33, "3×10³³"),
        (-2.5e-7, "-2.5×10⁻⁷"),
        (np.inf, "not finite"),
        (np.nan, "not finite"),
    ],
)
def test_readable_writes_powers_of_ten_out(x, text):
    assert drawing.readable(x) == text


def test_tex_escapes_the_plus_signs_of_a_family_name():
    assert drawing.tex("GD++") == "GD{+}{+}"
    assert drawing.tex("EAGLE") == "EAGLE"


def test_layer_colour_cycles_through_ten_colours():
    assert [drawing.layer_colour(k) for k in (0, 3, 10, 13)] == ["C0", "C3", "C0", "C3"]


def test_diverging_is_centred_at_zero_and_survives_a_zero_matrix():
    fig = drawing.figure(3, 2)
    ax = fig.subplots()
    im = drawing.diverging(ax, np.array([[1.0, -4.0], [2.0, 0.5]]))
    assert im.get_clim() == (-4.0, 4.0)
    assert im.get_cmap().name == "RdBu_r"
    assert drawing.diverging(ax, np.zeros((2, 2))).get_clim() == (-1e-12, 1e-12)


def test_fraction_map_writes_each_cell_and_whitens_the_dark_ones():
    fig = drawing.figure(3, 2)
    ax = fig.subplots()
    values = np.array([[0.1, 0.9]])
    drawing.fraction_map(ax, values, "Blues", [((0, 0), "10%"), ((0, 1), "90%")])
    texts = {t.get_text(): t.get_color() for t in ax.texts}
    assert texts == {"10%": "k", "90%": "w"}


def test_handles_lists_each_label_once_in_order_of_appearance():
    fig = drawing.figure(4, 2)
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], label="network")
    left.plot([1, 0], label="EAGLE")
    right.plot([0, 2], label="EAGLE")
    right.plot([2, 0], label="control")
    found, labels = drawing.handles(left, right)
    assert labels == ["network", "EAGLE", "control"]
    assert found[1] is left.get_lines()[1]


def test_minor_ticks_go_only_from_log_axes_that_span_enough_decades():
    from matplotlib.ticker import NullLocator

    fig = drawing.figure(6, 2)
    wide, narrow, linear = fig.subplots(1, 3)
    wide.semilogy([1, 2], [1e-6, 1.0])  # six decades
    narrow.semilogy([1, 2], [1.0, 3.0])  # half a decade
    linear.plot([1, 2], [1e-6, 1.0])
    before = linear.yaxis.get_minor_locator()
    assert drawing.without_minor_log_ticks(fig) is fig
    assert isinstance(wide.yaxis.get_minor_locator(), NullLocator)
    assert not isinstance(narrow.yaxis.get_minor_locator(), NullLocator)
    assert linear.yaxis.get_minor_locator() is before


def test_a_figure_has_the_size_and_resolution_asked_for_and_a_mark_draws_nothing():
    fig = drawing.figure(4.0, 2.5)
    assert tuple(fig.get_size_inches()) == (4.0, 2.5)
    assert fig.dpi == drawing.DPI
    mark = drawing.mark(color="C2", marker="o", label="EAGLE")
    assert mark.get_label() == "EAGLE" and len(mark.get_xdata()) == 0
