"""Analyses behind the notebooks: head ablation and pruning, head use per problem type.

Every function returns a pandas DataFrame; the notebooks only call these and plot.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from eagle_probe.capture import capture, probe_batch
from eagle_probe.model import LinearTransformer
from eagle_probe.tasks import Prompt, TaskConfig, make_generator, sample

PROBLEM_TYPES = {
    "paper": {},
    "scalar_prediction": {"task": "least_squares"},
    "nystrom_kernel": {"task": "nystrom", "kernel": "polynomial", "degree": 2},
    "low_rank_completion": {"task": "completion"},
}


def _mse(model: LinearTransformer, prompt: Prompt, hooks=()) -> float:
    with torch.no_grad():
        z0 = prompt.z0().to(model.cfg.torch_dtype)
        pred = model.run_with_hooks(z0, fwd_hooks=list(hooks)) if hooks else model(z0)
    return float((pred.to(torch.float64) - prompt.D.to(torch.float64)).square().mean())


def _ablate(heads: list[int]):
    def hook(value, hook):  # value: hook_result (b, T, h, E)
        value[:, :, heads] = 0.0
        return value

    return hook


def _kept_streams(
    model: LinearTransformer, prompt: Prompt, hooks
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Under `hooks`: the stream entering every block [(b, T, E)] and the prompt scale, from
    which trials that change later layers alone start (`LinearTransformer.forward_from`)."""
    kept: dict[str, torch.Tensor] = {}

    def keep(value, hook):
        kept[hook.name] = value
        return value

    L = model.cfg.n_layers
    names = ["hook_scale"] + [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    with torch.no_grad():
        z0 = prompt.z0().to(model.cfg.torch_dtype)
        model.run_with_hooks(z0, fwd_hooks=[*hooks, *((name, keep) for name in names)])
    return [kept[f"blocks.{layer}.hook_resid_pre"] for layer in range(L)], kept["hook_scale"]


def _mse_from(
    model: LinearTransformer, prompt: Prompt, layer: int, z: torch.Tensor, scale, hooks
) -> float:
    """`_mse` of the model run from the stream z entering block `layer` (hooks on later layers
    act; those on earlier ones are in z already)."""
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        pred = model.forward_from(layer, z, scale)
    return float((pred.to(torch.float64) - prompt.D.to(torch.float64)).square().mean())


def head_ablation(
    model: LinearTransformer, task: TaskConfig, *, batch: int = 2048, seed: int = 3
) -> pd.DataFrame:
    """Test MSE with each single head zeroed through `hook_result` (run_with_hooks), each run
    from the stream entering the head's layer."""
    prompt = sample(task, batch, make_generator(seed), dtype=torch.float64)
    base = _mse(model, prompt)
    streams, scale = _kept_streams(model, prompt, [])
    rows = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.heads):
            hooks = [(f"blocks.{layer}.attn.hook_result", _ablate([head]))]
            mse = _mse_from(model, prompt, layer, streams[layer], scale, hooks)
            rows.append({"layer": layer, "head": head, "mse": mse, "mse_ratio": mse / base})
    return pd.DataFrame(rows)


def greedy_pruning(
    model: LinearTransformer,
    task: TaskConfig,
    *,
    batch: int = 2048,
    seed: int = 3,
    candidates: int = 2,
) -> pd.DataFrame:
    """Remove heads one at a time, always the one whose removal hurts least, until one head per
    layer is left. One row per step with the test MSE (no retraining).

    Each step tries, in every layer, the `candidates` remaining heads whose single-head ablation
    is cheapest (every head when candidates >= heads). A trial removes one more head of one
    layer, so it runs from the stream the heads removed so far leave entering that layer."""
    order = head_ablation(model, task, batch=batch, seed=seed).sort_values("mse")
    prompt = sample(task, batch, make_generator(seed), dtype=torch.float64)
    L, H = model.cfg.n_layers, model.cfg.heads
    removed: dict[int, list[int]] = {layer: [] for layer in range(L)}

    def hooks(state):
        return [
            (f"blocks.{layer}.attn.hook_result", _ablate(heads))
            for layer, heads in state.items()
            if heads
        ]

    rows = [{"step": 0, "heads_left": L * H, "removed": None, "mse": _mse(model, prompt)}]
    step = 0
    while any(len(v) < H - 1 for v in removed.values()):
        best = None
        streams, scale = _kept_streams(model, prompt, hooks(removed))
        for layer in range(L):
            if len(removed[layer]) >= H - 1:
                continue
            layer_order = order[order.layer == layer]["head"]
            ranked = [int(h) for h in layer_order if h not in removed[layer]]
            for head in ranked[:candidates]:
                trial = {k: list(v) for k, v in removed.items()}
                trial[layer].append(head)
                mse = _mse_from(model, prompt, layer, streams[layer], scale, hooks(trial))
                if best is None or mse < best[0]:
                    best = (mse, layer, head)
        mse, layer, head = best
        removed[layer].append(head)
        step += 1
        rows.append(
            {"step": step, "heads_left": L * H - step, "removed": f"L{layer}H{head}", "mse": mse}
        )
    return pd.DataFrame(rows)


def pruning_by_ablation(
    model: LinearTransformer, task: TaskConfig, *, batch: int = 2048, seed: int = 3
) -> pd.DataFrame:
    """Prune heads in the order of their single-head ablation cost (cheapest first), keeping at
    least one head per layer, down to one head per layer. One row per step with the test MSE of
    the pruned model (no retraining)."""
    prompt = sample(task, batch, make_generator(seed), dtype=torch.float64)
    L, H = model.cfg.n_layers, model.cfg.heads
    costs = head_ablation(model, task, batch=batch, seed=seed).sort_values("mse")
    removed: dict[int, list[int]] = {layer: [] for layer in range(L)}
    rows = [{"step": 0, "heads_left": L * H, "removed": None, "mse": _mse(model, prompt)}]
    for row in costs.itertuples():
        layer, head = int(row.layer), int(row.head)
        if len(removed[layer]) >= H - 1:
            continue
        removed[layer].append(head)
        hooks = [
            (f"blocks.{lay}.attn.hook_result", _ablate(heads))
            for lay, heads in removed.items()
            if heads
        ]
        rows.append(
            {
                "step": len(rows),
                "heads_left": L * H - len(rows),
                "removed": f"L{layer}H{head}",
                "mse": _mse(model, prompt, hooks),
            }
        )
    return pd.DataFrame(rows)


def head_shares_by_problem(
    model: LinearTransformer, task: TaskConfig, *, batch: int = 128, seed: int = 5
) -> pd.DataFrame:
    """Each head's share ⟨Δx_h, Δx⟩/‖Δx‖² of its layer's update, per problem type, plus the
    model's test MSE on that problem type (sizes are the model's own)."""
    rows = []
    for name, overrides in PROBLEM_TYPES.items():
        t = replace(task, **overrides)
        if t.task == "completion":
            t = replace(t, rank=min(t.rank, t.n, t.d))
        cap = capture(model, probe_batch(t, batch, seed))
        prompt = sample(t, 1024, make_generator(seed + 1), dtype=torch.float64)
        mse = _mse(model, prompt)
        zero = float(prompt.D.square().mean())
        for layer in range(cap.layers):
            dx = cap.x[layer + 1] - cap.x[layer]
            total = float(np.sum(dx * dx))
            for head in range(cap.heads):
                share = float(np.sum(cap.dx_heads[layer, :, head] * dx)) / max(total, 1e-300)
                rows.append(
                    {
                        "problem": name,
                        "layer": layer,
                        "head": head,
                        "share": share,
                        "mse": mse,
                        "zero_mse": zero,
                    }
                )
    return pd.DataFrame(rows)


def routing_score(shares: pd.DataFrame) -> pd.DataFrame:
    """Per layer: the largest change of any head's share between problem types (0: the same
    heads carry every problem type; near 1: different heads for different types)."""
    wide = shares.pivot_table(index=["layer", "head"], columns="problem", values="share")
    spread = (wide.max(axis=1) - wide.min(axis=1)).groupby("layer").max()
    return spread.rename("max_share_change").reset_index()


def sketch_spectrum(model: LinearTransformer, seed: int = 0) -> pd.DataFrame:
    """Eigenvalues of each layer's summed W_QK n × n block (normalised to the largest) beside
    those of a random orthogonal sketch S Sᵀ of the same rank (all 1 then 0)."""
    cfg = model.cfg
    rng = np.random.default_rng(seed)
    rows = []
    qk = model.W_QK().to(torch.float64).sum(1)[:, : cfg.n, : cfg.n].numpy()
    for layer, W in enumerate(qk):
        sym = (W + W.T) / 2
        ev = np.sort(np.abs(np.linalg.eigvalsh(sym)))[::-1]
        ev = ev / max(ev[0], 1e-300)
        rank = min(cfg.n, cfg.heads * cfg.qk)
        S, _ = np.linalg.qr(rng.standard_normal((cfg.n, rank)))
        rand = np.sort(np.linalg.eigvalsh(S @ S.T))[::-1]
        rows += [
            {"layer": layer, "index": i, "network": float(a), "random_sketch": float(b)}
            for i, (a, b) in enumerate(zip(ev, rand, strict=True))
        ]
    return pd.DataFrame(rows)
