"""Export a recovered algorithm as a standalone NumPy solver.

The exported file is `solver_template.py` with its constants block replaced by the extraction's
numbers and a provenance header. It imports only NumPy.
"""

from __future__ import annotations

import json
import os
import pprint
from pathlib import Path
from typing import Any

from eagle_probe import __version__
from eagle_probe.checkpoint import atomic_write_text

TEMPLATE = Path(__file__).with_name("solver_template.py")
BEGIN, END = "# --- BEGIN RECOVERED CONSTANTS ---", "# --- END RECOVERED CONSTANTS ---"


def solver_source(extraction: dict[str, Any], projectors: list | None = None) -> str:
    """The text of solver.py for an extraction (the dict of `Extraction.to_json()`)."""
    model = extraction["model"]
    layers = [
        {
            "a_step": float(lay["a_step"]),
            "c_step": float(lay["c_step"]),
            "eta": _num(lay.get("eta")),
            "gamma": _num(lay.get("gamma")),
            "fidelity": _num(lay.get("fidelity")),
        }
        for lay in extraction["layers"]
    ]
    provenance = {
        "source": "eagle-probe extract",
        "eagle_probe": __version__,
        "checkpoint": model.get("checkpoint"),
        "checkpoint_sha256": model.get("sha256"),
        "regime": model["regime"],
        "sizes": {k: model[k] for k in ("n", "d", "n_prime", "d_prime")},
        "fidelity_per_layer": [lay["fidelity"] for lay in layers],
    }
    constants = "\n".join(
        [
            BEGIN,
            f"PROVENANCE = {pprint.pformat(provenance, width=96, sort_dicts=False)}",
            "# One entry per layer of the network: EAGLE coefficients, network's internal units.",
            f"LAYERS = {pprint.pformat(layers, width=96, sort_dicts=False)}",
            "# How the network scaled its prompts before the first layer.",
            f"NORMALIZE = {model['normalize']!r}",
            f"REGIME = {model['regime']!r}",
            f"MACHINES = {int(model.get('machines') or 1)}",
            f"PROJECTORS = {_matrix_list(projectors)}",
            END,
        ]
    )
    source = TEMPLATE.read_text()
    start, stop = source.index(BEGIN), source.index(END) + len(END)
    header = _header(provenance)
    body = source[:start] + constants + source[stop:]
    return header + body


def write_solver(
    path: str | os.PathLike, extraction: dict[str, Any], projectors: list | None = None
) -> Path:
    """Write solver.py atomically; returns its path."""
    path = Path(path)
    atomic_write_text(path, solver_source(extraction, projectors))
    return path


def _header(provenance: dict[str, Any]) -> str:
    fid = ", ".join("n/a" if f is None else f"{f:.3g}" for f in provenance["fidelity_per_layer"])
    lines = [
        "# Exported by eagle-probe " + str(provenance["eagle_probe"]),
        f"# checkpoint: {provenance['checkpoint']}",
        f"# checkpoint sha256: {provenance['checkpoint_sha256']}",
        f"# regime: {provenance['regime']}; sizes: {json.dumps(provenance['sizes'])}",
        f"# per-layer fidelity ‖Z_net − Z_EAGLE‖²_F / #entries: {fid}",
        "",
    ]
    return "\n".join(lines)


def _num(value):
    return None if value is None else float(value)


def _matrix_list(projectors) -> str:
    if projectors is None:
        return "None"
    return repr([[[round(float(v), 17) for v in row] for row in P] for P in projectors])
