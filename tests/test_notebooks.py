"""The analysis notebooks run from the shipped checkpoints and are committed with outputs."""

import json

import nbformat
import pytest
from conftest import ROOT
from nbclient import NotebookClient

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


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tmp_path):
    nb = nbformat.read(ROOT / "analyses" / f"{name}.ipynb", as_version=4)
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
    assert not errors


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
        first = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert "".join(first["source"]).startswith(SETUP), name
    root_check = SETUP.split("import os\n", 1)[1].split("os.chdir(root)")[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EAGLE_PROBE_ROOT", raising=False)
    with pytest.raises(FileNotFoundError, match="set EAGLE_PROBE_ROOT to the repository root"):
        exec("import os\n" + root_check, {})
    monkeypatch.setenv("EAGLE_PROBE_ROOT", str(ROOT))
    exec("import os\n" + root_check, {})  # the repository root passes
