"""The suites' device-side timing (suites/timing.py, suites/harness.py) driven by a fake device:
events around the work only, the L2 flushed before every round outside the events, CUDA-graph
replays of N launches for short work (per launch = replay / N, inputs cycled so they stay cold),
fallbacks said out loud, rounds the gate can use, and % of peak only on the case's roofline."""

from __future__ import annotations

import math

import pytest

from suites import harness, timing

L2 = 50 << 20
FLUSH_S = 40e-6


class FakeEvent:
    def __init__(self, dev):
        self.dev, self.t = dev, None

    def record(self):
        self.dev.log.append("event")
        self.t = self.dev.now


class FakeDevice:
    """A device clock that only the work and the flush advance; logs what ran, in order."""

    kind = "cuda"
    graphs = True
    l2_bytes = L2
    flush_bytes = 2 * L2

    def __init__(self, capture_error=None):
        self.now = 0.0
        self.log = []
        self.captured = []
        self.capture_error = capture_error

    def sync(self):
        pass

    def event(self):
        return FakeEvent(self)

    def elapsed_s(self, a, b):
        return b.t - a.t

    def flush_l2(self):
        self.log.append("flush")
        self.now += FLUSH_S

    def capture(self, fns):
        if self.capture_error:
            raise RuntimeError(self.capture_error)
        self.captured = list(fns)
        return lambda: [f() for f in fns]

    def work(self, seconds, tag="work"):
        def fn():
            self.log.append(tag)
            self.now += seconds
            return None
        return fn


def test_long_work_is_timed_with_events_flushed_outside_them():
    dev = FakeDevice()
    clock = timing.DeviceClock()
    timer = timing.plan_timer(dev.work(300e-6), b=dev, clock=clock)
    assert timer.plan.mode == "events" and timer.plan.info()["timing"] == "events"
    assert timer.plan.info()["l2"] == "flushed" and timer.plan.estimate_s == pytest.approx(300e-6)
    dev.log.clear()
    before = clock()
    for _ in range(4):
        timer.round()
    assert clock() - before == pytest.approx(4 * 300e-6, rel=1e-12)  # the flush's 40 us never counted
    assert dev.log == ["flush", "event", "work", "event"] * 4  # flush first, outside the events


def test_short_work_is_a_graph_replay_of_n_launches_on_cold_input_copies():
    dev = FakeDevice()
    clock = timing.DeviceClock()
    copies = []

    def more_bound(k):
        fns = [dev.work(20e-6, f"copy{i + 1}") for i in range(k)]
        copies.extend(fns)
        return fns

    timer = timing.plan_timer(dev.work(20e-6, "copy0"), b=dev, clock=clock, input_bytes=10 << 20,
                              more_bound=more_bound)
    n = math.ceil(timing.GRAPH_REPLAY_S / 20e-6)
    assert timer.plan.mode == "graph" and timer.plan.launches == n == 50
    info = timer.plan.info()
    assert info["timing"] == "cuda-graph x50" and info["l2"] == "flushed" and info["input_copies"] == 10
    assert len(copies) == 9 and len(dev.captured) == 50  # 10 x 10 MiB >= 2 x 50 MiB L2
    launched = [getattr(f, "__wrapped__", f) for f in dev.captured]  # the last launch keeps its output
    assert [f is launched[i % 10] for i, f in enumerate(launched)] == [True] * 50
    assert timer.last_copy == 9  # launch 49 ran on input copy 9: the recheck uses that copy's truth
    dev.log.clear()
    timer.round()
    assert clock() == pytest.approx(20e-6, rel=1e-9)  # per launch: replay / N
    assert dev.log[0] == "flush" and dev.log.count("flush") == 1 and dev.log[2:12] == [f"copy{i}" for i in range(10)]


def test_graph_launches_stay_warm_when_no_copies_can_be_made_and_say_so():
    dev = FakeDevice()
    timer = timing.plan_timer(dev.work(20e-6), b=dev, input_bytes=1 << 20)
    assert timer.plan.mode == "graph" and timer.plan.info()["l2"] == "warm"
    big = timing.plan_timer(dev.work(20e-6), b=dev, input_bytes=2 * L2)  # one input set spans two L2-fulls
    assert big.plan.info()["l2"] == "flushed" and big.plan.copies == 1


def test_graph_size_is_bounded_by_launches_and_output_memory():
    dev = FakeDevice()
    assert timing.plan_timer(dev.work(1e-8), b=dev).plan.launches == timing.MAX_GRAPH_LAUNCHES
    capped = timing.plan_timer(dev.work(10e-6), b=dev, output_bytes=timing.GRAPH_OUTPUT_BYTES // 4)
    assert capped.plan.launches == 4
    assert timing.plan_timer(dev.work(199e-6), b=dev).plan.launches == 6  # >= 1 ms per replay


def test_a_graph_that_cannot_be_captured_falls_back_to_events_and_says_why():
    dev = FakeDevice(capture_error="operation not permitted when stream is capturing")
    timer = timing.plan_timer(dev.work(20e-6), b=dev)
    assert timer.plan.mode == "events"
    assert "operation not permitted" in timer.plan.info()["graph_fallback"]
    assert timing.plan_timer(dev.work(20e-6), b=FakeDevice(), graph_ok=False).plan.mode == "events"
    assert timing.plan_timer(dev.work(900e-6), b=FakeDevice(), force="graph").plan.mode == "graph"


def test_a_graph_that_lost_its_work_is_not_used():
    """Work that ran outside the capture (another stream) leaves a replay of almost nothing."""
    dev = FakeDevice()
    dev.capture = lambda fns: (lambda: None)
    timer = timing.plan_timer(dev.work(20e-6), b=dev)
    assert timer.plan.mode == "events" and "escaped the capture" in timer.plan.info()["graph_fallback"]
    good = FakeDevice()
    ok = timing.plan_timer(good.work(20e-6), b=good)
    assert ok.plan.mode == "graph" and ok.plan.info()["graph_over_events"] == pytest.approx(1.0)


def test_host_work_uses_the_host_clock():
    timer = timing.plan_timer(lambda: sum(range(1000)), b=timing.HostBackend())
    assert timer.plan.info() == {"timing": "host", "l2": "n/a", "launches_per_round": 1, "input_copies": 1}
    clock = timing.DeviceClock()
    timer.clock = clock
    timer.round()
    assert 0 < clock() < 1.0


def test_tensor_bytes_counts_nested_tensors():
    import torch

    x = torch.zeros(10, 4)
    assert timing.tensor_bytes({"a": x, "b": (x, [x]), "c": 3}) == 3 * 160


# ------------------------------------------------------------------------------------ harness


def test_gated_benchmarks_with_too_few_rounds_are_refused_on_a_gpu(monkeypatch):
    from polytrace.measure.results import gate
    from polytrace.measure.results.verdict import Rule

    assert harness.GATE_ALPHA == Rule().alpha  # the gate's default rule
    monkeypatch.setattr(harness, "on_gpu", lambda: True)
    ours = harness.Case("packing", "plan_microbatches", "ours", "plan", {"n": 1}, provider_kind="ours")
    with pytest.raises(ValueError, match="5 rounds cannot reach p < 0.002.*needs >= 7"):
        harness.refuse_underpowered(ours, 5)
    harness.refuse_underpowered(ours, 7)
    harness.refuse_underpowered(harness.Case("gemm", "linear", "torch", "fwd", {}, provider_kind="baseline"), 3)
    monkeypatch.delenv("POLYTRACE_BENCH_ROUNDS", raising=False)
    for expected, host in ((1e-4, False), (0.1, False), (None, True)):
        rounds, _ = harness.rounds_for(expected, host=host)
        assert gate.min_p_value(rounds, rounds) < gate.min_p_value(7, 7) * 1.0001
    assert harness.rounds_for(None, host=True)[0] == 8  # the planner: >= 8 rounds


def test_rounds_env_override_is_checked(monkeypatch):
    monkeypatch.setenv("POLYTRACE_BENCH_ROUNDS", "many")
    with pytest.raises(ValueError, match="POLYTRACE_BENCH_ROUNDS"):
        harness.rounds_for()
    monkeypatch.setenv("POLYTRACE_BENCH_ROUNDS", "12")
    assert harness.rounds_for() == (12, 1)


class FakeBenchmark:
    def __init__(self, timer=timing.device_clock, median=2e-3):
        self._timer = timer
        self.extra_info = {}
        self.group = None
        self.stats = type("S", (), {"stats": type("I", (), {"median": median})()})()


def test_a_benchmark_not_on_the_device_clock_is_refused():
    import time

    with pytest.raises(RuntimeError, match="device_clock"):
        harness.check_timer(FakeBenchmark(timer=time.perf_counter))
    harness.check_timer(FakeBenchmark())


def test_percent_of_peak_only_on_the_cases_roofline(monkeypatch):
    from polytrace.run.hardware import get_gpu

    monkeypatch.setattr(harness, "gpu_preset", lambda: get_gpu("h200"))
    monkeypatch.setattr(harness, "_RECORDED_IDS", set())
    hbm = harness.Case("attention", "decode_attention", "ours", "decode", {"b": 1}, flops=1e9, bytes_moved=4.8e9,
                       roofline="hbm")
    b = FakeBenchmark(median=2e-3)
    harness.record(b, hbm)
    assert b.extra_info["pct_peak_hbm"] == pytest.approx(50.0) and "pct_peak_bf16" not in b.extra_info
    gemm = harness.Case("gemm", "linear", "torch", "fwd", {"b": 2}, flops=989.4e9, bytes_moved=1e6, roofline="bf16")
    b = FakeBenchmark(median=2e-3)
    harness.record(b, gemm)
    assert b.extra_info["pct_peak_bf16"] == pytest.approx(50.0) and "pct_peak_hbm" not in b.extra_info
    with pytest.raises(ValueError, match="duplicate benchmark id"):
        harness.record(FakeBenchmark(), gemm)


# ---- warm-up until the timings settle; host gaps hidden by a device-side delay, else flagged ----


def test_drift_is_the_trend_across_the_window_relative_to_the_median():
    assert timing.drift([1.0] * 8) == 0.0
    # 1.00, 1.01, ..., 1.07: slope 0.01 a round, 0.07 across the window, median 1.035
    assert timing.drift([1.0 + 0.01 * i for i in range(8)]) == pytest.approx(0.07 / 1.035, rel=1e-9)
    assert timing.settled([1.0] * 8) and not timing.settled([1.0] * 7)  # a full window first
    assert not timing.settled([1.0 + 0.01 * i for i in range(8)])  # 6.8% drift > 2%


class HostClockDevice(FakeDevice):
    """A fake device that can delay (a spin kernel before the start event) and a host clock the
    work advances by ``issue_s`` (the host's time to issue it)."""

    def __init__(self):
        super().__init__()
        self.host = 0.0
        self.issue_s = 1e-6
        self.delays = []

    def delay(self, seconds):
        self.log.append("delay")
        self.delays.append(seconds)
        self.now += seconds  # before the start event: never inside the window

    def work(self, seconds, tag="work"):
        def fn():
            self.log.append(tag)
            self.now += seconds
            self.host += self.issue_s
        return fn


def test_warm_up_runs_until_the_timings_settle():
    dev = FakeDevice()
    calls = []

    def cooling():  # 30% slower at first, settling over ~20 launches (clocks ramping, caches warming)
        calls.append(1)
        dev.now += 300e-6 * (1 + 0.3 * math.exp(-len(calls) / 4))

    timer = timing.plan_timer(cooling, b=dev, clock=timing.DeviceClock())
    notes = timer.plan.notes
    assert notes["warmup_settled"] and notes["warmup_drift"] <= timing.SETTLE_DRIFT
    assert timing.SETTLE_WINDOW < notes["warmup_rounds"] < 40 and notes["warmup_rounds"] == len(calls)
    assert timer.plan.estimate_s == pytest.approx(300e-6, rel=0.01)  # the settled time, not the cold one
    steady = FakeDevice()
    timer = timing.plan_timer(steady.work(300e-6), b=steady, clock=timing.DeviceClock())
    assert timer.plan.notes["warmup_rounds"] == timing.SETTLE_WINDOW  # no trend: one window is enough


def test_warm_up_that_never_settles_stops_at_its_budget_and_says_so():
    dev = FakeDevice()
    n = []

    def drifting():  # 1% slower every launch (a throttling device)
        n.append(1)
        dev.now += 5e-3 * 1.01 ** len(n)

    timer = timing.plan_timer(drifting, b=dev, clock=timing.DeviceClock())
    notes = timer.plan.notes
    assert not notes["warmup_settled"] and notes["warmup_drift"] > timing.SETTLE_DRIFT
    spent = sum(5e-3 * 1.01 ** (i + 1) for i in range(len(n)))
    assert len(n) < timing.WARMUP_MAX_ROUNDS and spent >= timing.WARMUP_MAX_S > spent - 5e-3 * 1.01 ** len(n)


def test_event_rounds_start_behind_a_delay_and_flag_rounds_it_did_not_cover():
    dev = HostClockDevice()
    clock = timing.DeviceClock()
    dev.issue_s = 100e-6  # the host takes 100 us to issue 300 us of work
    timer = timing.plan_timer(dev.work(300e-6), b=dev, clock=clock, host_clock=lambda: dev.host)
    assert timer.plan.mode == "events"
    assert timer.delay_s == pytest.approx(200e-6) == timer.plan.notes["host_gap_delay_s"]  # twice the issue
    dev.log.clear()
    timer.round()
    dev.issue_s = 250e-6  # a slow issue (a host hiccup): longer than the delay, so possibly a gap
    timer.round()
    dev.issue_s = 100e-6
    timer.round()
    assert dev.log == ["flush", "delay", "event", "work", "event"] * 3
    assert clock() == pytest.approx(3 * 300e-6, rel=1e-12)  # the delay is never timed
    assert timer.plan.notes["host_gap_rounds"] == 1 and timer.plan.notes["host_gap_flags"] == [False, True, False]
    assert timer.plan.info()["host_gap_rounds"] == 1
    # a fast host still gets the floor delay; a device that cannot delay gets none (and no flags lie)
    dev2 = HostClockDevice()
    assert timing.plan_timer(dev2.work(300e-6), b=dev2, host_clock=lambda: dev2.host).delay_s == timing.MIN_DELAY_S
