"""`eagle-probe bench` (`cli/bench.py`): an unknown suite is refused before --out is made, and its
--device is the one option that is unset unless given. The suites themselves are
`test_bench.py`'s."""

from eagle_probe.cli import main


def test_unknown_suite_is_a_user_error(tmp_path, capsys):
    assert main(["bench", "--suite", "huge", "--out", str(tmp_path / "b")]) == 2
    assert "unknown suite 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_bench_runs_the_device_section_only_where_device_is_given():
    from eagle_probe.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench"]).device is None
    assert parser.parse_args(["bench", "--device", "cpu"]).device == "cpu"
    assert parser.parse_args(["evaluate", "m.pt"]).device == "cpu"
