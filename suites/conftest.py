"""pytest configuration for the benchmark suites (``pytest suites/``).

Device detection happens before anything imports triton: on a machine without CUDA the Triton
interpreter is switched on (``TRITON_INTERPRET=1``) and the suites run at reduced, clearly
labelled CPU shapes, so CI exercises every code path.

Every test using the ``benchmark`` fixture is timed with the device clock
(``pytest.mark.benchmark(timer=suites.timing.device_clock)`` is added where a test does not set
it): pytest-benchmark's raw rounds are then device seconds (``suites/timing.py``).

The session's environment record (``suites/environment.py``: clocks, temperature, power, other
processes, through NVML) is taken at the start and the end and written to
``machine_info.polytrace.environment``; a throttled session is marked ``throttled`` there and said
so in the terminal summary.

``POLYTRACE_BENCH_BUDGET_S``: a time budget for the whole session, in seconds. Once it is spent,
the remaining benchmarks are skipped with a reason saying so (the session still ends normally and
pytest-benchmark still writes its JSON, which a hard kill by ``timeout`` would lose).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


_HAS_CUDA = _cuda_available()
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _git_commit() -> str:
    from polytrace.provenance import git_commit

    return git_commit(_ROOT)


BUDGET_ENV = "POLYTRACE_BENCH_BUDGET_S"
_session_start = time.monotonic()


def _budget_s() -> float | None:
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{BUDGET_ENV} must be a number of seconds, got {raw!r}") from None
    return value if value > 0 else None


def pytest_configure(config):
    config.addinivalue_line("markers", "polytrace_cost(x): a case's rough relative run time on this device, "
                            "read by `polytrace bench` to balance its shards (suites/registry.py)")
    from . import harness

    harness.MIN_ROUNDS = _min_rounds_option(config)
    _quiet_table_on_a_cpu(config)


def _quiet_table_on_a_cpu(config) -> None:
    """Under ``-q`` without CUDA, pytest-benchmark's results table is not printed: interpreter
    timings mean nothing, and the table was 61 rows with lines up to 965 characters (issue 38).
    Its JSON (``--benchmark-json``) is written as before; ``-v``, ``--benchmark-verbose`` or a GPU
    print the table."""
    if _HAS_CUDA or config.getoption("verbose", 0) >= 0:
        return
    if hasattr(config.option, "benchmark_quiet"):
        config.option.benchmark_quiet = True
    session = getattr(config, "_benchmarksession", None)  # made by pytest-benchmark's own configure
    if session is not None and not getattr(session, "verbose", False):
        session.quiet = True


def _min_rounds_option(config) -> int | None:
    """pytest-benchmark's --benchmark-min-rounds when the user gave it (on the command line or in
    PYTEST_ADDOPTS, or any value but its default 5): honoured as a floor under the suites' rounds."""
    try:
        value = config.getoption("benchmark_min_rounds")
    except ValueError:  # pytest-benchmark not loaded
        return None
    given = [str(a) for a in config.invocation_params.args] + os.environ.get("PYTEST_ADDOPTS", "").split()
    if value is not None and (value != 5 or any(a.split("=")[0] == "--benchmark-min-rounds" for a in given)):
        return int(value)
    return None


def pytest_sessionstart(session):
    global _session_start
    _session_start = time.monotonic()
    _budget_s()  # a malformed value fails here, once, with the variable named
    from . import environment, harness

    environment.start(harness.on_gpu())


def pytest_runtest_setup(item):
    budget = _budget_s()
    if budget is None:
        return
    spent = time.monotonic() - _session_start
    if spent > budget:
        import pytest

        pytest.skip(f"time budget {BUDGET_ENV}={budget:g} s spent ({spent:.0f} s elapsed)")


def pytest_collection_modifyitems(config, items):
    from . import timing

    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("benchmark") is None:
            item.add_marker(pytest.mark.benchmark(timer=timing.device_clock))


def kernel_hashes() -> dict[str, str]:
    """{family: source hash} of every ``kernels/<family>/`` folder."""
    from . import harness

    base = _ROOT / "kernels"
    if not base.is_dir():
        return {}
    return {d.name: harness.kernel_source_hash(d.name) for d in sorted(base.iterdir())
            if d.is_dir() and not d.name.startswith(("_", "."))}


def suite_hash() -> str:
    """sha256 (16 hex digits) over ``suites/*.py``: which benchmark definitions produced a file
    (the kernel source hash's definition, ``polytrace.provenance.folder_source_hash``)."""
    from polytrace.provenance import folder_source_hash

    return folder_source_hash(_ROOT / "suites")


def pytest_benchmark_update_machine_info(config, machine_info):
    """Everything needed to refuse a wrong comparison: GPU, driver, versions, commit, and the
    session's environment record (throttled or not)."""
    import torch

    from . import environment, harness

    info = {
        "measured_on": harness.measured_on(),
        "gpu_name": harness.device_name(),
        "gpu_slug": "cpu",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "commit": _git_commit(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
        "kernel_hashes": kernel_hashes(),
        "suite_hash": suite_hash(),
        "budget_s": _budget_s(),
    }
    try:
        import triton

        info["triton_version"] = triton.__version__
    except ImportError:
        info["triton_version"] = None
    if harness.on_gpu():
        from polytrace.run.hardware import slug_for

        info["gpu_slug"] = slug_for(info["gpu_name"])
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            info["driver_version"] = out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError, IndexError):
            info["driver_version"] = None
        props = torch.cuda.get_device_properties(0)
        info["sm_count"] = props.multi_processor_count
        info["total_memory_bytes"] = props.total_memory
        info["l2_bytes"] = int(getattr(props, "L2_cache_size", 0) or 0) or None
    record = environment.finish()
    info["environment"] = record
    info["throttled"] = record.get("throttled")
    info["throttle_reasons"] = record.get("reasons", [])
    machine_info["polytrace"] = info


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say plainly where the numbers above came from, and whether the GPU was throttled."""
    from . import environment, harness

    if harness.on_gpu():
        terminalreporter.write_line(f"polytrace: timings measured on {harness.device_name()} (CUDA events).")
        record = environment.finish()
        if record.get("throttled"):
            terminalreporter.write_line("polytrace: THROTTLED: " + "; ".join(record.get("reasons", []))
                                        + " - the timings are suspect; gate, results store and set-baseline "
                                        "refuse this run without --force", red=True)
        elif record.get("throttled") is None:
            terminalreporter.write_line("polytrace: environment unknown (" + str(
                (record.get("start") or {}).get("nvml", record.get("note", "no NVML"))) + ")")
    else:
        terminalreporter.write_line(
            "polytrace: no CUDA device: the kernel timings in this run are Triton-interpreter runs on the CPU "
            "at reduced shapes, a smoke test of the code paths, NOT performance figures.", yellow=True)
