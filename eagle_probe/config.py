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
    have (a typo, or a record written by another version) and a field name that is not a string,
    naming the config by `KIND`."""

    KIND = "config"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any], *, required: Iterable[str] = ()) -> C:
        """The config `data` records. Fields it leaves out take their defaults, except those
        in `required`: a record that must be complete (a checkpoint's) names each of them, or
        the config would silently differ from the one it was made with."""
        names = [f.name for f in fields(cls)]
        strange = [k for k in data if not isinstance(k, str)]
        if strange:
            raise ValueError(
                f"{cls.KIND} field names must be strings, got {strange[0]!r}; "
                f"the fields are {', '.join(names)}"
            )
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(
                f"unknown {cls.KIND} field(s): {', '.join(unknown)}; "
                f"the fields are {', '.join(names)}"
            )
        missing = [name for name in required if name not in data]
        if missing:
            default = {f.name: f.default for f in fields(cls)}.get(missing[0])
            raise ValueError(
                f"the {cls.KIND} has no field {missing[0]!r} (it would run with the default "
                f"{missing[0]}={default!r}, not the value it was made with); write the record "
                "again with every field"
            )
        return cls(**data)
