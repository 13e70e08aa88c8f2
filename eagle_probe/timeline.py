"""Across training: when each layer becomes its algorithm.

`eagle-probe train --save-every K` keeps the weights of steps 0, K, 2K, … (and of the last step)
in a run directory, one small checkpoint each (`checkpoint_name`): the training model's current
weights, not the best validated ones, with `metrics` {"step", "train_loss", "spikes"} (the loss
spikes since the previous checkpoint). `timeline(run_dir)` extracts every checkpoint with the
cheap views (CHEAP_VIEWS: steps, one-step gaps, the projection's cost, the label), all on the
same probe, held-out and control prompts, and reads

    per checkpoint   test MSE (held-out prompts), the verdict, and per layer the relative
                     one-step gap to the family read, the steps a_l, c_l, η_l, γ_l and the label
    per layer        the step at which it is first labelled EAGLE (`first`) and the step from
                     which every later checkpoint labels it EAGLE (`stays_from`: "layer 2 is
                     EAGLE from step 1,800 on"); the same for at least EAGLE-like
    spikes           every loss spike the checkpoints recorded (step, loss, batch max ‖A‖₂)

Sample layout (GD, GD++ and preconditioned GD): the labels are the sample verdict's, the steps
GD++'s γ (the data transform; none in the last layer) and η (the gradient step, the readout's
frame), the last layer's gap the one on the D slot it is read from, and per layer `recognised`
is when the layer is first and lastly named GD, GD++ or preconditioned GD, `final` when it is
first and lastly named what it is named at the end ("layer 1 is GD++ from step 300 on").

The result's `json` is the timeline.json schema in docs/extraction-schema.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from eagle_probe import budget
from eagle_probe.errors import EagleProbeError
from eagle_probe.progress import timed

SCHEMA = "eagle-probe timeline"
SCHEMA_VERSION = 1
CHEAP_VIEWS = ("eagle", "fidelity", "projection", "verdict")
SAMPLE_VIEWS = CHEAP_VIEWS[:-1] + ("algorithm", "verdict")  # the sample verdict's names
RECOGNISED = ("GD", "GD++", "preconditioned GD")  # sample-layout labels of a working algorithm
PATTERN = re.compile(r"^step_(\d+)\.pt$")
LIKE = ("EAGLE", "EAGLE-like")  # labels that count as "at least EAGLE-like"


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint of training step `step` in a run directory."""
    return f"step_{step:08d}.pt"


def run_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in a run directory, by step."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise EagleProbeError(
            f"run directory {run_dir} does not exist; train with --save-every K to make one"
        )
    found = []
    for path in run_dir.iterdir():
        match = PATTERN.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    if not found:
        raise EagleProbeError(
            f"run directory {run_dir} holds no checkpoints (step_NNNNNNNN.pt); train with "
            "--save-every K to keep them"
        )
    return sorted(found)


def emergence(steps: list[int], labels: list[str], accept: tuple[str, ...]) -> dict[str, Any]:
    """The first step whose label is in `accept`, and the step from which every later label is
    (None when the last label is not)."""
    first = next((s for s, lab in zip(steps, labels, strict=True) if lab in accept), None)
    stays = None
    for s, lab in reversed(list(zip(steps, labels, strict=True))):
        if lab not in accept:
            break
        stays = s
    return {"first": first, "stays_from": stays}


@dataclass
class Timeline:
    """What `timeline` returns: the JSON and one row per (checkpoint, layer)."""

    json: dict[str, Any]
    layers: pd.DataFrame  # step, layer, one_step_gap, a_step, c_step, eta, gamma, label

    def render(self) -> str:
        lines = []
        for e in self.json["emergence"]:
            if "recognised" in e:  # the sample layout
                final = e["final"]["stays_from"]
                text = f"layer {e['layer']}: "
                text += (
                    f"{e['label']} from step {final:,} on"
                    if final is not None and e["label"] in RECOGNISED
                    else f"{e['label']} at the end"
                )
                if e["final"]["first"] is not None and e["final"]["first"] != final:
                    text += f" (first at step {e['final']['first']:,})"
                rec = e["recognised"]["stays_from"]
                if rec is not None and rec != final:
                    text += f"; GD, GD++ or preconditioned GD from step {rec:,}"
                lines.append(text)
                continue
            stay = e["eagle"]["stays_from"]
            like = e["eagle_like"]["stays_from"]
            text = f"layer {e['layer']}: "
            text += f"EAGLE from step {stay:,} on" if stay is not None else "not EAGLE at the end"
            if e["eagle"]["first"] is not None and e["eagle"]["first"] != stay:
                text += f" (first at step {e['eagle']['first']:,})"
            if like is not None and like != stay:
                text += f"; at least EAGLE-like from step {like:,}"
            lines.append(text)
        c = self.json["checkpoints"]
        lines.append(
            f"{len(c)} checkpoints, steps {c[0]['step']:,} … {c[-1]['step']:,}; test MSE "
            f"{c[0]['mse']:.3g} → {c[-1]['mse']:.3g}; {len(self.json['spikes'])} loss spike(s)"
        )
        return "\n".join(lines)


def _check_same_run(run_dir, path: Path, cfg: tuple, first_cfg: tuple, first_path: Path) -> None:
    """Refuse a checkpoint whose (model, task) configs differ from the run's first one."""
    if cfg == first_cfg:
        return
    key = "model" if cfg[0] != first_cfg[0] else "task"
    which = 0 if key == "model" else 1
    diff = sorted(k for k in cfg[which] if cfg[which][k] != first_cfg[which].get(k))
    raise EagleProbeError(
        f"checkpoints of different configurations in {run_dir}: {path.name} and "
        f"{first_path.name} differ in the {key} config ({', '.join(diff)}); a timeline "
        "reads the checkpoints of one run"
    )


def _layer_entries(ex, samples: bool) -> list[dict[str, Any]]:
    """Each layer's steps, one-step gap and label in one checkpoint's extraction (in the sample
    layout GD++'s names as the verdict reads them, the last layer on its D slot)."""
    verdict = ex.views["verdict"].json
    table = ex.views["eagle"].tables["eagle"]
    layers = []
    last = len(verdict["layers"]) - 1
    for row, lab in zip(table.to_dict("records"), verdict["layers"], strict=True):
        entry = {
            "layer": int(row["layer"]),
            "one_step_gap": lab["one_step_relative"],
            "a_step": row["a_step"],
            "c_step": row["c_step"],
            "eta": row["eta"],
            "gamma": row["gamma"],
            "label": lab["label"],
        }
        if samples:
            entry |= {"eta": lab["eta"], "gamma": lab["gamma"]}
            if entry["layer"] == last:
                entry["one_step_gap"] = lab["one_step_relative_D"]
        layers.append(entry)
    return layers


def _emergence_rows(frame: pd.DataFrame, points: list[dict], samples: bool) -> list[dict]:
    """For each layer, the step its label settles: the final and a recognised one in the
    sample layout, EAGLE and EAGLE-like in the feature layout."""
    steps = [p["step"] for p in points]
    emerge = []
    for layer in sorted(frame.layer.unique()) if len(frame) else []:
        labels = [p["layers"][layer]["label"] for p in points]
        if samples:
            emerge.append(
                {
                    "layer": int(layer),
                    "label": labels[-1],
                    "final": emergence(steps, labels, (labels[-1],)),
                    "recognised": emergence(steps, labels, RECOGNISED),
                }
            )
            continue
        emerge.append(
            {
                "layer": int(layer),
                "eagle": emergence(steps, labels, ("EAGLE",)),
                "eagle_like": emergence(steps, labels, LIKE),
            }
        )
    return emerge


def timeline(
    run_dir: str | Path,
    *,
    seed: int = 0,
    test_batch: int = 1024,
    max_bytes: float = budget.DEFAULT_BYTES,
) -> Timeline:
    """Extract every checkpoint of a run directory with the cheap views (module text)."""
    from eagle_probe import checkpoint
    from eagle_probe.extract import extract
    from eagle_probe.files import jsonable

    found = run_checkpoints(run_dir)
    rows, points, spikes = [], [], []
    first_cfg = None
    timings = {"extract": 0.0}
    for step, path in found:
        model, task, metrics = checkpoint.load(path, max_bytes=max_bytes)
        cfg = (model.cfg.to_dict(), task.to_dict())
        if first_cfg is None:
            first_cfg, first_path = cfg, path
        _check_same_run(run_dir, path, cfg, first_cfg, first_path)
        recorded = metrics.get("step")  # metrics are checked on loading (`check_metrics`)
        if recorded is not None and recorded != step:
            raise EagleProbeError(
                f"{path.name} records step {recorded}, not the {step} its name says"
            )
        with timed(timings, "extract"):
            views = SAMPLE_VIEWS if model.cfg.samples else CHEAP_VIEWS
            ex = extract(model, task, views=views, seed=seed, test_batch=test_batch)
        layers = _layer_entries(ex, model.cfg.samples)
        rows += [{"step": step} | entry for entry in layers]
        spikes += metrics.get("spikes", [])
        points.append(
            {
                "step": step,
                "file": path.name,
                "mse": ex.network["mse"],
                "zero_mse": ex.network["zero_mse"],
                "train_loss": metrics.get("train_loss"),
                "verdict": ex.verdict.get("label"),
                "family": ex.verdict.get("family"),
                "read_as": ex.info.get("family"),
                "layers": layers,
            }
        )
    frame = pd.DataFrame(rows)
    samples = first_cfg[0].get("tokens") == "samples"
    model_cfg, task_cfg = first_cfg
    out = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_dir": str(run_dir),
        "model": model_cfg,
        "task": task_cfg,
        "views": list(SAMPLE_VIEWS if samples else CHEAP_VIEWS),
        "seed": seed,
        "test_prompts": test_batch,
        "checkpoints": points,
        "emergence": _emergence_rows(frame, points, samples),
        "spikes": sorted(spikes, key=lambda s: s["step"]),
        "timings": timings,
    }
    return Timeline(json=jsonable(out), layers=frame)
