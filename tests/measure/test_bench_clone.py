"""``polytrace bench`` from a checkout that lies anywhere: node ids (what resume, ``--balance-from``
and the merge key on) must not depend on where the clone is, on the working directory, or on a
space in the path. Left to pytest, a shard's rootdir was the common ancestor of the working
directory and the suite files, so a clone under /tmp with suites under /tmp/pytest-of-... gave ids
prefixed by the path between them and a resumed run re-ran everything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _bench_fakes import write_suites

from polytrace.measure.bench import ledger

ROOT = Path(__file__).resolve().parents[2]
CASES = {"alpha": ["a0", "a1"], "beta": ["b0"]}


@pytest.fixture
def clone(tmp_path) -> Path:
    """A copy of this checkout's code (what `git clone` would give, without the suites) in a folder
    whose path has a space, with the fake suites as its suites/ and its own polytrace_kernels shim."""
    dest = tmp_path / "my clone" / "polytrace"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("polytrace", "kernels"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    write_suites(dest / "suites", CASES)
    (dest / ".shim").mkdir()
    (dest / ".shim" / "polytrace_kernels").symlink_to(dest / "kernels", target_is_directory=True)
    return dest


def _bench(clone: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_FAKE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(clone), str(clone / ".shim")])  # the clone only, not this checkout
    return subprocess.run([sys.executable, "-m", "polytrace", "bench", "-q", "--allow-cpu", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_ids_are_the_same_wherever_the_clone_and_the_working_directory_are(clone, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # the checkout's own suites/: ids relative to the checkout root, run from outside the clone
    run = tmp_path / "run one"
    res = _bench(clone, ["-o", str(run), "--shard-size", "2"], cwd=outside)
    assert res.returncode == 0, res.stderr
    assert "polytrace/bench" not in res.stderr  # the clone's code ran, not an installed copy's traceback
    assert set(ledger.recorded_seconds(run)) == {
        "suites/test_alpha.py::test_case[a0]", "suites/test_alpha.py::test_case[a1]",
        "suites/test_alpha.py::test_no_benchmark", "suites/test_beta.py::test_case[b0]",
        "suites/test_beta.py::test_no_benchmark"}
    # the same run from inside the clone finds every case finished: the ids did not move with the cwd
    again = _bench(clone, ["-o", str(run), "--shard-size", "2"], cwd=clone / "suites")
    assert again.returncode == 0, again.stderr
    assert "5 cases collected, 5 finished by earlier runs, 0 shards run" in again.stdout

    # suites outside the checkout (as the bench tests write them, beside the clone under the same
    # temporary folder): ids relative to the suites folder, never to a common ancestor
    elsewhere = write_suites(tmp_path / "suites", CASES)
    run2 = tmp_path / "run two"
    res = _bench(clone, ["--suites-dir", str(elsewhere), "-o", str(run2), "-k", "a1 or b0"], cwd=clone)
    assert res.returncode == 0, res.stderr
    assert set(ledger.recorded_seconds(run2)) == {"test_alpha.py::test_case[a1]", "test_beta.py::test_case[b0]"}
