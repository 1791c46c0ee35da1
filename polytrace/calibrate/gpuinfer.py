"""The GPU of a log that does not say, inferred from what its steps rule out.

Most verl console logs never name their GPU; ``identity`` then assumes an A100 and says so. An
assumed GPU is a hypothesis like any unstated setting, and the same physical test rejects it: no
stage can run faster than its peak roofline on the GPU it ran on. Where some step of the log beats
the assumed A100's peak (a 7B PPO run on H100s does, at 0.57x its A100 peak seconds), the presets of
``INFER_LADDER`` are tried slowest first and the first that no step beats is taken, with a note
naming what was rejected and why. Where none fits, the configuration read from the log is the
likelier culprit (an unstated setting, a wrong model): the assumed GPU is kept, and the note says
so. ``--gpu`` (or a GPU the log shows) is never second-guessed.
"""

from __future__ import annotations

import dataclasses
import math

from ..compose.efficiency import roofline_share
from .logconfig import Overrides

# Presets tried, slowest first, when the assumed GPU is rejected for a log (a stage faster than its
# peak roofline); the first one no step beats is taken: the slowest GPU the log allows.
INFER_LADDER = ("a100-80g", "h100-sxm", "h200", "b200")
NOT_STATED = "GPU not stated in the log: "
ASSUMED_NOTE = NOT_STATED + "assumed"
INFERRED_NOTE = NOT_STATED + "inferred"


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


def infer_gpu(path, overrides, prepared: tuple, prepare_on) -> tuple:
    """``prepared`` (``validate.prepare``'s tuple: log, run, notes, rows, split) as it is when its
    GPU was stated or survives the test, else re-prepared (``prepare_on(path, overrides)``) on the
    slowest ``INFER_LADDER`` preset no step beats, its notes saying which and why."""
    log, run, notes, rows, split = prepared
    at = next((i for i, n in enumerate(notes) if n.startswith(ASSUMED_NOTE)), None)
    if at is None or (overrides is not None and overrides.gpu):
        return prepared
    margin = roofline_margin(rows)
    if margin >= 1.0:
        return prepared
    rejected = [f"{run.gpu.slug} ({margin:.2f}x its peak-roofline seconds)"]
    start = INFER_LADDER.index(run.gpu.slug) + 1 if run.gpu.slug in INFER_LADDER else 0
    base = overrides if overrides is not None else Overrides()
    for slug in INFER_LADDER[start:]:
        trial = prepare_on(path, dataclasses.replace(base, gpu=slug))
        m = roofline_margin(trial[3])
        if m >= 1.0:
            t_log, t_run, t_notes, t_rows, t_split = trial
            note = (f"{INFERRED_NOTE} {t_run.gpu.slug}, the slowest of {', '.join(INFER_LADDER)} "
                    f"whose peak roofline no step beats (rejected: {'; '.join(rejected)}); pass --gpu to choose")
            return t_log, t_run, [note] + t_notes, t_rows, t_split
        rejected.append(f"{slug} ({m:.2f}x)")
    notes = list(notes)
    notes[at] = (f"{notes[at]}; every preset of {', '.join(INFER_LADDER)} is beaten by some step "
                 f"({'; '.join(rejected)}): the configuration read from the log is likelier wrong than the GPU "
                 "(check unstated settings)")
    return log, run, notes, rows, split
