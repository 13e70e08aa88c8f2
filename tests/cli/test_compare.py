"""`eagle-probe compare` (`cli/compare.py`): the JSON and figures it writes for a planted and a
shipped model, and an unknown sweep refused before anything is written."""

import json

from plants import PLANTED_STEPS
from plants import eagle as planted_model


def test_cli_compare_writes_json_and_figures(tmp_path, capsys):
    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    a, c = PLANTED_STEPS["none"]
    model, task = planted_model(a, c)
    path = tmp_path / "planted.pt"
    checkpoint.save(path, model, task)
    out = tmp_path / "cmp"
    code = main(["compare", str(path), "--out", str(out), "--prompts", "16", "--sweeps", "scale"])
    assert code == 0
    data = json.loads((out / "compare.json").read_text())
    assert data["schema"] == "eagle-probe compare" and list(data["sweeps"]) == ["scale"]
    assert {p.name for p in out.iterdir()} >= {"compare.json", "compare_sweeps.png"}
    capsys.readouterr()
    assert main(["compare", str(path), "--out", str(tmp_path / "x"), "--sweeps", "size"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown sweep" in err[0]
    assert not (tmp_path / "x").exists()


def test_the_shipped_one_layer_lsa_compares(tmp_path, capsys):
    from conftest import TRAINED

    from eagle_probe.cli import main

    out = tmp_path / "cmp"
    argv = ["compare", str(TRAINED / "lsa_1layer.pt"), "--out", str(out), "--prompts", "16"]
    assert main(argv + ["--sweeps", "query_scale,samples"]) == 0
    data = json.loads((out / "compare.json").read_text())
    assert data["model"]["verdict"] == "GD"
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.json",
        "compare_interpolation.png",
        "compare_sensitivity.png",
        "compare_sweeps.png",
        "iteration_map.png",
    ]
    assert "query_scale" in capsys.readouterr().out
