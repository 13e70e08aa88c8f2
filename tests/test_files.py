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


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_missing_folders_of_an_output_are_made_with_it(tmp_path: Path) -> None:
    target = tmp_path / "run" / "deep" / "x.pt"
    assert files.check_file(target) == target
    assert _listing(tmp_path) == []  # checking writes nothing
    with files.output_files([target]) as claim:
        claim.write(target, lambda handle: handle.write(b"weights"))
    assert target.read_bytes() == b"weights"
    with files.output_dir(tmp_path / "a" / "b" / "out") as staging:
        (staging / "extraction.json").write_text("{}")
    assert (tmp_path / "a" / "b" / "out" / "extraction.json").read_text() == "{}"


def test_folders_made_for_an_output_go_again_when_nothing_is_published(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    for target in (tmp_path / "new" / "deeper" / "x.pt", tmp_path / "kept" / "new" / "x.pt"):
        try:
            with files.output_files([target]):
                raise KeyboardInterrupt  # the work failed before anything was written
        except KeyboardInterrupt:
            pass
    try:
        with files.output_dir(tmp_path / "d1" / "d2" / "out"):
            raise ValueError
    except ValueError:
        pass
    assert _listing(tmp_path) == ["kept"]


def test_an_output_under_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    import pytest

    (tmp_path / "m.pt").write_bytes(b"")
    for check in (files.check_file, files.check_dir):
        with pytest.raises(files.OutputError, match="under a file"):
            check(tmp_path / "m.pt" / "sub" / "x")
    assert _listing(tmp_path) == ["m.pt"]
