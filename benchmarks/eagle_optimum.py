"""How good can a 4-step EAGLE be? Tune only its 2L step sizes and compare with the network.

Usage: python benchmarks/eagle_optimum.py [MODEL.pt] [--steps 1500]

EAGLE runs on the same normalised prompts as the model (prompt / ‖A‖₂ when the model normalises),
with per-layer steps a_l, c_l trained by Adam on fresh prompts of the model's task. Printed: the
test MSE of the network, of EAGLE with the steps extracted from the network, and of EAGLE with the
best steps found. If the tuned EAGLE matches the network, the network's departures from EAGLE are
free directions; if not, the network runs something better than EAGLE.
"""

from __future__ import annotations

import argparse

import torch

from eagle_probe import checkpoint
from eagle_probe.evaluate import evaluate
from eagle_probe.extract import extract
from eagle_probe.tasks import make_generator, sample


def eagle_predict(A, B, C, a, c, normalize: bool):
    s = torch.linalg.matrix_norm(A, ord=2)[:, None, None] if normalize else torch.ones(1)
    A, B, C = A / s, B / s, C / s
    D = torch.zeros(B.shape[0], B.shape[1], C.shape[2], dtype=A.dtype)
    for al, cl in zip(a, c, strict=True):
        At = A.transpose(-1, -2)
        K = At @ A
        AtC = At @ C
        A, B, C, D = A - al * A @ K, B - al * B @ K, C - cl * A @ AtC, D + cl * B @ AtC
    return D * s


def mse(task, a, c, normalize, batch=8192, seed=12345):
    p = sample(task, batch, make_generator(seed), dtype=torch.float64)
    with torch.no_grad():
        return float((eagle_predict(p.A, p.B, p.C, a, c, normalize) - p.D).square().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="trained_models/centralized.pt")
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    model, task, _ = checkpoint.load(args.model)
    normalize = model.cfg.normalize != "none"
    ex = extract(model, task, control=False, test_batch=64)
    a0 = torch.tensor(ex.layers.a_step.values, dtype=torch.float64)
    c0 = torch.tensor(ex.layers.c_step.values, dtype=torch.float64)
    a = torch.nn.Parameter(a0.clone())
    c = torch.nn.Parameter(c0.clone())
    opt = torch.optim.Adam([a, c], lr=1e-2)
    gen = make_generator(777)
    for step in range(args.steps):
        p = sample(task, 1024, gen, dtype=torch.float64)
        loss = (eagle_predict(p.A, p.B, p.C, a, c, normalize) - p.D).square().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([a, c], 1.0)
        opt.step()
        if step == int(0.7 * args.steps):
            for group in opt.param_groups:
                group["lr"] = 1e-3
    net = evaluate(model, task)["mse"]
    print(f"network                      test MSE {net:.3e}")
    print(f"EAGLE, extracted steps       test MSE {mse(task, a0, c0, normalize):.3e}")
    print(
        f"EAGLE, tuned steps           test MSE {mse(task, a.detach(), c.detach(), normalize):.3e}"
    )
    print("tuned a:", [round(v, 4) for v in a.detach().tolist()])
    print("tuned c:", [round(v, 4) for v in c.detach().tolist()])


if __name__ == "__main__":
    main()
