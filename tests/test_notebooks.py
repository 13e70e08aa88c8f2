"""The analysis notebooks run from the shipped checkpoints and are committed with outputs, and
each runs on checkpoints of one's own given as parameters (papermill's convention)."""

import json

import nbformat
import plants
import pytest
from conftest import ROOT
from nbclient import NotebookClient

from eagle_probe import checkpoint, layouts
from eagle_probe.tasks import TaskConfig

NOTEBOOKS = [
    "head_specialization",
    "solver_vs_network",
    "reproduce_paper",
    "lsa_models",
    "emergence",
]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_with_outputs_and_small(name):
    path = ROOT / "analyses" / f"{name}.ipynb"
    assert path.stat().st_size < 2_000_000
    nb = json.loads(path.read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert outputs and not any(o["output_type"] == "error" for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs), "figures are committed"


def _execute(nb) -> None:
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "analyses")}},
    )
    client.execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors, errors[0]["evalue"] if errors else ""


def _with_parameters(name: str, params: dict, last: str | None = None):
    """The notebook with `params` in a cell inserted after the one tagged "parameters"
    (papermill's convention) and `last` as a final cell."""
    nb = nbformat.read(ROOT / "analyses" / f"{name}.ipynb", as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] == next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code"
    ), "one parameters cell, the first code cell"
    defaults = {}
    exec(nb.cells[tagged[0]].source, {}, defaults)
    assert set(params) <= set(defaults), set(params) - set(defaults)
    injected = nbformat.v4.new_code_cell(
        "# Parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    )
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(tagged[0] + 1, injected)
    if last is not None:
        nb.cells.append(nbformat.v4.new_code_cell(last))
    return nb


# the shipped files, passed as parameters by their absolute paths: the check cells run on them
SHIPPED = {
    "head_specialization": {"model_path": "centralized_8head.pt"},
    "solver_vs_network": {"model_path": "centralized.pt"},
    "reproduce_paper": {"models": "."},
    "lsa_models": {"model_path": "lsa_1layer.pt", "three_layer_path": "lsa_3layer.pt"},
    "emergence": {
        "model_path": "centralized.pt",
        "timeline_path": "timelines/centralized_3000.json",
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tmp_path):
    """Each notebook on the shipped checkpoints, given as parameters: its check cells, which hold
    the shipped models' reading, run (the last cell makes sure they did)."""
    params = {k: str(ROOT / "trained_models" / v) for k, v in SHIPPED[name].items()}
    _execute(_with_parameters(name, params, last="assert checks, 'the check cells ran'"))


def _save(path, model, task) -> str:
    checkpoint.save(path, model, task, {})
    return str(path)


def _own_models(name: str, tmp_path) -> dict:
    """Planted checkpoints (tests/plants.py) of the shape each notebook reads, and small sizes."""
    steps = plants.PLANTED_STEPS["spectral"]
    if name == "head_specialization":
        model, task = plants.eagle(*steps, normalize="spectral", heads=2)
        return {"model_path": _save(tmp_path / "own.pt", model, task), "prompts": 32,
                "problem_prompts": 8}  # fmt: skip
    if name == "solver_vs_network":
        model, task = plants.eagle(*steps, normalize="spectral")
        return {"model_path": _save(tmp_path / "own.pt", model, task), "held_out": 64,
                "probes": 16, "prompts": 8, "sizes": [12], "solver_n": 12}  # fmt: skip
    if name == "emergence":
        model, task = plants.eagle(*steps, normalize="spectral")
        return {"model_path": _save(tmp_path / "own.pt", model, task), "prompts": 8}
    if name == "lsa_models":
        out = {"probes": 32, "held_out": 64}
        for key, products in (
            ("model_path", layouts.gd_products(4, 1, [0.5])),
            ("three_layer_path", layouts.gdpp_products(4, 1, [0.5, 0.4, 0.3], [0.3, 0.2, 0.0])),
        ):
            model = plants.samples(*products, n=10, d=4)
            task = TaskConfig(task="least_squares", n=10, d=4, n_prime=1, d_prime=1, alpha=1.0)
            out[key] = _save(tmp_path / f"{key}.pt", model, task)
        return out
    folder = tmp_path / "models"  # reproduce_paper: one plant per regime
    folder.mkdir()
    for regime, extra in (("centralized", {}), ("distributed", {"machines": 2, "heads": 2}),
                          ("constrained", {"rank": 3})):  # fmt: skip
        model, task = plants.eagle(*steps, normalize="spectral", regime=regime, **extra)
        _save(folder / f"{regime}.pt", model, task)
    return {"models": str(folder), "solver_n": 24}


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_runs_on_checkpoints_given_as_parameters(name, tmp_path):
    """Papermill's convention: the values go into a cell inserted after the one tagged
    "parameters"; the notebook then reads the planted checkpoints (absolute paths) at small
    sizes, and its check cells, which hold the shipped models' reading, stand aside."""
    nb = _with_parameters(name, _own_models(name, tmp_path), last="assert not checks")
    _execute(nb)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "tmp" in json.dumps([c.source for c in nb.cells]) and text  # it ran on the plants


def test_the_setup_outside_analyses_names_eagle_probe_root(tmp_path, monkeypatch):
    """Every notebook starts with the setup of analyses/build_notebooks.py; run from anywhere but
    analyses/ without EAGLE_PROBE_ROOT it stops in one line that names the variable."""
    import sys

    sys.path.insert(0, str(ROOT / "analyses"))
    try:
        from build_notebooks import SETUP
    finally:
        sys.path.remove(str(ROOT / "analyses"))
    for name in NOTEBOOKS:
        nb = json.loads((ROOT / "analyses" / f"{name}.ipynb").read_text())
        setup = [c for c in nb["cells"] if c["cell_type"] == "code"][1]  # after the parameters
        assert "".join(setup["source"]).startswith(SETUP), name
    root_check = SETUP.split("import os\n", 1)[1].split("os.chdir(root)")[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EAGLE_PROBE_ROOT", raising=False)
    with pytest.raises(FileNotFoundError, match="set EAGLE_PROBE_ROOT to the repository root"):
        exec("import os\n" + root_check, {})
    monkeypatch.setenv("EAGLE_PROBE_ROOT", str(ROOT))
    exec("import os\n" + root_check, {})  # the repository root passes
