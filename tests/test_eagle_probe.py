"""The package itself (`eagle_probe/__init__.py`): importing it keeps the Hugging Face stack
offline unless the caller said otherwise, loads no torch (the task names it offers are imported on
first use), and refuses a name it does not have. Checked in a fresh interpreter, whose imports and
environment are its own."""

import json
import os
import subprocess
import sys

from conftest import ROOT

CHECK = """
import json, os, sys
import eagle_probe
out = {"torch_at_import": "torch" in sys.modules}
names = ("HF_HUB_OFFLINE", "WANDB_MODE", "TRANSFORMERS_OFFLINE")
out["env"] = {k: os.environ.get(k) for k in names}
try:
    eagle_probe.nope
except AttributeError as exc:
    out["unknown"] = str(exc)
print(json.dumps(out))
"""


def test_import_is_offline_and_light():
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "TRANSFORMERS_OFFLINE")}
    env |= {"HF_HUB_OFFLINE": "0", "PYTHONPATH": str(ROOT)}  # the caller's own choice is kept
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["torch_at_import"] is False
    assert out["env"] == {
        "HF_HUB_OFFLINE": "0",
        "WANDB_MODE": "disabled",
        "TRANSFORMERS_OFFLINE": "1",
    }
    assert out["unknown"] == "module 'eagle_probe' has no attribute 'nope'"
