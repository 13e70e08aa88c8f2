"""`eagle-probe extract` (`cli/extract.py`): what it prints."""

from eagle_probe.cli import main


def test_extract_prints_lines_of_at_most_100_characters(tiny_model, tmp_path, capsys):
    out = tmp_path / "ex"
    argv = ["extract", str(tiny_model), "--out", str(out), "--probe-batch", "32", "--no-progress"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("warning: the faithful export differs") for line in lines)
    text = [line for line in lines if not line.startswith("wrote ")]  # the paths are the user's
    assert max(map(len, text)) <= 100, max(text, key=len)
