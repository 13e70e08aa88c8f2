"""View `communication` on distributed plants whose traffic is known: the paper's
eagle-distributed (only the C/D results cross machines) and the same with one planted block that
writes one machine's A columns into another's."""

import re

import numpy as np
import pytest
from conftest import ROOT, RTOL
from probe_context import make_context

from eagle_probe import layouts
from eagle_probe.fit import VIEWS
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig

# steps in prompt units: ‖A‖₂² of these prompts has median ≈ 13, so the plant is stable
A_STEPS, C_STEPS = [0.01, 0.01], [0.03, 0.03]
SCHEMA = "docs/extraction-schema.md"


def _config(machines: int, regime: str = "distributed") -> ModelConfig:
    return ModelConfig(
        regime=regime, machines=machines, n=6, d=6, n_layers=2, normalize="none",
        dtype="float64",
    )  # fmt: skip


REGIMES = ["distributed", "distributed-open"]


def _cd_floats(cfg: ModelConfig) -> int:
    """What eagle-distributed sends per machine per round: its C/D result into every other
    machine's copy (the paper's architecture) or into the one shared C/D block (open)."""
    copies = cfg.machines - 1 if cfg.regime == "distributed" else 1
    return (cfg.d + cfg.d_prime) * cfg.n_prime * copies


def _view(model):
    ctx = make_context(model, TaskConfig(n=6, d=6, rank=3), probes=16, held_out=256)
    return VIEWS["communication"].run(ctx)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("machines", [2, 3, 6])
def test_paper_plant_sends_only_the_cd_results(machines, regime):
    cfg = _config(machines, regime)
    view = _view(layouts.plant(cfg, A_STEPS, C_STEPS)).json
    for lay in view["layers"]:
        assert not lay["a_columns_sent"]
        assert lay["cross_a_ablation"] == pytest.approx(1.0, abs=RTOL)
        assert lay["cross_a_any_ablation"] == pytest.approx(1.0, abs=RTOL)
        for head in lay["heads"]:  # shares of ‖W_VP‖²: squares, whose floor is RTOL²
            assert head["cross_a_share"] <= 1e-12
            assert head["cross_a_any_share"] <= 1e-12
            assert head["off_family_share"] <= 1e-12
            total = sum(head[k] for k in ("cross_a_share", "cross_cd_share", "own_share"))
            assert total + head["own_cd_share"] == pytest.approx(1.0, abs=1e-12)
            assert head["cross_a_fraction"] == 0.0  # exact: 0 / x, no cross A block at all
    assert not view["a_columns_sent"]
    floats = view["floats_per_machine_round"]
    assert floats["network"] == floats["eagle-distributed"] == _cd_floats(cfg)
    assert floats["network_a"] == 0
    assert view["sentence"].startswith("Only the C/D results cross machines")


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("machines", [2, 3, 6])
def test_planted_a_communication_is_found_in_its_layer_only(machines, regime):
    cfg = _config(machines, regime)
    qk, vp = layouts.state_products(layouts.plant(cfg, A_STEPS, C_STEPS))
    block, layer, mu, nu = cfg.n // machines, 0, 0, 1
    # head μ writes −a I from its own block's rows into machine ν's block columns
    own, other = slice(mu * block, (mu + 1) * block), slice(nu * block, (nu + 1) * block)
    vp[layer, mu, own, other] -= 0.1 * np.eye(block)
    model = LinearTransformer(cfg)
    model.load_state_dict(layouts.narrow_products_to_state(cfg, qk, vp))
    view = _view(model.eval()).json
    sent = [lay["layer"] for lay in view["layers"] if lay["a_columns_sent"]]
    assert sent == [layer]
    assert view["a_columns_sent"]
    assert view["layers"][layer]["cross_a_any_ablation"] != pytest.approx(1.0, abs=1e-6)
    # exact: the ablation zeroes entries that are 0 already, the same geo.layer runs on
    assert all(lay["cross_a_any_ablation"] == 1.0 for lay in view["layers"][1:])
    heads = view["layers"][layer]["heads"]
    assert heads[mu]["cross_a_share"] > 0.01
    assert all(h["cross_a_share"] <= 1e-12 for h in heads if h["head"] != mu)
    assert heads[mu]["cross_a_any_share"] == pytest.approx(heads[mu]["cross_a_share"])
    # machine μ writes ν's block columns (d + d' floats each) on top of the C/D results
    floats = view["floats_per_machine_round"]
    assert floats["network_a"] == (cfg.d + cfg.d_prime) * block
    assert floats["network"] == floats["network_a"] + _cd_floats(cfg)
    assert view["sentence"].startswith("A columns cross machines")


@pytest.mark.parametrize("machines", [2, 3])
def test_reading_another_machines_a_columns_is_communication(machines):
    """A head whose values read machine ν's A/B columns into its own block: nothing written
    across, but ν's columns are sent to μ (`cross_a_any_share`, `cross_a_any_ablation`)."""
    cfg = _config(machines, "distributed-open")  # the paper's values cannot read across
    qk, vp = layouts.state_products(layouts.plant(cfg, A_STEPS, C_STEPS))
    block, layer, mu, nu = cfg.n // machines, 1, 0, 1
    own, other = slice(mu * block, (mu + 1) * block), slice(nu * block, (nu + 1) * block)
    vp[layer, mu, other, own] -= 0.1 * np.eye(block)
    model = LinearTransformer(cfg)
    model.load_state_dict(layouts.narrow_products_to_state(cfg, qk, vp))
    view = _view(model.eval()).json
    lay = view["layers"][layer]
    assert lay["heads"][mu]["cross_a_share"] <= 1e-12
    assert lay["heads"][mu]["cross_a_any_share"] > 0.01
    assert lay["a_columns_sent"]
    assert [x["layer"] for x in view["layers"] if x["a_columns_sent"]] == [layer]
    assert view["sentence"].startswith("A columns cross machines")


@pytest.mark.parametrize("regime", REGIMES)
def test_every_field_is_in_the_schema_doc(regime):
    view = _view(layouts.plant(_config(3, regime), A_STEPS, C_STEPS)).json
    text = (ROOT / SCHEMA).read_text()
    documented = set(re.findall(r"`([A-Za-z_0-9-]+)`", text))

    def keys(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield k
                yield from keys(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from keys(v)

    assert "`views.communication`" in text
    assert set(keys(view)) <= documented


def test_the_report_draws_the_heatmap_only_where_the_view_ran():
    from eagle_probe.extract import extract
    from eagle_probe.plots import extraction_figures

    task = TaskConfig(n=6, d=6, rank=3)
    model = layouts.plant(_config(3), A_STEPS, C_STEPS)
    ex = extract(
        model, task, views=("communication", "weights"), control=False, probe_batch_size=8,
        test_batch=32, tuning_batch=8,
    )  # fmt: skip
    assert "communication" in extraction_figures(ex)
    ex.views.pop("communication")
    assert "communication" not in extraction_figures(ex)


# --- averaging: the C/D write factors and the copies' spread (the paper's architecture) ---------


def _context(model):
    return make_context(model, TaskConfig(n=6, d=6, rank=3), probes=16, held_out=256)


def _scaled(cfg: ModelConfig, layer: int, pairs, factor: float):
    """The paper's plant with head μ's write into machine ν's C/D copy times `factor` in `layer`,
    for every (μ, ν) of `pairs`."""
    qk, vp = layouts.state_products(layouts.plant(cfg, A_STEPS, C_STEPS))
    n, n_prime = cfg.n, cfg.n_prime
    for mu, nu in pairs:
        rows = slice(n + mu * n_prime, n + (mu + 1) * n_prime)
        cols = slice(n + nu * n_prime, n + (nu + 1) * n_prime)
        vp[layer, mu, rows, cols] *= factor
    model = LinearTransformer(cfg)
    model.load_state_dict(layouts.narrow_products_to_state(cfg, qk, vp))
    return model.eval()


def _cross_pairs(machines: int) -> list[tuple[int, int]]:
    return [(mu, nu) for mu in range(machines) for nu in range(machines) if mu != nu]


@pytest.mark.parametrize("machines", [2, 3, 6])
def test_paper_plant_averages_with_one_factor_and_its_copies_stay_equal(machines):
    view = _view(layouts.plant(_config(machines), A_STEPS, C_STEPS)).json
    for lay, c in zip(view["layers"], C_STEPS, strict=True):
        # the plant writes −c from every machine's copy into every copy (normalize none: units 1)
        assert np.array(lay["cd_factors"]) == pytest.approx(np.full((machines,) * 2, -c))
        assert lay["cd_within"] == pytest.approx(-c, rel=1e-12)
        assert lay["cd_cross"] == pytest.approx(-c, rel=1e-12)
        assert lay["cd_ratio"] == pytest.approx(1.0, abs=1e-12)
        assert lay["cd_factor_residual"] <= 1e-12
        assert lay["d_spread"] <= 1e-12 and lay["c_spread"] <= 1e-12
    assert "Averaging: each head writes the other machines' C/D copies ×1, ×1 " in view["sentence"]
    assert "D copies differ from their mean by 0%, 0% after each layer" in view["sentence"]


def test_the_open_architecture_has_no_copies_to_average():
    view = _view(layouts.plant(_config(3, "distributed-open"), A_STEPS, C_STEPS)).json
    assert not {"cd_ratio", "d_spread"} & set(view["layers"][0])
    assert "Averaging" not in view["sentence"]


@pytest.mark.parametrize("machines", [2, 3])
def test_a_scaled_cross_machine_factor_comes_out_with_the_copies_spread(machines):
    """Every cross-machine C/D block of layer 0 times s: cross / within = s in that layer only,
    and the copies' spread after it is that of the update written out here in NumPy,
    D^ν = −c (B^ν A^νᵀ C + s Σ_{μ≠ν} B^μ A^μᵀ C), C^ν = C − c (G^ν C + s Σ_{μ≠ν} G^μ C)."""
    cfg, s, c = _config(machines), 1.7, C_STEPS[0]
    ctx = _context(_scaled(cfg, 0, _cross_pairs(machines), s))
    view = VIEWS["communication"].run(ctx).json
    first, second = view["layers"]
    assert first["cd_ratio"] == pytest.approx(s, rel=1e-12)
    assert first["cd_cross"] == pytest.approx(-s * c, rel=1e-12)
    assert first["cd_within"] == pytest.approx(-c, rel=1e-12)
    assert first["cd_factor_residual"] <= 1e-12
    assert second["cd_ratio"] == pytest.approx(1.0, abs=1e-12)
    # the first layer, from equal copies (normalize none: the prompt as the layer sees it)
    z0 = ctx.held_out.z0[: view["prompts"]]
    d, n, size = cfg.d, cfg.n, cfg.n // machines
    A, B, C = z0[:, :d, :n], z0[:, d:, :n], z0[:, :d, n:]
    parts = [slice(m * size, (m + 1) * size) for m in range(machines)]
    UC = np.stack([A[..., p] @ A[..., p].swapaxes(-1, -2) @ C for p in parts], 1)  # (b, M, d, n')
    UD = np.stack([B[..., p] @ A[..., p].swapaxes(-1, -2) @ C for p in parts], 1)
    f = np.full((machines, machines), -s * c)
    np.fill_diagonal(f, -c)
    copies_c = C[:, None] + np.einsum("mv,bmij->bvij", f, UC)  # copy ν: C + Σ_μ f[μ, ν] U^μ
    copies_d = np.einsum("mv,bmij->bvij", f, UD)

    def spread(X):
        mean = X.mean(1)
        dev = np.linalg.norm(X - mean[:, None], axis=(-2, -1)).max(1)
        return float(np.median(dev / np.linalg.norm(mean, axis=(-2, -1))))

    assert first["c_spread"] == pytest.approx(spread(copies_c), rel=1e-9)
    assert first["d_spread"] == pytest.approx(spread(copies_d), rel=1e-9)
    assert first["d_spread"] > 0.01 and second["d_spread"] > 0.01  # parted, and stay parted


def test_one_scaled_block_is_its_own_factor():
    """Head 0's write into machine 1's copy in layer 1 times 3: f[0, 1] = 3 f[0, 0], the mean over
    the six cross pairs (5 + 3) / 6, the other layer and pairs untouched."""
    machines, s, c = 3, 3.0, C_STEPS[1]
    view = _view(_scaled(_config(machines), 1, [(0, 1)], s)).json
    first, second = view["layers"]
    f = np.array(second["cd_factors"])
    expected = np.full((machines, machines), -c)
    expected[0, 1] = -s * c
    assert f == pytest.approx(expected, rel=1e-12)
    assert second["cd_ratio"] == pytest.approx((5 + s) / 6, rel=1e-12)
    assert first["cd_ratio"] == pytest.approx(1.0, abs=1e-12)
    assert first["d_spread"] <= 1e-12 and second["d_spread"] > 0.01
