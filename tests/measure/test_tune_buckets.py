"""The tuning loop shared by the serial and the Ray session (``measure.tuning.measure.tune_buckets``),
driven by a fake measurement: each bucket gets an equal share of the budget as its deadline (the
k-th of K buckets ends at k/K of it: no bucket borrows a later one's time), a winner is the first
config strictly faster than the default and every earlier config (a tie keeps the earlier one, so
the default wins ties and a re-run picks the same config), and the counts are over all buckets."""

from __future__ import annotations

import math

import pytest

from polytrace.measure.tuning import measure as M


def _run(monkeypatch, trials_by_bucket: dict, budget_s: float = 30.0):
    monkeypatch.setattr(M.time, "monotonic", lambda: 100.0)
    deadlines = {}

    def fake(bucket, deadline, bar):
        deadlines[bucket] = deadline
        default_time, trials = trials_by_bucket[bucket]
        return default_time, [bucket], trials

    results, tried, failed, _ = M.tune_buckets(list(trials_by_bucket), 4, budget_s, "fake", False, fake)
    return results, tried, failed, deadlines


def test_each_bucket_ends_at_its_share_of_the_budget(monkeypatch):
    buckets = {b: (1.0, [({"x": 1}, 0.5)]) for b in ("a", "b", "c")}
    _, _, _, deadlines = _run(monkeypatch, buckets, budget_s=30.0)
    assert deadlines == {"a": 110.0, "b": 120.0, "c": 130.0}


def test_a_tie_keeps_the_earlier_config_and_the_default_wins_its_ties(monkeypatch):
    buckets = {"a": (2.0, [({"x": 1}, 1.0), ({"x": 2}, 1.0), ({"x": 3}, 1.5)]),
               "b": (1.0, [({"x": 1}, 1.0), ({"x": 2}, math.inf)])}
    results, tried, failed, _ = _run(monkeypatch, buckets)
    assert results["a"]["x"] == 1 and results["a"]["time_s"] == 1.0 and results["a"]["default_time_s"] == 2.0
    assert results["b"].get("default") is True and results["b"]["time_s"] == 1.0
    assert (tried, failed) == (5, 1)  # every bucket's trials counted, the non-finite one rejected


@pytest.mark.parametrize("n", [1, 3])
def test_the_counts_add_over_buckets(monkeypatch, n):
    buckets = {f"b{i}": (1.0, [({"x": 1}, 2.0), ({"x": 2}, math.inf)]) for i in range(n)}
    _, tried, failed, _ = _run(monkeypatch, buckets)
    assert (tried, failed) == (2 * n, n)
