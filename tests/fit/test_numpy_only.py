"""The fitter is NumPy: importing `eagle_probe.fit` (every view registered, with its text and
figures) loads neither torch, TransformerLens nor matplotlib, so the views can be read, tested and
reused without them."""

import subprocess
import sys


def test_import_fit_loads_no_torch_no_transformer_lens_no_matplotlib():
    probe = (
        "import sys, eagle_probe.fit\n"
        "from eagle_probe.fit.base import VIEWS\n"
        "print(len(VIEWS), sorted({m.split('.')[0] for m in sys.modules} "
        "& {'torch', 'transformer_lens', 'matplotlib'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    views, heavy = out.stdout.split(maxsplit=1)
    assert int(views) >= 10, out.stdout  # the views did register
    assert heavy.strip() == "[]", out.stdout
