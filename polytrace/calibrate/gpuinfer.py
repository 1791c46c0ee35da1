"""The GPU of a log that does not say, inferred from what its steps rule out.

Most verl console logs never name their GPU; ``identity`` then assumes an A100 and says so. An
assumed GPU is a hypothesis like any unstated setting, and the same physical test rejects it: no
stage can run faster than its peak roofline on the GPU it ran on. Where some step of the log beats
the assumed A100's peak (a 7B PPO run on H100s does, at 0.57x its A100 peak seconds), the presets of
``INFER_LADDER`` are tried slowest first and the first that no step beats is taken, with a note
naming what was rejected and why. Where none fits, the configuration read from the log is the
likelier culprit (an unstated setting, a wrong model): the assumed GPU is kept, and the note says
so. ``--gpu`` (or a GPU the log shows) is never replaced, but one that some step beats at its
peak roofline gets a note naming it and the slowest preset the steps allow (``contradicted_note``),
and a ``--gpu`` slower than what the log's own FLOP count shows its update ran at is refused
(``impossible``): a log priced on a GPU it contradicts has its stages held at efficiency 1 and
their constant seconds at 0, an accuracy that tests the GPU, not the model (issue 38: such a run
printed ``old_log_prob=3.44e-29`` with no word why).

Before that ladder, the log's own ``perf/mfu/actor`` is read (``mfu``): verl divides by the peak
of the device it detected, so the log names its GPU's class itself (the play-verl logs read back
870-983 TFLOP/s against the H100's 989). An assumed GPU is replaced by that class's preset when no
step beats its roofline; a GPU that is given (``--gpu``, the publisher, the log) and contradicts the
reading keeps being priced, with a note naming both.

This module prices nothing itself: ``infer_gpu`` is a generator that yields each GPU hypothesis it
wants priced (``Overrides`` naming the preset) and is sent back the log priced on it; its return
value is the decision. ``validate.prepare`` reads the log once and acts on each request, so no
function of ``validate`` is handed down here and called back (a loop the import graph did not show).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import PolytraceError
from ..run.hardware import GPUS
from ..stepmodel.efficiency import roofline_share
from .logconfig import Overrides
from .mfu import check_gpu, read_mfu, zero_mfu_rules_out

# Presets tried, slowest first, when the assumed GPU is rejected for a log (a stage faster than its
# peak roofline); the first one no step beats is taken: the slowest GPU the log allows.
INFER_LADDER = ("a100-80g", "h100-sxm", "h200", "b200")
NOT_STATED = "GPU not stated in the log: "
ASSUMED_NOTE = NOT_STATED + "assumed"
INFERRED_NOTE = NOT_STATED + "inferred"
CONTRADICTED_NOTE = "GPU contradicted by the log: "


def impossible(reading, gpu) -> str | None:
    """Why the log's update cannot have run on ``gpu`` at all, or None: even its slower steps
    (10th percentile) do more useful FLOP/s per GPU, by verl's own count (``mfu``: tokens and
    seconds, no model of ours), than ``gpu``'s dense bf16 peak. The roofline test below depends on
    the configuration read; this one does not."""
    if reading is None or not reading.achieved[0] > gpu.bf16_tflops:
        return None
    lo, hi = reading.achieved
    return (f"the log's update runs {lo:.0f}-{hi:.0f} TFLOP/s per GPU by verl's own FLOP count "
            f"(perf/mfu/actor), past {gpu.slug}'s {gpu.bf16_tflops:g} TFLOP/s bf16 peak: "
            f"it cannot have run on {gpu.slug}"
            + (f"; its MFU reads verl's {reading.verl_class:g} TFLOP/s class ({', '.join(reading.candidates)})"
               if reading.verl_class is not None else ""))


def slowest_allowed(base, start: str, ruled_out=None):
    """Asks for the log priced on each ``INFER_LADDER`` preset after ``start`` in turn (yields the
    ``Overrides``; sent the prepared tuple) and returns the first whose peak roofline no step beats
    (None: every one is beaten), and the rejected ones with their margins; the presets of
    ``ruled_out`` (preset -> why: ``mfu.zero_mfu_rules_out``) are rejected untried."""
    rejected = []
    first = INFER_LADDER.index(start) + 1 if start in INFER_LADDER else 0
    for slug in INFER_LADDER[first:]:
        if ruled_out and slug in ruled_out:
            rejected.append(f"{slug} ({ruled_out[slug]})")
            continue
        trial = yield dataclasses.replace(base, gpu=slug)
        m = roofline_margin(trial[3])
        if m >= 1.0:
            return trial, rejected
        rejected.append(f"{slug} ({m:.2f}x)")
    return None, rejected


def contradicted_note(path, base, slug: str, margin: float, flag: bool, reading):
    """The note for a GPU that is given (``--gpu``, ``flag``) or stated by the log and that some
    step beats at its peak roofline (``margin`` < 1): it names the GPU and the slowest one the
    steps allow (asked for as ``slowest_allowed`` does), and says what pricing on it does to the
    calibration. A ``--gpu`` the log's own FLOP count rules out (``impossible``) is refused."""
    how = "--gpu" if flag else "as the log states"
    gpu = GPUS.get(slug)  # a preset: what --gpu takes
    why = impossible(reading, gpu) if flag and gpu is not None else None
    if why:
        raise PolytraceError(f"{path}: --gpu {slug}: {why}; pass the GPU it ran on, or leave --gpu out to infer it")
    trial, rejected = yield from slowest_allowed(base, slug)
    allowed = trial[1].gpu.slug if trial is not None else None
    fits = (f"the slowest of {', '.join(INFER_LADDER)} no step beats is {allowed}"
            + (f" (also beaten: {'; '.join(rejected)})" if rejected else "") if allowed else
            f"every preset of {', '.join(INFER_LADDER)} is beaten too ({'; '.join(rejected)}): the configuration "
            "read from the log is likelier wrong than the GPU (check unstated settings)")
    return (f"{CONTRADICTED_NOTE}{slug} ({how}), but some step beats its peak roofline ({margin:.2f}x its seconds); "
            f"{fits}. Priced on {slug} as {'given' if flag else 'stated'}: the kinds of work that beat it are held at "
            "efficiency 1 and the constant seconds of their stages at 0, so the accuracy tests the GPU, not the model")


def roofline_margin(rows, stages=None) -> float:
    """The smallest, over ``rows`` (``fit.StepData``) and their timed stages, of actual seconds over
    the stage's peak-roofline seconds (every part at the peak: ``roofline_share`` of its family).
    Below 1 a step beats the peak roofline: the GPU the rows were priced on cannot be the one."""
    worst = math.inf
    for r in rows:
        for stage, fams in r.families.items():
            if stages is not None and stage not in stages:
                continue
            actual = r.actual.get(stage)
            bound = sum(v * roofline_share(f) for (_g, f), v in fams.items())
            if actual and bound > 0:
                worst = min(worst, float(actual) / bound)
    return worst


def infer_gpu(path, overrides, prepared: tuple):
    """A generator: ``prepared`` (``validate.prepare``'s tuple: log, run, notes, rows, split) as it
    is when its GPU was stated or survives the test, else the log priced on the slowest
    ``INFER_LADDER`` preset no step beats, its notes saying which and why, as its return value.
    Each GPU to try is yielded as ``Overrides``, and the log priced on it is sent back."""
    log, run, notes, rows, split = prepared
    at = next((i for i, n in enumerate(notes) if n.startswith(ASSUMED_NOTE)), None)
    reading = read_mfu(log, run)
    base = overrides if overrides is not None else Overrides()
    zero = zero_mfu_rules_out(log, run, {*INFER_LADDER, run.gpu.slug}) if reading is None else {}
    if at is None or base.gpu:
        check = check_gpu(reading, run.gpu)
        if run.gpu.slug in zero:
            check = f"GPU check: {zero[run.gpu.slug]}; priced on {run.gpu.slug} as given: check --gpu"
        added = [] if check is None else [check]
        margin = roofline_margin(rows)
        if margin < 1.0:
            added.append((yield from contradicted_note(path, base, run.gpu.slug, margin, bool(base.gpu), reading)))
        return prepared if not added else (log, run, [*notes, *added], rows, split)
    if reading is not None and reading.choice is not None:
        # the class's preset, then the devices an older verl scored against its peak (``mfu.LEGACY``)
        tried = []
        for slug in (reading.choice, *(s for s, _ in reading.legacy)):
            trial = yield dataclasses.replace(base, gpu=slug)
            t_log, t_run, t_notes, t_rows, t_split = trial
            m = roofline_margin(t_rows)
            if m >= 1.0:
                others = [c for c in reading.candidates if c != t_run.gpu.slug and c not in dict(reading.legacy)]
                note = (f"{INFERRED_NOTE} {t_run.gpu.slug} from the log's own MFU: {reading.say()}"
                        + (f"; {', '.join(others)} share verl's peak and cannot be told apart by it" if others else "")
                        + (f"; rejected: {'; '.join(tried)}" if tried else "") + "; pass --gpu to choose")
                return t_log, t_run, [note] + [n for n in t_notes if not n.startswith(ASSUMED_NOTE)], t_rows, t_split
            tried.append(f"{slug} ({m:.2f}x its peak-roofline seconds)")
        notes = [*notes, f"GPU check: {reading.say()}, but some step beats the peak roofline of each "
                         f"({'; '.join(tried)}): the MFU reading is not taken"]
    margin = roofline_margin(rows)
    if margin >= 1.0 and run.gpu.slug not in zero:
        return prepared if notes is prepared[2] else (log, run, notes, rows, split)
    trial, more = yield from slowest_allowed(base, run.gpu.slug, zero)
    why = zero.get(run.gpu.slug) or f"{margin:.2f}x its peak-roofline seconds"
    rejected = [f"{run.gpu.slug} ({why})", *more]
    if trial is not None:
        t_log, t_run, t_notes, t_rows, t_split = trial
        note = (f"{INFERRED_NOTE} {t_run.gpu.slug}, the slowest of {', '.join(INFER_LADDER)} "
                f"whose peak roofline no step beats (rejected: {'; '.join(rejected)}); pass --gpu to choose")
        return t_log, t_run, [note] + t_notes + notes[len(prepared[2]):], t_rows, t_split
    notes = list(notes)
    notes[at] = (f"{notes[at]}; every preset of {', '.join(INFER_LADDER)} is beaten by some step "
                 f"({'; '.join(rejected)}): the configuration read from the log is likelier wrong than the GPU "
                 "(check unstated settings)")
    return log, run, notes, rows, split
