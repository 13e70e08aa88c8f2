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

Memory. The probes multiply the batch by d / n', so they run in chunks and each chunk's probe
activations are reduced to their D slots as they arrive (`capture(chunk=…)`); what is kept is the
float64 stream of the probe batch and the iterate, never every layer's, head's and probe's
activations at once. `capture_bytes` estimates the peak before anything runs.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np
import torch

from eagle_probe.captured import Capture
from eagle_probe.errors import EagleProbeError
from eagle_probe.model import LinearTransformer, ModelConfig, d_slot, from_stream, into_stream
from eagle_probe.progress import Progress
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample


def float64_copy(model: LinearTransformer) -> LinearTransformer:
    """The same model with float64 parameters (exactly the same weights)."""
    if model.cfg.dtype == "float64":
        return model
    cfg = replace(model.cfg, dtype="float64")
    copy = LinearTransformer(cfg)
    copy.load_state_dict({k: v.to(torch.float64) for k, v in model.state_dict().items()})
    copy.eval()
    return copy


def on_device(model: LinearTransformer, device: torch.device) -> LinearTransformer:
    """`model` on `device`: itself when it is there, else a moved copy (the caller's model is
    never moved)."""
    if model.readout_scale.device == device:
        return model
    return copy.deepcopy(model).to(device)


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


PROBE_BATCH = 256  # probe prompts for the paper's sizes
PROBE_ENTRIES = 2**22  # larger prompts: at most this many stream entries per layer (32 MiB)
PROBE_FLOOR = 16


def default_probe_batch(cfg: ModelConfig) -> int:
    """Probe prompts when none are asked for: PROBE_BATCH, or fewer for large prompts so that one
    layer of the float64 stream holds at most PROBE_ENTRIES entries (never below PROBE_FLOOR).
    n = d = 64 keeps 256; 128 draws 248, 256 draws 63."""
    per_prompt = cfg.n_tokens * cfg.width
    return int(min(PROBE_BATCH, max(PROBE_FLOOR, PROBE_ENTRIES // per_prompt)))


# token width n + n' up to which an extraction runs on one CPU thread (planted n = d = 64, width
# 66, 8 layers, 2 heads, idle: 17.1 s on one thread, 18.4-18.7 s on two; n = 128: 28.9 s, 28.1 s)
SMALL_WIDTH = 96


def default_threads(cfg: ModelConfig) -> int | None:
    """CPU threads an extraction uses when none are asked for: one for models of token width
    n + n' ≤ SMALL_WIDTH, whose products and fits are too small to gain from a second thread and
    lose much when a thread waits for a busy core (centralized.pt on 2 cores, idle: 8.1 s on
    one thread, 10.2–10.9 s on two; beside one busy core 9.4 s against 109 s); None (torch's
    and NumPy's own default) for larger ones."""
    return 1 if cfg.width <= SMALL_WIDTH else None


CHUNK_BYTES = 256 * 2**20  # one chunk's forward (prompts or probes) is sized to about this
# and holds at most this many prompts: the same numbers (every product is per prompt) two to
# three times faster than in chunks of several hundred, whose (b, h, T, T) scores leave the cache
# (4,096 held-out prompts of centralized_8head.pt: 1.48 s in chunks of 822, 0.56 s of 128)
CHUNK_PROMPTS = 128


def _forward_bytes_per_prompt(cfg: ModelConfig) -> int:
    """Float64 bytes one prompt's forward holds at its largest layer (no cache kept)."""
    h, T, E = cfg.heads, cfg.n_tokens, cfg.width
    return 8 * (h * T * (2 * T + 2 * cfg.qk + 2 * cfg.vp + E) + 4 * T * E)


def probe_chunk(cfg: ModelConfig, nbytes: int = CHUNK_BYTES) -> int:
    """Prompts per capture chunk: the chunk's stream and scores (L layers kept) and one layer of
    its forward within about `nbytes`, and at most CHUNK_PROMPTS."""
    L, h, T, E = cfg.n_layers, cfg.heads, cfg.n_tokens, cfg.width
    per_prompt = 8 * (L * h * T * T + 2 * (L + 1) * T * E) + _forward_bytes_per_prompt(cfg)
    return max(1, min(CHUNK_PROMPTS, nbytes // per_prompt))


def probes_per_run(cfg: ModelConfig, nbytes: int = CHUNK_BYTES) -> int:
    """Query probes run through the model at once (the general path)."""
    return max(1, nbytes // _forward_bytes_per_prompt(cfg))


def probe_flops(cfg: ModelConfig, batch: int) -> float:
    """Flops of the query probes of `batch` prompts through a model that is not query-separable:
    d / n' forwards per prompt."""
    h, T, E = cfg.heads, cfg.n_tokens, cfg.width
    return batch * math.ceil(cfg.d / cfg.n_prime) * cfg.n_layers * 4.0 * h * T * E * (T + E)


def capture_bytes(cfg: ModelConfig, batch: int, chunk: int | None = None) -> int:
    """An upper estimate of capture's peak memory for `batch` probe prompts: the float64 stream
    and iterate it returns, one chunk's cached layers and one run of probes, the model."""
    L, h, T, E, d, dp = cfg.n_layers, cfg.heads, cfg.n_tokens, cfg.width, cfg.d, cfg.d_prime
    chunk = min(batch, chunk if chunk is not None else probe_chunk(cfg))
    kept = 8 * batch * ((L + 1) * T * E + (L + 1 + L * h) * d * dp * 2)
    per_chunk = chunk * 8 * (L * h * T * T + 2 * (L + 1) * T * E)
    runs = min(chunk * math.ceil(d / cfg.n_prime), probes_per_run(cfg))
    probes = runs * _forward_bytes_per_prompt(cfg)
    model = 8 * L * h * E * (2 * cfg.qk + 2 * cfg.vp + 2 * E)
    return kept + per_chunk + probes + model


@torch.no_grad()
def capture(
    model: LinearTransformer,
    prompt: Prompt,
    *,
    chunk: int | None = None,
    device: str | torch.device = "cpu",
    progress: Progress | None = None,
    iterate: bool = True,
) -> Capture:
    """Run `model` on `prompt` and on its query probes; return every layer's stream and the
    implicit iterate.

    The prompts go through in chunks of `chunk` prompts (default: `probe_chunk(cfg)`), each with
    its d / n' query probes; a chunk's probe activations are reduced to their D slots as they
    arrive, so memory holds the float64 stream Z of the batch and one chunk's forward, never the
    cache of every layer, head and probe. When no query column can reach the scores or the A/B
    columns (`query_separable`), the probes' C/D columns are propagated through the chunk's own
    scores instead of running the model again: the same numbers, d / n' times cheaper.
    `iterate=False` skips the probes: `x`, `dx_heads` and `linearity_deviation` are NaN.
    """
    _check_prompt(model.cfg, prompt)
    cfg = model.cfg
    device = torch.device(device)
    model = on_device(float64_copy(model), device)
    z0_all = prompt.to(torch.float64).z0()  # (b, T, E) block orientation, prompt units
    b, L, d, n, dp, npr = z0_all.shape[0], cfg.n_layers, cfg.d, cfg.n, cfg.d_prime, cfg.n_prime
    T, E = z0_all.shape[1], (cfg.width if not cfg.samples else z0_all.shape[2])
    copies = (E - n) // npr if not cfg.samples else 1
    h = cfg.heads
    groups = math.ceil(d / npr)
    chunk = max(1, min(b, chunk if chunk is not None else probe_chunk(cfg)))
    separable = iterate and query_separable(model)
    per_run = probes_per_run(cfg)

    Z = np.empty((L + 1, b, T, E))  # block orientation, internal units
    v = np.zeros((L + 1, b, dp, d))
    v_heads = np.empty((L, b, h, dp, d))
    scale = np.empty(b)
    units = np.empty((b, 1, E)) if copies > 1 else None
    basis = _probe_basis(d, npr, device)
    names = {"hook_scale", "hook_embed"} | {f"blocks.{i}.hook_resid_post" for i in range(L)}
    if separable:
        names |= {f"blocks.{i}.attn.hook_attn_scores" for i in range(L)}
    starts = range(0, b, chunk)
    for start in progress(starts, "capture") if progress is not None else starts:
        sl = slice(start, min(start + chunk, b))
        z0 = z0_all[sl].to(device)
        c = z0.shape[0]
        _, cache = model.run_with_cache(
            z0, names_filter=lambda name: name in names, return_cache_object=False
        )
        s_all = cache["hook_scale"]  # (c, 1, 1), or per prompt column (c, 1, n + n')
        s_query = s_all if s_all.shape[-1] == 1 else s_all[..., n:]  # the C/D columns' scale
        s = s_query[:, 0, 0]  # (c,)
        stream = [cache["hook_embed"]] + [cache[f"blocks.{i}.hook_resid_post"] for i in range(L)]
        for i, t in enumerate(stream):
            Z[i, sl] = from_stream(cfg, t).cpu().numpy()
        scale[sl] = s.cpu().numpy()
        if units is not None:  # block orientation: the A/B columns, then every C/D copy
            plain = s_all.expand(c, 1, n + npr).cpu().numpy()
            units[sl] = np.concatenate([plain[..., :n]] + [plain[..., n:]] * copies, axis=-1)
        if not iterate:
            del cache, stream
            continue
        if separable:
            scores = [cache[f"blocks.{i}.attn.hook_attn_scores"] for i in range(L)]
            del cache
            slots, heads = _separable_probes(model, stream, scores, basis)
        else:
            del cache, stream
            slots, heads = _rerun_probes(model, z0, s_query, basis, per_run)
        # (c·groups, …, d', n') D-slot responses → (c, …, d', d) per unit query
        for i in range(L):
            v[i + 1, sl] = _per_unit_query(slots[i], c, groups, d).cpu().numpy()
            v_heads[i, sl] = _per_unit_query(heads[i], c, groups, d).cpu().numpy()
    # the prediction is readout · D slot = readout · v C: x = ∓vᵀ by the readout's sign (a
    # learned readout's magnitude stays out of the iterate)
    sign = -1.0 if float(model.readout_scale.detach()) < 0 else 1.0
    x = sign * v.swapaxes(-1, -2)  # (L+1, b, d, d')
    dx_heads = sign * v_heads.swapaxes(-1, -2)  # (L, b, h, d, d')
    deviation = _linearity_deviation(Z, v, d, n, npr, copies)
    if not iterate:
        x[...], dx_heads[...], deviation[...] = np.nan, np.nan, np.nan
    return Capture(
        d=d,
        n=n,
        Z=Z,
        scale=scale,
        x=x,
        dx_heads=dx_heads,
        linearity_deviation=deviation,
        target=prompt.D.to(torch.float64).cpu().numpy(),
        layout=cfg.tokens,
        units=units,
        copies=copies,
    )


@torch.no_grad()
def patched_predict(
    model: LinearTransformer,
    z0: np.ndarray,
    layer: int,
    state: np.ndarray,
    where: np.ndarray,
    *,
    chunk: int = 1024,
) -> np.ndarray:
    """The model's predictions (b, d', n') on prompts z0 (b, T, E, prompt units) with its stream
    entering `layer` replaced by `state` where `where` holds: an interchange intervention through
    TransformerLens `run_with_hooks` on `blocks.{layer}.hook_resid_pre` (`layer` = n_layers: on
    the last layer's `hook_resid_post`, the stream the readout reads). `state` (b, T, E) and
    `where` (T, E), or one mask per prompt (b, T, E), are in block orientation, the state in
    internal units (the prompt divided by its scale, as `capture` records the stream); the model
    runs in its own dtype."""
    cfg = model.cfg
    L = cfg.n_layers
    if not 0 <= layer <= L:
        raise ValueError(f"layer {layer} is not a stream position of a {L}-layer model")
    name = f"blocks.{layer}.hook_resid_pre" if layer < L else f"blocks.{L - 1}.hook_resid_post"
    dtype, device = model.readout_scale.dtype, model.readout_scale.device
    mask = into_stream(cfg, torch.from_numpy(np.asarray(where, dtype=bool)).to(device))
    out = []
    for start in range(0, z0.shape[0], chunk):
        sl = slice(start, start + chunk)
        source = into_stream(cfg, torch.from_numpy(state[sl]).to(device, dtype))
        here = mask[sl] if mask.dim() == 3 else mask

        def patch(t: torch.Tensor, hook, source=source, here=here) -> torch.Tensor:
            return torch.where(here, source, t)

        z = torch.from_numpy(z0[sl]).to(device, dtype)
        out.append(model.run_with_hooks(z, fwd_hooks=[(name, patch)]).cpu().numpy())
    if not out:
        return np.zeros((0, cfg.d_prime, cfg.n_prime))
    return np.concatenate(out).astype(np.float64)


def _check_prompt(cfg: ModelConfig, prompt: Prompt) -> None:
    """Refuse probe prompts whose A or C do not fit the model, in one line."""
    check_probe(prompt)
    if prompt.A.shape[1:] != (cfg.d, cfg.n) or prompt.C.shape[2] != cfg.n_prime:
        raise EagleProbeError(
            f"probe prompts have A {tuple(prompt.A.shape[1:])}, C {tuple(prompt.C.shape[1:])}; "
            f"the model takes A ({cfg.d}, {cfg.n}) and C ({cfg.d}, {cfg.n_prime})"
        )


def _probe_basis(d: int, npr: int, device: torch.device) -> torch.Tensor:
    """The query probes: groups of n' basis vectors of R^d (internal units), the last group
    padded with zeros: (groups, d, n')."""
    groups = math.ceil(d / npr)
    basis = torch.zeros(groups * npr, d, dtype=torch.float64, device=device)
    basis[:d] = torch.eye(d, dtype=torch.float64, device=device)
    return basis.reshape(groups, npr, d).transpose(1, 2)


def _rerun_probes(
    model: LinearTransformer,
    z0: torch.Tensor,
    s_query: torch.Tensor,
    basis: torch.Tensor,
    per_run: int,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run the model again on every probe of a chunk (the queries set to the basis vectors), at
    most `per_run` probe prompts at a time: the D-slot responses per layer and per head."""
    c, T, width = z0.shape
    groups, d, n = basis.shape[0], basis.shape[1], model.cfg.n
    probe = z0.unsqueeze(1).repeat(1, groups, 1, 1)  # (c, groups, T, E)
    probe[:, :, :d, n:] = basis * s_query[:, None]  # C_internal = e_j
    probe = probe.reshape(c * groups, T, width)  # plain prompts
    runs = [_probe_slots(model, probe[i : i + per_run]) for i in range(0, c * groups, per_run)]
    L = model.cfg.n_layers
    return (
        [torch.cat([r[0][i] for r in runs]) for i in range(L)],
        [torch.cat([r[1][i] for r in runs]) for i in range(L)],
    )


def _linearity_deviation(
    Z: np.ndarray, v: np.ndarray, d: int, n: int, npr: int, copies: int
) -> np.ndarray:
    """Per layer: how far the D slot is from the linear map v C of the queries, relative to the
    slot's size (0 when the map is exact)."""
    L1 = Z.shape[0]
    C0 = Z[0, :, :d, n : n + npr]  # (b, d, n') internal queries (every copy equal)
    slots = Z[:, :, d:, n:]  # (L+1, b, d', c n')
    slots = slots.reshape(*slots.shape[:-1], copies, npr).mean(-2)  # (L+1, b, d', n')
    gap = np.linalg.norm((slots - v @ C0).reshape(L1, -1), axis=1)
    size = np.linalg.norm(slots.reshape(L1, -1), axis=1)
    return np.where(size > 1e-300, gap / np.maximum(size, 1e-300), 0.0)


def _per_unit_query(t: torch.Tensor, c: int, groups: int, d: int) -> torch.Tensor:
    """(c·groups, …, d', n') D-slot responses of the probes → (c, …, d', d)."""
    extra = t.shape[1:-2]
    dp, npr = t.shape[-2:]
    t = t.reshape(c, groups, *extra, dp, npr)
    t = t.movedim(1, -2).reshape(c, *extra, dp, groups * npr)
    return t[..., :d]


def _probe_slots(
    model: LinearTransformer, probe: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run the probes (p, T, E) and keep only the D slots, per layer: the stream's (p, d', n')
    and each head's contribution's (p, h, d', n')."""
    cfg = model.cfg
    slots: dict[int, torch.Tensor] = {}
    heads: dict[int, torch.Tensor] = {}

    def keep_stream(t: torch.Tensor, hook) -> None:
        slots[hook.layer()] = d_slot(cfg, from_stream(cfg, t)).clone()

    def keep_heads(t: torch.Tensor, hook) -> None:  # t (p, T, h, E)
        heads[hook.layer()] = d_slot(cfg, from_stream(cfg, t.transpose(1, 2))).clone()

    hooks = [(f"blocks.{i}.hook_resid_post", keep_stream) for i in range(cfg.n_layers)]
    hooks += [(f"blocks.{i}.attn.hook_result", keep_heads) for i in range(cfg.n_layers)]
    model.run_with_hooks(probe, fwd_hooks=hooks)
    return [slots[i] for i in range(cfg.n_layers)], [heads[i] for i in range(cfg.n_layers)]


def query_separable(model: LinearTransformer) -> bool:
    """True when no query (C/D) column reaches the scores or the A/B columns: every W_QK has zero
    rows and columns n: and every W_VP a zero block [n:, :n] (feature layout). Then the A/B
    columns and the scores do not depend on the query, and the C/D columns are an affine function
    of it, computed exactly from the scores (`_separable_probes`)."""
    cfg = model.cfg
    if cfg.samples or cfg.n_layers == 0 or cfg.spec.copies:
        return False
    n = cfg.n
    qk, vp = model.W_QK(), model.W_VP()  # (L, h, E, E)
    return bool(
        (qk[..., n:, :] == 0).all() and (qk[..., :, n:] == 0).all() and (vp[..., n:, :n] == 0).all()
    )


def _separable_probes(
    model: LinearTransformer, stream: list[torch.Tensor], scores: list[torch.Tensor], basis
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The probes' D slots from the prompts' own stream (L + 1 of (c, T, E)) and scores (L of
    (c, h, T, T)), for a query-separable model: the C/D columns Y (T, n') of a probe evolve as
    Y ← Y + Σ_h S_h (U W_VP^h[:n, n:] + Y W_VP^h[n:, n:]) with U the (probe-independent) A/B
    columns. Returns what `_probe_slots` returns, shaped (c·groups, …, d', n')."""
    cfg = model.cfg
    d, n = cfg.d, cfg.n
    vp = model.W_VP()  # (L, h, E, E)
    c, T = stream[0].shape[:2]
    groups, npr, h = basis.shape[0], cfg.n_prime, cfg.heads
    Y = torch.zeros(c, groups, T, cfg.n_prime, dtype=torch.float64, device=basis.device)
    Y[:, :, :d] = basis  # the probes' C/D columns in internal units; D starts at 0
    slots, heads = [], []
    for i in range(cfg.n_layers):
        U = stream[i][:, :, :n]  # (c, T, n)
        W = vp[i]  # (h, E, E)
        own = torch.einsum("ctn,hnq->chtq", U, W[:, :n, n:])  # (c, h, T, n')
        mixed = torch.einsum("cgtq,hqr->chtgr", Y, W[:, n:, n:])  # (c, h, T, groups, n')
        values = (own[:, :, :, None] + mixed).reshape(c, h, T, groups * npr)
        # one (T, T) @ (T, groups·n') product per prompt and head (no broadcast copies of S)
        out = (scores[i] @ values).reshape(c, h, T, groups, npr).transpose(2, 3)
        heads.append(
            out[..., d:, :].transpose(1, 2).reshape(c * groups, -1, cfg.d_prime, cfg.n_prime)
        )
        Y = Y + out.sum(1)
        slots.append(Y[:, :, d:].reshape(c * groups, cfg.d_prime, cfg.n_prime))
    return slots, heads
