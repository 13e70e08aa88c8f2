"""Capture every layer of a model on a probe batch, through TransformerLens `run_with_cache`.

Everything is captured in float64 (a float64 copy of the model carries the exact float32 weights),
in the model's *internal* units: when the model normalises its prompts, Z_0 = Z_prompt / s with s
the per-prompt norm of A, and all blocks below are in those units. `scale` holds s.

The implicit least-squares iterate. In card notation (A_card = Aᵀ, b = Bᵀ, x = wᵀ, D = w C) the
network's prediction after layer l is linear in the query if D̂_l = w_l C. We read w_l by probing:
the same A and B with the query columns set to the basis vectors e_1 … e_d (n' at a time), so
D_slot_l = v_l C and, because the prediction is the negated slot, w_l = -v_l, x_l = -v_lᵀ. Whether
D_l really is linear in the query is measured, not assumed: `linearity_deviation[l]` is the relative
gap between the slot on the original queries and v_l applied to them.

Both token layouts are captured in block orientation [[A, C], [B, D]]: in the sample layout the
stream H = Zᵀ is transposed back, so the D slot is the label entries of the query rows and the
probes set the query rows' features to e_1 … e_d. `layout` records which layout ran; `scores`
stay query-by-key over the layout's own tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from eagle_probe.errors import EagleProbeError
from eagle_probe.model import LinearTransformer, from_stream
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample


@dataclass(frozen=True)
class Capture:
    """One probe batch through one model. Arrays are float64 NumPy, internal units."""

    d: int
    n: int
    # block orientation (d + d', n + n') in both layouts; (T, E) below are those sizes
    Z: np.ndarray  # (L + 1, b, T, E)  residual stream: Z[0] input, Z[l + 1] after layer l
    head_out: np.ndarray  # (L, b, h, T, E)  each head's contribution
    scores: np.ndarray  # (L, b, h, T, T)  masked attention scores
    scale: np.ndarray  # (b,)  prompt scale s (1 without normalisation)
    x: np.ndarray  # (L + 1, b, d, d')  implicit iterate before layer 0 … after layer L - 1
    dx_heads: np.ndarray  # (L, b, h, d, d')  each head's part of x_{l+1} - x_l
    linearity_deviation: np.ndarray  # (L + 1,)  relative nonlinearity of D_l in the query
    target: np.ndarray  # (b, d', n')  the true D, original units
    layout: str = "features"  # the model's token layout ("features" or "samples")

    @property
    def layers(self) -> int:
        return self.head_out.shape[0]

    @property
    def heads(self) -> int:
        return self.head_out.shape[2]

    def blocks(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(A, B, C, D_slot) of the residual stream entering layer `layer` (L: the output)."""
        Z, d, n = self.Z[layer], self.d, self.n
        return Z[:, :d, :n], Z[:, d:, :n], Z[:, :d, n:], Z[:, d:, n:]

    def normal_matrix(self) -> np.ndarray:
        """G = A_card ᵀ A_card = A Aᵀ of the input prompt: (b, d, d)."""
        A = self.blocks(0)[0]
        return A @ A.swapaxes(-1, -2)

    def normal_rhs(self) -> np.ndarray:
        """A_card ᵀ b = A Bᵀ of the input prompt: (b, d, d')."""
        A, B = self.blocks(0)[:2]
        return A @ B.swapaxes(-1, -2)


def float64_copy(model: LinearTransformer) -> LinearTransformer:
    """The same model with float64 parameters (exactly the same weights)."""
    if model.cfg.dtype == "float64":
        return model
    cfg = replace(model.cfg, dtype="float64")
    copy = LinearTransformer(cfg)
    copy.load_state_dict({k: v.to(torch.float64) for k, v in model.state_dict().items()})
    copy.eval()
    return copy


def probe_batch(task: TaskConfig, batch: int, seed: int) -> Prompt:
    """Fresh prompts of `task` for probing (float64)."""
    return sample(task, batch, make_generator(seed), dtype=torch.float64)


def check_probe(prompt: Prompt) -> None:
    """Refuse degenerate probes: non-finite entries or an A block that is zero."""
    for name in ("A", "B", "C"):
        block = getattr(prompt, name)
        if not torch.isfinite(block).all():
            raise EagleProbeError(f"probe block {name} contains NaN or Inf")
    norms = torch.linalg.matrix_norm(prompt.A.to(torch.float64))
    if bool((norms == 0).any()):
        raise EagleProbeError(
            "probe batch holds a prompt whose A block is all zero; nothing to fit"
        )


@torch.no_grad()
def capture(model: LinearTransformer, prompt: Prompt) -> Capture:
    """Run `model` on `prompt` and on its query probes; return every layer's blocks and iterate."""
    check_probe(prompt)
    model = float64_copy(model)
    cfg = model.cfg
    prompt = prompt.to(torch.float64)
    if prompt.A.shape[1:] != (cfg.d, cfg.n) or prompt.C.shape[2] != cfg.n_prime:
        raise EagleProbeError(
            f"probe prompts have A {tuple(prompt.A.shape[1:])}, C {tuple(prompt.C.shape[1:])}; "
            f"the model takes A ({cfg.d}, {cfg.n}) and C ({cfg.d}, {cfg.n_prime})"
        )
    z0 = prompt.z0()
    b, L, d, n, dp, npr = z0.shape[0], cfg.n_layers, cfg.d, cfg.n, cfg.d_prime, cfg.n_prime
    _, cache = model.run_with_cache(z0)
    Z = torch.stack(
        [cache["hook_embed"]] + [cache["resid_post", i] for i in range(L)]
    )  # (L+1, b, T, E)
    Z = from_stream(cfg, Z)  # block orientation in both layouts
    head_out = from_stream(cfg, cache.stack_activation("result").transpose(2, 3))  # (L,b,h,T,E)
    scores = cache.stack_activation("attn_scores")  # (L, b, h, T, T)
    scale = cache["hook_scale"][:, 0, 0]  # (b,)

    # Query probes: groups of n' basis vectors of R^d (internal units), the last group padded.
    groups = math.ceil(d / npr)
    basis = torch.zeros(groups * npr, d, dtype=torch.float64)
    basis[:d] = torch.eye(d, dtype=torch.float64)
    basis = basis.reshape(groups, npr, d).transpose(1, 2)  # (groups, d, n')
    probe = z0.unsqueeze(1).repeat(1, groups, 1, 1)  # (b, groups, T, E)
    probe[:, :, :d, n:] = basis * scale[:, None, None, None]  # C_prompt = s e_j → C_internal = e_j
    probe = probe.reshape(b * groups, *z0.shape[1:])
    names = [f"blocks.{i}.hook_resid_post" for i in range(L)]
    names += [f"blocks.{i}.attn.hook_result" for i in range(L)]
    _, pcache = model.run_with_cache(probe, names_filter=lambda name: name in names)

    def slot_response(t: torch.Tensor) -> torch.Tensor:
        """(b·groups, …, d', n') D-slot responses → v (b, …, d', d) per unit query."""
        extra = t.shape[1:-2]
        t = t.reshape(b, groups, *extra, dp, npr)
        t = t.movedim(1, -2).reshape(b, *extra, dp, groups * npr)
        return t[..., :d]

    v = [torch.zeros(b, dp, d, dtype=torch.float64)]
    v += [slot_response(from_stream(cfg, pcache["resid_post", i])[:, d:, n:]) for i in range(L)]
    v = torch.stack(v)  # (L+1, b, d', d)
    v_heads = torch.stack(
        [
            slot_response(from_stream(cfg, pcache["result", i].transpose(1, 2))[:, :, d:, n:])
            for i in range(L)
        ]
    )  # (L, b, h, d', d)
    x = -v.transpose(-1, -2)  # (L+1, b, d, d')
    dx_heads = -v_heads.transpose(-1, -2)  # (L, b, h, d, d')

    C0 = Z[0, :, :d, n:]  # (b, d, n') internal queries
    slots = Z[:, :, d:, n:]  # (L+1, b, d', n')
    linear = v @ C0  # (L+1, b, d', n')
    gap = torch.linalg.vector_norm(slots - linear, dim=(-1, -2, -3))
    size = torch.linalg.vector_norm(slots, dim=(-1, -2, -3)).clamp_min(1e-300)
    deviation = torch.where(size > 1e-300, gap / size, torch.zeros_like(gap))

    def np64(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float64)

    return Capture(
        d=d,
        n=n,
        Z=np64(Z),
        head_out=np64(head_out),
        scores=np64(scores),
        scale=np64(scale),
        x=np64(x),
        dx_heads=np64(dx_heads),
        linearity_deviation=np64(deviation),
        target=np64(prompt.D),
        layout=cfg.tokens,
    )
