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
zero-shot by more than its width (MATH 3B -> 7B: 1.43x against zero-shot 1.05x, range 1.25-1.63x).

Then (CPU, same priors) generation's constant for another run at 0 s, sd 10% (``fit``'s
transfer prior then: a flat window's constant was carried to another size as if
size-free; the 3B window's 26 s constant put the 7B's 26.3 s generation at 44.6 s): median 8.6%,
31 within 20%, worst 1.44x (GSM8K 32B -> 7B), no pair further off than zero-shot by more than its
range (goal met, before widening). The range then widened, in quadrature, by what no window of
one rung sees: the window's and the target's own size deviations, each scattered as the priors'
leave-one-size-out step (``ranges.transfer_scatter("size")``: sqrt(2) x 0.110 = 0.156 in log; the 40
transfers' RMS log error is 0.146): it holds the truth in 30 of 40 pairs (75%, goal 80%: strict
xfail; 17 of 40 on the window's ends alone), median hi/lo 1.46x, median hi - lo 0.38 of the actual
step, 4.4x the median error (a range holding 80% of Gaussian errors spans 3.8x their median
|error|, one holding 68% 3.0x). The misses are two runs' own deviations: GSM8K 32B as the window
(1.22-1.44x) and MATH 7B (as the target of 0.5B, 1.5B, 3B, 32B windows: 1.19-1.28x; as the window
for 0.5B and 1.5B: 0.78x, 0.80x).

Under the priors refit with verl's agent-loop tool cut (c97b80b, CPU): median 8.3%, 30 within 20%,
worst 1.45x; the leave-one-size-out scatter grew to 0.127 (sqrt(2) x: 0.179), so the ranges widen: the
truth inside in 31 of 40 pairs (77.5%, goal 80%: strict xfail), median hi/lo 1.52x, median hi - lo 0.43
of the actual step, 5.2x the median error; still no pair further off than zero-shot by more than its
window's range.

Then (CPU, same priors) generation's constant for another run held at 0 s, not drawn toward it at sd 10%
(``fit.fit(transfer=True)``: the GSM8K 32B window had left 16.3 s of its generation in the
constant, which put the 2-GPU 0.5B rung's 47 s generation at 1.46x), the range still carrying the
constants the window allows: median 8.3% -> 8.0%, 30 -> 33 within 20%, worst 1.45x -> 1.29x; the truth
inside in 31 -> 34 of 40 pairs (85%, goal 80%: met), median hi/lo 1.52x (unchanged), median hi - lo
0.428 of the actual step (0.431), 5.4x the median error; no pair further off than zero-shot by more
than its window's range. The six misses: GSM8K 32B as the window (0.5B, 7B: 1.27x, 1.23x), MATH 7B as
the target (of 0.5B and 32B: 1.29x, 1.28x) and as the window (0.5B, 1.5B: 0.78x, 0.80x)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from polytrace.calibrate.ranges import guard, range_over_rows, transfer_scatter
from polytrace.calibrate.validate import _overlapped, _timed_stages, prepare, validate
from polytrace.calibrate.zeroshot import zero_shot

# the 40 pairs prepare 10 logs 80 times (each once as the run, once as the calibration): each
# priced once as each (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("each_log_priced_once")


def _rungs(folder, math: bool):
    return sorted(p for p in (folder / "ladder").glob("*.log") if p.name.startswith("math__") == math)


@functools.cache
def _target(dst):
    """The rung's rows as ``validate --calibrate-on`` predicts them, and its zero-shot mean seconds
    per stage and step."""
    _log, _run, _notes, rows, split = prepare(dst, None, 10)
    _stages, rows = _timed_stages(rows, 10)
    return rows, _overlapped(split), {k: v["mean_predicted_s"] for k, v in zero_shot(dst).accuracy.items()}


@functools.cache
def _pair(src, dst) -> dict:
    """Mean step over the actual: the calibrated prediction, its range's ends, the zero-shot one,
    and the calibrated one guarded by its stages' ranges (``ranges.guard``: a stage past a 2x range
    moves toward the zero-shot stage)."""
    res = validate(dst, calibrate_on=str(src))
    rows, overlapped, zs = _target(dst)
    rng = range_over_rows(rows, res.stages, res.per_step, res.calibration["scalars"], res.calibration_split,
                          overlapped, transfer_scatter("size"))
    lo, hi = rng["step_s"]
    # the window's own ends, before the sizes' scatter: what the third goal is held to
    lo0, hi0 = range_over_rows(rows, res.stages, res.per_step, res.calibration["scalars"], res.calibration_split,
                               overlapped)["step_s"]
    a = res.accuracy["step"]["mean_actual_s"]
    summary = {"mean_step_s": res.accuracy["step"]["mean_predicted_s"],
               "mean_stages_s": {s: res.accuracy[s]["mean_predicted_s"] for s in res.stages}}
    guarded = guard(summary, {"mean_stages_s": zs}, rng, overlapped)
    return {"ratio": summary["mean_step_s"] / a, "lo": lo / a, "hi": hi / a, "zero_shot": zs["step"] / a,
            "window_width": (hi0 - lo0) / a, "guarded": guarded["step_s"] / a,
            "moved": sorted(s for s, w in guarded["weights"].items() if w < 1)}


def _all_pairs(folder) -> list[dict]:
    return [_pair(s, d) for math in (False, True) for s, d in itertools.permutations(_rungs(folder, math), 2)]


@pytest.mark.parametrize("src, dst", [("0.5B", "1.5B"), ("3B", "7B")])
def test_a_rung_predicts_the_next_within_20pct(validation_logs, src, dst):
    """Two GSM8K pairs (CI's short version): the same GPUs (0.5B -> 1.5B: 1.02x, range
    0.85-1.22x) and across the 2- to 8-GPU step (3B -> 7B: 1.05x, range 0.88-1.31x; CPU, with
    generation's constant for another run at 0 s)."""
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
def test_the_calibrated_range_holds_the_truth_in_80pct_of_pairs(validation_logs):
    """34 of 40 (CPU, priors of c97b80b, generation's constant for another run at 0 s); 31 when that
    constant was drawn toward 0 at sd 10% (a strict xfail then)."""
    pairs = _all_pairs(validation_logs)
    inside = sum(p["lo"] <= 1.0 <= p["hi"] for p in pairs)
    assert inside >= 0.8 * len(pairs), (inside, pairs)


@pytest.mark.slow
def test_the_calibrated_range_is_no_wider_than_its_errors_need(validation_logs):
    """A range holds its estimate, and is not bought by width: the median hi/lo at most 1.55x
    (1.52x measured at c97b80b and with generation's constant for another run at 0 s, 1.46x at
    ef0b374) and the median hi - lo at most 6x the median error (0.428 against 0.080 with that
    constant at 0 s, 5.4x; 0.43 against 0.083, 5.2x at c97b80b; 4.4x at ef0b374, when the bound was 5x; 3.8x is what
    an 80% range of Gaussian errors needs, so today's range is ~35% wider than the errors need): a
    range twice as wide fails both."""
    pairs = _all_pairs(validation_logs)
    assert all(0 < p["lo"] <= p["ratio"] <= p["hi"] for p in pairs), pairs
    assert np.median([p["hi"] / p["lo"] for p in pairs]) <= 1.55, pairs
    err = np.median([abs(p["ratio"] - 1) for p in pairs])
    assert np.median([p["hi"] - p["lo"] for p in pairs]) <= 6 * err, (err, pairs)


@pytest.mark.slow
def test_calibration_never_further_off_than_zero_shot_by_more_than_its_range(validation_logs):
    """|calibrated - actual| <= |zero-shot - actual| + (hi - lo), in units of the actual mean step,
    held to the window's own range (before the sizes' scatter widens it, which would pass the
    1.43x below too): met since generation's constant for another run is 0 s (MATH 3B -> 7B 1.43x,
    range 1.25-1.63x -> 1.24x, zero-shot 1.05x)."""
    worse = [p for p in _all_pairs(validation_logs)
             if abs(p["ratio"] - 1) > abs(p["zero_shot"] - 1) + p["window_width"]]
    assert not worse, worse


@pytest.mark.slow
def test_the_guard_toward_the_priors_does_not_make_the_ladder_worse(validation_logs):
    """The fall-back past a 2x-wide stage range (``ranges.guard``), scored: it moves 8 of the 40
    pairs (a log-prob, update or generation range from 2.0x to 4.7x; GSM8K 32B as the window
    three times) and takes the median error from 8.6% to 8.3% (CPU, priors of ef0b374); no pair
    it moves ends more than 1% of its step further off. With generation's constant for another
    run at 0 s it still moves 8 (GSM8K 32B as the window three times), the median unmoved at 8.0%."""
    pairs = _all_pairs(validation_logs)
    moved = [p for p in pairs if p["moved"]]
    assert len(moved) >= 4, pairs  # exercised: a guard that never fires fails here
    assert all(abs(p["guarded"] - 1) <= abs(p["ratio"] - 1) + 0.01 for p in moved), moved
    assert all(p["guarded"] == p["ratio"] for p in pairs if not p["moved"])
    assert np.median([abs(p["guarded"] - 1) for p in pairs]) <= np.median([abs(p["ratio"] - 1) for p in pairs])
