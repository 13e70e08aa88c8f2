"""The checks the configurations share (`ModelConfig`, `TaskConfig`, `TrainConfig`): positive
integer fields, and a strict round trip through a plain dict (a checkpoint's record)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import Any, TypeVar

C = TypeVar("C", bound="StrictDict")


def check_positive_ints(cfg: object, names: Iterable[str]) -> None:
    """Raise ValueError unless each of `cfg`'s fields `names` is an int >= 1 (a bool is not)."""
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


class StrictDict:
    """`to_dict` / `from_dict` of a config dataclass; `from_dict` refuses a field it does not
    have (a typo, or a record written by another version), naming the config by `KIND`."""

    KIND = "config"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(
                f"unknown {cls.KIND} field(s): {', '.join(unknown)}; "
                f"the fields are {', '.join(f.name for f in fields(cls))}"
            )
        return cls(**data)
