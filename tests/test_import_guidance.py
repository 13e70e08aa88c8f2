"""A researcher's own model: the import reads other conventions' keys and says what it did, refuses
what this toolkit's models cannot hold, and the live-module adapter reproduces the forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from von_oswald import LSA, draw, tokens, train

from eagle_probe import checkpoint, conventions, layouts
from eagle_probe.cli import main
from eagle_probe.errors import CheckpointError, EagleProbeError

N, D = 20, 5


def _state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _gap(source: LSA, model, seed: int = 3) -> float:
    """Largest relative gap between the source's prediction and the imported model's."""
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
    assert _gap(lsa, model) <= 1e-12


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
    assert _gap(plus, right) <= 1e-12


def test_heads_side_by_side_are_split():
    rng = np.random.default_rng(0)
    E, k = D + 1, 3
    two = {f"layers.0.{w}.weight": rng.standard_normal((2 * k, E)) * 0.3 for w in "qkv"}
    two["layers.0.o.weight"] = rng.standard_normal((E, 2 * k)) * 0.3
    model, _ = layouts.import_arrays("samples", two, n=N, dtype="float64", heads=2)
    assert model.cfg.heads == 2 and model.cfg.qk == k
    H = torch.from_numpy(rng.standard_normal((4, N + 1, E)))  # (b, T, E)
    W = {w: torch.from_numpy(two[f"layers.0.{w}.weight"]) for w in "qkvo"}
    q, key, v = H @ W["q"].T, H @ W["k"].T, H @ W["v"].T  # (b, T, 2k): heads side by side
    out = torch.zeros_like(H)
    for h in range(2):
        cols = slice(k * h, k * h + k)
        scores = q[..., cols] @ key[..., cols].transpose(1, 2)  # (b, T, T)
        out += (scores[..., :N] @ v[:, :N, cols]) @ W["o"][:, cols].T / N
    want = -(H + out)[:, -1, -1]
    with torch.no_grad():
        got = model(H.transpose(1, 2))[:, 0, 0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _tl_dict(bias: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    E, h, k = D + 1, 1, D + 1
    arrays = {
        "blocks.0.attn.W_Q": rng.standard_normal((h, E, k)) * 0.3,
        "blocks.0.attn.W_K": rng.standard_normal((h, E, k)) * 0.3,
        "blocks.0.attn.W_V": rng.standard_normal((h, E, k)) * 0.3,
        "blocks.0.attn.W_O": rng.standard_normal((h, k, E)) * 0.3,
    }
    for name, shape in (("b_Q", (h, k)), ("b_K", (h, k)), ("b_V", (h, k)), ("b_O", (E,))):
        arrays[f"blocks.0.attn.{name}"] = np.full(shape, bias)
    return arrays


def test_transformer_lens_w_o_is_transposed_and_zero_biases_left_out():
    arrays = _tl_dict(0.0)
    plan = conventions.plan_import(arrays)
    assert plan.convention.startswith("TransformerLens")
    assert ("blocks.0.attn.W_O", "blocks.0.attn.W_P", "transposed") in plan.mapping
    assert "blocks.0.attn.b_Q" in plan.left_out
    model, _ = layouts.import_arrays("samples", arrays, n=N, dtype="float64")
    H = torch.randn(3, N + 1, D + 1, dtype=torch.float64)
    t = {k: torch.from_numpy(v[0]) for k, v in arrays.items() if v.ndim == 3}
    q, k, v = H @ t["blocks.0.attn.W_Q"], H @ t["blocks.0.attn.W_K"], H @ t["blocks.0.attn.W_V"]
    z = (q @ k.transpose(1, 2))[..., :N] @ v[:, :N] / N  # hook_z
    want = -(H + z @ t["blocks.0.attn.W_O"])[:, -1, -1]  # result = z W_O
    with torch.no_grad():
        got = model(H.transpose(1, 2))[:, 0, 0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_nonzero_biases_embeddings_and_mlps_are_refused_in_one_line(tmp_path, capsys):
    arrays = _tl_dict(0.5)
    arrays["blocks.0.attn.W_P"] = arrays["blocks.0.attn.W_V"].copy()
    arrays["embed.W_E"] = np.ones((3, D + 1))
    arrays["unembed.W_U"] = np.ones((D + 1, 3))
    with pytest.raises(EagleProbeError) as err:
        conventions.plan_import(arrays)
    text = str(err.value)
    assert "\n" not in text
    assert "non-zero biases blocks.0.attn.b_Q, blocks.0.attn.b_K, blocks.0.attn.b_V" in text
    assert "embed.W_E" in text and "unembed.W_U" in text
    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, tmp_path / "tl.pt")
    code = main(
        ["import", "--layout", "samples", str(tmp_path / "tl.pt"), "--n", "5"]
        + ["-o", str(tmp_path / "out.pt")]
    )
    err_text = capsys.readouterr().err
    assert code == 2 and len(err_text.strip().splitlines()) == 1 and "b_Q" in err_text
    assert not (tmp_path / "out.pt").exists()
    mlp = {**_tl_dict(0.0), "blocks.0.mlp.W_in": np.ones((6, 6)), "ln_final.w": np.ones(6)}
    with pytest.raises(EagleProbeError, match="MLP weights blocks.0.mlp.W_in; LayerNorm"):
        conventions.plan_import(mlp)


def test_missing_and_unknown_keys_are_named_with_what_was_found():
    state = {f"layers.0.{w}.weight": np.eye(6) for w in ("W_Q", "W_V", "W_P")}
    with pytest.raises(
        EagleProbeError, match=r"layer 0: missing W_K; found layers.0.W_Q.weight -> W_Q"
    ):
        conventions.plan_import(state)
    with pytest.raises(EagleProbeError, match="unrecognised keys gate.alpha"):
        conventions.plan_import({**state, "layers.0.W_K.weight": np.eye(6), "gate.alpha": 1.0})
    with pytest.raises(EagleProbeError, match="two weights for W_P.*keep one"):
        conventions.plan_import(
            {**state, "layers.0.W_K.weight": np.eye(6), "layers.0.W_O.weight": np.eye(6)}
        )


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
    assert _gap(source, model) <= 1e-12
    for k, v in _state(source).items():
        np.testing.assert_array_equal(v, before[k])  # the module is not changed
    assert next(source.parameters()).dtype == torch.float64


def test_from_module_refuses_a_different_forward_and_names_the_other_sign(lsa):
    with pytest.raises(EagleProbeError, match=r"with readout=-1 the gap is \d\.\d+e-1[3-7]"):
        layouts.from_module(lsa, n=N, readout=1)
    model = layouts.from_module(lsa, n=N, readout=-1)
    assert _gap(lsa, model) <= 1e-12

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
    assert lay["label"] == "GD" and lay["alpha_0"] == pytest.approx(-1 / (N + D + 1), rel=1e-9)
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
        torch.testing.assert_close(model(z0), source(z0), rtol=1e-12, atol=1e-15)
    plan = conventions.plan_import(_state(source))
    assert plan.convention.startswith("eagle-probe")
    assert "blocks.0.attn.mask" in plan.left_out and "readout_scale" in plan.left_out


# --- the readout sign, never silent; bad input in one line ---------------------------------------


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
