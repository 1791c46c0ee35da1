"""A per-(family, kernel, mode, provider) aggregate of benchmark comparisons and the weights of its
members, shared by the regression gate (``gate.py``) and the A/B report (``measure/ab/report.py``).
Weights have one meaning per mode (``WEIGHT_BASIS``): each shape's share of the sampled workload's
tokens (``extra_info.weight``), or for the planner ("plan") the number of sequences it plans."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# mode -> what a member's weight in its aggregate stands for; every other mode: "tokens"
WEIGHT_BASIS = {"plan": "sequences"}


@dataclass
class Aggregate:
    family: str
    kernel: str
    mode: str
    provider: str
    provider_kind: str
    n: int  # members compared
    speedup: float  # weighted geometric mean of baseline / candidate median time (>1 = faster)
    ci_low: float | None
    ci_high: float | None
    status: str  # regression | improvement | unchanged | inconclusive | untested
    gated: bool
    weight_basis: str = "tokens"  # "tokens", "sequences" or "uniform"
    n_tested: int = 0  # members in the speedup and its interval (enough rounds in both files)
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.family}/{self.kernel}/{self.mode}/{self.provider}"


def _raw_weight(member, basis: str) -> float:
    if basis == "sequences":
        n = member.shape.get("sequences")
        return float(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else math.nan
    w = member.weight
    return float(w) if w is not None and math.isfinite(w) else math.nan


def aggregate_weights(members: list, mode: str, label: str, notes: list[str]) -> tuple[np.ndarray, str]:
    """(weights summing to 1, their basis) of an aggregate's members (anything with ``shape`` and
    ``weight``: a ``BenchResult``, an ``ab`` case), by ``WEIGHT_BASIS``. A member without a weight
    counts 0; with none known the mean is unweighted ("uniform"); either is noted."""
    basis = WEIGHT_BASIS.get(mode, "tokens")
    raw = np.array([_raw_weight(m, basis) for m in members], dtype=np.float64)
    if np.all(np.isnan(raw)) or np.nansum(raw) <= 0:
        notes.append(f"{label}: no {basis} weights recorded; geometric mean is unweighted")
        return np.full(len(members), 1.0 / len(members)), "uniform"
    if np.isnan(raw).any():
        notes.append(f"{label}: {int(np.isnan(raw).sum())} of {len(members)} member(s) carry no weight "
                     "and count 0 in the weighted mean")
    raw = np.nan_to_num(raw, nan=0.0)
    return raw / raw.sum(), basis
