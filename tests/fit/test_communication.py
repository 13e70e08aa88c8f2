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
