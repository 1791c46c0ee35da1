"""The range a calibrated estimate carries: what its calibration window could not identify.

A calibration splits each stage's time into constant seconds and work that scales with the
configuration (``fit``). Where the window's lengths barely varied, that split is a prior's choice:
``Calibration.split[stage]["constant_range_s"]`` holds the constants the window allows (two
standard errors of the regression's intercept either side of the fit, within [0, what the
shortest step leaves at the roofline bound]). For another configuration, each constant ``c'`` in
that range, with the stage's work rescaled so the window's mean time still holds
(``(mean - c') / (mean - c)``), gives another estimate; the range is the lowest and highest over
every stage's ends (a sum of worst cases: the stages' splits are unknown independently).

Nor can one configuration tell which kind of work the run's deviation from the priors sits in: a
generation 30% over the priors' prices may be slower GEMMs (which halve with twice the engines),
per-iteration host work (which does not) or per-sequence host work. The calibration spreads it
over the stage's families in proportion (``split[stage]["families_s"]`` against the priors'
``prior_families_s``); for another configuration each family ``g`` taking all of it, scaled as
``g`` scales from the calibrated configuration to this one, gives another estimate
(``family_ends``), and those widen the stage's range. On the calibrated configuration itself every
family scales by 1 and the range does not move.
"""

from __future__ import annotations

import math

from .fit import FIXED_FALLBACK, PRIOR_LOG_SD

# A family may take the whole deviation only if that leaves it within two of the calibration's
# prior standard deviations of its priced seconds (e^-2 to e^2: 0.14x-7.4x): a family of 0.1% of
# a stage absorbing a 30% deviation would run 300x off its price, no hypothesis worth a range.
FAMILY_DEVIATION_BOUNDS = (math.exp(-2 * PRIOR_LOG_SD), math.exp(2 * PRIOR_LOG_SD))


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


def family_ends(target: dict, info: dict) -> list[float]:
    """The stage's work (no constant seconds) for another configuration under each hypothesis
    "the run's deviation from the priors is all in family g": ``target`` maps family -> this
    configuration's calibrated seconds; ``info`` the stage's ``split`` entry. A family absent from
    either side, or one that cannot carry the deviation (a saving larger than its priced seconds),
    gives no end, nor one the deviation would move past ``FAMILY_DEVIATION_BOUNDS``."""
    cal, base = info.get("families_s") or {}, info.get("prior_families_s") or {}
    shared = [f for f in cal if cal[f] > 0 and base.get(f, 0.0) > 0 and f in target]
    if not shared:
        return []
    ratio = {f: float(target[f]) / (cal[f]) for f in shared}
    deviation = sum(cal[f] for f in shared) - sum(base[f] for f in shared)
    at_priors = sum(base[f] * ratio[f] for f in shared)  # the stage without the deviation, scaled
    lo, hi = FAMILY_DEVIATION_BOUNDS
    return [at_priors + deviation * ratio[g] for g in shared if lo <= (base[g] + deviation) / base[g] <= hi]


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
        kernels = summary.get("kernels", {}).get(s, {})
        const = float(kernels.get("calibration", {}).get("s", 0.0))
        lo, hi = stage_range(float(total), const, info)
        target = {f: float(v.get("s", 0.0)) for f, v in kernels.items() if isinstance(v, dict)}
        work = sum(target.get(f, 0.0) for f in info.get("families_s") or {})
        for end in family_ends(target, info):  # the stage's other families and constant as estimated
            lo, hi = min(lo, total - work + end), max(hi, total - work + end)
        stages[s] = [lo, hi]
        if not info.get("identified", True):
            unidentified.append(s)
        if s not in overlapped:
            step_lo += lo - total
            step_hi += hi - total
    return {"step_s": [step_lo, step_hi], "stages_s": stages, "unidentified": unidentified}
