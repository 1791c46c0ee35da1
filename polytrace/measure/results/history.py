"""A benchmark's time across the stored runs: ``polytrace results history``.

Every result file under ``<root>/<gpu-slug>/`` is one run (date and commit from the file). Per
(GPU, benchmark id) the runs form a series of per-run median times, and the series is searched for
change points with a stated test:

    at each run i (the first run of a new level), compare the log per-run medians of up to
    ``window`` runs before i with up to ``window`` runs from i on (at least ``MIN_SIDE`` on each
    side) by Welch's two-sided t-test; i is a change point when p < ``alpha`` AND the windows'
    medians differ by more than ``threshold``; of candidates closer than ``window`` runs only the
    one with the smallest p is kept.

Per-run medians, not pooled rounds, are the observations: rounds of one session share that
session's clock, temperature and neighbours (5-20% between sessions on shared GPUs), so pooling
them would call every session a change point. The t-test carries that session-to-session spread
in its variance. A change point is a lead to follow, not a verdict: the gate decides pull requests.

A change point names the commits on either side and the version changes (driver, torch, triton,
CUDA) and kernel source changes between those two runs that coincide with it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ...errors import PolytraceError
from .plots import pyplot, staged_pngs
from .schema import CPU_MEASURED_ON, ResultFile, load_result
from .select import keyword_matcher
from .store import BASELINES, PLOTS, TUNING, default_root, format_time, safe_name

MIN_SIDE = 3  # runs on each side of a change point: Welch's test with 2 runs a side has ~2 degrees of freedom
VERSION_KEYS = ("driver_version", "torch_version", "triton_version", "cuda_version")
_SHOWN_SKIPS = 3


@dataclass
class RunPoint:
    path: str
    datetime: str
    date: str
    commit: str
    median_s: float
    n_rounds: int
    versions: dict[str, str]
    kernel_hash: str


@dataclass
class ChangePoint:
    index: int  # first run of the new level
    date: str
    commit_before: str
    commit_after: str
    change: float  # median of the window after / median of the window before - 1
    p_value: float
    coinciding: list[str] = field(default_factory=list)  # version or kernel source changes at this run


@dataclass
class Series:
    id: str
    gpu_slug: str
    family: str
    points: list[RunPoint]
    change_points: list[ChangePoint] = field(default_factory=list)


@dataclass
class History:
    root: str
    gpu: str | None
    keyword: str | None
    window: int
    alpha: float
    threshold: float
    n_runs: int
    series: list[Series]
    notes: list[str] = field(default_factory=list)

    @property
    def test(self) -> str:
        return (f"Welch's two-sided t-test on the log per-run medians of up to {self.window} runs before vs "
                f"{self.window} runs from the candidate run (at least {MIN_SIDE} a side): p < {self.alpha:g} and "
                f"the windows' medians differ by more than {self.threshold:.1%}; the smallest p within "
                f"{self.window} runs is kept")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["test"] = self.test
        return d


def welch_p(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided Welch t-test p-value; two constant samples give 0 when they differ, else 1."""
    from scipy.stats import ttest_ind

    if np.ptp(left) == 0 and np.ptp(right) == 0:
        return 0.0 if left[0] != right[0] else 1.0
    p = float(ttest_ind(left, right, equal_var=False).pvalue)
    return p if math.isfinite(p) else 1.0


def find_change_points(log_medians, window: int = 5, alpha: float = 0.01,
                       threshold: float = 0.05) -> list[tuple[int, float, float]]:
    """(index, change, p) of the change points of a series of log per-run medians (see the module
    docstring for the test)."""
    if window < MIN_SIDE:
        raise PolytraceError(f"--window: at least {MIN_SIDE} runs, got {window}")
    x = np.asarray(log_medians, dtype=np.float64)
    candidates = []
    for i in range(MIN_SIDE, x.size - MIN_SIDE + 1):
        left, right = x[max(0, i - window):i], x[i:i + window]
        shift = float(np.median(right) - np.median(left))
        if abs(shift) <= math.log1p(threshold):
            continue
        p = welch_p(left, right)
        if p < alpha:
            candidates.append((p, -abs(shift), i, shift))
    kept: list[tuple[int, float, float]] = []
    for p, _, i, shift in sorted(candidates):
        if all(abs(i - j) >= window for j, _, _ in kept):
            kept.append((i, math.expm1(shift), p))
    return sorted(kept)


def _stored_files(root: Path) -> list[Path]:
    skip = {BASELINES, TUNING, PLOTS}
    return sorted(p for p in root.glob("*/*.json") if p.parent.name not in skip and p.is_file())


def _load_runs(root: Path, gpu: str | None, notes: list[str]) -> list[ResultFile]:
    unreadable, cpu, runs, slugs = [], 0, [], set()
    for path in _stored_files(root):
        try:
            r = load_result(path)
        except PolytraceError as exc:
            unreadable.append(str(exc))
            continue
        slugs.add(r.gpu_slug)
        if gpu is not None and r.gpu_slug != gpu:
            continue
        if r.measured_on == CPU_MEASURED_ON and gpu != "cpu":
            cpu += 1
            continue
        runs.append(r)
    if unreadable:
        notes.append(f"skipped {len(unreadable)} unreadable file(s): " + "; ".join(unreadable[:_SHOWN_SKIPS])
                     + (" ..." if len(unreadable) > _SHOWN_SKIPS else ""))
    if cpu:
        notes.append(f"skipped {cpu} CPU-interpreter run(s): not performance (--gpu cpu shows them)")
    if gpu is not None and not runs:
        have = ", ".join(sorted(slugs)) or "none"
        raise PolytraceError(f"--gpu {gpu}: no stored runs of that GPU under {root} (GPUs there: {have})")
    runs.sort(key=lambda r: (r.datetime, r.path))
    return runs


def load_history(root: str | Path | None = None, gpu: str | None = None, keyword: str | None = None,
                 window: int = 5, alpha: float = 0.01, threshold: float = 0.05) -> History:
    """Every stored run under ``root`` (default ``results/``), one series per (GPU, benchmark id)
    matching ``keyword`` (pytest's ``-k`` syntax), with change points."""
    if not 0 < alpha < 1:
        raise PolytraceError(f"--alpha: must be between 0 and 1, got {alpha}")
    if not 0 < threshold < 10:
        raise PolytraceError(f"--threshold: must be a fraction in (0, 10), got {threshold}")
    if window < MIN_SIDE:
        raise PolytraceError(f"--window: at least {MIN_SIDE} runs, got {window}")
    base = Path(root or default_root())
    if not base.is_dir():
        raise PolytraceError(f"{base}: results folder not found")
    match = keyword_matcher(keyword)
    notes: list[str] = []
    runs = _load_runs(base, gpu, notes)
    if not runs:
        raise PolytraceError(f"{base}: no stored GPU result files (store a run with: polytrace results store FILE)")
    by_key: dict[tuple[str, str], Series] = {}
    for r in runs:
        versions = {k: str(r.machine.get(k) or "") for k in VERSION_KEYS}
        for b in r.benchmarks:
            if not match(b.id):
                continue
            median = b.median_s  # the rounds' median where the file has rounds (schema.parse_benchmark)
            if not median:
                continue
            s = by_key.setdefault((r.gpu_slug, b.id), Series(b.id, r.gpu_slug, b.family, []))
            s.points.append(RunPoint(r.path, r.datetime, r.date, r.commit, median, int(b.rounds.size), versions,
                                     b.kernel_hash or r.kernel_hashes().get(b.family, "")))
    if not by_key:
        raise PolytraceError(f"-k {keyword!r}: matches no timed benchmark in {len(runs)} stored run(s)"
                             if keyword else f"{base}: the stored runs hold no timed benchmark")
    series = [by_key[k] for k in sorted(by_key)]
    for s in series:
        logs = [math.log(p.median_s) for p in s.points]
        for i, change, p in find_change_points(logs, window, alpha, threshold):
            before, after = s.points[i - 1], s.points[i]
            s.change_points.append(ChangePoint(i, after.date, before.commit, after.commit, change, p,
                                               _coinciding(before, after, s.family)))
    return History(str(base), gpu, keyword, window, alpha, threshold, len(runs), series, notes)


def _coinciding(before: RunPoint, after: RunPoint, family: str) -> list[str]:
    out = [f"{k.removesuffix('_version')} {before.versions[k] or '?'} -> {after.versions[k] or '?'}"
           for k in VERSION_KEYS if before.versions[k] != after.versions[k]]
    if before.kernel_hash and after.kernel_hash and before.kernel_hash != after.kernel_hash:
        out.append(f"kernels/{family or '?'} source {before.kernel_hash} -> {after.kernel_hash}")
    return out


def format_history(h: History, run_tables: int = 5) -> str:
    """The summary table, every change point, and per-run tables when at most ``run_tables`` series."""
    from tabulate import tabulate

    dates = [p.date for s in h.series for p in s.points]
    gpus = ", ".join(sorted({s.gpu_slug for s in h.series}))
    lines = [f"polytrace results history: {len(h.series)} benchmark(s) over {h.n_runs} run(s) in {h.root} ({gpus}), "
             f"{min(dates)} .. {max(dates)}",
             f"change points: {h.test}"]
    lines += [f"note: {n}" for n in h.notes]
    rows = [[s.id, s.gpu_slug, len(s.points), s.points[0].date, s.points[-1].date, format_time(s.points[0].median_s),
             format_time(s.points[-1].median_s), len(s.change_points) or "-"] for s in h.series]
    lines += ["", tabulate(rows, headers=["benchmark", "gpu", "runs", "first", "last", "first median",
                                          "last median", "change points"], disable_numparse=True)]
    found = [(s, c) for s in h.series for c in s.change_points]
    lines.append("")
    if not found:
        lines.append("no change points")
    for s, c in found:
        also = f"; coincides with {', '.join(c.coinciding)}" if c.coinciding else ""
        lines.append(f"change point: {s.id} ({s.gpu_slug}) from {c.date} (commit {c.commit_before} -> "
                     f"{c.commit_after}): {c.change:+.1%}, p={c.p_value:.1e}{also}")
    if len(h.series) <= run_tables:
        for s in h.series:
            starts = {c.index for c in s.change_points}
            rows = [["*" if i in starts else "", p.date, p.commit, format_time(p.median_s), p.n_rounds,
                     p.versions["torch_version"] or "-", p.versions["triton_version"] or "-",
                     p.versions["driver_version"] or "-"] for i, p in enumerate(s.points)]
            lines += ["", f"{s.id} ({s.gpu_slug}); * = change point",
                      tabulate(rows, headers=["", "date", "commit", "median", "rounds", "torch", "triton", "driver"],
                               disable_numparse=True)]
    return "\n".join(lines)


def _plot_name(s: Series) -> str:
    digest = hashlib.sha256(f"{s.gpu_slug}/{s.id}".encode()).hexdigest()[:8]
    return f"history_{safe_name(s.id)[:80]}_{safe_name(s.gpu_slug)[:20]}_{digest}.png"


def plot_history(h: History, out_dir: str | Path, max_plots: int = 20) -> list[Path]:
    """One PNG per series (those with change points first, at most ``max_plots``): per-run median
    time, change points as dashed lines, coinciding version changes written beside them. Written to
    a temporary folder and moved into ``out_dir`` only when every plot succeeded."""
    plt = pyplot()
    chosen = sorted(h.series, key=lambda s: (not s.change_points, s.id))[:max_plots]
    try:
        with staged_pngs(out_dir, "--plot") as stage:
            for s in chosen:
                fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(s.points) + 3), 4.0))
                ys = [p.median_s * 1e3 for p in s.points]
                ax.plot(range(len(ys)), ys, "o-", ms=4)
                for c in s.change_points:
                    ax.axvline(c.index - 0.5, color="tab:red", ls="--", lw=1)
                    text = f"{c.change:+.1%}" + ("\n" + "\n".join(c.coinciding) if c.coinciding else "")
                    ax.annotate(text, (c.index - 0.5, max(ys)), fontsize=7, color="tab:red", va="top",
                                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
                ax.set_xticks(range(len(ys)))
                ax.set_xticklabels([f"{p.date}\n{p.commit[:8]}" for p in s.points], rotation=60, ha="right",
                                   fontsize=6)
                ax.set_ylabel("median time per run (ms)")
                title = s.id if len(s.id) <= 90 else "..." + s.id[-87:]
                ax.set_title(f"{title}\n{s.gpu_slug}, measured; {len(s.change_points)} change point(s)", fontsize=8)
                ax.grid(alpha=0.3)
                fig.tight_layout()
                fig.savefig(stage.reserve(_plot_name(s)), dpi=110)
                plt.close(fig)
    finally:
        plt.close("all")
    written = [stage.dest / name for name in stage.names]
    if len(h.series) > len(chosen):
        h.notes.append(f"plotted {len(chosen)} of {len(h.series)} series (those with change points first); "
                       "-k narrows the selection")
    return written
