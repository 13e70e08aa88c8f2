"""Other codebases' weight names, read into this project's: which key is which layer's W_Q, W_K,
W_V or W_P, in which orientation, and what does not belong in a linear-attention model.

This project's layer is (h heads, E the residual width, rows of H the tokens)

    H ← H + Σ_h ((H W_Q^h)(H W_K^h)ᵀ ⊙ M) H W_V^h W_P^hᵀ

with W_Q, W_K of shape (h, E, qk) and W_V, W_P of shape (h, E, vp). The conventions recognised
map onto it as follows (`plan_import`):

  eagle-probe       blocks.{l}.attn.W_Q/W_K/W_V/W_P, (h, E, k) each: as they are
  TransformerLens   W_Q, W_K, W_V (h, E, d_head) as they are; W_O (h, d_head, E), result = z W_O,
                    so W_P = W_Oᵀ; biases b_Q, b_K, b_V (h, d_head), b_O (E)
  nn.Linear         `*.weight` (out × in), y = x weightᵀ: W_Q, W_K, W_V = weightᵀ, split into
                    `heads` column blocks; the projection back (W_P, W_O, out_proj, o_proj) maps
                    the heads' values to the stream, so W_P = weight itself (E, h·vp), split
                    the same way; `*.bias` biases
  plain matrices    a 2-D W_Q (E, k) used as H W_Q: a head axis is added (W_O (k, E) transposed)

Layers are found by the first integer in a key's path (`layers.{l}.…`, `blocks.{l}.attn.…`,
`h.{l}.…`, `transformer.h.{l}.attn.…`); keys without one are layer 0 of a one-layer model. The
roles are named W_Q / q / q_proj / query / wq (and likewise for K, V), W_P / p / proj for this
project's projection, and W_O / o / o_proj / out_proj / wo for an output projection.

Refused, because this toolkit's models have none of them: biases that are not zero, embeddings
and unembeddings, MLP weights, LayerNorm parameters, fused QKV projections, and any key the plan
cannot place (each named in one line). Masks and this project's own buffers are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from eagle_probe.errors import EagleProbeError

ROLES = {  # alias (lower case) -> role
    **dict.fromkeys(("w_q", "q", "q_proj", "query", "wq", "w_query"), "Q"),
    **dict.fromkeys(("w_k", "k", "k_proj", "key", "wk", "w_key"), "K"),
    **dict.fromkeys(("w_v", "v", "v_proj", "value", "wv", "w_value"), "V"),
    **dict.fromkeys(("w_p", "p", "proj", "p_proj"), "P"),
    **dict.fromkeys(("w_o", "o", "o_proj", "out_proj", "wo", "c_proj"), "O"),
}
TL_BIASES = {"b_q": "Q", "b_k": "K", "b_v": "V", "b_o": "O"}
# keys left out without a word: masks and this project's buffers
BUFFERS = re.compile(r"(^|\.)(mask|qk_mask|attn_mask|causal_mask|ignore|readout_scale)$", re.I)
EMBEDDINGS = re.compile(
    r"(^|[._])(embed|embeddings?|unembed|wte|wpe|w_e|w_u|w_pos|pos_embed|lm_head|tok_emb|"
    r"pos_emb|read_in|read_out|readin|readout)($|[._])",
    re.I,
)
MLPS = re.compile(r"(^|[._])(mlp|ffn|fc\d*|c_fc|w_in|w_out|w_gate|feed_forward|ff)($|[._])", re.I)
NORMS = re.compile(r"(^|[._])(ln\w*|\w*norm\w*)($|[._])", re.I)
FUSED = re.compile(r"(^|[._])(c_attn|qkv|in_proj_weight|in_proj_bias|w_qkv|qkv_proj)($|[._])", re.I)
_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")
TARGETS = {"Q": "W_Q", "K": "W_K", "V": "W_V", "P": "W_P", "O": "W_P"}


@dataclass(frozen=True)
class Entry:
    """One source key placed: its layer, role (Q, K, V, P or O) and kind."""

    key: str
    layer: int
    role: str
    kind: str  # "linear" (an nn.Linear weight, out × in), "matrix", or "bias"


@dataclass
class ImportPlan:
    """How the keys of a weights file become this project's weights (`plan_import`)."""

    convention: str  # "eagle-probe", "TransformerLens", "nn.Linear" or "plain matrices"
    keys: list[str]  # every key found
    mapping: list[tuple[str, str, str]]  # (source key, target key, how: "as is", "transposed", …)
    arrays: dict[str, np.ndarray]  # blocks.{l}.attn.W_Q/W_K/W_V/W_P, (h, E, k) each
    notes: list[str] = field(default_factory=list)  # the choices made, in words
    left_out: list[str] = field(default_factory=list)  # masks, buffers and zero biases

    @property
    def layers(self) -> int:
        return 1 + max((int(_LAYER.search(t).group(1)) for _, t, _ in self.mapping), default=-1)

    def lines(self) -> list[str]:
        """The plan in a few short lines: what was found, what it maps to, what was chosen."""
        out = [
            f"found {len(self.keys)} keys, read as {self.convention} ({self.layers} layer"
            f"{'s' if self.layers != 1 else ''}):"
        ]
        for source, target, how in _collapse(self.mapping):
            out.append(f"  {source} -> {target} ({how})")
        out += [f"  {note}" for note in self.notes]
        if self.left_out:
            out.append(f"  left out: {_names(self.left_out)}")
        return out


def _names(keys: list[str], most: int = 4) -> str:
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def _collapse(mapping: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """One row per pattern: layers.0.W_Q.weight, layers.1.W_Q.weight → layers.{l}.W_Q.weight."""
    rows: dict[tuple[str, str, str], None] = {}
    for source, target, how in mapping:
        m = _LAYER.search(target)
        layer = m.group(1)
        s = re.sub(rf"(^|\.){layer}(\.|$)", r"\1{l}\2", source, count=1)
        t = re.sub(rf"(^|\.){layer}(\.|$)", r"\1{l}\2", target, count=1)
        rows[(s, t, how)] = None
    return list(rows)


def _classify(key: str) -> Entry | str | None:
    """An attention entry, a reason the key is refused (a string), or None (left out)."""
    parts = key.split(".")
    last = parts[-1].lower()
    m = _LAYER.search(key)
    layer = int(m.group(1)) if m else 0
    if BUFFERS.search(key):
        return None
    if FUSED.search(key):
        return "fused QKV projection"
    if last in ("weight", "bias") and len(parts) >= 2:
        role = ROLES.get(parts[-2].lower())
        if role is not None and not _other_block(key):
            return Entry(key, layer, role, "linear" if last == "weight" else "bias")
    elif last in TL_BIASES and not _other_block(key):
        return Entry(key, layer, TL_BIASES[last], "bias")
    elif last in ROLES and not _other_block(key):
        return Entry(key, layer, ROLES[last], "matrix")
    if EMBEDDINGS.search(key):
        return "embedding"
    if MLPS.search(key):
        return "MLP weight"
    if NORMS.search(key):
        return "LayerNorm parameter"
    return "unrecognised"


def _other_block(key: str) -> bool:
    """True where a key that names a role sits in an MLP, a norm or an embedding."""
    head = key.rsplit(".", 2)[0] if key.count(".") >= 2 else ""
    return bool(MLPS.search(head) or NORMS.search(head) or EMBEDDINGS.search(head))


def agree(flag: str, given: int | None, found: int, source: str) -> int:
    """The size `found` in the weights (`source` says where), unless the size flag `flag` gave
    another: an import never builds a model of sizes it was told are something else."""
    if given is not None and given != found:
        raise EagleProbeError(
            f"{flag} {given} contradicts the weights: {source} gives {found}; pass {flag} {found} "
            "or leave it out"
        )
    return found


def _heads_of(entries: list[Entry], arrays: dict[str, np.ndarray], heads: int | None) -> int:
    """Heads of nn.Linear or 2-D weights: `heads`, or read from a 3-D sibling (which `heads`
    must then agree with), else 1."""
    three = [e.key for e in entries if arrays[e.key].ndim == 3]
    if not three:
        return 1 if heads is None else heads
    shape = np.shape(arrays[three[0]])
    return agree("--heads", heads, shape[0], f"{three[0]} of shape {shape}")


def _to_heads(key: str, W: np.ndarray, heads: int, role: str, kind: str) -> tuple[np.ndarray, str]:
    """This project's (h, E, k) weight of one source array, and how it was turned."""
    split = f", split into {heads} heads" if heads > 1 else ""
    if kind == "linear":
        if W.ndim != 2:
            raise EagleProbeError(f"{key} has shape {W.shape}; an nn.Linear weight is 2-D")
        out, inp = W.shape
        if role in "QKV":  # y = x Wᵀ: (E, h·k) after the transpose
            if out % heads:
                raise EagleProbeError(f"{key}: {out} outputs do not split into {heads} heads")
            k = out // heads
            return W.T.reshape(inp, heads, k).transpose(1, 0, 2), "transposed" + split
        if inp % heads:  # the projection back: (E, h·vp) as it is
            raise EagleProbeError(f"{key}: {inp} inputs do not split into {heads} heads")
        k = inp // heads
        return W.reshape(out, heads, k).transpose(1, 0, 2), "as is" + split
    if W.ndim == 2:
        W = W[None]
        how = "head axis added"
    elif W.ndim == 3:
        how = "as is"
    else:
        raise EagleProbeError(f"{key} has shape {W.shape}; need (heads, E, width) or (E, width)")
    if role == "O":  # TransformerLens: result = z W_O, W_O (h, d_head, E)
        return W.transpose(0, 2, 1), "transposed" if how == "as is" else "transposed, " + how
    return W, how


def plan_import(arrays: dict[str, np.ndarray], *, heads: int | None = None) -> ImportPlan:
    """Place every key of `arrays` (module text), or raise one line naming what is refused or
    missing, with the keys found and the mapping the plan would apply.

    `heads`: heads per layer of nn.Linear (and 2-D) weights whose outputs hold several heads side
    by side; by default read from 3-D weights beside them, else 1.
    """
    entries: list[Entry] = []
    refused: dict[str, list[str]] = {}
    left_out: list[str] = []
    for key in arrays:
        got = _classify(key)
        if got is None:
            left_out.append(key)
        elif isinstance(got, str):
            refused.setdefault(got, []).append(key)
        else:
            entries.append(got)
    biases = [e for e in entries if e.kind == "bias"]
    nonzero = [e.key for e in biases if np.any(np.asarray(arrays[e.key]) != 0)]
    left_out += [e.key for e in biases if e.key not in nonzero]
    weights = [e for e in entries if e.kind != "bias"]
    problems = []
    if nonzero:
        problems.append(f"non-zero biases {_names(nonzero)}")
    for reason in ("embedding", "MLP weight", "LayerNorm parameter", "fused QKV projection"):
        if reason in refused:
            problems.append(f"{reason}s {_names(refused[reason])}")
    if problems:
        raise EagleProbeError(
            "refused: " + "; ".join(problems) + ": this toolkit's models are attention only, "
            "without biases, embeddings, MLPs or LayerNorm (remove them if they are unused)"
        )
    if "allparam" in arrays:
        raise EagleProbeError("allparam is Ahn et al.'s layout: import it with --layout ahn")
    if "unrecognised" in refused:
        raise EagleProbeError(
            f"unrecognised keys {_names(refused['unrecognised'])}; the import reads per layer "
            "W_Q, W_K, W_V and W_P or W_O (names like layers.{l}.W_Q.weight, blocks.{l}.attn.W_Q, "
            "h.{l}.attn.q_proj.weight); rename or remove the others"
        )
    if not weights:
        raise EagleProbeError(
            f"no attention weights among the {len(arrays)} keys ({_names(list(arrays))}); the "
            "import reads per layer W_Q, W_K, W_V and W_P or W_O (names like "
            "layers.{l}.W_Q.weight, blocks.{l}.attn.W_Q, h.{l}.attn.q_proj.weight)"
        )
    h = _heads_of(weights, arrays, heads)
    by_layer: dict[int, dict[str, Entry]] = {}
    for e in weights:
        slot = by_layer.setdefault(e.layer, {})
        target = TARGETS[e.role]
        if target in slot:
            raise EagleProbeError(
                f"layer {e.layer} has two weights for {target}: {slot[target].key} and {e.key}"
                + (" (W_P and W_O: keep one)" if {slot[target].role, e.role} == {"P", "O"} else "")
            )
        slot[target] = e
    mapping, out = [], {}
    for layer in range(max(by_layer) + 1):
        slot = by_layer.get(layer, {})
        missing = [w for w in ("W_Q", "W_K", "W_V", "W_P") if w not in slot]
        if missing:
            found = ", ".join(f"{e.key} -> {t}" for t, e in slot.items()) or "nothing"
            names = [w if w != "W_P" else "W_P (or W_O)" for w in missing]
            raise EagleProbeError(
                f"layer {layer}: missing {' and '.join(names)}; found {found}; the file's "
                f"{len(arrays)} keys: {_names(list(arrays), 8)}"
            )
        for target, e in slot.items():
            W, how = _to_heads(e.key, np.asarray(arrays[e.key]), h, e.role, e.kind)
            name = f"blocks.{layer}.attn.{target}"
            out[name] = W
            mapping.append((e.key, name, how))
    kinds = {e.kind for e in weights}
    if kinds == {"linear"}:
        convention = "nn.Linear weights (out x in)"
    elif any(e.role == "O" for e in weights) or any(e.key.lower().endswith("b_q") for e in biases):
        convention = "TransformerLens weights"
    elif all(re.fullmatch(r"blocks\.\d+\.attn\.W_[QKVP]", e.key) for e in weights):
        convention = "eagle-probe weights"
    else:
        convention = "plain matrices (H @ W)"
    notes = []
    if "linear" in kinds or any(np.asarray(arrays[e.key]).ndim == 2 for e in weights):
        if heads is None:
            notes.append(
                f"read as {h} head{'s' if h > 1 else ''} per layer; pass --heads H if each "
                "projection holds H heads side by side"
            )
    return ImportPlan(convention, list(arrays), mapping, out, notes, left_out)


def plan_text(arrays: dict[str, np.ndarray], *, heads: int | None = None) -> str:
    """The plan's lines, or the one-line reason no plan exists."""
    try:
        return "\n".join(plan_import(arrays, heads=heads).lines())
    except EagleProbeError as exc:
        return str(exc)


def check_tensors(path: object, obj: dict, max_bytes: float) -> None:
    """Refuse tensors that are not plain dense CPU numbers, then hold the three float64 copies the
    import makes (read, checked, factored) to `max_bytes` (a strided view of a small storage can
    declare gigabytes)."""
    import torch

    from eagle_probe import budget

    real = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8)
    real += (torch.int8, torch.int16, torch.int32, torch.int64)
    total = 0
    for key, value in obj.items():
        if not isinstance(value, torch.Tensor):
            continue
        if value.is_nested or value.layout != torch.strided:
            kind = "nested" if value.is_nested else str(value.layout).split(".")[-1]
            raise EagleProbeError(f"{path}: weight {key} is a {kind} tensor; store dense tensors")
        if value.is_quantized or value.is_complex() or value.dtype not in real:
            raise EagleProbeError(
                f"{path}: weight {key} has dtype {value.dtype}; store real floating-point weights"
            )
        if value.device.type != "cpu" or value.is_conj() or value.is_neg():
            raise EagleProbeError(
                f"{path}: weight {key} is a {value.device.type} tensor with no plain data; store "
                "the weights themselves"
            )
        total += value.numel() * (value.element_size() + 24)
    budget.check(total, f"the weights of {path} (with their three float64 copies)", max_bytes)


def import_hint(path: object, payload: object, *, max_bytes: float | None = None) -> str:
    """What to do with a torch file that is not an eagle-probe checkpoint: the `eagle-probe
    import` command that would convert it, or why its keys cannot be read ("" for neither).
    Its tensors are read as the import reads them, held to `max_bytes` (the budget's default
    when None) before any is copied: a view of one stored number can declare gigabytes."""
    import torch

    from eagle_probe import budget

    if isinstance(payload, torch.Tensor):
        return f"; Ahn et al.'s allparam? eagle-probe import --layout ahn {path} --n N -o model.pt"
    if isinstance(payload, dict) and isinstance(payload.get("state_dict"), dict):
        payload = payload["state_dict"]
    if not isinstance(payload, dict):
        return ""
    try:
        check_tensors(path, payload, budget.DEFAULT_BYTES if max_bytes is None else max_bytes)
    except EagleProbeError as exc:
        return f"; eagle-probe import would refuse it: {exc}"
    arrays = {
        str(k): v.detach().to(torch.float64).numpy()
        for k, v in payload.items()
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.dtype == torch.bool)
    }
    try:
        plan = plan_import(arrays)
    except EagleProbeError as exc:
        return f"; eagle-probe import cannot read its keys either: {exc}"
    return (
        f"; it holds {plan.convention} for {plan.layers} layer(s): convert it with "
        f"eagle-probe import --layout samples {path} --n N -o model.pt (tokens = samples [x, y]; "
        "--layout eagle-probe for the prompt's rows; --dry-run shows the mapping)"
    )
