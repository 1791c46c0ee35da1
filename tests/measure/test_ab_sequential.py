"""``ab --until-decided`` on its statistical core, with simulated pairs (the CLI runs are in
test_ab_cli.py): the planned looks, the false-alarm rate kept at alpha over all looks (and what it
would be without the split), A/A runs that never alarm, slowdowns decided early, and the budget.

Simulated pairs: BASE times log-normal (10% spread between pairs: drift both sides share), CAND =
BASE x factor x exp(spread x t3 noise): heavy tails like preempted rounds on a shared machine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polytrace.errors import PolytraceError
from polytrace.measure.ab import paired, sequential
from polytrace.measure.ab.report import CaseResult, judge


def _case(i: int = 0) -> CaseResult:
    return CaseResult(id=f"packing/pack/ours/fwd/T={i}", suite="packing", family="packing", kernel="pack",
                      provider="ours", mode="fwd", shape_id=f"T={i}", shape={}, profile="p", seed=0, step=0,
                      weight=1.0)


def _pairs(rng, factor: float, spread: float):
    def draw(n: int):
        base = 1e-3 * np.exp(rng.normal(0.0, 0.1, n))
        return base, base * factor * np.exp(spread * rng.standard_t(3, n))
    return draw


def simulate(seq: sequential.Sequencer, draw, i: int = 0) -> CaseResult:
    """What ``measure`` does with ``more``: the first look's pairs, then as many as it asks for."""
    case = _case(i)
    more = seq.for_case(case)
    target = seq.plan.looks[0]
    while target:
        b, c = draw(target - case.pairs)
        case.base_rounds += b.tolist()
        case.cand_rounds += c.tolist()
        target = more(case)
    seq.done()
    return case


def test_the_looks_are_planned_and_the_first_reaches_alpha_per_look():
    plan = sequential.plan_looks(0.002)
    assert plan.looks == [13, 26, 52, 104, 208, 256] and plan.max_pairs == sequential.DEFAULT_MAX_PAIRS
    assert plan.alpha_per_look == pytest.approx(0.002 / 6)
    assert paired.min_p_value(13) < plan.alpha_per_look <= paired.min_p_value(12)
    small = sequential.plan_looks(0.002, 48)
    assert small.looks == [12, 24, 48] and small.alpha_per_look == pytest.approx(0.002 / 3)
    assert paired.min_p_value(small.looks[0]) < small.alpha_per_look
    assert sequential.plan_looks(0.05, 6).looks == [6]
    with pytest.raises(PolytraceError, match=r"--max-pairs 9: the first look needs 10 pairs .*use at least 10"):
        sequential.plan_looks(0.002, 9)


def test_the_false_alarm_rate_over_all_looks_stays_at_alpha():
    """alpha 0.1, a threshold of 0.1% (so a "regression" or "improvement" is any significant
    difference) and no true change, 100 runs through all six looks: alarms in at most alpha of the
    runs (4% measured). Judging every look at alpha itself instead alarms in 31%. A split too small
    is caught as with 200 runs (which measured 5.5% and 31.5%): each look at alpha / 3 alarms in 13%
    (13.5% of 200), at alpha / 2 in 16% (16.5%); alpha / 5 (7%, 7.5%) passes at either count."""
    def alarms(plan) -> float:
        rng = np.random.default_rng(1)
        cases = [simulate(sequential.Sequencer(plan, 0.001, 1, judge), _pairs(rng, 1.0, 0.05)) for _ in range(100)]
        assert all(c.status != "unchanged" for c in cases)  # +-0.1% cannot be bounded: every look is taken
        return sum(c.status in ("regression", "improvement") for c in cases) / len(cases)

    plan = sequential.plan_looks(0.1, 128)
    assert plan.looks == [7, 14, 28, 56, 112, 128]
    assert alarms(plan) <= 0.1
    plan.alpha_per_look = 0.1  # no split: six chances at alpha
    assert alarms(plan) > 0.2


def test_a_no_op_is_never_a_regression_in_40_runs():
    rng = np.random.default_rng(2)
    plan = sequential.plan_looks(0.002)
    seq = sequential.Sequencer(plan, 0.05, 40, judge)
    cases = [simulate(seq, _pairs(rng, 1.0, 0.05), i) for i in range(40)]
    assert {c.status for c in cases} <= {"unchanged", "inconclusive"}
    assert sum(c.status == "unchanged" for c in cases) >= 36  # 5% noise: bounded within +-5% by 52-104 pairs
    for c in cases:
        assert c.pairs == c.looks[-1] and c.looks == plan.looks[:len(c.looks)]
        assert -0.05 < c.ci_low and c.ci_high < 0.05 if c.status == "unchanged" else True


def test_a_2x_slowdown_stops_at_the_first_look_and_8pct_before_the_last():
    rng = np.random.default_rng(3)
    plan = sequential.plan_looks(0.002)
    for _ in range(5):
        c = simulate(sequential.Sequencer(plan, 0.05, 1, judge), _pairs(rng, 2.0, 0.05))
        assert c.status == "regression" and c.pairs == 13 and c.p_value < plan.alpha_per_look
    eight = [simulate(sequential.Sequencer(plan, 0.05, 1, judge), _pairs(rng, 1.08, 0.02)) for _ in range(10)]
    assert all(c.status == "regression" and c.pairs < 256 for c in eight), [(c.status, c.pairs) for c in eight]
    assert all(0.06 < c.change < 0.10 for c in eight)


def test_a_case_at_its_maximum_stays_inconclusive_and_says_so():
    rng = np.random.default_rng(4)
    plan = sequential.plan_looks(0.002, 26)
    c = simulate(sequential.Sequencer(plan, 0.05, 1, judge), _pairs(rng, 1.0, 0.3))  # 30% noise
    assert c.status == "inconclusive" and c.pairs == 26 and c.looks == [12, 24, 26] == plan.looks
    assert plan.stops[c.id] == "undecided at --max-pairs 26" and c.pairs_to_decide > 26


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_is_shared_and_first_looks_always_run():
    """One simulated second per pair, 100 s for 2 cases. The first case: at 26 pairs (26 s spent)
    26 more fit its share of what is left ((100 - 26) / 2 = 37 s), at 52 pairs 52 more do not (24 s).
    The second gets the 48 s left: 13 more pairs after its first look, not 26. Every case gets its
    first look, even over budget."""
    clock = FakeClock()
    rng = np.random.default_rng(5)
    draw_noise = _pairs(rng, 1.0, 0.3)  # undecided at every look

    def draw(n):
        clock.now += n
        return draw_noise(n)

    plan = sequential.plan_looks(0.002, budget_s=100.0)
    seq = sequential.Sequencer(plan, 0.05, 2, judge, clock=clock)
    first, second = simulate(seq, draw, 0), simulate(seq, draw, 1)
    assert first.looks == [13, 26, 52] and plan.stops[first.id] == ("undecided when its share of --budget-s 100 "
                                                                    "was spent (52 pairs)")
    assert second.looks == [13, 26] and clock.now == 78 and "share of --budget-s" in plan.stops[second.id]
    over = sequential.Sequencer(sequential.plan_looks(0.002, budget_s=1.0), 0.05, 1, judge, clock=clock)
    assert simulate(over, draw, 2).pairs == 13  # over budget from the start: the first look only


def test_judged_at_alpha_per_look_the_interval_is_wider():
    """The split applies to the interval as well as the test: fewer cases end "unchanged" at a look
    judged at alpha / 6 than at alpha."""
    ratios = np.random.default_rng(6).normal(0.0, 0.05, 26)
    lo_k, hi_k = _interval(ratios, 0.002 / 6)
    lo_1, hi_1 = _interval(ratios, 0.002)
    assert lo_k < lo_1 < hi_1 < hi_k


def _interval(ratios, alpha):
    from polytrace.measure.results.verdict import paired_interval

    lo, hi = paired_interval(ratios, alpha)
    return math.expm1(lo), math.expm1(hi)
