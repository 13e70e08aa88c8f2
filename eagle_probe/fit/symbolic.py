"""Each layer's EAGLE update as sympy text, with the recovered steps."""

from __future__ import annotations

from eagle_probe.fit.base import Context, ViewResult, register


def symbolic_layers(a_steps, c_steps, digits: int = 4) -> list[dict[str, str]]:
    """sympy text of each layer's EAGLE update with the recovered numbers."""
    import sympy as sp

    rows = []
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        A, B, C, D = (sp.MatrixSymbol(f"{s}_{layer}", 1, 1) for s in "ABCD")
        a_, c_ = sp.Float(a, digits), sp.Float(c, digits)
        rows.append(
            {
                "A": str(A - a_ * A * A.T * A),
                "B": str(B - a_ * B * A.T * A),
                "C": str(C - c_ * A * A.T * C),
                "D": str(D + c_ * B * A.T * C),
            }
        )
    return rows


@register("symbolic")
def symbolic_view(ctx: Context) -> ViewResult:
    steps = ctx.results["eagle"].tables["eagle"]
    return ViewResult("symbolic", {"layers": symbolic_layers(steps.a_step, steps.c_step)}, {}, [])
