"""Beta quantiles at the midpoints of n equal-probability bins, fast and exact where it matters.

``synthetic_lengths`` asks for ``Beta(a, b).ppf((i + 0.5) / n)`` with thousands of points for
every step of a log; scipy's inverse incomplete beta costs 1.5-17 us a point (a 1,000-step log of
5,120 responses a step spent ~20 of its ~35 s there). Here the quantile is computed exactly at
knots spaced ``KNOT_SPACING`` apart on the logit scale of the probability and interpolated in
between (cubic Hermite on the logit scale of the quantile, with the exact slope from the density:
that curve is smooth and straight towards both ends): measured within 1.4e-9 to 3.3e-9 relative of
scipy over b in [0.5, 800] and n in [1024, 5120], for ~0.3 ms a call. ``REL_ERROR`` is the bound
the callers rely on, 30x that. ``polish=True`` adds one Newton step on the regularised incomplete
beta (ten times cheaper than its inverse), which squares the error to scipy's own precision
(1e-14 to 4e-13 measured). Where the knots reach 0 or 1 in double precision (b below ~0.2: the
mass piles at the upper end), or anything comes out non-finite, scipy's quantiles are returned.
"""

from __future__ import annotations

import functools
import math

import numpy as np

KNOT_SPACING = 0.06  # on the logit scale of the probability
REL_ERROR = 2e-8  # bound on the interpolated quantiles' relative error (module docstring)
# below this many points, interpolating costs more than scipy's exact quantiles
_MIN_POINTS = 512


@functools.lru_cache(maxsize=16)
def _grid(n: int) -> tuple:
    """What depends on n alone (a log asks for the same n at every step): the probabilities, the
    knots on their logit scale, and each point's knot interval and cubic Hermite weights."""
    q = (np.arange(n) + 0.5) / n
    s = np.log(q) - np.log1p(-q)
    knots = max(8, math.ceil((s[-1] - s[0]) / KNOT_SPACING) + 1)
    sk = np.linspace(s[0], s[-1], knots)
    uk = 1.0 / (1.0 + np.exp(-sk))
    step = sk[1] - sk[0]
    i = np.minimum(((s - sk[0]) / step).astype(np.int64), knots - 2)
    t = (s - sk[i]) / step
    t2, t3 = t * t, t * t * t
    weights = (2 * t3 - 3 * t2 + 1, (t3 - 2 * t2 + t) * step, 3 * t2 - 2 * t3, (t3 - t2) * step)
    log_slope_k = np.log(uk) + np.log1p(-uk)  # log of du/d(logit u) at the knots
    for a in (q, uk, i, *weights, log_slope_k):
        a.flags.writeable = False
    return q, uk, i, weights, log_slope_k


def midpoint_quantiles(n: int, a: float, b: float, polish: bool = False) -> tuple[np.ndarray, float]:
    """``scipy.stats.beta.ppf((np.arange(n) + 0.5) / n, a, b)`` and a bound on the relative error
    of what is returned: ``REL_ERROR`` interpolated, 1e-12 polished, 0 computed by scipy."""
    from scipy import special  # scipy.stats.beta.ppf is this very function (bit for bit), 1 s less to import

    if n < _MIN_POINTS:
        return special.betaincinv(a, b, (np.arange(n) + 0.5) / n), 0.0
    q, uk, i, (w0, w1, w2, w3), log_slope_k = _grid(n)
    xk = special.betaincinv(a, b, uk)
    if not (np.all(xk > 0.0) and np.all(xk < 1.0)):
        return special.betaincinv(a, b, q), 0.0
    log_beta = special.betaln(a, b)
    log_xk, log_1mxk = np.log(xk), np.log1p(-xk)
    hk = log_xk - log_1mxk  # logit of the quantile at the knots
    # d logit(x) / d logit(u) = u (1 - u) / (pdf(x) x (1 - x))
    log_pdf = (a - 1.0) * log_xk + (b - 1.0) * log_1mxk - log_beta
    dk = np.exp(log_slope_k - log_pdf - log_xk - log_1mxk)
    h = w0 * hk[i] + w1 * dk[i] + w2 * hk[i + 1] + w3 * dk[i + 1]
    x = 1.0 / (1.0 + np.exp(-h))
    err = REL_ERROR
    if polish:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            pdf = np.exp((a - 1.0) * np.log(x) + (b - 1.0) * np.log1p(-x) - log_beta)
            x = x - (special.betainc(a, b, x) - q) / pdf
        err = 1e-12
    if not (np.all(np.isfinite(x)) and np.all(x >= 0.0) and np.all(x <= 1.0)):
        return special.betaincinv(a, b, q), 0.0
    return x, err


__all__ = ["KNOT_SPACING", "REL_ERROR", "midpoint_quantiles"]
