"""A calibration carried to another model size widens its step range by the sizes' scatter, in
quadrature with the window's own ends (``calibrate/ranges.range_over_rows``), computed by hand on a
one-row, one-stage estimate: with no split the window's range is the point itself, so the carried
range is exactly ``point x exp(-+scatter)``; with a window range of log half-widths d it is
``point x exp(-+hypot(d, scatter))``. A scatter applied at half strength or not at all fails."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from polytrace.calibrate.ranges import range_over_rows

ROWS = [SimpleNamespace(families={"gen": {("rollout", "gemm"): 8.0}})]
PER_STEP = [{"predicted": {"gen": 10.0, "step": 12.0}}]


@pytest.mark.parametrize("scatter", [0.0, 0.179, 0.5])
def test_a_point_estimate_widens_by_exactly_the_scatter(scatter):
    out = range_over_rows(ROWS, ["gen"], PER_STEP, {}, {}, (), scatter)
    assert out["step_s"] == pytest.approx([12.0 * math.exp(-scatter), 12.0 * math.exp(scatter)], rel=1e-12)


def test_the_windows_own_range_and_the_scatter_add_in_quadrature():
    # the window: gen's mean 10 s, its fitted constant 2 s, allowed 0-4 s; this estimate's gen is
    # 10 s of which 7 s work (3 s constant). Each allowed constant c' rescales the work by
    # (10 - c') / (10 - 2): c' = 0 gives 8.75 s, c' = 4 gives 7 x 6/8 + 4 = 9.25 s; with the
    # estimate's own 10 s the stage spans [8.75, 10], the 12 s step [10.75, 12]
    split = {"gen": {"mean_actual_s": 10.0, "constant_s": 2.0, "constant_range_s": [0.0, 4.0]}}
    rows = [SimpleNamespace(families={"gen": {("rollout", "gemm"): 7.0}})]
    plain = range_over_rows(rows, ["gen"], PER_STEP, {}, split, (), 0.0)["step_s"]
    assert plain == pytest.approx([10.75, 12.0], rel=1e-12)
    s = 0.179  # sqrt(2) x the leave-one-size-out RMS log ratio 0.127 (ranges.py's docstring)
    wide = range_over_rows(rows, ["gen"], PER_STEP, {}, split, (), s)["step_s"]
    down = math.log(12.0 / 10.75)
    assert wide == pytest.approx([12.0 * math.exp(-math.hypot(down, s)), 12.0 * math.exp(s)], rel=1e-12)
