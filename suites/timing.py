"""Device-side timing for the suites: CUDA events around the work only, the L2 flushed before every
round, CUDA-graph replays for short kernels; rounds handed to pytest-benchmark as device seconds.

How a round is timed (``Timer.round``):

1. the L2 is flushed outside the events by *reading* a buffer of ``max(2 x L2, 256 MiB)`` (the
   device's L2 size from its properties; 256 MiB is ``triton.testing.do_bench``'s flush size). A
   read leaves only clean lines behind; ``do_bench``'s zero *write* leaves up to an L2-full of dirty
   lines (~60 MB on an H200) whose write-back lands inside the next timed window (up to ~7%
   understated bandwidth on a memory-bound kernel);
2. a start event, the work, an end event, a device synchronisation;
3. the elapsed device time, divided by the launches in the round, is added to ``CLOCK``;
4. outside the events, the SM clock is sampled (``sampler``, NVML through ``suites/environment.py``).

Launch gaps are measured and reported in ``extra_info``: ``empty_events_s`` (an event pair with
nothing between: the floor of an event-timed round) and ``host_launch_s`` (host seconds to issue
one launch, from the estimate rounds); when issuing takes longer than the device runs
(``launch_bound``), event timings would include host launch gaps. A CUDA graph (short work) removes
them; an event-timed round removes them with a device-side delay (nvbench's blocking kernel): a
spin kernel of ``host_gap_delay_s`` (twice the host issue time, at least ``MIN_DELAY_S``) queued
before the start event keeps the device busy while the host issues the work, so the work runs
back to back. A round whose issue took longer than the delay may still hold a gap: it is flagged
(``host_gap_rounds``: how many, ``host_gap_flags``: which).

Warm-up (``warm_up``): the estimate rounds run until the timings settle rather than a fixed count:
over the last ``SETTLE_WINDOW`` rounds the least-squares slope, times the window, is within
``SETTLE_DRIFT`` of their median (a steady state: clocks, caches and allocator warmed; the slope
criterion of nvbench's and tritonbench's ``--entropy-criterion`` stopping rules), or the warm-up
spent ``WARMUP_MAX_S`` of device time / ``WARMUP_MAX_ROUNDS`` rounds (``warmup_settled``: false).

Measuring window: the rounds of one benchmark are capped to ``WINDOW_S`` (2 s of device time by
default, ``POLYTRACE_BENCH_WINDOW_S``), never below the rounds the gate needs: long windows
throttle (15-20% clock droop over a long ``do_bench`` on an MI350, -15% TFLOP/s over 100
back-to-back iterations on a B200, in public reports).

pytest-benchmark reads ``device_clock`` as its timer (the suites' tests carry
``pytest.mark.benchmark(timer=device_clock)``, a documented per-test option), so its
``end - start`` around a round is exactly the device seconds that round added: the raw rounds in
the JSON are device times and ``polytrace gate`` / ``pytest-benchmark compare`` keep working.

Work of one launch shorter than ``GRAPH_BELOW_S`` (200 us; launch and sync latency are 5-20 us)
is timed as one replay of a CUDA graph holding N launches (N so the replay lasts >= 1 ms, up to
``MAX_GRAPH_LAUNCHES``); per-launch time = replay / N. The launches cycle over k copies of the
inputs (``more_bound``: the case builds them, deterministically, with other seeds), k chosen so
that ``k x input bytes >= 2 x L2``: each launch then reads inputs no launch touched within two
L2-fulls of traffic, as cold as after a flush (``l2: flushed``). When copies cannot be made the
launches re-read warm inputs and ``extra_info["l2"]`` says ``warm``. A graph that cannot be
captured (a host sync in the provider) falls back to events, saying why (``graph_fallback``).

On a machine without CUDA (the Triton interpreter) and for host work (the packing planner, the
profile sampler) rounds are timed with the host clock: ``timing: host``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

GRAPH_BELOW_S = 200e-6  # single launches shorter than this are timed as CUDA-graph replays
GRAPH_REPLAY_S = 1e-3  # one replay lasts at least this long
MAX_GRAPH_LAUNCHES = 1000
GRAPH_OUTPUT_BYTES = 4 << 30  # outputs of the N launches live in the graph's pool: cap N by them
MAX_INPUT_COPIES = 64
DO_BENCH_FLUSH_BYTES = 256 << 20  # triton.testing.do_bench's L2 flush buffer
ESTIMATE_ROUNDS = 3  # event-timed single launches that choose events or graph
MIN_GRAPH_OVER_EVENTS = 0.05  # a replay faster than this share of the event-timed launch lost work
WINDOW_S = 2.0  # device seconds of timed rounds per benchmark at most (unless the gate needs more rounds)
WINDOW_ENV = "POLYTRACE_BENCH_WINDOW_S"
SETTLE_WINDOW = 8  # warm-up rounds whose trend decides that the timings settled
SETTLE_DRIFT = 0.02  # allowed drift across the window: slope x window / median
WARMUP_MAX_S = 1.0  # device seconds of warm-up at most
WARMUP_MAX_ROUNDS = 200
MIN_DELAY_S = 50e-6  # the shortest device-side delay queued before an event-timed round
MAX_DELAY_S = 20e-3  # a host taking longer than this to issue one round is flagged, not hidden


def env_seconds(env: str, default: float, *, zero_ok: bool) -> float:
    """Seconds from the environment variable ``env`` (``default`` when unset or blank); a value
    that is not a number, negative, or zero where ``zero_ok`` is false is a ``ValueError`` naming it."""
    import os

    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{env} must be a number of seconds, got {raw!r}") from None
    if not (value >= 0 if zero_ok else value > 0):
        raise ValueError(f"{env} must be {'>=' if zero_ok else '>'} 0 seconds, got {raw!r}")
    return value


def window_s() -> float:
    """The measuring window per benchmark: ``POLYTRACE_BENCH_WINDOW_S`` or ``WINDOW_S``."""
    return env_seconds(WINDOW_ENV, WINDOW_S, zero_ok=False)


def drift(times: list[float]) -> float:
    """Relative drift of ``times`` across their span: least-squares slope x (n - 1) / median."""
    n = len(times)
    if n < 2:
        return math.inf
    mean_i = (n - 1) / 2
    mean_t = sum(times) / n
    num = sum((i - mean_i) * (t - mean_t) for i, t in enumerate(times))
    den = sum((i - mean_i) ** 2 for i in range(n))
    med = statistics.median(times)
    return abs(num / den) * (n - 1) / med if med > 0 else math.inf


def settled(times: list[float], window: int = SETTLE_WINDOW, max_drift: float = SETTLE_DRIFT) -> bool:
    """The last ``window`` timings hold no trend larger than ``max_drift`` of their median."""
    return len(times) >= window and drift(times[-window:]) <= max_drift


def capped_rounds(rounds: int, round_s: float, min_rounds: int, window: float | None = None) -> int:
    """``rounds`` cut so that rounds x ``round_s`` stays within the window, never below ``min_rounds``."""
    window = window_s() if window is None else window
    if round_s <= 0:
        return rounds
    fit = int(window / round_s * (1 + 1e-9))  # 2.0 // 0.1 is 19 in floating point
    return max(min(rounds, fit), min(rounds, min_rounds), 1)


class DeviceClock:
    """Seconds of device time accumulated by timed rounds: pytest-benchmark's timer."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def advance(self, seconds: float) -> None:
        self.seconds += float(seconds)

    def __call__(self) -> float:
        return self.seconds


CLOCK = DeviceClock()


def device_clock() -> float:
    """pytest-benchmark's timer for the suites' tests. Only ``benchmark.pedantic`` may use it (it
    stands still between rounds, so pytest-benchmark's calibration of ``benchmark(fn)`` would
    never end)."""
    return CLOCK.seconds


# ------------------------------------------------------------------------------------- backends


class _HostEvent:
    t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()


class HostBackend:
    """Host clock: the Triton interpreter on a CPU, and host work (planner, sampler) anywhere."""

    kind = "host"
    graphs = False
    l2_bytes = 0
    flush_bytes = 0

    def sync(self) -> None:
        pass

    def event(self):
        return _HostEvent()

    def elapsed_s(self, start, end) -> float:
        return end.t - start.t

    def flush_l2(self) -> None:
        pass

    def capture(self, fns):  # pragma: no cover - never called: graphs is False
        raise RuntimeError("the host clock has no graphs")


class CudaBackend:
    """CUDA events, an L2 flush buffer and CUDA graphs on the current device."""

    kind = "cuda"
    graphs = True
    device = "cuda"

    def __init__(self) -> None:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        # L2_cache_size is in torch's device properties since 2.1; 50 MiB (H100) where it is not
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
        self.flush_bytes = max(2 * self.l2_bytes, DO_BENCH_FLUSH_BYTES)
        self._buffer = None

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize()

    def event(self):
        import torch

        return torch.cuda.Event(enable_timing=True)

    def elapsed_s(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3

    def delay(self, seconds: float) -> None:
        """Queue a spin kernel of about ``seconds`` on the current stream (cycles at 2 GHz: a
        slower clock spins longer, which only widens the margin)."""
        import torch

        torch.cuda._sleep(int(seconds * 2e9))

    def flush_l2(self) -> None:
        """Evict the L2 by reading ``flush_bytes`` (a sum into a preallocated scalar): the lines it
        leaves are clean, so nothing is written back inside the next timed window."""
        import torch

        if self._buffer is None:
            self._buffer = torch.zeros(self.flush_bytes // 8, dtype=torch.int64, device=self.device)
            self._sink = torch.zeros((), dtype=torch.int64, device=self.device)
        torch.sum(self._buffer, dim=0, out=self._sink)

    def capture(self, fns: list[Callable[[], object]]) -> Callable[[], None]:
        """One CUDA graph running ``fns`` in order; returns its replay. Each distinct fn runs once
        on a side stream first (what torch asks before a capture)."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for fn in {id(getattr(f, "__wrapped__", f)): getattr(f, "__wrapped__", f) for f in fns}.values():
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for fn in fns:
                fn()
        torch.cuda.synchronize()
        return graph.replay


_BACKEND: list = []


def backend(host: bool = False):
    """The process's device backend (CUDA when present), or the host clock for ``host`` work."""
    if host:
        return HostBackend()
    if not _BACKEND:
        import torch

        _BACKEND.append(CudaBackend() if torch.cuda.is_available() else HostBackend())
    return _BACKEND[0]


def use_backend(b) -> None:
    """Replace the device backend (tests drive the harness with a fake one)."""
    _BACKEND[:] = [b]


# ---------------------------------------------------------------------------------------- timer


@dataclass
class Plan:
    mode: str  # "events", "graph" or "host"
    launches: int = 1  # launches per timed round (N of a graph replay)
    copies: int = 1  # input sets the launches cycle over
    l2: str = "flushed"  # "flushed", "warm" or "n/a" (host clock)
    estimate_s: float = 0.0  # one launch, from the event-timed estimate rounds
    notes: dict = field(default_factory=dict)

    def info(self) -> dict:
        timing = {"events": "events", "graph": f"cuda-graph x{self.launches}", "host": "host"}[self.mode]
        out = {"timing": timing, "l2": self.l2, "launches_per_round": self.launches, "input_copies": self.copies}
        out.update(self.notes)
        return out


class Timer:
    """One case's timed round (``round``) for ``benchmark.pedantic``; ``close`` frees the graph.

    ``last_output()`` is the output of the last launch of the last round (for a graph: the last
    launch of the replay, on input copy ``last_copy``), checked again after the timing;
    ``sampler`` (called after each round, outside the events) returns an SM clock sample or None."""

    def __init__(self, b, work: Callable[[], object], plan: Plan, clock: DeviceClock = CLOCK,
                 last: Callable[[], object] | None = None, last_copy: int = 0,
                 host_clock: Callable[[], float] = time.perf_counter, delay_s: float = 0.0):
        self.backend, self.work, self.plan, self.clock = b, work, plan, clock
        self.host_clock = host_clock
        self.delay_s = delay_s  # device-side delay queued before the start event (0: none)
        self.gap_flags: list[bool] = []  # per timed round: the host's issue outlasted the delay
        self._start, self._end = b.event(), b.event()
        self._last = last
        self.last_copy = last_copy
        self._output = None
        self.host_s: list[float] = []  # host seconds to issue the work, per measure()
        self.sampler: Callable[[], dict | None] | None = None
        self.samples: list[dict] = []
        self.rounds_wall: list[float] = []  # host clock at the end of each round

    def measure(self) -> float:
        """Device seconds of one launch in one round (flushed, events around the work only)."""
        b = self.backend
        b.flush_l2()
        if self.delay_s > 0:
            b.delay(self.delay_s)
        self._start.record()
        t0 = self.host_clock()
        out = self.work()
        self.host_s.append(self.host_clock() - t0)
        self._end.record()
        b.sync()
        self._output = out
        return b.elapsed_s(self._start, self._end) / self.plan.launches

    def round(self) -> None:
        self.clock.advance(self.measure())
        if self.plan.mode == "events":
            # the delay hides the issue only while it lasts: a longer issue may have left a gap
            self.gap_flags.append(self.host_s[-1] > self.delay_s)
            self.plan.notes["host_gap_rounds"] = sum(self.gap_flags)
            self.plan.notes["host_gap_flags"] = list(self.gap_flags)
        self.rounds_wall.append(time.perf_counter())
        if self.sampler is not None:
            got = self.sampler()
            if got:
                self.samples.append(got)

    def last_output(self):
        """The output of the last timed launch (None before any round)."""
        return self._last() if self._last is not None else self._output

    def empty_events_s(self, n: int = 3) -> float:
        """Device seconds of an event pair with nothing between (median of ``n``): the floor of an
        event-timed round, what a launch gap costs at least."""
        b = self.backend
        times = []
        for _ in range(n):
            self._start.record()
            self._end.record()
            b.sync()
            times.append(b.elapsed_s(self._start, self._end))
        return statistics.median(times)

    def close(self) -> None:
        self.work = None
        self._last = None
        self._output = None


def tensor_bytes(obj, _depth: int = 0) -> int:
    """Bytes of the tensors in ``obj`` (a tensor, or tuples/lists/dicts/dataclasses of them)."""
    if _depth > 4 or obj is None:
        return 0
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and hasattr(obj, "dtype"):
        return nbytes
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, _depth + 1) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(tensor_bytes(v, _depth + 1) for v in obj)
    if hasattr(obj, "__dataclass_fields__"):
        return sum(tensor_bytes(getattr(obj, k), _depth + 1) for k in obj.__dataclass_fields__)
    return 0


def plan_timer(fn: Callable[[], object], *, b=None, graph_ok: bool = True, input_bytes: int = 0,
               output_bytes: int = 0, more_bound: Callable[[int], list[Callable[[], object]]] | None = None,
               force: str | None = None, clock: DeviceClock = CLOCK,
               host_clock: Callable[[], float] = time.perf_counter) -> Timer:
    """Choose how ``fn`` (already warmed up) is timed and return its Timer.

    ``input_bytes``: bytes one launch reads (its inputs); ``output_bytes``: bytes one launch
    allocates for its outputs; ``more_bound(k)``: k more bound fns on fresh input copies (None:
    the case cannot make copies); ``force``: "events" or "graph" (tests and the agreement check)."""
    b = b or backend()
    if b.kind == "host":
        return Timer(b, fn, Plan("host", l2="n/a"), clock)
    probe = Timer(b, fn, Plan("events"), clock, host_clock=host_clock)
    times, warm = warm_up(probe)
    estimate = statistics.median(times[-ESTIMATE_ROUNDS:])
    host_launch = statistics.median(probe.host_s[-ESTIMATE_ROUNDS:])
    gaps = {"empty_events_s": probe.empty_events_s(), "host_launch_s": host_launch,
            "launch_bound": bool(host_launch > estimate), **warm}
    want_graph = force == "graph" or (force is None and graph_ok and estimate < GRAPH_BELOW_S)
    if not (want_graph and b.graphs):
        return _events_timer(b, fn, estimate, gaps, clock, host_clock)
    n = math.ceil(round(GRAPH_REPLAY_S / max(estimate, 1e-7), 6))  # round: 1 ms / 20 us is 50, not 50.0000001
    if output_bytes > 0:
        n = min(n, max(1, GRAPH_OUTPUT_BYTES // output_bytes))
    n = max(2, min(n, MAX_GRAPH_LAUNCHES))
    fns, notes = [fn], dict(gaps)
    if input_bytes < 2 * b.l2_bytes and more_bound is not None and input_bytes > 0:
        want = min(math.ceil(2 * b.l2_bytes / input_bytes), MAX_INPUT_COPIES, n)
        try:
            fns += list(more_bound(want - 1))
        except Exception as exc:  # noqa: BLE001 - a provider that cannot bind twice: warm launches, said so
            fns, notes = [fn], {**gaps, "input_copies_error": f"{type(exc).__name__}: {exc}"[:300]}
    # cold when the launches between two reads of one input set moved two L2-fulls of inputs
    l2 = "flushed" if len(fns) * input_bytes >= 2 * b.l2_bytes else "warm"
    last_out: list = [None]

    def keep_last(f):  # the replay refreshes the captured output tensors: keep the last launch's
        def launch():
            last_out[0] = f()
            return last_out[0]
        launch.__wrapped__ = f
        return launch

    sequence = [fns[i % len(fns)] for i in range(n)]
    sequence[-1] = keep_last(sequence[-1])
    try:
        replay = b.capture(sequence)
    except Exception as exc:  # noqa: BLE001 - a host sync in the provider: events it is, said so
        b.sync()
        notes["graph_fallback"] = f"{type(exc).__name__}: {exc}"[:300]
        return _events_timer(b, fn, estimate, notes, clock, host_clock)
    timer = Timer(b, replay, Plan("graph", launches=n, copies=len(fns), l2=l2, estimate_s=estimate, notes=notes),
                  clock, last=lambda: last_out[0], last_copy=(n - 1) % len(fns))
    # A graph removes launch gaps (eager code of many small kernels can replay several times faster
    # than its event-timed launch), never the work: a replay 20x faster than the events missed work
    # that ran outside the capture (on another stream), so its numbers are not used.
    ratio = timer.measure() / estimate if estimate > 0 else 1.0
    notes["graph_over_events"] = round(ratio, 3)
    if ratio < MIN_GRAPH_OVER_EVENTS:
        notes["graph_fallback"] = (f"a replay took {ratio:.3f}x the event-timed launch: work escaped the capture; "
                                   "timed with events")
        return _events_timer(b, fn, estimate, notes, clock, host_clock)
    return timer


def warm_up(probe: Timer) -> tuple[list[float], dict]:
    """Event-timed rounds of ``probe`` until ``settled`` (at least ``SETTLE_WINDOW``, at most
    ``WARMUP_MAX_ROUNDS`` rounds or ``WARMUP_MAX_S`` device seconds): the per-launch times and
    what happened (rounds, settled or not, the last window's drift)."""
    times: list[float] = []
    spent = 0.0
    while True:
        times.append(probe.measure())
        spent += times[-1] * probe.plan.launches
        if settled(times) or len(times) >= WARMUP_MAX_ROUNDS or (spent >= WARMUP_MAX_S and len(times) >= 3):
            break
    window = times[-SETTLE_WINDOW:]
    return times, {"warmup_rounds": len(times), "warmup_settled": settled(times),
                   "warmup_drift": round(drift(window), 4) if len(window) >= 2 else None}


def _events_timer(b, fn, estimate: float, notes: dict, clock: DeviceClock, host_clock) -> Timer:
    """An event-timed Timer whose rounds start behind a device-side delay covering twice the
    host's issue time (when the backend can delay), so host launch gaps stay out of the window."""
    delay = 0.0
    if hasattr(b, "delay"):
        delay = min(MAX_DELAY_S, max(MIN_DELAY_S, 2 * notes.get("host_launch_s", 0.0)))
        notes = {**notes, "host_gap_delay_s": delay}
    return Timer(b, fn, Plan("events", estimate_s=estimate, notes=dict(notes)), clock, host_clock=host_clock,
                 delay_s=delay)
