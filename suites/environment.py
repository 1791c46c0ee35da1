"""The environment record of one benchmark session (``polytrace.measure.envrecord`` through NVML).

``conftest.py`` opens it at session start (``start``) and closes it when pytest-benchmark writes
the JSON (``finish``, from ``pytest_benchmark_update_machine_info``: that is the session's end);
the harness calls ``sample`` after every timed round of a benchmark (outside its events), while the
GPU is loaded, and ``judge`` keeps the benchmark's clock in its ``extra_info`` (``sm_clock``) and
marks it ``throttled`` when its clock fell more than 10% below the session's max; ``finish``
re-judges every benchmark against the whole session's max and marks the session throttled when any
benchmark was. On a machine without CUDA nothing is read
(``measured_on`` already says the timings are not performance).
"""

from __future__ import annotations

import os

_state: dict = {}


def start(on_gpu: bool) -> None:
    """Open NVML on the GPU the suites time and take the start snapshot."""
    finish_quietly()
    _state.clear()
    _state["samples"] = []
    if not on_gpu:
        _state["skipped"] = "no CUDA device: no environment to record"
        return
    from polytrace.measure.envrecord import NvmlDevice

    device = NvmlDevice.open(index=_nvml_index(), uuid=_torch_uuid())
    _state["device"] = device
    # pytest_sessionstart runs before any test allocates: this process holds no CUDA context yet
    # (reading the device's properties creates none), so every process listed now is another one
    _state["own_context_at_start"] = False
    _state["start"] = device.snapshot()


def sample() -> dict | None:
    """The SM clock and clock-event reasons now (after a benchmark's timed rounds), or None."""
    device = _state.get("device")
    if device is None:
        return None
    got = device.clock_sample()
    if got is not None:
        _state["samples"].append(got)
    return got


def judge(samples: list[dict], info: dict, bench_id: str) -> None:
    """Record one benchmark's SM clock (``info["sm_clock"]``) from the samples taken during its
    rounds and mark it ``throttled`` against the session's max so far; ``finish`` judges every
    benchmark again against the whole session's max."""
    from polytrace.measure.envrecord import benchmark_throttled, clock_summary

    summary = clock_summary(samples)
    if summary is None:
        return
    top = max(_state.get("session_max_mhz") or 0.0, summary["max_mhz"])
    _state["session_max_mhz"] = top
    info["sm_clock"] = summary
    info["throttled"] = benchmark_throttled(summary, top)
    _state.setdefault("judged", []).append((bench_id, info))


def rejudge() -> list[str]:
    """Every judged benchmark against the session's final max clock; ids of the throttled ones."""
    from polytrace.measure.envrecord import benchmark_throttled

    top = _state.get("session_max_mhz")
    throttled = []
    for bench_id, info in _state.get("judged", []):
        info["throttled"] = benchmark_throttled(info.get("sm_clock"), top)
        info["session_max_mhz"] = top
        if info["throttled"]:
            throttled.append(bench_id)
    return throttled


def finish() -> dict:
    """The session's record for ``machine_info.polytrace["environment"]``; ``throttled`` is True,
    False or None (unknown). Idempotent: pytest-benchmark may ask twice (--benchmark-json and
    --benchmark-save)."""
    if "record" in _state:
        return _state["record"]
    from polytrace.measure.envrecord import assess

    if "skipped" in _state or not _state:
        record = {"throttled": None, "reasons": [], "note": _state.get("skipped", "session record not started")}
    else:
        device = _state["device"]
        end = device.snapshot()
        device.close()
        verdict = assess(_state.get("start"), end, _state["samples"], own_pid=os.getpid(),
                         own_context_at_start=_state.get("own_context_at_start", False),
                         throttled_benchmarks=rejudge())
        record = {"start": _state.get("start"), "end": end, **verdict}
    _state["record"] = record
    return record


def finish_quietly() -> None:
    device = _state.get("device")
    if device is not None:
        device.close()


def _torch_uuid() -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_properties(0).uuid)
    except Exception:  # noqa: BLE001 - older torch without .uuid: fall back to the NVML index
        return None


def _nvml_index() -> int:
    """NVML counts every GPU; CUDA_VISIBLE_DEVICES=3 makes CUDA's device 0 NVML's 3."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0
