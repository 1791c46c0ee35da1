"""The physical floor under a benchmark's time, and the time the roofline predicts for it.

**Roofline floor** (``floor_s``): no implementation can finish a case faster than its own bound on
the GPU it ran on, ``max(FLOPs / peak, bytes / bandwidth)`` at the datasheet peaks
(``polytrace.run.hardware``: dense bf16 tensor-core FLOP/s, HBM bytes/s). The counts are the ones the
suites record for the case (``extra_info``):

- ``flops`` counts against the peak only for a compute-roofline case (``roofline`` "bf16"): a
  memory-bound kernel's elementwise FLOPs are information, not tensor-core work. ``floor_flops``,
  when given, is the minimum any implementation must execute where the conventional count is
  larger (attention's backward is counted as 2.5x its forward, 5 matmuls; 4 are unavoidable).
- ``bytes_moved`` counts against the bandwidth only when the inputs were cold (``l2`` "flushed"):
  with warm inputs (``l2`` "warm") the bytes may come from L2, faster than HBM. ``floor_bytes``,
  when given, is the minimum traffic where ``bytes_moved`` counts an implementation's own buffers.

A median below the floor is physically impossible: the timing missed work (cached results, work
deferred past the end event, work on another stream) or the counts are wrong. The suites fail such
a case, and ``results show``, ``results store`` and ``gate`` refuse a file holding one, naming it.

**Prediction** (``predicted_s``): the roofline at the *attainable* ceilings (a measured large-GEMM
rate and device copy rate where ``polytrace.run.hardware`` has them, else the datasheet), raised to an
issue-bound estimate from the compiled code when a static report gives one (``static``). A measured
median more than ``PREDICTION_FACTOR`` (2x) off its prediction either way is flagged for a look,
never failed: the first GPU run then reads as predicted against measured, case by case.
"""

from __future__ import annotations

import math

PREDICTION_FACTOR = 2.0
COLD_L2 = ("flushed",)


def _positive(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 else 0.0


def floor_s(gpu, *, flops: float, bytes_moved: float, roofline: str, l2: str | None,
            floor_flops: float | None = None, floor_bytes: float | None = None) -> tuple[float, str]:
    """(seconds, what bounds them) of a case on ``gpu`` (a ``hardware.GPU``); (0.0, reason) when no
    floor applies."""
    if gpu is None:
        return 0.0, "no GPU preset"
    compute = 0.0
    if roofline == "bf16":
        f = _positive(floor_flops) or _positive(flops)
        compute = f / gpu.ceiling("bf16") if f else 0.0
    memory = 0.0
    if l2 in COLD_L2:
        b = _positive(floor_bytes) or _positive(bytes_moved)
        memory = b / gpu.ceiling("hbm") if b else 0.0
    if compute <= 0 and memory <= 0:
        return 0.0, "no bound (no counted work on a cold-input roofline)"
    if compute >= memory:
        return compute, f"FLOPs / {gpu.bf16_tflops:g} TFLOP/s (datasheet)"
    return memory, f"bytes / {gpu.hbm_tbps:g} TB/s (datasheet)"


def attainable(gpu, kind: str) -> float:
    """The attainable ceiling: the measured rate where known, else the datasheet peak."""
    if kind == "bf16":
        return (gpu.measured_bf16_tflops or gpu.bf16_tflops) * 1e12
    return (gpu.measured_hbm_tbps or gpu.hbm_tbps) * 1e12


def predicted_s(gpu, *, flops: float, bytes_moved: float, roofline: str, static_s: float | None = None,
                static_note: str = "") -> tuple[float, str]:
    """(seconds, basis) the roofline predicts at attainable ceilings (both terms, warm or cold),
    raised to ``static_s`` (an issue-bound estimate read from the compiled code) when larger."""
    if gpu is None:
        return 0.0, "no GPU preset"
    compute = _positive(flops) / attainable(gpu, "bf16") if roofline == "bf16" else 0.0
    memory = _positive(bytes_moved) / attainable(gpu, "hbm")
    best, basis = (compute, "roofline: FLOPs at the attainable bf16 rate") if compute >= memory else \
        (memory, "roofline: bytes at the attainable copy bandwidth")
    static = _positive(static_s)
    if static > best:
        best, basis = static, "static report: " + (static_note or "issue-bound estimate from the compiled code")
    return best, basis


def prediction_flag(median_s: float, predicted: float, factor: float = PREDICTION_FACTOR) -> str:
    """"" when ``median_s`` is within ``factor`` of ``predicted`` (either way), else a short note."""
    if not predicted or not median_s:
        return ""
    ratio = median_s / predicted
    if ratio > factor:
        return f"look: {ratio:.2f}x slower than predicted"
    if ratio < 1.0 / factor:
        return f"look: {1 / ratio:.2f}x faster than predicted"
    return ""


def below_floor_message(bench_id: str, median_s: float, floor: float, basis: str) -> str:
    return (f"{bench_id}: median {median_s:.4g} s is below its roofline floor {floor:.4g} s ({basis}): "
            "physically impossible; the timing missed work (cached results, deferred or off-stream work) "
            "or the case's FLOP/byte counts are wrong")
