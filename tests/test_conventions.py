"""Other codebases' key conventions (`conventions.py`): TransformerLens, `nn.Linear` and plain
matrices read into this project's weights, heads side by side split, and whatever this toolkit's
models cannot hold (biases, embeddings, MLPs, missing or unknown keys) refused in one line that
names the keys; the hint a foreign checkpoint gets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import assert_close

from eagle_probe import conventions, layouts
from eagle_probe.cli import main
from eagle_probe.errors import EagleProbeError

N, D = 20, 5


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
    assert_close(got, want)  # the model's forward against this written-out one


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
    assert_close(got, want)  # the model's forward against this written-out one


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


def test_a_size_flag_that_contradicts_the_weights_is_refused_naming_both():
    assert conventions.agree("--d", None, 5, "W_Q of shape (6, 6)") == 5
    assert conventions.agree("--d", 5, 5, "W_Q of shape (6, 6)") == 5
    with pytest.raises(EagleProbeError) as err:
        conventions.agree("--d", 4, 5, "W_Q of shape (6, 6)")
    assert str(err.value) == (
        "--d 4 contradicts the weights: W_Q of shape (6, 6) gives 5; pass --d 5 or leave it out"
    )


def test_plan_text_is_the_plan_or_the_one_line_reason():
    state = {f"layers.0.{w}.weight": np.eye(D + 1) for w in ("W_Q", "W_K", "W_V", "W_P")}
    text = conventions.plan_text(state)
    assert text.splitlines()[0] == "found 4 keys, read as nn.Linear weights (out x in) (1 layer):"
    assert "  layers.{l}.W_Q.weight -> blocks.{l}.attn.W_Q (transposed)" in text.splitlines()
    del state["layers.0.W_K.weight"]
    reason = conventions.plan_text(state)
    assert "\n" not in reason and reason.startswith("layer 0: missing W_K")


def test_a_foreign_checkpoint_is_told_which_import_would_read_it():
    path = "their.pt"
    state = {f"layers.0.{w}.weight": torch.eye(D + 1) for w in ("W_Q", "W_K", "W_V", "W_P")}
    hint = conventions.import_hint(path, {"state_dict": state, "step": 3})
    assert "it holds nn.Linear weights (out x in) for 1 layer(s)" in hint
    assert "eagle-probe import --layout samples their.pt --n N -o model.pt" in hint
    allparam = conventions.import_hint(path, torch.zeros(1, 1, 2, 4, 4))
    assert "eagle-probe import --layout ahn their.pt --n N -o model.pt" in allparam
    mlp = conventions.import_hint(path, {**state, "blocks.0.mlp.W_in": torch.ones(6, 6)})
    assert mlp.startswith("; eagle-probe import cannot read its keys either: ")
    assert "blocks.0.mlp.W_in" in mlp and "\n" not in mlp
    assert conventions.import_hint(path, [1.0, 2.0]) == ""
