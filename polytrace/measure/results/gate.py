"""The regression gate: did a change make the kernels slower on the shapes our workloads run?

Per benchmark (matched by its stable id) the verdict is three-way (``polytrace.measure.results.verdict``):

1. **regression**: a significant difference of the raw rounds (two-sided Mann-Whitney U test at
   ``alpha``, default 0.002: a suite has tens of benchmarks, and 0.002 keeps the chance of one false
   alarm in a 25-benchmark run near 5%, a Bonferroni-style bound) AND a median slowdown above
   ``threshold`` (default 5%: a significant 1% drift on a shared GPU is real but not worth blocking
   a pull request for); **improvement** the mirror image;
2. **unchanged**: the change's interval at ``1 - alpha`` (Hodges-Lehmann, from the U test's own
   distribution) lies within +-threshold: the change is bounded, not merely undetected;
3. **inconclusive** otherwise (too few rounds, or too much spread), with the rounds per side that
   would decide it at the observed spread (``rounds_to_decide``; ``rounds_to_detect``: to detect a
   change of ``threshold`` with 80% power). Rounds too few for the exact test to reach ``alpha`` at
   all (its smallest p-value, 2 / C(n+m, n), above it) are always inconclusive.

Per (family, kernel, mode, provider) the gate reports the weighted geometric-mean speedup with a
bootstrap confidence interval over rounds (at 1 - alpha, tails of alpha/2); the same three-way rule
holds: an aggregate slowdown above the threshold whose interval excludes 1 is a regression, an
interval within +-threshold unchanged, anything else inconclusive. Weights have one meaning per mode
(``WEIGHT_BASIS``): each shape's share of the sampled workload's tokens (``extra_info.weight``), or
for the planner ("plan") the number of sequences it plans. Members with fewer than
``MIN_BOOTSTRAP_ROUNDS`` rounds in either file are left out of the aggregate (with a note) and
judged on their own.

Only our own providers (``provider_kind`` "ours", or unknown) are gated; torch and peer providers
are controls: their drift says the machine or software changed, and it is reported as a warning.

Refusals (exit 2 unless ``force``): different GPU, different place of measurement or
CPU-interpreter timings, a benchmark id naming a different workload (profile, seed or step).
Errors (exit 2, ``force`` or not, never a pass; exit 1 when a regression was found all the same):
nothing in common, nothing of ours to gate, a gated benchmark without raw rounds or with unusable
ones in either file. Exit 3 (inconclusive): no regression and no error, but a gated benchmark or
aggregate is inconclusive: the gate cannot vouch for it, and says how many rounds would decide. A
changed kernel source hash is *not* a refusal: a kernel pull request changes it by definition; it
is reported, and so is an unchanged hash beside a regression.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ...wording import counted
from .aggregate import WEIGHT_BASIS, Aggregate, aggregate_weights
from .schema import CPU_MEASURED_ON, BenchResult, ResultFile
from .stats import (
    MIN_BOOTSTRAP_ROUNDS,
    bootstrap_log_medians,
    change_of,
    log_ratio,
    mann_whitney_p,
    median_of,
    min_p_value,
    n_boot_for,
    rounds_needed,
)
from .validation import MAX_ROUND_S, MIN_ROUND_S
from .verdict import (
    Rule,
    change_interval,
    classify,
    classify_speedup,
    fail_line,
    inconclusive_line,
    regressions_found,
    robust_spread,
    sample_size,
    shift_interval,
)

__all__ = ["Aggregate", "Comparison", "GatePolicy", "GateReport", "Rule", "WEIGHT_BASIS", "aggregate_weights",
           "compare", "min_p_value"]

GATED_KINDS = ("ours", "")
VERSION_KEYS = ("torch_version", "triton_version", "cuda_version", "driver_version")
_EXAMPLES = 3  # ids named in a summarised error
# how to get more rounds, named in the advice of an inconclusive verdict (suites/harness.py reads both)
MORE_ROUNDS = "POLYTRACE_BENCH_ROUNDS=N (or pytest --benchmark-min-rounds=N) when running the suites"


@dataclass
class Comparison:
    id: str
    family: str
    kernel: str
    provider: str
    provider_kind: str
    mode: str
    shape_id: str
    # regression | improvement | unchanged | inconclusive | error | no-data | new | missing
    status: str
    gated: bool
    weight: float | None = None  # normalised over its aggregate (family, kernel, mode, provider)
    base_median_s: float | None = None
    cand_median_s: float | None = None
    change: float | None = None  # candidate / baseline median time - 1 (positive = slower)
    p_value: float | None = None
    n_base: int = 0
    n_cand: int = 0
    note: str = ""
    # the change's interval at 1 - alpha (Hodges-Lehmann; None: unbounded, too few rounds)
    ci_low: float | None = None
    ci_high: float | None = None
    rounds_to_decide: int | None = None  # per side, to decide the observed change (80% power)
    rounds_to_detect: int | None = None  # per side, to detect a change of the threshold (80% power)

    @property
    def ratio(self) -> float | None:
        return None if self.change is None else 1.0 + self.change


@dataclass
class GateReport:
    baseline: dict
    candidate: dict
    threshold: float
    alpha: float
    comparisons: list[Comparison]
    aggregates: list[Aggregate]
    refusals: list[str] = field(default_factory=list)  # overridable with force
    errors: list[str] = field(default_factory=list)  # never overridable: the gate cannot vouch
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # one-line statements shown right under the verdict (text, Markdown) and kept in the JSON, e.g.
    # "step time on <workload>: +x%" from the composition layer; the gate itself leaves it empty
    impact: list[str] = field(default_factory=list)
    forced: bool = False
    fail_on_missing: bool = False

    def of(self, status: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.status == status]

    @staticmethod
    def _gated(items: list, status: str) -> list:
        return [x for x in items if x.status == status and x.gated]

    @property
    def gated_regressions(self) -> list[Comparison]:
        return self._gated(self.comparisons, "regression")

    @property
    def aggregate_regressions(self) -> list[Aggregate]:
        return self._gated(self.aggregates, "regression")

    @property
    def inconclusive(self) -> list[Comparison]:
        return self._gated(self.comparisons, "inconclusive")

    @property
    def aggregate_inconclusive(self) -> list[Aggregate]:
        return self._gated(self.aggregates, "inconclusive")

    @property
    def rounds_advice(self) -> int | None:
        """Rounds per side that would decide every inconclusive gated benchmark (the largest)."""
        needs = [c.rounds_to_decide for c in self.inconclusive if c.rounds_to_decide]
        return max(needs) if needs else None

    @property
    def exit_code(self) -> int:
        """2 refused (unless forced); 1 a regression was found (whatever else could not be tested);
        2 an error (something the gate cannot vouch for: never a pass); 1 missing benchmarks with
        ``fail_on_missing``; 3 inconclusive (a gated benchmark or aggregate undecided); else 0."""
        if self.refusals and not self.forced:
            return 2
        if self.gated_regressions or self.aggregate_regressions:
            return 1
        if self.errors:
            return 2
        if self.fail_on_missing and any(c.gated for c in self.of("missing")):
            return 1
        if self.inconclusive or self.aggregate_inconclusive:
            return 3
        return 0

    @property
    def verdict(self) -> str:
        code = self.exit_code
        found = regressions_found(len(self.gated_regressions), len(self.aggregate_regressions))
        if code == 2:
            errors = counted(len(self.errors), "error")
            return "REFUSED" + (f" ({errors})" if self.errors and not (self.refusals and not self.forced) else "")
        if code == 1:
            if not found:
                found.append(f"{len([c for c in self.of('missing') if c.gated])} missing benchmark(s)")
            return fail_line(found, len(self.errors))
        if code == 3:
            need = self.rounds_advice
            return inconclusive_line(len(self.inconclusive), "benchmark", len(self.aggregate_inconclusive),
                                     f"rerun with at least {need} rounds each ({MORE_ROUNDS})" if need else "")
        return "PASS" + (" (forced past refusals)" if self.refusals else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["exit_code"] = self.exit_code
        d["verdict"] = self.verdict
        for c, raw in zip(self.comparisons, d["comparisons"]):
            raw["ratio"] = c.ratio
        return d


def _summary(r: ResultFile) -> dict:
    out = {"path": r.path, "gpu_name": r.gpu_name, "gpu_slug": r.gpu_slug, "measured_on": r.measured_on,
           "commit": r.commit, "datetime": r.datetime, "n_benchmarks": len(r.benchmarks),
           "kernel_hashes": r.kernel_hashes(), "suite_hash": r.machine.get("suite_hash")}
    for k in VERSION_KEYS:
        out[k] = r.machine.get(k)
    return out


@dataclass(frozen=True)
class GatePolicy:
    """What the gate vouches for and what it lets past: ``force`` compares refused inputs,
    ``allow_cpu`` compares interpreter (CPU) files, ``gate_all`` gates every provider kind (not only
    ours), ``fail_on_missing`` fails when a gated benchmark of the baseline is missing."""

    force: bool = False
    allow_cpu: bool = False
    gate_all: bool = False
    fail_on_missing: bool = False


def compare(baseline: ResultFile, candidate: ResultFile, *, rule: Rule | None = None,
            policy: GatePolicy = GatePolicy(), n_boot: int | None = None, seed: int = 0) -> GateReport:
    """Compare two result files (or merged folders); see the module docstring for the rules
    (``rule``: the default 5% at alpha 0.002 when None)."""
    rule = rule or Rule()
    threshold, alpha = rule.threshold, rule.alpha
    force, gate_all, allow_cpu = policy.force, policy.gate_all, policy.allow_cpu
    if not (0 < threshold < 10):
        raise ValueError(f"threshold must be a fraction in (0, 10), got {threshold}")
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n_boot is None:
        n_boot = n_boot_for(alpha)
    report = GateReport(_summary(baseline), _summary(candidate), threshold, alpha, [], [], forced=force,
                        fail_on_missing=policy.fail_on_missing)
    _check_machines(baseline, candidate, report, allow_cpu)

    base, cand = baseline.by_id(), candidate.by_id()
    matched = [i for i in base if i in cand]
    if not matched:
        report.errors.append("no benchmark id occurs in both files: nothing to compare")
    mismatched = [i for i in matched if base[i].definition() != cand[i].definition()]
    if mismatched:
        b, c = base[mismatched[0]], cand[mismatched[0]]
        report.refusals.append(
            f"{len(mismatched)} benchmark(s) name a different workload in the two files, e.g. {mismatched[0]}: "
            f"profile/seed/step {b.definition()} vs {c.definition()}; the suites' shape definitions changed")

    def gated(b: BenchResult) -> bool:
        return gate_all or b.provider_kind in GATED_KINDS

    boot: dict[str, np.ndarray] = {}  # id -> bootstrap log speedups
    rng = np.random.default_rng(seed)
    for i in matched:
        comp = _compare_one(base[i], cand[i], gated(base[i]), threshold, alpha)
        if comp.status in ("regression", "improvement", "unchanged", "inconclusive") \
                and min(comp.n_base, comp.n_cand) >= MIN_BOOTSTRAP_ROUNDS:
            boot[i] = bootstrap_log_medians(base[i].rounds, n_boot, rng) \
                - bootstrap_log_medians(cand[i].rounds, n_boot, rng)
        report.comparisons.append(comp)
    for i in cand:
        if i not in base:
            comp = _new_comparison(cand[i], gated(cand[i]))
            comp.status, comp.cand_median_s, comp.n_cand = "new", cand[i].median_s, int(cand[i].rounds.size)
            report.comparisons.append(comp)
    for i in base:
        if i not in cand:
            comp = _new_comparison(base[i], gated(base[i]))
            comp.status, comp.base_median_s, comp.n_base = "missing", base[i].median_s, int(base[i].rounds.size)
            report.comparisons.append(comp)

    _errors(report, {"baseline": base, "candidate": cand}, gate_all)
    _aggregates(report, base, boot)
    _warnings(report)
    return report


def _rounds_problem(rounds: np.ndarray) -> str:
    """Why in-memory rounds are unusable ("" when fine); files were checked by the reader already."""
    if rounds.size == 0:
        return "no raw rounds"
    if not (np.all(np.isfinite(rounds)) and rounds.min() >= MIN_ROUND_S and rounds.max() <= MAX_ROUND_S):
        return f"rounds outside [{MIN_ROUND_S:g}, {MAX_ROUND_S:g}] s or not finite"
    return ""


def _compare_one(b: BenchResult, c: BenchResult, is_gated: bool, threshold: float, alpha: float) -> Comparison:
    comp = _new_comparison(b, is_gated)
    comp.n_base, comp.n_cand = int(b.rounds.size), int(c.rounds.size)
    if b.weight is not None and c.weight is not None and not math.isclose(b.weight, c.weight, rel_tol=1e-6,
                                                                            abs_tol=1e-12):
        comp.note = f"weight {b.weight:.4g} -> {c.weight:.4g}"
    problems = [f"{p} in the {side}" for side, p in (("baseline", _rounds_problem(b.rounds)),
                                                     ("candidate", _rounds_problem(c.rounds))) if p]
    if problems:
        comp.base_median_s, comp.cand_median_s = b.median_s, c.median_s
        comp.status = "error" if is_gated else "no-data"
        comp.note = "; ".join(problems + ([comp.note] if comp.note else []))
        return comp
    comp.base_median_s, comp.cand_median_s = median_of(b.rounds), median_of(c.rounds)
    lr = log_ratio(comp.base_median_s, comp.cand_median_s)
    comp.change = change_of(lr)
    comp.p_value = mann_whitney_p(b.rounds, c.rounds)
    lo, hi = shift_interval(b.rounds, c.rounds, alpha)
    comp.ci_low, comp.ci_high = change_interval(lo, hi)
    comp.status = classify(lr, comp.p_value, lo, hi, threshold, alpha)
    if comp.status == "inconclusive":
        variance = robust_spread(np.log(b.rounds)) ** 2 + robust_spread(np.log(c.rounds)) ** 2
        comp.rounds_to_detect, comp.rounds_to_decide = sample_size(variance, lr, threshold, alpha,
                                                                   rounds_needed(alpha))
        if min_p_value(comp.n_base, comp.n_cand) >= alpha:
            why = f"{comp.n_base} vs {comp.n_cand} rounds cannot reach p < {alpha:g}"
        elif math.isfinite(lo) and math.isfinite(hi):
            why = f"interval {change_of(lo):+.1%}..{change_of(hi):+.1%} not within +-{threshold:.1%}"
        else:
            why = "too few rounds for a bounded interval"
        note = f"{why}; ~{comp.rounds_to_decide} rounds each would decide"
        comp.note = note + ("; " + comp.note if comp.note else "")
    return comp


def _new_comparison(b: BenchResult, is_gated: bool) -> Comparison:
    return Comparison(id=b.id, family=b.family or b.suite, kernel=b.kernel, provider=b.provider or "?",
                      provider_kind=b.provider_kind, mode=b.mode, shape_id=b.shape_id or b.name,
                      status="", gated=is_gated)


def _check_machines(baseline: ResultFile, candidate: ResultFile, report: GateReport, allow_cpu: bool = False
                    ) -> None:
    if baseline.gpu_name != candidate.gpu_name:
        report.refusals.append(f"different GPUs: baseline {baseline.gpu_name!r}, candidate {candidate.gpu_name!r}")
    if baseline.measured_on != candidate.measured_on:
        report.refusals.append(
            f"measured in different places: baseline {baseline.measured_on}, candidate {candidate.measured_on}")
    elif CPU_MEASURED_ON in (baseline.measured_on, candidate.measured_on):
        if allow_cpu:
            report.warnings.append("CPU-interpreter timings (--allow-cpu): a check of the code path, not "
                                   "performance")
        else:
            report.refusals.append("CPU-interpreter timings are a smoke test of the code path, not performance; "
                                   "gate GPU results (--allow-cpu runs the comparison anyway)")
    for label, r in (("baseline", baseline), ("candidate", candidate)):
        if r.throttled:
            report.refusals.append(f"the {label} run is marked throttled ("
                                   + ("; ".join(r.throttle_reasons()) or "see its environment record")
                                   + "): rerun it on a quiet GPU (--force compares anyway)")


def _examples(comps: list[Comparison]) -> str:
    names = ", ".join(c.id for c in comps[:_EXAMPLES])
    return names + (f" and {len(comps) - _EXAMPLES} more" if len(comps) > _EXAMPLES else "")


def _errors(report: GateReport, files: dict[str, dict[str, BenchResult]], gate_all: bool) -> None:
    """What the gate cannot vouch for is an error (exit 2 with or without --force), never a pass."""
    broken = report.of("error")
    for where, by_id in files.items():
        path = report.baseline["path"] if where == "baseline" else report.candidate["path"]
        problems = {c.id: _rounds_problem(by_id[c.id].rounds) for c in broken}
        no_rounds = [c for c in broken if problems[c.id] == "no raw rounds"]
        bad = [c for c in broken if problems[c.id] and problems[c.id] != "no raw rounds"]
        if no_rounds:
            report.errors.append(f"{len(no_rounds)} gated benchmark(s) have no raw rounds in the {where} ({path}): "
                                 f"{_examples(no_rounds)}; run the suites with --benchmark-save-data")
        if bad:
            report.errors.append(f"{len(bad)} gated benchmark(s) have unusable rounds in the {where} ({path}): "
                                 f"{_examples(bad)} ({problems[bad[0].id]})")
    matched = [c for c in report.comparisons if c.status not in ("new", "missing")]
    if matched and not any(c.gated for c in matched) and not gate_all:
        report.errors.append("no benchmark of ours in common, only controls (torch, peers): nothing to gate "
                             "(--gate-all gates the controls)")


def _aggregates(report: GateReport, base: dict[str, BenchResult], boot: dict[str, np.ndarray]) -> None:
    groups: dict[tuple[str, str, str, str], list[Comparison]] = {}
    for c in report.comparisons:
        if c.change is not None and c.status not in ("new", "missing", "error", "no-data"):
            groups.setdefault((c.family, c.kernel, c.mode, c.provider), []).append(c)
    for key, comps in sorted(groups.items()):
        report.aggregates.append(_aggregate(report, key, comps, base, boot))


def _aggregate(report: GateReport, key, comps: list[Comparison], base: dict[str, BenchResult],
               boot: dict[str, np.ndarray]) -> Aggregate:
    family, kernel, mode, provider = key
    label = "/".join(key)
    w, basis = aggregate_weights([base[c.id] for c in comps], mode, label, report.notes)
    for c, wi in zip(comps, w):
        c.weight = float(wi)
    log_speed = np.array([-log_ratio(c.base_median_s, c.cand_median_s) for c in comps])
    tested = np.array([c.id in boot for c in comps])
    note, ci_low, ci_high, status = "", None, None, "untested"
    if tested.any():
        wt = w[tested] if w[tested].sum() > 0 else np.ones(int(tested.sum()))
        wt = wt / wt.sum()
        center = float(np.dot(wt, log_speed[tested]))
        resampled = sum(wi * boot[c.id] for c, wi in zip([c for c, t in zip(comps, tested) if t], wt))
        lo, hi = np.quantile(resampled, [report.alpha / 2, 1 - report.alpha / 2])
        ci_low, ci_high = float(math.exp(lo)), float(math.exp(hi))
        status = classify_speedup(center, lo, hi, report.threshold)
        if not tested.all():
            note = (f"{int((~tested).sum())} member(s) (weight {float(w[~tested].sum()):.1%}) with fewer than "
                    f"{MIN_BOOTSTRAP_ROUNDS} rounds left out, judged on their own")
    else:
        center = float(np.dot(w, log_speed))
        note = f"no member has {MIN_BOOTSTRAP_ROUNDS}+ rounds in both files: no interval, not tested"
    if note:
        report.notes.append(f"{label}: {note}")
    return Aggregate(family=family, kernel=kernel, mode=mode, provider=provider,
                     provider_kind=comps[0].provider_kind, n=len(comps), speedup=float(math.exp(center)),
                     ci_low=ci_low, ci_high=ci_high, status=status, gated=comps[0].gated, weight_basis=basis,
                     n_tested=int(tested.sum()), note=note)


def _warnings(report: GateReport) -> None:
    b, c = report.baseline, report.candidate
    for k in VERSION_KEYS:
        if b.get(k) and c.get(k) and b[k] != c[k]:
            report.warnings.append(f"{k.replace('_', ' ')} differs: {b[k]} vs {c[k]}")
    if b.get("suite_hash") and c.get("suite_hash") and b["suite_hash"] != c["suite_hash"]:
        report.notes.append("the suites' code differs between the runs (suite_hash); ids and workloads were "
                            "checked to match")
    bh, ch = b["kernel_hashes"], c["kernel_hashes"]
    changed = sorted(f for f in set(bh) & set(ch) if bh[f] != ch[f])
    if changed:
        report.notes.append("kernel source changed in: " + ", ".join(f"{f} ({bh[f]} -> {ch[f]})" for f in changed))
    regressed = {x.family for x in report.gated_regressions} | {a.family for a in report.aggregate_regressions}
    unchanged_reg = sorted(f for f in regressed if f in bh and f in ch and bh[f] == ch[f])
    if unchanged_reg:
        report.warnings.append("regressions in families whose kernel source did not change ("
                               + ", ".join(unchanged_reg) + "): look at the environment or noise first")
    for a in report.aggregates:
        if not a.gated and abs(math.log(a.speedup)) > math.log1p(report.threshold):
            report.warnings.append(
                f"control provider {a.label} ({a.provider_kind or 'unknown kind'}) moved by "
                f"{1 / a.speedup - 1:+.1%}: the machine or software may differ between the runs")
    for a in report.aggregate_regressions:  # ours and the controls slower alike: the session, not the code
        controls = [x for x in report.aggregates if not x.gated and (x.family, x.kernel, x.mode) ==
                    (a.family, a.kernel, a.mode) and math.log(x.speedup) <= 0.5 * math.log(a.speedup)]
        if controls:
            report.warnings.append(
                f"{a.label} is {1 / a.speedup - 1:+.1%} slower and its controls moved alike ("
                + ", ".join(f"{x.provider} {1 / x.speedup - 1:+.1%}" for x in controls)
                + "): a session-level shift is the likelier cause; `polytrace ab` times both revisions in one "
                "session")
    undecided = report.inconclusive
    if undecided:
        worst = max(undecided, key=lambda c: c.rounds_to_decide or 0)
        have = min(min(c.n_base, c.n_cand) for c in undecided)
        report.warnings.append(
            f"{counted(len(undecided), 'gated benchmark')} inconclusive at alpha={report.alpha:g}, threshold "
            f"{report.threshold:.1%} ({_examples(undecided)}; fewest rounds {have}): about {worst.rounds_to_decide} "
            f"rounds each would decide {worst.id} ({MORE_ROUNDS})")
    missing = report.of("missing")
    if missing:
        report.warnings.append(f"{len(missing)} benchmark(s) of the baseline are missing from the candidate "
                               "(skipped, failed, or cut by the time budget)")
