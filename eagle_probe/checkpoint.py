"""Checkpoint files: written atomically, read with `torch.load(weights_only=True)` only.

A checkpoint is a dict
    {"format": "eagle-probe", "format_version": 2, "model_config": {...}, "task_config": {...},
     "state_dict": {...}, "metrics": {...}}
holding only tensors and plain Python values, so loading it never runs code.

Format 1 files were written before the paper's distributed architecture was built: their regime
"distributed" is the architecture now called "distributed-open" (values read every machine, one
C/D block), and they load as that, with a one-line notice (`upgrade`); a format-1 constrained model
with several heads loads as the multi-head constrained variant, also with a notice. They are never
re-read in the paper's layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import pickle
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch

from eagle_probe import budget
from eagle_probe.errors import CheckpointError
from eagle_probe.files import atomic_write_bytes, atomic_write_text, input_file, jsonable
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.names import STOPS
from eagle_probe.tasks import TaskConfig

__all__ = ["atomic_write_bytes", "atomic_write_text", "jsonable", "load", "read", "save"]

FORMAT = "eagle-probe"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # format 1 is upgraded on reading (`upgrade`)


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
    atomic_write_bytes(path, lambda handle: dump(handle, model, task, metrics))


def dump(
    handle: IO[bytes],
    model: LinearTransformer,
    task: TaskConfig,
    metrics: dict[str, Any] | None = None,
) -> None:
    """Write the checkpoint of `model` to an open binary file."""
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_config": model.cfg.to_dict(),
        "task_config": task.to_dict(),
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "metrics": plain(dict(metrics or {})),
    }
    torch.save(payload, handle)


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _sniff(path: Path, head: bytes) -> str | None:
    """A readable reason when the file is plainly not a torch zip archive, else None."""
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        return (
            f"checkpoint {path} is a JSON file, not a checkpoint (the .pt file `eagle-probe "
            "train` writes beside it is the checkpoint)"
        )
    if head[:2] == b"\x80\x02" or head[:1] == b"\x80":
        return (
            f"checkpoint {path} is a bare pickle or legacy torch file, not an eagle-probe "
            "checkpoint (a torch zip archive)"
        )
    if head[:4] != b"PK\x03\x04":
        return f"checkpoint {path} is not a readable torch file (not a zip archive)"
    return None


@contextlib.contextmanager
def _loadable_name(path: Path) -> Iterator[str | Path]:
    """A name torch's memory-mapped load can open: `path` itself, or, for a file name that is not
    valid UTF-8 (torch passes names to C++ as UTF-8), the name of an open descriptor of it."""
    try:
        os.fsdecode(path).encode("utf-8")
    except UnicodeEncodeError:
        if not os.path.isdir("/proc/self/fd"):
            raise CheckpointError(
                f"checkpoint {os.fsdecode(path)!r}: its file name is not valid UTF-8 and this "
                "system cannot open it another way; rename the file"
            ) from None
        fd = os.open(path, os.O_RDONLY)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    yield path


def _check_archive(path: Path, max_bytes: float) -> None:
    """The zip directory of a torch file: stored (uncompressed) entries within the budget."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise CheckpointError(
            f"checkpoint {path} is not a readable torch file (truncated or corrupt?)"
        ) from exc
    if any(info.compress_type != zipfile.ZIP_STORED for info in infos):
        raise CheckpointError(
            f"checkpoint {path} holds compressed entries; torch.save never writes those"
        )
    declared = sum(info.file_size for info in infos)
    budget.check(declared, f"checkpoint {path}", max_bytes)


def _check_values(path: Path, payload: dict[str, Any]) -> None:
    """Tensors only where the format names them (state_dict values); plain values elsewhere.

    Shared sub-objects are visited once, so a small pickle cannot make this walk explode."""
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(k, v) for k, v in payload.items() if k != "state_dict"]
    while stack:
        where, value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"checkpoint {path} holds a tensor at {where!r}; the format allows tensors only "
                "as weights in 'state_dict'"
            )
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        elif not (value is None or isinstance(value, bool | int | float | str)):
            raise CheckpointError(
                f"checkpoint {path} holds a {type(value).__name__} at {where!r}; only plain "
                "values are allowed there"
            )
    for key, value in payload["state_dict"].items():
        if not isinstance(key, str):
            raise CheckpointError(f"checkpoint {path} has a weight named {key!r}, not a string")
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"checkpoint {path}: weight {key} is a {type(value).__name__}, not a tensor"
            )
        if value.layout != torch.strided or value.is_quantized:
            raise CheckpointError(
                f"checkpoint {path}: weight {key} is a {str(value.layout).split('.')[-1]} "
                "tensor; the format stores dense tensors only"
            )
        end = (value.storage_offset() + value.numel()) * value.element_size()
        if not value.is_contiguous() or value.untyped_storage().nbytes() < end:
            raise CheckpointError(
                f"checkpoint {path}: weight {key} is not stored densely (a strided view of "
                "other data); the format stores each weight whole"
            )


def read(path: str | os.PathLike, *, max_bytes: float = budget.DEFAULT_BYTES) -> dict[str, Any]:
    """Read and validate a checkpoint's raw payload (no model is built).

    The file is memory-mapped, so its tensors cost nothing until they are checked; its size and
    the sizes its zip directory declares are held to `max_bytes` first."""
    path = Path(path)
    st = input_file(path, "checkpoint", CheckpointError)
    if st.st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty")
    budget.check(st.st_size, f"checkpoint {path}", max_bytes)
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError as exc:
        raise CheckpointError(f"checkpoint {path} cannot be read: {exc.strerror}") from None
    reason = _sniff(path, head)
    if reason:
        raise CheckpointError(reason)
    _check_archive(path, max_bytes)
    try:
        with _loadable_name(path) as name:
            payload = torch.load(name, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"checkpoint {path} was refused: it holds objects other than tensors and plain "
            f"values ({_first_line(exc)})"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any failure to parse means an unreadable file
        raise CheckpointError(
            f"checkpoint {path} is not a readable torch file (truncated or corrupt?)"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        from eagle_probe.conventions import import_hint

        raise CheckpointError(
            f"checkpoint {path} is a torch file but not an eagle-probe checkpoint"
            + import_hint(path, payload, max_bytes=max_bytes)
        )
    version = payload.get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"checkpoint {path} has format version {version!r}; this eagle-probe reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))} (integers)"
        )
    unknown = sorted(map(str, set(payload) - set(KEYS)))
    if unknown:
        raise CheckpointError(
            f"checkpoint {path} has entries the format does not name: {', '.join(unknown[:5])}"
        )
    for key in ("model_config", "task_config", "state_dict"):
        if not isinstance(payload.get(key), dict):
            raise CheckpointError(f"checkpoint {path} has no valid {key!r}")
    if not isinstance(payload.get("metrics", {}), dict):
        raise CheckpointError(f"checkpoint {path} has 'metrics' that are not a dict")
    _check_values(path, payload)
    check_metrics(path, payload.get("metrics") or {})
    return upgrade(path, payload)


# --- the metrics read back ---------------------------------------------------------------------
# What each metrics entry eagle-probe reads back must hold: (test, what it is). Entries it never
# reads may hold any plain value; those it reads are held to these before anything uses them.

Rule = tuple[Callable[[Any], bool], str]
INT64 = 2**63


def _count(low: int = 0) -> Rule:
    return (lambda v: type(v) is int and low <= v < INT64), f"an integer in [{low}, 2**63)"


def _size(v: Any) -> bool:
    return v is None or (type(v) in (int, float) and math.isfinite(v) and v >= 0)


def _number(v: Any) -> bool:
    return v is None or (type(v) in (int, float) and math.isfinite(v))


COUNT, POSITIVE = _count(), _count(1)
SIZE: Rule = (_size, "a finite number >= 0, or null")
NUMBER: Rule = (_number, "a finite number, or null")
FLAG: Rule = (lambda v: type(v) is bool, "true or false")
TEXT: Rule = (lambda v: isinstance(v, str), "a string")
SPIKE = {"step": COUNT, "skipped": FLAG} | dict.fromkeys(
    ("loss", "running_median", "batch_max_norm_a", "batch_median_norm_a"), SIZE
)
HISTORY = (
    {"step": COUNT}
    | dict.fromkeys(
        ("train_loss", "val_mse", "val_median", "val_trimmed", "val_worst", "val_selected", "lr"),
        SIZE,
    )
    | {"seconds": SIZE}
)
METRICS: dict[str, Rule | tuple[str, dict[str, Rule]]] = {
    **dict.fromkeys(
        ("step", "steps_done", "resumed_from_step", "best_step", "skipped_steps", "spike_count"),
        COUNT,
    ),
    "processes": POSITIVE,
    "threads": POSITIVE,
    **dict.fromkeys(
        ("wall_seconds", "seconds_per_step", "train_loss", "best_val_mse", "best_val_selected"),
        SIZE,
    ),
    "interrupted": FLAG,
    "stopped": (lambda v: v in STOPS, f"one of {', '.join(STOPS)}"),
    "signal": (lambda v: v is None or isinstance(v, str), "a signal's name, or null"),
    **dict.fromkeys(("command", "machine", "processor", "torch", "eagle_probe"), TEXT),
    "train_config": (lambda v: isinstance(v, dict), "an object"),
    "test": ("object", dict.fromkeys(("mse", "median_mse", "worst_mse", "zero_mse"), NUMBER)),
    "spikes": ("rows", SPIKE),
    "history": ("rows", HISTORY),
}


def check_metrics(path: str | os.PathLike, metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics` unless an entry eagle-probe reads back (`METRICS`) breaks its rule: then one
    line naming the entry, its value and what it must be. The one schema of a checkpoint's
    metadata: `load` applies it, so `timeline`, `train --resume` and `sweep --collect` read
    checked values only."""
    for key, rule in METRICS.items():
        if key in metrics:
            _check_entry(path, key, metrics[key], rule)
    return metrics


def _check_entry(path, where: str, value: Any, rule) -> None:
    if rule[0] in ("rows", "object"):
        rows = value if rule[0] == "rows" else [value]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            _bad(path, where, value, "a list of objects" if rule[0] == "rows" else "an object")
        for i, row in enumerate(rows):
            if rule[0] == "rows" and "step" not in row:
                _bad(path, f"{where}[{i}]", row, "an object with a step")
            for key, sub in rule[1].items():
                if key in row:
                    at = f"{where}[{i}].{key}" if rule[0] == "rows" else f"{where}.{key}"
                    _check_entry(path, at, row[key], sub)
    elif not rule[0](value):
        _bad(path, where, value, rule[1])


def _bad(path, where: str, value: Any, what: str) -> None:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise CheckpointError(f"checkpoint {path} has invalid metrics: {where} is {shown}, not {what}")


def upgrade(path: str | os.PathLike, payload: dict[str, Any]) -> dict[str, Any]:
    """A format-1 payload read as format 2 (module text): its distributed regime renamed
    distributed-open, with a one-line notice (a UserWarning); a multi-head constrained model
    noticed as the multi-head variant; a model config without `tokens` (written before the
    sample layout) read as the feature layout. Format-2 payloads are returned as they are."""
    if payload["format_version"] == FORMAT_VERSION:
        return payload
    import warnings

    config = dict(payload["model_config"])
    config.setdefault("tokens", "features")  # written before the sample layout existed
    regime, heads = config.get("regime"), config.get("n_heads")
    if regime == "distributed":
        config["regime"] = "distributed-open"
        warnings.warn(
            f"checkpoint {path} predates format 2: its distributed model is read as "
            "distributed-open, the architecture it was trained in (values read every machine, "
            "one C/D block), not the paper's distributed regime",
            UserWarning,
            stacklevel=3,
        )
    elif regime == "constrained" and isinstance(heads, int) and heads > 1:
        warnings.warn(
            f"checkpoint {path} predates format 2: its {heads}-head constrained model is read as "
            "the multi-head constrained variant (the paper's compute-limited model has one head)",
            UserWarning,
            stacklevel=3,
        )
    return {**payload, "model_config": config, "format_version": FORMAT_VERSION}


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name and shape of every tensor in the state dict of `cfg`'s model (nothing is built)."""
    h, E, T = cfg.heads, cfg.width, cfg.n_tokens
    hw, rows = cfg.weight_heads, cfg.head_input  # shared, local W_Q, W_K, W_V (`model.Attention`)
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(cfg.n_layers):
        prefix = f"blocks.{layer}.attn."
        for name, width in (("W_Q", cfg.qk), ("W_K", cfg.qk), ("W_V", cfg.vp)):
            shapes[prefix + name] = (hw, rows, width)
        shapes[prefix + "W_P"] = (h, E, cfg.vp)
        shapes[prefix + "qk_mask"] = (h, E)
        shapes[prefix + "mask"] = (T, T)
    shapes["readout_scale"] = ()
    return shapes


KEYS = ("format", "format_version", "model_config", "task_config", "state_dict", "metrics")
# The config fields a checkpoint must name: a field left out would silently take its default (a
# normalize="none" model run as spectral, a nystrom task drawn as paper). Only share_heads may be
# missing: files of format 2 were written before it existed, when the machines always shared
# their weights, and the weights' shapes tell a model whose machines do not apart
# (`expected_shapes`). `upgrade` fills in what format 1 predates.
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig) if f.name != "share_heads")
TASK_FIELDS = tuple(f.name for f in dataclasses.fields(TaskConfig))
FIXED_BUFFERS = ("attn.mask", "attn.qk_mask", "readout_scale")


def load(
    path: str | os.PathLike, *, max_bytes: float = budget.DEFAULT_BYTES
) -> tuple[LinearTransformer, TaskConfig, dict[str, Any]]:
    """Load a checkpoint: (model in eval mode with its parameters' requires_grad off, its task
    config, its training metrics); a caller that trains the model turns requires_grad on.

    Its configs must name every field (`MODEL_FIELDS`, `TASK_FIELDS`). Nothing is allocated for
    the model before its size has been checked against `max_bytes` and against the bytes the
    file really holds, and its task's draw of a batch of prompts against the budget too
    (`budget.check_draw`); the fixed buffers (the attention masks, the fixed readout) must equal
    the ones its config defines."""
    payload = read(path, max_bytes=max_bytes)
    try:
        model_cfg = ModelConfig.from_dict(payload["model_config"], required=MODEL_FIELDS)
        task_cfg = TaskConfig.from_dict(payload["task_config"], required=TASK_FIELDS)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {path} has an invalid config: {_first_line(exc)}"
        ) from exc
    if (model_cfg.n, model_cfg.d, model_cfg.n_prime, model_cfg.d_prime) != (
        task_cfg.n,
        task_cfg.d,
        task_cfg.n_prime,
        task_cfg.d_prime,
    ):
        raise CheckpointError(f"checkpoint {path}: model and task configs disagree on sizes")
    budget.check_model(model_cfg, max_bytes, what=f"the model of checkpoint {path}")
    budget.check_draw(task_cfg, max_bytes, f"checkpoint {path}")
    state = payload["state_dict"]
    shapes = expected_shapes(model_cfg)
    missing = sorted(set(shapes) - set(state))
    extra = sorted(set(state) - set(shapes))
    if missing or extra:
        raise CheckpointError(
            f"checkpoint {path}: weights do not match its config "
            f"(missing {missing[:3]}, unexpected {extra[:3]})"
        )
    for key, shape in shapes.items():
        if tuple(state[key].shape) != shape:
            raise CheckpointError(
                f"checkpoint {path}: weight {key} has shape {tuple(state[key].shape)}, config "
                f"expects {shape}"
            )
    # Every weight is dense and whole (checked in `read`) and the distinct storages must hold
    # the model's bytes, so the model built below is no larger than the file.
    stored = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.values()}
    need = sum(math.prod(shape) * state[k].element_size() for k, shape in shapes.items())
    if sum(stored.values()) < need:
        raise CheckpointError(
            f"checkpoint {path}: its weights share storage (the file holds "
            f"{sum(stored.values())} bytes for {need} bytes of weights)"
        )
    model = LinearTransformer(model_cfg)
    params = dict(model.named_parameters())
    for key, want in model.state_dict().items():
        got = state[key]
        if got.dtype != want.dtype:
            raise CheckpointError(
                f"checkpoint {path}: weight {key} is {got.dtype}, config says {want.dtype}"
            )
        if not torch.isfinite(got).all():
            raise CheckpointError(f"checkpoint {path}: weight {key} contains NaN or Inf")
        if key.endswith(FIXED_BUFFERS) and key not in params and not torch.equal(got, want):
            raise CheckpointError(
                f"checkpoint {path}: buffer {key} differs from the fixed one its config "
                "defines; the masks and the fixed readout are not learned weights"
            )
    model.load_state_dict(state)
    # a loaded model is read, not trained: no autograd graph is kept for its forwards, and no
    # reading of a learned readout meets torch's requires_grad warning (`train` trains copies)
    model.eval().requires_grad_(False)
    metrics = payload.get("metrics") or {}
    return model, task_cfg, metrics
