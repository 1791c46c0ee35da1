"""Two git revisions' ``kernels/`` and ``suites/`` on disk, for ``polytrace ab``.

A revision is resolved to a commit (``git rev-parse --verify REV^{commit}``) and checked out with
``git worktree add --detach`` into a temporary folder; the working tree itself stands for CAND when
no CAND is given. The temporary worktrees are always removed (``git worktree remove --force``, the
folder deleted, ``git worktree prune``): on success, on any error, on Ctrl-C, and on SIGTERM (a
cancelled CI job), which is turned into an interrupt while the worktrees exist so the cleanup runs.
Only a SIGKILL can leave a folder behind (under the system's temporary folder, ``polytrace-ab-*``);
the next ``git worktree prune`` forgets it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...errors import PolytraceError

GIT_TIMEOUT_S = 120  # a checkout of this repository takes well under a second; a hung git is an error
# What a revision must hold to be A/B-tested: its kernels package and the suites' case registry
# (older revisions timed cases inside pytest only and cannot be imported side by side).
REQUIRED = ("kernels/__init__.py", "suites/__init__.py", "suites/registry.py")
# What `ab` loads from a revision: its kernels, its suites, and its tuned launch configs (the kernels
# read results/tuning/ beside their own folder at launch: without them a revision would run its
# defaults where the real checkout runs its tuned configs).
MEASURED_DIRS = ("kernels", "suites", "results/tuning")


class Terminated(KeyboardInterrupt):
    """SIGTERM while temporary worktrees exist: unwinds like Ctrl-C, so they are removed."""


@dataclass
class Revision:
    label: str  # "BASE" or "CAND"
    spec: str  # as given ("origin/main", "HEAD"), or "working tree"
    commit: str  # full hash; for the working tree, HEAD's
    short: str  # 12 hex digits, "-dirty" for a working tree with changes in kernels/, suites/, results/tuning/
    root: Path  # the folder holding kernels/ and suites/
    temporary: bool  # a worktree made for this run (removed afterwards)

    def kernel_hashes(self) -> dict[str, str]:
        """The source hash of every ``kernels/<family>/`` of this revision, as the suites record it."""
        from ...provenance import folder_source_hash

        families = sorted(p for p in (self.root / "kernels").iterdir()
                          if p.is_dir() and not p.name.startswith(("_", ".")))
        return {f.name: h for f in families if (h := folder_source_hash(f))}

    def describe(self) -> str:
        return f"{self.spec} ({self.short})" if self.spec != self.short else self.short


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise PolytraceError("git is not installed: polytrace ab checks revisions out with git") from None
    except subprocess.TimeoutExpired:
        raise PolytraceError(f"git {' '.join(args[:2])} in {repo} did not finish in {GIT_TIMEOUT_S} s") from None


def _first_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else "no message"


def repo_root(path: str | Path | None) -> Path:
    """The top folder of the git repository holding ``path`` (default: the current folder)."""
    where = Path(path) if path is not None else Path.cwd()
    if not where.is_dir():
        raise PolytraceError(f"--repo {where}: no such folder")
    proc = _git(where, "rev-parse", "--show-toplevel")
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PolytraceError(f"{where.resolve()}: not inside a git repository (polytrace ab compares git revisions; "
                             "run it in a checkout or pass --repo)")
    return Path(proc.stdout.strip())


def resolve(repo: Path, rev: str, label: str) -> str:
    """The full commit hash ``rev`` names, or a one-line error naming it."""
    if not rev or rev.startswith("-") or any(c in rev for c in "\0\n"):
        raise PolytraceError(f"{label} {rev!r}: not a revision")
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")  # a leading '-' was refused above
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PolytraceError(f"{label} {rev!r}: no such revision in {repo} (a branch, tag or commit; "
                             "fetch it first if it is remote)")
    return proc.stdout.strip()


def changed_paths(repo: Path) -> list[str]:
    """Uncommitted changes (tracked or untracked, not ignored) under ``MEASURED_DIRS``."""
    proc = _git(repo, "status", "--porcelain", "--untracked-files=all", "--", *MEASURED_DIRS)
    if proc.returncode != 0:
        raise PolytraceError(f"{repo}: git status failed: {_first_line(proc.stderr)}")
    return [line[3:] for line in proc.stdout.splitlines() if len(line) > 3]


def _check_layout(rev: Revision) -> None:
    missing = [p for p in REQUIRED if not (rev.root / p).is_file()]
    if missing:
        raise PolytraceError(f"{rev.label} {rev.describe()}: has no {', '.join(missing)}: it predates the suites' case "
                             "registry that polytrace ab imports, so it cannot be timed side by side")


def _add_worktree(repo: Path, folder: Path, commit: str, label: str) -> None:
    """A detached worktree at ``commit`` holding only ``MEASURED_DIRS`` (what ``ab`` loads): a
    repository whose results/ grew large costs no more to check out."""
    proc = _git(repo, "worktree", "add", "--detach", "--no-checkout", "--quiet", str(folder), commit)
    if proc.returncode != 0:
        raise PolytraceError(f"{label}: git worktree add failed: {_first_line(proc.stderr)}")
    present = [d for d in MEASURED_DIRS if _git(repo, "cat-file", "-e", f"{commit}:{d}").returncode == 0]
    if present:
        proc = _git(folder, "checkout", "--quiet", commit, "--", *present)
        if proc.returncode != 0:
            raise PolytraceError(f"{label}: git checkout of {', '.join(present)} failed: {_first_line(proc.stderr)}")


def _remove_worktrees(repo: Path, folders: list[Path], tmp: Path) -> None:
    for folder in folders:
        _git(repo, "worktree", "remove", "--force", str(folder))
    shutil.rmtree(tmp, ignore_errors=True)
    _git(repo, "worktree", "prune")


@contextmanager
def _sigterm_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block (main thread only; signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class Resolved:
    """Both revisions named, checked before anything is checked out or imported."""

    repo: Path
    base_rev: str
    base_commit: str
    cand_rev: str | None  # None: the working tree
    cand_commit: str | None
    head: str
    changed: tuple[str, ...]  # uncommitted changes under MEASURED_DIRS


def resolve_pair(repo: Path, base_rev: str, cand_rev: str | None) -> Resolved:
    """Resolve BASE and CAND; refuse CAND naming HEAD while ``MEASURED_DIRS`` have uncommitted
    changes (a checkout of HEAD would silently leave them out)."""
    base_commit = resolve(repo, base_rev, "BASE")
    cand_commit = resolve(repo, cand_rev, "CAND") if cand_rev is not None else None
    head = resolve(repo, "HEAD", "HEAD")
    changed = changed_paths(repo)
    if cand_rev is not None and cand_commit == head and changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise PolytraceError(f"CAND {cand_rev!r} is HEAD, but the working tree has uncommitted changes under "
                             f"kernels/, suites/ or results/tuning/ ({shown}) that a checkout of HEAD would leave "
                             "out: commit them, or omit CAND to time the working tree as it is")
    return Resolved(repo, base_rev, base_commit, cand_rev, cand_commit, head, tuple(changed))


@contextmanager
def checked_out(repo: Path, base_rev: str, cand_rev: str | None,
                resolved: Resolved | None = None) -> Iterator[tuple[Revision, Revision]]:
    """BASE (and CAND, unless it is the working tree) in temporary worktrees, removed on exit."""
    r = resolved or resolve_pair(repo, base_rev, cand_rev)
    base_commit, cand_commit, head, changed = r.base_commit, r.cand_commit, r.head, r.changed
    with _sigterm_interrupts():
        tmp = Path(tempfile.mkdtemp(prefix="polytrace-ab-"))
        added: list[Path] = []
        try:
            base = Revision("BASE", base_rev, base_commit, base_commit[:12], tmp / "base", True)
            _add_worktree(repo, base.root, base_commit, "BASE")
            added.append(base.root)
            if cand_rev is None:
                short = head[:12] + ("-dirty" if changed else "")
                cand = Revision("CAND", "working tree", head, short, repo, False)
            else:
                cand = Revision("CAND", cand_rev, cand_commit, cand_commit[:12], tmp / "cand", True)
                _add_worktree(repo, cand.root, cand_commit, "CAND")
                added.append(cand.root)
            for rev in (base, cand):
                _check_layout(rev)
            yield base, cand
        finally:
            with _sigterm_ignored():  # a second SIGTERM must not cut the cleanup short
                _remove_worktrees(repo, added, tmp)
