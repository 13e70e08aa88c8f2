"""A researcher's own model (von Oswald et al.'s `nn.Linear` layers, `von_oswald.py`) through the
key conventions, the layouts and the import command: imported exactly, the plan says what it chose,
the readout sign is never silent, and the live-module adapter reproduces the forward.

The reading of keys alone is `test_conventions.py`'s; the import command's refusals of bad input
are `cli/test_importer.py`'s."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from conftest import RTOL, assert_close
from von_oswald import LSA, draw, tokens, train

from eagle_probe import checkpoint, conventions, layouts
from eagle_probe.cli import main
from eagle_probe.errors import CheckpointError, EagleProbeError

N, D = 20, 5


def _state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _gap(source: LSA, model, seed: int = 3) -> float:
    """Largest relative gap between the source's prediction and the imported model's (two
    forwards in float64, each rounding its own way: at most `RTOL` when they agree)."""
    x, y, x_q, _ = draw(32, N, D, torch.Generator().manual_seed(seed))
    e = tokens(x, y, x_q)  # (b, N + 1, d + 1)
    with torch.no_grad():
        want = source(e)  # (b,)
        got = model(e.transpose(1, 2))[:, 0, 0]  # the block prompt [[A, C], [B, 0]] = eᵀ
    return float((got - want).abs().max() / want.abs().max())


@pytest.fixture(scope="module", params=[1, 2])
def lsa(request):
    torch.manual_seed(request.param)
    return LSA(D, request.param, std=0.2).double().eval()


def test_nn_linear_state_dict_imports_exactly(lsa, tmp_path):
    torch.save(lsa.state_dict(), tmp_path / "lsa.pt")
    out = tmp_path / "model.pt"
    assert (
        main(
            ["import", "--layout", "samples", str(tmp_path / "lsa.pt"), "--n", str(N)]
            + ["-o", str(out)]
        )
        == 0
    )
    model, task, _ = checkpoint.load(out)
    assert model.cfg.dtype == "float64" and (task.d, task.n) == (D, N)
    assert _gap(lsa, model) <= RTOL


def test_the_plan_says_what_it_chose(lsa):
    plan = conventions.plan_import(_state(lsa))
    text = "\n".join(plan.lines())
    assert "nn.Linear" in text and f"({len(lsa.layers)} layer" in text
    assert "layers.{l}.W_Q.weight -> blocks.{l}.attn.W_Q (transposed)" in text
    assert "layers.{l}.W_P.weight -> blocks.{l}.attn.W_P (as is)" in text
    assert "1 head per layer" in text


def test_dry_run_prints_the_mapping_and_writes_nothing(lsa, tmp_path, capsys):
    torch.save(lsa.state_dict(), tmp_path / "lsa.pt")
    argv = ["import", "--layout", "samples", str(tmp_path / "lsa.pt"), "--n", str(N), "--dry-run"]
    assert main(argv + ["-o", str(tmp_path / "m.pt")]) == 0
    out = capsys.readouterr().out
    assert "(transposed)" in out and "dry run, nothing written" in out
    assert not (tmp_path / "m.pt").exists()


def test_a_plus_readout_is_imported_with_its_sign(tmp_path):
    torch.manual_seed(4)
    plus = LSA(D, 2, readout=1, std=0.2).double().eval()
    wrong, _ = layouts.import_arrays("samples", _state(plus), n=N, dtype="float64")
    assert _gap(plus, wrong) > 0.5  # the default −1 reads the other sign
    right, _ = layouts.import_arrays("samples", _state(plus), n=N, dtype="float64", readout=1)
    assert _gap(plus, right) <= RTOL


def test_other_files_suggest_the_import_command(lsa, tmp_path):
    torch.save(lsa.state_dict(), tmp_path / "lsa.pt")
    with pytest.raises(CheckpointError, match="eagle-probe import --layout samples"):
        checkpoint.load(tmp_path / "lsa.pt")


# --- the live-module adapter -------------------------------------------------------------------


def test_from_module_reproduces_a_trained_module():
    torch.manual_seed(0)
    source = train(LSA(D, 2).double(), N, D, steps=30)
    before = _state(source)
    model = layouts.from_module(
        source, n=N, weights={w: f"layers.{{l}}.{w}.weight" for w in ("W_Q", "W_K", "W_V", "W_P")}
    )
    assert model.cfg.n_layers == 2 and model.cfg.samples
    assert _gap(source, model) <= RTOL
    for k, v in _state(source).items():
        # exact: the module is not written to
        np.testing.assert_array_equal(v, before[k])
    assert next(source.parameters()).dtype == torch.float64


def test_from_module_refuses_a_different_forward_and_names_the_other_sign(lsa):
    with pytest.raises(EagleProbeError, match=r"with readout=-1 the gap is ") as err:
        layouts.from_module(lsa, n=N, readout=1)
    other = re.search(r"with readout=-1 the gap is ([-+.e\d]+)\. ", str(err.value))
    assert other and float(other.group(1)) <= RTOL  # round-off: the other sign is the module's
    model = layouts.from_module(lsa, n=N, readout=-1)
    assert _gap(lsa, model) <= RTOL

    class Unscaled(torch.nn.Module):  # no 1/N on the scores: not this architecture's layer
        def __init__(self, inner: LSA) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, e):
            for layer in self.inner.layers:
                scores = layer.W_Q(e) @ layer.W_K(e).transpose(-1, -2)
                e = e + layer.W_P(scores[..., :N] @ layer.W_V(e)[:, :N])
            return -e[:, -1, -1]

    with pytest.raises(EagleProbeError, match="differs from the module"):
        layouts.from_module(Unscaled(lsa), n=N)


def _plus_module() -> LSA:
    """A one-layer model that reads its prediction as +y_q and takes the best step from zero:
    ŷ = (η / N) Σ_i (x_qᵀ x_i) y_i with η / N = 1 / (N + d + 1)."""
    plus = LSA(D, 1, readout=1).double().eval()
    layer = plus.layers[0]
    with torch.no_grad():
        for W in (layer.W_Q, layer.W_K, layer.W_V, layer.W_P):
            W.weight.zero_()
        layer.W_Q.weight[range(D), range(D)] = 1.0
        layer.W_K.weight[range(D), range(D)] = 1.0
        layer.W_V.weight[D, D] = 1.0
        layer.W_P.weight[D, D] = N / (N + D + 1)
    return plus


def test_a_plus_readout_model_extracts_as_descent(tmp_path):
    from eagle_probe.extract import extract

    plus = _plus_module()
    model = layouts.from_module(plus, n=N, readout=1)
    assert model.cfg.readout == "direct"
    _, task = layouts.import_arrays("samples", _state(plus), n=N, readout=1)
    ex = extract(model, task, probe_batch_size=32, test_batch=128, tuning_batch=32, control=False)
    lay = ex.views["verdict"].json["layers"][0]
    assert lay["label"] == "GD" and lay["alpha_0"] == pytest.approx(-1 / (N + D + 1), rel=RTOL)
    assert not [w for w in ex.warnings if "--readout" in w]


def test_from_module_in_the_feature_layout():
    from eagle_probe.model import LinearTransformer, ModelConfig

    cfg = ModelConfig(
        n=6, d=4, n_prime=2, d_prime=2, n_layers=2, n_heads=2, normalize="none", dtype="float64"
    )
    source = LinearTransformer(cfg, generator=torch.Generator().manual_seed(0)).eval()
    model = layouts.from_module(source, n=6, n_prime=2, d=4, d_prime=2, tokens="features")
    assert (model.cfg.tokens, model.cfg.heads, model.cfg.dtype) == ("features", 2, "float64")
    z0 = torch.randn(5, 6, 8, dtype=torch.float64)
    with torch.no_grad():
        assert_close(model(z0), source(z0))
    plan = conventions.plan_import(_state(source))
    assert plan.convention.startswith("eagle-probe")
    assert "blocks.0.attn.mask" in plan.left_out and "readout_scale" in plan.left_out


# --- the readout sign, never silent -------------------------------------------------------------


def test_the_readout_is_named_first_and_the_other_sign_flagged(tmp_path, capsys):
    torch.save(_plus_module().state_dict(), tmp_path / "plus.pt")
    source = str(tmp_path / "plus.pt")
    head = ["import", "--layout", "samples", source, "--n", str(N)]
    assert main(head + ["--readout", "+1", "-o", str(tmp_path / "right.pt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("readout +1: the prediction is the query's label entry")
    assert not [line for line in out if "--readout" in line]  # the right sign: no flag
    assert main(head + ["-o", str(tmp_path / "wrong.pt")]) == 0  # the default, −1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("readout -1: the prediction is minus the query's label entry")
    flags = [line for line in out if "re-import with `--readout +1`" in line]
    assert len(flags) == 1 and flags[0].startswith("warning: the predictions fit better negated")
    for argv in (["evaluate", str(tmp_path / "wrong.pt"), "--batch", "512"],
                 ["extract", str(tmp_path / "wrong.pt"), "--no-progress", "--no-control",
                  "--probe-batch", "32"]):  # fmt: skip
        assert main(argv) == 0
        text = capsys.readouterr().out
        first = text.splitlines()[:5]
        assert any(line.startswith("readout -1") for line in first), first
        assert any("`--readout +1`" in line for line in first), first
        assert "× below" not in text and "x below" not in text  # it is worse than zero
    assert main(["evaluate", str(tmp_path / "right.pt"), "--batch", "512"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("readout +1") and "--readout" not in out
