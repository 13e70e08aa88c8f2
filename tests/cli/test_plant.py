"""`eagle-probe plant` (`cli/plant.py`): the checkpoint it writes runs the planted steps (the
extraction reads them back; its products are `layouts.plant`'s), records what was planted, and
every wrong argument is one line and exit 2 with nothing written."""

import json

import numpy as np
import pytest

from eagle_probe import checkpoint, layouts
from eagle_probe.cli import main
from eagle_probe.model import ModelConfig


def test_cli_plant_then_extract(tmp_path, capsys):
    ckpt = tmp_path / "planted.pt"
    assert (
        main(
            [
                "plant",
                "--n",
                "8",
                "--d",
                "6",
                "--a-steps",
                "0.05,0.04",
                "--c-steps",
                "0.09,0.08",
                "--heads",
                "2",
                "--dtype",
                "float64",
                "-o",
                str(ckpt),
            ]
        )
        == 0
    )
    out = tmp_path / "ex"
    assert main(["extract", str(ckpt), "--out", str(out), "--probe-batch", "32"]) == 0
    printed = capsys.readouterr().out
    assert "layer" in printed and "fid 1-step" in printed and "W_QK = diag(1 I_8, 0)" in printed
    data = json.loads((out / "extraction.json").read_text())
    assert data["model"]["sha256"] == checkpoint.sha256(ckpt)
    layers = data["layers"]
    assert [round(lay["a_step"], 10) for lay in layers] == [0.05, 0.04]
    for key in ("a_step", "c_step", "eta", "gamma", "fidelity", "fidelity_one_step", "label"):
        assert key in layers[0]
    for view in ("eagle", "fidelity", "projection", "optimum", "polynomial", "verdict"):
        assert view in data["views"]
    proj = data["views"]["projection"]["layers"]
    assert [round(lay["a_step"], 10) for lay in proj] == [0.05, 0.04]
    # an existing, non-empty output directory needs --force
    assert main(["extract", str(ckpt), "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["plant", "--a-steps", "0.1,0.2", "--c-steps", "0.1", "-o", "p.pt"], "has 2 values"),
        (["plant", "--a-steps", "x", "--c-steps", "0.1", "-o", "p.pt"], "comma-separated"),
        (["plant", "--a-steps", "0.1", "--c-steps", "nan", "-o", "p.pt"], "finite"),
        (
            ["plant", "--a-steps", "0.1", "--c-steps", "0.1", "--dtype", "int8", "-o", "p.pt"],
            "unknown dtype",
        ),
    ],
)
def test_plant_user_errors(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "p.pt").exists()


def test_the_checkpoint_runs_the_planted_steps_and_records_them(tmp_path, capsys):
    out = tmp_path / "p.pt"
    argv = ["plant", "--n", "6", "--d", "4", "--a-steps", "0.05,0.04", "--c-steps", "0.09,0.08"]
    assert main([*argv, "--regime", "distributed", "--machines", "3", "--cross-a", "0.5",
                 "--dtype", "float64", "-o", str(out)]) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() == (
        f"wrote {out}: 2 planted eagle-distributed layers, 3 head(s), float64"
    )
    model, task, metrics = checkpoint.load(out)
    assert metrics["planted"] == {
        "a_steps": [0.05, 0.04],
        "c_steps": [0.09, 0.08],
        "family": "eagle-distributed",
        "cross_a": 0.5,
    }
    cfg = model.cfg
    assert (cfg.regime, cfg.normalize, cfg.dtype, cfg.machines) == (
        "distributed", "none", "float64", 3
    )  # fmt: skip
    assert (task.n, task.d) == (6, 4)
    want = layouts.plant(
        ModelConfig(regime="distributed", n=6, d=4, n_layers=2, machines=3, normalize="none",
                    dtype="float64"),
        [0.05, 0.04], [0.09, 0.08], cross_a=0.5,
    )  # fmt: skip
    for got, expected in zip(layouts.state_products(model), layouts.state_products(want),
                             strict=True):  # fmt: skip
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)


def test_a_constrained_plant_records_its_sketch_seed(tmp_path):
    out = tmp_path / "p.pt"
    argv = ["plant", "--n", "6", "--d", "4", "--a-steps", "0.1", "--c-steps", "0.2"]
    assert main([*argv, "--regime", "constrained", "--rank", "3", "--sketch-seed", "4",
                 "-o", str(out)]) == 0  # fmt: skip
    _, _, metrics = checkpoint.load(out)
    assert metrics["planted"]["sketch_seed"] == 4
    assert metrics["planted"]["family"] == "eagle-sketched"
    assert json.dumps(metrics)  # plain data


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--regime", "nowhere"], "unknown regime 'nowhere'; choose from"),
        (["--regime", "distributed", "--machines", "4"], "--machines 4 must divide --n 6"),
        (["--regime", "constrained", "--rank", "7"], "--rank 7 must lie in [1, --n = 6]"),
        (["--cross-a", "0.5"], "--cross-a needs a distributed regime, not centralized"),
    ],
)
def test_regime_arguments_that_cannot_be_planted(extra, match, capsys, tmp_path):
    out = tmp_path / "p.pt"
    argv = ["plant", "--n", "6", "--d", "4", "--a-steps", "0.1", "--c-steps", "0.2", *extra]
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1
    assert not out.exists()
