"""The fitter is NumPy: importing `eagle_probe.fit` (every view registered) loads neither torch
nor TransformerLens, so the views can be read, tested and reused without them."""

import subprocess
import sys


def test_import_fit_loads_no_torch_and_no_transformer_lens():
    probe = (
        "import sys, eagle_probe.fit\n"
        "from eagle_probe.fit.base import VIEWS\n"
        "print(len(VIEWS), sorted({m.split('.')[0] for m in sys.modules} "
        "& {'torch', 'transformer_lens'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    views, heavy = out.stdout.split(maxsplit=1)
    assert int(views) >= 10, out.stdout  # the views did register
    assert heavy.strip() == "[]", out.stdout
