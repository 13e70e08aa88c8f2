"""The checks the configurations share (`config.py`): positive-integer fields (a bool or a float
is not one) and the strict round trip through a plain dict, on a config written here."""

from dataclasses import dataclass

import pytest

from eagle_probe.config import StrictDict, check_positive_ints


@dataclass(frozen=True, kw_only=True)
class Sizes(StrictDict):
    KIND = "sizes"

    n: int = 4  # samples
    d: int = 3  # rows
    name: str = "small"  # not checked as an integer

    def __post_init__(self) -> None:
        check_positive_ints(self, ("n", "d"))


@pytest.mark.parametrize("value", [0, -2, True, 2.0, "3", None])
def test_a_field_that_is_not_a_positive_int_is_refused_by_name(value):
    with pytest.raises(ValueError) as err:
        Sizes(d=value)
    assert str(err.value) == f"d must be a positive integer, got {value!r}"


def test_the_dict_round_trip_is_exact_and_refuses_unknown_fields():
    sizes = Sizes(n=7, name="seven")
    assert sizes.to_dict() == {"n": 7, "d": 3, "name": "seven"}
    assert Sizes.from_dict(sizes.to_dict()) == sizes
    assert Sizes.from_dict({"d": 5}) == Sizes(d=5)  # missing fields take their defaults
    with pytest.raises(ValueError) as err:
        Sizes.from_dict({"n": 7, "m": 1, "dd": 2})
    assert str(err.value) == "unknown sizes field(s): dd, m; the fields are n, d, name"
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        Sizes.from_dict({"n": 0})
