"""The regression gate: did a change make the kernels slower on the shapes our workloads run?

Per benchmark (matched by its stable id), a regression needs both

1. a significant difference of the raw rounds: two-sided Mann-Whitney U test at ``alpha``
   (default 0.002: a suite has tens of benchmarks, and 0.002 keeps the chance of one false alarm
   in a 25-benchmark run near 5%, a Bonferroni-style bound), and
2. a median slowdown above ``threshold`` (default 5%): a significant 1% drift on a shared GPU is
   real but not worth blocking a pull request for.

Improvements are the mirror image. Comparisons whose sample sizes cannot reach ``alpha`` at all
(the exact test's smallest p-value, 2 / C(n+m, n), is above it) are reported as "underpowered",
not passed silently. Per kernel family and provider the gate reports the trace-weighted geometric
mean speedup (weights: ``extra_info.weight``, each shape's share of the sampled workload,
normalised over the benchmarks both files have) with a bootstrap confidence interval over rounds;
an aggregate slowdown above the threshold whose interval excludes 1 also fails the gate.

Only our own providers (``provider_kind`` "ours", or unknown) are gated; torch and peer providers
are controls: their drift says the machine or software changed, and it is reported as a warning.

Refusals (exit 2 unless forced): different GPU, different place of measurement or CPU-interpreter
timings, a benchmark id naming a different workload (profile, seed or step) in the two files, no
benchmark in common, no raw rounds. A changed kernel source hash is *not* a refusal: a kernel pull
request changes it by definition; it is reported, and so is an unchanged hash beside a regression.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .schema import CPU_MEASURED_ON, BenchResult, ResultFile

GATED_KINDS = ("ours", "")
VERSION_KEYS = ("torch_version", "triton_version", "cuda_version", "driver_version")


@dataclass
class Comparison:
    id: str
    family: str
    kernel: str
    provider: str
    provider_kind: str
    mode: str
    shape_id: str
    status: str  # regression | improvement | unchanged | underpowered | no-data | new | missing
    gated: bool
    weight: float | None = None  # normalised over its (family, provider)
    base_median_s: float | None = None
    cand_median_s: float | None = None
    change: float | None = None  # candidate / baseline median time - 1 (positive = slower)
    p_value: float | None = None
    n_base: int = 0
    n_cand: int = 0
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.change is None else 1.0 + self.change


@dataclass
class Aggregate:
    family: str
    provider: str
    provider_kind: str
    n: int
    speedup: float  # trace-weighted geometric mean of baseline / candidate median time (>1 = faster)
    ci_low: float | None
    ci_high: float | None
    status: str  # regression | improvement | unchanged
    gated: bool


@dataclass
class GateReport:
    baseline: dict
    candidate: dict
    threshold: float
    alpha: float
    comparisons: list[Comparison]
    aggregates: list[Aggregate]
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    forced: bool = False
    fail_on_missing: bool = False

    def of(self, status: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.status == status]

    @property
    def gated_regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.status == "regression" and c.gated]

    @property
    def aggregate_regressions(self) -> list[Aggregate]:
        return [a for a in self.aggregates if a.status == "regression" and a.gated]

    @property
    def exit_code(self) -> int:
        if self.refusals and not self.forced:
            return 2
        if self.gated_regressions or self.aggregate_regressions:
            return 1
        if self.fail_on_missing and any(c.gated for c in self.of("missing")):
            return 1
        return 0

    @property
    def verdict(self) -> str:
        code = self.exit_code
        if code == 2:
            return "REFUSED"
        if code == 1:
            n = len(self.gated_regressions)
            parts = [f"{n} regression{'s' if n != 1 else ''}"] if n else []
            if self.aggregate_regressions:
                parts.append(f"{len(self.aggregate_regressions)} weighted-mean regression(s)")
            if not parts:
                parts.append(f"{len([c for c in self.of('missing') if c.gated])} missing benchmark(s)")
            return "FAIL: " + ", ".join(parts)
        return "PASS" + (" (forced past refusals)" if self.refusals else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["exit_code"] = self.exit_code
        d["verdict"] = self.verdict
        for c, raw in zip(self.comparisons, d["comparisons"]):
            raw["ratio"] = c.ratio
        return d


def min_p_value(n: int, m: int) -> float:
    """Smallest two-sided p-value an exact Mann-Whitney U test can give for samples of n and m."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


def mann_whitney_p(base: np.ndarray, cand: np.ndarray) -> float:
    from scipy.stats import mannwhitneyu

    if base.size == 0 or cand.size == 0:
        return 1.0
    if np.all(base == base[0]) and np.all(cand == cand[0]) and base[0] == cand[0]:
        return 1.0  # identical constant samples: no evidence of a difference (scipy would give nan)
    p = float(mannwhitneyu(cand, base, alternative="two-sided").pvalue)
    return p if math.isfinite(p) else 1.0


def _summary(r: ResultFile) -> dict:
    out = {"path": r.path, "gpu_name": r.gpu_name, "gpu_slug": r.gpu_slug, "measured_on": r.measured_on,
           "commit": r.commit, "datetime": r.datetime, "n_benchmarks": len(r.benchmarks),
           "kernel_hashes": r.kernel_hashes(), "suite_hash": r.machine.get("suite_hash")}
    for k in VERSION_KEYS:
        out[k] = r.machine.get(k)
    return out


def _bootstrap_medians(rounds: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, rounds.size, size=(n_boot, rounds.size))
    return np.median(rounds[idx], axis=1)


def compare(baseline: ResultFile, candidate: ResultFile, *, threshold: float = 0.05, alpha: float = 0.002,
            force: bool = False, gate_all: bool = False, fail_on_missing: bool = False,
            n_boot: int | None = None, seed: int = 0) -> GateReport:
    """Compare two result files (or merged folders); see the module docstring for the rules."""
    if not (0 < threshold < 10):
        raise ValueError(f"threshold must be a fraction in (0, 10), got {threshold}")
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n_boot is None:  # >= 10 resamples beyond each end of the interval
        n_boot = max(2000, math.ceil(20 / alpha))
    report = GateReport(_summary(baseline), _summary(candidate), threshold, alpha, [], [], forced=force,
                        fail_on_missing=fail_on_missing)
    _check_machines(baseline, candidate, report)

    base, cand = baseline.by_id(), candidate.by_id()
    matched = [i for i in base if i in cand]
    if not matched:
        report.refusals.append("no benchmark id occurs in both files: nothing to compare")
    mismatched = [i for i in matched if base[i].definition() != cand[i].definition()]
    if mismatched:
        b, c = base[mismatched[0]], cand[mismatched[0]]
        report.refusals.append(
            f"{len(mismatched)} benchmark(s) name a different workload in the two files, e.g. {mismatched[0]}: "
            f"profile/seed/step {b.definition()} vs {c.definition()}; the suites' shape definitions changed")
    if matched and not any(base[i].rounds.size and cand[i].rounds.size for i in matched):
        report.refusals.append("no raw rounds in the files: run the suites with --benchmark-save-data")

    def gated(b: BenchResult) -> bool:
        return gate_all or b.provider_kind in GATED_KINDS

    log_ratio_boot: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed)
    underpowered_min = None
    for i in matched:
        b, c = base[i], cand[i]
        comp = _new_comparison(b, gated(b))
        comp.n_base, comp.n_cand = int(b.rounds.size), int(c.rounds.size)
        comp.base_median_s = float(np.median(b.rounds)) if b.rounds.size else b.median_s
        comp.cand_median_s = float(np.median(c.rounds)) if c.rounds.size else c.median_s
        if comp.base_median_s and comp.cand_median_s:
            comp.change = comp.cand_median_s / comp.base_median_s - 1.0
        if not (b.rounds.size and c.rounds.size) or comp.change is None:
            comp.status = "no-data"
            comp.note = "no raw rounds (saved without --benchmark-save-data?)"
        else:
            comp.p_value = mann_whitney_p(b.rounds, c.rounds)
            big_slow = comp.change > threshold
            big_fast = 1.0 / (1.0 + comp.change) - 1.0 > threshold
            if comp.p_value < alpha and big_slow:
                comp.status = "regression"
            elif comp.p_value < alpha and big_fast:
                comp.status = "improvement"
            elif (big_slow or big_fast) and min_p_value(comp.n_base, comp.n_cand) >= alpha:
                comp.status = "underpowered"
                comp.note = f"{comp.n_base} vs {comp.n_cand} rounds cannot reach p < {alpha:g}"
                underpowered_min = _rounds_needed(alpha)
            else:
                comp.status = "unchanged"
            if b.rounds.size >= 5 and c.rounds.size >= 5:
                log_ratio_boot[i] = np.log(_bootstrap_medians(b.rounds, n_boot, rng)
                                           / _bootstrap_medians(c.rounds, n_boot, rng))
        if b.weight is not None and c.weight is not None and not math.isclose(b.weight, c.weight, rel_tol=1e-6,
                                                                                abs_tol=1e-12):
            comp.note = (comp.note + "; " if comp.note else "") + f"weight {b.weight:.4g} -> {c.weight:.4g}"
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

    _weights_and_aggregates(report, base, log_ratio_boot)
    _warnings(report, baseline, candidate, underpowered_min)
    return report


def _rounds_needed(alpha: float) -> int:
    n = 2
    while min_p_value(n, n) >= alpha:
        n += 1
    return n


def _new_comparison(b: BenchResult, is_gated: bool) -> Comparison:
    return Comparison(id=b.id, family=b.family or b.suite, kernel=b.kernel, provider=b.provider or "?",
                      provider_kind=b.provider_kind, mode=b.mode, shape_id=b.shape_id or b.name,
                      status="", gated=is_gated)


def _check_machines(baseline: ResultFile, candidate: ResultFile, report: GateReport) -> None:
    if baseline.gpu_name != candidate.gpu_name:
        report.refusals.append(f"different GPUs: baseline {baseline.gpu_name!r}, candidate {candidate.gpu_name!r}")
    if baseline.measured_on != candidate.measured_on:
        report.refusals.append(
            f"measured in different places: baseline {baseline.measured_on}, candidate {candidate.measured_on}")
    elif CPU_MEASURED_ON in (baseline.measured_on, candidate.measured_on):
        report.refusals.append("CPU-interpreter timings are a smoke test of the code path, not performance; "
                               "gate GPU results (--force runs the comparison anyway)")
    for label, r in (("baseline", baseline), ("candidate", candidate)):
        if r.throttled:
            report.refusals.append(f"the {label} run is marked throttled ("
                                   + ("; ".join(r.throttle_reasons()) or "see its environment record")
                                   + "): rerun it on a quiet GPU (--force compares anyway)")


def _weights_and_aggregates(report: GateReport, base: dict[str, BenchResult],
                            log_ratio_boot: dict[str, np.ndarray]) -> None:
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in report.comparisons:
        if c.change is not None and c.status not in ("new", "missing"):
            groups.setdefault((c.family, c.provider), []).append(c)
    alpha, thr = report.alpha, report.threshold
    for (family, provider), comps in sorted(groups.items()):
        raw = np.array([base[c.id].weight if base[c.id].weight is not None else np.nan for c in comps])
        if np.all(np.isnan(raw)) or np.nansum(raw) <= 0:
            w = np.full(len(comps), 1.0 / len(comps))
            report.notes.append(f"{family}/{provider}: no shape weights recorded; geometric mean is unweighted")
        else:
            raw = np.nan_to_num(raw, nan=0.0)
            w = raw / raw.sum()
        for c, wi in zip(comps, w):
            c.weight = float(wi)
        log_speed = np.array([-math.log1p(c.change) for c in comps])
        speedup = float(math.exp(np.dot(w, log_speed)))
        ci_low = ci_high = None
        if all(c.id in log_ratio_boot for c in comps):
            boot = sum(wi * log_ratio_boot[c.id] for c, wi in zip(comps, w))
            lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
            ci_low, ci_high = float(math.exp(lo)), float(math.exp(hi))
        status = "unchanged"
        if ci_high is not None and 1.0 / speedup - 1.0 > thr and ci_high < 1.0:
            status = "regression"
        elif ci_low is not None and speedup - 1.0 > thr and ci_low > 1.0:
            status = "improvement"
        kind = comps[0].provider_kind
        report.aggregates.append(Aggregate(family, provider, kind, len(comps), speedup, ci_low, ci_high, status,
                                           comps[0].gated))


def _warnings(report: GateReport, baseline: ResultFile, candidate: ResultFile, underpowered_min) -> None:
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
    unchanged_reg = sorted({x.family for x in report.gated_regressions
                            if x.family in bh and x.family in ch and bh[x.family] == ch[x.family]})
    if unchanged_reg:
        report.warnings.append("regressions in families whose kernel source did not change ("
                               + ", ".join(unchanged_reg) + "): look at the environment or noise first")
    for a in report.aggregates:
        if not a.gated and abs(math.log(a.speedup)) > math.log1p(report.threshold):
            report.warnings.append(
                f"control provider {a.family}/{a.provider} ({a.provider_kind or 'unknown kind'}) moved by "
                f"{1 / a.speedup - 1:+.1%}: the machine or software may differ between the runs")
    n_under = len(report.of("underpowered"))
    if n_under:
        report.warnings.append(f"{n_under} comparison(s) changed by more than the threshold but have too few rounds "
                               f"to test at alpha={report.alpha:g}; use at least {underpowered_min} rounds each")
    testable = [x for x in report.comparisons if x.gated and x.status in ("regression", "improvement", "unchanged")]
    gated_matched = [x for x in report.comparisons if x.gated and x.status not in ("new", "missing")]
    if gated_matched and not testable:
        report.refusals.append("no gated benchmark could be tested (all underpowered or without raw rounds)")
    missing = report.of("missing")
    if missing:
        report.warnings.append(f"{len(missing)} benchmark(s) of the baseline are missing from the candidate "
                               "(skipped, failed, or cut by the time budget)")
