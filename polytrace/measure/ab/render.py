"""Text and Markdown (fit for a pull-request comment) renderings of an ``ab`` report, built from the
gate's rendering pieces (``polytrace.measure.results.render``): the same cells, tables, order and sections."""

from __future__ import annotations

from ..results.render import (
    by_status,
    counts_line,
    details,
    escape_cell,
    format_weight,
    markdown_title,
    speedup_cells,
    status_sections,
    table,
    text_tables,
    timing_cells,
)
from .report import STATUSES, AbReport, CaseResult

_HEAD = ["case", "status", "weight", "BASE", "CAND", "change", "CI", "p", "pairs", "outputs", "note"]
MARKS = {0: "PASS", 1: "FAIL", 2: "ERROR", 3: "INCONCLUSIVE"}
_AGG_HEAD = ["kernel", "mode", "provider", "n", "weights", "weighted geomean speedup", "CI", "status"]
MAX_LISTED = 20  # ids of cases present in one revision only, listed in the Markdown before "..."


def _outputs(c: CaseResult) -> str:
    if not c.outputs:
        return "-"
    if c.outputs == "within bounds" and c.output_diff is not None:
        return f"within bounds (max diff {c.output_diff:.2g})"
    return c.outputs


def _sorted(report: AbReport, statuses=STATUSES) -> list[CaseResult]:
    return by_status(report.cases, STATUSES, statuses)


def _rows(cases: list[CaseResult], md: bool, alpha: float | None = None) -> list[list[str]]:
    return [[escape_cell(c.id, md, newlines=True), c.status, format_weight(c.share), *timing_cells(c, alpha),
             str(c.pairs), escape_cell(_outputs(c), md, newlines=True), escape_cell(c.note, md, newlines=True)]
            for c in cases]


def _agg_rows(report: AbReport) -> list[list[str]]:
    return [[f"{a.family}/{a.kernel}", a.mode, a.provider, str(a.n), a.weight_basis, *speedup_cells(a), a.status]
            for a in report.aggregates]


def _pairs(report: AbReport) -> str:
    seq = report.sequential
    if not seq:
        return f"{report.rounds} interleaved pairs per case"
    return (f"pairs added until decided (looks at {', '.join(map(str, seq['looks']))} pairs; {seq['rule']}; "
            f"alpha {report.alpha:g} / {len(seq['looks'])} = {seq['alpha_per_look']:.3g} per look"
            + (f"; budget {seq['budget_s']:g} s" if seq.get("budget_s") else "") + ")")


def _rule(report: AbReport) -> str:
    a = report.judged_alpha
    return (f"rule: {_pairs(report)} (order drawn per pair, seed {report.seed}); regression = Wilcoxon signed-rank "
            f"(two-sided) on the per-pair log(CAND/BASE) p < {a:.3g} AND the median pair ratio beyond "
            f"{report.threshold:.1%}; unchanged = the change's {1 - a:.2%} interval within +-{report.threshold:.1%}; "
            "otherwise inconclusive; outputs judged by BASE's fp64 reference and the kernel tests' bounds")


def _rev(r: dict) -> str:
    return f"{r['spec']} ({r['short']})" if r["spec"] != r["short"] else r["short"]


def format_text(report: AbReport, show_all: bool = False) -> str:
    d = report.device
    lines = [f"polytrace ab: {report.verdict}", *report.impact,
             f"BASE {_rev(report.base)}  vs  CAND {_rev(report.cand)}",
             f"on {d['gpu_name']} ({d['measured_on']}), torch {d['torch_version']}, triton {d['triton_version']}",
             _rule(report),
             counts_line(report.of, STATUSES, none="none")]
    lines += [f"ERROR: {e}" for e in report.errors] + [f"warning: {w}" for w in report.warnings]
    lines += [f"note: {n}" for n in report.notes]
    lines += text_tables(STATUSES, lambda st: _sorted(report, st),
                         lambda cases: _rows(cases, False, report.judged_alpha), _HEAD, show_all,
                         ("weighted geometric-mean speedup per kernel, mode and provider (BASE time / CAND time; "
                          ">1 = CAND faster):", _agg_rows(report), _AGG_HEAD))
    for what, ids in (("only in CAND (not compared)", report.only_cand), ("only in BASE (not compared)",
                                                                          report.only_base)):
        if ids:
            lines += ["", f"{what}:"] + [f"  {i}" for i in ids]
    return "\n".join(lines)


def format_markdown(report: AbReport) -> str:
    d = report.device
    out = [markdown_title("ab", MARKS[report.exit_code], report.verdict), "",
           *[f"**{line}**" for line in report.impact], "",
           f"BASE **{_rev(report.base)}** vs CAND **{_rev(report.cand)}**, timed in one process on **{d['gpu_name']}** "
           f"({d['measured_on']}; torch {d['torch_version']}, triton {d['triton_version']}). Each case runs "
           f"BASE/CAND pairs back to back ({_pairs(report)}), in an order drawn per pair (seed {report.seed}), on "
           "the same inputs. A case regresses when a two-sided Wilcoxon signed-rank test on the per-pair "
           f"log(CAND/BASE) gives p < {report.judged_alpha:.3g} **and** the median pair ratio is slower by more than "
           f"{report.threshold:.1%}; it is unchanged when the change's {1 - report.judged_alpha:.2%} interval lies "
           f"within +-{report.threshold:.1%}, inconclusive otherwise. Both outputs are checked against BASE's fp64 "
           "reference with the kernel "
           "tests' bounds.", ""]
    if report.warnings:
        out += [f"> :warning: {w}" for w in report.warnings] + [""]
    if report.errors:
        out.append("**Errors** (could not compare; never a pass):")
        out += [f"- {e}" for e in report.errors] + [""]
    out += status_sections((("Outputs changed (CAND fails the output check BASE passes)", "outputs-changed"),
                            ("Regressions", "regression"), ("Could not compare", "error"),
                            ("Inconclusive (more pairs would decide)", "inconclusive"),
                            ("Improvements", "improvement"),
                            ("BASE's output fails its own check (not timed)", "base-wrong")),
                           lambda st: _sorted(report, st), lambda cases: _rows(cases, True, report.judged_alpha),
                           _HEAD)
    if report.aggregates:
        out += ["#### Weighted geometric-mean speedup per kernel, mode and provider", "",
                f"BASE time / CAND time (>1 = CAND faster), weights: each shape's share of the workload's tokens "
                f"(sequences for the planner); CI: {1 - report.judged_alpha:.2%} bootstrap interval over pairs.", "",
                table(_agg_rows(report), _AGG_HEAD, md=True), ""]
    if report.only_cand or report.only_base:
        out.append(f"#### Cases in one revision only ({len(report.only_cand)} in CAND, {len(report.only_base)} "
                   "in BASE; not compared)")
        out += [f"- CAND only: `{i}`" for i in report.only_cand[:MAX_LISTED]]
        out += [f"- BASE only: `{i}`" for i in report.only_base[:MAX_LISTED]]
        if max(len(report.only_cand), len(report.only_base)) > MAX_LISTED:
            out.append("- ... (full list in `--json`)")
        out.append("")
    if report.notes:
        out += ["#### Notes"] + [f"- {n}" for n in report.notes] + [""]
    env = [["revision", report.base["spec"], report.cand["spec"]],
           ["commit", report.base["short"], report.cand["short"]]]
    for f in sorted(set(report.base["kernel_hashes"]) | set(report.cand["kernel_hashes"])):
        b, c = report.base["kernel_hashes"].get(f, "-"), report.cand["kernel_hashes"].get(f, "-")
        env.append([f"kernels/{f} hash", b, c + ("" if b == c else " (changed)")])
    out += [table(env, ["", "BASE", "CAND"], md=True), ""]
    out += details("compared cases", _rows(_sorted(report), True, report.judged_alpha), _HEAD)
    return "\n".join(out)


__all__ = ["format_markdown", "format_text"]
