"""The symbolic view's text: each layer's EAGLE update as sympy prints it, written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eagle_probe.fit.symbolic import symbolic_layers


def test_centralized_layers_read_as_sympy_prints_them() -> None:
    rows = symbolic_layers([0.91123, 7.7049], [0.99918, -0.0007774])
    assert rows == [
        {
            "A": "A_0 - 0.9112*A_0*A_0.T*A_0",
            "B": "B_0 - 0.9112*B_0*A_0.T*A_0",
            "C": "-0.9992*A_0*A_0.T*C_0 + C_0",
            "D": "0.9992*B_0*A_0.T*C_0 + D_0",
        },
        {
            "A": "A_1 - 7.705*A_1*A_1.T*A_1",
            "B": "B_1 - 7.705*B_1*A_1.T*A_1",
            "C": "0.0007774*A_1*A_1.T*C_1 + C_1",
            "D": "-0.0007774*B_1*A_1.T*C_1 + D_1",
        },
    ]


def test_negative_step_adds_and_zero_step_drops_the_product() -> None:
    (row,) = symbolic_layers([-2.0], [0.0])
    assert row == {"A": "A_0 + 2.0*A_0*A_0.T*A_0", "B": "B_0 + 2.0*B_0*A_0.T*A_0", "C": "C_0",
                   "D": "D_0"}  # fmt: skip
    (row,) = symbolic_layers([-0.0], [1.0])
    assert row["A"] == "A_0" and row["D"] == "1.0*B_0*A_0.T*C_0 + D_0"


@pytest.mark.parametrize(
    ("step", "text"),
    [
        (12345.678, "1.235e+4"),  # four digits, exponent form from 10^4
        (1234.5, "1235.0"),  # a decimal tie at the fifth digit rounds up
        (9.9996, "10.0"),  # rounding carries into a new digit
        (0.99995, "0.9999"),
        (0.00012345, "0.0001235"),
        (1e-5, "1.0e-5"),  # exponent form below 10^-4
        (1e30, "1.0e+30"),
        (5e-324, "4.941e-324"),  # the smallest subnormal, exactly 4.9407e-324
    ],
)
def test_step_printed_to_four_digits(step: float, text: str) -> None:
    (row,) = symbolic_layers([step], [step])
    assert row["A"] == f"A_0 - {text}*A_0*A_0.T*A_0"
    assert row["C"] == f"-{text}*A_0*A_0.T*C_0 + C_0"


def test_digits_and_layer_names() -> None:
    rows = symbolic_layers(np.array([1 / 3] * 11), np.array([2 / 3] * 11), digits=2)
    assert rows[10] == {
        "A": "A_10 - 0.33*A_10*A_10.T*A_10",
        "B": "B_10 - 0.33*B_10*A_10.T*A_10",
        "C": "-0.67*A_10*A_10.T*C_10 + C_10",
        "D": "0.67*B_10*A_10.T*C_10 + D_10",
    }


def test_sample_layout_ties_steps_by_row() -> None:
    # C steps with a, B with step_sign · c; D reads c itself
    (row,) = symbolic_layers([0.5], [0.25], samples=True, step_sign=-1.0)
    assert row == {
        "A": "A_0 - 0.5*A_0*A_0.T*A_0",
        "B": "B_0 + 0.25*B_0*A_0.T*A_0",
        "C": "-0.5*A_0*A_0.T*C_0 + C_0",
        "D": "0.25*B_0*A_0.T*C_0 + D_0",
    }


def test_infinite_step_prints_oo() -> None:
    (row,) = symbolic_layers([math.inf], [1.0])
    assert row["A"] == "A_0 + (-oo)*A_0*A_0.T*A_0"
    assert row["C"] == "-1.0*A_0*A_0.T*C_0 + C_0"
