"""The figures that are not a view's (`eagle_probe.plots`): what each draws is its input.

The figures of an extraction are each view's own and are tested in `tests/fit/test_<view>.py`
and `test_report.py`; those of `compare` and `timeline` in their files."""

import numpy as np
import pandas as pd
import pytest
import torch
from plants import eagle as planted_model

from eagle_probe import plots


def _bar_heights(ax) -> list[float]:
    return [patch.get_height() for patch in ax.patches]


def test_weight_heatmaps_show_every_heads_products_of_the_layer():
    model, _ = planted_model([0.3, 0.2], [0.4, 0.3], heads=2, n=6, d=5)
    fig = plots.weight_heatmaps(model, 1)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["W_QK h0", "W_QK h1", "W_VP h0", "W_VP h1"]
    weights = [model.W_QK(1), model.W_VP(1)]
    for k, ax in enumerate(axes):
        expected = weights[k // 2][k % 2].to(torch.float64).numpy()
        np.testing.assert_array_equal(ax.images[0].get_array(), expected)
    assert "layer 1" in fig._suptitle.get_text()


def test_head_shares_draw_one_bar_a_head_and_problem_in_each_layers_panel():
    shares = pd.DataFrame(
        {
            "layer": [0, 0, 0, 0, 1, 1, 1, 1],
            "head": [0, 1, 0, 1, 0, 1, 0, 1],
            "problem": ["square", "square", "tall", "tall"] * 2,
            "share": [0.7, 0.3, 0.4, 0.6, 0.9, 0.1, 0.2, 0.8],
        }
    )
    fig = plots.head_shares(shares)
    assert [ax.get_title() for ax in fig.axes] == ["layer 0", "layer 1"]
    assert _bar_heights(fig.axes[0]) == [0.7, 0.3, 0.4, 0.6]
    assert _bar_heights(fig.axes[1]) == [0.9, 0.1, 0.2, 0.8]
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["square", "tall"]


def test_pruning_curve_falls_from_all_heads_and_marks_the_zero_predictor():
    pruning = pd.DataFrame({"heads_left": [8, 4, 2, 1], "mse": [1e-4, 1e-3, 1e-2, 0.5]})
    ax = plots.pruning_curve(pruning, zero_mse=1.0).axes[0]
    network, zero = ax.get_lines()
    np.testing.assert_array_equal(network.get_ydata(), pruning.mse)
    assert list(zero.get_ydata()) == [1.0, 1.0]
    assert ax.get_yscale() == "log" and ax.xaxis_inverted()
    assert len(plots.pruning_curve(pruning).axes[0].get_lines()) == 1


def test_error_curves_draw_one_panel_per_size_and_condition_with_zero_errors_at_a_floor():
    rows = [
        {"n": n, "kappa": kappa, "solver": solver, "iteration": it, "error": err}
        for n, kappa in ((10, 1e2), (20, 1e4))
        for solver in ("EAGLE", "CG")
        for it, err in ((1, 0.5), (2, 0.0))
    ]
    fig = plots.error_curves(pd.DataFrame(rows))
    assert [ax.get_title() for ax in fig.axes] == ["n = 10, κ = 1e+02", "n = 20, κ = 1e+04"]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["CG", "EAGLE"]
        for line in ax.get_lines():
            assert list(line.get_ydata()) == [0.5, 1e-17]


def test_fidelity_bars_put_ours_beside_the_papers_on_a_log_axis():
    table = pd.DataFrame(
        {
            "model": ["centralized"] * 2 + ["distributed"] * 2,
            "layer": [0, 1, 0, 1],
            "fidelity": [1e-3, 2e-3, 3e-3, 4e-3],
            "paper": [1.5e-3, 2.5e-3, 3.5e-3, 4.5e-3],
        }
    )
    fig = plots.fidelity_bars(table)
    assert [ax.get_title() for ax in fig.axes] == ["centralized", "distributed"]
    assert _bar_heights(fig.axes[1]) == [3e-3, 4e-3, 3.5e-3, 4.5e-3]
    assert all(ax.get_yscale() == "log" for ax in fig.axes)


def test_sketch_spectra_draw_the_network_and_a_random_sketch_per_layer():
    spectrum = pd.DataFrame(
        {
            "layer": [0, 0, 0, 1, 1, 1],
            "index": [0, 1, 2] * 2,
            "network": [1.0, 1.0, 0.0, 1.0, 0.5, 0.1],
            "random_sketch": [1.0, 0.7, 0.2, 1.0, 0.6, 0.3],
        }
    )
    fig = plots.sketch_spectra(spectrum)
    assert [ax.get_title() for ax in fig.axes] == ["layer 0", "layer 1"]
    network, sketch = fig.axes[0].get_lines()
    assert list(network.get_ydata()) == [1.0, 1.0, 0.0]
    assert list(sketch.get_ydata()) == [1.0, 0.7, 0.2]


@pytest.mark.parametrize("view", ["weights", "fidelity", "projection"])
def test_view_figures_are_the_views_own_without_minor_ticks_on_wide_log_axes(report_planted, view):
    from matplotlib.ticker import NullLocator

    from eagle_probe import fit

    ex = report_planted[-1]
    assert plots.figure_views(ex) == [v for v in fit.FIGURE_ORDER if v in ex.views]
    own = fit.VIEWS[view].figures(ex)
    drawn = plots.view_figures(ex, view)
    assert list(drawn) == list(own)
    for fig in drawn.values():
        for ax in fig.axes:
            if ax.get_yscale() == "log":
                lo, hi = sorted(ax.get_ylim())
                if lo > 0 and np.log10(hi / lo) >= 2:
                    assert isinstance(ax.yaxis.get_minor_locator(), NullLocator)
