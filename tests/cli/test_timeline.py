"""`eagle-probe timeline` (`cli/timeline.py`) on a run directory of planted checkpoints: a
missing run or an occupied --out is refused in one line before any extraction, and the JSON and
figure it writes read the planted EAGLE steps at every checkpoint. A trained run's timeline, and
the bad run directories made from it, are `test_timeline.py`'s."""

import json

import numpy as np
from conftest import RTOL
from plants import eagle as planted_model

from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.timeline import checkpoint_name

A_STEPS, C_STEPS = [0.05, 0.04], [0.09, 0.08]


def _one_line_error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_a_missing_run_directory_is_refused_before_out_is_made(tmp_path, capsys):
    out = tmp_path / "tl"
    text = _one_line_error(["timeline", str(tmp_path / "nowhere"), "--out", str(out)], capsys)
    assert "does not exist; train with --save-every K" in text
    assert list(tmp_path.iterdir()) == []


def test_planted_checkpoints_read_as_eagle_and_an_occupied_out_needs_force(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for step in (0, 10):
        model, task = planted_model(A_STEPS, C_STEPS, normalize="spectral", n=6, d=6)
        checkpoint.save(run / checkpoint_name(step), model, task, {"step": step})
    out = tmp_path / "tl"
    out.mkdir()
    (out / "notes.txt").write_text("kept\n")
    argv = ["timeline", str(run), "--out", str(out), "--test-batch", "64"]
    assert "already exists and is not empty; pass --force" in _one_line_error(argv, capsys)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert main([*argv, "--force"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["layer 0: EAGLE from step 0 on", "layer 1: EAGLE from step 0 on"]
    assert printed[-1].startswith(f"wrote {out / 'timeline.json'} and ")
    data = json.loads((out / "timeline.json").read_text())
    assert [p["step"] for p in data["checkpoints"]] == [0, 10]
    for point in data["checkpoints"]:
        layers = point["layers"]
        assert [lay["label"] for lay in layers] == ["EAGLE", "EAGLE"], point
        np.testing.assert_allclose([lay["a_step"] for lay in layers], A_STEPS, rtol=RTOL)
        np.testing.assert_allclose([lay["c_step"] for lay in layers], C_STEPS, rtol=RTOL)
    assert (out / "notes.txt").read_text() == "kept\n"
    assert (out / "timeline_labels.png").stat().st_size > 1000
