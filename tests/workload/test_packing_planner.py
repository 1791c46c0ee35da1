"""Planner properties (hypothesis) and bad-input errors. Numpy only."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polytrace_kernels.packing import (
    ALGORITHMS,
    ATTENTION_COEF,
    attention_cost,
    balance_partitions,
    bubble_order,
    plan_microbatches,
    plan_stats,
    sequence_costs,
)

SETTINGS = settings(max_examples=60, deadline=None)
lengths_st = st.lists(st.integers(min_value=0, max_value=5000), min_size=0, max_size=80)


def _check_cover(parts, n):
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(n))  # every index exactly once


def _optimum(costs, k: int) -> float:
    """The optimal largest partition cost, by branch and bound (small inputs only)."""
    costs = sorted((float(c) for c in costs), reverse=True)
    best = [sum(costs)]
    loads = [0.0] * k

    def place(i: int) -> None:
        if i == len(costs):
            best[0] = min(best[0], max(loads))
            return
        tried = set()
        for j in range(k):
            if loads[j] in tried or loads[j] + costs[i] >= best[0]:
                continue
            tried.add(loads[j])
            loads[j] += costs[i]
            place(i + 1)
            loads[j] -= costs[i]

    place(0)
    return best[0]


@SETTINGS
@example(lengths=[38, 39, 42, 29], k=3, algorithm="greedy", cost="tokens")  # optimum 67 > 4/3 x bound 49.3
@given(lengths_st, st.integers(1, 12), st.sampled_from(ALGORITHMS), st.sampled_from(["tokens", "attention"]))
def test_balance_partitions_covers_every_index_once(lengths, k, algorithm, cost):
    parts = balance_partitions(lengths, k, cost=cost, algorithm=algorithm)
    assert len(parts) == k
    _check_cover(parts, len(lengths))
    report = plan_stats(lengths, parts, cost)
    assert report.max_cost >= report.lower_bound - 1e-9 * max(1.0, report.lower_bound)
    costs = sequence_costs(lengths, cost)
    tol = 1e-9 * max(1.0, report.max_cost)
    # list scheduling's bound (greedy; local search's stopping rule gives the same): the fullest
    # partition exceeds the mean by less than one item
    biggest = float(costs.max()) if costs.size else 0.0
    assert report.max_cost <= float(costs.sum()) / k + biggest * (1 - 1 / k) + tol
    # LPT and the differencing method stay within 4/3 of the optimum (not of the lower bound: with
    # k + 1 items two must share, e.g. [38, 39, 42, 29] into 3 has optimum 67 against a bound of 49.3)
    if len(lengths) <= 9:
        assert report.max_cost <= 4 / 3 * _optimum(costs, k) + tol


@SETTINGS
@given(lengths_st, st.integers(1, 10), st.integers(1, 3), st.sampled_from(ALGORITHMS))
def test_max_tokens_is_a_hard_bound(lengths, k, slack, algorithm):
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size == 0:
        return
    # a bound that is feasible with room to spare: max(longest, 2 * ceil(total / k)) * slack
    bound = int(max(arr.max(), 2 * -(-int(arr.sum()) // k), 1)) * slack
    parts = balance_partitions(lengths, k, max_tokens=bound, algorithm=algorithm)
    _check_cover(parts, len(lengths))
    assert all(int(arr[p].sum()) <= bound for p in parts)


@SETTINGS
@given(lengths_st, st.integers(1, 9), st.sampled_from(ALGORITHMS))
def test_equal_size_sizes_differ_by_at_most_one(lengths, k, algorithm):
    parts = balance_partitions(lengths, k, equal_size=True, algorithm=algorithm)
    _check_cover(parts, len(lengths))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@SETTINGS
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=120), st.integers(1, 8), st.integers(0, 3),
       st.sampled_from(["tokens", "attention"]))
def test_plan_microbatches_properties(lengths, ranks, extra, cost):
    arr = np.asarray(lengths, dtype=np.int64)
    budget = int(arr.max()) + extra * 1000
    plan = plan_microbatches(lengths, ranks, budget, cost=cost)
    assert len(plan.ranks) == ranks
    assert all(len(mbs) == plan.n_microbatches for mbs in plan.ranks)  # lock-step
    _check_cover([mb for mbs in plan.ranks for mb in mbs], len(lengths))
    assert all(int(arr[mb].sum()) <= budget for mbs in plan.ranks for mb in mbs)
    assert plan.n_microbatches >= plan.min_microbatches
    most = max(int(arr[[i for mb in mbs for i in mb]].sum()) for mbs in plan.ranks)
    assert plan.min_microbatches == -(-most // budget)  # the ceiling: no plan of these ranks needs fewer
    assert plan.max_microbatch_tokens <= budget
    assert plan.imbalance >= 1.0 - 1e-12 and plan.gap >= -1e-12
    # lock-step cost: at least the heaviest rank, at most the sum of every rank's cost
    rank_costs = [sum(c) for c in plan.costs]
    assert plan.lockstep_cost >= max(rank_costs) - 1e-6
    assert plan.lockstep_cost <= sum(rank_costs) + 1e-6


def test_kk_ls_beats_greedy_and_kk_on_a_skewed_batch():
    rng = np.random.default_rng(3)
    wins = room = 0
    for _ in range(20):
        lengths = np.minimum(rng.lognormal(7.5, 1.0, 96).astype(np.int64), 32768) + 200
        best = {a: plan_stats(lengths, balance_partitions(lengths, 8, cost="attention", algorithm=a),
                              "attention").max_cost for a in ALGORITHMS}
        lower = plan_stats(lengths, [list(range(96))] + [[]] * 7, "attention").lower_bound
        assert best["kk+ls"] <= best["kk"] and best["kk+ls"] <= best["greedy"]  # never worse
        if min(best["kk"], best["greedy"]) > lower:  # room to improve
            room += 1
            wins += best["kk+ls"] < min(best["kk"], best["greedy"])
    assert room >= 10 and wins >= room // 2, (wins, room)


def test_k_larger_than_number_of_sequences():
    parts = balance_partitions([5, 3, 9], 6)
    assert len(parts) == 6 and sum(1 for p in parts if p) == 3
    _check_cover(parts, 3)
    report = plan_stats([5, 3, 9], parts)
    assert report.max_cost == 9 and report.lower_bound == 9 and report.gap == 0.0


def test_all_equal_lengths_split_evenly():
    parts = balance_partitions([100] * 64, 8)
    assert sorted(len(p) for p in parts) == [8] * 8
    report = plan_stats([100] * 64, parts)
    assert report.imbalance == 1.0 and report.gap == 0.0


def test_one_giant_sequence_sets_the_bound():
    lengths = [100_000] + [100] * 50
    parts = balance_partitions(lengths, 4)
    report = plan_stats(lengths, parts)
    assert report.lower_bound == 100_000 and report.max_cost == 100_000  # the giant sits alone
    assert [0] in parts


def test_empty_input():
    assert balance_partitions([], 3) == [[], [], []]
    report = plan_stats([], [[], [], []])
    assert report.imbalance == 1.0 and report.lower_bound == 0.0
    plan = plan_microbatches([], 4, 100)
    assert plan.ranks == [[], [], [], []] and plan.n_microbatches == 0


def test_lower_bound_and_gap_numbers():
    report = plan_stats([4, 4, 3, 3, 2], [[0, 4], [1, 2], [3]])
    assert report.costs == [6.0, 7.0, 3.0]
    assert report.lower_bound == 6.0  # ceil(16 / 3)
    assert report.imbalance == pytest.approx(7 / (16 / 3))
    assert report.gap == pytest.approx(7 / 6 - 1)


def test_attention_cost_model():
    costs = sequence_costs([0, 1, 1000], "attention")
    assert costs.tolist() == [0, ATTENTION_COEF + 1, ATTENTION_COEF * 1000 + 1000**2]
    assert sequence_costs([10], attention_cost(4)).tolist() == [140]
    assert sequence_costs([3, 4], lambda x: x * 2.5).tolist() == [7.5, 10.0]


def test_bubble_order_puts_light_microbatches_at_both_ends():
    assert bubble_order(5) == [4, 2, 0, 1, 3]
    plan = plan_microbatches([4000, 3000, 2000, 1000, 500], 1, 4000)
    costs = plan.costs[0]
    assert costs[0] < max(costs) and costs[-1] < max(costs)
    assert plan_microbatches([4000, 3000, 2000, 1000, 500], 1, 4000, order="descending").costs[0] == \
        sorted(costs, reverse=True)


def test_microbatch_steps_align_across_ranks():
    rng = np.random.default_rng(0)
    lengths = rng.integers(100, 8000, 256)
    plan = plan_microbatches(lengths, 4, 16000, order="descending")
    for rank_costs in plan.costs:  # each rank heaviest-first, so step m pairs similar micro-batches
        assert rank_costs == sorted(rank_costs, reverse=True)


@pytest.mark.parametrize("bad, match", [
    ([3, -1], "non-negative"),
    ([1.5, 2], "integers"),
    (["a"], "integers"),
    ([[1, 2]], "1-D"),
    ([float("nan")], "integers"),
])
def test_bad_lengths(bad, match):
    with pytest.raises(ValueError, match=match):
        balance_partitions(bad, 2)
    with pytest.raises(ValueError, match=match):
        plan_microbatches(bad, 2, 100)


@pytest.mark.parametrize("k", [0, -3, 1.5, True, "2"])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must"):
        balance_partitions([1, 2], k)


def test_impossible_bounds_are_clear_errors():
    with pytest.raises(ValueError, match="max_tokens=5 is smaller than sequence 1"):
        balance_partitions([3, 9], 2, max_tokens=5)
    with pytest.raises(ValueError, match="cannot fit into 2 partitions"):
        balance_partitions([5, 5, 5], 2, max_tokens=6)
    with pytest.raises(ValueError, match="max_tokens_per_microbatch=100 is smaller than sequence 0"):
        plan_microbatches([200, 50], 2, 100)
    with pytest.raises(ValueError, match="dp_ranks"):
        plan_microbatches([2], 0, 100)
    with pytest.raises(ValueError, match="cost must be"):
        balance_partitions([2], 1, cost="flops")
    with pytest.raises(ValueError, match="algorithm must be"):
        balance_partitions([2], 1, algorithm="magic")
    with pytest.raises(ValueError, match="finite non-negative"):
        balance_partitions([2], 1, cost=lambda x: -x)


def test_planner_imports_without_torch():
    import subprocess

    code = ("import sys; import polytrace_kernels.packing; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))


def _best_fit_decreasing_by_hand(tokens, capacity):
    """Best-fit decreasing, the textbook way: each item, longest first (ties in index order), into
    the bin with the least free room that still holds it (ties: the lowest bin), else a new bin."""
    order = sorted(range(len(tokens)), key=lambda i: -tokens[i])
    free, assign = [], [0] * len(tokens)
    for i in order:
        fits = [b for b, room in enumerate(free) if room >= tokens[i]]
        if fits:
            b = min(fits, key=lambda b: (free[b], b))
        else:
            b = len(free)
            free.append(capacity)
        free[b] -= tokens[i]
        assign[i] = b
    return assign, len(free)


@SETTINGS
@given(st.lists(st.integers(1, 64), min_size=0, max_size=60), st.integers(64, 160))
@example([6, 8, 4, 6, 16, 8], 64)
def test_best_fit_decreasing_is_the_textbook_one(lengths, capacity):
    """Bins filled exactly included (an item whose size equals a bin's free room goes there): the
    planner's fallback when its balancing cannot fit a rank into the fewest micro-batches."""
    from polytrace_kernels.packing.partition import _best_fit_decreasing

    assign, bins = _best_fit_decreasing(np.asarray(lengths, dtype=np.int64), capacity)
    assert (assign.tolist(), bins) == _best_fit_decreasing_by_hand(lengths, capacity)


def test_the_fewest_micro_batches_is_a_ceiling():
    plan = plan_microbatches([50, 50, 50], 1, 100)
    assert plan.min_microbatches == plan.n_microbatches == 2


def test_sequences_that_fill_micro_batches_exactly_need_no_more():
    """48 tokens into micro-batches of 16: three, each filled exactly (16; 8 + 8; 6 + 6 + 4)."""
    plan = plan_microbatches([6, 8, 4, 6, 16, 8], 1, 16)
    assert plan.n_microbatches == 3
    assert sorted(plan.tokens[0]) == [16, 16, 16]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("cost", ["tokens", "attention"])
def test_partitions_filled_to_max_tokens_exactly_are_feasible(algorithm, cost):
    """30 tokens into 3 partitions of at most 10: only exact fills ({7, 3}, {6, 4}, {5, 5}), which
    every algorithm finds (LPT's least-loaded partition, or least-cost one that fits, is filled to
    the bound; KK's partition is accepted at the bound); micro-batches too (3 of 10 tokens)."""
    lengths = [6, 4, 5, 5, 7, 3]
    parts = balance_partitions(lengths, 3, cost=cost, max_tokens=10, algorithm=algorithm)
    _check_cover(parts, len(lengths))
    assert sorted(sum(lengths[i] for i in p) for p in parts) == [10, 10, 10]
    plan = plan_microbatches(lengths, 1, 10, cost=cost, algorithm=algorithm)
    assert plan.n_microbatches == plan.min_microbatches == 3 and sorted(plan.tokens[0]) == [10, 10, 10]


def test_plan_reports_its_largest_microbatch_and_lockstep_imbalance():
    rng = np.random.default_rng(7)
    lengths = rng.integers(50, 3000, 60)
    plan = plan_microbatches(lengths, 3, 6000, cost="attention")
    assert plan.max_microbatch_tokens == max(t for rank in plan.tokens for t in rank)
    mean = float(sequence_costs(lengths, "attention").sum()) / 3
    assert plan.lockstep_imbalance == pytest.approx(plan.lockstep_cost / mean, rel=1e-12)
    assert plan.lockstep_cost == pytest.approx(float(np.max(np.asarray(plan.costs), axis=0).sum()), rel=1e-12)


def test_attention_cost_with_a_fractional_coefficient():
    assert sequence_costs([10, 3, 0], attention_cost(2.5)).tolist() == [125.0, 16.5, 0.0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_partitions_list_their_indices_in_ascending_order(algorithm):
    """As documented; 300 sequences, so an unstable sort of the assignment would show."""
    lengths = np.random.default_rng(8).integers(1, 500, 300)
    parts = balance_partitions(lengths, 4, algorithm=algorithm)
    assert all(p == sorted(p) for p in parts)
    _check_cover(parts, 300)


@pytest.mark.parametrize("lengths, ranks, budget", [
    ([30, 58, 21, 17, 2, 34, 3, 13, 24, 6], 2, 64),
    ([42, 52, 39, 40, 27, 17, 31, 18, 40, 48, 35], 1, 81),
    ([12, 11, 22, 18, 23, 28, 15, 19, 12, 50, 59, 34], 2, 85),
])
def test_the_budget_holds_under_a_cost_that_is_not_the_token_count(lengths, ranks, budget):
    """attention_cost(5) (a small model: L^2 outweighs 5 L) orders micro-batches unlike their token
    counts. These budgets are tight enough that the balancing heuristics overfill and the planner
    falls back to best-fit decreasing; its local search, balancing cost, must keep every micro-batch
    within the token budget (a move that evens the cost can add tokens to the lighter side)."""
    plan = plan_microbatches(lengths, ranks, budget, cost=attention_cost(5))
    arr = np.asarray(lengths)
    _check_cover([mb for mbs in plan.ranks for mb in mbs], len(lengths))
    assert all(int(arr[mb].sum()) <= budget for mbs in plan.ranks for mb in mbs)
    assert plan.max_microbatch_tokens <= budget
