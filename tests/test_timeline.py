"""Across training: `train(save_every=K)` keeps the checkpoints, `timeline` reads them."""

import json

import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.cli import main
from eagle_probe.extract import extract
from eagle_probe.model import ModelConfig
from eagle_probe.tasks import TaskConfig
from eagle_probe.timeline import CHEAP_VIEWS, checkpoint_name, emergence, timeline
from eagle_probe.train import TrainConfig, train

MODEL = ModelConfig(n=6, d=6, n_layers=2, normalize="spectral")
TASK = TaskConfig(n=6, d=6, rank=3)
RUN = TrainConfig(steps=240, batch=128, lr=3e-3, eval_every=80, eval_batch=512)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny run that saved its weights every 40 steps, and the (step, info) pairs it saved."""
    out = tmp_path_factory.mktemp("run")
    saved = []

    def save(step, model, info):
        saved.append((step, info))
        checkpoint.save(out / checkpoint_name(step), model, TASK, info)

    final, _ = train(MODEL, TASK, RUN, progress=False, save_every=40, on_save=save)
    return out, saved, final


def test_save_every_keeps_step_zero_every_k_and_the_last(run_dir):
    out, saved, final = run_dir
    assert [s for s, _ in saved] == [0, 40, 80, 120, 160, 200, 240]
    assert sorted(p.name for p in out.iterdir()) == [checkpoint_name(s) for s, _ in saved]
    first, _, _ = checkpoint.load(out / checkpoint_name(0))
    last, _, metrics = checkpoint.load(out / checkpoint_name(240))
    assert metrics["step"] == 240 and metrics["train_loss"] > 0
    # step 0 is the initialisation; the last checkpoint holds the current (not the best) weights
    assert not torch.equal(first.W_QK(), last.W_QK())
    with pytest.raises(ValueError, match="save_every"):
        train(MODEL, TASK, RUN, progress=False, save_every=-1)


def test_emergence_equals_extracting_checkpoints_one_by_one(run_dir):
    out, saved, _ = run_dir
    result = timeline(out)
    steps = [s for s, _ in saved]
    labels = {}  # layer -> labels over the run, from extract on each checkpoint
    for step in steps:
        model, task, _ = checkpoint.load(out / checkpoint_name(step))
        ex = extract(model, task, views=CHEAP_VIEWS, seed=0, test_batch=1024)
        for lay in ex.views["verdict"].json["layers"]:
            labels.setdefault(lay["layer"], []).append(lay["label"])
    assert [p["step"] for p in result.json["checkpoints"]] == steps
    for entry in result.json["emergence"]:
        seq = labels[entry["layer"]]
        for key, accept in (("eagle", {"EAGLE"}), ("eagle_like", {"EAGLE", "EAGLE-like"})):
            first = next((s for s, lab in zip(steps, seq, strict=True) if lab in accept), None)
            stays = None
            for i in range(len(steps)):
                if all(lab in accept for lab in seq[i:]):
                    stays = steps[i]
                    break
            assert entry[key] == {"first": first, "stays_from": stays}, (entry["layer"], key)
    assert any(e["eagle_like"]["first"] is not None for e in result.json["emergence"])


def test_emergence_of_label_sequences():
    steps = [0, 10, 20, 30, 40]
    seq = ["not EAGLE", "EAGLE", "not EAGLE", "EAGLE", "EAGLE"]
    assert emergence(steps, seq, ("EAGLE",)) == {"first": 10, "stays_from": 30}
    assert emergence(steps[:3], seq[:3], ("EAGLE",)) == {"first": 10, "stays_from": None}
    assert emergence(steps, ["not EAGLE"] * 5, ("EAGLE",)) == {"first": None, "stays_from": None}


def test_cli_timeline_and_its_bad_inputs(run_dir, tmp_path, capsys):
    out, _, _ = run_dir
    dest = tmp_path / "tl"
    assert main(["timeline", str(out), "--out", str(dest), "--test-batch", "256"]) == 0
    data = json.loads((dest / "timeline.json").read_text())
    assert data["schema"] == "eagle-probe timeline" and len(data["checkpoints"]) == 7
    assert {p.name for p in dest.iterdir()} >= {"timeline.json", "timeline_labels.png"}
    capsys.readouterr()

    def one_line_error(argv) -> str:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        return err[0]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no checkpoints" in one_line_error(
        ["timeline", str(empty), "--out", str(tmp_path / "a")]
    )
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in (checkpoint_name(0), checkpoint_name(40)):
        (mixed / name).write_bytes((out / name).read_bytes())
    other, _ = train(
        ModelConfig(n=6, d=6, n_layers=3),
        TASK,
        TrainConfig(steps=2, batch=8, eval_batch=16),
        progress=False,
    )
    checkpoint.save(mixed / checkpoint_name(80), other, TASK, {"step": 80})
    text = one_line_error(["timeline", str(mixed), "--out", str(tmp_path / "b")])
    assert "different configurations" in text and "n_layers" in text
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    text = one_line_error(
        ["train", "--regime", "centralized", "--save-every", "0", "-o", str(tmp_path / "m.pt")]
    )
    assert "--save-every" in text


def test_schema_doc_lists_every_timeline_field(run_dir):
    from test_compare import documented_keys

    out, _, _ = run_dir
    data = timeline(out).json
    del data["model"], data["task"]  # the configs' own fields are docs/training.md's
    data["spikes"] = [
        {
            "step": 1,
            "loss": 1.0,
            "running_median": 0.1,
            "batch_max_norm_a": 9.0,
            "batch_median_norm_a": 3.0,
            "skipped": False,
        }
    ]
    assert not documented_keys(data)


def test_a_sample_layout_run_shows_when_gd_appears(tmp_path):
    """von Oswald et al.'s LSA, one layer, trained from a random start, its weights kept at a
    few steps and imported as a run directory: at step 0 it is no algorithm, at the end one GD
    step; the timeline says from which checkpoint on, with GD++'s step η (the readout's frame)
    positive at the end, and draws the names per layer."""
    from von_oswald import LSA
    from von_oswald import train as train_lsa

    from eagle_probe import layouts
    from eagle_probe.plots import timeline_figures

    def keep(step, model):
        if step in (0, 25, 50, 150):
            state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            imported, task = layouts.import_arrays("samples", state, n=10, dtype="float64")
            checkpoint.save(tmp_path / checkpoint_name(step), imported, task, {"step": step})

    torch.manual_seed(1)
    train_lsa(LSA(3, 1).double(), 10, 3, 150, seed=2, lr=2e-2, batch=256, on_step=keep)
    result = timeline(tmp_path, test_batch=256)
    points = result.json["checkpoints"]
    assert [p["step"] for p in points] == [0, 25, 50, 150]
    assert points[0]["verdict"] == "unrecognised" and points[-1]["verdict"] == "GD"
    (emerge,) = result.json["emergence"]
    assert emerge["label"] == "GD" and set(emerge) == {"layer", "label", "final", "recognised"}
    stays = emerge["final"]["stays_from"]
    assert stays is not None and all(
        p["layers"][0]["label"] == "GD" for p in points if p["step"] >= stays
    )
    assert points[-1]["layers"][0]["eta"] > 0 and points[-1]["layers"][0]["gamma"] is None
    assert f"layer 0: GD from step {stays:,} on" in result.render()
    figures = timeline_figures(result.json)
    texts = [t.get_text() for t in figures["timeline_labels"].legends[0].get_texts()]
    assert "GD" in texts and not [t for t in texts if "EAGLE" in t]
