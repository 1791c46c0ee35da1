"""``ruff check`` passes on the whole repository, with the rules ``pyproject.toml`` selects.

ruff is a dev dependency (``pip install -e '.[dev]'``, the README's test command); without it the
test is skipped with a reason. A newcomer's first ``ruff check .`` should print nothing to fix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str] | None:
    try:
        import ruff  # noqa: F401  (the wheel installs the binary beside the interpreter)
    except ImportError:
        exe = shutil.which("ruff")
        return [exe] if exe else None
    return [sys.executable, "-m", "ruff"]


def test_ruff_finds_nothing():
    cmd = _ruff()
    if cmd is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([*cmd, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
