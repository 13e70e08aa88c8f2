"""Output checks of eagle_probe/files.py that the command-line tests do not reach directly."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

from eagle_probe import files


def test_check_dir_of_a_non_empty_directory_closes_its_listing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("a")
    (out / "b.txt").write_text("b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert files.check_dir(out, force=True) == out
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == [], [str(w.message) for w in leaked]
