"""Calibrating the step model on measured stage times, robustly.

The composition layer prices every stage as seconds per kind of work (``GROUPS``: the inference
engine's, the trainer's forward and update FLOPs and bytes, and their per-micro-batch costs). A
calibration multiplies each kind by one slowdown shared by every stage doing it (the priors' times
this run's deviation from them), adds one fixed
cost per stage (what a stage pays per call whatever its tokens: worker dispatch, weight reloads,
cache flushes; it is what sets a 1-6 s stage), and one for the step's time outside the stages
(reward, advantages, data movement). Those are the named scalars (``Calibration.scalars``).

Robust, in three ways:

1. **Screening** (``window.py``). Before fitting, every calibration step's time is compared with the model's own
   prediction for it (so a step that is slow because its responses were long is not an outlier):
   a step more than ``OUTLIER_Z`` robust deviations and ``OUTLIER_MIN`` off the others, in any
   stage or in total, is left out and named: warm-up (the run's first steps: engines capture
   graphs, allocators grow), a spike after validation or a checkpoint, or a stall.
2. **Relative errors.** Residuals are relative (what the accuracy measures), scaled by each
   stage's step-to-step noise, under a soft-L1 loss, so one bad step cannot pull the fit.
3. **Priors and bounds.** The model prices each kind of work at the shared physical priors
   (``polytrace/data/priors.json``: a slowdown per kind of work and engine setting, per kernel
   family where they price one apart, fitted on every public log the project reads); a run's
   calibration is its *deviation* from them, one factor per kind, drawn toward 1 with a log-normal
   penalty (sd ``PRIOR_LOG_SD``; like kinds alike, ``TIE_SD``). No deviation may price a kind
   faster than its peak roofline (``roofline_bounds``: efficiency <= 1), and no stage's constant
   seconds may exceed what its shortest window step leaves once its work runs at that bound. A
   stage's fixed cost has a prior share of its time (``FIXED_PRIOR_SHARE``). When the window's
   modelled times barely vary (``_identified``), constant and per-token cost cannot be told apart:
   the priors decide the kinds of work seen only there (sd ``PRIOR_DECIDES_SD``), the constant
   takes the rest, a note says so, and ``Calibration.split`` carries the range of constants the
   window allows (``polytrace estimate --calibration`` prints the range it makes). Deviations are
   fitted in log space; non-finite or non-positive times never reach the fit (``validate`` leaves
   such steps out and says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import PolytraceError
from ..stepmodel.efficiency import SEPARATE_FAMILIES, part_slowdown, roofline_share
from ..stepmodel.stages import GROUPS
from .window import LeftOut, StepData, screen

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
# GPU per step took the update from 1.05 s to 13.1 s (per call ~0.25 s, per micro-batch ~0.2 s);
# this prior predicts the PPO step at 91.6%, the per-call prior at 63.9% (docs/step-model.md,
# "Calibration history"). Larger models pay real per-call costs (the published Qwen2.5-7B runs'
# update gains 15% from 64 to 128 GPUs), so ``polytrace calibrate``, whose file prices other GPU
# counts and modes, keeps the per-call prior.
FIXED_PRIOR_SHARE_TRANSFER = 0.0
FIXED_SD_TRANSFER = 0.1
# Generation's constant for another run alike (issue 36 item 6) is held at 0 s: its per-call work
# (weight resharding, cache wake-up) is priced as work that scales with the model's bytes over its
# GPUs (the ``offload`` family) and the priors' own generation constant is 0 s, so a constant that
# one window's flat lengths left in the stage would be carried to another model size as if
# size-free. History over the ladder's 40 rung pairs (tests/calibrate/test_ladder_calibration.py,
# CPU): the same-run 15% share (sd 50%) gave a 3B window's 26.1 s of its 57.3 s generation to the
# constant and predicted the 8-GPU 7B's 26.3 s at 44.6 s (step 1.43x, zero-shot 1.05x); a prior of
# 0 at sd 10% (the trainer's) took the median error 12.1% -> 8.6%, worst 1.68x -> 1.44x, but still
# let the constant take what a flat window's lengths could not place (the GSM8K 32B window left
# 16.3 s of generation in it, one prior sd, which put the 2-GPU 0.5B rung's 47 s generation at
# 1.46x; zero-shot 1.25x, 1.37x held at 0 s). Held at 0 s, the window's generation time is all
# per-token deviation, scaled by the target's own modelled work; the range still carries the
# constants the window allows (``split``): the range holds the truth in 31 -> 34 of 40, median
# error 8.3% -> 8.0%, worst 1.45x -> 1.29x, median hi/lo 1.52x unchanged.
# The run's deviation from the shared priors (``polytrace/data/priors.json``), per kind of work:
# its log is drawn toward the run's overall ratio to the priors (all stages' time over all their
# priced time: another GPU, driver or engine version moves every kind alike; ``CENTRE_ON_RUN``)
# with sd ``PRIOR_LOG_SD``: a factor e (2.7x) at one sd, the spread of per-log slowdowns around the
# corpus fit (0.5x-6x over the shared logs). Ten steps at 1-3% noise outweigh it wherever they see
# the kind of work vary. Where they cannot (``_identified``) the sd is ``PRIOR_DECIDES_SD``: on the
# shared logs 0.5 keeps the Qwen2-7B mid-run hold-outs (steps 31-40 and 101-110) at update 96.8 /
# 98.7% and step 94.5 / 90.1% and the real GRPO -> PPO pair at 95.1%, the best balance of the sds
# tried (docs/step-model.md, "Calibration history"). A stage whose modelled time does not move at all
# (``FLAT_SPREAD``: padded batches, fixed lengths) also drops its fixed-share prior
# (``UNSPLIT_CONSTANT_SD``), so the priors alone decide its split.
PRIOR_LOG_SD = 1.0
CENTRE_ON_RUN = True
PRIOR_DECIDES_SD = 0.5
FLAT_SPREAD = 1e-3  # modelled times within 0.1% over the window: flat
UNSPLIT_CONSTANT_SD = 100.0
MIN_SLOWDOWN = 0.01  # kinds of work with no roofline part (pure host time): at most 100x faster
MAX_DEVIATION = 1000.0  # past 1000x the priors the configuration, not the run, is wrong
# A window identifies a stage's constant/per-token split when its modelled times spread (sd/mean)
# at least 3x the stage's step-to-step noise and at least 3%: below that, the regression of time
# on modelled time has an intercept error past a third of the stage (se = noise / (sqrt(n) spread)).
IDENT_NOISE_RATIO = 3.0
IDENT_MIN_SPREAD = 0.03
NOISE_FLOOR = 0.01  # relative step-to-step noise never taken below 1%
NOISE_CAP = 0.30
SOFT_L1_SCALE = 2.0  # in noise units: residuals past 2 sd weigh linearly, not quadratically
# A stage a calibration did not see takes the fixed cost of the stage doing the same kind of pass.
FIXED_FALLBACK = {"values": ("old_log_prob", "ref"), "ref": ("old_log_prob",), "old_log_prob": ("ref",),
                  "update_critic": ("update_actor",), "update_actor": ("update_critic",)}


@dataclass
class Calibration:
    """A run's calibration as a bounded deviation from the shared priors: each kind of work's
    work is priced at the priors' slowdowns (per kernel family where they price one apart,
    ``compose.efficiency.part_slowdown``) times this run's ``deviation`` of that kind; ``slowdown``
    is the result per kind, at its main work's family (what the scalars and the files hold)."""

    slowdown: dict[str, float]  # kind of work -> real seconds per modelled second
    overhead_s: dict[str, float]  # stage -> fixed seconds per step; "other": the step outside the stages
    steps: list[int]
    source: str
    left_out: list[LeftOut] = field(default_factory=list)
    fit_error_pct: dict[str, float] = field(default_factory=dict)  # in-sample MAPE per stage
    # stages that run beside the step's critical path (generation in one-step-off and fully
    # async runs): priced, but not part of the step's time
    overlapped: tuple = ()
    notes: list[str] = field(default_factory=list)
    # kind of work -> this run's factor over the priors (1: the priors hold), and the smallest the
    # hardware allows on the window (its peak roofline)
    deviation: dict[str, float] = field(default_factory=dict)
    min_deviation: dict[str, float] = field(default_factory=dict)
    prior: dict[str, float] = field(default_factory=dict)  # the priors' scalars (``prior_scalars``)
    run_ratio: float = 1.0  # the run's overall time over the priors' prices: the deviations' centre
    # stage -> what the window could identify: modelled and actual mean seconds, whether the
    # constant/per-token split was identified, and the range of constant seconds it allows
    split: dict[str, dict] = field(default_factory=dict)

    def scalars(self) -> dict[str, float]:
        out = {f"{g}_slowdown": v for g, v in self.slowdown.items()}
        for g, d in self.deviation.items():  # the families the priors price apart, this run's factor on them
            for f in SEPARATE_FAMILIES:
                key = f"{g}_{f}_slowdown"
                if key in self.prior:
                    out[key] = d * self.prior[key]
        out.update({f"{s}_overhead_s": v for s, v in self.overhead_s.items()})
        return out

    def stage_overhead(self, stage: str) -> float:
        if stage in self.overhead_s:
            return self.overhead_s[stage]
        for other in FIXED_FALLBACK.get(stage, ()):
            if other in self.overhead_s:
                return self.overhead_s[other]
        return 0.0

    def work(self, row: StepData, stage: str) -> float:
        """The stage's calibrated work on ``row`` (no constant seconds)."""
        if self.deviation and row.families.get(stage):
            sc = self.scalars()
            return float(sum(part_slowdown(sc, g, f) * v for (g, f), v in row.families[stage].items()))
        return float(sum(self.slowdown.get(g, 1.0) * v for g, v in row.x.get(stage, {}).items()))

    def predict(self, row: StepData, stages: list[str], overlapped: tuple | None = None) -> dict[str, float]:
        overlapped = self.overlapped if overlapped is None else overlapped
        pred = {s: self.work(row, s) + self.stage_overhead(s) * row.calls.get(s, 1) for s in stages}
        on_path = sum(v for s, v in pred.items() if s not in overlapped)
        pred["step"] = on_path + row.other_s + self.overhead_s.get("other", 0.0)
        return pred


def prior_work(rows: list[StepData], stages: list[str], groups: list[str], prior: dict) -> dict[str, np.ndarray]:
    """Stage -> rows x kinds of work: the modelled seconds at the priors' slowdowns (per family
    where the rows carry families, else per kind)."""
    out = {}
    for s in stages:
        m = np.zeros((len(rows), len(groups)))
        for i, r in enumerate(rows):
            fam = r.families.get(s)
            for j, g in enumerate(groups):
                if fam:
                    m[i, j] = sum(part_slowdown(prior, gg, f) * v for (gg, f), v in fam.items() if gg == g)
                else:
                    m[i, j] = prior.get(f"{g}_slowdown", 1.0) * r.x.get(s, {}).get(g, 0.0)
        out[s] = m
    return out


def noise_rel(y: np.ndarray) -> float:
    """Relative step-to-step noise: MAD of first differences of log time (insensitive to slow
    trends), floored at 1%."""
    y = np.asarray(y, dtype=np.float64)
    if len(y) < 3:
        return NOISE_FLOOR
    d = np.diff(np.log(y))
    mad = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)
    return float(min(max(mad, NOISE_FLOOR), NOISE_CAP))


def roofline_bounds(parts) -> dict[str, dict[str, float]]:
    """Stage -> kind of work -> seconds of the parts' work at the peak roofline (each part's
    price times ``compose.efficiency.roofline_share`` of its family): the physical bound."""
    out: dict[str, dict[str, float]] = {}
    for p in parts:
        by = out.setdefault(p.stage, {})
        by[p.group] = by.get(p.group, 0.0) + p.seconds * roofline_share(p.family)
    return out


def family_seconds(rows: list[StepData], stage: str, scalars: dict, prior: dict) -> dict:
    """The window's mean seconds of ``stage`` per kernel family, calibrated (``families_s``) and at
    the priors' prices (``prior_families_s``): how the calibration divided the stage's work among
    families, which ``ranges`` needs to tell what one configuration could not identify. Empty for
    rows without families."""
    if not prior or not rows:
        return {}
    cal: dict[str, float] = {}
    base: dict[str, float] = {}
    for r in rows:
        for (g, f), v in (r.families.get(stage) or {}).items():
            cal[f] = cal.get(f, 0.0) + part_slowdown(scalars, g, f) * v / len(rows)
            base[f] = base.get(f, 0.0) + part_slowdown(prior, g, f) * v / len(rows)
    return {"families_s": cal, "prior_families_s": base} if cal else {}


def by_family(parts) -> dict[str, dict[tuple, float]]:
    """Stage -> (kind of work, kernel family) -> seconds."""
    out: dict[str, dict[tuple, float]] = {}
    for p in parts:
        by = out.setdefault(p.stage, {})
        by[(p.group, p.family)] = by.get((p.group, p.family), 0.0) + p.seconds
    return out


def _identified(X: np.ndarray, sd: float) -> tuple[bool, float]:
    """Whether a window's modelled stage times vary enough to split constant from per-token cost:
    their spread (sd / mean) must be ``IDENT_NOISE_RATIO`` times the stage's noise and at least
    ``IDENT_MIN_SPREAD``."""
    tot = X.sum(axis=1)
    cv = float(tot.std() / tot.mean()) if tot.mean() > 0 else 0.0
    return cv >= max(IDENT_NOISE_RATIO * sd, IDENT_MIN_SPREAD), cv


@dataclass(frozen=True)
class FitOptions:
    """What a fit assumes beyond its rows (``fit``): ``noise`` overrides the per-stage relative
    noise (``--stage-times`` averages are taken as exact to 1%); ``overlapped``: stages off the
    step's critical path (async generation); ``transfer``: the calibration is for another run
    (``FIXED_PRIOR_SHARE_TRANSFER``); ``prior``: the priors' scalars
    (``compose.efficiency.prior_scalars``; None: the shipped priors, eager engine)."""

    noise: dict[str, float] | None = None
    overlapped: tuple = ()
    transfer: bool = False
    prior: dict[str, float] | None = None


def fit(rows: list[StepData], stages: list[str], source: str = "", left_out: list[LeftOut] | None = None,
        options: FitOptions = FitOptions(), bound_rows: list[StepData] | None = None) -> Calibration:
    """This run's deviation from the priors per kind of work, a fixed cost per stage and the
    step's time outside the stages, fitted on relative errors with a soft-L1 loss, each deviation
    shrunk toward 1 and bounded by the peak roofline (module docstring), under ``options``
    (``FitOptions``)."""
    from scipy.optimize import least_squares

    noise, overlapped, transfer, prior = options.noise, options.overlapped, options.transfer, options.prior

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
    prior = prior if prior is not None else _default_prior()
    for s in stages:
        for r in rows:
            if any(not math.isfinite(v) or v < 0 for v in r.x.get(s, {}).values()):
                raise PolytraceError(f"{source}: the model priced {s} at a non-finite or negative time; "
                                     "check the configuration read from the log")
    X = prior_work(rows, stages, groups, prior)
    Y = {s: np.array([r.actual[s] for r in rows], dtype=np.float64) for s in stages}
    # seconds of kinds the calibration does not scale (multi-turn tool waits): taken as priced
    offset = {s: np.array([sum(v for g, v in r.x.get(s, {}).items() if g not in GROUPS) for r in rows])
              for s in stages}
    # a stage's constant seconds are paid per call: once a step, or once per generation batch of a
    # DAPO step (``StepData.calls``); ``yc`` is the mean time of one call
    calls = {s: np.array([float(r.calls.get(s, 1)) for r in rows]) for s in stages}
    # the noise of one call's time: a step of three generation batches is no noisier than one of one
    sd = {s: (noise or {}).get(s, noise_rel(Y[s] / calls[s])) for s in stages}
    ybar = {s: float(Y[s].mean()) for s in stages}
    tied = [(a, b) for a, b in TIED if a in gi and b in gi]
    yb = np.array([ybar[s] for s in stages])
    mc = np.array([float(calls[s].mean()) for s in stages])
    yc = yb / mc
    # the constants' prior: for another run every stage's at 0 s, sd 10% (generation's is then held at
    # 0 s below); within the run half the trainer stages' time and 15% of generation's, sd 50%
    if transfer:
        prior_c = np.full(len(stages), FIXED_PRIOR_SHARE_TRANSFER) * yc
    else:
        prior_c = np.array([FIXED_PRIOR_SHARE_GEN if s == "gen" else FIXED_PRIOR_SHARE for s in stages]) * yc
    prior_sd = np.full(len(stages), FIXED_SD_TRANSFER if transfer else FIXED_SD)

    # physical bounds: no kind of work faster than its peak roofline (deviation >= floor); a
    # stage's constant seconds at most what its shortest window step leaves once its work runs at
    # that bound
    floor = np.full(n_g, MIN_SLOWDOWN)
    # over every window step, those screened out included: the bound holds for any step
    everyone = rows + [r for r in (bound_rows or []) if r not in rows]
    XB = prior_work(everyone, stages, groups, prior)
    for s in stages:
        Bs = np.array([[r.bound.get(s, {}).get(g, 0.0) for g in groups] for r in everyone], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(XB[s] > 0, Bs / np.where(XB[s] > 0, XB[s], 1.0), 0.0)
        floor = np.maximum(floor, ratio.max(axis=0))
    c_max = np.array([max(0.0, float(np.min((Y[s] - offset[s] - X[s] @ floor) / calls[s]))) for s in stages])
    c_window = c_max  # what the window allows: the range of constants it carries (``split``)
    if transfer:  # generation's constant for another run: held at 0 s, not drawn toward a prior of 0
        c_max = np.where(np.array([s == "gen" for s in stages]), 0.0, c_max)
    # per call: more generation batches scale a step's constant and its work alike, so they split nothing
    ident = {s: _identified(X[s] / calls[s][:, None], sd[s]) for s in stages}
    # a kind of work seen only in stages whose split the window cannot identify: the prior decides
    undecided = [g for g in groups if all(not ident[s][0] for s in stages if np.any(X[s][:, gi[g]] > 0))]
    u_sd = np.array([PRIOR_DECIDES_SD if g in undecided else PRIOR_LOG_SD for g in groups])
    # a stage whose modelled time does not move at all over the window (padded batches, fixed
    # lengths): nothing splits it, and the slowdowns' prior alone decides (the constant's prior share
    # steps aside); one that moves a little is a compromise of both priors and the data
    # (for another run the constant's prior is what moves it to the micro-batches: it stays)
    if not transfer:
        prior_sd = np.array([UNSPLIT_CONSTANT_SD if ident[s][1] < FLAT_SPREAD else sd_c
                             for s, sd_c in zip(stages, prior_sd)])
    lo_u = np.log(floor)
    # the centre: the priors times the run's overall ratio to them (all stages' time over all their
    # priced time: another GPU, driver or engine version moves every kind alike), or the bound
    total_x = sum(float(X[s].sum()) for s in stages)
    rho = math.log(sum(float(Y[s].sum()) for s in stages) / total_x) if total_x > 0 else 0.0
    rho = min(max(rho, -math.log(MAX_DEVIATION)), math.log(MAX_DEVIATION)) if CENTRE_ON_RUN else 0.0
    prior_u = np.maximum(rho, lo_u)

    def unpack(theta):
        return np.exp(theta[:n_g]), theta[n_g:]

    def residuals(theta):
        dev, fixed = unpack(theta)
        out = []
        for j, s in enumerate(stages):
            pred = X[s] @ dev + fixed[j] * calls[s] + offset[s]
            out.append((pred - Y[s]) / Y[s] / sd[s])
        for a, b in tied:
            out.append(np.array([(theta[gi[a]] - theta[gi[b]]) / TIE_SD]))
        out.append((fixed - prior_c) / (prior_sd * yc))
        out.append((theta[:n_g] - prior_u) / u_sd)
        return np.concatenate(out)

    hi_c = np.maximum(c_max, 1e-9 * np.maximum(yb, 1e-6))
    lower = np.concatenate([lo_u, np.zeros(len(stages))])
    upper = np.concatenate([np.maximum(np.full(n_g, math.log(MAX_DEVIATION)), lo_u + 1e-6), hi_c])
    theta0 = np.clip(np.concatenate([prior_u, np.minimum(1e-3 * yb, 0.5 * hi_c)]), lower, upper)
    scale = np.concatenate([np.ones(n_g), [max(ybar[s], 1e-6) for s in stages]])
    try:
        res = least_squares(residuals, theta0, bounds=(lower, upper), loss="soft_l1", f_scale=SOFT_L1_SCALE,
                            x_scale=scale)
    except (ValueError, np.linalg.LinAlgError) as exc:  # pragma: no cover - inputs are checked above
        raise PolytraceError(f"{source}: calibration failed ({exc})") from None
    dev, fixed = unpack(res.x)
    if not (np.all(np.isfinite(dev)) and np.all(np.isfinite(fixed))):
        raise PolytraceError(f"{source}: calibration gave non-finite scalars")
    dev = np.maximum(dev, floor)  # the solver's last ulp
    # a stage whose shortest step leaves nothing past its work at the bound has no constant at all:
    # exactly 0, not the solver's 1e-29 s inside the 1e-9 x mean s box least_squares needs
    fixed = np.where((c_max > 0) & (fixed >= 1e-9 * yb), np.clip(fixed, 0.0, c_max), 0.0)
    cal = Calibration({g: float(dev[gi[g]] * prior.get(f"{g}_slowdown", 1.0)) for g in groups},
                      {s: float(fixed[j]) for j, s in enumerate(stages)},
                      [r.step for r in rows], source, list(left_out or []), overlapped=tuple(overlapped),
                      deviation={g: float(dev[gi[g]]) for g in groups},
                      min_deviation={g: float(floor[gi[g]]) for g in groups}, prior=dict(prior),
                      run_ratio=float(math.exp(rho)))
    n = len(rows)
    scalars = cal.scalars()
    for j, s in enumerate(stages):
        ok, cv = ident[s]
        # the constant's standard error in a regression of time on modelled time: noise x mean /
        # (sqrt(n) x spread); two of them either side, within [0, c_max]
        half = 2.0 * sd[s] * ybar[s] / (math.sqrt(n) * max(cv, 1e-9))
        c, window_c = float(fixed[j] * mc[j]), float(c_window[j] * mc[j])  # per step, as the mean time
        cal.split[s] = {"identified": ok, "modelled_spread": cv, "noise": sd[s], "mean_actual_s": ybar[s],
                        "constant_s": c, "constant_range_s": [max(0.0, c - half), min(window_c, c + half)],
                        **family_seconds(rows, s, scalars, prior)}
    unsplit = [s for s in stages if not ident[s][0]]
    if unsplit:
        spread = ", ".join(f"{s} {100 * ident[s][1]:.1f}% (noise {100 * sd[s]:.1f}%)" for s in unsplit)
        decided = (f": the priors decide {', '.join(undecided)} (their slowdowns times the run's overall ratio to "
                   f"them, {math.exp(prior_u.min() if not CENTRE_ON_RUN else rho):.3g})" if undecided else "")
        cal.notes.append(f"the calibration window cannot separate constant from per-token cost in {', '.join(unsplit)} "
                         f"(modelled time varies {spread}){decided}; the constant seconds take the rest, and "
                         "estimates for other lengths carry the range this leaves")
    # pushed past the priors onto the bound
    at_floor = [g for g in groups if dev[gi[g]] <= floor[gi[g]] * 1.001 and dev[gi[g]] < 0.999]
    if at_floor:
        cal.notes.append(f"{', '.join(at_floor)} held at the peak roofline (efficiency 1): the run looks faster than "
                         "the hardware allows for the configuration read from the log; check unstated settings")
    # the step's time outside the stages: what the rows show past the stages on its critical path
    # and the modelled reward scoring (a median: robust to a slow reward batch)
    outside = [r.actual["step"] - sum(r.actual[s] for s in stages if s not in overlapped) - r.other_s
               for r in rows]
    cal.overhead_s["other"] = max(0.0, float(np.median(outside)))  # time, never negative
    preds = [cal.predict(r, stages) for r in rows]
    for k in stages + ["step"]:
        a = np.array([r.actual[k] for r in rows])
        p = np.array([pr[k] for pr in preds])
        cal.fit_error_pct[k] = float(100.0 * np.mean(np.abs(p - a) / a))
    return cal


def _default_prior() -> dict[str, float]:
    """The shipped priors' scalars for an eager engine without activation checkpointing."""
    from ..stepmodel.efficiency import prior_scalars

    return prior_scalars()


def prior_for(run) -> dict[str, float]:
    """The shipped priors' scalars under a run's engine settings, on its GPU (``devices``)."""
    from ..stepmodel.efficiency import prior_scalars

    return prior_scalars(eager=run.eager, gradient_checkpointing=run.gradient_checkpointing,
                         gpu=getattr(run, "gpu", None))


def calibrate(rows: list[StepData], stages: list[str], source: str = "", first_step: int | None = None,
              screen_outliers: bool = True, overlapped: tuple = (), transfer: bool = False,
              prior: dict[str, float] | None = None) -> Calibration:
    """Screen the calibration steps (``screen``), then ``fit`` the rest (``transfer``: for another
    run, ``FIXED_PRIOR_SHARE_TRANSFER``)."""
    left: list[LeftOut] = []
    window = rows
    if screen_outliers:
        rows, left = screen(rows, stages, first_step, overlapped=overlapped)
    return fit(rows, stages, source, left, FitOptions(overlapped=overlapped, transfer=transfer, prior=prior),
               bound_rows=window)
