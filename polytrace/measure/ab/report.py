"""What ``polytrace ab`` found: per case, per (family, kernel, mode, provider), and the verdict.

Per case (a benchmark id present in both revisions) the status is one of (the three-way rule of
``polytrace.measure.results.verdict``)

- ``regression``: the paired signed-rank test gives p < alpha **and** CAND's median pair ratio is
  slower than the threshold; ``improvement`` the mirror image;
- ``unchanged``: the change's interval at 1 - alpha (Walsh averages of the pair log ratios cut at
  the signed-rank quantile: the test's own interval) lies within +-threshold;
- ``inconclusive``: neither: too few pairs or too much spread; the case carries the pairs that
  would decide it at the observed spread (``pairs_to_decide``, 80% power);
- ``outputs-changed``: CAND's output fails the output check BASE's output passes (the fp64
  reference and bounds of BASE's suites: the bar the main branch's tests hold); not timed;
- ``base-wrong``: BASE's output fails its own check while CAND's passes (a fix, or a changed
  reference); a note, not timed;
- ``error``: a revision raised while building, binding, checking or timing the case, both outputs
  fail the check, or a round is unusable: never a quiet pass.

Aggregates follow the gate (``polytrace.measure.results.gate``): per (family, kernel, mode, provider), weights
with one meaning per mode (token share; sequences for the planner), the weighted geometric-mean
speedup of the members' median pair ratios and its bootstrap interval at 1 - alpha; a slowdown
beyond the threshold whose interval excludes 1 is a regression, an interval within +-threshold
unchanged, anything else inconclusive.

Exit status (the gate's): 1 when a case or an aggregate regressed or CAND changed outputs (findings
against the candidate: it is slower, or it computes something else than the tests allow); else 2
when something could not be compared (an error: never a pass); else 3 when a case or an aggregate
is inconclusive (not decided: never a pass either; ``--until-decided`` adds pairs until it is);
else 0. Refusals (no GPU without
``--force``, bad revisions, a dirty tree, an unknown suite, too few rounds) stop before any timing
with a one-line error and exit 2.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ...wording import counted
from ..results.aggregate import Aggregate, aggregate_weights
from ..results.schema import BenchCase
from ..results.verdict import (
    change_interval,
    classify,
    classify_speedup,
    fail_line,
    inconclusive_line,
    paired_interval,
    regressions_found,
)
from . import paired

STATUSES = ("outputs-changed", "error", "regression", "inconclusive", "improvement", "base-wrong", "unchanged")


@dataclass(kw_only=True)
class CaseResult(BenchCase):
    """A case both revisions run (its ``BenchCase`` fields from CAND's suites) and what ``ab``
    found."""

    suite: str
    status: str = "error"
    note: str = ""
    base_rounds: list[float] = field(default_factory=list)  # per-launch seconds, pair i = index i
    cand_rounds: list[float] = field(default_factory=list)
    first: str = ""  # per pair, who ran first: "B" (BASE) or "C" (CAND)
    timing: dict = field(default_factory=dict)  # how both were timed (the timing plan)
    outputs: str = ""  # identical | within bounds | changed | base wrong | both wrong | not compared
    output_diff: float | None = None  # max |CAND - BASE| over the outputs' elements (None: not numeric)
    base_check: dict = field(default_factory=dict)
    cand_check: dict = field(default_factory=dict)
    p_value: float | None = None
    change: float | None = None  # CAND / BASE - 1 from the median pair log ratio (positive = slower)
    share: float | None = None  # normalised weight in its aggregate
    ci_low: float | None = None  # the change's interval at 1 - alpha (None: unbounded, too few pairs)
    ci_high: float | None = None
    pairs_to_decide: int | None = None  # inconclusive: pairs that would decide the observed change (80% power)
    pairs_to_detect: int | None = None  # inconclusive: pairs to detect a change of the threshold (80% power)
    looks: list[int] = field(default_factory=list)  # --until-decided: the pairs at each look taken

    @property
    def pairs(self) -> int:
        return len(self.base_rounds)

    @property
    def base_median_s(self) -> float | None:
        return float(np.median(self.base_rounds)) if self.base_rounds else None

    @property
    def cand_median_s(self) -> float | None:
        return float(np.median(self.cand_rounds)) if self.cand_rounds else None

    @property
    def group(self) -> tuple[str, str, str, str]:
        return (self.family, self.kernel, self.mode, self.provider)


@dataclass
class AbReport:
    base: dict  # revision: spec, commit, short, kernel_hashes
    cand: dict
    device: dict  # measured_on, device_name, gpu_slug, versions
    threshold: float
    alpha: float
    rounds: int
    seed: int
    suites: list[str]
    keyword: str | None
    cases: list[CaseResult] = field(default_factory=list)
    aggregates: list[Aggregate] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)  # case ids present in BASE's suites only
    only_cand: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    impact: list[str] = field(default_factory=list)  # the step-time line(s), shown under the verdict
    step_time: dict | None = None
    # --until-decided: the planned looks, the level each is judged at, max pairs, budget, the rule
    sequential: dict | None = None

    @property
    def judged_alpha(self) -> float:
        """The level cases and aggregates are judged at: alpha, or alpha per look when sequential."""
        return self.sequential["alpha_per_look"] if self.sequential else self.alpha
    def of(self, status: str) -> list[CaseResult]:
        return [c for c in self.cases if c.status == status]

    @property
    def aggregate_regressions(self) -> list[Aggregate]:
        return [a for a in self.aggregates if a.status == "regression"]

    @property
    def aggregate_inconclusive(self) -> list[Aggregate]:
        return [a for a in self.aggregates if a.status == "inconclusive"]

    @property
    def exit_code(self) -> int:
        if self.of("regression") or self.aggregate_regressions or self.of("outputs-changed"):
            return 1
        if self.errors or self.of("error"):
            return 2
        if self.of("inconclusive") or self.aggregate_inconclusive:
            return 3
        return 0

    @property
    def verdict(self) -> str:
        found = regressions_found(len(self.of("regression")), len(self.aggregate_regressions))
        m = len(self.of("outputs-changed"))
        if m:
            found.append(f"{counted(m, 'case')} with changed outputs")
        n_err = len(self.of("error")) + len(self.errors)
        code = self.exit_code
        if code == 1:
            return fail_line(found, n_err)
        if code == 2:
            return f"ERROR ({counted(n_err, 'error')})"
        if code == 3:
            undecided = self.of("inconclusive")
            need = max((c.pairs_to_decide or 0 for c in undecided), default=0)
            return inconclusive_line(len(undecided), "case", len(self.aggregate_inconclusive),
                                     f"about {need} pairs would decide (--rounds {need}, or --until-decided)"
                                     if need else "")
        return "PASS"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cases"] = [_case_dict(c, raw) for c, raw in zip(self.cases, d["cases"])]
        d["exit_code"], d["verdict"] = self.exit_code, self.verdict
        return _finite(d)


def _case_dict(case: CaseResult, raw: dict) -> dict:
    """A case in ``ab --json``: ``suite`` second, after ``id``, as it always was (the dataclass puts
    it after the shared ``BenchCase`` fields), and the derived pair counts and medians at the end."""
    out = {"id": raw.pop("id"), "suite": raw.pop("suite"), **raw}
    out["pairs"] = case.pairs
    out["base_median_s"], out["cand_median_s"] = case.base_median_s, case.cand_median_s
    return out


def _finite(obj):
    """Strict JSON has no inf/NaN: a non-finite number (an output difference of inf: shapes
    differ) becomes None; the case's ``outputs`` says what happened."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def judge(case: CaseResult, threshold: float, alpha: float) -> None:
    """Status, p-value, change and interval of a timed case (rounds already checked positive and
    finite), by the three-way rule; an inconclusive case gets the pairs that would decide it."""
    r = paired.log_ratios(np.array(case.base_rounds), np.array(case.cand_rounds))
    case.p_value = paired.signed_rank_p(r)
    case.change = paired.median_change(r)
    lr = math.log1p(case.change)
    lo, hi = paired_interval(r, alpha)
    case.ci_low, case.ci_high = change_interval(lo, hi)
    case.status = classify(lr, case.p_value, lo, hi, threshold, alpha)
    case.pairs_to_decide = case.pairs_to_detect = None
    case.note = ""
    if case.status != "inconclusive":
        return
    case.pairs_to_detect, case.pairs_to_decide = paired.pairs_to_decide(r, threshold, alpha)
    differing = int(np.count_nonzero(r))  # pairs timed exactly alike carry no sign: the test drops them
    if paired.min_p_value(differing) >= alpha:
        why = f"only {differing} of {r.size} pairs differ: the test cannot reach p < {alpha:g}"
    elif abs(lr) > math.log1p(threshold):
        # With 16 pairs one pair of the opposite sign at the top rank (a preempted round) gives
        # p = 0.005 against a 2x slowdown: beyond the threshold, not significant, so undecided.
        why = f"median {case.change:+.1%} beyond the threshold but p = {case.p_value:.3g} >= {alpha:g}"
    elif case.ci_low is None:
        why = "too few pairs for a bounded interval"
    else:
        why = f"interval {case.ci_low:+.1%}..{case.ci_high:+.1%} not within +-{threshold:.1%}"
    case.note = f"{why}; ~{case.pairs_to_decide} pairs would decide"


def aggregate(report: AbReport, seed: int = 0) -> None:
    """Per (family, kernel, mode, provider), as the gate does, over the timed cases."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple, list[CaseResult]] = {}
    for c in report.cases:
        if c.change is not None:
            groups.setdefault(c.group, []).append(c)
    for key, members in sorted(groups.items()):
        w, basis = aggregate_weights(members, key[2], "/".join(key), report.notes)
        for c, wi in zip(members, w):
            c.share = float(wi)
        ratios = [paired.log_ratios(np.array(c.base_rounds), np.array(c.cand_rounds)) for c in members]
        speedup, lo, hi = paired.weighted_speedup(ratios, w, report.judged_alpha, rng)
        status = classify_speedup(math.log(speedup), math.log(lo), math.log(hi), report.threshold)
        report.aggregates.append(Aggregate(family=key[0], kernel=key[1], mode=key[2], provider=key[3],
                                           provider_kind="ours", n=len(members), speedup=speedup, ci_low=lo,
                                           ci_high=hi, status=status, gated=True, weight_basis=basis,
                                           n_tested=len(members)))


# ------------------------------------------------------------------------------- result files


def result_json(report: AbReport, side: str, datetime: str) -> dict:
    """One revision's rounds as a result file of the suites' schema (results/README.md): what
    ``polytrace gate``, ``results show`` and the step-time estimate read."""
    rev = report.base if side == "base" else report.cand
    machine = {**report.device, "commit": rev["short"], "kernel_hashes": rev["kernel_hashes"],
               "ab": {"side": side, "revision": rev["spec"], "commit_full": rev["commit"]}}
    benches = []
    for c in report.cases:
        rounds = c.base_rounds if side == "base" else c.cand_rounds
        if not rounds:
            continue
        median = float(np.median(rounds))
        info = {"family": c.family, "kernel": c.kernel, "provider": c.provider, "provider_kind": "ours",
                "mode": c.mode, "shape": c.shape, "shape_id": c.shape_id, "profile": c.profile, "seed": c.seed,
                "step": c.step, "weight": c.weight, "flops": c.flops, "bytes_moved": c.bytes_moved,
                "roofline": c.roofline, "kernel_hash": rev["kernel_hashes"].get(c.family, ""),
                "measured_on": report.device["measured_on"], "device_name": report.device["gpu_name"],
                "median_s": median, **c.timing, "check": c.base_check if side == "base" else c.cand_check,
                "ab_first": c.first}
        benches.append({"name": f"ab[{c.id}]", "fullname": f"suites/test_{c.suite}.py::ab[{c.id}]", "group": None,
                        "extra_info": info, "stats": {"median": median, "rounds": len(rounds), "data": list(rounds)}})
    return {"machine_info": {"polytrace": machine}, "datetime": datetime, "benchmarks": benches}


__all__ = ["AbReport", "CaseResult", "STATUSES", "aggregate", "judge", "result_json"]
