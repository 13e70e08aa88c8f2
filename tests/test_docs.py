"""The documentation names every CLI option and every extraction.json field."""

import re

from conftest import ROOT

from eagle_probe.cli import build_parser


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_cli_doc_lists_every_subcommand_and_option():
    text = (ROOT / "docs" / "cli.md").read_text()
    for name, sub in _subparsers().items():
        assert f"## {name}" in text, name
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in text, f"{name} {option} missing from docs/cli.md"


def test_schema_doc_lists_every_layer_field(tmp_path):
    from eagle_probe.extract import extract
    from eagle_probe.model import LinearTransformer, ModelConfig, eagle_weights
    from eagle_probe.tasks import TaskConfig

    cfg = ModelConfig(n=6, d=5, n_layers=2, dtype="float64")
    model = LinearTransformer(cfg)
    model.load_state_dict(eagle_weights(cfg, [0.05, 0.04], [0.1, 0.09]))
    data = extract(
        model, TaskConfig(n=6, d=5, rank=3), probe_batch_size=16, test_batch=32
    ).to_json()
    text = (ROOT / "docs" / "extraction-schema.md").read_text()
    documented = set(re.findall(r"`([A-Za-z_0-9]+)`", text))
    assert set(data) <= documented
    assert set(data["layers"][0]) <= documented
