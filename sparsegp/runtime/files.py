"""Files written whole or not at all: every file sparsegp writes (models, CSV predictions,
experiment results, tables, figures, checkpoints) goes through here.

The content goes to a temporary file beside the target (`.NAME.RANDOM.tmp`, same folder, so
same file system), is flushed to disk, and is renamed over the target in one step
(`os.replace`). A reader sees the old file or the new one, never half of one; a failure while
writing (a full disk, Ctrl-C, SIGTERM's exception) leaves the old file as it was and no
temporary file behind. An overwritten file keeps its permissions; a target that is a symbolic
link has the file it points to replaced, as a plain write would.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any


def write_atomically(path: str | Path, content: bytes | str | Callable[[IO[bytes]], Any], *,
                     what: str = "file", encoding: str = "utf-8") -> Path:
    """Write `content` to `path` atomically and return the path written.

    `content` is bytes, text (written in `encoding`, line ends as given), or a function
    `write(file)` that writes into a binary file object (e.g. `lambda f: torch.save(obj, f)`).
    A failure to write is an OSError naming the `what` ("model file", "CSV file") and the path
    and saying why (no space left on the device, permission denied, ...)."""
    if isinstance(content, str):
        data = content.encode(encoding)
        return write_atomically(path, lambda f: f.write(data), what=what)
    if isinstance(content, (bytes, bytearray, memoryview)):
        raw = bytes(content)
        return write_atomically(path, lambda f: f.write(raw), what=what)
    with atomic_path(path, what=what) as tmp, open(tmp, "wb") as f:
        content(f)
    return Path(path)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", *, what: str = "file",
                encoding: str | None = "utf-8", newline: str | None = None) -> Iterator[IO[Any]]:
    """A file object opened for writing (`mode` "w" for text, "wb" for bytes) whose content
    replaces `path` when the block ends without an exception (`write_atomically`)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a new file: mode 'w' or 'wb'; got {mode!r}")
    with atomic_path(path, what=what) as tmp:
        if mode == "wb":
            with open(tmp, "wb") as f:
                yield f
        else:
            with open(tmp, "w", encoding=encoding, newline=newline) as f:
                yield f


@contextlib.contextmanager
def atomic_path(path: str | Path, *, what: str = "file") -> Iterator[Path]:
    """A temporary path beside `path` (created empty, with the permissions a new file gets) for
    a writer that takes a file name; when the block ends without an exception it is flushed to
    disk and renamed over `path`, otherwise removed (`write_atomically`)."""
    target = _target(Path(path))
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "xb"):  # the user's umask, as a plain open would
            pass
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if target.exists():  # an overwritten file keeps its permissions
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, (OSError, RuntimeError)):  # torch reports write failures as
            raise OSError(f"cannot write the {what} {path} "  # RuntimeErrors
                          f"({reason(err, target.parent)})") from None
        raise
    _sync_folder(target.parent)


def _target(path: Path) -> Path:
    """The file a write to `path` changes: the file a symbolic link points to."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entry of the renamed file to disk where the system allows it."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: A write that failed where less than this many bytes are free failed for want of space
#: (torch's writer says only "file write failed").
FREE_FLOOR = 1 << 20


def reason(err: BaseException, folder: Path | None = None) -> str:
    """Why a write failed, in words: no space (said, or the `folder` nearly full when a
    writer's error does not say), permission denied, read-only file system, a missing
    folder, ..., or else the error's type and its first line."""
    text = str(err)
    code = getattr(err, "errno", None)
    if folder is not None and code is None and _nearly_full(folder):
        return "no space left on the device"
    if isinstance(err, PermissionError) or code in (errno.EACCES, errno.EPERM) or \
            "ermission" in text:
        return "permission denied"
    if code == errno.ENOSPC or "No space" in text:
        return "no space left on the device"
    if code == errno.EROFS or "Read-only" in text:
        return "read-only file system"
    if code == errno.EDQUOT:
        return "disk quota exceeded"
    if code == errno.ENOENT:
        return "its folder does not exist"
    if code == errno.EISDIR:
        return "it is a folder"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < FREE_FLOOR
    except OSError:
        return False


def check_model_path(path: str | Path) -> Path:
    """`path` as a Path if a model file can be written there, else a clear OSError (here, not
    in `models.core.persistence`, so that the command line checks it before importing torch)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot save a model to {path}: it is a folder; give a file "
                                "name such as model.pt")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot save a model to {path}: the folder "
                                f"{path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PermissionError(f"cannot save a model to {path}: permission denied")
    return path
