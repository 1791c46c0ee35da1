"""``algorithm="kk"`` is the Karmarkar-Karp largest differencing method, checked against a plain
reference written here (multiway LDM on explicit sets, no label or parent tricks), on small
instances: the free variant and the equal-size one. The default ``kk+ls`` starts from KK and then
searches locally, which hides a KK that merges heavy with heavy; these tests call ``kk`` alone.

Reference (Korf, "Multi-way number partitioning", IJCAI 2009, section 2.2; Michiels et al. 2003
for the balanced variant): every number starts as a partial solution of k sets (the number, then
k - 1 empty sets); repeatedly take the two partial solutions with the largest spread (largest
minus smallest set sum) and combine them by joining the largest set of one with the smallest of
the other, the second largest with the second smallest, and so on. Ties: the larger largest set
first, then the older solution; numbers in decreasing order (stable) are older than any
combination, as in the implementation.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polytrace_kernels.packing import balance_partitions


def _push(heap, state, counter):
    sums = [s for s, _ in state]
    heapq.heappush(heap, (-(sums[0] - sums[-1]), -sums[0], counter, state))


def _combine(a, b):
    joined = [(sa + sb, ia | ib) for (sa, ia), (sb, ib) in zip(a, reversed(b))]  # largest with smallest
    return sorted(joined, key=lambda x: -x[0])


def reference_kk(costs, k: int) -> list[frozenset]:
    """Free multiway LDM; returns the k sets of indices."""
    heap, counter = [], 0
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):  # stable: equal costs keep index order
        _push(heap, [(costs[i], frozenset([i]))] + [(0, frozenset())] * (k - 1), counter)
        counter += 1
    while len(heap) > 1:
        a, b = heapq.heappop(heap)[3], heapq.heappop(heap)[3]
        _push(heap, _combine(a, b), counter)
        counter += 1
    return [s for _, s in heap[0][3]]


def reference_kk_equal(costs, k: int) -> list[frozenset]:
    """Balanced LDM: the numbers in increasing order, k at a time (zero dummies in front when n is
    not a multiple of k), each group a partial solution of k one-number sets; sets stay equal-sized."""
    order = sorted(range(len(costs)), key=lambda i: costs[i])
    pad = (-len(costs)) % k
    values = [(0, frozenset())] * pad + [(costs[i], frozenset([i])) for i in order]
    heap = []
    for counter, off in enumerate(range(0, len(values), k)):
        _push(heap, values[off:off + k][::-1], counter)
    counter = len(heap)
    while len(heap) > 1:
        a, b = heapq.heappop(heap)[3], heapq.heappop(heap)[3]
        _push(heap, _combine(a, b), counter)
        counter += 1
    return [s for _, s in heap[0][3]]


def _sums(parts, costs) -> list:
    return sorted((sum(costs[i] for i in p) for p in parts), reverse=True)


def test_the_textbook_example():
    # 8, 7, 6, 5, 4 into two: KK ends with a difference of 2 (16 / 14) where 15 / 15 exists
    parts = balance_partitions([8, 7, 6, 5, 4], 2, algorithm="kk")
    assert _sums(parts, [8, 7, 6, 5, 4]) == [16, 14]
    assert {frozenset(p) for p in parts} == {frozenset({0, 2}), frozenset({1, 3, 4})}
    assert set(reference_kk([8, 7, 6, 5, 4], 2)) == {frozenset({0, 2}), frozenset({1, 3, 4})}
    assert balance_partitions([8, 7, 6, 5, 4], 2, algorithm="kk+ls") != parts  # local search finds 15 / 15


SMALL = settings(max_examples=150, deadline=None)


@SMALL
@given(lengths=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=14),
       k=st.integers(min_value=2, max_value=5))
def test_kk_equals_the_reference_on_integer_lengths(lengths, k):
    """Integer token counts (ties everywhere): the partition sums agree exactly."""
    parts = balance_partitions(lengths, k, algorithm="kk")
    assert _sums(parts, lengths) == _sums(reference_kk(lengths, k), lengths)


@SMALL
@given(lengths=st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=14, unique=True),
       k=st.integers(min_value=2, max_value=5))
def test_kk_equals_the_reference_set_for_set(lengths, k):
    """Distinct lengths under a cost with no ties (attention-like, length^1.37): the same sets."""
    costs = [float(x) ** 1.37 for x in lengths]
    parts = balance_partitions(lengths, k, cost=lambda a: np.asarray(a, dtype=np.float64) ** 1.37, algorithm="kk")
    assert {frozenset(p) for p in parts} == set(reference_kk(costs, k)) | ({frozenset()} if len(lengths) < k else set())


@SMALL
@given(lengths=st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=15, unique=True),
       k=st.integers(min_value=2, max_value=4))
def test_equal_size_kk_equals_the_balanced_reference(lengths, k):
    costs = [float(x) ** 1.37 for x in lengths]
    parts = balance_partitions(lengths, k, cost=lambda a: np.asarray(a, dtype=np.float64) ** 1.37, algorithm="kk",
                               equal_size=True)
    assert {frozenset(p) for p in parts} == set(reference_kk_equal(costs, k))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("seed", range(5))
def test_kk_on_a_skewed_batch_is_the_reference(seed):
    """A long-tailed batch like the workloads' (a few long responses): where a KK that joined
    heavy with heavy would put two long sequences together."""
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(50, 400, 40), rng.integers(4000, 16000, 4)]).tolist()
    for k in (2, 4, 8):
        parts = balance_partitions(lengths, k, algorithm="kk")
        assert _sums(parts, lengths) == _sums(reference_kk(lengths, k), lengths)
