"""The weight-structure view (`fit/weights.py`): EAGLE's exact shapes named before any
sparsification (q I, a machine's q I[i:j], a sketch's q P_r, a copy sent to every copy), other
blocks after it; the simplified products; block norms."""

from dataclasses import replace

import numpy as np
import plants
import pytest
import torch
from conftest import RTOL

from eagle_probe import layouts
from eagle_probe.fit import weights

N, E = 4, 6  # n sample columns, n' = 2 query columns


def test_sparsify_keeps_entries_at_one_and_a_half_times_the_mean_magnitude():
    W = np.array([[4.0, -1.5], [0.1, 0.4]])  # mean |W| = 1.5, τ = 2.25
    # exact: sparsify keeps entries or zeroes them
    np.testing.assert_array_equal(weights.sparsify(W), [[4.0, 0.0], [0.0, 0.0]])
    W = np.array([[3.0, 0.1], [0.2, -2.0]])  # mean |W| = 1.325, τ = 1.9875
    np.testing.assert_array_equal(weights.sparsify(W), [[3.0, 0.0], [0.0, -2.0]])


def test_eagle_products_are_two_scalar_blocks():
    qk = np.diag([1.0] * N + [0.0] * 2)
    vp = np.diag([-0.3] * N + [-0.7] * 2)
    q, v = weights.describe(qk, N), weights.describe(vp, N)
    assert q["structure"] == "diag(1 I_4, 0)"
    assert v["structure"] == "diag(-0.3 I_4, -0.7 I_2)"
    assert (v["level_nn"], v["level_qq"], v["simple"]) == (-0.3, -0.7, True)


def test_exact_shapes_a_machines_range_and_a_sketch_projector():
    own = np.zeros((E, E))
    own[2:4, 2:4] = 0.5 * np.eye(2)  # machine 1 of 2 writes only its own columns
    assert weights.describe(own, N)["structure"].startswith("diag(0.5 I[2:4], ")
    S = np.linalg.qr(np.random.default_rng(0).standard_normal((N, 2)))[0]
    sketched = np.zeros((E, E))
    sketched[:N, :N] = -0.2 * S @ S.T  # dense, but exactly q times a rank-2 projector
    assert weights.describe(sketched, N)["structure"].startswith("diag(-0.2 P_2, ")


def test_a_copy_sent_to_every_copy_is_named_with_its_machine():
    copies = 3  # n' = 1 on each of three machines
    W = np.zeros((N + copies, N + copies))
    W[N + 1, N:] = 0.4  # copy 1 written into all three copies
    s = weights.describe(W, N, copies=copies)
    assert s["structure"] == "diag(0, 0.4 I_1 copy 1 → all 3)" and not s["simple"]


def test_a_cross_block_and_a_dense_block():
    W = np.diag([1.0] * N + [0.0] * 2)
    W[0, N] = 2.0
    assert weights.describe(W, N)["structure"] == "[[1 I_4, dense], [0, 0]]"
    noisy = np.eye(E) + 0.3 * np.random.default_rng(1).standard_normal((E, E))
    text = weights.describe(noisy, N)["structure"]
    assert "dense" in text or "off-diag" in text
    assert weights.describe(noisy, N)["simple"] is False


def test_simplified_products_keep_levels_or_the_sparsified_product():
    qk = np.diag([1.0] * N + [0.0] * 2)[None, None]
    vp = np.diag([-0.3] * N + [-0.7] * 2)[None, None]
    sq, sv = weights.simplified_products(qk, vp, N)
    np.testing.assert_array_equal(sq, qk)  # exact: kept as they are
    np.testing.assert_array_equal(sv, vp)
    # small noise: sparsified to a diagonal, each block replaced by the mean of its diagonal
    rng = np.random.default_rng(2)
    near = vp + 1e-3 * rng.standard_normal(vp.shape)
    _, sv = weights.simplified_products(qk, near, N)
    diag = np.diag(near[0, 0])
    levels = [diag[:N].mean()] * N + [diag[N:].mean()] * 2
    np.testing.assert_allclose(sv[0, 0], np.diag(levels), rtol=RTOL)
    # large noise: no simple structure, the sparsified product itself
    far = vp + 0.3 * rng.standard_normal(vp.shape)
    _, sv = weights.simplified_products(qk, far, N)
    np.testing.assert_array_equal(sv[0, 0], weights.sparsify(far[0, 0]))  # exact: same call


def test_block_norms_name_the_blocks_by_their_coordinates():
    W = np.arange(36.0).reshape(E, E)
    out = weights.block_norms(W, N, coords=("X", "Y"))
    assert out["XX"] == pytest.approx(np.linalg.norm(W[:N, :N]))
    assert out["XY"] == pytest.approx(np.linalg.norm(W[:N, N:]))
    assert out["YX"] == pytest.approx(np.linalg.norm(W[N:, :N]))
    assert out["YY"] == pytest.approx(np.linalg.norm(W[N:, N:]))
    assert weights.block_norms(np.eye(E), N)["offdiag_ratio"] == 0.0  # exact: zeros


def test_the_weight_table_of_a_planted_model_names_its_steps_per_head():
    model, _ = plants.eagle([0.05, 0.04], [0.09, 0.08], heads=2)
    qk, vp = layouts.state_products(model)
    table = weights.weight_view(qk, vp, model.cfg.n)
    assert table.W_QK.tolist() == ["diag(1 I_8, 0)"] * 4
    assert table.W_VP.tolist()[::2] == [
        "diag(-0.025 I_8, -0.045 I_2)",
        "diag(-0.02 I_8, -0.04 I_2)",
    ]
    assert table.simple.all()


def test_heatmaps_centre_the_colours_and_mark_the_block_boundary(report_planted):
    model, _, extraction = report_planted
    qk = model.W_QK().to(torch.float64).numpy()
    vp = model.W_VP().to(torch.float64).numpy()
    figs = weights.figures(extraction)
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


def test_heatmaps_draw_the_networks_own_products_when_the_weights_view_carries_them(report_planted):
    extraction = report_planted[2]
    rng = np.random.default_rng(0)
    qk = extraction.views["projection"].extra["qk"] + rng.normal(size=(2, 1, 8, 8))
    vp = extraction.views["projection"].extra["vp"] + rng.normal(size=(2, 1, 8, 8))
    carried = replace(extraction.views["weights"], extra={"qk": qk, "vp": vp})
    ex = replace(extraction, views={**extraction.views, "weights": carried})
    fig = weights.figures(ex)["weights"]
    drawn = [np.asarray(im.get_array()) for ax in fig.axes for im in ax.get_images()]
    expected = [qk[0, 0], qk[1, 0], vp[0, 0], vp[1, 0]]  # top row W_QK, bottom row W_VP
    for got, want in zip(drawn, expected, strict=True):
        np.testing.assert_array_equal(got, want)  # exact: the image holds the array given
    assert "projected" not in fig.get_suptitle()
    assert "projected" not in weights.figures(extraction)["weights"].get_suptitle()
    bare = replace(extraction.views["weights"], extra={})  # without them: the projection's
    ex = replace(extraction, views={**extraction.views, "weights": bare})
    assert "projected" in weights.figures(ex)["weights"].get_suptitle()


def _panels(fig) -> dict[tuple[str, int, int], tuple[float, float]]:
    """{(product, layer, head): (bottom, left)} of a heatmap figure's panels, read from their
    titles ('W_QK, layer 1 head 2') and their positions on the figure."""
    out = {}
    for ax in fig.axes:
        words = ax.get_title().replace(",", "").split()
        if not words or not ax.get_visible():
            continue  # a colour bar, or an unused cell
        head = int(words[4]) if len(words) > 4 else 0
        box = ax.get_position()
        out[words[0], int(words[2]), head] = (round(box.y0, 4), round(box.x0, 4))
    return out


@pytest.mark.parametrize("heads", [1, 2, 3, 5])
def test_a_layers_heads_are_one_block_that_no_other_layer_continues(report_planted, heads):
    extraction = report_planted[2]
    rng = np.random.default_rng(1)
    L = 5
    qk, vp = rng.normal(size=(2, L, heads, 8, 8))
    carried = replace(extraction.views["weights"], extra={"qk": qk, "vp": vp})
    ex = replace(extraction, views={**extraction.views, "weights": carried})
    figs = weights.figures(ex)
    shown = set()
    for name, fig in figs.items():
        panels = _panels(fig)
        layers = sorted({layer for _, layer, _ in panels})
        assert layers == weights.figure_layers(name, L)
        for product in ("W_QK", "W_VP"):
            rows: dict[float, set[int]] = {}
            for (p, layer, _head), (y, _) in panels.items():
                if p == product:
                    rows.setdefault(y, set()).add(layer)
            # no line holds heads of a layer together with part of another layer
            for row_layers in rows.values():
                if heads > weights.MAX_COLUMNS:
                    assert len(row_layers) == 1
            for layer in layers:
                ys = [y for (p, lay, _), (y, _) in panels.items() if p == product and lay == layer]
                xs = [x for (p, lay, _), (_, x) in panels.items() if p == product and lay == layer]
                if heads <= weights.MAX_COLUMNS:
                    assert len(set(ys)) == 1, f"layer {layer}'s heads span lines in {name}"
                    # the heads side by side in order, head 0 first
                    by_head = [panels[product, layer, h][1] for h in range(heads)]
                    assert by_head == sorted(by_head) and len(set(xs)) == heads
                else:  # a wider layer starts a line of its own, MAX_COLUMNS heads to each
                    assert panels[product, layer, 0][1] == min(x for _, x in panels.values())
                    assert len(set(ys)) == -(-heads // weights.MAX_COLUMNS)
            shown |= {(layer, h) for (p, layer, h) in panels if p == product}
        # W_VP right under W_QK, head by head
        for (p, layer, h), (y, x) in panels.items():
            if p == "W_QK":
                below_y, below_x = panels["W_VP", layer, h]
                assert below_x == x and below_y < y
    assert shown == {(layer, h) for layer in range(L) for h in range(heads)}


def test_three_heads_keep_layer_one_off_layer_zeros_line(report_planted):
    extraction = report_planted[2]
    qk, vp = np.random.default_rng(2).normal(size=(2, 3, 3, 8, 8))
    carried = replace(extraction.views["weights"], extra={"qk": qk, "vp": vp})
    ex = replace(extraction, views={**extraction.views, "weights": carried})
    figs = weights.figures(ex)
    assert list(figs) == ["weights_layers0-1", "weights_layer2"]
    panels = _panels(figs["weights_layers0-1"])
    assert panels["W_QK", 1, 0][0] < panels["W_QK", 0, 2][0]  # layer 1 on a line below
    assert panels["W_QK", 1, 0][1] == panels["W_QK", 0, 0][1]  # starting at the left


def test_a_trained_machine_local_head_is_named_as_such_after_sparsification():
    """A head of the paper's distributed layout, with the noise of training: its W_QK is a scalar
    times I on its machine's columns only, its W_VP's C/D block sends its copy to every copy."""
    from eagle_probe.fit.weights import describe

    n, n_prime, copies = 18, 2, 3
    E = n + copies * n_prime
    rng = np.random.default_rng(0)
    W = 1e-3 * rng.standard_normal((E, E))
    W[6:12, 6:12] += 0.49 * np.eye(6) * (1 + 0.02 * rng.standard_normal(6))
    W[n:, n:] *= 0.0
    W[n:, :n] = W[:n, n:] = 0.0
    head = describe(W, n, copies)["structure"]
    assert head.startswith("diag(0.4") and head.endswith(" I[6:12], 0)")
    V = 1e-3 * rng.standard_normal((E, E))
    V[n:, :n] = V[:n, n:] = 0.0
    V[n + 2 : n + 4, n:] = np.tile(-0.97 * np.eye(n_prime), (1, copies)) + 0.01
    assert describe(V, n, copies)["structure"].endswith("I_2 copy 1 → all 3)")
    assert not describe(V, n, copies)["simple"]  # no single level for the simplified model
