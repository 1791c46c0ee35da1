"""The GPU's environment around a benchmark session, read through NVML (``nvidia-ml-py``, the
``nvml`` extra), and whether it makes the timings suspect ("throttled").

A kernel timing is only as good as the clocks it ran at. The suites record, through NVML:

- at session start and end (``snapshot``): SM and memory clocks (current and max), temperature,
  power draw and limit, persistence mode, ECC, MIG, the clock-event (throttle) reasons and the
  other processes on the GPU;
- after each benchmark's timed rounds (``clock_sample``): the SM clock and the clock-event reasons,
  while the GPU is still loaded (an idle GPU parks its SM clock far below max, e.g. 345 of 1980 MHz
  on an H200, so the start and end snapshots alone cannot tell a throttled run from an idle one).

``assess`` marks a session ``throttled`` when the median SM clock of those samples sat below 90% of
the max SM clock, when any benchmark was marked throttled, or when another process used the GPU at
start or end. The suites also sample the SM clock after every timed round of a benchmark
(``clock_summary``); a benchmark whose clock fell more than 10% below the session's max clock
during its rounds is marked ``throttled`` itself (``benchmark_throttled``). Missing NVML (the extra not
installed, no driver, a field the board does not support) is recorded as unknown (None, with the
reason), never an error: ``throttled`` is then None, which refuses nothing.

Nothing here imports torch or runs at import; ``pynvml`` is imported on first use.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

CLOCK_FLOOR = 0.90  # below this share of the max SM clock a session counts as throttled
MB = 1 << 20

# NVML clock-event reason bits (nvml.h, nvmlClocksEventReason*; stable across driver versions)
_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def reason_names(mask: int) -> list[str]:
    """The names of the clock-event reason bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in _REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(_REASON_BITS)
    if rest:
        names.append(hex(rest))
    return names


def _load_nvml():
    """(pynvml module, None) or (None, the reason it cannot be used)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install 'polytrace[nvml]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML init failed: {exc}"
    return pynvml, None


@dataclass
class NvmlDevice:
    """One GPU, opened through NVML. ``reason`` says why nothing can be read when ``nvml`` is None."""

    nvml: object | None
    handle: object | None
    reason: str | None = None
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, index: int = 0, uuid: str | None = None) -> NvmlDevice:
        """The GPU with this UUID (torch's ``get_device_properties(i).uuid``: NVML counts every GPU
        of the machine, CUDA_VISIBLE_DEVICES does not apply to it), else NVML index ``index``."""
        nvml, reason = _load_nvml()
        if nvml is None:
            return cls(None, None, reason)
        errors = []
        if uuid:
            text = str(uuid) if str(uuid).startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            try:
                return cls(nvml, nvml.nvmlDeviceGetHandleByUUID(text))
            except Exception as exc:  # noqa: BLE001 - an unexpected UUID format: the index still works
                errors.append(f"by UUID {text}: {exc}")
        try:
            return cls(nvml, nvml.nvmlDeviceGetHandleByIndex(int(index)))
        except Exception as exc:  # noqa: BLE001
            errors.append(f"by index {index}: {exc}")
        _shutdown(nvml)
        return cls(None, None, "NVML cannot open the GPU (" + "; ".join(errors) + ")")

    def close(self) -> None:
        if self.nvml is not None and not self._closed:
            self._closed = True
            _shutdown(self.nvml)

    def _get(self, fn_name: str, *args):
        """One NVML query; None when the call is missing or fails (unsupported on this board)."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(self.handle, *args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: unknown
            return None

    def _const(self, name: str, default: int) -> int:
        return int(getattr(self.nvml, name, default))

    def _reasons(self) -> int | None:
        mask = self._get("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = self._get("nvmlDeviceGetCurrentClocksThrottleReasons")
        return None if mask is None else int(mask)

    def clock_sample(self) -> dict | None:
        """SM clock now, its max, and the clock-event reasons: cheap enough to call after every
        benchmark. None when NVML is unavailable."""
        if self.nvml is None:
            return None
        sm = self._const("NVML_CLOCK_SM", 1)
        mask = self._reasons()
        return {"sm_clock_mhz": _int(self._get("nvmlDeviceGetClockInfo", sm)),
                "sm_clock_max_mhz": _int(self._get("nvmlDeviceGetMaxClockInfo", sm)),
                "clock_reasons": None if mask is None else reason_names(mask)}

    def snapshot(self) -> dict:
        """Everything the record keeps about the GPU now; unknown fields are None."""
        out: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "nvml": "ok"}
        if self.nvml is None:
            out["nvml"] = f"unavailable: {self.reason}"
            return out
        sm, mem = self._const("NVML_CLOCK_SM", 1), self._const("NVML_CLOCK_MEM", 2)
        out["name"] = _text(self._get("nvmlDeviceGetName"))
        out["sm_clock_mhz"] = _int(self._get("nvmlDeviceGetClockInfo", sm))
        out["sm_clock_max_mhz"] = _int(self._get("nvmlDeviceGetMaxClockInfo", sm))
        out["mem_clock_mhz"] = _int(self._get("nvmlDeviceGetClockInfo", mem))
        out["mem_clock_max_mhz"] = _int(self._get("nvmlDeviceGetMaxClockInfo", mem))
        out["temperature_c"] = _int(self._get("nvmlDeviceGetTemperature", self._const("NVML_TEMPERATURE_GPU", 0)))
        power = self._get("nvmlDeviceGetPowerUsage")  # milliwatts
        limit = self._get("nvmlDeviceGetEnforcedPowerLimit")
        out["power_w"] = None if power is None else round(float(power) / 1000.0, 1)
        out["power_limit_w"] = None if limit is None else round(float(limit) / 1000.0, 1)
        persistence = self._get("nvmlDeviceGetPersistenceMode")
        out["persistence_mode"] = None if persistence is None else bool(persistence)
        out["ecc_mode"] = _current_of_pair(self._get("nvmlDeviceGetEccMode"))
        out["mig_mode"] = _current_of_pair(self._get("nvmlDeviceGetMigMode"))
        mask = self._reasons()
        out["clock_reasons"] = None if mask is None else reason_names(mask)
        out["processes"] = self._processes()
        return out

    def _processes(self) -> list[dict] | None:
        found: dict[int, dict] = {}
        seen_any = False
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            procs = self._get(fn)
            if procs is None:
                continue
            seen_any = True
            for p in procs:
                pid = _int(getattr(p, "pid", None))
                if pid is None:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                found[pid] = {"pid": pid, "used_memory_mb": None if used is None else int(used) // MB}
        return [found[k] for k in sorted(found)] if seen_any else None


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - nothing to do about a failing shutdown
        pass


def _int(value) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _current_of_pair(value) -> bool | None:
    """NVML returns (current, pending) for ECC and MIG modes."""
    if value is None:
        return None
    current = value[0] if isinstance(value, (tuple, list)) else value
    return None if current is None else bool(current)


def other_processes(snap: dict, own_pid: int, own_context: bool) -> list[dict] | None:
    """Processes on the GPU other than this one, or None when unknown. Inside a container NVML
    reports host PIDs, so this process may not appear under ``own_pid``: when it holds a CUDA
    context (``own_context``) and its PID is absent, one unidentified entry is taken to be it."""
    procs = snap.get("processes")
    if procs is None:
        return None
    others = [p for p in procs if p.get("pid") != own_pid]
    if own_context and len(others) == len(procs) and others:
        others = others[1:] if len(others) > 1 else []
    return others


def clock_summary(samples: list[dict]) -> dict | None:
    """``{"samples", "min_mhz", "median_mhz", "max_mhz"}`` of the SM clock samples of one benchmark,
    leaving out samples NVML flagged ``gpu_idle`` (a parked clock between rounds is not a throttle);
    None when none is usable."""
    clocks = [float(s["sm_clock_mhz"]) for s in samples
              if s and isinstance(s.get("sm_clock_mhz"), (int, float)) and s["sm_clock_mhz"] > 0
              and "gpu_idle" not in (s.get("clock_reasons") or [])]
    if not clocks:
        return None
    return {"samples": len(clocks), "min_mhz": min(clocks), "median_mhz": float(statistics.median(clocks)),
            "max_mhz": max(clocks)}


def benchmark_throttled(summary: dict | None, session_max_mhz: float | None) -> bool | None:
    """A benchmark is throttled when its SM clock fell more than 10% (``CLOCK_FLOOR``) below the
    session's max clock at any sample during its rounds; None when unknown."""
    if not summary or not session_max_mhz:
        return None
    return bool(summary["min_mhz"] < CLOCK_FLOOR * session_max_mhz)


def assess(start: dict | None, end: dict | None, samples: list[dict], *, own_pid: int | None = None,
           own_context_at_start: bool = False, throttled_benchmarks: list[str] | None = None) -> dict:
    """``{"throttled": True/False/None, "reasons": [...], "sm_clock": {...}}`` for a session.

    Throttled when the median SM clock sampled after the benchmarks' timed rounds sat below
    ``CLOCK_FLOOR`` (90%) of the max SM clock, or when another process used the GPU at the start
    or the end. None when neither could be read (NVML missing)."""
    own_pid = os.getpid() if own_pid is None else own_pid
    reasons: list[str] = []
    known = False
    clocks = [s["sm_clock_mhz"] for s in samples if s and s.get("sm_clock_mhz")]
    maxes = [s["sm_clock_max_mhz"] for s in samples if s and s.get("sm_clock_max_mhz")]
    sm_clock = None
    if clocks and maxes:
        known = True
        median, top = float(statistics.median(clocks)), float(max(maxes))
        sm_clock = {"samples": len(clocks), "median_mhz": median, "min_mhz": float(min(clocks)), "max_mhz": top}
        if median < CLOCK_FLOOR * top:
            reasons.append(f"SM clock sat at {median:.0f} MHz (median of {len(clocks)} samples after the "
                           f"timed rounds), below {CLOCK_FLOOR:.0%} of its max {top:.0f} MHz")
        events = sorted({r for s in samples if s and s.get("clock_reasons") for r in s["clock_reasons"]}
                        - {"gpu_idle"})
        if events:
            sm_clock["clock_reasons_seen"] = events
    if throttled_benchmarks:
        known = True
        names = ", ".join(throttled_benchmarks[:3]) + (" ..." if len(throttled_benchmarks) > 3 else "")
        reasons.append(f"{len(throttled_benchmarks)} benchmark(s) ran with the SM clock more than "
                       f"{1 - CLOCK_FLOOR:.0%} below the session's max: {names}")
    for label, snap, ctx in (("start", start, own_context_at_start), ("end", end, True)):
        if not snap:
            continue
        others = other_processes(snap, own_pid, ctx)
        if others is None:
            continue
        known = True
        if others:
            pids = ", ".join(str(p["pid"]) for p in others)
            reasons.append(f"{len(others)} other process(es) on the GPU at the session {label} (pid {pids})")
    return {"throttled": bool(reasons) if known else None, "reasons": reasons, "sm_clock": sm_clock}
