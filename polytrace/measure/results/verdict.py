"""Three-way verdicts: regression (or improvement), unchanged, inconclusive; and how many rounds or
pairs would decide an inconclusive one.

The rule, for a change measured as ``d = log(candidate / baseline)`` with a test's p-value and a
distribution-free confidence interval ``[lo, hi]`` for ``d`` at ``1 - alpha``, and ``t =
log(1 + threshold)``:

- **regression**: ``p < alpha`` and ``d > t`` (significant and beyond the threshold);
  **improvement** the mirror image;
- **unchanged**: the interval lies within ``(-t, t)``: an equivalence test (two one-sided tests,
  TOST, each at ``alpha / 2``), so "unchanged" says the change is bounded below the threshold,
  not merely that no change was found;
- **inconclusive** otherwise: too few rounds or too much spread to tell; the verdict carries the
  rounds (pairs) that would decide it.

Intervals (Hodges-Lehmann, the companions of the rank tests the gate and ``ab`` use):

- two independent samples (the gate's rounds): the shift of ``log(rounds)`` from the ordered
  pairwise differences ``log(c_j) - log(b_i)``, cut at the Mann-Whitney U distribution's
  ``alpha / 2`` quantile (exact for ``n * m <= EXACT_U_MAX``, normal beyond);
- paired (``ab``'s pair log ratios): the ordered Walsh averages ``(r_i + r_j) / 2``, ``i <= j``, cut
  at the signed-rank distribution's ``alpha / 2`` quantile (exact up to ``EXACT_SIGNED_RANK_MAX``
  pairs, normal beyond); past ``MAX_WALSH_PAIRS`` pairs the sign test's interval for the median.

When even the most extreme cut is too likely (too few rounds) the interval is unbounded and the
verdict cannot be "unchanged".

Rounds to decide (a power computation on the observed spread, per side for the gate, pairs for
``ab``): to detect a change of ``threshold`` at ``alpha`` with ``POWER`` (80%), ``n = (q_{1-alpha/2}
+ q_power)^2 * S^2 / (ARE * t^2)``, where ``S^2`` is the variance of one round's (pair's)
contribution (gate: ``s_base^2 + s_cand^2``; ``ab``: ``s_pair^2``), each ``s`` the MAD-based robust
spread of the logs, ``ARE = 3 / pi`` the rank tests' efficiency against the t-test on normal data,
and ``q`` Student t's quantiles at the answer's degrees of freedom (n - 1 pairs, 2n - 2 rounds), as
sample sizes for t-tests are planned. To decide the observed change ``d`` the same formula runs
with ``t - |d|`` (to bound it within the threshold) or ``|d|`` (to show it significant) in place of
``t``; the answer is at least the exact test's minimum and at most ``MAX_ADVICE``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ...wording import counted
from .stats import change_of

POWER = 0.8
ARE = 3.0 / math.pi  # Wilcoxon / Mann-Whitney against the t-test on normal data: 0.955
MAD_TO_SIGMA = 1.4826  # the MAD of a normal sample times this estimates its standard deviation
EXACT_U_MAX = 2500  # n * m up to which the U distribution is computed exactly (50 x 50 rounds)
EXACT_SIGNED_RANK_MAX = 400  # pairs up to which the signed-rank distribution is exact
MAX_WALSH_PAIRS = 2000  # beyond: 2M Walsh averages; the sign test's median interval instead
MAX_INTERVAL_ROUNDS = 2000  # per side; more rounds are subsampled (seeded), which only widens it
MAX_ADVICE = 100_000  # rounds/pairs advice is capped here ("more than" beyond)
DECIDED = ("regression", "improvement", "unchanged")


@dataclass(frozen=True)
class Rule:
    """The rule's two settings, one type for the gate and ``ab``: the relative change that matters
    (``threshold``, 5%) and the false-alarm rate (``alpha``, 0.002: 1 in 500 unchanged benchmarks
    flagged by chance)."""

    threshold: float = 0.05
    alpha: float = 0.002


def classify(log_change: float, p_value: float, lo: float, hi: float, threshold: float, alpha: float) -> str:
    """The three-way rule of the module docstring (``lo``/``hi`` may be infinite)."""
    t = math.log1p(threshold)
    if p_value < alpha and log_change > t:
        return "regression"
    if p_value < alpha and log_change < -t:
        return "improvement"
    if -t < lo and hi < t:
        return "unchanged"
    return "inconclusive"


def classify_speedup(log_speedup: float, lo: float, hi: float, threshold: float) -> str:
    """The same rule for an aggregate: ``log_speedup`` is log(baseline time / candidate time) (the
    opposite sign of a change), ``[lo, hi]`` its bootstrap interval; "significant" is the interval
    excluding 0 (the gate's and ``ab``'s weighted means both use it)."""
    t = math.log1p(threshold)
    if -log_speedup > t and hi < 0:
        return "regression"
    if log_speedup > t and lo > 0:
        return "improvement"
    if -t < lo and hi < t:
        return "unchanged"
    return "inconclusive"


def change_interval(lo: float, hi: float) -> tuple[float | None, float | None]:
    """A log-change interval as relative changes; an infinite end (too few rounds or pairs for the
    test's own interval) is None, which the renderers print as "?"."""
    return (change_of(lo) if math.isfinite(lo) else None, change_of(hi) if math.isfinite(hi) else None)


def regressions_found(n_items: int, n_means: int) -> list[str]:
    """["2 regressions", "1 weighted-mean regression"], each only when non-zero."""
    return ([counted(n_items, "regression")] if n_items else []) + \
        ([counted(n_means, "weighted-mean regression")] if n_means else [])


def fail_line(found: list[str], n_errors: int) -> str:
    """The FAIL verdict of a gate or ``ab`` report: what was found, then the errors beside it."""
    return "FAIL: " + ", ".join(found) + (f"; also {counted(n_errors, 'error')}" if n_errors else "")


def inconclusive_line(undecided: int, noun: str, means: int, advice: str) -> str:
    """The INCONCLUSIVE verdict: ``undecided`` items (``noun``: benchmark, case) and ``means``
    weighted means undecided, then how to decide them (``advice``, "" when unknown)."""
    what = [counted(undecided, noun)] if undecided else []
    if means:
        what.append(counted(means, "weighted mean"))
    return "INCONCLUSIVE: " + " and ".join(what) + " undecided" + (f"; {advice}" if advice else "")


# The quantiles through scipy.special, as scipy.stats' norm.ppf and t.ppf compute them (the same
# floats: scipy's _ppf of each calls these), without the distributions' argument checks: ~90 us a
# call against ~1.5, and sample_size asks for up to 100 per benchmark (a gate of 130 benchmarks:
# ~7 CPU-s of 10 before).
def _z(q: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(q))


def _t(q: float, df: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


# --------------------------------------------------------------------------- null distributions


@functools.lru_cache(maxsize=64)
def _u_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u), u = 0..n*m, of the Mann-Whitney U statistic under the null (no ties), exact:
    p_{n,m}(u) = n/(n+m) p_{n-1,m}(u-m) + m/(n+m) p_{n,m-1}(u)."""
    prev = [np.ones(1)] * (m + 1)  # row i = 0: U = 0 with probability 1 for every j
    for i in range(1, n + 1):
        row = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, m + 1):
            p = np.zeros(i * j + 1)
            a = prev[j]  # (i-1, j): the last value comes from the first sample, above all j others
            p[j:j + a.size] += i / (i + j) * a
            b = row[j - 1]  # (i, j-1)
            p[:b.size] += j / (i + j) * b
            row.append(p)
        prev = row
    return np.cumsum(prev[m])


@functools.lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t), t = 0..n(n+1)/2, of the Wilcoxon signed-rank statistic under the null, exact."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for i in range(1, n + 1):  # rank i is positive or negative with probability 1/2
        shifted = np.zeros_like(counts)
        shifted[i:] = counts[:-i]
        counts = (counts + shifted) / 2.0
    return np.cumsum(counts)


def _cut(cdf: np.ndarray | None, mean: float, sd: float, alpha: float) -> int:
    """How many ordered values to drop at each end: the largest c with P(stat <= c - 1) <= alpha/2
    (exact from ``cdf``, else normal with continuity correction); 0 means no bounded interval."""
    if cdf is not None:
        return int(np.searchsorted(cdf, alpha / 2.0, side="right"))
    return max(0, int(math.floor(mean + 0.5 - _z(1.0 - alpha / 2.0) * sd)))


# --------------------------------------------------------------------------------- intervals


def _subsample(x: np.ndarray, cap: int, seed: int) -> np.ndarray:
    if x.size <= cap:
        return x
    return np.random.default_rng(seed).choice(x, size=cap, replace=False)


def shift_interval(base: np.ndarray, cand: np.ndarray, alpha: float) -> tuple[float, float]:
    """Interval at ``1 - alpha`` for the shift ``d`` of ``log(cand)`` against ``log(base)``
    (Hodges-Lehmann; ``(-inf, inf)`` when the rounds are too few)."""
    x = _subsample(np.log(np.asarray(base, dtype=np.float64)), MAX_INTERVAL_ROUNDS, 1)
    y = _subsample(np.log(np.asarray(cand, dtype=np.float64)), MAX_INTERVAL_ROUNDS, 2)
    n, m = x.size, y.size
    if n == 0 or m == 0:
        return -math.inf, math.inf
    exact = _u_cdf(n, m) if n * m <= EXACT_U_MAX else None
    c = _cut(exact, n * m / 2.0, math.sqrt(n * m * (n + m + 1) / 12.0), alpha)
    if c < 1:
        return -math.inf, math.inf
    d = np.sort((y[None, :] - x[:, None]).ravel())
    return float(d[c - 1]), float(d[d.size - c])


def paired_interval(ratios: np.ndarray, alpha: float) -> tuple[float, float]:
    """Interval at ``1 - alpha`` for the centre of the pair log ratios (Walsh averages cut at the
    signed-rank quantile; the sign test's order statistics past ``MAX_WALSH_PAIRS``)."""
    r = np.asarray(ratios, dtype=np.float64)
    r = np.sort(r[np.isfinite(r)])
    n = r.size
    if n == 0:
        return -math.inf, math.inf
    if n > MAX_WALSH_PAIRS:  # sign test: the number below the median is Binomial(n, 1/2)
        from scipy.stats import binom

        c = int(binom.ppf(alpha / 2.0, n, 0.5))
        c = c if binom.cdf(c - 1, n, 0.5) <= alpha / 2.0 else c - 1
        return (float(r[c - 1]), float(r[n - c])) if c >= 1 else (-math.inf, math.inf)
    exact = _signed_rank_cdf(n) if n <= EXACT_SIGNED_RANK_MAX else None
    total = n * (n + 1) // 2
    c = _cut(exact, total / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0), alpha)
    if c < 1:
        return -math.inf, math.inf
    i, j = np.triu_indices(n)
    w = np.sort((r[i] + r[j]) / 2.0)
    return float(w[c - 1]), float(w[total - c])


# ------------------------------------------------------------------------------------- power


def robust_spread(logs: np.ndarray) -> float:
    """MAD-based standard deviation of log times (0 for fewer than 2 values); the sample standard
    deviation when the MAD is 0 but the values differ (more than half of them tie)."""
    x = np.asarray(logs, dtype=np.float64)
    if x.size < 2:
        return 0.0
    mad = float(np.median(np.abs(x - np.median(x)))) * MAD_TO_SIGMA
    return mad if mad > 0 else float(np.std(x, ddof=1))


def _needed(variance: float, effect: float, alpha: float, samples: int) -> float:
    """n from the normal formula with Student-t quantiles at the answer's own degrees of freedom
    (fixed-point iteration): at 10 pairs the exact test's interval is the range of the ratios,
    ~1.4x wider than the normal quantile says (t_{0.999, 9} = 4.30 against z = 3.09)."""
    if variance <= 0:
        return 0.0
    if effect <= 0:
        return math.inf
    base = variance / (ARE * effect ** 2)
    n = (_z(1.0 - alpha / 2.0) + _z(POWER)) ** 2 * base
    for _ in range(50):
        if n > MAX_ADVICE:
            return n
        df = max(1.0, samples * (math.ceil(n) - 1))
        new = (_t(1.0 - alpha / 2.0, df) + _t(POWER, df)) ** 2 * base
        if abs(new - n) < 0.5:
            return new
        n = new
    return n


def _advice(n: float, minimum: int) -> int:
    return MAX_ADVICE if not math.isfinite(n) or n > MAX_ADVICE else max(minimum, int(math.ceil(n)))


def sample_size(variance: float, log_change: float, threshold: float, alpha: float,
                minimum: int, samples: int = 1) -> tuple[int, int]:
    """(to detect, to decide): rounds per side (pairs) to detect a change of ``threshold`` with
    ``POWER`` at ``alpha``, and to decide the observed ``log_change`` (bound it within the threshold,
    or show it significant beyond it); see the module docstring. ``variance``: one round's (pair's)
    contribution to the variance of the change; ``samples``: 2 for two independent samples (the
    gate: 2n - 2 degrees of freedom), 1 for pairs (n - 1)."""
    t = math.log1p(threshold)
    detect = _needed(variance, t, alpha, samples)
    d = abs(log_change)
    decide = _needed(variance, d, alpha, samples) if d > t else _needed(variance, t - d, alpha, samples)
    return _advice(detect, minimum), _advice(decide, minimum)


__all__ = ["ARE", "DECIDED", "MAX_ADVICE", "POWER", "classify", "paired_interval", "robust_spread", "sample_size",
           "shift_interval"]
