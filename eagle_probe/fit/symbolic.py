"""Each layer's EAGLE update as text, with the recovered steps.

The text is what sympy prints for the matrix expressions X_l ∓ k·P_l·Q_l.T·R_l with the step k a
`sympy.Float(step, digits)`, written directly: the step is rounded to the binary precision of
`digits` decimal digits and printed by mpmath's `to_str` (sympy's own float printer), and the
two terms come in sympy's order (the block symbol first for A and B, the product first for C
and D). A non-finite step is handed to sympy itself, which prints ±oo (and refuses NaN).
"""

from __future__ import annotations

import math

from mpmath.libmp import dps_to_prec, from_float, prec_to_dps, to_str

from eagle_probe.fit.base import Context, ViewResult, register

# block -> (the product's factors P, Q, R of X ∓ k·P·Q.T·R, whether sympy prints the symbol first)
_TERMS = {"A": ("AAA", True), "B": ("BAA", True), "C": ("AAC", False), "D": ("BAC", False)}


def _float_text(x: float, digits: int) -> str:
    """str(sympy.Float(x, digits)) inside a product: x rounded to nearest at the binary
    precision of `digits` decimal digits, printed with trailing zeros stripped."""
    prec = dps_to_prec(digits)
    return to_str(from_float(x, prec, "n"), prec_to_dps(prec), strip_zeros=True)


def _update_text(X: str, layer: int, coef: float, digits: int) -> str:
    """str(X_l + k·P_l·Q_l.T·R_l) for the sympy.Float k of `coef` (finite)."""
    (P, Q, R), symbol_first = _TERMS[X]
    symbol = f"{X}_{layer}"
    text = _float_text(coef, digits)
    if text == "0.0":  # the zero Float: sympy drops the product
        return symbol
    product = f"{P}_{layer}*{Q}_{layer}.T*{R}_{layer}"
    if not symbol_first:
        return f"{text}*{product} + {symbol}"
    if text.startswith("-"):
        return f"{symbol} - {text[1:]}*{product}"
    return f"{symbol} + {text}*{product}"


def _sympy_layer(layer: int, a: float, b: float, c: float, cc: float, digits: int) -> dict:
    """The sympy route, kept for non-finite steps (±oo printed as sympy does, NaN refused)."""
    import sympy as sp

    A, B, C, D = (sp.MatrixSymbol(f"{s}_{layer}", 1, 1) for s in "ABCD")
    a_, b_, c_, cc_ = (sp.Float(v, digits) for v in (a, b, c, cc))
    return {
        "A": str(A - a_ * A * A.T * A),
        "B": str(B - b_ * B * A.T * A),
        "C": str(C - cc_ * A * A.T * C),
        "D": str(D + c_ * B * A.T * C),
    }


def symbolic_layers(
    a_steps, c_steps, digits: int = 4, samples: bool = False, step_sign: float = 1.0
) -> list[dict[str, str]]:
    """Text of each layer's EAGLE update with the recovered numbers (D: the prediction,
    the slot read with the readout's sign), as sympy prints it. `samples`: the sample layout's
    row-tied family, C with a and B with c, the label rows B stepping by `step_sign` · c
    (`Geometry.step_sign`)."""
    rows = []
    for layer, (a, c) in enumerate(zip(a_steps, c_steps, strict=True)):
        a, c = float(a), float(c)
        b, cc = (step_sign * c, a) if samples else (a, c)  # B, C steps
        if not all(math.isfinite(v) for v in (a, b, c, cc)):
            rows.append(_sympy_layer(layer, a, b, c, cc, digits))
            continue
        # X − k·(…) is X + (−k)·(…): the Float of −k is minus the Float of k (rounding is
        # symmetric), so the negated steps print as sympy prints the negated Floats
        steps = {"A": -a, "B": -b, "C": -cc, "D": c}
        rows.append({X: _update_text(X, layer, k, digits) for X, k in steps.items()})
    return rows


@register("symbolic")
def symbolic_view(ctx: Context) -> ViewResult:
    steps = ctx.results["eagle"].tables["eagle"]
    geo = ctx.geometry
    layers = symbolic_layers(
        steps.a_step, steps.c_step, samples=geo.samples, step_sign=geo.step_sign
    )
    return ViewResult("symbolic", {"layers": layers}, {}, [])
