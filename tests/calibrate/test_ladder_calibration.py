"""Calibrated on one rung of the model-size ladder, predicting the others of the same recipe
(``validation-logs/ladder``: GRPO with LoRA rank 32, Qwen2.5 0.5B-32B, GSM8K and MATH; the three
small rungs on 2 GPUs, 7B and 32B on 8): ``validate LOG --calibrate-on RUNG``, the mean step's
pred/actual, and the range the calibration carries for that run (``ranges.range_over_rows``: what
``estimate --calibration`` prints). Goals (issue 36), over the 40 ordered pairs of a dataset's rungs:
median error <= 20%, the range holds the truth in >= 80% of pairs, and no calibrated estimate
further off than zero-shot by more than its range's width.

Measured at the commit adding this file (CPU, the 22-log priors, which the ladder is part of):
median 19.6% over 40 pairs (GSM8K 14.0%, MATH 23.5%), 20 within 20%, worst 1.98x (calibrated on
MATH 32B predicting 0.5B: the 8-GPU 32B run's per-call costs, taken per micro-batch, do not carry
to the 2-GPU runs). Under the priors refit at ef0b374 (vLLM's LoRA launches priced): median 12.1%
(GSM8K 8.3%, MATH 13.4%), 29 within 20%, worst 1.68x. The range (measured at the commit adding
``range_over_rows``, CPU, same priors): it holds the truth in 16 of 40 pairs (40%; its width is
what the window cannot split, constants against per-token work and one family against another,
not the rung-to-rung change of efficiency the misses show); one pair is further off than
zero-shot by more than its width (MATH 3B -> 7B: 1.43x against zero-shot 1.05x, range 1.25-1.63x)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from polytrace.calibrate.ranges import range_over_rows
from polytrace.calibrate.validate import _overlapped, _timed_stages, prepare, validate
from polytrace.calibrate.zeroshot import zero_shot


def _rungs(folder, math: bool):
    return sorted(p for p in (folder / "ladder").glob("*.log") if p.name.startswith("math__") == math)


@functools.cache
def _target(dst):
    """The rung's rows as ``validate --calibrate-on`` predicts them, and its zero-shot mean step."""
    _log, _run, _notes, rows, split = prepare(dst, None, 10)
    _stages, rows = _timed_stages(rows, 10)
    return rows, _overlapped(split), zero_shot(dst).accuracy["step"]["mean_predicted_s"]


@functools.cache
def _pair(src, dst) -> dict:
    """Mean step: the calibrated prediction, its range's ends and the zero-shot one, over the actual."""
    res = validate(dst, calibrate_on=str(src))
    rows, overlapped, zs = _target(dst)
    lo, hi = range_over_rows(rows, res.stages, res.per_step, res.calibration["scalars"], res.calibration_split,
                             overlapped)["step_s"]
    a = res.accuracy["step"]["mean_actual_s"]
    return {"ratio": res.accuracy["step"]["mean_predicted_s"] / a, "lo": lo / a, "hi": hi / a, "zero_shot": zs / a}


def _all_pairs(folder) -> list[dict]:
    return [_pair(s, d) for math in (False, True) for s, d in itertools.permutations(_rungs(folder, math), 2)]


@pytest.mark.parametrize("src, dst", [("0.5B", "1.5B"), ("3B", "7B")])
def test_a_rung_predicts_the_next_within_20pct(validation_logs, src, dst):
    """Two GSM8K pairs (CI's short version): the same GPUs (0.5B -> 1.5B: 1.03x, range
    0.97-1.07x) and across the 2- to 8-GPU step (3B -> 7B: 1.12x, range 1.03-1.27x)."""
    rung = {p.name.split("-bsz")[0].split("Qwen2.5-")[1]: p for p in _rungs(validation_logs, False)}
    p = _pair(rung[src], rung[dst])
    assert abs(p["ratio"] - 1) <= 0.20
    # the range holds the estimate and is not empty: the window leaves a split unidentified
    assert p["lo"] < p["ratio"] < p["hi"] and p["hi"] / p["lo"] < 2.0, p


@pytest.mark.slow
def test_calibrated_on_one_rung_the_others_within_20pct_median(validation_logs):
    ratios = [p["ratio"] for p in _all_pairs(validation_logs)]
    assert len(ratios) == 40
    assert np.median(np.abs(np.array(ratios) - 1)) <= 0.20, ratios
    assert all(0.5 <= r <= 2.0 for r in ratios), ratios


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="the range holds the truth in 16 of 40 pairs (40%, goal 80%): it spans "
                   "what the window cannot split, not the rung-to-rung change of efficiency (CPU, priors of ef0b374)")
def test_the_calibrated_range_holds_the_truth_in_80pct_of_pairs(validation_logs):
    pairs = _all_pairs(validation_logs)
    inside = sum(p["lo"] <= 1.0 <= p["hi"] for p in pairs)
    assert inside >= 0.8 * len(pairs), (inside, pairs)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="1 of 40 pairs: MATH 3B -> 7B calibrated 1.43x, zero-shot 1.05x, its range "
                   "1.25-1.63x (0.25 s past the width; CPU, priors of ef0b374)")
def test_calibration_never_further_off_than_zero_shot_by_more_than_its_range(validation_logs):
    """|calibrated - actual| <= |zero-shot - actual| + (hi - lo), in units of the actual mean step."""
    worse = [p for p in _all_pairs(validation_logs)
             if abs(p["ratio"] - 1) > abs(p["zero_shot"] - 1) + (p["hi"] - p["lo"])]
    assert not worse, worse
