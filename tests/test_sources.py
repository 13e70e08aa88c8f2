"""The sources speak of the project itself: no file cites a planning document the repository does
not hold (the paper and the project's own docs are cited by name)."""

from conftest import ROOT


def test_no_source_cites_a_document_outside_the_repository():
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("eagle_probe", "tests", "benchmarks", "analyses")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "test_sources.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "BRIEF" in line or "STYLE.md" in line
    ]
    assert not cited, cited
