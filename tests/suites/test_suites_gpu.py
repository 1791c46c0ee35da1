"""The suites' timing against ``triton.testing.do_bench`` on a real GPU (``gpu``-marked: skipped on
CPU-only machines; the CPU drives the same harness logic with a fake device in
tests/suites/test_suites_timing.py).

For one bandwidth-bound kernel (our token_logprobs forward, 2.5 GB of logits) and one
compute-bound one (a bf16 8192^3 GEMM through torch), the harness's median per-launch time agrees
with do_bench's median: both time the work alone between CUDA events after flushing 256 MiB. The
harness flushes by reading, do_bench by writing zeros whose dirty lines (up to an L2-full) are
written back inside its timed window, so the harness may be faster by that write-back (up to ~7%
on a memory-bound kernel) and never slower by more than 5%. Work of ~150 us timed as a CUDA-graph
replay over cold input copies agrees with the same kernel timed with events within 5% (launch
overhead is negligible at that length, so the two methods must agree). The launch-gap figures are
recorded, and the read flush writes nothing the timed work must wait for.
"""

from __future__ import annotations

import statistics

import pytest

pytestmark = pytest.mark.gpu
AGREE = 0.05
WRITE_BACK = 0.10  # do_bench's zero-write flush leaves up to ~60 MB of dirty lines in its window
ROUNDS = 30


def _harness_median(fn, **kw) -> tuple[float, dict]:
    from suites import timing

    fn()
    timer = timing.plan_timer(fn, b=timing.backend(), **kw)
    try:
        for _ in range(3):
            timer.measure()
        times = [timer.measure() for _ in range(ROUNDS)]
    finally:
        timer.close()
    return statistics.median(times), timer.plan.info()


def _do_bench_median(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e3


def _logprob_fn(tokens: int = 8192, vocab: int = 152064):
    import torch

    from polytrace_kernels.logprob import token_logprobs

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16, generator=gen)
    tok = torch.randint(0, vocab, (tokens,), device="cuda", generator=gen)
    token_logprobs(x, tok, return_entropy=True)
    return lambda: token_logprobs(x, tok, return_entropy=True, check_tokens=False)


def test_bandwidth_bound_kernel_agrees_with_do_bench():
    fn = _logprob_fn()
    ours, info = _harness_median(fn)
    ref = _do_bench_median(fn)
    assert info["timing"] == "events" and info["l2"] == "flushed"
    assert 1.0 - WRITE_BACK <= ours / ref <= 1.0 + AGREE, f"harness {ours * 1e6:.1f} us vs do_bench {ref * 1e6:.1f} us"
    assert 0 <= info["empty_events_s"] < 50e-6 and info["host_launch_s"] > 0 and info["launch_bound"] is False


def test_compute_bound_gemm_agrees_with_do_bench():
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
    fn = lambda: a @ b
    ours, info = _harness_median(fn)
    ref = _do_bench_median(fn)
    assert info["timing"] == "events"
    assert abs(ours / ref - 1.0) <= AGREE, f"harness {ours * 1e3:.3f} ms vs do_bench {ref * 1e3:.3f} ms"


def test_graph_replay_over_cold_copies_agrees_with_events():
    import torch

    from suites import timing

    def make(seed: int):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(64 << 20, device="cuda", dtype=torch.bfloat16, generator=gen)  # 128 MiB
        return lambda: x.float().sum()  # read 128 MiB, write and read 256 MiB: ~150 us on an H200

    fn = make(0)
    events, ev_info = _harness_median(fn, force="events")
    graph, g_info = _harness_median(fn, force="graph", input_bytes=128 << 20,
                                    more_bound=lambda k: [make(1 + i) for i in range(k)])
    assert ev_info["timing"] == "events" and g_info["timing"].startswith("cuda-graph x")
    assert g_info["l2"] == "flushed" and timing.backend().l2_bytes > 0
    assert abs(graph / events - 1.0) <= AGREE, f"graph {graph * 1e6:.1f} us vs events {events * 1e6:.1f} us"


def test_environment_record_reads_the_gpu():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed: the record says unknown (tested on CPU)")
    from polytrace.measure.envrecord import NvmlDevice

    dev = NvmlDevice.open()
    try:
        snap, sample = dev.snapshot(), dev.clock_sample()
    finally:
        dev.close()
    assert snap["nvml"] == "ok" and snap["sm_clock_max_mhz"] and snap["sm_clock_max_mhz"] > 500
    assert sample["sm_clock_mhz"] is not None and snap["temperature_c"] is not None
