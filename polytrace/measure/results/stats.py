"""The gate's statistics, safe over every positive finite input: medians that cannot overflow,
ratios in log space, the exact Mann-Whitney bound, and a bootstrap with bounded memory.

scipy is imported on first use.
"""

from __future__ import annotations

import math

import numpy as np

# A member of an aggregate joins the bootstrap only with at least this many rounds in both files:
# the bootstrap median of 3 rounds takes just 3 values (of 4 rounds, 7), so its quantiles say
# little; with 5 rounds the interval is still coarse but no longer degenerate.
MIN_BOOTSTRAP_ROUNDS = 5
# Resampling more rounds than this per member only costs time: the bootstrap then runs on a seeded
# random subset of this size, which widens the interval (conservative: never a false alarm).
MAX_BOOTSTRAP_ROUNDS = 2000
# Elements generated per bootstrap chunk (16 MB of int64 indices): memory stays bounded whatever
# the number of rounds or resamples.
_CHUNK_ELEMENTS = 2_000_000
# Bootstrap resamples: >= 10 beyond each end of the 1 - alpha interval, capped so a tiny alpha
# cannot ask for billions (past the cap the interval's ends are the extreme resamples: wider).
MIN_BOOT, MAX_BOOT = 2000, 50_000


def median_of(values: np.ndarray) -> float:
    """The median, computed so two huge middle values cannot overflow (numpy's (a + b) / 2 turns
    1e308 and 1e308 into inf)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("median of no values")
    lo, hi = x[(n - 1) // 2], x[n // 2]
    return float(lo + (hi - lo) / 2.0)


def min_p_value(n: int, m: int) -> float:
    """Smallest two-sided p-value an exact Mann-Whitney U test can give for samples of n and m."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def rounds_needed(alpha: float) -> int:
    """Rounds per side (equal sizes) for which the exact test can reach p < alpha."""
    n = 1
    while min_p_value(n, n) >= alpha:
        n += 1
    return n


def mann_whitney_p(base: np.ndarray, cand: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (1.0 when either sample is empty or all values tie)."""
    from scipy.stats import mannwhitneyu

    if base.size == 0 or cand.size == 0:
        return 1.0
    if np.all(base == base[0]) and np.all(cand == cand[0]) and base[0] == cand[0]:
        return 1.0  # identical constant samples: no evidence of a difference (scipy would give nan)
    p = float(mannwhitneyu(cand, base, alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


def log_ratio(base_median: float, cand_median: float) -> float:
    """log(candidate / baseline) without forming the ratio (which can overflow or underflow)."""
    return math.log(cand_median) - math.log(base_median)


def change_of(log_r: float) -> float:
    """candidate / baseline - 1 from the log ratio; inputs within the reader's bounds keep it finite."""
    return math.expm1(min(log_r, 700.0))


def n_boot_for(alpha: float) -> int:
    """Bootstrap resamples for an interval at ``1 - alpha`` (``MIN_BOOT``..``MAX_BOOT``)."""
    return min(MAX_BOOT, max(MIN_BOOT, math.ceil(20 / alpha)))


def bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` medians of ``values`` resampled with replacement, in chunks of bounded memory."""
    x = np.asarray(values, dtype=np.float64)
    out = np.empty(n_boot)
    per_chunk = max(1, _CHUNK_ELEMENTS // max(1, x.size))
    for start in range(0, n_boot, per_chunk):
        stop = min(n_boot, start + per_chunk)
        out[start:stop] = np.median(x[rng.integers(0, x.size, size=(stop - start, x.size))], axis=1)
    return out


def bootstrap_log_medians(rounds: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """log of ``n_boot`` bootstrap medians of ``rounds`` (positive), in chunks of bounded memory."""
    x = np.asarray(rounds, dtype=np.float64)
    if x.size > MAX_BOOTSTRAP_ROUNDS:
        x = rng.choice(x, size=MAX_BOOTSTRAP_ROUNDS, replace=False)
    # the median of logs is the log of the median for odd sizes; for even sizes it is the log of
    # the two middle values' geometric mean, which differs from log(arithmetic mean) by under
    # (spread of the two)^2 / 8: negligible beside the interval, and never overflows
    return bootstrap_medians(np.log(x), n_boot, rng)
