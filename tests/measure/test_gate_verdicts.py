"""Three-way verdicts (``polytrace.measure.results.verdict``) and the level of every interval:

- the gate: few noisy rounds are "inconclusive" with a stated number of rounds, and rerunning with
  that many decides (unchanged for no change, regression for a 20% slowdown), at the advertised
  power;
- the Hodges-Lehmann intervals cover at 1 - alpha (tails of alpha/2 each), on simulated data;
- the aggregates' bootstrap intervals (gate and ab) have tails of alpha/2: their half-width is
  z_{1 - alpha/2} times the median's standard error, not z_{1 - alpha};
- the power computation's 80% holds on simulated data;
- p-values print with the digits that compare with alpha.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _results_synth import SHAPES, cli_main, make_result, write
from scipy.stats import norm
from test_gate_holes import entry, gate

from polytrace.measure.ab import paired
from polytrace.measure.results import Rule, compare, load_result
from polytrace.measure.results.render import format_p
from polytrace.measure.results.stats import mann_whitney_p
from polytrace.measure.results.verdict import classify, paired_interval, sample_size, shift_interval

ONE = SHAPES[:1]  # one shape: one gated benchmark (and its torch control)


def _gate(tmp_path, seed: int, n: int, factor: float = 1.0, noise: float = 0.05):
    b = write(tmp_path / f"b{seed}.json", make_result(seed=seed, n_rounds=n, noise=noise, shapes=ONE))
    c = write(tmp_path / f"c{seed}.json", make_result(seed=seed + 1000, n_rounds=n, noise=noise, shapes=ONE,
                                                      slowdown={ONE[0][0]: factor}))
    report = compare(load_result(b), load_result(c))
    (ours,) = [x for x in report.comparisons if x.gated]
    return report, ours, (b, c)


def test_few_noisy_rounds_are_inconclusive_with_a_stated_n_and_that_many_decide(tmp_path, capsys):
    report, ours, (b, c) = _gate(tmp_path, 0, 6)
    assert ours.status == "inconclusive" and report.exit_code == 3
    n = ours.rounds_to_decide
    assert 20 <= n <= 200, n  # 5% noise on both sides, no change: ~34 rounds at the true spread
    assert report.verdict == (f"INCONCLUSIVE: 1 benchmark and 1 weighted mean undecided; rerun with at least {n} "
                              "rounds each "
                              "(POLYTRACE_BENCH_ROUNDS=N (or pytest --benchmark-min-rounds=N) when running the suites)")
    assert f"~{n} rounds each would decide" in ours.note
    assert cli_main(["gate", str(b), str(c)]) == 3
    assert capsys.readouterr().out.startswith("polytrace gate: INCONCLUSIVE: 1 benchmark and 1 weighted mean "
                                              f"undecided; rerun with at least {n} rounds each")
    # rerun with the advised rounds: decided, at the advertised power (80%), over ten reruns
    statuses = [_gate(tmp_path, seed, n)[1].status for seed in range(1, 11)]
    assert "regression" not in statuses and statuses.count("unchanged") >= 6, statuses
    report, ours, _ = _gate(tmp_path, 1, n)
    if ours.status == "unchanged":
        assert -0.05 < ours.ci_low < 0 < ours.ci_high < 0.05 and report.exit_code == 0


def test_a_slowdown_on_three_rounds_is_inconclusive_and_the_stated_rounds_find_it(tmp_path):
    report, ours, _ = _gate(tmp_path, 0, 3, factor=1.2)
    assert ours.status == "inconclusive" and "3 vs 3 rounds cannot reach p < 0.002" in ours.note
    n = ours.rounds_to_decide
    assert 7 <= n <= 60, n
    found = [_gate(tmp_path, seed, n, factor=1.2)[1].status for seed in range(1, 11)]
    assert found.count("regression") >= 6 and "unchanged" not in found, found


def test_the_rule_is_three_way():
    t = 0.05
    assert classify(math.log(1.2), 1e-4, 0.1, 0.3, t, 0.002) == "regression"
    assert classify(math.log(1.2), 0.01, 0.01, 0.3, t, 0.002) == "inconclusive"  # beyond, not significant
    assert classify(math.log(1 / 1.2), 1e-4, -0.3, -0.1, t, 0.002) == "improvement"
    assert classify(0.02, 1e-4, 0.01, 0.03, t, 0.002) == "unchanged"  # significant but bounded within 5%
    assert classify(0.0, 0.9, -0.04, 0.06, t, 0.002) == "inconclusive"  # not bounded
    assert classify(0.0, 1.0, -math.inf, math.inf, t, 0.002) == "inconclusive"


@pytest.mark.parametrize("alpha", [0.2, 0.05])
def test_the_intervals_cover_at_one_minus_alpha(alpha):
    """With tails of alpha (not alpha/2) coverage would be ~1 - 2 alpha: 0.6 at alpha 0.2."""
    rng = np.random.default_rng(7)
    shift = paired_hits = 0
    trials = 400
    for _ in range(trials):
        base, cand = np.exp(rng.normal(0.0, 0.1, 9)), np.exp(rng.normal(0.03, 0.1, 11))
        lo, hi = shift_interval(base, cand, alpha)
        shift += lo <= 0.03 <= hi
        lo, hi = paired_interval(0.03 + 0.1 * rng.standard_t(4, 14), alpha)
        paired_hits += lo <= 0.03 <= hi
    sd = math.sqrt(alpha * (1 - alpha) / trials)
    for hits in (shift, paired_hits):
        assert 1 - alpha - 3 * sd <= hits / trials, (hits, alpha)
        assert hits / trials <= 1 - alpha + 3 * sd + 0.03, (hits, alpha)  # exact intervals are conservative


def test_an_interval_is_unbounded_when_the_rounds_are_too_few():
    assert shift_interval(np.ones(3), np.ones(3), 0.002) == (-math.inf, math.inf)  # 1 / C(6, 3) > 0.001
    assert paired_interval(np.zeros(9), 0.002) == (-math.inf, math.inf)  # 1 / 2**9 > 0.001
    lo, hi = paired_interval(np.linspace(-0.01, 0.01, 10), 0.002)  # 1 / 2**10 <= 0.001: the extremes
    assert (lo, hi) == pytest.approx((-0.01, 0.01))


N_QUANTILE = 400


def _quantile_rounds(spread: float, roll: int = 0) -> np.ndarray:
    """Normal quantiles, no sampling noise: the bootstrap's spread is the median's standard error."""
    return np.roll(spread * norm.ppf((np.arange(N_QUANTILE) + 0.5) / N_QUANTILE), roll)


@pytest.mark.parametrize("alpha", [0.2, 0.05])
def test_the_gate_aggregate_interval_has_tails_of_alpha_over_two(alpha):
    """One member, 400 rounds each side, 1% spread: the bootstrap difference of log medians has
    standard error sqrt(2) * 1.2533 * 0.01 / 20; the interval's half-width is z_{1-alpha/2} of them
    (1.28 at alpha 0.2, 1.96 at 0.05); tails of alpha would give 0.84 and 1.64."""
    base = [entry("tokens=1", 1e-3 * np.exp(_quantile_rounds(0.01)), weight=1.0)]
    cand = [entry("tokens=1", 1e-3 * np.exp(_quantile_rounds(0.01, 7)), weight=1.0)]
    (agg,) = gate(base, cand, rule=Rule(alpha=alpha)).aggregates
    half = (math.log(agg.ci_high) - math.log(agg.ci_low)) / 2
    z = half / (math.sqrt(2) * 1.2533 * 0.01 / math.sqrt(N_QUANTILE))
    assert abs(z - norm.ppf(1 - alpha / 2)) < 0.12, z


@pytest.mark.parametrize("alpha", [0.2, 0.05])
def test_the_ab_aggregate_interval_has_tails_of_alpha_over_two(alpha):
    _, lo, hi = paired.weighted_speedup([_quantile_rounds(0.01)], np.array([1.0]), alpha, np.random.default_rng(0))
    z = (math.log(hi) - math.log(lo)) / 2 / (1.2533 * 0.01 / math.sqrt(N_QUANTILE))
    assert abs(z - norm.ppf(1 - alpha / 2)) < 0.12, z


def test_rounds_to_detect_give_the_advertised_power():
    """The rounds advised to detect a change of the threshold (5%) with 5% noise per side: the U
    test at alpha 0.002 finds that change in ~80% of simulated runs (a factor 2 off would give
    ~45% or ~99%)."""
    detect, _ = sample_size(2 * 0.05 ** 2, 0.0, 0.05, 0.002, 7)
    rng = np.random.default_rng(8)
    hits = sum(mann_whitney_p(np.exp(rng.normal(0, 0.05, detect)), np.exp(rng.normal(math.log1p(0.05), 0.05, detect)))
               < 0.002 for _ in range(300))
    assert 0.70 <= hits / 300 <= 0.90, (detect, hits)


def test_pairs_to_decide_give_the_advertised_power():
    """No change, 3% pair noise: the pairs advised bound the change within +-5% in ~80% of runs."""
    ratios = np.random.default_rng(9).normal(0, 0.03, 12)
    _, need = paired.pairs_to_decide(ratios, 0.05, 0.002)
    rng = np.random.default_rng(10)
    bounded = 0
    for _ in range(200):
        lo, hi = paired_interval(rng.normal(0, 0.03, need), 0.002)
        bounded += -math.log1p(0.05) < lo and hi < math.log1p(0.05)
    assert 0.65 <= bounded / 200 <= 0.97, (need, bounded)


def test_p_values_print_the_digits_that_compare_with_alpha():
    assert format_p(0.00195) == "0.00195" and format_p(0.0523) == "0.0523" and format_p(None) == "-"
    assert format_p(1.2e-9) == "1.2e-09" and format_p(1.0) == "1"
    assert format_p(0.0019996, 0.002) == "0.0019996"  # would print as 0.002, beside "p < 0.002"
    assert format_p(0.002, 0.002) == "0.002" and format_p(0.0020004, 0.002) == "0.0020004"


def test_the_shared_core_judges_a_weighted_mean_and_words_verdicts_alike_for_gate_and_ab():
    """The pieces gate and ab share (measure/results/verdict.py, measure/results/render.py) on known answers:
    at a 5% threshold t = log(1.05) = 0.0488; a speedup's log below -t with its interval below 0 is
    a regression, the interval inside (-t, t) unchanged, anything else inconclusive."""
    from polytrace.measure.results.render import markdown_title
    from polytrace.measure.results.verdict import (
        change_interval,
        classify_speedup,
        fail_line,
        inconclusive_line,
        regressions_found,
    )

    assert classify_speedup(-0.10, -0.15, -0.05, 0.05) == "regression"
    assert classify_speedup(-0.10, -0.15, 0.01, 0.05) == "inconclusive"  # the interval reaches 0: not significant
    assert classify_speedup(-0.04, -0.045, -0.035, 0.05) == "unchanged"  # significant, but within the threshold
    assert classify_speedup(0.10, 0.05, 0.15, 0.05) == "improvement"
    assert classify_speedup(0.0, -0.04, 0.04, 0.05) == "unchanged"
    assert classify_speedup(0.0, -0.05, 0.04, 0.05) == "inconclusive"  # -0.05 < -0.0488: beyond the threshold
    lo, hi = change_interval(-math.inf, math.log(1.1))
    assert lo is None and hi == pytest.approx(0.1, rel=1e-12)
    assert change_interval(math.log(0.9), math.inf) == (pytest.approx(-0.1, rel=1e-12), None)
    assert regressions_found(2, 1) == ["2 regressions", "1 weighted-mean regression"] and regressions_found(0, 0) == []
    assert fail_line(["1 regression"], 2) == "FAIL: 1 regression; also 2 errors"
    assert fail_line(["1 regression"], 0) == "FAIL: 1 regression"
    assert inconclusive_line(0, "case", 1, "") == "INCONCLUSIVE: 1 weighted mean undecided"
    assert inconclusive_line(3, "benchmark", 2, "rerun") == \
        "INCONCLUSIVE: 3 benchmarks and 2 weighted means undecided; rerun"
    assert markdown_title("gate", "REFUSED", "REFUSED (1 error)") == "### polytrace gate: **REFUSED** (1 error)"
    assert markdown_title("ab", "FAIL", "FAIL: 2 regressions") == "### polytrace ab: **FAIL** (2 regressions)"
    assert markdown_title("ab", "PASS", "PASS") == "### polytrace ab: **PASS**"
