"""The timing harness shared by every suite.

A suite registers its providers explicitly (``Provider``), builds ``Case`` objects from PolyTrace
shapes (``suites/shapes.py``) and calls ``run(benchmark, fn, case)``. ``run`` warms up outside the
timed region, times each round with a device synchronisation (pytest-benchmark's raw rounds are
kept with ``--benchmark-save-data``), and fills ``extra_info`` with everything needed to read and
gate the number: provider, family, mode, shape, profile and seed, the shape's weight, FLOPs and
bytes moved, TFLOP/s, GB/s, % of the device's peak, peak memory, the kernel source hash and where
the number was measured ("cuda" on a GPU, "cpu-interpreter" otherwise: a CPU timing is a smoke
test of the code path, never a performance figure).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def on_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def device():
    import torch

    return torch.device("cuda" if on_gpu() else "cpu")


def sync() -> None:
    if on_gpu():
        import torch

        torch.cuda.synchronize()


@functools.cache
def device_name() -> str:
    if on_gpu():
        import torch

        return torch.cuda.get_device_name(0)
    return "cpu"


@functools.cache
def gpu_preset():
    """The hardware preset of the current GPU, or None on CPU or an unknown device."""
    from polytrace.hardware import detect

    return detect(device_name()) if on_gpu() else None


def measured_on() -> str:
    return "cuda" if on_gpu() else "cpu-interpreter"


def kernel_source_hash(family: str) -> str:
    """sha256 (16 hex) over ``kernels/<family>/*.py``; see ``polytrace.provenance``."""
    from polytrace.provenance import kernel_source_hash as _hash

    return _hash(family)


# provider name -> kind, filled as suites define their providers, so ``record`` can tell the gate
# which timings are ours (gated) and which are controls (torch, peers), without every Case saying so.
_PROVIDER_KINDS: dict[str, str] = {}


@dataclass
class Provider:
    """One implementation timed in a suite. ``available()`` returns None when usable, else the
    reason it is skipped (peer not installed, needs CUDA, ...)."""

    name: str
    available: Callable[[], str | None] = lambda: None
    kind: str = "peer"  # "ours", "baseline" (torch eager/compile), "peer"

    def __post_init__(self):
        _PROVIDER_KINDS[self.name] = self.kind


@dataclass
class Case:
    family: str  # kernels/<family>, e.g. "logprob"
    kernel: str  # e.g. "token_logprobs"
    provider: str
    mode: str  # "fwd", "fwd+bwd", "bwd", "decode", "plan", ...
    shape: dict  # JSON-serialisable description of the shape
    flops: float = 0.0
    bytes_moved: float = 0.0
    roofline: str = "hbm"  # which ceiling %-of-peak refers to: "hbm" or "bf16"
    profile: str = ""
    seed: int | None = None
    step: int | None = None
    weight: float = 1.0  # share of the sampled workload's tokens (or sequences) this shape stands for
    extra: dict = field(default_factory=dict)
    provider_kind: str = ""  # "ours", "baseline", "peer"; empty: taken from the Provider of that name

    @property
    def shape_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.shape.items())


def rounds_for(expected_s: float | None = None) -> tuple[int, int]:
    """(rounds, warmup_rounds): fewer on CPU, where the interpreter is slow and only the code path
    is exercised. POLYTRACE_BENCH_ROUNDS overrides the number of rounds."""
    env = os.environ.get("POLYTRACE_BENCH_ROUNDS")
    if env:
        return max(1, int(env)), 1
    if not on_gpu():
        return 2, 1
    if expected_s is not None and expected_s > 0.05:
        return 10, 2
    return 30, 3


def run(benchmark, fn: Callable[[], object], case: Case, *, rounds: int | None = None,
        warmup_rounds: int | None = None, setup: Callable[[], None] | None = None) -> object:
    """Time ``fn`` with pytest-benchmark and record ``case`` in ``extra_info``. Returns one result
    of ``fn`` (from the warm-up), so callers can check it."""
    import torch

    result = fn()  # compile / autotune / first-call costs stay out of the timed rounds
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    r, w = rounds_for(first)
    rounds = rounds or r
    warmup_rounds = w if warmup_rounds is None else warmup_rounds

    peak_mem = None
    if on_gpu():
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        peak_mem = int(torch.cuda.max_memory_allocated() - base)

    def timed():
        fn()
        sync()

    if setup is None:
        benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=warmup_rounds)
    else:
        benchmark.pedantic(timed, setup=setup, rounds=rounds, iterations=1, warmup_rounds=warmup_rounds)
    record(benchmark, case, peak_mem)
    return result


_RECORDED_IDS: set[str] = set()


def benchmark_id(case: Case) -> str:
    """The id results and the gate match benchmarks by (polytrace.results)."""
    return f"{case.family}/{case.kernel}/{case.provider}/{case.mode}/{case.shape_id}"


def record(benchmark, case: Case, peak_mem: int | None = None) -> None:
    """Fill ``benchmark.extra_info`` from the case and the measured median. Two benchmarks of one
    session with the same id would make the results file unreadable for the gate, so the second
    fails here, naming the id (give its ``shape`` what tells them apart)."""
    bid = benchmark_id(case)
    if bid in _RECORDED_IDS:
        raise ValueError(f"duplicate benchmark id {bid!r}: add what distinguishes the cases to Case.shape")
    _RECORDED_IDS.add(bid)
    info = benchmark.extra_info
    d = asdict(case)
    extra = d.pop("extra")
    info.update(d)
    info.update(extra)
    info["shape_id"] = case.shape_id
    info["provider_kind"] = case.provider_kind or _PROVIDER_KINDS.get(case.provider, "")
    info["measured_on"] = measured_on()
    info["device_name"] = device_name()
    info["kernel_hash"] = kernel_source_hash(case.family)
    info["peak_mem_bytes"] = peak_mem
    stats = getattr(benchmark, "stats", None)
    median = None
    if stats is not None:
        inner = getattr(stats, "stats", stats)
        median = getattr(inner, "median", None)
    info["median_s"] = median
    if median:
        info["tflops"] = case.flops / median / 1e12 if case.flops else None
        info["gbps"] = case.bytes_moved / median / 1e9 if case.bytes_moved else None
        gpu = gpu_preset()
        if gpu is not None:
            if case.flops:
                info["pct_peak_bf16"] = 100.0 * case.flops / median / gpu.ceiling("bf16")
            if case.bytes_moved:
                info["pct_peak_hbm"] = 100.0 * case.bytes_moved / median / gpu.ceiling("hbm")
    # pytest-benchmark groups the table by this
    benchmark.group = f"{case.family}/{case.kernel}/{case.mode}/{case.shape_id}"


def skip_unavailable(provider: Provider) -> None:
    import pytest

    reason = provider.available()
    if reason:
        pytest.skip(f"{provider.name}: {reason}")


def needs_cuda() -> str | None:
    return None if on_gpu() else "needs a CUDA GPU"


def module_available(name: str) -> str | None:
    import importlib.util

    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{name} is not installed (pip install 'polytrace[peers]')"
