"""Each layer's EAGLE update as sympy text, with the recovered steps."""

from __future__ import annotations

from eagle_probe.fit.base import Context, ViewResult, register


def symbolic_layers(
    a_steps, c_steps, digits: int = 4, samples: bool = False, step_sign: float = 1.0
) -> list[dict[str, str]]:
    """sympy text of each layer's EAGLE update with the recovered numbers (D: the prediction,
    the slot read with the readout's sign). `samples`: the sample layout's row-tied family, C
    with a and B with c, the label rows B stepping by `step_sign` · c (`Geometry.step_sign`)."""
    import sympy as sp

    rows = []
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        A, B, C, D = (sp.MatrixSymbol(f"{s}_{layer}", 1, 1) for s in "ABCD")
        a_, c_ = sp.Float(a, digits), sp.Float(c, digits)
        b_, cc_ = (sp.Float(step_sign * c, digits), a_) if samples else (a_, c_)  # B, C steps
        rows.append(
            {
                "A": str(A - a_ * A * A.T * A),
                "B": str(B - b_ * B * A.T * A),
                "C": str(C - cc_ * A * A.T * C),
                "D": str(D + c_ * B * A.T * C),
            }
        )
    return rows


@register("symbolic")
def symbolic_view(ctx: Context) -> ViewResult:
    steps = ctx.results["eagle"].tables["eagle"]
    geo = ctx.geometry
    layers = symbolic_layers(
        steps.a_step, steps.c_step, samples=geo.samples, step_sign=geo.step_sign
    )
    return ViewResult("symbolic", {"layers": layers}, {}, [])
