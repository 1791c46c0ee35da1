"""Results store, regression gate and plots for the suites' pytest-benchmark JSON files.

- ``validation``: the boundary: bounded JSON reading, typed and range-checked fields
- ``schema``: reading result files (``load_result``, ``ResultFile``, ``BenchResult``)
- ``store``: layout ``results/<gpu-slug>/<date>_<commit>_<suite>.json``, baselines, ``ls``/``show``
- ``stats``: overflow-safe medians, the exact Mann-Whitney bound, the bounded-memory bootstrap
- ``gate``: the trace-weighted, statistically tested regression gate (``compare``)
- ``render``: text and Markdown of a gate report
- ``history``: a benchmark's time across stored runs, change points (``load_history``)
- ``select``: ``-k`` expressions over benchmark ids (``keyword_matcher``)
- ``plots``: PNG plots and ``report_links`` for ``polytrace report``

matplotlib, scipy and tabulate are imported on first use.
"""

from __future__ import annotations

from .gate import Aggregate, Comparison, GatePolicy, GateReport, compare
from .plots import plot_files, plot_gate, plot_throughput, report_links
from .render import format_markdown, format_text
from .schema import BenchResult, ResultFile, load_result, merge, parse_result
from .store import (
    baseline_path,
    default_root,
    format_listing,
    format_show,
    list_results,
    result_path,
    set_baseline,
    show_rows,
    store_result,
)
from .verdict import Rule

__all__ = [
    "Aggregate", "BenchResult", "Comparison", "GatePolicy", "GateReport", "ResultFile", "Rule", "baseline_path",
    "compare",
    "default_root", "format_listing", "format_markdown", "format_show", "format_text", "list_results",
    "load_result", "merge", "parse_result", "plot_files", "plot_gate", "plot_throughput", "report_links", "result_path",
    "set_baseline", "show_rows", "store_result",
]
