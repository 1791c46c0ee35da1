"""Calibrating the step model on measured stage times, robustly.

The composition layer prices every stage as seconds per kind of work (``GROUPS``: the inference
engine's, the trainer's forward and update FLOPs and bytes, and their per-micro-batch costs). A
calibration multiplies each kind by one slowdown shared by every stage doing it, adds one fixed
cost per stage (what a stage pays per call whatever its tokens: worker dispatch, weight reloads,
cache flushes; it is what sets a 1-6 s stage), and one for the step's time outside the stages
(reward, advantages, data movement). Those are the named scalars (``Calibration.scalars``).

Robust, in three ways:

1. **Screening.** Before fitting, every calibration step's time is compared with the model's own
   prediction for it (so a step that is slow because its responses were long is not an outlier):
   a step more than ``OUTLIER_Z`` robust deviations and ``OUTLIER_MIN`` off the others, in any
   stage or in total, is left out and named: warm-up (the run's first steps: engines capture
   graphs, allocators grow), a spike after validation or a checkpoint, or a stall.
2. **Relative errors.** Residuals are relative (what the accuracy measures), scaled by each
   stage's step-to-step noise, under a soft-L1 loss, so one bad step cannot pull the fit.
3. **Priors** where ten near-identical steps cannot separate the scalars: like kinds have alike
   slowdowns (``TIE_SD``), every slowdown stays within reach of the overall ratio
   (``SLOWDOWN_SD``), and a stage's fixed cost is a share of its time (``FIXED_PRIOR_SHARE``)
   unless the data says otherwise. Slowdowns are fitted in log space (always positive); the
   fixed costs are bounded to [0, 10x the stage's mean]; non-finite or non-positive times never
   reach the fit (``validate`` leaves such steps out and says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..compose.stages import GROUPS
from ..errors import PolytraceError

TIE_SD = 0.5  # prior sd of the log ratio of two slowdowns of like kinds
# like kinds: the trainer's forward and update passes run the same kernels, and pay the same kind
# of per-micro-batch costs
TIED = (("forward", "train"), ("forward_overhead", "train_overhead"))
# A stage's fixed seconds (what it pays per call whatever its tokens) have a prior of
# FIXED_PRIOR_SHARE of the stage's mean time, sd FIXED_SD of it; ten calibration steps of
# near-constant lengths cannot split a stage into fixed and per-token parts, and the prior decides
# what happens when the lengths later change. Evidence from the shared logs: regressing stage time
# on tokens over the Qwen2-7B run (response mean 200 to 669) gives fixed shares of 43% (log-prob)
# and 51% (update) at the mean, 32% for generation; the two Qwen2.5-0.5B runs (same model, caps
# 512 and 256) differ by 1-20% in trainer stages where tokens differ 2x. The roofline already holds
# per-micro-batch and per-iteration costs (fixed within a run), so the extra prior is half the
# trainer stages and 15% of generation (weight resharding, cache wake-up: 4.4 s of the 7B run's
# 64 s generation is ``reshard``).
FIXED_PRIOR_SHARE = 0.5
FIXED_PRIOR_SHARE_GEN = 0.15
FIXED_SD = 0.5
# Calibrating for another run (``validate --calibrate-on``), a trainer stage's constant seconds are
# taken as paid per micro-batch, not per call: the prior of its fixed per-call cost is 0, sd 10% of
# its time, and what the window's lengths leave unexplained goes to the per-micro-batch slowdowns.
# Within one run the split does not matter (the micro-batch count is constant unless batch sizes
# are dynamic), across runs it decides everything. Evidence: a Qwen2.5-0.5B GRPO run and a PPO run
# of the same model on the same 8 A100s (dingxianzhong/play-verl logs/): 4 -> 64 micro-batches per
# GPU per step took the update from 1.05 s to 13.1 s (per call ~0.25 s, per micro-batch ~0.2 s), the
# log-prob pass from 0.25 s to 2.2 s; with the per-call prior the GRPO run's constant half stayed
# per call and the PPO step was predicted at 63.9% (the other way 12.8%), with this prior at 91.6%
# (81.6%). The two shared Qwen2.5-0.5B runs (same micro-batch counts, padded lengths 2x apart,
# nearly the same update times) agree that the constant part is not per token, but their hold-out
# across runs falls 75.9 -> 71.2% (63.8 -> 59.0% the other way): their windows still give the
# roofline's per-token part too much. Larger models pay real per-call costs (the published
# Qwen2.5-7B runs' update gains 15% from 64 to 128 GPUs), so ``polytrace calibrate``, whose file
# prices other GPU counts and modes, keeps the per-call prior.
FIXED_PRIOR_SHARE_TRANSFER = 0.0
FIXED_SD_TRANSFER = 0.1
# Each slowdown's log is drawn towards the overall ratio (all stages' time over all modelled
# time) with this sd: weak (a factor 12 is one sd), but it keeps a kind the calibration steps
# barely see from collapsing to zero or running off (the Qwen2-7B run calibrated on steps 181-190
# drove the per-micro-batch slowdowns to 0 without it, and log-prob fell from 98% to 76%).
SLOWDOWN_SD = 2.5
NOISE_FLOOR = 0.01  # relative step-to-step noise never taken below 1%
NOISE_CAP = 0.30
OUTLIER_Z = 4.0  # robust z-score of a step's log time ratio past which it is left out...
OUTLIER_MIN = 0.10  # ...when it is also at least 10% off (a 1.25x warm-up is; timer jitter is not)
OUTLIER_SD_FLOOR = 0.02
WARMUP_STEPS = 2  # the run's first steps that count as warm-up when slow
SOFT_L1_SCALE = 2.0  # in noise units: residuals past 2 sd weigh linearly, not quadratically
# A stage a calibration did not see takes the fixed cost of the stage doing the same kind of pass.
FIXED_FALLBACK = {"values": ("old_log_prob", "ref"), "ref": ("old_log_prob",), "old_log_prob": ("ref",),
                  "update_critic": ("update_actor",), "update_actor": ("update_critic",)}


@dataclass
class StepData:
    step: int
    stats: dict[str, float]
    actual: dict[str, float]  # stage -> seconds, plus "step" (testing and checkpoint removed)
    extra: dict[str, float]  # testing / save_checkpoint seconds
    x: dict[str, dict[str, float]] = field(default_factory=dict)  # stage -> kind of work -> roofline s
    other_s: float = 0.0  # modelled seconds outside the stages (reward scoring), not calibrated
    after_extra: bool = False  # the previous step ran validation or saved a checkpoint


@dataclass
class LeftOut:
    step: int
    reason: str  # "warm-up", "after validation/checkpoint", "stall", "outlier"
    detail: str

    def to_dict(self) -> dict:
        return {"step": self.step, "reason": self.reason, "detail": self.detail}


@dataclass
class Calibration:
    slowdown: dict[str, float]  # kind of work -> real seconds per modelled second
    overhead_s: dict[str, float]  # stage -> fixed seconds per step; "other": the step outside the stages
    steps: list[int]
    source: str
    left_out: list[LeftOut] = field(default_factory=list)
    fit_error_pct: dict[str, float] = field(default_factory=dict)  # in-sample MAPE per stage
    # stages that run beside the step's critical path (generation in one-step-off and fully
    # async runs): priced, but not part of the step's time
    overlapped: tuple = ()

    def scalars(self) -> dict[str, float]:
        out = {f"{g}_slowdown": v for g, v in self.slowdown.items()}
        out.update({f"{s}_overhead_s": v for s, v in self.overhead_s.items()})
        return out

    def stage_overhead(self, stage: str) -> float:
        if stage in self.overhead_s:
            return self.overhead_s[stage]
        for other in FIXED_FALLBACK.get(stage, ()):
            if other in self.overhead_s:
                return self.overhead_s[other]
        return 0.0

    def predict(self, row: StepData, stages: list[str], overlapped: tuple | None = None) -> dict[str, float]:
        overlapped = self.overlapped if overlapped is None else overlapped
        pred = {}
        for s in stages:
            work = sum(self.slowdown.get(g, 1.0) * v for g, v in row.x.get(s, {}).items())
            pred[s] = work + self.stage_overhead(s)
        on_path = sum(v for s, v in pred.items() if s not in overlapped)
        pred["step"] = on_path + row.other_s + self.overhead_s.get("other", 0.0)
        return pred


def _xsum(row: StepData, stage: str) -> float:
    return float(sum(row.x.get(stage, {}).values()))


def noise_rel(y: np.ndarray) -> float:
    """Relative step-to-step noise: MAD of first differences of log time (insensitive to slow
    trends), floored at 1%."""
    y = np.asarray(y, dtype=np.float64)
    if len(y) < 3:
        return NOISE_FLOOR
    d = np.diff(np.log(y))
    mad = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)
    return float(min(max(mad, NOISE_FLOOR), NOISE_CAP))


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


def fit(rows: list[StepData], stages: list[str], source: str = "", left_out: list[LeftOut] | None = None,
        noise: dict[str, float] | None = None, overlapped: tuple = (), transfer: bool = False) -> Calibration:
    """Slowdowns per kind of work, a fixed cost per stage and the step's time outside the stages,
    fitted on relative errors with a soft-L1 loss (module docstring). ``noise`` overrides the
    per-stage relative noise (``--stage-times`` averages are taken as exact to 1%); ``transfer``:
    the calibration is for another run (``FIXED_PRIOR_SHARE_TRANSFER``)."""
    from scipy.optimize import least_squares

    if not rows:
        raise PolytraceError(f"{source or 'calibration'}: no steps left to calibrate on")
    for r in rows:
        for s in stages + ["step"]:
            v = r.actual.get(s)
            if v is None or not math.isfinite(v) or v <= 0:
                raise PolytraceError(f"{source}: step {r.step}: {s} time {v!r} is not a positive number")
    groups = [g for g in GROUPS if any(r.x.get(s, {}).get(g, 0.0) > 0 for r in rows for s in stages)]
    gi = {g: i for i, g in enumerate(groups)}
    n_g = len(groups)
    X = {s: np.array([[r.x.get(s, {}).get(g, 0.0) for g in groups] for r in rows], dtype=np.float64)
         for s in stages}
    Y = {s: np.array([r.actual[s] for r in rows], dtype=np.float64) for s in stages}
    # seconds of kinds the calibration does not scale (multi-turn tool waits): taken as priced
    offset = {s: np.array([sum(v for g, v in r.x.get(s, {}).items() if g not in GROUPS) for r in rows]) for s in stages}
    for s in stages:
        if not np.all(np.isfinite(X[s])) or np.any(X[s] < 0):
            raise PolytraceError(f"{source}: the model priced {s} at a non-finite or negative time; "
                                 "check the configuration read from the log")
    sd = {s: (noise or {}).get(s, noise_rel(Y[s])) for s in stages}
    ybar = {s: float(Y[s].mean()) for s in stages}
    tied = [(a, b) for a, b in TIED if a in gi and b in gi]
    yb = np.array([ybar[s] for s in stages])
    trainer_share, trainer_sd = (FIXED_PRIOR_SHARE_TRANSFER, FIXED_SD_TRANSFER) if transfer else (FIXED_PRIOR_SHARE,
                                                                                                  FIXED_SD)
    prior_c = np.array([(FIXED_PRIOR_SHARE_GEN if s == "gen" else trainer_share) * ybar[s] for s in stages])
    prior_sd = np.array([FIXED_SD if s == "gen" else trainer_sd for s in stages])

    total_y = sum(float(Y[s].sum()) for s in stages)
    total_x = sum(float(X[s].sum()) for s in stages)
    u0 = math.log(total_y / total_x) if total_x > 0 else 0.0
    u0 = min(max(u0, -20.0), 20.0)

    def unpack(theta):
        return np.exp(theta[:n_g]), theta[n_g:]

    def residuals(theta):
        slow, fixed = unpack(theta)
        out = []
        for j, s in enumerate(stages):
            pred = X[s] @ slow + fixed[j] + offset[s]
            out.append((pred - Y[s]) / Y[s] / sd[s])
        for a, b in tied:
            out.append(np.array([(theta[gi[a]] - theta[gi[b]]) / TIE_SD]))
        out.append((fixed - prior_c) / (prior_sd * yb))
        out.append((theta[:n_g] - u0) / SLOWDOWN_SD)
        return np.concatenate(out)

    theta0 = np.concatenate([np.full(n_g, u0), [1e-3 * ybar[s] for s in stages]])
    lower = np.concatenate([np.full(n_g, -50.0), np.zeros(len(stages))])
    upper = np.concatenate([np.full(n_g, 50.0), [10.0 * ybar[s] for s in stages]])
    scale = np.concatenate([np.ones(n_g), [max(ybar[s], 1e-6) for s in stages]])
    try:
        res = least_squares(residuals, theta0, bounds=(lower, upper), loss="soft_l1", f_scale=SOFT_L1_SCALE,
                            x_scale=scale)
    except (ValueError, np.linalg.LinAlgError) as exc:  # pragma: no cover - inputs are checked above
        raise PolytraceError(f"{source}: calibration failed ({exc})") from None
    slow, fixed = unpack(res.x)
    if not (np.all(np.isfinite(slow)) and np.all(np.isfinite(fixed))):
        raise PolytraceError(f"{source}: calibration gave non-finite scalars")
    cal = Calibration({g: float(slow[gi[g]]) for g in groups},
                      {s: float(fixed[j]) for j, s in enumerate(stages)},
                      [r.step for r in rows], source, list(left_out or []), overlapped=tuple(overlapped))
    # the step's time outside the stages: what the rows show past the stages on its critical path
    # and the modelled reward scoring (a median: robust to a slow reward batch)
    outside = [r.actual["step"] - sum(r.actual[s] for s in stages if s not in overlapped) - r.other_s
               for r in rows]
    cal.overhead_s["other"] = float(np.median(outside))
    preds = [cal.predict(r, stages) for r in rows]
    for k in stages + ["step"]:
        a = np.array([r.actual[k] for r in rows])
        p = np.array([pr[k] for pr in preds])
        cal.fit_error_pct[k] = float(100.0 * np.mean(np.abs(p - a) / a))
    return cal


def calibrate(rows: list[StepData], stages: list[str], source: str = "", first_step: int | None = None,
              screen_outliers: bool = True, overlapped: tuple = (), transfer: bool = False) -> Calibration:
    """Screen the calibration steps (``screen``), then ``fit`` the rest (``transfer``: for another
    run, ``FIXED_PRIOR_SHARE_TRANSFER``)."""
    left: list[LeftOut] = []
    if screen_outliers:
        rows, left = screen(rows, stages, first_step, overlapped=overlapped)
    return fit(rows, stages, source, left, overlapped=overlapped, transfer=transfer)
