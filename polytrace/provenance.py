"""Where a number came from: the commit of the checkout and a hash of each kernel family's source.

Results and tuned configs carry both, so that numbers from different code are never compared or
applied by mistake.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path


def kernels_dir() -> Path:
    import polytrace_kernels  # the package holds no torch or triton import at top level

    return Path(polytrace_kernels.__file__).resolve().parent


@functools.cache
def kernel_source_hash(family: str) -> str:
    """sha256 (first 16 hex digits) over ``kernels/<family>/*.py`` (names and bytes, sorted).
    Empty string when there is no such family (a peer's provider)."""
    return folder_source_hash(kernels_dir() / family)


def folder_source_hash(folder: Path) -> str:
    """sha256 (first 16 hex digits) over ``folder/*.py`` (names and bytes, sorted); "" when the
    folder does not exist. ``polytrace ab`` hashes another revision's kernels with it. The kernels'
    own definition, so the hash results record is the one the launchers check tuned configs by."""
    from polytrace_kernels._tuning import folder_source_hash as _hash  # standard library only

    return _hash(Path(folder))


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 (first 16 hex digits) of a file's bytes, read in 1 MiB chunks: how calibration and
    priors files name the logs they were fitted on."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def git_commit(root: str | os.PathLike | None = None, mark_dirty: bool = True) -> str:
    """Short commit of the checkout at ``root`` (``-dirty`` with uncommitted changes to tracked
    files). ``POLYTRACE_COMMIT`` overrides it where the tree is a copy without ``.git`` (a leased
    GPU machine). "unknown" when neither is available."""
    override = os.environ.get("POLYTRACE_COMMIT", "").strip()
    if override:
        return override
    cwd = Path(root) if root is not None else kernels_dir().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        if not commit:
            return "unknown"
        if mark_dirty:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if dirty:
                commit += "-dirty"
        return commit
    except (OSError, subprocess.SubprocessError):
        return "unknown"
