"""The attention-only linear transformer of the paper, on TransformerLens hooks.

Tokens are the d + d' rows of the prompt Z (b, d + d', n + n'). One layer is (paper, eq. 2)

    Z ← Z + Σ_h ((Z W_Q^h)(Z W_K^h)ᵀ ⊙ M) Z W_V^h W_P^hᵀ

with no softmax, MLP or LayerNorm. The fixed mask M lets every token attend only to the d visible
rows [A C], so the hidden D block never feeds a key or a value. The prediction is the *negated* D
slot: one layer with W_QK = diag(I_n, 0), W_VP = diag(-a I_n, -c I_n') runs one EAGLE step on A, B,
C exactly while the D slot accumulates -D_EAGLE, so a model that read D directly could
not express EAGLE. `readout="learned"` replaces the fixed -1 by a trained scalar.

Regimes (registry `REGIMES`):
  centralized  full attention, head width n + n'
  distributed  one head per machine; head μ's query and key see only its own column block A^μ
               (local attention); machines talk only through W_VP, whose outputs are summed
  constrained  query/key width r ≪ n, value/projection width r + n' (a learned sketch)
Seed-text variants of the token mask: `token_mask="block_diagonal"` (data shards: a token attends
only to visible tokens of its own shard) and `token_mask="sparse"` (a fixed random sparse mask).

Hook points, named and shaped as in TransformerLens (b = batch, h = heads, T = d + d' tokens,
E = n + n' = d_model). There is no softmax, so the pattern is the masked score itself.
  hook_scale                       [b, 1, 1]   per-prompt scale s: the layers see Z / s
  hook_embed                       [b, T, E]   the prompt in internal units, Z_0 = Z_prompt / s
  blocks.{l}.hook_resid_pre        [b, T, E]   stream entering layer l
  blocks.{l}.attn.hook_q / hook_k  [b, T, h, qk]
  blocks.{l}.attn.hook_v           [b, T, h, vp]
  blocks.{l}.attn.hook_attn_scores [b, h, T, T]  (Z W_Q)(Z W_K)ᵀ ⊙ M, query by key (⊙ M_s / n in
                                                 the sample layout)
  blocks.{l}.attn.hook_pattern     [b, h, T, T]  the weights on the values (= attn_scores)
  blocks.{l}.attn.hook_z           [b, T, h, vp] pattern @ v, per head
  blocks.{l}.attn.hook_result      [b, T, h, E]  each head's contribution to the stream
  blocks.{l}.hook_attn_out         [b, T, E]     sum over heads
  blocks.{l}.hook_resid_post       [b, T, E]
  hook_prediction                  [b, d', n']   the model's estimate of D (prompt units):
                                                 readout_scale · resid_post[L-1][:, d:, n:] · s
`run_with_cache` returns a TransformerLens `ActivationCache`; `model.QK` and `model.OV` are the
per-head products W_Q W_Kᵀ and W_V W_Pᵀ as `FactoredMatrix` objects of shape [L, h, E, E].

Token layouts (`tokens`, registry `TOKEN_LAYOUTS`). "features" is the layout above. "samples" is
the layout of the in-context-learning literature (von Oswald et al. 2023, Ahn et al. 2023): the
tokens are the n + n' samples, the stream is H = Zᵀ (b, n + n', d + d') with rows [x_i, y_i] and
the n' query rows [x_q, 0] last, and one layer is

    H ← H + Σ_h ((H W_Q^h)(H W_K^h)ᵀ ⊙ M_s) H W_V^h W_P^hᵀ / n

with M_s[i, j] = 1 for j < n: every row attends to the n sample rows only, so no query row acts as
a key. The prediction is the negated label entries of the query rows, read back as (b, d', n').
`forward` takes the same block prompt Z = [[A, C], [B, 0]] in both layouts (the sample layout
transposes it into H after scaling), so training, evaluation and `complete` are layout-blind; the
hooks carry the stream as the layers see it: T = n + n', E = d + d' in the sample layout.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformer_lens import ActivationCache, FactoredMatrix, HookedRootModule
from transformer_lens.hook_points import HookPoint

from eagle_probe import regimes
from eagle_probe.config import StrictDict, check_positive_ints
from eagle_probe.errors import EagleProbeError
from eagle_probe.names import NORMALIZE, READOUTS, TOKEN_MASKS
from eagle_probe.tasks import Prompt

REGIMES = regimes.NAMES  # the registry's names (`eagle_probe.regimes`)
INITS = ("normal", "orthogonal_half")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
TOKEN_LAYOUTS = ("features", "samples")


@dataclass(frozen=True, kw_only=True)
class ModelConfig(StrictDict):
    """Architecture of one model. Sizes must match the prompts it is given."""

    KIND = "model config"

    regime: str = "centralized"  # one of regimes.NAMES (`eagle_probe.regimes`)
    n: int = 18  # columns of A (samples)
    d: int = 18  # rows of A (features)
    n_prime: int = 2  # columns of C, D (queries)
    d_prime: int = 2  # rows of B, D (outputs)
    n_layers: int = 4  # number of attention layers
    n_heads: int | None = None  # heads per layer; None: 1, or one per machine
    machines: int = 3  # distributed regimes: column blocks M (must divide n), one head each
    rank: int = 5  # constrained: query/key width r (1 <= r <= n)
    qk_width: int | None = None  # override the query/key width of each head
    vp_width: int | None = None  # override the value/projection width of each head
    token_mask: str = "visible"  # one of TOKEN_MASKS
    shards: int = 2  # block_diagonal: token shards (must divide d)
    mask_density: float = 0.5  # sparse: probability that a visible entry of M is kept
    mask_seed: int = 0  # sparse: seed of the fixed random mask
    readout: str = "negate"  # one of READOUTS: prediction = scale · D slot, scale -1 by default
    # one of NORMALIZE: divide the prompt by this norm of A (hook_scale), rescale D; "none" is the
    # paper's plain model, which is unstable to train
    normalize: str = "spectral"
    init: str = "normal"  # one of INITS
    init_std: float = 0.02  # standard deviation of the normal part of the initialisation
    dtype: str = "float32"  # parameter dtype, one of DTYPES
    # one of TOKEN_LAYOUTS: tokens are the d + d' feature rows of Z, or the n + n' samples (H = Zᵀ)
    tokens: str = "features"
    # distributed: the machines apply one W_Q, W_K, W_V (the paper's); False gives each its own
    share_heads: bool = True

    def __post_init__(self) -> None:
        choices = {
            "regime": tuple(regimes.REGIMES),
            "token_mask": TOKEN_MASKS,
            "readout": READOUTS,
            "normalize": NORMALIZE,
            "init": INITS,
            "dtype": tuple(DTYPES),
            "tokens": TOKEN_LAYOUTS,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; choose from {', '.join(allowed)}")
        ints = ["n", "d", "n_prime", "d_prime", "n_layers", "machines", "rank", "shards"]
        ints += [f for f in ("n_heads", "qk_width", "vp_width") if getattr(self, f) is not None]
        check_positive_ints(self, ints)
        regimes.get(self.regime).check(self)
        if self.token_mask == "block_diagonal" and self.d % self.shards:
            raise ValueError(f"shards={self.shards} must divide d={self.d}")
        if not 0.0 < self.mask_density <= 1.0:
            raise ValueError(f"mask_density must lie in (0, 1], got {self.mask_density!r}")
        if not (self.init_std > 0.0 and math.isfinite(self.init_std)):
            raise ValueError(f"init_std must be a positive number, got {self.init_std!r}")
        if not isinstance(self.share_heads, bool):
            raise ValueError(f"share_heads must be true or false, got {self.share_heads!r}")
        if self.tokens == "samples" and (
            self.spec.families[0] != "eagle" or self.token_mask != "visible"
        ):
            raise ValueError(
                "the sample layout (tokens='samples') supports only regime='centralized' with "
                "token_mask='visible'"
            )
        if self.n_heads is None:
            # resolved here, so `cfg.n_heads` is always the head count (TransformerLens reads it)
            object.__setattr__(self, "n_heads", self.heads)

    @property
    def spec(self) -> regimes.Regime:
        """The regime's registry entry (`eagle_probe.regimes`)."""
        return regimes.get(self.regime)

    @property
    def heads(self) -> int:
        if self.n_heads is not None:
            return self.n_heads
        return self.spec.heads(self)

    @property
    def samples(self) -> bool:
        """True in the sample layout (tokens are the n + n' samples)."""
        return self.tokens == "samples"

    @property
    def prompt_shape(self) -> tuple[int, int]:
        """(d + d', n + n'): the block prompt Z = [[A, C], [B, 0]] that `forward` takes."""
        return self.d + self.d_prime, self.n + self.n_prime

    @property
    def n_tokens(self) -> int:
        """Tokens T of the residual stream: d + d' feature rows, or n + n' samples."""
        return self.n + self.n_prime if self.samples else self.d + self.d_prime

    @property
    def width(self) -> int:
        """Residual width E: n + n' (feature layout; n + M n' where every machine holds a C/D
        copy) or d + d' (sample layout)."""
        return self.d + self.d_prime if self.samples else self.spec.width(self)

    @property
    def d_model(self) -> int:
        """TransformerLens's name for the residual width E."""
        return self.width

    @property
    def d_head(self) -> int:
        """TransformerLens's head width: the query/key width qk (values have width `vp`)."""
        return self.qk

    @property
    def n_ctx(self) -> int:
        """TransformerLens's context length: the T tokens of the stream."""
        return self.n_tokens

    @property
    def keys(self) -> int:
        """Tokens that may act as keys: the d visible rows, or the n sample rows."""
        return self.n if self.samples else self.d

    @property
    def attn_only(self) -> bool:
        """No MLPs (read by TransformerLens's `ActivationCache.decompose_resid`)."""
        return True

    @property
    def block(self) -> int:
        """A/B columns per machine in the machine regimes (n outside them)."""
        return self.spec.block(self)

    @property
    def qk(self) -> int:
        if self.qk_width is not None:
            return self.qk_width
        return self.width if self.samples else self.spec.qk(self)

    @property
    def vp(self) -> int:
        if self.vp_width is not None:
            return self.vp_width
        return self.width if self.samples else self.spec.vp(self)

    @property
    def head_input(self) -> int:
        """Rows of the stored W_Q, W_K, W_V: the columns a head reads (its machine's block where
        values are local, else the whole stream)."""
        return self.width if self.samples else self.spec.head_input(self)

    @property
    def weight_heads(self) -> int:
        """Head axis of the stored W_Q, W_K, W_V: 1 where the machines share one set."""
        return self.spec.weight_heads(self)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def token_mask(cfg: ModelConfig) -> torch.Tensor:
    """The fixed attention mask M: (T, T), M[i, j] = 1 where token i may attend to token j."""
    T, d = cfg.n_tokens, cfg.d
    mask = torch.zeros(T, T, dtype=torch.float64)
    if cfg.samples:
        mask[:, : cfg.n] = 1.0  # M_s: the n sample rows are the only keys (no query row)
        return mask
    mask[:, :d] = 1.0  # every token attends to the d visible rows [A C] only
    if cfg.token_mask == "block_diagonal":
        size = d // cfg.shards
        shard = torch.arange(T).clamp(max=d - 1) // size  # B/D tokens join the last shard
        shard[d:] = torch.arange(cfg.d_prime) % cfg.shards  # spread the output tokens
        mask *= (shard[:, None] == shard[None, :]).to(mask.dtype)
    elif cfg.token_mask == "sparse":
        g = torch.Generator().manual_seed(cfg.mask_seed)
        keep = torch.rand(T, T, generator=g, dtype=torch.float64) < cfg.mask_density
        mask *= keep.to(mask.dtype)
    return mask


def qk_row_mask(cfg: ModelConfig) -> torch.Tensor:
    """Which stream columns each head's query and key read: (h, E) (`Regime.reads`). Machine
    regimes: head μ reads only machine μ's columns (local attention)."""
    if cfg.samples:
        return torch.ones(cfg.heads, cfg.width, dtype=torch.float64)
    return torch.from_numpy(cfg.spec.reads(cfg, "qk").astype(float))


def head_selector(cfg: ModelConfig) -> torch.Tensor | None:
    """(h, E, head_input) 0/1 matrices placing each head's local W_Q, W_K, W_V on its machine's
    stream columns, or None where every head reads the whole stream (`Regime.selector`)."""
    sel = None if cfg.samples else cfg.spec.selector(cfg)
    return None if sel is None else torch.from_numpy(sel)


def stream_weights(W: torch.Tensor, selector: torch.Tensor | None, heads: int) -> torch.Tensor:
    """A stored W_Q, W_K or W_V (…, h_w, head_input, k) as each head applies it to the stream:
    (…, h, E, k). Where the machines share one set (h_w = 1) every head gets it, on its own
    machine's columns (selector (h, E, head_input)); without a selector, W itself."""
    if selector is None:
        return W
    return selector @ W.expand(*W.shape[:-3], heads, *W.shape[-2:])  # (…, h, E, k)


class Attention(nn.Module):
    """One linear-attention layer, all heads at once.

    The stored W_Q, W_K, W_V are (h_w, head_input, k): where a head reads only its machine's
    block (the paper's distributed regime) they are local weights, placed on each machine's
    columns by a fixed selector, and h_w = 1 when the machines share them; elsewhere they are
    (h, E, k) as they act. W_P is always (h, E, vp): the projection writes anywhere."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, E, dtype = cfg.heads, cfg.width, cfg.torch_dtype
        hw, rows = cfg.weight_heads, cfg.head_input
        self.W_Q = nn.Parameter(torch.zeros(hw, rows, cfg.qk, dtype=dtype))  # (h_w, rows, qk)
        self.W_K = nn.Parameter(torch.zeros(hw, rows, cfg.qk, dtype=dtype))  # (h_w, rows, qk)
        self.W_V = nn.Parameter(torch.zeros(hw, rows, cfg.vp, dtype=dtype))  # (h_w, rows, vp)
        self.W_P = nn.Parameter(torch.zeros(h, E, cfg.vp, dtype=dtype))  # (h, E, vp)
        self.heads = h
        self.register_buffer("qk_mask", qk_row_mask(cfg).to(dtype))  # (h, E)
        self.register_buffer("mask", token_mask(cfg).to(dtype))  # (T, T)
        selector = head_selector(cfg)
        # fixed by the config, so not in the state dict: (h, E, head_input) or None
        self.register_buffer(
            "selector", None if selector is None else selector.to(dtype), persistent=False
        )
        # the sample layout averages over the n keys (the 1/n of von Oswald et al. and Ahn et al.)
        self.key_norm = 1.0 / cfg.n if cfg.samples else 1.0
        self.hook_q = HookPoint()  # [b, T, h, qk]
        self.hook_k = HookPoint()  # [b, T, h, qk]
        self.hook_v = HookPoint()  # [b, T, h, vp]
        self.hook_attn_scores = HookPoint()  # [b, h, T, T]
        self.hook_pattern = HookPoint()  # [b, h, T, T]
        self.hook_z = HookPoint()  # [b, T, h, vp]
        self.hook_result = HookPoint()  # [b, T, h, E]

    def effective_qk(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_Q, W_K as each head applies them to the stream, the locality mask on: (h, E, qk)."""
        m = self.qk_mask.unsqueeze(-1)
        W_Q = stream_weights(self.W_Q, self.selector, self.heads)
        W_K = stream_weights(self.W_K, self.selector, self.heads)
        return W_Q * m, W_K * m

    def effective_v(self) -> torch.Tensor:
        """W_V as each head applies it to the stream: (h, E, vp)."""
        return stream_weights(self.W_V, self.selector, self.heads)

    @property
    def W_O(self) -> torch.Tensor:
        """TransformerLens's output weight: W_Pᵀ per head, (h, vp, E), so result = z @ W_O."""
        return self.W_P.transpose(-1, -2)

    @property
    def QK(self) -> FactoredMatrix:
        """This layer's W_Q W_Kᵀ per head as a `FactoredMatrix` [h, E, E] (locality mask on)."""
        W_Q, W_K = self.effective_qk()
        return FactoredMatrix(W_Q.detach(), W_K.detach().transpose(-1, -2))

    @property
    def OV(self) -> FactoredMatrix:
        """This layer's W_V W_Pᵀ = W_V W_O per head as a `FactoredMatrix` [h, E, E]."""
        return FactoredMatrix(self.effective_v().detach(), self.W_O.detach())

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # z: (b, T, E)
        b, T, E = z.shape
        W_Q, W_K = self.effective_qk()
        W_V = self.effective_v()
        h, qk, vp = W_Q.shape[0], W_Q.shape[-1], W_V.shape[-1]
        flat = z.reshape(b * T, E)  # all heads in one GEMM each: (bT, E) @ (E, h·k)

        def per_head(W: torch.Tensor, width: int) -> torch.Tensor:
            out = flat @ W.permute(1, 0, 2).reshape(E, h * width)  # (bT, h·width)
            return out.view(b, T, h, width)  # (b, T, h, width)

        q = self.hook_q(per_head(W_Q, qk))  # (b, T, h, qk)
        k = self.hook_k(per_head(W_K, qk))  # (b, T, h, qk)
        v = self.hook_v(per_head(W_V, vp))  # (b, T, h, vp)
        scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1)  # (b, h, T, T)
        scores = self.hook_attn_scores(scores * (self.mask * self.key_norm))  # (b, h, T, T)
        pattern = self.hook_pattern(scores)  # no softmax: the scores weight the values
        z_heads = self.hook_z((pattern @ v.transpose(1, 2)).transpose(1, 2))  # (b, T, h, vp)
        # project each head back to the stream: (h, bT, vp) @ (h, vp, E)
        out = z_heads.permute(2, 0, 1, 3).reshape(h, b * T, vp) @ self.W_P.transpose(1, 2)
        result = self.hook_result(out.view(h, b, T, E).permute(1, 2, 0, 3))  # (b, T, h, E)
        return result.sum(dim=2)  # (b, T, E)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn = Attention(cfg)
        self.hook_resid_pre = HookPoint()  # [b, T, E]
        self.hook_attn_out = HookPoint()  # [b, T, E]
        self.hook_resid_post = HookPoint()  # [b, T, E]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = self.hook_resid_pre(z)
        return self.hook_resid_post(z + self.hook_attn_out(self.attn(z)))


class LinearTransformer(HookedRootModule):
    """The paper's model. `forward(z0)` maps prompts (b, T, E) to predictions of D (b, d', n')."""

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        scale = torch.tensor(-1.0 if cfg.readout != "direct" else 1.0, dtype=cfg.torch_dtype)
        if cfg.readout == "learned":
            self.readout_scale = nn.Parameter(scale)
        else:
            self.register_buffer("readout_scale", scale)
        self.hook_scale = HookPoint()  # [b, 1, 1]
        self.hook_embed = HookPoint()  # [b, T, E]
        self.hook_prediction = HookPoint()  # [b, d', n']
        if generator is not None:
            self.initialize(generator)
        self.setup()

    # --- parameters --------------------------------------------------------------------------

    @torch.no_grad()
    def initialize(self, generator: torch.Generator) -> None:
        """Random weights: N(0, init_std²), or the seed text's orthogonal-half initialisation
        (the first half of each weight's columns orthonormal, the rest N(0, 1e-3))."""
        std = self.cfg.init_std
        for block in self.blocks:
            for W in (block.attn.W_Q, block.attn.W_K, block.attn.W_V, block.attn.W_P):
                noise = torch.randn(W.shape, generator=generator, dtype=torch.float64)
                if self.cfg.init == "normal":
                    W.copy_(noise * std)
                    continue
                W.copy_(noise * math.sqrt(1e-3))
                half = max(1, W.shape[-1] // 2)
                q, _ = torch.linalg.qr(
                    torch.randn(
                        W.shape[0], W.shape[1], half, generator=generator, dtype=torch.float64
                    )
                )
                W[..., :half] = q[..., : W.shape[1], :half] * std

    @property
    def QK(self) -> FactoredMatrix:
        """W_Q W_Kᵀ of every layer and head as a `FactoredMatrix` [L, h, E, E] (detached;
        distributed: with the locality mask applied)."""
        qk = [b.attn.effective_qk() for b in self.blocks]
        W_Q = torch.stack([q for q, _ in qk]).detach()  # (L, h, E, qk)
        W_K = torch.stack([k for _, k in qk]).detach()  # (L, h, E, qk)
        return FactoredMatrix(W_Q, W_K.transpose(-1, -2))

    @property
    def OV(self) -> FactoredMatrix:
        """W_V W_Pᵀ of every layer and head as a `FactoredMatrix` [L, h, E, E] (detached)."""
        W_V = torch.stack([b.attn.effective_v() for b in self.blocks]).detach()  # (L, h, E, vp)
        W_P = torch.stack([b.attn.W_P for b in self.blocks]).detach()  # (L, h, E, vp)
        return FactoredMatrix(W_V, W_P.transpose(-1, -2))

    # TransformerLens's stacked weights, [L, h, E, width] (W_O: [L, h, vp, E]), detached, as each
    # head applies them to the stream (local weights placed on the head's machine; W_Q and W_K with
    # the locality mask applied), so W_Q @ W_Kᵀ is `QK`
    @property
    def W_Q(self) -> torch.Tensor:
        return torch.stack([b.attn.effective_qk()[0] for b in self.blocks]).detach()

    @property
    def W_K(self) -> torch.Tensor:
        return torch.stack([b.attn.effective_qk()[1] for b in self.blocks]).detach()

    @property
    def W_V(self) -> torch.Tensor:
        return torch.stack([b.attn.effective_v() for b in self.blocks]).detach()

    @property
    def W_O(self) -> torch.Tensor:
        return torch.stack([b.attn.W_O for b in self.blocks]).detach()

    def W_QK(self, layer: int | None = None) -> torch.Tensor:
        """`QK` as a plain tensor: (L, h, E, E), or (h, E, E) for one layer."""
        return self._per_layer(layer, lambda a: torch.einsum("hek,hfk->hef", *a.effective_qk()))

    def W_VP(self, layer: int | None = None) -> torch.Tensor:
        """`OV` as a plain tensor: (L, h, E, E), or (h, E, E) for one layer."""
        return self._per_layer(
            layer, lambda a: torch.einsum("hev,hfv->hef", a.effective_v(), a.W_P)
        )

    def _per_layer(self, layer, fn) -> torch.Tensor:
        with torch.no_grad():
            if layer is not None:
                return fn(self.blocks[layer].attn).detach().clone()
            return torch.stack([fn(b.attn) for b in self.blocks]).detach().clone()

    # --- running -----------------------------------------------------------------------------

    def run_with_cache(
        self, *args, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs
    ) -> tuple[torch.Tensor, ActivationCache | dict[str, torch.Tensor]]:
        """`HookedRootModule.run_with_cache`, returning an `ActivationCache` (as a
        HookedTransformer does), so `cache["attn_scores", 0]` and `cache.stack_activation(...)`
        work; `return_cache_object=False` gives the plain dict."""
        out, cache = super().run_with_cache(*args, remove_batch_dim=remove_batch_dim, **kwargs)
        if return_cache_object:
            cache = ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache

    def check_prompt(self, z0: torch.Tensor) -> None:
        cfg = self.cfg
        if not isinstance(z0, torch.Tensor) or z0.ndim != 3:
            shape = tuple(z0.shape) if isinstance(z0, torch.Tensor) else type(z0).__name__
            raise EagleProbeError(
                f"prompt must have shape (batch, {cfg.prompt_shape[0]}, {cfg.prompt_shape[1]}), "
                f"got {shape}"
            )
        if tuple(z0.shape[1:]) != cfg.prompt_shape:
            raise EagleProbeError(
                f"prompt has shape {tuple(z0.shape)}, but this model takes "
                f"(batch, d + d' = {cfg.prompt_shape[0]}, n + n' = {cfg.prompt_shape[1]})"
            )
        if not bool(torch.isfinite(z0).all()):
            raise EagleProbeError("prompt contains NaN or Inf entries")

    def prompt_scale(self, z0: torch.Tensor) -> torch.Tensor:
        """Per-prompt scale the prompt is divided by before the layers: (b, 1, 1), or per column
        (b, 1, n + n') where each machine divides by its own ‖A^μ‖ (`prompt_scale`)."""
        return prompt_scale(self.cfg, z0)

    def forward(self, z0: torch.Tensor | Prompt) -> torch.Tensor:
        """Predict D for prompts z0 = [[A, C], [B, 0]]: (b, d + d', n + n') → (b, d', n').
        A `Prompt` is taken as its visible prompt `prompt.z0()`."""
        if isinstance(z0, Prompt):
            z0 = z0.z0()
        self.check_prompt(z0)
        cfg = self.cfg
        z0 = z0.to(cfg.torch_dtype)
        scale = self.hook_scale(self.prompt_scale(z0))  # (b, 1, 1) or (b, 1, n + n')
        z = self.hook_embed(to_stream(cfg, z0 / scale))  # (b, T, E)
        return self.forward_from(0, z, scale)

    def forward_from(self, layer: int, z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """The prediction (b, d', n') from the stream z (b, T, E) entering block `layer` and the
        prompt scale (`hook_scale`'s value): blocks `layer` … L − 1 and the readout, run as
        `forward` runs them, so a change to later layers alone can start from a kept stream."""
        for block in self.blocks[layer:]:
            z = block(z)
        return self.hook_prediction(readout(self.cfg, z, scale, self.readout_scale))

    def complete(self, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        """Predict D from the visible blocks A (b, d, n), B (b, d', n), C (b, d, n')."""
        from eagle_probe.tasks import check_blocks

        check_blocks(A, B, C, None)
        top = torch.cat([A, C], dim=-1)
        bottom = torch.cat([B, torch.zeros(B.shape[0], B.shape[1], C.shape[2], dtype=B.dtype)], -1)
        return self(torch.cat([top, bottom], dim=-2))


# --- the stream's layout (`Regime.stream_columns`): shared by the model, ensemble and capture ---


@functools.lru_cache(maxsize=64)
def _columns(cfg: ModelConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """(stream_columns, grouped) index arrays where the stream is not the prompt's own columns."""
    if cfg.samples or not cfg.spec.copies:
        return None
    return cfg.spec.stream_columns(cfg), cfg.spec.grouped(cfg)


def to_stream(cfg: ModelConfig, z: torch.Tensor) -> torch.Tensor:
    """Block prompt (…, d + d', n + n') → the stream (…, T, E): itself, H = Zᵀ (sample layout),
    or machine blocks [A^μ | C] / [B^μ | D] with the C/D columns copied into every block."""
    if cfg.samples:
        return z.transpose(-1, -2)
    cols = _columns(cfg)
    return z if cols is None else z[..., torch.from_numpy(cols[0]).to(z.device)]


def from_stream(cfg: ModelConfig, z: torch.Tensor) -> torch.Tensor:
    """Stream (…, T, E) → block orientation [[A, C], [B, D]] (…, d + d', n + c n'), the c C/D
    copies one after another after the n A/B columns in the prompt's order."""
    if cfg.samples:
        return z.transpose(-1, -2)
    cols = _columns(cfg)
    return z if cols is None else z[..., torch.from_numpy(cols[1]).to(z.device)]


def into_stream(cfg: ModelConfig, z: torch.Tensor) -> torch.Tensor:
    """Block orientation (…, d + d', n + c n') → the stream (…, T, E): `from_stream`'s inverse
    (every C/D copy goes back to its own machine block)."""
    if cfg.samples:
        return z.transpose(-1, -2)
    cols = _columns(cfg)
    return z if cols is None else z[..., torch.from_numpy(np.argsort(cols[1])).to(z.device)]


def grouped_products(cfg: ModelConfig, P):
    """Products (…, E, E) in stream order → block orientation (`from_stream`'s column order); the
    views and the plants read products this way. Works on tensors and arrays alike."""
    cols = _columns(cfg)
    return P if cols is None else P[..., cols[1], :][..., cols[1]]


def stream_products(cfg: ModelConfig, P):
    """Products (…, E, E) in block orientation → stream order (the inverse of
    `grouped_products`)."""
    cols = _columns(cfg)
    if cols is None:
        return P
    inverse = np.argsort(cols[1])
    return P[..., inverse, :][..., inverse]


def d_slot(cfg: ModelConfig, blocks: torch.Tensor) -> torch.Tensor:
    """The D slot (…, d', n') of a stream in block orientation: the mean of its C/D copies."""
    D = blocks[..., cfg.d :, cfg.n :]  # (…, d', c n')
    copies = D.shape[-1] // cfg.n_prime
    if copies == 1:
        return D
    return D.unflatten(-1, (copies, cfg.n_prime)).mean(-2)


def readout(
    cfg: ModelConfig, z: torch.Tensor, scale: torch.Tensor, readout_scale: torch.Tensor
) -> torch.Tensor:
    """The prediction (…, d', n') in prompt units from a final stream z (…, T, E) in internal units
    and the prompt scale (…, 1, 1) or (…, 1, n + n'): readout_scale · D slot · scale."""
    slot = d_slot(cfg, from_stream(cfg, z))  # (…, d', n')
    return readout_scale * slot * (scale if scale.shape[-1] == 1 else scale[..., cfg.n :])


def prompt_scale(
    cfg: ModelConfig,
    z0: torch.Tensor,
    spectral: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The per-prompt scale a model divides its prompts z0 (…, d + d', n + n') by: the chosen norm
    of A, (…, 1, 1); where each machine scales its own columns (`Regime.copies`), per column
    (…, 1, n + n'): ‖A^μ‖ on machine μ's A/B columns, 1 on the C/D columns. `spectral` replaces
    torch's 2-norm (the ensemble's cheaper one)."""
    if cfg.normalize == "none":
        return torch.ones(*z0.shape[:-2], 1, 1, dtype=z0.dtype, device=z0.device)
    tiny = torch.finfo(z0.dtype).tiny
    A = z0[..., : cfg.d, : cfg.n].detach()  # (…, d, n)
    copies = _columns(cfg) is not None
    if copies:  # each machine's own block: (…, M, d, n / M)
        A = A.unflatten(-1, (cfg.machines, cfg.block)).movedim(-2, -3)
    if cfg.normalize == "frobenius":
        norm = torch.linalg.matrix_norm(A, ord="fro")
    elif spectral is not None:
        norm = spectral(A)
    else:
        norm = torch.linalg.matrix_norm(A, ord=2)
    norm = norm.clamp_min(tiny)
    if not copies:
        return norm[..., None, None]
    ones = torch.ones(*norm.shape[:-1], cfg.n_prime, dtype=norm.dtype, device=norm.device)
    per_column = torch.cat([norm.repeat_interleave(cfg.block, dim=-1), ones], dim=-1)
    return per_column.unsqueeze(-2)  # (…, 1, n + n')


def eagle_weights(
    cfg: ModelConfig, a_steps: list[float], c_steps: list[float]
) -> dict[str, torch.Tensor]:
    """A state dict whose layer l runs one EAGLE step with A-step a_l and C-step c_l.

    Centralized layout: W_QK = diag(I_n, 0), W_VP = diag(-a I_n, -c I_n'). With h heads
    each head carries 1/h of the value, so the summed update is the same. The steps act in the
    model's internal units: only with `normalize="none"` do they act on the prompt itself.
    """
    if cfg.spec.families[0] != "eagle" or cfg.samples or cfg.qk < cfg.n or cfg.vp < cfg.width:
        raise EagleProbeError("EAGLE weights can be planted only in a centralized model")
    if len(a_steps) != cfg.n_layers or len(c_steps) != cfg.n_layers:
        raise EagleProbeError(
            f"need {cfg.n_layers} a-steps and c-steps (one per layer), "
            f"got {len(a_steps)} and {len(c_steps)}"
        )
    model = LinearTransformer(cfg)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    h, n, E, dtype = cfg.heads, cfg.n, cfg.width, cfg.torch_dtype
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        W_Q = torch.zeros(h, E, cfg.qk, dtype=dtype)
        W_Q[:, range(n), range(n)] = 1.0  # W_QK = diag(I_n, 0)
        W_V = torch.zeros(h, E, cfg.vp, dtype=dtype)
        W_V[:, range(E), range(E)] = 1.0
        W_P = torch.zeros(h, E, cfg.vp, dtype=dtype)
        W_P[:, range(n), range(n)] = -a / h
        W_P[:, range(n, E), range(n, E)] = -c / h
        prefix = f"blocks.{layer}.attn."
        state[prefix + "W_Q"], state[prefix + "W_K"] = W_Q, W_Q.clone()
        state[prefix + "W_V"], state[prefix + "W_P"] = W_V, W_P
    return state
