"""A researcher's own linear self-attention model, written as von Oswald et al. (2023) write theirs:
not this project's model. Tokens e_i = [x_i, y_i] (rows), the query [x_q, 0] last; per layer

    e_j ← e_j + W_P Σ_{i < N} (W_V e_i)(W_K e_i)ᵀ (W_Q e_j) / N

with `nn.Linear` W_Q, W_K, W_V, W_P without bias, and the prediction read from the query's
y entry with sign `readout` (−1: ŷ = −y_q, von Oswald et al.'s reading; +1: ŷ = y_q).
"""

from __future__ import annotations

import torch
from torch import nn


class LSALayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.W_Q = nn.Linear(width, width, bias=False)
        self.W_K = nn.Linear(width, width, bias=False)
        self.W_V = nn.Linear(width, width, bias=False)
        self.W_P = nn.Linear(width, width, bias=False)

    def forward(self, e: torch.Tensor) -> torch.Tensor:  # e: (b, N + 1, width)
        N = e.shape[1] - 1
        scores = self.W_Q(e) @ self.W_K(e).transpose(-1, -2)  # (b, N + 1, N + 1)
        scores = scores[..., :N]  # only the N samples act as keys (the query does not)
        return e + self.W_P(scores @ self.W_V(e)[:, :N]) / N  # (b, N + 1, width)


class LSA(nn.Module):
    """`forward(e)` maps tokens (b, N + 1, d + 1) to the predictions ŷ (b,)."""

    def __init__(self, d: int, layers: int, readout: int = -1, std: float = 0.05) -> None:
        super().__init__()
        self.readout = readout
        self.layers = nn.ModuleList([LSALayer(d + 1) for _ in range(layers)])
        for p in self.parameters():
            nn.init.normal_(p, std=std)

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            e = layer(e)
        return self.readout * e[:, -1, -1]  # (b,)


def tokens(x: torch.Tensor, y: torch.Tensor, x_q: torch.Tensor) -> torch.Tensor:
    """Tokens [x_i, y_i], the query [x_q, 0] last: x (b, N, d), y (b, N), x_q (b, d) → (b, N + 1,
    d + 1)."""
    samples = torch.cat([x, y[..., None]], dim=-1)  # (b, N, d + 1)
    query = torch.cat([x_q, torch.zeros_like(x_q[:, :1])], dim=-1)[:, None]  # (b, 1, d + 1)
    return torch.cat([samples, query], dim=1)


def draw(b: int, N: int, d: int, g: torch.Generator, dtype=torch.float64):
    """x, x_q ~ N(0, I_d), y = wᵀx with w ~ N(0, I_d / d): (x, y, x_q, y_q)."""
    x = torch.randn(b, N, d, generator=g, dtype=dtype)
    x_q = torch.randn(b, d, generator=g, dtype=dtype)
    w = torch.randn(b, d, generator=g, dtype=dtype) / d**0.5
    return x, (x @ w[..., None])[..., 0], x_q, (x_q * w).sum(-1)


def train(
    model: nn.Module,
    N: int,
    d: int,
    steps: int,
    seed: int = 0,
    lr: float = 1e-2,
    batch: int = 1024,
    on_step=None,
) -> nn.Module:
    """A few hundred Adam steps on fresh batches, the learning rate decayed on a cosine;
    `on_step(step, model)` is called before the first step (0) and after each (1 … steps)."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    if on_step is not None:
        on_step(0, model)
    for step in range(1, steps + 1):
        x, y, x_q, y_q = draw(batch, N, d, g, dtype=next(model.parameters()).dtype)
        loss = ((model(tokens(x, y, x_q)) - y_q) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if on_step is not None:
            on_step(step, model)
    return model.eval()


class GDPP(nn.Module):
    """von Oswald et al.'s GD++ as a trainable model: per layer two scalars, γ_l the data
    transform and η_l the step on the labels, in the layer of `LSALayer` with W_Q = W_K =
    diag(I_d, 0), W_V = diag(−γ_l I_d, readout · η_l), W_P = I:

        x_j ← x_j − (γ_l / N) Σ_{i<N} (x_jᵀ x_i) x_i
        y_j ← y_j + readout (η_l / N) Σ_{i<N} (x_jᵀ x_i) y_i

    and ŷ = `readout` × the query's label entry, so η_l > 0 steps downhill whichever the readout.
    `label_steps="last"` keeps η_l = 0 before the last layer: the earlier layers only transform
    the data (with readout +1 a label step before the last layer would move the labels away from
    their residuals, which is not gradient descent). `linear_state_dict()` is the same model as
    `nn.Linear` weights with Hugging Face style names (layers.{l}.q_proj/k_proj/v_proj/o_proj),
    what such a model's checkpoint holds."""

    def __init__(
        self, d: int, layers: int, readout: int = 1, std: float = 0.05, label_steps: str = "every"
    ) -> None:
        super().__init__()
        self.d, self.readout = d, readout
        self.gamma = nn.Parameter(std * torch.randn(layers))  # (L,)
        self.eta = nn.Parameter(std * torch.randn(layers))  # (L,)
        stepping = torch.ones(layers) if label_steps == "every" else torch.eye(layers)[-1]
        self.register_buffer("stepping", stepping, persistent=False)  # (L,) 1 where η_l is free

    def _values(self, layer: int) -> torch.Tensor:
        """diag(W_V) of layer `layer`: (d + 1,)."""
        g = self.gamma[layer].expand(self.d)
        eta = self.readout * self.eta[layer] * self.stepping[layer]
        return torch.cat([-g, eta.reshape(1)])

    def forward(self, e: torch.Tensor) -> torch.Tensor:  # e: (b, N + 1, d + 1)
        N, d = e.shape[1] - 1, self.d
        for layer in range(len(self.gamma)):
            x = e[..., :d]
            scores = x @ x[:, :N].transpose(-1, -2)  # (b, N + 1, N): x_jᵀ x_i, samples as keys
            e = e + scores @ (e[:, :N] * self._values(layer)) / N
        return self.readout * e[:, -1, -1]  # (b,)

    def linear_state_dict(self) -> dict[str, torch.Tensor]:
        width = self.d + 1
        features = torch.diag(torch.cat([torch.ones(self.d), torch.zeros(1)]))
        out = {}
        for layer in range(len(self.gamma)):
            prefix = f"layers.{layer}."
            out[prefix + "q_proj.weight"] = features.clone()
            out[prefix + "k_proj.weight"] = features.clone()
            out[prefix + "v_proj.weight"] = torch.diag(self._values(layer).detach())
            out[prefix + "o_proj.weight"] = torch.eye(width)
        return {k: v.to(self.gamma.dtype) for k, v in out.items()}
