"""Checkpoint files: written atomically, read with `torch.load(weights_only=True)` only.

A checkpoint is a dict
    {"format": "eagle-probe", "format_version": 1, "model_config": {...}, "task_config": {...},
     "state_dict": {...}, "metrics": {...}}
holding only tensors and plain Python values, so loading it never runs code.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eagle_probe.errors import CheckpointError
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig

FORMAT = "eagle-probe"
FORMAT_VERSION = 1


def atomic_write_bytes(path: str | os.PathLike, write) -> None:
    """Call `write(fileobj)` on a temporary file beside `path`, then rename it into place.

    A crash or interruption leaves either the old file or the complete new one, never a part.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else _default_mode())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _default_mode() -> int:
    """0o666 less the process umask: what a plain open() would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))


def save(
    path: str | os.PathLike,
    model: LinearTransformer,
    task: TaskConfig,
    metrics: dict[str, Any] | None = None,
) -> None:
    """Write `model` with the task it was trained on to `path` atomically."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory; give a file name such as {path}/model.pt")
    if not path.parent.exists() and str(path.parent):
        raise CheckpointError(f"directory {path.parent} does not exist")
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_config": model.cfg.to_dict(),
        "task_config": task.to_dict(),
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "metrics": plain(dict(metrics or {})),
    }
    atomic_write_bytes(path, lambda handle: torch.save(payload, handle))


def plain(value: Any) -> Any:
    """`value` as plain Python containers, numbers and strings (what weights_only can read)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a checkpoint's raw payload (no model is built)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory, not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {path} was refused: it holds objects other than tensors and plain "
            f"values ({first[:120]})"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any failure to parse means an unreadable file
        raise CheckpointError(
            f"checkpoint {path} is not a readable torch file (truncated or corrupt?)"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is a torch file but not an eagle-probe checkpoint")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {version!r}; this eagle-probe reads version "
            f"{FORMAT_VERSION}"
        )
    for key, kind in (("model_config", dict), ("task_config", dict), ("state_dict", dict)):
        if not isinstance(payload.get(key), kind):
            raise CheckpointError(f"checkpoint {path} has no valid {key!r}")
    return payload


def load(path: str | os.PathLike) -> tuple[LinearTransformer, TaskConfig, dict[str, Any]]:
    """Load a checkpoint: (model in eval mode, its task config, its training metrics)."""
    payload = read(path)
    try:
        model_cfg = ModelConfig.from_dict(payload["model_config"])
        task_cfg = TaskConfig.from_dict(payload["task_config"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path} has an invalid config: {exc}") from exc
    if (model_cfg.n, model_cfg.d, model_cfg.n_prime, model_cfg.d_prime) != (
        task_cfg.n,
        task_cfg.d,
        task_cfg.n_prime,
        task_cfg.d_prime,
    ):
        raise CheckpointError(f"checkpoint {path}: model and task configs disagree on sizes")
    model = LinearTransformer(model_cfg)
    expected = model.state_dict()
    state = payload["state_dict"]
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"checkpoint {path}: weights do not match its config "
            f"(missing {missing[:3]}, unexpected {extra[:3]})"
        )
    for key, want in expected.items():
        got = state[key]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckpointError(
                f"checkpoint {path}: weight {key} has shape {shape}, config expects "
                f"{tuple(want.shape)}"
            )
        if got.dtype != want.dtype:
            raise CheckpointError(
                f"checkpoint {path}: weight {key} is {got.dtype}, config says {want.dtype}"
            )
        if not torch.isfinite(got).all():
            raise CheckpointError(f"checkpoint {path}: weight {key} contains NaN or Inf")
    model.load_state_dict(state)
    model.eval()
    metrics = payload.get("metrics") or {}
    if not isinstance(metrics, dict):
        metrics = {}
    return model, task_cfg, metrics


def jsonable(value: Any) -> Any:
    """`value` for JSON: containers recursed (keys as strings), NumPy scalars as Python numbers,
    NaN and ±Inf as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
