"""The fault-injection catalogue (`benchmarks/fault_injection.py`) still fits the code: every
fault's text occurs exactly once in its file, so a refactor that moves a line fails here instead
of stopping the benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "fault_injection.py"


def _catalogue():
    spec = importlib.util.spec_from_file_location("fault_injection_catalogue", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module.FAULTS


FAULTS = _catalogue()


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_text_occurs_once_in_its_file(fault):
    text = (ROOT / fault.path).read_text()
    assert text.count(fault.old) == 1, f"{fault.name!r}: text not found once in {fault.path}"
    assert fault.new != fault.old
    compile(text.replace(fault.old, fault.new), fault.path, "exec")


def test_each_fault_names_tests_that_exist():
    for fault in FAULTS:
        for test in fault.tests:
            file, _, name = test.partition("::")
            assert (ROOT / file).exists(), f"{fault.name!r}: no {file}"
            if name:
                assert f"def {name}(" in (ROOT / file).read_text(), f"{fault.name!r}: no {test}"


def test_fault_names_are_unique():
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names))
