"""Statistics of interleaved rounds: one pair per round (a BASE launch and a CAND launch timed
back to back, in random order), so whatever drifts between pairs (clocks, temperature, a
neighbour on a shared GPU) cancels in the pair's log ratio.

- Per case: the **Wilcoxon signed-rank test** (two-sided, exact for up to 50 pairs without ties,
  scipy's normal approximation beyond) on the per-pair log ratios ``log(cand / base)``; pairs with
  a zero difference are left out (``zero_method="wilcox"``). The effect is the median of those
  log ratios (``change = exp(median) - 1``, positive = CAND slower).
- Its smallest two-sided p-value for n pairs is ``2 / 2**n`` (every pair on the same side), so
  ``pairs_needed(alpha)`` pairs are the least that can reach ``p < alpha``: 10 at 0.002.
- Per (family, kernel, mode, provider): the weighted geometric-mean speedup (BASE time / CAND
  time) of the members' median pair ratios, with a bootstrap interval that resamples each
  member's pairs (at ``1 - alpha``).
"""

from __future__ import annotations

import math

import numpy as np

from ..results.stats import bootstrap_medians, n_boot_for
from ..results.verdict import robust_spread, sample_size


def log_ratios(base: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Per-pair ``log(cand) - log(base)`` (positive rounds only; callers check them)."""
    return np.log(np.asarray(cand, dtype=np.float64)) - np.log(np.asarray(base, dtype=np.float64))


def min_p_value(pairs: int) -> float:
    """Smallest two-sided p of the exact signed-rank test with ``pairs`` non-zero differences."""
    return 1.0 if pairs < 1 else min(1.0, 2.0 / 2.0 ** pairs)


def pairs_needed(alpha: float) -> int:
    """The fewest pairs whose exact signed-rank test can give p < alpha."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n = 1
    while min_p_value(n) >= alpha:
        n += 1
    return n


def pairs_to_decide(ratios: np.ndarray, threshold: float, alpha: float) -> tuple[int, int]:
    """(to detect a change of ``threshold``, to decide the observed change): pairs at 80% power for
    the spread of these pair log ratios (``polytrace.measure.results.verdict.sample_size``)."""
    r = np.asarray(ratios, dtype=np.float64)
    r = r[np.isfinite(r)]
    centre = float(np.median(r)) if r.size else 0.0
    return sample_size(robust_spread(r) ** 2, centre, threshold, alpha, pairs_needed(alpha))


def signed_rank_p(ratios: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the log ratios against 0 (1.0 without evidence)."""
    from scipy.stats import wilcoxon

    r = np.asarray(ratios, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0 or not np.any(r != 0):
        return 1.0
    p = float(wilcoxon(r, zero_method="wilcox", alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


def median_change(ratios: np.ndarray) -> float:
    """CAND / BASE - 1 from the median per-pair log ratio (positive = CAND slower)."""
    return math.expm1(float(np.median(ratios)))


def weighted_speedup(members: list[np.ndarray], weights: np.ndarray, alpha: float,
                     rng: np.random.Generator) -> tuple[float, float, float]:
    """(speedup, CI low, CI high) of BASE time / CAND time: the weighted geometric mean of the
    members' median pair ratios, and its bootstrap interval at ``1 - alpha``."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    center = -float(sum(wi * np.median(m) for wi, m in zip(w, members)))
    n_boot = n_boot_for(alpha)  # the gate's rule; each member's pairs resampled as pairs
    resampled = -sum(wi * bootstrap_medians(m, n_boot, rng) for wi, m in zip(w, members))
    lo, hi = np.quantile(resampled, [alpha / 2, 1 - alpha / 2])
    return math.exp(center), math.exp(float(lo)), math.exp(float(hi))


__all__ = ["log_ratios", "median_change", "min_p_value", "pairs_needed", "pairs_to_decide", "signed_rank_p",
           "weighted_speedup"]
