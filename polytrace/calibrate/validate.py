"""Validate the step model on a real training log.

1. Read the log (``polytrace.logs``) and the run's configuration from its launch command and
   printed config, inferring what it leaves unstated from its metrics (``polytrace.calibrate.logconfig``).
2. Check every step at the boundary: a step whose timings or length statistics are missing,
   non-finite, non-positive or inconsistent with the configured caps is left out, and said so.
3. For every kept step, rebuild a batch of sequence lengths from that step's logged statistics
   (response and prompt length mean, max, min, clip ratio) and price each stage with the roofline
   models of ``polytrace.stepmodel`` -> ``x[stage]``, seconds the hardware would need.
4. Calibrate the named scalars (``polytrace.calibrate.fit``: one slowdown per kind of work, a fixed
   cost per stage, the step's time outside the stages) on the first K steps, leaving out warm-up,
   validation/checkpoint spikes and stalls, or on all steps of another log of the same model and
   cluster (``--calibrate-on``).
5. Predict every later step and report, per stage and for the step, the accuracy
   (100% - mean absolute percentage error) next to the naive predictor that repeats the
   calibration steps' mean.

Validation (``testing``) and checkpoint (``save_checkpoint``) seconds are taken out of the step
time and reported separately.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import PolytraceError
from ..logs import EXTRA_STAGES, TrainingLog, read_log
from ..stepmodel.devices import note as device_note
from ..stepmodel.efficiency import DEFAULT
from ..stepmodel.rollout import kv_slots
from ..stepmodel.stages import STAGES, RunConfig, stage_costs, synthetic_lengths
from . import dynamic_sampling
from .drift import drift_scores
from .fit import Calibration, StepData, by_family, calibrate, prior_for, roofline_bounds
from .gpuinfer import infer_gpu
from .infer import resolve_unstated
from .logconfig import MAX_TOKENS, Overrides, Split, config_from_log, execution_split, model_family
from .multiturn import multiturn_notes, price_multiturn

# verl's top-level timers; others (generate_sequences, reshard, ...) are nested inside these.
TOP_LEVEL = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
             "update_weights", "rollout_correction")
GOAL_STAGES = ("gen", "old_log_prob", "ref", "update_actor")
# Decode iterations one engine may simulate per step: past this the configuration (a KV cache
# holding a handful of sequences, or lengths near the 2^20 bound) would take minutes per step.
MAX_DECODE_ITERATIONS = 20_000_000
# Pricing a step walks every data-parallel rank and inference engine in Python (~10 us each):
# steps x GPUs past this would take minutes (a 1,000-step log of a 512-GPU run is 5*10^5).
MAX_STEP_GPU_PRODUCT = 3_000_000
_NEEDED = ("response_length/mean",)
# Timers round and overlap by a few milliseconds: a step is taken as holding its validation
# seconds unless removing them leaves under 98% of its timed stages.
_STEP_SLACK = 0.98
_MAX_NOTED = 5  # bad steps named one by one before the rest are counted

__all__ = ["Calibration", "Overrides", "StepData", "config_from_log", "price_steps", "step_batch", "validate"]


def _bad(v) -> bool:
    return v is None or not math.isfinite(v)


def _step_time(timings: dict, extra: dict, overlapped: bool) -> tuple[float, bool]:
    """The step's own seconds. verl's step timer held validation (``testing``) and checkpoint
    (``save_checkpoint``) seconds up to 0.4 and leaves them out from 0.5 on (the shared logs and
    the 0.3/0.4 logs gathered for this: step = stages + testing + save; a 0.5 log: step 55.1 s
    with 22.9 s of testing and 17.5 s of saving beside 55.1 s of stages). A step cannot take less
    than its own timed stages, so when taking them out would leave less, the timer left them out."""
    step = timings["step"]
    if not extra:
        return step, False
    on_path = sum(v for k, v in timings.items() if k in TOP_LEVEL and not (overlapped and k == "gen")
                  and math.isfinite(v) and v > 0)
    without = step - sum(extra.values())
    if on_path > 0 and without < _STEP_SLACK * on_path <= step:
        return step, True
    return without, False


def _step_rows(log: TrainingLog, run: RunConfig | None = None,
               left: list[str] | None = None, split: Split | None = None,
               notes: list[str] | None = None) -> list[StepData]:
    """The log's steps as rows, each checked: timings finite and positive, length statistics
    finite, positive and within the configured caps. A failing step is left out and named in
    ``left``."""
    stages = log.stages()
    overlapped = split is not None and split.mode != "sync"
    if "gen" not in stages and "generate_sequences" not in stages and not overlapped:
        raise PolytraceError(f"{log.path}: missing timing keys: no timing/gen or timing_s/gen on the step lines "
                             f"(found: {', '.join(stages) or 'none'})")
    rows = []
    left = left if left is not None else []
    prev_extra = False
    excluded: list[int] = []  # steps whose timer left validation and checkpoint out
    for s in log.steps:
        timings = dict(s.timings)
        if "gen" not in timings and "generate_sequences" in timings:
            timings["gen"] = timings["generate_sequences"]  # one-step-off: the rollout worker's timer
        why = _row_problem(s.metrics, timings, run, overlapped)
        extra = {k: timings[k] for k in EXTRA_STAGES if k in timings}
        if why:
            left.append(f"step {s.step} (line {s.line}): {why}")
            prev_extra = bool(extra)
            continue
        actual = {k: timings[k] for k in STAGES if k in timings}
        if "step" in timings:
            total, left_out_by_timer = _step_time(timings, extra, overlapped)
            if left_out_by_timer:
                excluded.append(s.step)
        else:
            total = sum(v for k, v in timings.items() if k in TOP_LEVEL)
        if not total > 0:
            left.append(f"step {s.step} (line {s.line}): step time {total:.3g} s after validation and "
                        "checkpoint seconds are taken out")
            prev_extra = bool(extra)
            continue
        actual["step"] = total
        rows.append(StepData(s.step, dict(s.metrics), actual, extra, after_extra=prev_extra))
        prev_extra = bool(extra)
    if excluded and notes is not None:
        notes.append(f"timing_s/step leaves validation and checkpoint seconds out on {len(excluded)} step(s) (first: "
                     f"step {excluded[0]}; it is shorter than its own timed stages once they are taken out): "
                     "used as logged")
    if not rows:
        first = f" ({left[0]})" if left else ""
        hint = "; if the log's caps are wrong, pass --max-prompt-len / --max-response-len" if "cap" in first else ""
        raise PolytraceError(f"{log.path}: no usable step: none has finite, positive timings and length "
                             f"statistics{first}{hint}")
    return rows


def _shown(v) -> str:
    """A logged value as a note quotes it: a number as printed, a non-finite one in words (a note
    saying a step's value "is nan" read as a NaN in the output to scripts that scan for one)."""
    if v is None:
        return "missing"
    if isinstance(v, float) and math.isnan(v):
        return "not a number"
    if isinstance(v, float) and math.isinf(v):
        return "infinite" if v > 0 else "minus infinity"
    return f"{v:g}"


def _row_problem(m: dict, timings: dict, run: RunConfig | None, overlapped: bool) -> str:
    for k in _NEEDED:
        if k not in m:
            return f"no {k}"
    if "gen" not in timings and not overlapped:
        return "no gen timing"
    for k, v in timings.items():
        if k in STAGES or k == "step":
            if _bad(v) or v <= 0:
                return f"timing {k} is {_shown(v)}"
        elif k in EXTRA_STAGES and (_bad(v) or v < 0):
            return f"timing {k} is {_shown(v)}"
    sampling = dynamic_sampling.problem(m)
    if sampling:
        return sampling
    cap_r = run.max_response_len if run else MAX_TOKENS
    cap_p = run.max_prompt_len if run else MAX_TOKENS
    for kind, cap in (("response", cap_r), ("prompt", cap_p)):
        for stat in ("mean", "max", "min"):
            v = m.get(f"{kind}_length/{stat}")
            if v is None:
                continue
            lowest = 1.0 if kind == "response" and stat == "mean" else 0.0
            if _bad(v) or v < lowest:
                return f"{kind}_length/{stat} is {_shown(v)}"
            if v > cap * 1.001 + 1:
                return f"{kind}_length/{stat} {v:g} is above the {kind} cap {cap}"
        mean, mx = m.get(f"{kind}_length/mean"), m.get(f"{kind}_length/max")
        if mean is not None and mx is not None and mx + 1e-6 < mean:
            return f"{kind}_length/max {mx:g} is below its mean {mean:g}"
    clip = m.get("response_length/clip_ratio")
    if clip is not None and (_bad(clip) or not 0 <= clip <= 1):
        return f"response_length/clip_ratio is {_shown(clip)}"
    return ""


def step_batch(run: RunConfig, stats: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and response lengths consistent with one step's logged statistics, in a fixed
    shuffled order (ranks and engines get mixed lengths, as with real data). Every size comes
    from the run's checked configuration (caps, sequences per step), never from a raw value."""
    n_seqs = run.prompts_per_step * run.n
    cap_r, cap_p = float(run.max_response_len), float(run.max_prompt_len)
    mean_r = min(float(stats["response_length/mean"]), cap_r)
    max_r = min(float(stats.get("response_length/max", mean_r * 3)), cap_r)
    r = synthetic_lengths(n_seqs, mean_r, max(max_r, mean_r), _capped(stats.get("response_length/min"), mean_r),
                          stats.get("response_length/clip_ratio"), cap=run.max_response_len)
    pm = min(float(stats.get("prompt_length/mean", 0.0)), cap_p)
    max_p = max(min(float(stats.get("prompt_length/max", pm)), cap_p), pm)
    prompts = synthetic_lengths(run.prompts_per_step, pm, max_p, _capped(stats.get("prompt_length/min", pm), pm))
    rng = np.random.default_rng(seed)
    order_p = rng.permutation(run.prompts_per_step)
    p = np.repeat(prompts[order_p], run.n)
    r = r[rng.permutation(n_seqs)]
    return p, r


def _capped(v, hi: float):
    return None if v is None else min(float(v), hi)


def _check_simulation_size(run: RunConfig, split: Split, steps: int = 1) -> None:
    """Refuse a configuration whose pricing would run for minutes: more GPUs than sequences per
    step (verl gives every data-parallel rank at least one), steps x GPUs past
    ``MAX_STEP_GPU_PRODUCT``, or a rollout simulation whose decode iterations per engine, at most
    (sequences per engine / concurrent sequences) x the cap, pass ``MAX_DECODE_ITERATIONS``."""
    seqs = run.prompts_per_step * run.n
    if run.n_gpus > seqs:
        raise PolytraceError(f"{run.n_gpus} GPUs for {seqs} sequences per step: verl gives every GPU at least one; "
                             "check --gpus, --prompts and --n")
    if steps * run.n_gpus > MAX_STEP_GPU_PRODUCT:
        raise PolytraceError(f"{steps} steps x {run.n_gpus} GPUs is too much to price one by one (at most "
                             f"{MAX_STEP_GPU_PRODUCT:,}); check --gpus, or validate a shorter stretch of the log")
    gpus = split.rollout_gpus or run.n_gpus
    engines = max(1, gpus // run.rollout_tp)
    per_engine = math.ceil(max(run.prompts_per_step, run.gen_batch_prompts or 0) * run.n / engines)
    slots = kv_slots(run.engine_model, run.gpu, run.rollout_tp, run.mem_fraction,
                     run.max_prompt_len + run.max_response_len, run.max_num_seqs, DEFAULT)
    iterations = math.ceil(per_engine / slots) * run.max_response_len
    if iterations > MAX_DECODE_ITERATIONS:
        raise PolytraceError(
            f"{run.model.name} on {run.gpu.slug}, rollout TP {run.rollout_tp}: the KV cache holds {slots} sequence(s) "
            f"of {run.max_prompt_len}+{run.max_response_len} tokens, so one engine would decode {iterations:,} "
            "iterations per step; check --gpu, --rollout-tp, gpu_memory_utilization and the length caps")


def price_steps(run: RunConfig, rows: list[StepData], split: Split | None = None) -> None:
    """Each row's stage costs at slowdown 1 (``row.x``). With a separate rollout pool (one-step-off,
    fully async) generation is priced on the rollout GPUs and the trainer stages on the rest."""
    split = split or Split("sync")
    _check_simulation_size(run, split, len(rows))
    roll_run = train_run = run
    if split.rollout_gpus and split.rollout_gpus < run.n_gpus:
        train_gpus = run.n_gpus - split.rollout_gpus
        tp = run.rollout_tp if split.rollout_gpus % run.rollout_tp == 0 else 1
        roll_run = dataclasses.replace(run, n_gpus=split.rollout_gpus, rollout_tp=tp, notes=[])
        train_run = dataclasses.replace(run, n_gpus=train_gpus, rollout_tp=1, notes=[])
    for row in rows:
        p, r = step_batch(run, row.stats)
        # generation's own batch: DAPO's dynamic sampling generates more prompts than it trains on
        gen_run, gp, gr = roll_run, p, r
        sampled = dynamic_sampling.applies(run, row.stats)
        if sampled and run.gen_batch_prompts:
            gen_run = dataclasses.replace(roll_run, prompts_per_step=run.gen_batch_prompts, notes=[])
            gp, gr = step_batch(gen_run, row.stats)
        # the trainer's batch simulates no rollout where generation is priced on a run of its own
        costs = stage_costs(train_run, p, r, eff=DEFAULT, rollout=gen_run is train_run)
        row.x = {k: dict(v) for k, v in costs.components.items()}
        row.bound = roofline_bounds(costs.parts)
        row.families = by_family(costs.parts)
        row.other_s = costs.other_s
        if gen_run is not train_run:
            gen_costs = stage_costs(gen_run, gp, gr, eff=DEFAULT)
            gen_parts = [x for x in gen_costs.parts if x.stage == "gen"]
            row.x["gen"] = {}
            for x in gen_parts:
                row.x["gen"][x.group] = row.x["gen"].get(x.group, 0.0) + x.seconds
            row.bound["gen"] = roofline_bounds(gen_parts).get("gen", {})
            row.families["gen"] = by_family(gen_parts).get("gen", {})
            if sampled:  # the rule-based reward scores every generated response
                row.other_s = gen_costs.other_s
        price_multiturn(gen_run, row, gp, gr)  # agent-loop steps: tool waits and per-turn prefill
        if sampled:  # each generation batch a rollout of its own, one after the other
            row.calls["gen"] = dynamic_sampling.gen_batches(row.stats)
            _times(row, "gen", row.calls["gen"])


def _times(row: StepData, stage: str, k: int) -> None:
    """``row``'s priced ``stage`` (its kinds of work, their roofline bounds and families), and the
    step's modelled time outside the stages, run ``k`` times."""
    row.x[stage] = {g: v * k for g, v in row.x.get(stage, {}).items()}
    row.bound[stage] = {g: v * k for g, v in row.bound.get(stage, {}).items()}
    row.families[stage] = {g: v * k for g, v in row.families.get(stage, {}).items()}
    row.other_s *= k


def accuracy(pred: np.ndarray, actual: np.ndarray) -> float:
    """100% minus the mean absolute percentage error."""
    return float(100.0 - 100.0 * np.mean(np.abs(pred - actual) / np.abs(actual)))


def _variation(y: np.ndarray) -> float:
    """Spread of the step time over the run: (95th - 5th percentile) / median."""
    return float((np.percentile(y, 95) - np.percentile(y, 5)) / np.median(y))


def _timed_stages(rows: list[StepData], window: int) -> tuple[list[str], list[StepData]]:
    """The stages timed on every one of the first ``window`` rows and on at least half of all
    rows, and the rows that time every one of them."""
    head = rows[: max(window, 1)]
    stages = [s for s in STAGES
              if all(s in r.actual for r in head) and sum(s in r.actual for r in rows) >= len(rows) // 2]
    return stages, [r for r in rows if all(s in r.actual for s in stages)]


def _noted(left: list[str], what: str) -> list[str]:
    if not left:
        return []
    shown = "; ".join(left[:_MAX_NOTED])
    more = f"; and {len(left) - _MAX_NOTED} more" if len(left) > _MAX_NOTED else ""
    return [f"{what} {len(left)} step(s) with unusable values: {shown}{more}"]


def prepare(path, overrides: Overrides | None = None, window: int = 10):
    """A log read, configured, checked and priced: (log, run, notes, rows, split). Settings the
    log leaves unstated are inferred on its first ``window`` usable steps (``infer``); an assumed
    GPU that some step beats at its peak roofline is replaced by the slowest one none does
    (``gpuinfer``). The file is read once: each GPU hypothesis ``gpuinfer`` asks for is priced
    on a working copy of the same record."""
    log = read_log(path)
    search = infer_gpu(path, overrides, _prepare_on(log.working_copy(), overrides, window))
    trial = None
    while True:
        try:
            ask = search.send(trial)  # the GPU hypothesis to price next
        except StopIteration as done:  # the decision: the log as priced on the GPU kept
            return done.value
        trial = _prepare_on(log.working_copy(), ask, window)


def _prepare_on(log: TrainingLog, overrides: Overrides | None, window: int):
    run, notes = config_from_log(log, overrides)
    split = execution_split(log)
    left: list[str] = []
    timer_notes: list[str] = []
    rows = _step_rows(log, run, left, split, timer_notes)
    run, notes = resolve_unstated(log, overrides, run, notes, rows[:window], split, price_steps)
    notes = list(log.notes) + notes + _noted(left, "left out") + timer_notes
    if split.mode != "sync":
        notes.append(f"{split.mode} run: generation overlaps training, so the step is priced as the trainer's "
                     "stages plus the calibrated time outside them (execution modes: estimate --mode)")
    price_steps(run, rows, split)
    notes += multiturn_notes(rows, log.generated)
    notes += dynamic_sampling.notes(run, rows)
    notes += [n for n in (device_note(run.gpu),) if n]  # a GPU off the corpus: where its priors come from
    return log, run, notes, rows, split


def _prepare_window(path, overrides: Overrides | None, calibrate_steps: int):
    """``prepare`` for a calibration on the first ``calibrate_steps`` usable steps: (log, run,
    notes, rows, split, stages), the rows cut to those timing every stage of the window."""
    if calibrate_steps < 2:
        raise PolytraceError(f"--calibrate-steps must be at least 2, got {calibrate_steps}")
    log, run, notes, rows, split = prepare(path, overrides, calibrate_steps)
    stages, rows = _timed_stages(rows, calibrate_steps)
    return log, run, notes, rows, split, stages


def below_naive(accuracy: dict) -> dict:
    """The stages (and ``step``) of a validation's ``accuracy`` whose prediction is less accurate
    than repeating the calibration steps' mean: a model that does not beat that has not earned a
    goal without saying so."""
    return {k: {"accuracy": a["accuracy"], "naive_accuracy": a["naive_accuracy"]} for k, a in accuracy.items()
            if a.get("naive_accuracy") is not None and a["accuracy"] < a["naive_accuracy"]}


@dataclasses.dataclass
class ValidationResult:
    """``polytrace validate``: the ``log`` read (its ``format``, execution ``mode``, usable
    ``steps``, ``predicted_steps`` after the calibration window), the ``calibration`` fitted
    (source, steps, scalars, left out, fit error; ``calibration_split`` and
    ``calibration_deviation`` from the shared priors), the run's ``config``, ``notes``, the timed
    ``stages``, per stage and step the ``accuracy`` against the naive predictor, the step-time
    spread, the ``goals``, the seconds ``excluded_s`` from the step, the late steps' ``drift`` and
    each predicted step (``per_step``). ``to_json()`` is the ``--json`` document: these keys in
    this order, then ``below_naive``."""

    log: str
    format: str
    mode: str
    steps: int
    predicted_steps: int
    calibration: dict
    config: dict
    notes: list
    stages: list
    accuracy: dict
    step_time_variation: float
    goals: dict
    excluded_s: dict
    drift: dict
    calibration_split: dict
    calibration_deviation: dict
    per_step: list

    @property
    def below_naive(self) -> dict:
        return below_naive(self.accuracy)

    @property
    def missed_goals(self) -> list[str]:
        return [k for k, ok in self.goals.items() if not ok]

    @classmethod
    def from_json(cls, doc: dict) -> ValidationResult:
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["below_naive"] = self.below_naive
        return out


def validate(path, *, calibrate_steps: int = 10, calibrate_on: str | None = None,
             overrides: Overrides | None = None) -> ValidationResult:
    log, run, notes, rows, split, stages = _prepare_window(path, overrides, calibrate_steps)
    if calibrate_on:
        source_ov = Overrides(gpu=overrides.gpu if overrides else None)
        other_log, other_run, other_notes, other_rows, other_split = prepare(calibrate_on, source_ov)
        if model_family(other_run.model) != model_family(run.model):
            raise PolytraceError(f"--calibrate-on {calibrate_on} is a run of {other_run.model.name}, another model "
                                 f"family than {path} ({run.model.name}): calibrate on a run of the same model and "
                                 "cluster")
        if other_run.model.name != run.model.name:
            notes.append(f"calibrated on a run of {other_run.model.name}, predicting {run.model.name} (same family)")
        src_stages, other_rows = _timed_stages(other_rows, len(other_rows))
        shared = [s for s in stages if s in src_stages]
        if not shared:
            raise PolytraceError(f"{calibrate_on}: no stage in common with {path} ({', '.join(stages)})")
        unseen = [s for s in stages if s not in src_stages]
        if unseen:
            notes.append(f"{', '.join(unseen)} not timed in {calibrate_on}: priced with the slowdowns of their kind "
                         "of work and the fixed cost of the like stage")
        notes += [f"calibration log: {n}" for n in other_notes if n.startswith(("left out", "inferred"))]
        cal = calibrate(other_rows, src_stages, source=str(calibrate_on), first_step=other_log.steps[0].step,
                        overlapped=_overlapped(other_split), transfer=True, prior=prior_for(other_run))
        notes.append("calibrated for another run: the trainer stages' constant seconds are taken as paid per "
                     "micro-batch, not per call")
        notes += [f"calibration log: {n}" for n in cal.notes]
        test_rows, cal_rows = rows, other_rows
    else:
        if len(rows) <= calibrate_steps:
            raise PolytraceError(f"{path}: {len(rows)} usable steps, need more than --calibrate-steps "
                                 f"{calibrate_steps} to predict any")
        cal_rows, test_rows = rows[:calibrate_steps], rows[calibrate_steps:]
        cal = calibrate(cal_rows, stages, source=f"first {calibrate_steps} steps", first_step=log.steps[0].step,
                        overlapped=_overlapped(split), prior=prior_for(run))
    notes = notes + cal.notes
    overlapped = _overlapped(split)
    keys = stages + ["step"]
    # the naive predictor repeats the calibration window's mean, warm-up and spikes included
    naive = {k: float(np.mean([r.actual[k] for r in cal_rows])) if all(k in r.actual for r in cal_rows) else None
             for k in keys}
    preds = [cal.predict(r, stages, overlapped) for r in test_rows]
    per_stage = {}
    for k in keys:
        a = np.array([r.actual[k] for r in test_rows])
        p = np.array([pr[k] for pr in preds])
        acc = accuracy(p, a)
        entry = {"accuracy": acc, "mape": 100 - acc, "naive_accuracy": None, "naive_mape": None,
                 "mean_actual_s": float(a.mean()), "mean_predicted_s": float(p.mean())}
        if naive[k] is not None:
            nacc = accuracy(np.full_like(a, naive[k]), a)
            entry.update(naive_accuracy=nacc, naive_mape=100 - nacc)
        _check_finite(entry, k, test_rows, preds)
        per_stage[k] = entry
    step_all = np.array([r.actual["step"] for r in rows])
    variation = _variation(step_all)
    goals = {
        "step_accuracy_ge_95": per_stage["step"]["accuracy"] >= 95.0,
        **{f"{s}_accuracy_ge_90": per_stage[s]["accuracy"] >= 90.0 for s in GOAL_STAGES if s in per_stage},
    }
    if variation > 0.20 and per_stage["step"]["naive_mape"] is not None:
        goals["step_error_le_half_naive"] = per_stage["step"]["mape"] <= 0.5 * per_stage["step"]["naive_mape"]
    return ValidationResult(
        log=str(path), format=log.format, mode=split.mode, steps=len(rows), predicted_steps=len(test_rows),
        calibration={"source": cal.source, "steps": cal.steps, "scalars": cal.scalars(),
                     "left_out": [lo.to_dict() for lo in cal.left_out], "fit_error_pct": cal.fit_error_pct},
        config=run.to_dict(), notes=notes, stages=stages, accuracy=per_stage, step_time_variation=variation,
        goals=goals, excluded_s={k: float(sum(r.extra.get(k, 0.0) for r in rows)) for k in EXTRA_STAGES},
        drift=drift_scores(cal_rows, test_rows, preds, keys), calibration_split=cal.split,
        calibration_deviation=cal.deviation,
        per_step=[{"step": r.step, "actual": r.actual, "predicted": p} for r, p in zip(test_rows, preds)])


def _overlapped(split: Split) -> tuple:
    """Stages off the step's critical path: generation beside training in the separated modes."""
    return ("gen",) if split.mode != "sync" else ()


def _check_finite(entry: dict, key: str, rows: list[StepData], preds: list[dict]) -> None:
    """No NaN or infinity in a verdict: name the step and value that would cause one."""
    if all(v is None or math.isfinite(v) for v in entry.values()):
        return
    for r, p in zip(rows, preds):
        a, q = r.actual[key], p[key]
        if not (math.isfinite(a) and a > 0) or not math.isfinite(q):
            raise PolytraceError(f"step {r.step}: {key} actual {a:g} s, predicted {q:g} s: the accuracy would not be "
                                 "a finite number")
    raise PolytraceError(f"{key}: the accuracy is not a finite number")
