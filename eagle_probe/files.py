"""Writing outputs: atomically, exclusively, and only where the user said.

Every command claims its outputs before it starts working and publishes them whole at the end:

    with output_dir(path, force=False) as tmp:   # a fresh directory beside `path`
        (tmp / "extraction.json").write_text(...)
    # renamed into place here: `path` is complete or absent

    with output_files([m.pt, m.json], force=False) as out:
        out.write(m.pt, lambda f: torch.save(payload, f))   # may be called again (checkpoints)

Rules (checked before any work, again when publishing):
- the target must not exist, unless `force` is given and it is a regular file (or, for a directory
  output, a directory whose clashing entries are regular files); `force` never replaces a device,
  a FIFO, a socket, a symbolic link or a directory by a file;
- the parent must be a directory and accept a new entry (a temporary directory is created there at
  once, so a read-only, full or virtual file system fails before the work, not after); folders
  missing on the way to it are created with the claim, and removed again if nothing is published
  in them;
- publishing is exclusive: a file is linked into place (`link` fails if the name appeared
  meanwhile), a directory is renamed onto an absent or empty name; when another run got there
  first the command fails instead of overwriting it;
- the temporary directory holds a lock while its owner lives; one left by a killed run is removed
  by the next run that claims the same output, so debris never blocks a rerun.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import math
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from eagle_probe.errors import EagleProbeError

PARTIAL = ".eagle-probe-partial-"
# A staging directory is created under this name, locked, then renamed to its PARTIAL name, so
# another run's sweep never sees it unlocked; one left under it by a kill in between is removed
# once it is older than NEW_DEBRIS_AGE seconds.
NEW = ".eagle-probe-new-"
NEW_DEBRIS_AGE = 3600.0


class OutputError(EagleProbeError):
    """An output path that cannot be (or may not be) written."""


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


def _default_mode() -> int:
    """0o666 less the process umask: what a plain open() would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(fileobj)` on a temporary file beside `path`, then rename it into place.

    A crash or interruption leaves either the old file or the complete new one, never a part.
    Used for files the caller already owns (see `output_files` for claiming a new one).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    prefix = f".{_staging_stem(path.name)}."
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
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


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def input_file(path: Path, what: str, error: type[Exception] = OutputError) -> os.stat_result:
    """The stat of an input `path` that must be a regular file (a symbolic link is followed: its
    target is what would be read), or `error` with a one-line reason naming `what` and the path."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {path} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {path} is not a regular file (a device, FIFO or socket)")
    return st


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputError(f"output {path} lies under a file, not a directory") from None
    except OSError as exc:
        raise OutputError(f"output {path} cannot be checked: {exc.strerror}") from None


def as_path(path: str | os.PathLike, what: str) -> Path:
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise OutputError(f"{what} is empty; give a path")
    if "\0" in text:
        raise OutputError(f"{what} {text!r} contains a NUL character")
    return Path(text)


def _parent(path: Path) -> Path:
    """The directory `path` goes into. Folders missing on the way are created when the output is
    claimed (`_Staging`), so only the nearest one that exists must be a directory."""
    parent = path.parent if str(path.parent) else Path(".")
    existing = parent
    while _lstat(existing) is None:
        existing = existing.parent  # ends at "." or "/", which exist
    try:
        is_dir = stat.S_ISDIR(os.stat(existing).st_mode)
    except OSError:  # a dangling symbolic link on the way
        is_dir = False
    if not is_dir:
        raise OutputError(f"output {path} lies under {existing}, which is not a directory")
    return parent


def _make_parents(parent: Path) -> list[Path]:
    """Create the folders of `parent` that do not exist yet; returns them, outermost first."""
    missing = []
    while _lstat(parent) is None:
        missing.append(parent)
        parent = parent.parent
    missing.reverse()
    for folder in missing:
        try:
            os.mkdir(folder)
        except FileExistsError:  # another run made it meanwhile: it is theirs to keep
            missing.remove(folder)
        except OSError as exc:
            raise OutputError(f"cannot create the folder {folder}: {exc.strerror}") from None
    return missing


def check_file(path: str | os.PathLike, *, force: bool = False, what: str = "output") -> Path:
    """`path` as a new regular file: absent, or (with `force`) an existing regular file."""
    path = as_path(path, what)
    st = _lstat(path)
    if st is not None:
        kind = _kind(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(
                f"{what} {path} is a directory; give a file name like {path / 'model.pt'}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(
                f"{what} {path} is {kind}; eagle-probe writes only new or regular files "
                "(--force does not replace it)"
            )
        if not force:
            raise OutputError(f"{what} {path} already exists; pass --force to overwrite it")
    _parent(path)
    return path


def check_dir(path: str | os.PathLike, *, force: bool = False, what: str = "--out") -> Path:
    """`path` as a new output directory: absent or empty, or (with `force`) an existing one."""
    path = as_path(path, what)
    st = _lstat(path)
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"{what} {path} is a symbolic link; give a real directory")
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{what} {path} exists and is not a directory ({_kind(st.st_mode)})")
        try:
            with os.scandir(path) as listing:  # closed even when it stops at the first entry
                empty = next(listing, None) is None
        except OSError as exc:
            raise OutputError(f"{what} {path} cannot be read: {exc.strerror}") from None
        if not empty and not force:
            raise OutputError(f"{what} {path} already exists and is not empty; pass --force")
        _check_entries(path)
    _parent(path)
    return path


def _check_entries(path: Path) -> None:
    """Refuse, before any work, a directory whose entries --force could not replace: anything
    but regular files and directories (symbolic links included) at its top level."""
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        raise OutputError(f"{path} cannot be read: {exc.strerror}") from None
    for entry in entries:
        mode = entry.stat(follow_symlinks=False).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise OutputError(
                f"{path / entry.name} is {_kind(mode)}; --force replaces regular files only, so "
                "remove it or write elsewhere"
            )


def _staging_stem(name: str) -> str:
    """`name`, or for a long one its head and a digest: the staging names stay under the file
    system's 255-byte limit for any output name that fits it."""
    encoded = os.fsencode(name)
    if len(encoded) <= 160:
        return name
    return name[:40] + "~" + hashlib.sha256(encoded).hexdigest()[:16]  # <= 40 × 4 + 17 bytes


class _Staging:
    """A fresh, locked temporary directory beside `target`."""

    def __init__(self, target: Path) -> None:
        parent = _parent(target)
        # folders made for this output are removed again unless the output is published in them
        self._made = _make_parents(parent)
        stem = _staging_stem(target.name)
        self._sweep(parent, stem)
        try:
            fresh = Path(tempfile.mkdtemp(prefix=f".{stem}{NEW}", dir=parent))
            self._fd = os.open(fresh, os.O_RDONLY)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held through the rename
            self.path = fresh.with_name(f".{stem}{PARTIAL}{fresh.name[len(stem) + 1 + len(NEW) :]}")
            os.rename(fresh, self.path)
        except OSError as exc:
            self.path = parent / f".{stem}{PARTIAL}unmade"  # nothing to remove there
            self._fd = -1
            self.close()  # the folders made for it
            raise OutputError(
                f"cannot write beside {target} ({parent}): {exc.strerror or exc}"
            ) from None

    @staticmethod
    def _sweep(parent: Path, name: str) -> None:
        """Remove staging directories of `name` whose owner is gone (their lock is free)."""
        live, new = f".{name}{PARTIAL}", f".{name}{NEW}"
        try:
            entries = [e for e in os.scandir(parent) if e.name.startswith((live, new))]
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.startswith(new):  # being created now, or left by a kill long ago
                try:
                    age = time.time() - entry.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                if age < NEW_DEBRIS_AGE:
                    continue
            try:
                fd = os.open(entry.path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # a live run owns it
            shutil.rmtree(entry.path, ignore_errors=True)
            os.close(fd)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        for folder in reversed(self._made):  # innermost first; one holding an output stays
            try:
                os.rmdir(folder)
            except OSError:
                break
        self._made = []


def _publish_file(src: Path, dst: Path, *, replace: bool) -> None:
    """Move the finished `src` to `dst`: exclusively, or replacing a regular file if `replace`."""
    st = _lstat(dst)
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"output {dst} became {_kind(st.st_mode)} while this command ran")
        if not replace:
            raise OutputError(f"output {dst} appeared while this command ran; not overwritten")
        os.replace(src, dst)
        return
    try:
        os.link(src, dst)
    except FileExistsError:
        raise OutputError(
            f"output {dst} appeared while this command ran; not overwritten"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # No hard links here: reserve the name exclusively, then replace the placeholder.
        try:
            os.close(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            raise OutputError(
                f"output {dst} appeared while this command ran; not overwritten"
            ) from None
        os.replace(src, dst)
        return
    os.unlink(src)


class OutputFiles:
    """Files claimed by one command; see `output_files`."""

    def __init__(self, paths: Sequence[Path], force: bool, replace: Sequence[Path]) -> None:
        self.paths = list(paths)
        self.force = force
        self._replace = {Path(p) for p in replace}
        self._staging = _Staging(self.paths[0])
        self._owned: dict[Path, int] = {}  # published path -> a descriptor of our file

    def write(self, path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
        """Write one claimed file whole (`write(fileobj)`) and publish it; may be repeated."""
        path = Path(path)
        if path not in self.paths:
            raise ValueError(f"{path} is not one of the claimed outputs {self.paths}")
        src = self._staging.path / path.name
        with open(src, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(src, _default_mode())
        # An open descriptor keeps the inode alive, so its number cannot be reused by a file
        # someone else puts in our place: comparing numbers then proves the file is ours.
        fd = os.open(src, os.O_RDONLY)
        try:
            if path in self._owned:
                st = _lstat(path)
                if st is None or st.st_ino != os.fstat(self._owned[path]).st_ino:
                    raise OutputError(f"output {path} was replaced by someone else while this ran")
                os.replace(src, path)
            else:
                _publish_file(src, path, replace=self.force or path in self._replace)
        except BaseException:
            # An interrupt (SIGINT) may land just after the file was published: it is ours then,
            # and a later write of the same path (the interrupted run's last checkpoint) must
            # know it, or it would take its own file for someone else's.
            st = _lstat(path)
            if st is not None and st.st_ino == os.fstat(fd).st_ino:
                self._own(path, fd)
            else:
                os.close(fd)
            raise
        self._own(path, fd)
        return path

    def _own(self, path: Path, fd: int) -> None:
        """Record `fd` as the descriptor of our published `path` (the new one first, so an
        interrupt in between never leaves the record pointing at a closed descriptor)."""
        old = self._owned.get(path)
        self._owned[path] = fd
        if old is not None:
            os.close(old)

    def write_text(self, path: str | os.PathLike, text: str) -> Path:
        return self.write(path, lambda handle: handle.write(text.encode("utf-8")))

    def close(self) -> None:
        for fd in self._owned.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owned.clear()
        self._staging.close()


@contextlib.contextmanager
def output_files(
    paths: Sequence[str | os.PathLike], *, force: bool = False, replace: Sequence = ()
) -> Iterator[OutputFiles]:
    """Claim the files `paths` (same directory) for one command.

    All are checked up front (`check_file`); `replace` names files the command itself owns (a
    resumed checkpoint) and may replace. Files are published as they are written, each whole.
    """
    checked = [check_file(p, force=force or Path(p) in set(map(Path, replace))) for p in paths]
    claim = OutputFiles(checked, force, [Path(p) for p in replace])
    try:
        yield claim
    finally:
        claim.close()


def _merge_dir(src: Path, dst: Path) -> None:
    """Move the entries of `src` into the existing directory `dst` (regular files replaced)."""
    plan = []
    for entry in sorted(src.iterdir()):
        target = dst / entry.name
        st = _lstat(target)
        if entry.is_dir():
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise OutputError(f"{target} is {_kind(st.st_mode)}; not replaced by a directory")
        elif st is not None and not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{target} is {_kind(st.st_mode)}; not replaced by a file")
        plan.append((entry, target, st))
    for entry, target, st in plan:
        if entry.is_dir() and st is not None:
            _merge_dir(entry, target)
        else:
            os.replace(entry, target)


@contextlib.contextmanager
def output_dir(
    path: str | os.PathLike, *, force: bool = False, stale: Sequence[str] = ()
) -> Iterator[Path]:
    """Claim the directory `path`: yields a fresh temporary directory beside it to write into,
    renamed into place when the block ends without an exception (removed otherwise).

    Without `force`, `path` must be absent or empty, and the rename fails if another run filled
    it meanwhile. With `force`, an existing directory receives the new files (regular files of
    the same name are replaced; nothing else is), and the regular files named in `stale` that
    this run did not write are removed (outputs of an earlier run that would contradict it).
    """
    target = check_dir(path, force=force)
    staging = _Staging(target)
    try:
        yield staging.path
        st = _lstat(target)
        if st is not None and stat.S_ISDIR(st.st_mode) and force and any(target.iterdir()):
            written = {entry.name for entry in staging.path.iterdir()}
            _merge_dir(staging.path, target)
            for name in set(stale) - written:
                old = _lstat(target / name)
                if old is not None and stat.S_ISREG(old.st_mode):
                    os.unlink(target / name)
        else:
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise OutputError(f"output {target} became {_kind(st.st_mode)} while this ran")
            try:
                os.rename(staging.path, target)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise OutputError(
                        f"output {target} was filled by another run meanwhile; not overwritten"
                    ) from None
                raise
            os.chmod(target, 0o777 & ~_umask())
    finally:
        staging.close()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
