"""Tiny stand-in suites for the ``polytrace bench`` tests: pytest-benchmark cases that take
milliseconds and never import torch, with faults switched on through ``POLYTRACE_FAKE_*``
variables (the bench driver forwards ``POLYTRACE_*`` to every worker):

- ``POLYTRACE_FAKE_KILL``: marker path; the case ``[kill]`` SIGKILLs its parent (the Ray worker
  running the shard, or the driver of a serial run) the first time, creating the marker.
- ``POLYTRACE_FAKE_CTRL_C``: marker path; the case ``[ctrl-c]`` sends SIGINT to its whole
  process group (what Ctrl-C in a terminal does) the first time.
- ``POLYTRACE_FAKE_FAIL``: the case ``[fail]`` fails its assertion.
- ``POLYTRACE_FAKE_RUNLOG``: every case appends its node id here when it runs, so a test can count
  how often each case ran.
- ``POLYTRACE_FAKE_SLUG``: the GPU slug (and name) the suite records in machine_info; in a run
  per GPU model (``--each-gpu-type``), the model the shard was pinned to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CONFTEST = '''
import os
import platform


def pytest_benchmark_generate_machine_info(config):
    """pytest-benchmark's own fields, but "cpu" without py-cpuinfo: it starts a second Python to
    read the CPU, 0.8 of the 1.3 CPU-seconds a fake shard costs (nothing here reads "cpu")."""
    return {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
            "python_implementation": platform.python_implementation(), "python_version": platform.python_version(),
            "release": platform.release(), "system": platform.system(), "cpu": {"count": os.cpu_count()}}


def pytest_benchmark_update_machine_info(config, machine_info):
    slug = os.environ.get("POLYTRACE_FAKE_SLUG", "cpu")
    target = os.environ.get("POLYTRACE_BENCH_TARGET", "any")
    if target.startswith("accelerator_type:"):  # a run per GPU model: this shard's model
        slug = target.split(":", 1)[1].lower()
    machine_info["polytrace"] = {
        "measured_on": "cpu-interpreter" if slug == "cpu" else "cuda", "gpu_name": slug, "gpu_slug": slug,
        "commit": os.environ.get("POLYTRACE_COMMIT", "unknown"), "suite_hash": "fake", "kernel_hashes": {},
        "node_pid": os.getpid(),
    }
'''

SUITE = '''
import os
import signal

import pytest

CASES = {cases!r}


@pytest.mark.parametrize("name", CASES)
def test_case(benchmark, name):
    log = os.environ.get("POLYTRACE_FAKE_RUNLOG")
    if log:
        with open(log, "a") as fh:
            fh.write(os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0] + "\\n")
    for variable, case, action in (("POLYTRACE_FAKE_KILL", "kill", lambda: os.kill(os.getppid(), signal.SIGKILL)),
                                   ("POLYTRACE_FAKE_CTRL_C", "ctrl-c",
                                    lambda: os.killpg(os.getpgrp(), signal.SIGINT))):
        marker = os.environ.get(variable)
        if name == case and marker and not os.path.exists(marker):
            open(marker, "w").close()
            action()
            import time
            time.sleep(30)  # the signal ends the shard before this does
    assert not (name == "fail" and os.environ.get("POLYTRACE_FAKE_FAIL")), "planted failure"
    benchmark.pedantic(lambda: None, rounds=3, iterations=1)
    benchmark.extra_info.update(family="{suite}", kernel="k", provider="ours", mode="fwd", shape_id=name,
                                provider_kind="ours", measured_on="cpu-interpreter")


def test_no_benchmark():
    """A check without a benchmark, as the real suites have."""
    assert CASES
'''


def write_suites(folder: Path, suites: dict[str, list[str]]) -> Path:
    """``folder/test_<suite>.py`` with one benchmark case per name (plus one plain test), and the
    conftest that records machine_info like suites/conftest.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conftest.py").write_text(CONFTEST)
    for suite, cases in suites.items():
        (folder / f"test_{suite}.py").write_text(SUITE.replace("{cases!r}", repr(cases)).replace("{suite}", suite))
    return folder


def plain_pytest_ids(folder: Path, k: str, tmp: Path, env: dict,
                     files: list[str] | None = None) -> dict[str, list[str]]:
    """{suite: benchmark ids in order} of one plain serial ``pytest -k K --benchmark-json`` run of
    every suite in ``folder`` (or of ``files`` in it)."""
    out = tmp / "plain.json"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", k,
                    *(files or [str(folder)]), f"--benchmark-json={out}"], cwd=folder, env=env, capture_output=True,
                   check=True, timeout=300)
    from polytrace.measure.results import load_result

    ids: dict[str, list[str]] = {}
    for b in load_result(out).benchmarks:
        ids.setdefault(b.suite, []).append(b.id)
    return ids


def merged_ids(path: Path) -> list[str]:
    from polytrace.measure.results import load_result

    return [b.id for b in load_result(path).benchmarks]


def run_counts(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        counts[line] = counts.get(line, 0) + 1
    return counts


def shard_records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "shards").glob("*.json"))]
