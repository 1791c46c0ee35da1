"""The NVML environment record (polytrace/measure/envrecord.py, suites/environment.py) with a fake pynvml:
what is read, when a session counts as throttled, and that a missing or failing NVML is recorded as
unknown, never an error."""

from __future__ import annotations

import sys
import types

import pytest

from polytrace.measure import envrecord
from polytrace.measure.envrecord import NvmlDevice, assess, reason_names

MAX_SM = 1980


class FakeError(Exception):
    pass


def fake_nvml(*, sm=1980, procs=(), fail=(), init_error=None, throttle_mask=0x0) -> types.ModuleType:
    """A pynvml stand-in: ``sm`` is the SM clock it reports (a list is consumed one reading at a
    time), ``procs`` the (pid, bytes) it lists, ``fail`` the functions that raise NotSupported."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.calls = []
    clocks = list(sm) if isinstance(sm, list) else None

    def nvml(name):
        def deco(fn):
            def wrapped(*a):
                m.calls.append(name)
                if name in fail:
                    raise FakeError(f"{name}: Not Supported")
                return fn(*a)
            setattr(m, name, wrapped)
            return wrapped
        return deco

    @nvml("nvmlInit")
    def _init():
        if init_error:
            raise FakeError(init_error)

    nvml("nvmlShutdown")(lambda: None)
    nvml("nvmlDeviceGetHandleByIndex")(lambda i: ("handle", i))
    nvml("nvmlDeviceGetHandleByUUID")(lambda u: ("handle", u))
    nvml("nvmlDeviceGetName")(lambda h: b"NVIDIA H200")

    @nvml("nvmlDeviceGetClockInfo")
    def _clock(h, kind):
        if kind == m.NVML_CLOCK_SM:
            return clocks.pop(0) if clocks is not None else sm
        return 3201

    nvml("nvmlDeviceGetMaxClockInfo")(lambda h, kind: MAX_SM if kind == m.NVML_CLOCK_SM else 3201)
    nvml("nvmlDeviceGetTemperature")(lambda h, s: 41)
    nvml("nvmlDeviceGetPowerUsage")(lambda h: 118_500)
    nvml("nvmlDeviceGetEnforcedPowerLimit")(lambda h: 700_000)
    nvml("nvmlDeviceGetPersistenceMode")(lambda h: 1)
    nvml("nvmlDeviceGetEccMode")(lambda h: (1, 1))
    nvml("nvmlDeviceGetMigMode")(lambda h: (0, 0))
    nvml("nvmlDeviceGetCurrentClocksEventReasons")(lambda h: throttle_mask)
    nvml("nvmlDeviceGetComputeRunningProcesses")(
        lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in procs])
    nvml("nvmlDeviceGetGraphicsRunningProcesses")(lambda h: [])
    return m


@pytest.fixture
def install(monkeypatch):
    def put(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return put


def test_snapshot_reads_every_field(install):
    nvml = install(fake_nvml(procs=[(4242, 2 << 30)], throttle_mask=0x4))
    dev = NvmlDevice.open(uuid="abc-123")
    snap = dev.snapshot()
    dev.close()
    assert snap["nvml"] == "ok" and snap["name"] == "NVIDIA H200"
    assert (snap["sm_clock_mhz"], snap["sm_clock_max_mhz"], snap["mem_clock_mhz"], snap["mem_clock_max_mhz"]) \
        == (1980, 1980, 3201, 3201)
    assert snap["temperature_c"] == 41 and snap["power_w"] == 118.5 and snap["power_limit_w"] == 700.0
    assert snap["persistence_mode"] is True and snap["ecc_mode"] is True and snap["mig_mode"] is False
    assert snap["clock_reasons"] == ["sw_power_cap"]
    assert snap["processes"] == [{"pid": 4242, "used_memory_mb": 2048}]
    assert "nvmlDeviceGetHandleByUUID" in nvml.calls and nvml.calls[-1] == "nvmlShutdown"


def test_a_uuid_nvml_does_not_know_falls_back_to_the_index(install):
    nvml = install(fake_nvml(fail=("nvmlDeviceGetHandleByUUID",)))
    dev = NvmlDevice.open(index=3, uuid="1234-abcd")
    assert dev.handle == ("handle", 3) and dev.snapshot()["nvml"] == "ok"
    assert nvml.calls[:3] == ["nvmlInit", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByIndex"]
    install(fake_nvml(fail=("nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByIndex")))
    assert "cannot open the GPU" in NvmlDevice.open(uuid="x").snapshot()["nvml"]


def test_unsupported_fields_are_unknown_not_errors(install):
    install(fake_nvml(fail=("nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetPowerUsage",
                            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")))
    snap = NvmlDevice.open().snapshot()
    assert snap["ecc_mode"] is None and snap["mig_mode"] is None and snap["power_w"] is None
    assert snap["processes"] is None and snap["sm_clock_mhz"] == 1980


def test_missing_or_failing_nvml_is_recorded_as_unknown(install, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: the extra is not installed
    dev = NvmlDevice.open()
    assert dev.snapshot()["nvml"].startswith("unavailable: nvidia-ml-py is not installed")
    assert dev.clock_sample() is None
    install(fake_nvml(init_error="Driver Not Loaded"))
    snap = NvmlDevice.open().snapshot()
    assert snap["nvml"] == "unavailable: NVML init failed: Driver Not Loaded"
    verdict = assess(snap, snap, [])
    assert verdict["throttled"] is None and verdict["reasons"] == []


def _samples(clocks):
    return [{"sm_clock_mhz": c, "sm_clock_max_mhz": MAX_SM, "clock_reasons": []} for c in clocks]


def test_throttled_when_the_loaded_clock_sits_below_90_percent():
    quiet = {"processes": []}
    assert assess(quiet, quiet, _samples([1980, 1965, 1800]), own_pid=1)["throttled"] is False
    # one dip is not "sat below": the median decides
    assert assess(quiet, quiet, _samples([1980, 1400, 1980]), own_pid=1)["throttled"] is False
    hot = assess(quiet, quiet, _samples([1700, 1750, 1980]), own_pid=1)
    assert hot["throttled"] is True and "1750 MHz" in hot["reasons"][0] and "1980 MHz" in hot["reasons"][0]
    edge = 0.9 * MAX_SM
    assert assess(quiet, quiet, _samples([edge]), own_pid=1)["throttled"] is False
    assert assess(quiet, quiet, _samples([edge - 1]), own_pid=1)["throttled"] is True


def test_throttled_when_another_process_uses_the_gpu():
    alone = {"processes": []}
    busy = {"processes": [{"pid": 99, "used_memory_mb": 1000}]}
    me = {"processes": [{"pid": 7, "used_memory_mb": 500}]}
    ok = _samples([1980])
    assert assess(alone, me, ok, own_pid=7)["throttled"] is False  # only this process at the end
    verdict = assess(busy, me, ok, own_pid=7)
    assert verdict["throttled"] is True and "session start (pid 99)" in verdict["reasons"][0]
    both_end = {"processes": [{"pid": 7, "used_memory_mb": 500}, {"pid": 99, "used_memory_mb": 1}]}
    assert "session end (pid 99)" in assess(alone, both_end, ok, own_pid=7)["reasons"][0]
    # in a container NVML shows host PIDs: at the end one unknown PID is this process itself
    assert assess(alone, {"processes": [{"pid": 31337, "used_memory_mb": 500}]}, ok, own_pid=7)["throttled"] is False
    two = {"processes": [{"pid": 31337, "used_memory_mb": 500}, {"pid": 31338, "used_memory_mb": 9}]}
    assert assess(alone, two, ok, own_pid=7)["throttled"] is True


def test_reason_names():
    assert reason_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert reason_names(0x2000) == ["0x2000"]


def test_suite_session_record_end_to_end(install):
    from suites import environment

    install(fake_nvml(sm=[1980, 1700, 1710, 1690, 345], procs=[]))
    environment.start(on_gpu=True)
    for _ in range(3):
        assert environment.sample()["sm_clock_max_mhz"] == MAX_SM
    record = environment.finish()
    assert record is environment.finish()  # asked twice (json and save): one record
    assert record["throttled"] is True and record["sm_clock"]["samples"] == 3
    assert record["start"]["sm_clock_mhz"] == 1980 and record["end"]["sm_clock_mhz"] == 345  # idle at the end
    environment.start(on_gpu=False)
    assert environment.sample() is None and environment.finish()["throttled"] is None


def test_no_import_side_effects():
    assert "pynvml" not in vars(envrecord)
