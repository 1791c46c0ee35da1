"""The range a calibrated estimate carries: what its calibration window could not identify.

A calibration splits each stage's time into constant seconds and work that scales with the
configuration (``fit``). Where the window's lengths barely varied, that split is a prior's choice:
``Calibration.split[stage]["constant_range_s"]`` holds the constants the window allows (two
standard errors of the regression's intercept either side of the fit, within [0, what the
shortest step leaves at the roofline bound]). For another configuration, each constant ``c'`` in
that range, with the stage's work rescaled so the window's mean time still holds
(``(mean - c') / (mean - c)``), gives another estimate; the range is the lowest and highest over
every stage's ends (a sum of worst cases: the stages' splits are unknown independently).
"""

from __future__ import annotations

from .fit import FIXED_FALLBACK


def _split_for(split: dict, stage: str) -> dict | None:
    if stage in split:
        return split[stage]
    for other in FIXED_FALLBACK.get(stage, ()):
        if other in split:
            return split[other]
    return None


def stage_range(total_s: float, constant_s: float, info: dict) -> tuple[float, float]:
    """Lowest and highest seconds of a stage whose estimate is ``total_s`` with ``constant_s`` of
    constant time, over the constants its calibration window allowed (``info``)."""
    mean, c = float(info["mean_actual_s"]), float(info["constant_s"])
    work = max(total_s - constant_s, 0.0)
    if mean - c <= 0:
        return total_s, total_s
    ends = [(mean - alt) / (mean - c) * work + alt for alt in info["constant_range_s"]]
    return min(ends + [total_s]), max(ends + [total_s])


def estimate_range(summary: dict, split: dict, overlapped=()) -> dict:
    """``{"step_s": [lo, hi], "stages_s": {stage: [lo, hi]}, "unidentified": [stages]}`` for an
    estimate's summary (``mean_stages_s``, ``kernels``) under a calibration's ``split``."""
    stages = {}
    step_lo = step_hi = float(summary["mean_step_s"])
    unidentified = []
    for s, total in summary["mean_stages_s"].items():
        info = _split_for(split, s)
        if total <= 0 or info is None:
            continue
        const = float(summary.get("kernels", {}).get(s, {}).get("calibration", {}).get("s", 0.0))
        lo, hi = stage_range(float(total), const, info)
        stages[s] = [lo, hi]
        if not info.get("identified", True):
            unidentified.append(s)
        if s not in overlapped:
            step_lo += lo - total
            step_hi += hi - total
    return {"step_s": [step_lo, step_hi], "stages_s": stages, "unidentified": unidentified}
