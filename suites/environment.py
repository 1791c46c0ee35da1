"""The environment record of one benchmark session (``polytrace.envrecord`` through NVML).

``conftest.py`` opens it at session start (``start``) and closes it when pytest-benchmark writes
the JSON (``finish``, from ``pytest_benchmark_update_machine_info``: that is the session's end);
the harness calls ``sample`` right after each benchmark's timed rounds, while the GPU is loaded,
and keeps the sample in that benchmark's ``extra_info``. On a machine without CUDA nothing is read
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
    from polytrace.envrecord import NvmlDevice

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


def finish() -> dict:
    """The session's record for ``machine_info.polytrace["environment"]``; ``throttled`` is True,
    False or None (unknown). Idempotent: pytest-benchmark may ask twice (--benchmark-json and
    --benchmark-save)."""
    if "record" in _state:
        return _state["record"]
    from polytrace.envrecord import assess

    if "skipped" in _state or not _state:
        record = {"throttled": None, "reasons": [], "note": _state.get("skipped", "session record not started")}
    else:
        device = _state["device"]
        end = device.snapshot()
        device.close()
        verdict = assess(_state.get("start"), end, _state["samples"], own_pid=os.getpid(),
                         own_context_at_start=_state.get("own_context_at_start", False))
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
