"""The documentation says what the code does.

- docs/cli.md names every CLI option; docs/extraction-schema.md every extraction.json field.
- Every fenced code block of README.md and docs/*.md runs, in order, one temporary directory and
  one Python namespace per file (`trained_models/` linked in, `eagle-probe` and `.venv/bin/python`
  on the PATH running this checkout). A ```text block that directly follows a code block is that
  block's expected output and is compared with what it printed (`compare_output`).
- Fences carry a language: `python` and `bash` blocks are code; `text` blocks are output, command
  synopses or formats. A code block whose first line starts with `# not run by the doc tests`
  (followed by the reason) is skipped: set-up commands, long trainings, illustrations of usage.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from eagle_probe.cli import build_parser

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash", "text")
SKIP = "# not run by the doc tests"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
# A number standing alone: not part of a dotted name like blocks.1.attn or of a word.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")


@dataclass
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    expected: str | None = None  # the output block that follows, if any

    @property
    def skipped(self) -> bool:
        return self.code.startswith(SKIP)


def parse_blocks(text: str) -> list[Block]:
    """Fenced blocks in order; an output block is attached to the code block before it."""
    blocks: list[Block] = []
    end = 0
    for m in FENCE.finditer(text):
        lang = m.group(1).strip()
        block = Block(lang, m.group(2), text.count("\n", 0, m.start()) + 1)
        previous = blocks[-1] if blocks else None
        follows = previous is not None and text[end : m.start()].strip() == ""
        if lang == "text" and follows and previous.lang != "text" and previous.expected is None:
            previous.expected = block.code
        blocks.append(block)
        end = m.end()
    return blocks


def _tolerance(token: str) -> float:
    """Half-way to a visible difference: one unit of the last printed digit, or 1 %."""
    if re.fullmatch(r"[-+]?\d+", token):
        return 0.0  # integers (shapes, counts) must match exactly
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    ulp = 10.0 ** (int(exponent or 0) - decimals)
    return max(ulp, 0.01 * abs(float(token)))


def compare_output(actual: str, expected: str) -> str | None:
    """None when `actual` matches `expected`, else the first mismatch in words.

    Lines are compared after collapsing runs of spaces; numbers may differ by one unit of their
    last printed digit or 1 %, integers not at all; a line `...` in `expected` matches any
    number of lines."""

    def lines(text: str) -> list[str]:
        out = [" ".join(line.split()) for line in text.rstrip().splitlines()]
        return out

    def same(a: str, e: str) -> bool:
        a_num, e_num = NUMBER.findall(a), NUMBER.findall(e)
        if NUMBER.sub("#", a) != NUMBER.sub("#", e) or len(a_num) != len(e_num):
            return False
        return all(
            abs(float(x) - float(y)) <= _tolerance(y) for x, y in zip(a_num, e_num, strict=True)
        )

    def match(a: list[str], e: list[str]) -> bool:
        if not e:
            return not a
        if e[0] == "...":
            return any(match(a[i:], e[1:]) for i in range(len(a) + 1))
        return bool(a) and same(a[0], e[0]) and match(a[1:], e[1:])

    got, want = lines(actual), lines(expected)
    if match(got, want):
        return None
    return "printed:\n" + "\n".join(got) + "\n\ndocumented:\n" + "\n".join(want)


def _workdir(tmp_path: Path) -> dict[str, str]:
    """A scratch directory like a checkout: shipped models linked in, the CLI and python shims."""
    (tmp_path / "trained_models").symlink_to(ROOT / "trained_models")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shims = {
        "python": f'exec {sys.executable} "$@"',
        "eagle-probe": f'exec {sys.executable} -m eagle_probe "$@"',
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    env["OMP_NUM_THREADS"] = "1"
    return env


def _doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_fence_has_a_known_language():
    for path in DOCS:
        for block in parse_blocks(path.read_text()):
            assert block.lang in LANGUAGES, (
                f"{_doc_id(path)}:{block.line}: fence language {block.lang!r}; "
                f"use one of {', '.join(LANGUAGES)}"
            )


def test_skipped_blocks_give_a_reason():
    for path in DOCS:
        for block in parse_blocks(path.read_text()):
            if block.skipped:
                reason = block.code.splitlines()[0][len(SKIP) :].strip(" :—-")
                assert reason, f"{_doc_id(path)}:{block.line}: say why the block is not run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        p
        for p in DOCS
        if any(b.lang in ("python", "bash") and not b.skipped for b in parse_blocks(p.read_text()))
    ],
    ids=_doc_id,
)
def test_doc_code_blocks_run_and_print_what_they_show(path, tmp_path, monkeypatch):
    env = _workdir(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__doc__"}
    for block in parse_blocks(path.read_text()):
        if block.lang not in ("python", "bash") or block.skipped:
            continue
        where = f"{_doc_id(path)}:{block.line}"
        if block.lang == "python":
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                exec(compile(block.code, where, "exec"), namespace)  # noqa: S102
            printed = stdout.getvalue()
        else:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr[-2000:]}"
            printed = done.stdout
        if block.expected is not None:
            mismatch = compare_output(printed, block.expected)
            assert mismatch is None, f"{where} prints something else:\n{mismatch}"


def test_compare_output_tolerates_last_digit_only():
    assert compare_output("MSE 0.00506\n", "MSE 0.00505") is None
    assert compare_output("MSE 0.00495", "MSE 0.00505") is not None  # 2 %
    assert compare_output("torch.Size([64, 8])", "torch.Size([64, 9])") is not None
    assert compare_output("blocks.2.attn", "blocks.1.attn") is not None
    assert compare_output("a\nb\nc\nd", "a\n...\nd") is None
    assert compare_output("a\nb", "a\nb\nc") is not None
    assert compare_output("x   1.0e+26", "x 1.005e+26") is None
    assert compare_output("inf", "9.6e+26") is not None


def test_compare_output_never_reads_the_sign_of_a_zero():
    """A number that rounds to zero prints as -0.0 on one CPU and 0.0 or +0.0 on another (its
    last bits are BLAS round-off): the documented output matches either."""
    assert compare_output("projection -0.0%", "projection +0.0%") is None
    assert compare_output("eta 0.000", "eta -0.000") is None
    assert compare_output("gap -0.0e+00", "gap 0.0e+00") is None
    assert compare_output("projection -0.4%", "projection +0.4%") is not None  # not a zero


def test_parse_blocks_attaches_outputs_to_the_code_before_them():
    text = "```python\nprint(1)\n```\n\n```text\n1\n```\nprose\n```text\nsynopsis\n```\n"
    blocks = parse_blocks(text)
    assert [b.lang for b in blocks] == ["python", "text", "text"]
    assert blocks[0].expected == "1\n" and blocks[2].line == 9


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


def _documented_keys(data: dict) -> None:
    """Every key of an extraction.json (top level, layers, every view) is in the schema doc."""
    text = (ROOT / "docs" / "extraction-schema.md").read_text()
    documented = set(re.findall(r"`([A-Za-z_0-9]+)`", text))
    assert set(data) <= documented
    assert set(data["layers"][0]) <= documented
    assert set(data["geometry"]) <= documented

    def keys(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield k
                yield from keys(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from keys(v)

    for name, view in data["views"].items():
        assert f"`views.{name}`" in text, name
        missing = set(keys(view)) - documented
        assert not missing, f"views.{name}: {sorted(missing)} not in docs/extraction-schema.md"


def test_schema_doc_lists_every_sample_layout_field():
    """The sample layout's own keys (GD++ steps, X/Y blocks, the GD / GD++ verdict)."""
    import numpy as np

    from eagle_probe import layouts
    from eagle_probe.extract import extract
    from eagle_probe.tasks import TaskConfig

    rng = np.random.default_rng(0)
    qk, vp = layouts.gdpp_products(4, 1, [0.5, 0.4], [0.3, 0.2])
    qk = qk + 0.01 * rng.standard_normal(qk.shape)  # every block present
    vp = vp + 0.01 * rng.standard_normal(vp.shape)
    model = layouts.model_from_products(layouts.sample_config(n=8, d=4, layers=2), qk, vp)
    task = TaskConfig(task="least_squares", n=8, d=4, n_prime=1, d_prime=1, alpha=1.0)
    data = extract(model, task, probe_batch_size=32, test_batch=32, tuning_batch=32).to_json()
    assert data["model"]["tokens"] == "samples"
    _documented_keys(data)


def test_schema_doc_lists_every_layer_field(tmp_path):
    from plants import eagle

    from eagle_probe.extract import extract

    model, task = eagle([0.05, 0.04], [0.1, 0.09], n=6, d=5, rank=3)
    data = extract(model, task, probe_batch_size=16, test_batch=32, tuning_batch=32).to_json()
    _documented_keys(data)
