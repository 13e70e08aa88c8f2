"""`eagle-probe import` (`cli/importer.py`): bad input of every kind is one line, exit 2, with
nothing written; an output is required and replaced only with --force."""

import numpy as np
import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.cli import main

N, D = 20, 5


@pytest.mark.parametrize(
    "case, flags, words",
    [
        ("missing projection", [], ["layer 1: missing W_P (or W_O)", "layers.1.q_proj.weight"]),
        ("width against d", ["--d", "4"], ["width is 6 = d + d'", "pass --d 5"]),
        ("readout typo", ["--readout", "+l"], ["--readout", "must be -1", "'+l'"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(case, flags, words, tmp_path, capsys):
    state = {
        f"layers.{layer}.{name}.weight": torch.eye(D + 1, dtype=torch.float64)
        for layer in range(2)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
    }
    if case == "missing projection":
        del state["layers.1.o_proj.weight"]
    torch.save(state, tmp_path / "w.pt")
    out = tmp_path / "new" / "m.pt"
    argv = ["import", "--layout", "samples", str(tmp_path / "w.pt"), "--n", str(N), *flags]
    assert main(argv + ["-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt"]


def _bad_inputs(tmp_path):
    good = np.zeros((1, 1, 2, 4, 4))
    nan = good.copy()
    nan[0, 0, 1, 0, 0] = np.nan
    np.savez(tmp_path / "good.npz", allparam=good)
    np.savez(tmp_path / "nan.npz", allparam=nan)
    np.savez(tmp_path / "shape.npz", allparam=np.zeros((1, 1, 3, 4, 4)))
    np.savez(tmp_path / "other.npz", weights=good)
    np.savez(tmp_path / "missing.npz", **{"blocks.0.attn.W_Q": np.zeros((1, 4, 4))})
    np.savez(
        tmp_path / "mismatch.npz",
        **{
            "blocks.0.attn.W_Q": np.zeros((1, 4, 4)),
            "blocks.0.attn.W_K": np.zeros((1, 4, 3)),
            "blocks.0.attn.W_V": np.zeros((1, 4, 4)),
            "blocks.0.attn.W_P": np.zeros((1, 4, 4)),
        },
    )
    (tmp_path / "text.pt").write_text("not a torch file")
    (tmp_path / "text.npz").write_text("not an npz archive")
    (tmp_path / "w.bin").write_bytes(b"\0")
    torch.save([1.0, 2.0], tmp_path / "list.pt")
    full = {f"blocks.0.attn.{w}": np.ones((1, 4, 4)) for w in ("W_Q", "W_K", "W_V", "W_P")}
    full["blocks.0.attn.W_V"] = np.full((1, 4, 4), np.inf)
    np.savez(tmp_path / "inf.npz", **full)
    np.savez(tmp_path / "four_d.npz", allparam=np.zeros((1, 2, 4, 4)))
    return {
        "unknown layout": ["--layout", "keras", str(tmp_path / "good.npz"), "--n", "5"],
        "nan": ["--layout", "ahn", str(tmp_path / "nan.npz"), "--n", "5"],
        "shape": ["--layout", "ahn", str(tmp_path / "shape.npz"), "--n", "5"],
        "no allparam": ["--layout", "ahn", str(tmp_path / "other.npz"), "--n", "5"],
        "missing key": ["--layout", "samples", str(tmp_path / "missing.npz"), "--n", "5"],
        "shapes disagree": ["--layout", "samples", str(tmp_path / "mismatch.npz"), "--n", "5"],
        "feature width": ["--layout", "eagle-probe", str(tmp_path / "missing.npz"), "--n", "9"],
        "zero n": ["--layout", "ahn", str(tmp_path / "good.npz"), "--n", "0"],
        "text n": ["--layout", "ahn", str(tmp_path / "good.npz"), "--n", "many"],
        "not torch": ["--layout", "ahn", str(tmp_path / "text.pt"), "--n", "5"],
        "unknown suffix": ["--layout", "ahn", str(tmp_path / "w.bin"), "--n", "5"],
        "absent": ["--layout", "ahn", str(tmp_path / "absent.npz"), "--n", "5"],
        "inf": ["--layout", "samples", str(tmp_path / "inf.npz"), "--n", "5"],
        "allparam as samples": ["--layout", "samples", str(tmp_path / "good.npz"), "--n", "5"],
        "allparam 4-d": ["--layout", "ahn", str(tmp_path / "four_d.npz"), "--n", "5"],
        "negative n": ["--layout", "ahn", str(tmp_path / "good.npz"), "--n", "-1"],
        "fractional n": ["--layout", "ahn", str(tmp_path / "good.npz"), "--n", "2.5"],
        "not npz": ["--layout", "ahn", str(tmp_path / "text.npz"), "--n", "5"],
        "list in pt": ["--layout", "ahn", str(tmp_path / "list.pt"), "--n", "5"],
        "bad dtype": ["--layout", "ahn", str(tmp_path / "good.npz"), "--n", "5", "--dtype", "f16"],
    }


def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    for case, argv in _bad_inputs(tmp_path).items():
        out = tmp_path / "out.pt"
        code = main(["import", *argv, "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2, case
        assert len(err.strip().splitlines()) == 1 and "error" in err, (case, err)
        assert "Traceback" not in err, case
        assert not out.exists(), case


def test_an_output_is_required_and_replaced_only_with_force(tmp_path, capsys):
    weights = tmp_path / "w.npz"
    np.savez(weights, allparam=0.1 * np.random.default_rng(0).standard_normal((1, 1, 2, 4, 4)))
    head = ["import", "--layout", "ahn", str(weights), "--n", "6"]
    assert main(head) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-o/--out is required (or pass --dry-run" in err[0]
    out = tmp_path / "model.pt"
    out.write_text("someone else's file\n")
    assert main([*head, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0]
    assert out.read_text() == "someone else's file\n"
    assert main([*head, "-o", str(out), "--force"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"wrote {out}: samples layout")
    model, task, metrics = checkpoint.load(out)
    assert metrics["imported"] == {"layout": "ahn", "from": str(weights)}
    assert (model.cfg.n_layers, model.cfg.heads, task.n, task.d) == (1, 1, 6, 3)
