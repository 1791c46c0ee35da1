"""The timing harness shared by every suite.

Suites declare their cases in a registry (``suites/registry.py``); each case is timed by
``registry.run_case``, which builds the inputs, binds the provider, checks its output against the
fp64 reference once, then hands the timed rounds to pytest-benchmark through ``timing``
(device-side: CUDA events, L2 flushed, CUDA graphs for short kernels). This module holds what
every path shares: the device, ``Provider`` and ``Case`` (what a benchmark measures), the number
of rounds (and the refusal of gated benchmarks whose rounds cannot reach the gate's alpha), and
``record``, which fills ``extra_info`` with everything needed to read and gate the number:
provider, family, mode, shape, profile and seed, the shape's weight, FLOPs and bytes moved,
TFLOP/s, GB/s, % of the device's peak on the benchmark's roofline, peak memory, the kernel
source hash, how it was timed (with the launch gaps and the measuring window), the output check
(with its coverage and the recheck after timing), the SM clock during the rounds (``throttled``
when it fell more than 10% below the session's max), the roofline floor (a median below it fails
the case: ``BelowRoofline``), the predicted time and its 2x flag, and where it was measured
("cuda" on a GPU, "cpu-interpreter" otherwise: a CPU timing is a smoke test of the code path, never
a performance figure). ``cool_down`` idles the GPU between providers. ``run(benchmark, fn, case)``
times a bare callable the same way, for ad-hoc suites without a registry.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import environment, timing

REPO_ROOT = Path(__file__).resolve().parents[1]
GATED_KINDS = ("ours", "")  # polytrace.measure.results.gate gates these (and only these) by default
GATE_ALPHA = 0.002  # polytrace gate's default alpha: a gated benchmark's rounds must be able to reach it


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
    from polytrace.run.hardware import detect

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
    kind: str = "peer"  # "ours", "baseline" (torch eager/compile, cuBLAS), "peer"

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

    @property
    def kind(self) -> str:
        return self.provider_kind or _PROVIDER_KINDS.get(self.provider, "")


# pytest's --benchmark-min-rounds=N when given (suites/conftest.py sets it at configure time): a
# floor under every case's rounds. The suites time through benchmark.pedantic, which takes its
# rounds from the caller and would otherwise ignore the option silently.
MIN_ROUNDS: int | None = None


def rounds_for(expected_s: float | None = None, *, host: bool = False) -> tuple[int, int]:
    """(rounds, warmup_rounds). On CPU, where the interpreter is slow and only the code path is
    exercised, 2 rounds; host work (planner) 3. On a GPU 30 rounds (10 for work over 50 ms; host
    work 8): enough for the gate's U test to reach p < 0.002 (7 each at least). POLYTRACE_BENCH_ROUNDS
    overrides the number of rounds; pytest's --benchmark-min-rounds=N raises it to at least N."""
    env = os.environ.get("POLYTRACE_BENCH_ROUNDS", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(f"POLYTRACE_BENCH_ROUNDS must be a whole number of rounds, got {env!r}") from None
        rounds, warmup = max(1, value), 1
    elif not on_gpu():
        rounds, warmup = (3 if host else 2), 0
    elif host:
        rounds, warmup = 8, 1
    elif expected_s is not None and expected_s > 0.05:
        rounds, warmup = 10, 2
    else:
        rounds, warmup = 30, 3
    return max(rounds, MIN_ROUNDS or 0), warmup


def refuse_underpowered(case: Case, rounds: int, alpha: float = GATE_ALPHA) -> None:
    """On a GPU, a gated benchmark whose rounds could never reach ``p < alpha`` in the gate's
    Mann-Whitney U test (against a baseline with as many rounds) would let any regression through
    as "underpowered": refuse it here, naming the rounds needed."""
    if not on_gpu() or case.kind not in GATED_KINDS:
        return
    from polytrace.measure.results.gate import min_p_value

    if min_p_value(rounds, rounds) >= alpha:
        need = rounds
        while min_p_value(need, need) >= alpha:
            need += 1
        raise ValueError(f"{benchmark_id(case)}: {rounds} rounds cannot reach p < {alpha:g} in the gate "
                         f"(smallest p {min_p_value(rounds, rounds):.3g}); a gated benchmark needs >= {need}")


def peak_memory(fn: Callable[[], object]) -> int | None:
    """Bytes one call allocates above what was allocated before it (GPU only)."""
    if not on_gpu():
        return None
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


def check_timer(benchmark) -> None:
    """The rounds must be the device clock's: a test without ``pytest.mark.benchmark(timer=
    device_clock)`` (the suites' conftest adds it) would record host time around flush and sync."""
    timer = getattr(benchmark, "_timer", timing.device_clock)
    if timer is not timing.device_clock:
        raise RuntimeError("this benchmark does not use suites.timing.device_clock as its timer: run it with "
                           "-p suites.conftest or mark it pytest.mark.benchmark(timer=timing.device_clock)")


def gate_rounds(alpha: float = GATE_ALPHA) -> int:
    """The fewest rounds (each side) whose exact U test can reach ``p < alpha``."""
    from polytrace.measure.results.gate import min_p_value

    need = 2
    while min_p_value(need, need) >= alpha:
        need += 1
    return need


def time_rounds(benchmark, timer: timing.Timer, case: Case, *, rounds: int | None = None,
                warmup_rounds: int | None = None, host: bool = False) -> None:
    """The timed rounds through pytest-benchmark (its raw rounds become device seconds). On a GPU
    the rounds are capped to the measuring window (``timing.window_s``, 2 s of device time by
    default), never below what the gate needs for a gated case."""
    check_timer(benchmark)
    r, w = rounds_for(timer.plan.estimate_s, host=host)
    rounds = rounds or r
    if on_gpu() and not host and not os.environ.get("POLYTRACE_BENCH_ROUNDS", "").strip():
        per_round = timer.plan.estimate_s * timer.plan.launches
        floor_rounds = gate_rounds() if case.kind in GATED_KINDS else 3
        capped = timing.capped_rounds(rounds, per_round, floor_rounds)
        if capped < rounds:
            timer.plan.notes["rounds_capped_from"] = rounds
        rounds = capped
    rounds = max(rounds, MIN_ROUNDS or 0)  # --benchmark-min-rounds: a floor the window never cuts
    refuse_underpowered(case, rounds)
    benchmark.pedantic(timer.round, rounds=rounds, iterations=1, warmup_rounds=w if warmup_rounds is None
                       else warmup_rounds)


COOLDOWN_S = 0.5  # idle seconds before a benchmark whose provider differs from the previous one's
COOLDOWN_ENV = "POLYTRACE_BENCH_COOLDOWN_S"
_LAST_PROVIDER: list[str] = []


def cooldown_s() -> float:
    return timing.env_seconds(COOLDOWN_ENV, COOLDOWN_S, zero_ok=True)


def cool_down(provider: str, *, host: bool = False, sleep: Callable[[float], None] | None = None) -> float:
    """On a GPU, idle ``cooldown_s()`` seconds when ``provider`` differs from the previous
    benchmark's (so one provider's heat does not slow the next one's clocks); returns the seconds
    slept (0 on a CPU, for host work, or for the same provider)."""
    import time

    previous = _LAST_PROVIDER[0] if _LAST_PROVIDER else None
    _LAST_PROVIDER[:] = [provider]
    if host or not on_gpu() or previous is None or previous == provider:
        return 0.0
    seconds = cooldown_s()
    if seconds > 0:
        (sleep or time.sleep)(seconds)
    return seconds


def clock_sampler() -> Callable[[], dict | None] | None:
    """The SM clock sampler for the rounds (NVML through ``environment``), None without a GPU."""
    return environment.sample if on_gpu() else None


def window_info(timer: timing.Timer) -> dict:
    """The measuring window as it happened: host seconds from the first to the last round's end
    (``window_wall_s``), the cap in force (``window_cap_s``)."""
    walls = timer.rounds_wall
    out = {"window_cap_s": timing.window_s()}
    if len(walls) >= 2:
        out["window_wall_s"] = walls[-1] - walls[0]
    return out


def run(benchmark, fn: Callable[[], object], case: Case, *, rounds: int | None = None,
        warmup_rounds: int | None = None, host: bool = False, graph_ok: bool = True,
        check: dict | None = None) -> object:
    """Time a bare ``fn`` with pytest-benchmark and record ``case`` in ``extra_info``. Returns one
    result of ``fn`` (from the first call, outside the timing), so callers can check it; pass the
    outcome as ``check`` to record it (registry cases do all of this themselves)."""
    result = fn()  # compile / autotune / first-call costs stay out of the timed rounds
    sync()
    peak = peak_memory(fn)
    timer = timing.plan_timer(fn, b=timing.backend(host=host), graph_ok=graph_ok,
                              output_bytes=timing.tensor_bytes(result))
    try:
        time_rounds(benchmark, timer, case, rounds=rounds, warmup_rounds=warmup_rounds, host=host)
    finally:
        timer.close()
    record(benchmark, case, peak, timer.plan, check)
    return result


_RECORDED_IDS: set[str] = set()


def benchmark_id(case: Case) -> str:
    """The id results and the gate match benchmarks by (polytrace.measure.results)."""
    return f"{case.family}/{case.kernel}/{case.provider}/{case.mode}/{case.shape_id}"


class BelowRoofline(AssertionError):
    """A median below the case's roofline floor (``polytrace.measure.results.floor``)."""


def record(benchmark, case: Case, peak_mem: int | None = None, plan: timing.Plan | None = None,
           check: dict | None = None, samples: list | None = None) -> None:
    """Fill ``benchmark.extra_info`` from the case and the measured median. Two benchmarks of one
    session with the same id would make the results file unreadable for the gate, so the second
    fails here, naming the id (give its ``shape`` what tells them apart). On a GPU the median is
    held to the case's roofline floor (below it: ``BelowRoofline``, naming the case) and set beside
    its prediction; ``samples`` (SM clock samples taken during the rounds) mark it ``throttled``."""
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
    info["provider_kind"] = case.kind
    info["measured_on"] = measured_on()
    info["device_name"] = device_name()
    info["kernel_hash"] = kernel_source_hash(case.family)
    info["peak_mem_bytes"] = peak_mem
    if plan is not None:
        info.update(plan.info())
    if check is not None:
        info["check"] = check
    if samples:
        environment.judge(samples, info, benchmark_id(case))
        info["sm_clock_mhz"] = samples[-1].get("sm_clock_mhz")
        info["clock_reasons"] = samples[-1].get("clock_reasons")
    else:
        sample = environment.sample() if plan is not None and plan.mode != "host" else None
        if sample is not None:
            environment.judge([sample], info, benchmark_id(case))
            info["sm_clock_mhz"] = sample.get("sm_clock_mhz")
            info["clock_reasons"] = sample.get("clock_reasons")
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
        # % of peak only on the ceiling that bounds the case: a bandwidth-bound kernel's % of the
        # bf16 peak (or a GEMM's % of HBM) is a number nobody should compare
        if gpu is not None and case.roofline == "bf16" and case.flops:
            info["pct_peak_bf16"] = 100.0 * case.flops / median / gpu.ceiling("bf16")
        if gpu is not None and case.roofline == "hbm" and case.bytes_moved:
            info["pct_peak_hbm"] = 100.0 * case.bytes_moved / median / gpu.ceiling("hbm")
    gpu = gpu_preset()
    if gpu is not None and plan is not None and plan.mode != "host":
        from polytrace.measure.results import floor

        from . import predict

        bound, basis = floor.floor_s(gpu, flops=case.flops, bytes_moved=case.bytes_moved, roofline=case.roofline,
                                     l2=info.get("l2"), floor_flops=case.extra.get("floor_flops"),
                                     floor_bytes=case.extra.get("floor_bytes"))
        if bound:
            info["roofline_floor_s"] = bound
            info["roofline_floor_basis"] = basis
        predict.annotate(info, case, gpu, median)
        if median and bound and median < bound:
            info["below_roofline"] = True
            raise BelowRoofline(floor.below_floor_message(bid, median, bound, basis))
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
