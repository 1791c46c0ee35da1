"""The three-way rule at its edges (``measure/results/verdict.py``, shared by the gate and ``ab``).

The documented rule is strict: a regression needs ``p < alpha`` and ``d > t``; "unchanged" needs the
interval inside the open ``(-t, t)``. The exact signed-rank test's p-values are 2 / 2^n, so a p equal
to alpha is reachable (alpha = 2 / 1024 at 10 pairs) and must not count as significant. Past 2000
pairs the interval is the sign test's for the median, cut at Binomial(n, 1/2)'s alpha / 2 quantile on
each side: checked here against the normal approximation of that quantile, an independent
reference accurate to about one order statistic at n = 2001.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from polytrace.measure.ab.paired import min_p_value, pairs_needed
from polytrace.measure.results.verdict import MAX_WALSH_PAIRS, classify, paired_interval

T = math.log1p(0.05)
INF = math.inf


def test_a_p_value_equal_to_alpha_is_not_significant():
    alpha = min_p_value(10)  # 2 / 1024, reachable by the exact test
    assert alpha == 2.0 / 1024
    assert classify(2 * T, alpha, -INF, INF, 0.05, alpha) == "inconclusive"
    assert classify(-2 * T, alpha, -INF, INF, 0.05, alpha) == "inconclusive"
    assert classify(2 * T, alpha * 0.999, -INF, INF, 0.05, alpha) == "regression"
    assert classify(-2 * T, alpha * 0.999, -INF, INF, 0.05, alpha) == "improvement"


def test_a_change_at_exactly_the_threshold_is_not_beyond_it():
    assert classify(T, 1e-9, 0.9 * T, 1.1 * T, 0.05, 0.002) == "inconclusive"
    assert classify(-T, 1e-9, -1.1 * T, -0.9 * T, 0.05, 0.002) == "inconclusive"


def test_pairs_needed_reach_p_strictly_below_alpha():
    assert pairs_needed(0.002) == 10  # 2 / 1024 = 0.00195 < 0.002; 9 pairs give 0.0039
    assert pairs_needed(2.0 / 1024) == 11  # 10 pairs reach exactly alpha, not below it


@pytest.mark.parametrize("alpha", [0.002, 0.01])
def test_the_sign_test_interval_past_the_walsh_limit_cuts_at_alpha_over_two_per_side(alpha):
    n = MAX_WALSH_PAIRS + 1
    r = np.arange(n, dtype=np.float64) - n // 2  # the order statistics are their own indices
    lo, hi = paired_interval(r, alpha)
    # c-th order statistic from each end, c ~ n/2 - z_{1 - alpha/2} sqrt(n) / 2 (+ 1/2 continuity)
    c = n / 2.0 - norm.ppf(1.0 - alpha / 2.0) * math.sqrt(n) / 2.0
    assert abs((lo + n // 2 + 1) - c) < 2.0 and abs((n - n // 2 - hi) - c) < 2.0, (lo, hi, c)
    # alpha in one tail instead of alpha / 2 would cut z_{1-alpha} (2.88 against 3.09 at 0.002):
    # ~4.7 order statistics narrower at n = 2001, outside the 2 allowed above
    narrow = n / 2.0 - norm.ppf(1.0 - alpha) * math.sqrt(n) / 2.0
    assert narrow - c > 4.0


@pytest.mark.parametrize("n, m, alpha", [(8, 8, 0.05), (10, 7, 0.02), (6, 9, 0.1)])
def test_the_gates_interval_is_the_set_of_shifts_the_exact_u_test_does_not_reject(n, m, alpha):
    """Hodges-Lehmann's interval inverts the rank test: a shift just inside either end is not
    rejected by scipy's exact two-sided Mann-Whitney test at alpha, one just outside is. An end
    one order statistic inward or outward breaks one side."""
    from scipy.stats import mannwhitneyu

    from polytrace.measure.results.verdict import shift_interval

    rng = np.random.default_rng(3 + n)
    x, y = np.exp(rng.normal(0.0, 0.05, n)), np.exp(rng.normal(0.03, 0.05, m))
    lo, hi = shift_interval(x, y, alpha)

    def p(d):
        return mannwhitneyu(np.log(y) - d, np.log(x), method="exact").pvalue

    eps = 1e-9
    assert p(lo + eps) >= alpha and p(hi - eps) >= alpha
    assert p(lo - eps) < alpha and p(hi + eps) < alpha


def _gate(base_rounds: dict, cand_rounds: dict, **kw):
    from test_gate_holes import entry, gate

    return gate([entry(k, np.asarray(v), weight=1.0) for k, v in base_rounds.items()],
                [entry(k, np.asarray(v), weight=1.0) for k, v in cand_rounds.items()], **kw)


def test_a_member_with_too_few_rounds_on_one_side_is_left_out_of_the_bootstrap():
    """The gate's docstring: a member with fewer than MIN_BOOTSTRAP_ROUNDS (5) rounds in either file
    is left out of its aggregate's interval, with a note; 30 baseline rounds do not make up for 4."""
    rng = np.random.default_rng(0)
    r = {k: 1e-3 * np.exp(rng.normal(0, 0.01, 30)) for k in ("tokens=1", "tokens=2")}
    cand = {"tokens=1": r["tokens=1"], "tokens=2": r["tokens=2"][:4]}
    report = _gate(r, cand)
    assert any("1 member(s)" in n and "fewer than 5 rounds left out" in n for n in report.notes), report.notes


def test_rounds_whose_least_p_equals_alpha_are_said_to_be_too_few():
    """3 rounds a side: the exact U test's least p is 2 / C(6, 3) = 0.1; at alpha 0.1 no result can
    be significant, and the inconclusive comparison says so rather than blaming its interval."""
    from polytrace.measure.results import Rule

    report = _gate({"tokens=1": [1.0e-3, 1.01e-3, 0.99e-3]}, {"tokens=1": [1.2e-3, 1.21e-3, 1.19e-3]},
                   rule=Rule(alpha=0.1))
    (comp,) = [c for c in report.comparisons if c.status != "new"]
    assert comp.status == "inconclusive" and comp.p_value == pytest.approx(0.1, rel=1e-12)
    assert comp.note.startswith("3 vs 3 rounds cannot reach p < 0.1"), comp.note
