"""The tuner's GPU timer flushes L2 before every timed call, as the suites time a round, with a
read of max(2 x L2, 256 MiB) outside the events (checked on the CPU with a fake CUDA)."""

from __future__ import annotations

import pytest
import torch

from polytrace.measure.tuning import measure


def test_flush_buffer_size_follows_the_suites_rule():
    assert measure.flush_bytes(50 << 20) == 256 << 20  # H100/H200: do_bench's 256 MiB
    assert measure.flush_bytes(200 << 20) == 400 << 20  # a larger L2: twice it
    assert measure.flush_bytes(0) == 256 << 20


class _FakeBuffer:
    def __init__(self, log, nbytes):
        self.log, self.nbytes = log, nbytes

    def sum(self, dtype=None):
        self.log.append("flush")
        return 0


class _FakeEvent:
    clock = [0.0]

    def __init__(self, log, enable_timing=True):
        self.log, self.t = log, None

    def record(self):
        self.log.append("event")
        self.t = self.clock[0]

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def test_gpu_timer_flushes_before_each_timed_call(monkeypatch):
    log: list[str] = []
    made = []

    def fake_ones(n, dtype=None, device=None):
        assert device == "cuda"
        made.append(n)
        return _FakeBuffer(log, n)

    class Props:
        L2_cache_size = 60 << 20

    monkeypatch.setattr(torch, "ones", fake_ones)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=True: _FakeEvent(log))
    durations = iter([0.0] + [1e-3 * (i + 1) for i in range(5)])

    def work():
        log.append("work")
        _FakeEvent.clock[0] += next(durations)

    timer = measure.make_timer(on_gpu=True)
    t = timer(work, reps=5)
    assert made == [256 << 20]  # one buffer for every call: 2 x 60 MiB < 256 MiB
    timed = log[1:]  # after the warm-up call
    assert timed == ["flush", "event", "work", "event"] * 5  # the flush is outside the events
    assert t == pytest.approx(3e-3)  # median of 1..5 ms
