"""A regime is its registry entry: a new one, registered here and nowhere else, builds its model,
takes its family's plant and runs `eagle-probe extract` end to end (checkpoint, capture, views,
verdict, extraction.json, solver.py, report.html)."""

import json
from dataclasses import replace

import numpy as np
import pytest

from eagle_probe import checkpoint, cli, regimes
from eagle_probe.layouts import plant
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig

A_STEPS, C_STEPS = [0.3, 0.2], [0.5, 0.4]

# Entries that exist nowhere but here: copies of a registered entry with one property changed.
THROWAWAY = {
    # the paper's distributed layout on 2 machines, but a set of W_Q, W_K, W_V per machine
    "distributed-unshared": (
        replace(
            regimes.get("distributed"),
            name="distributed-unshared",
            summary="distributed-unshared: the distributed layout, a set of weights per machine",
            paper=False,
            checkpoint="distributed_unshared.pt",
            sharable=False,
        ),
        dict(machines=2),
    ),
    # the compute-limited model with a query/key one wider than its sketch rank
    "constrained-wide": (
        replace(
            regimes.get("constrained"),
            name="constrained-wide",
            summary="constrained-wide: one head of query/key width r + 1",
            paper=False,
            checkpoint="constrained_wide.pt",
            _qk=lambda cfg: cfg.rank + 1,
        ),
        dict(rank=3),
    ),
}


@pytest.fixture(params=sorted(THROWAWAY))
def throwaway(request, monkeypatch):
    """A regime registered for one test; the registry is restored afterwards."""
    entry, sizes = THROWAWAY[request.param]
    monkeypatch.setitem(regimes.REGIMES, entry.name, entry)
    return entry, sizes


def test_the_registry_holds_only_its_own_entries_outside_the_fixture():
    assert not set(THROWAWAY) & set(regimes.REGIMES)
    assert tuple(regimes.REGIMES) == regimes.NAMES


def test_a_regime_from_its_registry_entry_alone_runs_extract_end_to_end(throwaway, tmp_path):
    entry, sizes = throwaway
    cfg = ModelConfig(regime=entry.name, n=8, d=6, n_layers=2, dtype="float64", **sizes)
    assert cfg.spec is entry and cfg.width == entry.width(cfg) and cfg.qk == entry.qk(cfg)
    model = plant(cfg, A_STEPS, C_STEPS)  # the entry's own family, exact EAGLE weights
    task = TaskConfig(n=8, d=6)
    path = tmp_path / entry.checkpoint
    checkpoint.save(path, model, task)

    out = tmp_path / "extraction"
    argv = ["extract", str(path), "--out", str(out), "--probe-batch", "32", "--no-progress"]
    assert cli.main(argv) == 0

    assert {"extraction.json", "solver.py", "report.html"} <= {p.name for p in out.iterdir()}
    result = json.loads((out / "extraction.json").read_text())
    assert result["model"]["regime"] == entry.name
    layers = result["views"]["eagle"]["layers"]
    np.testing.assert_allclose([lay["a_step"] for lay in layers], A_STEPS, rtol=1e-6)
    np.testing.assert_allclose([lay["c_step"] for lay in layers], C_STEPS, rtol=1e-6)
    verdict = result["views"]["verdict"]
    assert verdict["model"]["family"] == entry.families[0]
    assert verdict["model"]["label"] == "EAGLE"
    assert [lay["label"] for lay in verdict["layers"]] == ["EAGLE"] * len(A_STEPS)
    assert result["export"]["faithful_gap"] <= 1e-6
    for view in entry.views:  # its own views ran
        assert view in result["views"]
