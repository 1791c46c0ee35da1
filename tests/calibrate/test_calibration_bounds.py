"""Physical bounds of a calibration (issue 38's surviving mutant, issue 36 item 6): a stage's
constant seconds are bounded by what the window's *shortest* step leaves once its work runs at the
peak roofline, never by what the longest leaves; a given GPU the log's steps beat is named, not
silently priced with impossible constants."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.calibrate.fit import StepData, fit

# A flat window (modelled work 4 s on every step, padded batches) whose measured generation moves
# 8.5-11 s with noise: the window cannot split constant from per-token cost, so the range of
# constants it allows runs up to the bound itself. The work's peak-roofline seconds are 2 s.
TIMES = [10.0, 9.0, 11.0, 10.5, 8.5, 10.2, 9.6, 10.8]
BOUND_S = 2.0


def _flat_rows(times=TIMES, bound=BOUND_S, work=4.0):
    return [StepData(i, {}, {"gen": t, "step": t + 1.0}, {}, x={"gen": {"rollout": work}},
                     bound={"gen": {"rollout": bound}}) for i, t in enumerate(times)]


def test_constant_bound_is_what_the_shortest_step_leaves():
    """8.5 s (the shortest step) - 2 s (its work at the peak roofline) = 6.5 s: the constant and the
    top of its range stop there (the longest step would allow 9 s, the mean 7.95 s). At 6.5 s of
    constant every step's work is still at or above its roofline seconds."""
    cal = fit(_flat_rows(), ["gen"], source="t")
    leaves = min(TIMES) - BOUND_S
    info = cal.split["gen"]
    assert not info["identified"]
    assert info["constant_range_s"][1] == pytest.approx(leaves, rel=1e-12)
    assert cal.overhead_s["gen"] <= leaves + 1e-12
    # the range's top end leaves each step's work at or above the bound
    for t in TIMES:
        assert t - info["constant_range_s"][1] >= BOUND_S - 1e-9


def test_constant_bound_follows_the_shortest_step_wherever_it_sits():
    """Moving the shortest step through the window moves the bound with it, by exactly its time."""
    for at in (0, 3, len(TIMES) - 1):
        times = list(TIMES)
        times[at] = 7.25
        cal = fit(_flat_rows(times), ["gen"], source="t")
        assert cal.split["gen"]["constant_range_s"][1] == pytest.approx(7.25 - BOUND_S, rel=1e-12)


def test_the_fitted_constant_is_clipped_at_the_shortest_steps_room():
    """A window whose work the priors price far below the measured time and whose one short step
    leaves little room: the fit would like a large constant; it gets at most that room (0.5 s), and
    the deviation takes the rest."""
    times = [10.0, 10.2, 9.9, 2.5, 10.1, 10.0]
    rows = _flat_rows(times, bound=2.0, work=0.5)
    cal = fit(rows, ["gen"], source="t")
    assert cal.overhead_s["gen"] <= 0.5 + 1e-12
    assert cal.split["gen"]["constant_range_s"][1] == pytest.approx(0.5, rel=1e-12)
    assert np.isfinite(cal.deviation["rollout"])


def test_a_stage_that_beats_its_bound_has_exactly_no_constant():
    """A stage whose shortest step (1.8 s) is under its work's peak-roofline seconds (2 s), as on a
    GPU the log contradicts: nothing is left for a constant, which is exactly 0 (issue 38 saw the
    solver's 3.44e-29 s printed), and the work is never priced under the roofline."""
    cal = fit(_flat_rows([3.0, 1.8, 2.5, 2.9, 2.2]), ["gen"], source="t")
    assert cal.overhead_s["gen"] == 0.0
    assert cal.split["gen"]["constant_range_s"] == [0.0, 0.0]
    assert cal.deviation["rollout"] >= cal.min_deviation["rollout"] > 0
