"""A calibration window: its steps (``StepData``: measured and modelled seconds per stage), and
the screening that picks those worth fitting and names those left out with the reason.

Before ``fit`` (``calibrate/fit.py``) sees a window, every step's time is compared with the model's
own price for it (so a step that is slow because its responses were long is not an outlier): a step
more than ``OUTLIER_Z`` robust deviations and ``OUTLIER_MIN`` off the others, in any stage or in
total, is left out and named: warm-up (the run's first steps: engines capture graphs, allocators
grow), a spike after validation or a checkpoint, or a stall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

OUTLIER_Z = 4.0  # robust z-score of a step's log time ratio past which it is left out...
OUTLIER_MIN = 0.10  # ...when it is also at least 10% off (a 1.25x warm-up is; timer jitter is not)
OUTLIER_SD_FLOOR = 0.02
WARMUP_STEPS = 2  # the run's first steps that count as warm-up when slow


@dataclass
class StepData:
    step: int
    stats: dict[str, float]
    actual: dict[str, float]  # stage -> seconds, plus "step" (testing and checkpoint removed)
    extra: dict[str, float]  # testing / save_checkpoint seconds
    x: dict[str, dict[str, float]] = field(default_factory=dict)  # stage -> kind of work -> roofline s
    # stage -> kind of work -> the same work at the peak roofline (``roofline_bounds``): no
    # calibration may price it faster
    bound: dict[str, dict[str, float]] = field(default_factory=dict)
    # stage -> (kind of work, kernel family) -> roofline seconds: what the shared priors split
    families: dict[str, dict[tuple, float]] = field(default_factory=dict)
    other_s: float = 0.0  # modelled seconds outside the stages (reward scoring), not calibrated
    after_extra: bool = False  # the previous step ran validation or saved a checkpoint
    # stage -> times the stage ran in the step (each paying the stage's constant seconds): a DAPO
    # step's generation batches (``dynamic_sampling.py``); absent: once
    calls: dict[str, int] = field(default_factory=dict)


@dataclass
class LeftOut:
    step: int
    reason: str  # "warm-up", "after validation/checkpoint", "stall", "outlier"
    detail: str

    def to_dict(self) -> dict:
        return {"step": self.step, "reason": self.reason, "detail": self.detail}


def _xsum(row: StepData, stage: str) -> float:
    return float(sum(row.x.get(stage, {}).values()))


def screen(rows: list[StepData], stages: list[str], first_step: int | None = None,
           min_keep: int = 2, overlapped: tuple = ()) -> tuple[list[StepData], list[LeftOut]]:
    """The calibration steps worth fitting, and those left out with the reason. A step is judged
    by its time over the model's price for it (per stage and in total), against the median of
    that ratio over the window. ``first_step`` is the log's first step (its warm-up)."""
    if len(rows) < 3:
        return rows, []
    keys = [s for s in stages if all(_xsum(r, s) > 0 for r in rows)] + ["step"]
    worst: list[tuple[float, str, float]] = []  # per row: (z, key, ratio)
    z_all = np.zeros((len(rows), len(keys)))
    q_all = np.ones((len(rows), len(keys)))
    for j, k in enumerate(keys):
        if k == "step":
            model = np.array([sum(_xsum(r, s) for s in stages if s not in overlapped) + r.other_s for r in rows])
        else:
            model = np.array([_xsum(r, k) for r in rows])
        y = np.array([r.actual[k] for r in rows])
        if np.any(model <= 0):
            continue
        lq = np.log(y / model)
        lq -= np.median(lq)
        sd = max(1.4826 * float(np.median(np.abs(lq))), OUTLIER_SD_FLOOR)
        z_all[:, j] = np.abs(lq) / sd
        q_all[:, j] = np.exp(lq)
    for i in range(len(rows)):
        j = int(np.argmax(z_all[i]))
        worst.append((float(z_all[i, j]), keys[j], float(q_all[i, j])))
    flagged = [i for i, (z, _, q) in enumerate(worst) if z > OUTLIER_Z and abs(math.log(q)) > math.log(1 + OUTLIER_MIN)]
    keep_at_least = max(min_keep, (len(rows) + 1) // 2)
    if len(rows) - len(flagged) < keep_at_least:  # keep the least deviant of the flagged
        flagged = sorted(flagged, key=lambda i: -worst[i][0])[: len(rows) - keep_at_least]
    left = []
    first = rows[0].step if first_step is None else first_step
    for i in sorted(flagged):
        r = rows[i]
        z, key, q = worst[i]
        what = "the step" if key == "step" else key
        detail = f"{what} {q:.2f}x its usual time for its lengths"
        if q > 1 and r.step < first + WARMUP_STEPS:
            reason = "warm-up"
        elif r.extra or r.after_extra:
            reason = "after validation/checkpoint"
        elif q > 1:
            reason = "stall"
        else:
            reason = "outlier"
        left.append(LeftOut(r.step, reason, detail))
    kept = [r for i, r in enumerate(rows) if i not in set(flagged)]
    return kept, left
