"""``pytest -q`` on a CPU prints no pytest-benchmark table (interpreter timings mean nothing; the
table was 61 rows with lines up to 965 characters, issue 38); without ``-q`` it is printed, so the
check below can tell the two apart. One cheap packing case, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASE = "suites/test_packing.py::test_balance_ranks[balance-ours-deepcoder-14b]"
TABLE = "Name (time in"


def _run(*flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags, CASE], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def test_quiet_run_on_a_cpu_prints_no_benchmark_table():
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the table is printed under -q too")
    assert TABLE not in _run("-q")
    assert TABLE in _run()  # the table exists: the quiet run hid it
