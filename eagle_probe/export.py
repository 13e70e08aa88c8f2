"""Export a recovered algorithm as a standalone NumPy solver.

The exported file is `solver_template.py` with its constants block replaced by the extraction's
numbers and a provenance header. It imports only NumPy.

Every value taken from the extraction (the checkpoint's file name above all, which may hold any
character) is written as data: Python literals by `repr`/`pprint`, header comments as JSON
(`ensure_ascii`, so no line break or other control character survives), never pasted text.
"""

from __future__ import annotations

import json
import math
import os
import pprint
from pathlib import Path
from typing import Any

from eagle_probe import __version__
from eagle_probe.errors import EagleProbeError
from eagle_probe.files import atomic_write_text
from eagle_probe.solver_template import ETA_MAX, GAMMA_MAX, step_rule

TEMPLATE = Path(__file__).with_name("solver_template.py")
BEGIN, END = "# --- BEGIN RECOVERED CONSTANTS ---", "# --- END RECOVERED CONSTANTS ---"


def solver_source(extraction: dict[str, Any], projectors: list | None = None) -> str:
    """The text of solver.py for an extraction (the dict of `Extraction.to_json()`)."""
    model = extraction["model"]
    if model.get("tokens") == "samples":
        raise EagleProbeError(
            "a sample-layout extraction has GD++ steps, not EAGLE's; the exported solver runs "
            "EAGLE, so there is none to write for this model (see views.verdict)"
        )
    layers = [
        {
            "a_step": _finite(lay["a_step"], "a_step"),
            "c_step": _finite(lay["c_step"], "c_step"),
            "eta": _num(lay.get("eta")),
            "gamma": _num(lay.get("gamma")),
            "fidelity": _num(lay.get("fidelity")),
        }
        for lay in extraction["layers"]
    ]
    # the solver runs the family the views read (a distributed network that sends A columns
    # between machines runs the centralized update across them: REGIME "centralized")
    family = model.get("family")
    regime = model["regime"]
    if family is not None:
        from eagle_probe.fit.families import get

        regime = get(family).export
    usable = [i for i, lay in enumerate(layers) if step_rule(lay, regime)[2] == "recovered"]
    verdict = (extraction.get("views", {}).get("verdict") or {}).get("model") or {}
    provenance = {
        "source": "eagle-probe extract",
        "eagle_probe": __version__,
        "checkpoint": model.get("checkpoint"),
        "checkpoint_sha256": model.get("sha256"),
        "regime": model["regime"],
        "family": family,
        "verdict": verdict.get("label"),
        "sizes": {k: model[k] for k in ("n", "d", "n_prime", "d_prime")},
        "fidelity_per_layer": [lay["fidelity"] for lay in layers],
        "layers": len(layers),
        "recovered_layers": usable,
    }
    algorithm1 = algorithm1_constants(extraction)
    # the fidelities are LAYERS' and the depth is len(LAYERS)
    written = {k: v for k, v in provenance.items() if k not in ("fidelity_per_layer", "layers")}
    constants = "\n".join(
        [
            BEGIN,
            f"PROVENANCE = {pprint.pformat(written, width=96, sort_dicts=False, compact=True)}",
            f"LAYERS = {_layer_list(layers)}",
            f"NORMALIZE = {model['normalize']!r}  # the prompt scale before the first layer",
            f"REGIME = {regime!r}",
            f"MACHINES = {int(model.get('machines') or 1) if regime == 'distributed' else 1}",
            f"PROJECTORS = {_matrix_list(projectors)}",
            f"LOCAL_SCALE = {bool(model.get('local_scale'))!r}  # True: per machine, its A, B",
            f"ALGORITHM1 = {algorithm1!r}",
            END,
        ]
    )
    source = TEMPLATE.read_text()
    start, stop = source.index(BEGIN), source.index(END) + len(END)
    header = _header(provenance, layers, regime, verdict, algorithm1)
    header += "".join(line + "\n" for line in _interval_lines(extraction["layers"]))
    body = source[:start] + constants + source[stop:]
    return header + body


def write_solver(
    path: str | os.PathLike, extraction: dict[str, Any], projectors: list | None = None
) -> Path:
    """Write solver.py atomically; returns its path."""
    path = Path(path)
    atomic_write_text(path, solver_source(extraction, projectors))
    return path


def algorithm1_constants(extraction: dict[str, Any]) -> dict[str, Any] | None:
    """The solver's ALGORITHM1: the two global constants of view `algorithm1` (Algorithm 1 as the
    paper writes it, fitted to the activations), its form and depth; None where the view did not
    run or its constants are not finite numbers."""
    view = (extraction.get("views") or {}).get("algorithm1") or {}
    if not view.get("supported"):
        return None
    fitted = view["readings"]["global"]
    eta, gamma = _num(fitted.get("eta")), _num(fitted.get("gamma"))
    if eta is None or gamma is None:
        return None
    return {
        "eta": eta,
        "gamma": gamma,
        "steps": len(fitted["layers"]),
        "form": view["form"],
        "machines": int(view.get("machines") or 1),
    }


def _header(
    provenance: dict[str, Any],
    layers: list[dict],
    regime: str,
    verdict: dict,
    algorithm1: dict[str, Any] | None = None,
) -> str:
    """The comment lines above the module: what the file is, whose steps it takes and why.
    Values from the extraction are written as JSON; numbers by format specifications."""

    def data(value: Any) -> str:
        return json.dumps(value, ensure_ascii=True)

    fid = [None if f is None else float(f"{f:.3g}") for f in provenance["fidelity_per_layer"]]
    depth = len(layers)
    lines = []
    label = verdict.get("label")
    if label == "not EAGLE":  # said first
        lines += [
            f"# NOT EAGLE: the verdict on this network is {data(label)} (confidence "
            f"{data(verdict.get('confidence'))}); mode='faithful'",
            "#   reproduces its layers as fitted, not an algorithm it was found to run.",
        ]
    lines.append("# Exported by eagle-probe " + data(provenance["eagle_probe"]))
    lines += [
        "# checkpoint: " + data(provenance["checkpoint"]),
        "# checkpoint sha256: " + data(provenance["checkpoint_sha256"]),
        f"# regime: {data(provenance['regime'])}; family: {data(provenance['family'])}; "
        f"verdict: {data(label)}; sizes: {data(provenance['sizes'])}",
        f"# per-layer fidelity ‖Z_net − Z_EAGLE‖²_F / #entries: {data(fid)}",
        f"# mode='faithful' reproduces the network: its {depth} layers with their fitted a_l, c_l "
        "(at other sizes it warns).",
    ]
    lines.append(_algorithm1_line(algorithm1))
    return "\n".join(lines + _schedule_lines(layers, regime) + [""])


def _algorithm1_line(constants: dict[str, Any] | None) -> str:
    """The header's line on mode='algorithm1' (`algorithm1_constants`)."""
    if constants is None:
        return "# mode='algorithm1': no Algorithm 1 constants were fitted in this extraction."
    where = {
        "centralized": "S = I",
        "distributed": f"per machine (M = {constants['machines']}), C and D averaged",
        "constrained": "on the network's sketches PROJECTORS",
    }[constants["form"]]
    return (
        f"# mode='algorithm1' is the paper's Algorithm 1 (ρ = ‖Ã‖₂⁻² every step, {where}) with "
        f"the global η = {constants['eta']:.4g}, γ = {constants['gamma']:.4g} fitted to the "
        f"network's activations: {constants['steps']} steps, no certificate."
    )


def _schedule_lines(layers: list[dict], regime: str) -> list[str]:
    """The header's account of mode='normalized': per step its (η, γ) and their source
    (`solver_template.step_rule`, the rule the file itself runs)."""
    theory = "the theory's η = 1/3, γ = 1"
    if regime != "centralized":
        return [
            "# mode='normalized' is centralized EAGLE (ρ_l = ‖A_l‖₂⁻² every step, certified stop)",
            f"#   with {theory} at every step: the network's steps belong to its {regime}",
            "#   iteration, which this mode does not run.",
        ]
    rules = [step_rule(lay, regime) for lay in layers]
    if not any(source != "theory" for _, _, source in rules):
        return [
            "# mode='normalized' is plain EAGLE (ρ_l = ‖A_l‖₂⁻² every step, certified stop) with",
            f"#   {theory} at every step: no layer of the network steps with positive η and γ.",
        ]
    lines = [
        "# mode='normalized' is EAGLE seeded by the network (ρ_l = ‖A_l‖₂⁻² every step, certified "
        "stop):"
    ]
    for i, (lay, (e, g, source)) in enumerate(zip(layers, rules, strict=True)):
        own = f"η = {_plain(lay['eta'])}, γ = {_plain(lay['gamma'])}"
        why = {
            "recovered": f"the network's layer {i}",
            "clipped": f"layer {i}'s {own} clipped to η ≤ {ETA_MAX:g}, γ ≤ {GAMMA_MAX:g}",
            "theory": f"the theory's (layer {i} steps uphill or not at all: {own})",
        }[source]
        lines.append(f"#   step {i + 1}: η = {e:.4g}, γ = {g:.4g}, {why}")
    lines.append(f"#   step {len(layers) + 1} and after: {theory}")
    return lines


def _interval_lines(layers: list[dict]) -> list[str]:
    """The header's account of how well each layer's η_l, γ_l are known: their 95% intervals over
    the probe prompts (`fit.eagle`), where the extraction has them."""
    if not layers or "eta_lo" not in layers[0]:
        return []
    lines = ["# η_l, γ_l read from the activations, 95% intervals over the probe prompts:"]
    for i, lay in enumerate(layers):
        parts = []
        for key, sym in (("eta", "η"), ("gamma", "γ")):
            lo, hi = _num(lay.get(f"{key}_lo")), _num(lay.get(f"{key}_hi"))
            known = "" if lo is None or hi is None else f" ({lo:.4g} to {hi:.4g})"
            parts.append(f"{sym} = {_plain(_num(lay.get(key)))}{known}")
        lines.append(f"#   layer {i}: " + ", ".join(parts))
    return lines


def _plain(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _num(value):
    """An optional number as a literal-safe float: None when absent or not finite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _finite(value, name: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"the extraction's {name} is {value}; a solver cannot be exported")
    return value


def _layer_list(layers: list[dict[str, float | None]]) -> str:
    """The layers as a list literal, one dict(...) of two lines per layer."""
    if not layers:
        return "[]"
    items = []
    for lay in layers:
        first = ", ".join(f"{k}={lay[k]!r}" for k in ("a_step", "c_step", "eta"))
        second = ", ".join(f"{k}={lay[k]!r}" for k in ("gamma", "fidelity"))
        items.append(f"    dict({first},\n         {second}),")
    return (
        "[  # per layer: EAGLE's coefficients in the network's units\n" + "\n".join(items) + "\n]"
    )


def _matrix_list(projectors) -> str:
    if projectors is None:
        return "None"
    return repr([[[round(float(v), 17) for v in row] for row in P] for P in projectors])


def load_solver(path: str | os.PathLike):
    """Import an exported solver.py as a module (it imports only NumPy)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("eagle_probe_exported_solver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def faithful_gap(path: str | os.PathLike, z0, network_pred, *, d: int, n: int, prompts: int = 256):
    """Relative gap ‖D_faithful − D_network‖ / ‖D_network‖ of the exported solver's faithful
    mode on the first `prompts` prompts z0 (b, T, E), against the network's predictions
    (b, d', n') on them."""
    import numpy as np

    solver = load_solver(path)
    k = min(prompts, len(z0))
    out = np.stack(
        [solver.complete(z[:d, :n], z[d:, :n], z[:d, n:], mode="faithful") for z in z0[:k]]
    )
    ref = np.asarray(network_pred[:k])
    size = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out - ref)) / size if size > 0 else float("inf")
