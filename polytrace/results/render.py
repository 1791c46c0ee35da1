"""Text and Markdown renderings of a gate report (Markdown fit for a pull-request comment)."""

from __future__ import annotations

from .gate import Comparison, GateReport
from .schema import natural_key
from .store import format_time

_ORDER = ("error", "regression", "inconclusive", "improvement", "no-data", "unchanged", "new", "missing")
MARKS = {0: "PASS", 1: "FAIL", 2: "REFUSED", 3: "INCONCLUSIVE"}


def format_change(x: float | None) -> str:
    """A relative change as a signed percentage ("-" when unknown); ``ab``'s tables use it too."""
    return "-" if x is None else f"{x:+.1%}"


def format_p(x: float | None, alpha: float | None = None) -> str:
    """A p-value to 3 significant digits (0.00195, not 0.002), more where it would otherwise print
    as ``alpha`` while differing from it ("-" when untested)."""
    if x is None:
        return "-"
    for digits in range(3, 12):
        text = f"{x:.{digits}g}"
        if alpha is None or x == alpha or float(text) != alpha:
            return text
    return repr(x)


def format_interval(lo: float | None, hi: float | None) -> str:
    """A change's interval as signed percentages; an unbounded end is "?" (both: "unbounded", too
    few rounds for the test's own interval)."""
    if lo is None and hi is None:
        return "unbounded"
    return ("?" if lo is None else f"{lo:+.1%}") + ".." + ("?" if hi is None else f"{hi:+.1%}")


def _w(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _rows(comps: list[Comparison], md: bool, alpha: float | None = None) -> list[list[str]]:
    def esc(s: str) -> str:
        return s.replace("|", "\\|") if md else s

    return [[esc(c.id), c.status + ("" if c.gated else " (control)"), _w(c.weight), format_time(c.base_median_s),
             format_time(c.cand_median_s), format_change(c.change),
             "-" if c.change is None else format_interval(c.ci_low, c.ci_high), format_p(c.p_value, alpha),
             f"{c.n_base}/{c.n_cand}", esc(c.note)] for c in comps]


_HEAD = ["benchmark", "status", "weight", "baseline", "candidate", "change", "CI", "p", "rounds", "note"]


def _agg_rows(report: GateReport) -> list[list[str]]:
    rows = []
    for a in report.aggregates:
        ci = "-" if a.ci_low is None else f"{a.ci_low:.3f}-{a.ci_high:.3f}"
        n = str(a.n) if a.n_tested == a.n else f"{a.n_tested} of {a.n}"
        rows.append([f"{a.family}/{a.kernel}" if a.kernel else a.family, a.mode or "-", a.provider,
                     a.provider_kind or "?", n, a.weight_basis, f"{a.speedup:.3f}x", ci,
                     a.status + ("" if a.gated else " (control)")])
    return rows


_AGG_HEAD = ["kernel", "mode", "provider", "kind", "n", "weights", "weighted geomean speedup", "CI", "status"]


def _sorted(report: GateReport, statuses) -> list[Comparison]:
    return sorted((c for c in report.comparisons if c.status in statuses),
                  key=lambda c: (_ORDER.index(c.status), not c.gated, c.family, c.kernel, c.mode, c.provider,
                                 natural_key(c.shape_id)))


def format_text(report: GateReport, show_all: bool = False) -> str:
    from tabulate import tabulate

    b, c = report.baseline, report.candidate
    lines = [f"polytrace gate: {report.verdict}", *report.impact,
             f"baseline  {b['path']} ({b['gpu_name']}, {b['measured_on']}, commit {b['commit']})",
             f"candidate {c['path']} ({c['gpu_name']}, {c['measured_on']}, commit {c['commit']})",
             f"rule: regression = Mann-Whitney U (two-sided) p < {report.alpha:g} on raw rounds AND median change "
             f"beyond {report.threshold:.1%}; unchanged = the change's {1 - report.alpha:.1%} interval within "
             f"+-{report.threshold:.1%}; otherwise inconclusive"]
    counts = {s: len(report.of(s)) for s in _ORDER}
    lines.append("counts: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    for e in report.errors:
        lines.append(f"ERROR: {e}")
    for r in report.refusals:
        lines.append(f"REFUSED: {r}" + (" (overridden by --force)" if report.forced else ""))
    for w in report.warnings:
        lines.append(f"warning: {w}")
    for n in report.notes:
        lines.append(f"note: {n}")
    statuses = _ORDER if show_all else tuple(x for x in _ORDER if x != "unchanged")
    comps = _sorted(report, statuses)
    if comps:
        lines += ["", tabulate(_rows(comps, False, report.alpha), headers=_HEAD, disable_numparse=True)]
    if report.aggregates:
        lines += ["", "weighted geometric-mean speedup per kernel, mode and provider (baseline time / candidate "
                  "time; >1 = faster):",
                  tabulate(_agg_rows(report), headers=_AGG_HEAD, disable_numparse=True)]
    return "\n".join(lines)


def format_markdown(report: GateReport) -> str:
    from tabulate import tabulate

    b, c = report.baseline, report.candidate
    mark = MARKS[report.exit_code]
    detail = report.verdict.removeprefix(mark)  # "FAIL: 2 regressions", "REFUSED (1 error)" -> the rest
    detail = detail[2:] if detail.startswith(": ") else detail[2:-1] if detail.startswith(" (") else detail
    title = f"### polytrace gate: **{mark}**" + (f" ({detail})" if detail else "")
    out = [title, "", *[f"**{line}**" for line in report.impact], *([""] if report.impact else []),
           f"On **{c['gpu_name']}** ({c['measured_on']}). A benchmark regresses when a two-sided Mann-Whitney U "
           f"test on the raw rounds gives p < {report.alpha:g} **and** its median time grows by more than "
           f"{report.threshold:.1%}; it is unchanged when the change's {1 - report.alpha:.1%} interval lies within "
           f"+-{report.threshold:.1%}, inconclusive otherwise. Weights are each shape's share of the sampled "
           "workload's tokens (sequences for the planner).", ""]
    env = [["path", f"`{b['path']}`", f"`{c['path']}`"], ["commit", b["commit"], c["commit"]],
           ["date", b["datetime"][:19], c["datetime"][:19]], ["benchmarks", b["n_benchmarks"], c["n_benchmarks"]]]
    for k in ("torch_version", "triton_version", "driver_version"):
        env.append([k.split("_")[0], b.get(k) or "-", c.get(k) or "-"])
    families = sorted(set(b["kernel_hashes"]) | set(c["kernel_hashes"]))
    for f in families:
        env.append([f"kernels/{f} hash", b["kernel_hashes"].get(f, "-"), c["kernel_hashes"].get(f, "-")])
    out += [tabulate(env, headers=["", "baseline", "candidate"], tablefmt="github", disable_numparse=True), ""]
    if report.errors:
        out.append("**Errors** (the gate cannot vouch for these; `--force` does not override them):")
        out += [f"- {e}" for e in report.errors] + [""]
    if report.refusals:
        out.append("**Refused:**" + (" (overridden with `--force`)" if report.forced else ""))
        out += [f"- {r}" for r in report.refusals] + [""]
    for title, status in (("Untestable (no usable rounds)", "error"), ("Regressions", "regression"),
                          ("Inconclusive (too few rounds or too much spread to decide)", "inconclusive"),
                          ("Improvements", "improvement")):
        comps = _sorted(report, (status,))
        if comps:
            out += [f"#### {title} ({len(comps)})", "",
                    tabulate(_rows(comps, True, report.alpha), headers=_HEAD, tablefmt="github",
                             disable_numparse=True), ""]
    if report.aggregates:
        out += ["#### Weighted geometric-mean speedup per kernel, mode and provider", "",
                "Baseline time / candidate time, weighted by each shape's share of the workload; "
                f"CI: {1 - report.alpha:.1%} bootstrap interval over rounds; n: members with enough rounds "
                "to test, of all compared.", "",
                tabulate(_agg_rows(report), headers=_AGG_HEAD, tablefmt="github", disable_numparse=True), ""]
    new, missing = report.of("new"), report.of("missing")
    if new or missing:
        out.append(f"#### New ({len(new)}) and missing ({len(missing)}) benchmarks")
        out += [f"- new: `{x.id}`" for x in new[:20]] + [f"- missing: `{x.id}`" for x in missing[:20]]
        if len(new) > 20 or len(missing) > 20:
            out.append("- ... (full list in `--json`)")
        out.append("")
    if report.warnings or report.notes:
        out += ["#### Notes"] + [f"- :warning: {w}" for w in report.warnings] + [f"- {n}" for n in report.notes]
        out.append("")
    allc = _sorted(report, _ORDER)
    if allc:
        out += [f"<details><summary>All {len(allc)} benchmarks</summary>", "",
                tabulate(_rows(allc, True, report.alpha), headers=_HEAD, tablefmt="github",
                         disable_numparse=True), "",
                "</details>", ""]
    return "\n".join(out)
