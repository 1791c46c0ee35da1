"""Atomic file writes, for every command that writes a file: through a temporary file in the same
folder and a rename, so a failure never leaves a half-written file or clobbers an existing one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import PolytraceError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so a failure never leaves
    a half-written file and never clobbers an existing one with partial content."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():  # every command's outputs: missing parent folders are created
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PolytraceError(f"{path}: cannot create folder {parent}: {exc.strerror or exc}") from None
    if path.is_dir():
        raise PolytraceError(f"{path}: is a folder; give a file name")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot write in {parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # mkstemp creates 0600; give the file the mode a plain open() would (0644 under the usual
        # umask 022), or keep the mode of the file it replaces
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except OSError as exc:  # disk full, read-only file system, ...: the old file stays as it was
        os.path.exists(tmp) and os.unlink(tmp)
        raise PolytraceError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def first_missing(path: str | os.PathLike) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what a mkdir -p would create)."""
    path = Path(path).absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def remove_if_empty(top: Path | None) -> None:
    """Remove a folder a command created (``first_missing`` before it) when it holds no file: a
    refused, failed or interrupted command leaves no empty output folder behind."""
    if top is None or not top.is_dir():
        return
    if any(files for _dir, _dirs, files in os.walk(top)):
        return
    import shutil

    shutil.rmtree(top, ignore_errors=True)
