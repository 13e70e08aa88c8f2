"""Token layouts: products ↔ state_dicts, planted algorithms, and importers of other codebases.

A layer of either layout is fixed by its per-head products W_QK = W_Q W_Kᵀ and W_VP = W_V W_Pᵀ
(E × E, E the residual width). `products_to_state` factors products back into a state_dict of
full-width heads (W_Q = W_QK, W_K = I, W_V = W_VP, W_P = I), so any products can be run.

Planted algorithms of the sample layout (stream rows [x, y], x ∈ R^d, y ∈ R^d', query rows
[x_q, 0]; one layer H ← H + Σ_h ((H W_QK^h Hᵀ) ⊙ M_s) H W_VP^h / n, prediction −y_q). In card
notation (r_l = A Bᵀ − G x_l, G = A Aᵀ, the implicit iterate x_l) they are, per layer l:

  GD                    W_QK = diag(I_d, 0), W_VP = diag(0, −η_l I_d')
                        x_{l+1} = x_l + (η_l / n) r_l                         (von Oswald et al.)
  GD++                  as GD with W_VP = diag(−γ_l I_d, −η_l I_d'): the layer also moves every
                        row's features x ← (I − γ_l G / n) x, so the next layer's step acts
                        through that preconditioning of the data: with one transform before it,
                        x_{l+1} = x_l + (η_l / n)(I − γ G / n)² r_l
  preconditioned GD     W_QK = diag(Γ_l, 0), W_VP = diag(0, −η_l I_d')
                        x_{l+1} = x_l + (η_l / n) Γ_l r_l                      (Ahn et al.)

Importers (`import_arrays`, `import_file`, registry `LAYOUTS`):

  eagle-probe   per-layer blocks.{l}.attn.W_Q/W_K/W_V/W_P in this project's shapes (h, E, k),
                feature layout (E = n + n')
  samples       the same keys, sample layout (E = d + d')
  ahn           Ahn et al.'s `allparam` (layers, heads, 2, d + 1, d + 1), P = allparam[:, :, 0],
                Q = allparam[:, :, 1]; per layer Attn = Z Q Zᵀ, Output = Attn · A_mask · Z Pᵀ / N
                with A_mask = I except A_mask[N, N] = 0, Z ← Z + Σ_h Output_h, prediction
                −Z[N, d]. That is the sample layout with W_QK = Q and W_VP = Pᵀ, d' = 1.

Files: `.pt`/`.pth` (read with `torch.load(weights_only=True)`; a bare tensor is taken as
`allparam`, a dict holding a `state_dict` by that; an eagle-probe checkpoint is refused, since
the commands read it as it is and its weights alone lose its configs), `.npz` (no pickles),
`.safetensors` (when the `safetensors` package is installed).
"""

from __future__ import annotations

import math
import re
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from eagle_probe import budget, files
from eagle_probe.conventions import agree, check_tensors, plan_import
from eagle_probe.errors import EagleProbeError
from eagle_probe.fit.geometry import Geometry, sketch_projectors
from eagle_probe.model import (
    DTYPES,
    LinearTransformer,
    ModelConfig,
    grouped_products,
    stream_products,
)
from eagle_probe.tasks import TaskConfig

LAYOUTS = ("eagle-probe", "samples", "ahn")
WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_P")
_KEY = re.compile(r"^blocks\.(\d+)\.attn\.(W_Q|W_K|W_V|W_P)$")


# --- products <-> state_dict -------------------------------------------------------------------


def _checked_products(
    cfg: ModelConfig, qk: np.ndarray, vp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """qk, vp as float64 arrays of the model's shape (L, h, E, E), finite, or a one-line error."""
    qk, vp = np.asarray(qk, dtype=np.float64), np.asarray(vp, dtype=np.float64)
    shape = (cfg.n_layers, cfg.heads, cfg.width, cfg.width)
    for name, P in (("W_QK", qk), ("W_VP", vp)):
        if P.shape != shape:
            raise EagleProbeError(f"{name} has shape {P.shape}; this model needs {shape}")
        if not np.isfinite(P).all():
            raise EagleProbeError(f"{name} contains NaN or Inf entries")
    return qk, vp


def products_to_state(cfg: ModelConfig, qk: np.ndarray, vp: np.ndarray) -> dict[str, torch.Tensor]:
    """A state_dict for `cfg` whose layers have the products qk, vp (L, h, E, E).

    Needs full-width heads (cfg.qk >= E and cfg.vp >= E): W_Q = W_QK, W_K = I, W_V = W_VP, W_P = I,
    zero-padded to the head widths. Products are in block orientation (`state_products`); heads
    that read only their machine's block take them exactly (`narrow_products_to_state`).
    """
    qk, vp = _checked_products(cfg, qk, vp)
    if cfg.spec.local_values and not cfg.samples:
        return narrow_products_to_state(cfg, qk, vp)
    qk, vp = stream_products(cfg, qk), stream_products(cfg, vp)
    L, h, E = cfg.n_layers, cfg.heads, cfg.width
    if cfg.qk < E or cfg.vp < E:
        raise EagleProbeError(
            f"products can be loaded only into full-width heads (qk, vp >= {E}), "
            f"got qk={cfg.qk}, vp={cfg.vp}"
        )
    state = {k: v.clone() for k, v in LinearTransformer(cfg).state_dict().items()}
    dtype = cfg.torch_dtype
    eye = torch.zeros(h, E, max(cfg.qk, cfg.vp), dtype=dtype)
    eye[:, range(E), range(E)] = 1.0
    for layer in range(L):
        W_Q = torch.zeros(h, E, cfg.qk, dtype=dtype)
        W_Q[..., :E] = torch.from_numpy(qk[layer]).to(dtype)
        W_V = torch.zeros(h, E, cfg.vp, dtype=dtype)
        W_V[..., :E] = torch.from_numpy(vp[layer]).to(dtype)
        prefix = f"blocks.{layer}.attn."
        state[prefix + "W_Q"], state[prefix + "W_K"] = W_Q, eye[..., : cfg.qk].clone()
        state[prefix + "W_V"], state[prefix + "W_P"] = W_V, eye[..., : cfg.vp].clone()
    return state


def _factor(P: np.ndarray, width: int, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, Y) with X Yᵀ = P, both E × width, from P's SVD (exact to round-off when P's rank is
    at most `width`; P = U S Vᵀ, X = U √S, Y = V √S)."""
    U, s, Vt = np.linalg.svd(P)
    rank = int(np.sum(s > 1e-12 * max(float(s[0]), 1e-300))) if s.size else 0
    if rank > width:
        raise EagleProbeError(
            f"{name} of {where} has rank {rank}, above this model's head width {width}: "
            "it cannot be planted in this architecture"
        )
    X, Y = np.zeros((P.shape[0], width)), np.zeros((P.shape[1], width))
    root = np.sqrt(s[:rank])
    X[:, :rank], Y[:, :rank] = U[:, :rank] * root, Vt[:rank].T * root
    return X, Y


def _local_products_to_state(
    cfg: ModelConfig, qk: np.ndarray, vp: np.ndarray
) -> dict[str, torch.Tensor]:
    """The state_dict of a model whose heads read only their machine's block (stream order
    products qk, vp (L, h, E, E)): per head its local W_QK block (W_Q = I, W_K = W_QKᵀ) and the
    local rows of W_VP (W_V = I, W_P = those rows transposed), exactly. Refuses a product that
    reads another machine's columns, and heads whose local W_QK differ where the machines share
    one W_Q, W_K (their local W_VP rows must then agree on W_V = I, which always holds)."""
    spec = cfg.spec
    L, h = cfg.n_layers, cfg.heads
    state = {k: v.clone() for k, v in LinearTransformer(cfg).state_dict().items()}
    w, hw, dtype = cfg.head_input, cfg.weight_heads, cfg.torch_dtype
    for layer in range(L):
        local_qk = np.zeros((h, w, w))
        W_P = np.zeros((h, cfg.width, w))
        for head in range(h):
            where = f"layer {layer}, head {head}"
            cols = spec.machine_columns(cfg, head)
            outside = np.ones(cfg.width, dtype=bool)
            outside[cols] = False
            Q, V = qk[layer, head], vp[layer, head]
            scale = max(float(np.abs(Q).max()), float(np.abs(V).max()), 1e-300)
            # one machine (M = 1) holds every column: nothing lies outside its block
            read = max(np.abs(Q[outside]).max(initial=0.0), np.abs(Q[:, outside]).max(initial=0.0))
            if read > 1e-12 * scale:
                raise EagleProbeError(
                    f"W_QK of {where} reads columns outside machine {head}'s block: a "
                    f"{cfg.regime} head cannot hold it"
                )
            if np.abs(V[outside]).max(initial=0.0) > 1e-12 * scale:
                raise EagleProbeError(
                    f"W_VP of {where} reads columns outside machine {head}'s block: a "
                    f"{cfg.regime} head's value is local"
                )
            local_qk[head] = Q[np.ix_(cols, cols)]
            W_P[head] = V[cols].T  # (E, w): W_V = I, so W_VP's local rows are W_Pᵀ
        if hw == 1 and not np.allclose(local_qk, local_qk[:1], rtol=0, atol=1e-12 * scale):
            raise EagleProbeError(
                f"the heads of layer {layer} have different W_QK blocks, but the machines share "
                "one W_Q, W_K (plant with share_heads=False)"
            )
        eye = np.broadcast_to(np.eye(w), (hw, w, w))
        weights = {
            "W_Q": eye,
            "W_K": local_qk[:hw].swapaxes(-1, -2),
            "W_V": eye,
            "W_P": W_P,
        }
        for k, value in weights.items():
            state[f"blocks.{layer}.attn.{k}"] = torch.tensor(np.array(value), dtype=dtype)
    return state


def narrow_products_to_state(
    cfg: ModelConfig, qk: np.ndarray, vp: np.ndarray
) -> dict[str, torch.Tensor]:
    """A state_dict for heads of any width whose products are qk, vp (L, h, E, E, block
    orientation, `model.grouped_products`): each product factored through its SVD
    (W_Q W_Kᵀ = W_QK, W_V W_Pᵀ = W_VP), or placed exactly on local heads. Refuses products a head
    cannot hold: a rank above the head's width, or (machine regimes) a W_QK that reads outside
    the head's own column block (and, where values are local, a W_VP that does)."""
    qk, vp = _checked_products(cfg, qk, vp)
    qk, vp = stream_products(cfg, qk), stream_products(cfg, vp)
    if cfg.spec.local_values and not cfg.samples:
        return _local_products_to_state(cfg, qk, vp)
    L, h, E = cfg.n_layers, cfg.heads, cfg.width
    model = LinearTransformer(cfg)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rows = model.blocks[0].attn.qk_mask.to(torch.float64).numpy() if L else np.ones((h, E))
    dtype = cfg.torch_dtype
    for layer in range(L):
        W = {k: np.zeros((h, E, cfg.qk if k in ("W_Q", "W_K") else cfg.vp)) for k in WEIGHT_NAMES}
        for head in range(h):
            where = f"layer {layer}, head {head}"
            outside = np.abs(qk[layer, head]) * (1.0 - np.outer(rows[head], rows[head]))
            if outside.max() > 1e-12 * max(float(np.abs(qk[layer, head]).max()), 1e-300):
                raise EagleProbeError(
                    f"W_QK of {where} reads columns outside the head's own block: a "
                    f"{cfg.regime} head cannot hold it"
                )
            W["W_Q"][head], W["W_K"][head] = _factor(qk[layer, head], cfg.qk, "W_QK", where)
            W["W_V"][head], W["W_P"][head] = _factor(vp[layer, head], cfg.vp, "W_VP", where)
        for k, value in W.items():
            state[f"blocks.{layer}.attn.{k}"] = torch.from_numpy(value).to(dtype)
    return state


def plant(
    cfg: ModelConfig,
    a_steps: Sequence[float],
    c_steps: Sequence[float],
    *,
    family: str | None = None,
    sketch_seed: int = 0,
    sketches: np.ndarray | None = None,
    cross_a: float = 0.0,
) -> LinearTransformer:
    """A model of configuration `cfg` whose layers run `family` (default: the paper's family of
    the regime: eagle, eagle-distributed or eagle-sketched) exactly with the given steps, in
    eval mode. The sketched family draws per layer a random n × r orthonormal S (r = cfg.rank)
    from `sketch_seed` unless `sketches` (L, n, r) are given; W_QK's A-block is S Sᵀ.

    `cross_a` (machine regimes) adds A traffic the family never has: in every layer head μ also
    writes −cross_a times its own A/B update into machine μ + 1's A/B columns (column j of its
    block into column j of the next machine's), so machine μ + 1 moves by
    −cross_a · A^μ A^μᵀ A^μ as well."""
    from eagle_probe.fit import families

    if cfg.samples:
        raise EagleProbeError("EAGLE is planted in the feature layout; see gd_products for GD")
    if len(a_steps) != cfg.n_layers or len(c_steps) != cfg.n_layers:
        raise EagleProbeError(
            f"need {cfg.n_layers} a-steps and c-steps (one per layer), "
            f"got {len(a_steps)} and {len(c_steps)}"
        )
    name = family or cfg.spec.families[0]
    fam = families.get(name)
    if name not in cfg.spec.families:
        raise EagleProbeError(
            f"family {name!r} runs in a {' or '.join(fam.regimes)} model, not a {cfg.regime} one"
        )
    geo = geometry_of(LinearTransformer(cfg), None)
    projectors = None
    if name == "eagle-sketched":
        if sketches is None:
            rng = np.random.default_rng(sketch_seed)
            sketches = families.random_sketches(cfg.n, cfg.rank, cfg.n_layers, rng)
        projectors = np.einsum("lnr,lmr->lnm", sketches, sketches)
    qk, vp = fam.products(geo, a_steps, c_steps, projectors)
    if cross_a:
        if geo.machines < 2:
            raise EagleProbeError("a cross-machine A write needs a regime with several machines")
        size = cfg.n // geo.machines
        for layer, a in enumerate(a_steps):
            for mu in range(geo.machines):
                own = np.arange(mu * size, (mu + 1) * size)
                other = (own + size) % cfg.n  # machine μ + 1's columns, in the same order
                vp[layer, mu][own, other] += -cross_a * float(a)
    model = LinearTransformer(cfg)
    model.load_state_dict(narrow_products_to_state(cfg, qk, vp))
    return _finite_in_dtype(model.eval(), "plant with --dtype float64, or smaller steps")


def model_from_products(cfg: ModelConfig, qk: np.ndarray, vp: np.ndarray) -> LinearTransformer:
    """A model of configuration `cfg` running the products qk, vp (L, h, E, E), in eval mode."""
    model = LinearTransformer(cfg)
    model.load_state_dict(products_to_state(cfg, qk, vp))
    return model.eval()


def geometry_of(model: LinearTransformer, qk: np.ndarray | None) -> Geometry:
    """The regime's shape read from the model (the constrained sketch from its W_QK)."""
    cfg = model.cfg
    spec = cfg.spec
    return Geometry(
        regime=cfg.regime,
        d=cfg.d,
        n=cfg.n,
        d_prime=cfg.d_prime,
        n_prime=cfg.n_prime,
        heads=cfg.heads,
        layers=cfg.n_layers,
        mask=model.blocks[0].attn.mask.detach().to(torch.float64).cpu().numpy()
        if cfg.n_layers
        else np.ones((cfg.n_tokens, cfg.n_tokens)),
        readout=float(model.readout_scale.detach()),
        normalize=cfg.normalize,
        machines=cfg.machines if spec.machines else 1,
        projector=sketch_projectors(qk, cfg.n)
        if "sketch" in spec.views and qk is not None
        else None,
        layout=cfg.tokens,
        copies=1 if cfg.samples else spec.copies_of(cfg),
        local_scale=spec.copies and not cfg.samples,
    )


def state_products(model: LinearTransformer) -> tuple[np.ndarray, np.ndarray]:
    """The products (W_QK, W_VP) of a model as float64 arrays (L, h, E, E), block orientation
    (`model.grouped_products`)."""
    cfg = model.cfg
    return (
        grouped_products(cfg, model.W_QK().to(torch.float64).numpy()),
        grouped_products(cfg, model.W_VP().to(torch.float64).numpy()),
    )


# --- planted algorithms of the sample layout ----------------------------------------------------


def _stream_products(d: int, d_prime: int, layers: int) -> tuple[np.ndarray, np.ndarray]:
    E = d + d_prime
    return np.zeros((layers, 1, E, E)), np.zeros((layers, 1, E, E))


def gd_products(d: int, d_prime: int, etas: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sample-layout products of gradient descent from zero: layer l steps x += (η_l / n) r_l."""
    qk, vp = _stream_products(d, d_prime, len(etas))
    for layer, eta in enumerate(etas):
        qk[layer, 0, range(d), range(d)] = 1.0  # scores x_iᵀ x_j
        vp[layer, 0, range(d, d + d_prime), range(d, d + d_prime)] = -eta  # values −η y_j
    return qk, vp


def gdpp_products(
    d: int, d_prime: int, etas: Sequence[float], gammas: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """GD++ (von Oswald et al. 2023): each layer takes a GD step η_l and moves every row's features
    x ← (I − γ_l G / n) x, preconditioning the data the later layers step on."""
    if len(etas) != len(gammas):
        raise EagleProbeError(f"need one γ per η, got {len(gammas)} and {len(etas)}")
    qk, vp = gd_products(d, d_prime, etas)
    for layer, gamma in enumerate(gammas):
        vp[layer, 0, range(d), range(d)] = -gamma
    return qk, vp


def preconditioned_products(
    d: int, d_prime: int, etas: Sequence[float], gammas: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Preconditioned GD (Ahn et al. 2023): layer l steps x += (η_l / n) Γ_l r_l, Γ_l (d, d)."""
    if len(etas) != len(gammas):
        raise EagleProbeError(f"need one Γ per η, got {len(gammas)} and {len(etas)}")
    qk, vp = gd_products(d, d_prime, etas)
    for layer, gamma in enumerate(gammas):
        gamma = np.asarray(gamma, dtype=np.float64)
        if gamma.shape != (d, d):
            raise EagleProbeError(f"Γ_{layer} has shape {gamma.shape}; need ({d}, {d})")
        qk[layer, 0, :d, :d] = gamma  # scores x_qᵀ Γ x_j
    return qk, vp


def sample_config(
    *,
    n: int,
    d: int,
    layers: int,
    heads: int = 1,
    n_prime: int = 1,
    d_prime: int = 1,
    dtype: str = "float64",
    normalize: str = "none",
) -> ModelConfig:
    """A sample-layout model configuration with full-width heads."""
    return ModelConfig(
        tokens="samples",
        n=n,
        d=d,
        n_prime=n_prime,
        d_prime=d_prime,
        n_layers=layers,
        n_heads=heads,
        normalize=normalize,
        dtype=dtype,
    )


# --- importers ----------------------------------------------------------------------------------


def _check_n(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise EagleProbeError(f"{name} must be a positive integer, got {value!r}")
    return value


def _finite(name: str, array: np.ndarray) -> np.ndarray:
    if not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise EagleProbeError(f"{name} is not a real numeric array (dtype {array.dtype})")
    with np.errstate(over="ignore", invalid="ignore"):  # longdouble beyond float64: checked next
        array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise EagleProbeError(f"{name} contains NaN or Inf entries")
    return array


def _layer_weights(arrays: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """blocks.{l}.attn.W_* arrays grouped by layer, checked for completeness and shape."""
    found: dict[int, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        m = _KEY.match(key)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = _finite(key, np.asarray(value))
    if not found:
        raise EagleProbeError(
            "no weights named blocks.{l}.attn.W_Q/W_K/W_V/W_P found; is this the right --layout?"
        )
    layers = []
    for layer in range(max(found) + 1):
        got = found.get(layer, {})
        missing = [f"blocks.{layer}.attn.{w}" for w in WEIGHT_NAMES if w not in got]
        if missing:
            raise EagleProbeError(f"missing weight {missing[0]}")
        for w in WEIGHT_NAMES:
            if got[w].ndim != 3:
                raise EagleProbeError(
                    f"blocks.{layer}.attn.{w} has shape {got[w].shape}; need (heads, E, width)"
                )
        if got["W_Q"].shape != got["W_K"].shape or got["W_V"].shape != got["W_P"].shape:
            raise EagleProbeError(
                f"layer {layer}: W_Q {got['W_Q'].shape} and W_K {got['W_K'].shape} (or W_V "
                f"{got['W_V'].shape} and W_P {got['W_P'].shape}) must have the same shape"
            )
        if got["W_Q"].shape[:2] != got["W_V"].shape[:2]:
            raise EagleProbeError(
                f"layer {layer}: W_Q {got['W_Q'].shape} and W_V {got['W_V'].shape} disagree on "
                "heads or residual width"
            )
        if layers and got["W_Q"].shape != layers[0]["W_Q"].shape:
            raise EagleProbeError(f"layer {layer}: weight shapes differ from layer 0's")
        if layers and got["W_V"].shape != layers[0]["W_V"].shape:
            raise EagleProbeError(f"layer {layer}: weight shapes differ from layer 0's")
        layers.append(got)
    return layers


def _from_factors(cfg: ModelConfig, layers: list[dict[str, np.ndarray]]) -> LinearTransformer:
    model = LinearTransformer(cfg)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for layer, weights in enumerate(layers):
        for w in WEIGHT_NAMES:
            state[f"blocks.{layer}.attn.{w}"] = torch.from_numpy(weights[w]).to(cfg.torch_dtype)
    model.load_state_dict(state)
    return model.eval()


def import_arrays(
    layout: str,
    arrays: dict[str, np.ndarray],
    *,
    n: int,
    n_prime: int = 1,
    d: int | None = None,
    d_prime: int | None = None,
    dtype: str = "float32",
    normalize: str = "none",
    max_bytes: float = budget.DEFAULT_BYTES,
    heads: int | None = None,
    readout: int = -1,
) -> tuple[LinearTransformer, TaskConfig]:
    """Build this project's model from named weight arrays of `layout` (see the module text).

    The keys may follow any convention `eagle_probe.conventions.plan_import` recognises
    (this project's, TransformerLens's, nn.Linear state_dicts); `heads` splits nn.Linear
    projections that hold several heads side by side. `readout`: the sign the source model
    reads its prediction with from the D slot (the query's label entry): −1 (this project's
    convention, the negated slot) or +1 (the slot itself).

    Returns the model (eval mode) and a task of matching sizes (least squares, isotropic).
    `d`, `d_prime`: the feature layout's rows of A and B, read from a stored token mask when the
    arrays carry one; the sample layout reads d + d' from the weights (d' = 1 unless given).
    The model's size is held to `max_bytes` before it is built; weights or products that are not
    finite in `dtype` are refused.
    """
    if layout not in LAYOUTS:
        raise EagleProbeError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if dtype not in DTYPES:
        raise EagleProbeError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    n, n_prime = _check_n("n", n), _check_n("n_prime", n_prime)
    if readout not in (-1, 1):
        raise EagleProbeError(f"readout must be -1 or +1, got {readout!r}")
    if layout == "ahn":
        sizes = {"d": d, "d_prime": d_prime, "heads": heads}
        return _import_ahn(arrays, n=n, n_prime=n_prime, dtype=dtype, max_bytes=max_bytes, **sizes)
    for key, value in arrays.items():
        if key.endswith("attn.qk_mask") and not np.all(np.asarray(value) == 1):
            raise EagleProbeError(
                f"{key} restricts the heads' queries and keys (a distributed model); only full "
                "attention can be imported: load this project's checkpoints with checkpoint.load"
            )
    layers = _layer_weights(plan_import(arrays, heads=heads).arrays)
    heads, E, qk = layers[0]["W_Q"].shape
    vp = layers[0]["W_V"].shape[-1]
    common = dict(
        n_layers=len(layers),
        n_heads=heads,
        qk_width=qk,
        vp_width=vp,
        normalize=normalize,
        dtype=dtype,
        n=n,
        n_prime=n_prime,
        readout="negate" if readout == -1 else "direct",
    )
    if layout == "samples":
        dp = 1 if d_prime is None else _check_n("d_prime", d_prime)
        if E <= dp:
            raise EagleProbeError(f"residual width {E} leaves no features for d' = {dp} outputs")
        if d is not None and d + dp != E:
            raise EagleProbeError(
                f"sample layout: the weights' residual width is {E} = d + d', but d = {d} and "
                f"d' = {dp} make {d + dp}; pass --d {E - dp} (the features of a row [x, y]) or "
                "leave --d out"
            )
        cfg = ModelConfig(tokens="samples", d=E - dp, d_prime=dp, **common)
    else:
        if E != n + n_prime:
            raise EagleProbeError(
                f"feature layout: the weights' residual width is {E}, but n + n' = "
                f"{n} + {n_prime} = {n + n_prime}; pass the model's --n and --n-prime"
            )
        mask = arrays.get("blocks.0.attn.mask")
        if mask is not None:
            mask = _token_mask(np.asarray(mask))
            d_found = int(np.asarray(mask).any(axis=0).sum())
            where = f"the stored token mask ({mask.shape[0]} tokens, {d_found} visible rows)"
            d = agree("--d", d, d_found, where)
            d_prime = agree("--d-prime", d_prime, mask.shape[0] - d_found, where)
        if d is None:
            raise EagleProbeError(
                "feature layout: the weights do not fix d (rows of A); pass --d and --d-prime"
            )
        cfg = ModelConfig(
            d=_check_n("d", d),
            d_prime=_check_n("d_prime", 1 if d_prime is None else d_prime),
            **common,
        )
    task = TaskConfig(
        task="least_squares", n=n, d=cfg.d, n_prime=n_prime, d_prime=cfg.d_prime, alpha=1.0
    )
    _check_import_budget(cfg, max_bytes)
    return _finite_in_dtype(_from_factors(cfg, layers)), task


def _token_mask(mask: np.ndarray) -> np.ndarray:
    """A stored attention mask: square, of booleans or real numbers."""
    if mask.dtype.kind not in "biuf" or mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
        raise EagleProbeError(
            f"blocks.0.attn.mask is a {mask.dtype} array of shape {mask.shape}; an attention "
            "mask is a square (tokens, tokens) array of 0 and 1"
        )
    return mask


def _check_import_budget(cfg: ModelConfig, max_bytes: float, held: int = 0) -> None:
    """The model, its state's copy, the factors and the checkpoint written from them, beside the
    `held` bytes of arrays the import keeps while it builds them."""
    budget.check_model(cfg, max_bytes, what="the imported model")
    budget.check(
        4 * budget.model_bytes(cfg) + held,
        f"importing a {cfg.n_layers}-layer model of width {cfg.width} (n = {cfg.n})",
        max_bytes,
    )


def _finite_in_dtype(
    model: LinearTransformer, advice: str = "import with --dtype float64, or rescale the weights"
) -> LinearTransformer:
    """`model` unless a weight or a product W_QK, W_VP overflows its dtype (which `evaluate`
    would refuse later)."""
    with torch.no_grad():
        named = list(model.state_dict().items())
        named += [("W_QK", model.W_QK()), ("W_VP", model.W_VP())]
    for key, value in named:
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise EagleProbeError(
                f"{key} is not finite in {model.cfg.dtype} (entries beyond its range, or NaN); "
                f"{advice}"
            )
    return model


def ahn_products(allparam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W_QK, W_VP) (L, h, d + 1, d + 1) of Ahn et al.'s allparam: W_QK = Q, W_VP = Pᵀ."""
    allparam = _finite("allparam", np.asarray(allparam))
    if allparam.ndim != 5 or allparam.shape[2] != 2 or allparam.shape[3] != allparam.shape[4]:
        raise EagleProbeError(
            f"allparam has shape {allparam.shape}; need (layers, heads, 2, d + 1, d + 1)"
        )
    if allparam.shape[3] < 2 or 0 in allparam.shape:
        raise EagleProbeError(f"allparam has shape {allparam.shape}; need d + 1 >= 2")
    P, Q = allparam[:, :, 0], allparam[:, :, 1]
    return Q.copy(), P.swapaxes(-1, -2).copy()


def _import_ahn(
    arrays: dict[str, np.ndarray],
    *,
    n: int,
    n_prime: int,
    dtype: str,
    max_bytes: float,
    d: int | None = None,
    d_prime: int | None = None,
    heads: int | None = None,
) -> tuple[LinearTransformer, TaskConfig]:
    """The ahn layout: allparam (layers, heads, 2, d + 1, d + 1) fixes d, d' = 1 and the heads;
    size flags that say otherwise are refused."""
    if "allparam" not in arrays:
        names = ", ".join(sorted(arrays)[:5]) or "nothing"
        raise EagleProbeError(f"the ahn layout needs an array named 'allparam'; found {names}")
    shape = np.shape(arrays["allparam"])
    if len(shape) == 5 and shape[3] >= 1:
        where = f"allparam of shape {tuple(shape)} (layers, heads, 2, d + 1, d + 1)"
        agree("--d", d, shape[3] - 1, where)
        agree("--d-prime", d_prime, 1, "the ahn layout (one output row)")
        agree("--heads", heads, shape[1], where)
    if len(shape) == 5 and shape[2] == 2 and shape[3] == shape[4] >= 2 and 0 not in shape:
        # checked before the float64 copies: the array as float64, W_QK and W_VP
        early = sample_config(n=n, d=shape[3] - 1, layers=shape[0], heads=shape[1], dtype=dtype)
        _check_import_budget(early, max_bytes, 3 * 8 * math.prod(shape))
    qk, vp = ahn_products(arrays["allparam"])
    L, h, E = qk.shape[:3]
    cfg = sample_config(n=n, d=E - 1, layers=L, heads=h, n_prime=n_prime, dtype=dtype)
    task = TaskConfig(task="least_squares", n=n, d=E - 1, n_prime=n_prime, d_prime=1, alpha=1.0)
    _check_import_budget(cfg, max_bytes, 2 * 8 * math.prod(shape))
    return _finite_in_dtype(model_from_products(cfg, qk, vp)), task


def _weights_file(path: Path, max_bytes: float) -> None:
    """A regular file (a symbolic link is followed) of at most `max_bytes`, or a one-line error."""
    st = files.input_file(path, "weights file", EagleProbeError)
    budget.check(st.st_size, f"weights file {path}", max_bytes)


def _npz_bytes(path: Path, max_bytes: float) -> None:
    """The arrays a .npz declares (its members' .npy headers), held to `max_bytes` with their
    float64 copies before any is read: a compressed member can declare far more than it holds."""
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                total += info.file_size
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = header(member)
                    total += math.prod(shape) * (dtype.itemsize + 24)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise EagleProbeError(f"{path} is not a readable .npz file ({exc})") from exc
    budget.check(total, f"the arrays of {path} (with their three float64 copies)", max_bytes)


def read_arrays(
    path: str | Path, *, max_bytes: float = budget.DEFAULT_BYTES
) -> dict[str, np.ndarray]:
    """Named arrays of a weights file (.pt/.pth, .npz, .safetensors), never running its code.
    The file's size and the sizes its arrays declare are held to `max_bytes` before reading."""
    path = Path(path)
    _weights_file(path, max_bytes)
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        try:
            with warnings.catch_warnings():  # torch warns while rebuilding some tensor kinds
                warnings.simplefilter("ignore")
                obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
            raise EagleProbeError(
                f"{path} is not a readable torch weights file ({_first_line(exc)})"
            ) from exc
        if isinstance(obj, torch.Tensor):
            obj = {"allparam": obj}
        if isinstance(obj, dict) and obj.get("format") == "eagle-probe":
            # its weights alone would lose what its configs say (normalisation, readout, task)
            raise EagleProbeError(
                f"{path} is an eagle-probe checkpoint: every command reads it as it is, with the "
                "normalisation, readout and task its configs record, which an import of its "
                "weights would drop"
            )
        if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
            obj = obj["state_dict"]
        if not isinstance(obj, dict):
            raise EagleProbeError(f"{path} holds a {type(obj).__name__}, not named weights")
        check_tensors(path, obj, max_bytes)
        return {
            str(k): v.detach().to(torch.float64).numpy()
            if v.is_floating_point()
            else v.detach().numpy()
            for k, v in obj.items()
            if isinstance(v, torch.Tensor)
        }
    if suffix == ".npz":
        _npz_bytes(path, max_bytes)
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: np.asarray(data[k]) for k in data.files}
        except Exception as exc:  # noqa: BLE001
            raise EagleProbeError(
                f"{path} is not a readable .npz file ({_first_line(exc)})"
            ) from exc
    if suffix == ".safetensors":
        try:
            from safetensors.numpy import load_file
        except ImportError as exc:
            raise EagleProbeError(
                "reading .safetensors needs the safetensors package (pip install safetensors)"
            ) from exc
        try:
            return dict(load_file(str(path)))
        except Exception as exc:  # noqa: BLE001
            raise EagleProbeError(f"{path} is not a readable .safetensors file ({exc})") from exc
    raise EagleProbeError(f"{path}: unknown weights file type; use .pt, .npz or .safetensors")


def import_file(
    layout: str, path: str | Path, *, max_bytes: float = budget.DEFAULT_BYTES, **kwargs
) -> tuple[LinearTransformer, TaskConfig]:
    """`import_arrays` on the arrays of a weights file, both held to `max_bytes`."""
    if layout not in LAYOUTS:
        raise EagleProbeError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    return import_arrays(
        layout, read_arrays(path, max_bytes=max_bytes), max_bytes=max_bytes, **kwargs
    )


# --- a live module ------------------------------------------------------------------------------

MODULE_ROLES = ("W_Q", "W_K", "W_V", "W_P", "W_O")


def _mapped_arrays(
    state: dict[str, torch.Tensor], weights: dict[str, str]
) -> dict[str, np.ndarray]:
    """The module's weights named by `weights` (role -> key pattern with {l}), renamed so the
    convention reader knows each one's role and kind: `{l}.W_Q.weight` for an nn.Linear weight,
    `{l}.W_Q` for a matrix used as H @ W_Q."""
    unknown = sorted(set(weights) - set(MODULE_ROLES))
    if unknown:
        raise EagleProbeError(
            f"unknown role(s) {', '.join(unknown)} in the mapping; use {', '.join(MODULE_ROLES)}"
        )
    out: dict[str, np.ndarray] = {}
    for role, pattern in weights.items():
        if "{l}" not in pattern:
            raise EagleProbeError(f"key pattern {role}: {pattern!r} needs {{l}} (the layer)")
        layer = 0
        while pattern.format(l=layer) in state:
            key = pattern.format(l=layer)
            suffix = ".weight" if key.endswith("weight") else ""
            out[f"{layer}.{role}{suffix}"] = state[key].detach().to(torch.float64).cpu().numpy()
            layer += 1
        if layer == 0:
            raise EagleProbeError(
                f"{role}: no key {pattern.format(l=0)!r} in the module; its keys are "
                f"{', '.join(list(state)[:6])}"
            )
    return out


def _module_prediction(out: torch.Tensor, cfg: ModelConfig, readout: int) -> torch.Tensor:
    """The module's output as a prediction (b, d', n'): a prediction of any layout of its
    d'·n' entries, or the final stream (b, T, E), read with `readout`."""
    b = out.shape[0]
    if tuple(out.shape[1:]) == (cfg.n_tokens, cfg.width):
        from eagle_probe.model import from_stream

        return readout * from_stream(cfg, out)[:, cfg.d :, cfg.n :]
    if out.numel() != b * cfg.d_prime * cfg.n_prime:
        raise EagleProbeError(
            f"the module returned shape {tuple(out.shape)}; expected the prediction (b, "
            f"{cfg.d_prime}, {cfg.n_prime}) or the stream (b, {cfg.n_tokens}, {cfg.width})"
        )
    if cfg.samples and tuple(out.shape[1:]) == (cfg.n_prime, cfg.d_prime):
        return out.transpose(-1, -2)  # query rows' label entries → block orientation
    return out.reshape(b, cfg.d_prime, cfg.n_prime)


def from_module(
    module: torch.nn.Module,
    *,
    n: int,
    tokens: str = "samples",
    n_prime: int = 1,
    d: int | None = None,
    d_prime: int | None = None,
    weights: dict[str, str] | None = None,
    heads: int | None = None,
    readout: int = -1,
    call=None,
    prompts: int = 16,
    seed: int = 0,
    rtol: float = 1e-9,
    dtype: str = "float64",
) -> LinearTransformer:
    """This project's model with the same forward as a live `module`, checked on random prompts.

    `weights` maps roles to the module's state_dict keys with {l} for the layer, e.g.
    {"W_Q": "layers.{l}.W_Q.weight", ..., "W_P": "layers.{l}.W_P.weight"} (W_O for an output
    projection in TransformerLens's orientation; `.weight` keys are nn.Linear weights, the
    others matrices used as H @ W); by default every key of the state_dict is read by
    `conventions.plan_import`. `tokens`: "samples" (the module's tokens are the rows
    [x_i, y_i], the n' queries [x_q, 0] last) or "features" (the rows of Z). `call(module, H)`
    runs the module on its tokens H (b, T, E) (default `module(H)`) and returns the prediction
    (any layout of its d'·n' entries per prompt) or the final stream, read with `readout`
    (−1: ŷ = −y slot, this project's convention; +1: ŷ = y slot).

    Both run in float64 on `prompts` random least-squares prompts (seed `seed`); a relative gap
    above `rtol` is refused, naming the gap the other readout sign would give. The module is
    not changed (a float64 copy runs).
    """
    import copy

    from eagle_probe.tasks import make_generator, sample

    if tokens not in ("samples", "features"):
        raise EagleProbeError(f"unknown tokens {tokens!r}; choose from samples, features")
    state = module.state_dict()
    if weights is None:
        arrays = {k: v.detach().to(torch.float64).cpu().numpy() for k, v in state.items()}
    else:
        arrays = _mapped_arrays(state, weights)
    layout = "samples" if tokens == "samples" else "eagle-probe"

    def convert(dtype: str, readout: int) -> tuple[LinearTransformer, TaskConfig]:
        return import_arrays(
            layout,
            arrays,
            n=n,
            n_prime=n_prime,
            d=d,
            d_prime=d_prime,
            dtype=dtype,
            heads=heads,
            readout=readout,
        )

    model, task = convert("float64", readout)
    cfg = model.cfg
    twin = copy.deepcopy(module).to(torch.float64).eval()
    prompt = sample(task, prompts, make_generator(seed), dtype=torch.float64)
    z0 = prompt.z0()  # (b, d + d', n + n')
    from eagle_probe.model import to_stream

    with torch.no_grad():
        H = to_stream(cfg, z0)  # the module's own tokens
        out = call(twin, H) if call is not None else twin(H)
        if not isinstance(out, torch.Tensor):
            raise EagleProbeError(f"the module returned a {type(out).__name__}, not a tensor")
        out = out.to(torch.float64)
        gap = _relative_gap(model(z0), _module_prediction(out, cfg, readout))
    if not gap <= rtol:
        other = convert("float64", -readout)[0]
        with torch.no_grad():
            other_gap = _relative_gap(other(z0), _module_prediction(out, other.cfg, -readout))
        raise EagleProbeError(
            f"the converted model differs from the module by {gap:.3g} (relative, max over "
            f"{prompts} random prompts; tolerance {rtol:g}); with readout={-readout:+d} the gap "
            f"is {other_gap:.3g}. Check the token layout ({tokens}: the queries last, only the "
            f"{cfg.keys} {'samples' if cfg.samples else 'visible rows'} as keys"
            + (", scores divided by n" if cfg.samples else "")
            + "), the heads and the readout sign"
        )
    if dtype != "float64":  # checked in float64, returned in the dtype asked for
        model = convert(dtype, readout)[0]
    return model.eval()


def _relative_gap(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Largest entrywise difference over the largest entry of `theirs` (the module's)."""
    return float((ours - theirs).abs().max()) / max(float(theirs.abs().max()), 1e-300)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
