"""Text and Markdown renderings of a gate report (Markdown fit for a pull-request comment), and the
pieces both comparison reports render with (``ab``'s ``render`` uses them too): the status-ordered
rows, a timed comparison's cells, the tables, the Markdown title, sections and details block."""

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


def format_weight(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def escape_cell(s: str, md: bool, newlines: bool = False) -> str:
    """A free-text cell: Markdown tables break on "|" (and, where ``newlines``, on a line break)."""
    if not md:
        return s
    s = s.replace("|", "\\|")
    return s.replace("\n", " ") if newlines else s


def timing_cells(c, alpha: float | None) -> list[str]:
    """baseline, candidate, change, CI and p of a compared case (a gate ``Comparison`` or an ``ab``
    ``CaseResult``: both carry medians, change, interval and p-value)."""
    return [format_time(c.base_median_s), format_time(c.cand_median_s), format_change(c.change),
            "-" if c.change is None else format_interval(c.ci_low, c.ci_high), format_p(c.p_value, alpha)]


def speedup_cells(a) -> list[str]:
    """An aggregate's weighted geometric-mean speedup and its interval ("-" when untested)."""
    return [f"{a.speedup:.3f}x", "-" if a.ci_low is None else f"{a.ci_low:.3f}-{a.ci_high:.3f}"]


def by_status(items, order: tuple[str, ...], statuses, first=lambda x: ()) -> list:
    """The ``items`` whose status is in ``statuses``, in ``order``, then by ``first(item)`` and the
    case's family, kernel, mode, provider and shape (shapes in natural order)."""
    return sorted((x for x in items if x.status in statuses),
                  key=lambda x: (order.index(x.status), *first(x), x.family, x.kernel, x.mode, x.provider,
                                 natural_key(x.shape_id)))


def table(rows: list[list[str]], head: list[str], md: bool) -> str:
    from tabulate import tabulate

    if md:
        return tabulate(rows, headers=head, tablefmt="github", disable_numparse=True)
    return tabulate(rows, headers=head, disable_numparse=True)


def counts_line(of, order: tuple[str, ...], none: str = "") -> str:
    """"counts: regression 1, unchanged 9": each status with items (``of(status)``), in ``order``."""
    return "counts: " + (", ".join(f"{k} {n}" for k in order if (n := len(of(k)))) or none)


def text_tables(order: tuple[str, ...], select, rows, head: list[str], show_all: bool,
                aggregates: tuple[str, list[list[str]], list[str]]) -> list[str]:
    """The plain-text tables: the items (``unchanged`` ones only with ``show_all``), then the
    aggregates ((caption, rows, head); nothing without rows)."""
    items = select(order if show_all else tuple(x for x in order if x != "unchanged"))
    out = ["", table(rows(items), head, md=False)] if items else []
    caption, agg_rows, agg_head = aggregates
    return out + (["", caption, table(agg_rows, agg_head, md=False)] if agg_rows else [])


def markdown_title(tool: str, mark: str, verdict: str) -> str:
    """``### polytrace gate: **FAIL** (2 regressions)``: the mark bold, the verdict's rest in brackets
    ("FAIL: 2 regressions", "REFUSED (1 error)", "PASS" -> "2 regressions", "1 error", nothing)."""
    detail = verdict.removeprefix(mark)
    detail = detail[2:] if detail.startswith(": ") else detail[2:-1] if detail.startswith(" (") else detail
    return f"### polytrace {tool}: **{mark}**" + (f" ({detail})" if detail else "")


def status_sections(sections, select, rows, head: list[str]) -> list[str]:
    """One Markdown section per (title, status) with items: ``select((status,))`` picks them in
    order, ``rows(items)`` gives the table's rows."""
    out = []
    for title, status in sections:
        items = select((status,))
        if items:
            out += [f"#### {title} ({len(items)})", "", table(rows(items), head, md=True), ""]
    return out


def details(label: str, rows: list[list[str]], head: list[str]) -> list[str]:
    """Every compared item in a folded Markdown block ("All 12 benchmarks")."""
    if not rows:
        return []
    return [f"<details><summary>All {len(rows)} {label}</summary>", "", table(rows, head, md=True), "",
            "</details>", ""]


def _rows(comps: list[Comparison], md: bool, alpha: float | None = None) -> list[list[str]]:
    return [[escape_cell(c.id, md), c.status + ("" if c.gated else " (control)"), format_weight(c.weight),
             *timing_cells(c, alpha), f"{c.n_base}/{c.n_cand}", escape_cell(c.note, md)] for c in comps]


_HEAD = ["benchmark", "status", "weight", "baseline", "candidate", "change", "CI", "p", "rounds", "note"]


def _agg_rows(report: GateReport) -> list[list[str]]:
    rows = []
    for a in report.aggregates:
        n = str(a.n) if a.n_tested == a.n else f"{a.n_tested} of {a.n}"
        rows.append([f"{a.family}/{a.kernel}" if a.kernel else a.family, a.mode or "-", a.provider,
                     a.provider_kind or "?", n, a.weight_basis, *speedup_cells(a),
                     a.status + ("" if a.gated else " (control)")])
    return rows


_AGG_HEAD = ["kernel", "mode", "provider", "kind", "n", "weights", "weighted geomean speedup", "CI", "status"]


def _sorted(report: GateReport, statuses) -> list[Comparison]:
    return by_status(report.comparisons, _ORDER, statuses, first=lambda c: (not c.gated,))


def format_text(report: GateReport, show_all: bool = False) -> str:
    b, c = report.baseline, report.candidate
    lines = [f"polytrace gate: {report.verdict}", *report.impact,
             f"baseline  {b['path']} ({b['gpu_name']}, {b['measured_on']}, commit {b['commit']})",
             f"candidate {c['path']} ({c['gpu_name']}, {c['measured_on']}, commit {c['commit']})",
             f"rule: regression = Mann-Whitney U (two-sided) p < {report.alpha:g} on raw rounds AND median change "
             f"beyond {report.threshold:.1%}; unchanged = the change's {1 - report.alpha:.1%} interval within "
             f"+-{report.threshold:.1%}; otherwise inconclusive"]
    lines.append(counts_line(report.of, _ORDER))
    for e in report.errors:
        lines.append(f"ERROR: {e}")
    for r in report.refusals:
        lines.append(f"REFUSED: {r}" + (" (overridden by --force)" if report.forced else ""))
    for w in report.warnings:
        lines.append(f"warning: {w}")
    for n in report.notes:
        lines.append(f"note: {n}")
    lines += text_tables(_ORDER, lambda st: _sorted(report, st), lambda comps: _rows(comps, False, report.alpha),
                         _HEAD, show_all, ("weighted geometric-mean speedup per kernel, mode and provider (baseline "
                                           "time / candidate time; >1 = faster):", _agg_rows(report), _AGG_HEAD))
    return "\n".join(lines)


def format_markdown(report: GateReport) -> str:
    b, c = report.baseline, report.candidate
    out = [markdown_title("gate", MARKS[report.exit_code], report.verdict), "",
           *[f"**{line}**" for line in report.impact], *([""] if report.impact else []),
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
    out += [table(env, ["", "baseline", "candidate"], md=True), ""]
    if report.errors:
        out.append("**Errors** (the gate cannot vouch for these; `--force` does not override them):")
        out += [f"- {e}" for e in report.errors] + [""]
    if report.refusals:
        out.append("**Refused:**" + (" (overridden with `--force`)" if report.forced else ""))
        out += [f"- {r}" for r in report.refusals] + [""]
    out += status_sections((("Untestable (no usable rounds)", "error"), ("Regressions", "regression"),
                            ("Inconclusive (too few rounds or too much spread to decide)", "inconclusive"),
                            ("Improvements", "improvement")), lambda st: _sorted(report, st),
                           lambda comps: _rows(comps, True, report.alpha), _HEAD)
    if report.aggregates:
        out += ["#### Weighted geometric-mean speedup per kernel, mode and provider", "",
                "Baseline time / candidate time, weighted by each shape's share of the workload; "
                f"CI: {1 - report.alpha:.1%} bootstrap interval over rounds; n: members with enough rounds "
                "to test, of all compared.", "",
                table(_agg_rows(report), _AGG_HEAD, md=True), ""]
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
    out += details("benchmarks", _rows(_sorted(report, _ORDER), True, report.alpha), _HEAD)
    return "\n".join(out)
