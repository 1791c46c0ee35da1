"""``ab --until-decided``: pairs added look by look until every case is decided, with the chance of
a false alarm kept at ``alpha``.

The rule, a group-sequential design with a Bonferroni split of ``alpha`` over planned looks:

- before any timing, the looks are planned: ``n0, 2 n0, 4 n0, ...`` pairs, then ``--max-pairs``
  (``K`` looks in all), where ``n0`` is the fewest pairs whose exact signed-rank test can reach
  ``p < alpha / K``;
- at every look a case is judged at ``alpha / K``: the test, the interval, and so the three-way
  verdict (``polytrace.measure.results.verdict``). A false regression (or a false "unchanged") at any
  look then has probability at most ``K * alpha / K = alpha`` (the union bound, which holds
  whatever the dependence between looks; Pocock's or O'Brien-Fleming's boundaries would spend
  alpha less bluntly but rest on the normal approximation of the statistic, which the exact
  signed-rank test on 13 pairs is not);
- a case stops at the first look where it is decided (regression, improvement or unchanged); at
  ``--max-pairs``, or when its share of ``--budget-s`` is spent, it stays inconclusive and says how
  many pairs would decide it;
- ``--budget-s``: every case gets its first look; a further look is taken only when its estimated
  time (the case's seconds so far, setup and output checks included, per pair, times the pairs
  to add) fits the case's share of the budget left: (budget left) / (cases left, this one included);
- aggregates are judged once, at the end, at ``alpha / K`` as well.

At ``alpha`` 0.002 and the default 256 pairs: looks at 13, 26, 52, 104, 208 and 256 pairs, each
at 0.002 / 6 = 0.00033.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ...errors import PolytraceError
from ..results.verdict import DECIDED
from .paired import pairs_needed

DEFAULT_MAX_PAIRS = 256  # six looks at alpha 0.002: 13 .. 208, 256
GROWTH = 2  # each look doubles the pairs (a geometric schedule: few looks, each worth taking)
RULE = ("group-sequential, Bonferroni over the planned looks: each look judged at alpha / K; a case stops once "
        "decided")


@dataclass
class Plan:
    looks: list[int]  # cumulative pairs at each planned look
    alpha: float  # the run's false-alarm rate
    alpha_per_look: float  # alpha / len(looks)
    max_pairs: int
    budget_s: float | None = None
    rule: str = RULE
    stops: dict = field(default_factory=dict)  # case id -> why it stopped undecided

    def to_dict(self) -> dict:
        return asdict(self)


def _schedule(first: int, max_pairs: int) -> list[int]:
    looks, n = [], first
    while n < max_pairs:
        looks.append(n)
        n *= GROWTH
    return looks + [max_pairs]


def plan_looks(alpha: float, max_pairs: int = DEFAULT_MAX_PAIRS, budget_s: float | None = None) -> Plan:
    """The looks for ``--until-decided`` (see the module docstring); a ``max_pairs`` below the
    first look is refused, naming the minimum."""
    if not 0 < alpha < 1:
        raise PolytraceError(f"--alpha must be in (0, 1), got {alpha}")
    k = 1
    for _ in range(32):  # K grows with the looks, n0 with K: a few rounds settle it
        first = pairs_needed(alpha / k)
        looks = _schedule(first, max_pairs) if max_pairs >= first else []
        if len(looks) <= k:
            break
        k = len(looks)
    if not looks:
        raise PolytraceError(f"--max-pairs {max_pairs}: the first look needs {first} pairs (the signed-rank test "
                             f"at alpha / {k} = {alpha / k:.3g}); use at least {first}")
    # K >= len(looks), and the first look reaches alpha / K, so it reaches alpha / len(looks) too:
    # the split is over the looks actually planned
    return Plan(looks=looks, alpha=alpha, alpha_per_look=alpha / len(looks), max_pairs=max_pairs, budget_s=budget_s)


class Sequencer:
    """Decides, after each look, whether a case gets more pairs (``more``, passed to
    ``measure.run_pair``)."""

    def __init__(self, plan: Plan, threshold: float, n_cases: int, judge: Callable,
                 clock: Callable[[], float] = time.monotonic):
        self.plan, self.threshold, self.judge, self.clock = plan, threshold, judge, clock
        self.cases_left = n_cases
        self.deadline = None if plan.budget_s is None else clock() + plan.budget_s

    def for_case(self, result) -> Callable[[object], int | None]:
        """The ``more`` callback of one case: judge at alpha per look; the next look's pairs, or None."""
        start = self.clock()

        def more(case) -> int | None:
            self.judge(case, self.threshold, self.plan.alpha_per_look)
            case.looks.append(case.pairs)
            if case.status in DECIDED:
                return None
            later = [n for n in self.plan.looks if n > case.pairs]
            if not later:
                self.plan.stops[case.id] = f"undecided at --max-pairs {self.plan.max_pairs}"
                return None
            if self.deadline is not None:
                now = self.clock()
                per_pair = (now - start) / max(1, case.pairs)
                share = (self.deadline - now) / max(1, self.cases_left)
                if per_pair * (later[0] - case.pairs) > share:
                    self.plan.stops[case.id] = (f"undecided when its share of --budget-s {self.plan.budget_s:g} "
                                                f"was spent ({case.pairs} pairs)")
                    return None
            return later[0]

        return more

    def done(self) -> None:
        """One case finished: the budget left is shared among fewer."""
        self.cases_left = max(0, self.cases_left - 1)


__all__ = ["DEFAULT_MAX_PAIRS", "Plan", "Sequencer", "plan_looks"]
