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


def test_compare_reads_the_extraction_it_is_given_and_only_that_models(
    tmp_path, capsys, monkeypatch
):
    """`compare --extraction DIR` takes the steps `extract --out DIR` wrote (no second
    extraction), and refuses, in one line and before writing anything, an extraction of another
    checkpoint or a file that is not one."""
    from eagle_probe import checkpoint
    from eagle_probe.cli import main

    a, c = PLANTED_STEPS["none"]
    model, task = planted_model(a, c)
    path, other = tmp_path / "planted.pt", tmp_path / "other.pt"
    checkpoint.save(path, model, task)
    checkpoint.save(other, *planted_model([x * 0.5 for x in a], c))
    ex = tmp_path / "ex"
    argv = ["extract", str(path), "--out", str(ex), "--probe-batch", "16", "--no-control"]
    assert main(argv + ["--no-progress"]) == 0
    written = json.loads((ex / "extraction.json").read_text())
    import eagle_probe.compare

    def no_second_extraction(*args, **kwargs):
        raise AssertionError("compare extracted again")

    monkeypatch.setattr(eagle_probe.compare, "_default_extraction", no_second_extraction)
    out = tmp_path / "cmp"
    argv = ["compare", str(path), "--out", str(out), "--prompts", "16", "--sweeps", "scale"]
    assert main(argv + ["--extraction", str(ex)]) == 0
    data = json.loads((out / "compare.json").read_text())
    assert data["steps"]["faithful"]["a_steps"] == [lay["a_step"] for lay in written["layers"]]
    capsys.readouterr()
    for bad, why in (
        ([str(other), "--extraction", str(ex)], "an extraction of another checkpoint"),
        ([str(path), "--extraction", str(tmp_path / "none.json")], "no file"),
        ([str(path), "--extraction", str(path)], "not readable JSON"),
    ):
        target = tmp_path / "refused"
        assert main(["compare", *bad, "--out", str(target), "--sweeps", "scale"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0], err
        assert not target.exists()
