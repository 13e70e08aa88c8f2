"""Each layer's EAGLE update as sympy text, with the recovered steps."""

from __future__ import annotations

from eagle_probe.fit._legacy import symbolic_layers
from eagle_probe.fit.base import Context, ViewResult, register

__all__ = ["symbolic_layers"]


@register("symbolic")
def symbolic_view(ctx: Context) -> ViewResult:
    steps = ctx.results["eagle"].tables["eagle"]
    return ViewResult("symbolic", {"layers": symbolic_layers(steps.a_step, steps.c_step)}, {}, [])
