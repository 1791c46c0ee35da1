"""A throwaway git repository for ``polytrace ab`` tests: this checkout's kernels/ and suites/
committed in a temporary folder (never touching this repository's history), and plants that make
one kernel or the planner do its work twice."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("kernels", "suites")
GIT_ENV = {"GIT_AUTHOR_NAME": "ab test", "GIT_AUTHOR_EMAIL": "ab@test", "GIT_COMMITTER_NAME": "ab test",
           "GIT_COMMITTER_EMAIL": "ab@test", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **GIT_ENV})
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def _tracked() -> list[str]:
    """kernels/ and suites/ files git tracks here, or (a copy without .git, e.g. a GPU lease) the
    files on disk without caches."""
    proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *COPIED], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode == 0 and proc.stdout:
        return [p for p in proc.stdout.split("\0") if p and (ROOT / p).is_file()]
    return [str(p.relative_to(ROOT)) for d in COPIED for p in sorted((ROOT / d).rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for rel in _tracked():
        dest = path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, dest)
    (path / ".gitignore").write_text("__pycache__/\n")
    git(path, "init", "--quiet", "--initial-branch=main")
    commit(path, "base: a copy of the kernels and suites")
    git(path, "tag", "base")
    return path


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel}: {old!r} found {text.count(old)} times"
    path.write_text(text.replace(old, new))


def plant_pack_twice(repo: Path) -> None:
    """``pack`` does its work twice: every call launches the kernel two times."""
    edit(repo, "kernels/packing/api.py", "\ndef pack(", "\ndef _pack_once(")
    with open(repo / "kernels/packing/api.py", "a") as fh:
        fh.write("\n\ndef pack(*args, **kwargs):\n    _pack_once(*args, **kwargs)  # planted: the work twice\n"
                 "    return _pack_once(*args, **kwargs)\n")


def plant_planner_twice(repo: Path) -> None:
    """``plan_microbatches`` repeats its whole search."""
    edit(repo, "kernels/packing/planner.py", "\ndef plan_microbatches(", "\ndef _plan_once(")
    with open(repo / "kernels/packing/planner.py", "a") as fh:
        fh.write("\n\ndef plan_microbatches(*args, **kwargs):\n"
                 "    _plan_once(*args, **kwargs)  # planted: searched twice\n"
                 "    return _plan_once(*args, **kwargs)\n")


def plant_noop(repo: Path) -> None:
    """A comment in a kernel file: the source hash changes, the work does not."""
    with open(repo / "kernels/packing/api.py", "a") as fh:
        fh.write("\n# a comment: no change to the work\n")
