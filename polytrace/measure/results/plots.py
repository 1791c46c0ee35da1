"""PNG plots: throughput against shape per provider with the roofline ceiling (time where a
benchmark moves no counted bytes, e.g. the packing planner), and the gate's per-benchmark time
ratios. matplotlib is imported on first use, with the Agg backend (no display).

Every plot of one call is rendered into a hidden staging folder inside the output folder and moved
into place only once all of them succeeded, so a failure never leaves some PNGs replaced and
others stale. File names are slugs (``[A-Za-z0-9._-]`` parts joined by ``_``) of at most
``MAX_NAME`` characters.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path

from ...errors import PolytraceError
from .gate import GateReport
from .schema import CPU_MEASURED_ON, BenchResult, ResultFile, natural_key

_STATUS_COLOURS = {"regression": "tab:red", "improvement": "tab:green", "inconclusive": "tab:orange",
                   "unchanged": "tab:gray", "no-data": "lightgray"}
# File names stay far below the 255 bytes file systems allow; a longer slug keeps its start and a
# hash of the whole, so two long names stay distinct.
MAX_NAME = 120
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
# Text drawn on a plot: a tick label wraps at commas onto lines of 30 characters, at most 4 lines
# (the suites' longest shape id, 'tokens=16384,vocab=151936,hidden=5120,dtype=bf16', needs 2);
# titles and legend entries are cut at 90 characters.
_TICK_WIDTH, _TICK_LINES, _TEXT_MAX = 30, 4, 90
# Beyond this many shapes (or gate rows) a plot labels only every k-th tick, so the image stays
# below matplotlib's 2**16-pixel limit per side.
_MAX_TICKS = 80


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_file_name(*parts: str, suffix: str = ".png") -> str:
    """``family_kernel_mode_gpu_throughput.png`` from the non-empty parts, slugged and bounded."""
    slugs = [_SLUG.sub("-", str(p)).strip("-._") for p in parts]
    stem = "_".join(s for s in slugs if s) or "plot"
    if len(stem) + len(suffix) > MAX_NAME:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:12]
        stem = f"{stem[:MAX_NAME - len(suffix) - 13]}-{digest}"
    return stem + suffix


class _Stage:
    """Files rendered into ``folder`` (hidden, inside the destination) under unique names."""

    def __init__(self, folder: Path, dest: Path):
        self.folder, self.dest = folder, dest
        self.names: list[str] = []

    def reserve(self, name: str) -> Path:
        """A temporary path for ``name``; a second plot of the same name gets ``-2``, ``-3``, ..."""
        stem, suffix = os.path.splitext(name)
        unique, k = name, 2
        while unique in self.names:
            unique = f"{stem}-{k}{suffix}"
            k += 1
        self.names.append(unique)
        return self.folder / unique


def check_output_dir(out_dir: str | Path, flag: str = "-o") -> Path:
    """Refuse an output folder that cannot be one (an existing file), before any work is done or
    printed; the error names the flag."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PolytraceError(f"{flag} {out}: exists and is not a folder")
    return out


@contextlib.contextmanager
def staged_pngs(out_dir: str | Path, flag: str = "-o"):
    """Render into a hidden folder inside ``out_dir``; the files replace earlier ones only when the
    block finished without an error (so a failed plot never leaves a half-updated set)."""
    out = check_output_dir(out_dir, flag)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".plots-staging-", dir=out))
    except OSError as exc:
        raise PolytraceError(f"{flag} {out}: cannot create folder: {exc.strerror or exc}") from None
    stage = _Stage(folder, out)
    try:
        yield stage
        for name in stage.names:  # every plot rendered: now, and only now, replace the old files
            os.replace(folder / name, out / name)
    except OSError as exc:
        raise PolytraceError(f"{flag} {out}: cannot write the plots: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if created and not any(out.iterdir()):
            out.rmdir()


def _cut(text: str, limit: int = _TEXT_MAX) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tick_label(text: str) -> str:
    """The whole label wrapped at commas (so 'tokens=4096,...' and 'tokens=16384,...' stay apart);
    only a label longer than the tick's lines is shortened in its middle."""
    parts = str(text).split(",")
    lines: list[str] = []
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if lines and len(lines[-1]) + len(piece) <= _TICK_WIDTH:
            lines[-1] += piece
        else:
            lines.extend(textwrap.wrap(piece, _TICK_WIDTH, break_on_hyphens=False) or [piece])
    if len(lines) > _TICK_LINES:
        lines = lines[: _TICK_LINES - 2] + ["..."] + lines[-1:]
    return "\n".join(lines)


def _distinct(labels: list[str]) -> list[str]:
    """Labels made unique (a shortened label can collide with another)."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} (#{seen[lab]})")
    return out


def _legend_label(text: str, missing: str) -> str:
    # matplotlib skips legend labels that start with "_" (and warns when none is left)
    text = _cut(text, 40)
    return missing if not text else (f"'{text}'" if text.startswith("_") else text)


def _positive_finite(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _shape_label(b: BenchResult) -> str:
    """The shape a benchmark ran at: its ``shape_id``, else the pytest parameter, else its name."""
    if b.shape_id:
        return b.shape_id
    m = re.search(r"\[(.*)\]$", b.name)
    return m.group(1) if m else b.name


def _metric(benches: list[BenchResult]) -> str:
    """TFLOP/s for compute-bound kernels, GB/s where bytes are counted, else time (a planner's
    benchmark moves no counted bytes: 0 GB/s would say nothing)."""
    if all(b.roofline == "bf16" and b.flops > 0 for b in benches):
        return "tflops"
    if all(b.bytes_moved > 0 for b in benches):
        return "gbps"
    return "time"


_METRIC = {"tflops": ("TFLOP/s", lambda b: b.tflops), "gbps": ("GB/s", lambda b: b.gbps),
           "time": ("median time (ms)", lambda b: b.median_s * 1e3 if b.median_s else None)}


def _render_throughput(result: ResultFile, stage: _Stage) -> None:
    from ...run.hardware import detect

    plt = pyplot()
    cpu = result.measured_on == CPU_MEASURED_ON
    gpu = None if cpu else detect(result.gpu_name)
    groups: dict[tuple[str, str, str], list[BenchResult]] = {}
    for b in result.benchmarks:
        if _positive_finite(b.median_s):
            kernel = b.kernel or b.name.split("[", 1)[0]
            groups.setdefault((b.family or b.suite, kernel, b.mode), []).append(b)
    for (family, kernel, mode), benches in sorted(groups.items()):
        metric = _metric(benches)
        ylabel, value = _METRIC[metric]
        size: dict[str, float] = {}
        for b in benches:
            size.setdefault(_shape_label(b), b.flops if metric == "tflops" else b.bytes_moved)
        shapes = sorted(size, key=lambda s: (size[s], natural_key(s)))
        xpos = {s: i for i, s in enumerate(shapes)}
        width = min(max(6.0, 0.45 * min(len(shapes), _MAX_TICKS) + 3), 40.0)
        fig, ax = plt.subplots(figsize=(width, 4.6))
        plotted = []
        for prov in sorted({b.provider for b in benches}):
            pts = sorted(((xpos[_shape_label(b)], value(b), b.weight) for b in benches if b.provider == prov),
                         key=lambda t: t[0])
            pts = [(x, y, w) for x, y, w in pts if _positive_finite(y)]
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            # marker area follows the shape's share of the workload (weights outside [0, 1] clamped)
            sizes = [20 + 200 * min(max(w or 0.0, 0.0), 1.0) for _, _, w in pts]
            ax.plot(xs, ys, "-", alpha=0.5)
            ax.scatter(xs, ys, s=sizes, label=_legend_label(prov, "(provider not recorded)"))
            plotted += ys
        if not plotted:
            plt.close(fig)
            continue
        if gpu is not None and metric == "tflops":
            ceil = []
            for s in shapes:
                b = next(x for x in benches if _shape_label(x) == s)
                bound = gpu.ceiling("bf16")
                if b.bytes_moved:
                    bound = min(bound, b.flops / b.bytes_moved * gpu.ceiling("hbm"))
                ceil.append(bound / 1e12)
            ax.step(range(len(shapes)), ceil, where="mid", color="k", ls="--", label=f"roofline ({gpu.slug} datasheet)")
        elif gpu is not None and metric == "gbps":
            ax.axhline(gpu.ceiling("hbm") / 1e9, color="k", ls="--", label=f"HBM peak ({gpu.slug} datasheet)")
        if max(plotted) / min(plotted) > 30:  # times of a planner span decades
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        step = max(1, math.ceil(len(shapes) / _MAX_TICKS))
        ticks = list(range(0, len(shapes), step))
        ax.set_xticks(ticks)
        ax.set_xticklabels(_distinct([_tick_label(shapes[i]) for i in ticks]), rotation=45, ha="right",
                           rotation_mode="anchor", fontsize=7)
        ax.set_xlabel("shape" + (" (sorted by FLOPs)" if metric == "tflops" else " (sorted by bytes moved)"
                                 if metric == "gbps" else ""))
        where = "CPU interpreter: code-path smoke test, NOT performance" if cpu else \
            f"{_cut(result.gpu_name, 40)}, measured ({_cut(result.measured_on, 20)})"
        title = "/".join(p for p in (family, kernel) if p) + (f" {mode}" if mode else "")
        ax.set_title(f"{_cut(title)}\n{where}; commit {_cut(result.commit, 24)}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        slug = result.gpu_slug if result.gpu_slug != "unknown" else ""
        path = stage.reserve(plot_file_name(family, kernel, mode, slug, "throughput" if metric != "time" else "time"))
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)


def plot_throughput(result: ResultFile, out_dir: str | Path) -> list[Path]:
    """One PNG per (family, kernel, mode): each provider's throughput over the shapes (sorted by
    problem size), with the device's datasheet roofline (TFLOP/s for compute-bound kernels, GB/s
    otherwise), or its median time where no bytes are counted. Marker area follows the shape's
    weight in the workload."""
    _check_timed(result)
    with staged_pngs(out_dir) as stage:
        _render_throughput(result, stage)
    return [stage.dest / n for n in stage.names]


def _check_timed(result: ResultFile) -> None:
    if not any(_positive_finite(b.median_s) for b in result.benchmarks):
        raise PolytraceError(f"{result.path}: no timed benchmarks (median) to plot")


def _gate_row_label(c) -> str:
    kernel = "/".join(p for p in (c.family, c.kernel) if p)
    parts = [kernel, c.provider, c.mode, c.shape_id]
    text = " · ".join(p for p in parts if p) or c.id
    return _cut(text, 70)


def _render_gate(report: GateReport, stage: _Stage, name: str) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = pyplot()
    comps = sorted((c for c in report.comparisons if _positive_finite(c.ratio)), key=lambda c: c.ratio)
    if not comps:
        raise PolytraceError("the gate matched no benchmark with timings: nothing to plot")
    fig, ax = plt.subplots(figsize=(10, min(0.24 * len(comps) + 1.8, 500.0)))
    ratios = [c.ratio for c in comps]
    ax.barh(range(len(comps)), [r - 1 for r in ratios], left=1,
            color=[_STATUS_COLOURS.get(c.status, "gray") for c in comps])
    ax.set_xscale("log")  # 2x slower and 2x faster are the same distance from 1
    step = max(1, math.ceil(len(comps) / (4 * _MAX_TICKS)))
    ticks = list(range(0, len(comps), step))
    ax.set_yticks(ticks)
    ax.set_yticklabels(_distinct([_gate_row_label(comps[i]) for i in ticks]), fontsize=6)
    ax.axvline(1.0, color="k", lw=0.8)
    thr = report.threshold
    for x in (1 + thr, 1 / (1 + thr)):
        ax.axvline(x, color="k", ls=":", lw=0.8)
    lo = min(min(ratios), 1 / (1 + thr)) / 1.1
    hi = max(max(ratios), 1 + thr) * 1.1
    ax.set_xlim(lo, hi)
    ax.set_xlabel("candidate / baseline median time (log scale; > 1 = slower)")
    present = [s for s in _STATUS_COLOURS if any(c.status == s for c in comps)]
    others = sorted({c.status for c in comps} - set(_STATUS_COLOURS))
    handles = [Patch(color=_STATUS_COLOURS[s], label=s) for s in present]
    handles += [Patch(color="gray", label=_legend_label(s, "(no status)")) for s in others]
    handles.append(Line2D([], [], color="k", ls=":", lw=0.8, label=f"threshold ±{thr:.0%}"))
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    cand, base = report.candidate, report.baseline
    ax.set_title(f"gate: {_cut(report.verdict, 40)}\n{_cut(cand.get('gpu_name', '?'), 40)} "
                 f"({_cut(cand.get('measured_on', '?'), 20)}); {_cut(base.get('commit', '?'), 24)} -> "
                 f"{_cut(cand.get('commit', '?'), 24)}", fontsize=9)
    fig.savefig(stage.reserve(name), dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_gate(report: GateReport, out_dir: str | Path, name: str = "gate_ratios.png", flag: str = "--plot") -> Path:
    """Horizontal bars of candidate / baseline median time per matched benchmark on a log axis,
    labelled by kernel, provider, mode and shape, coloured by the gate's verdict (legend), with
    the threshold band."""
    with staged_pngs(out_dir, flag) as stage:
        _render_gate(report, stage, plot_file_name(Path(name).stem))
    return stage.dest / stage.names[0]


def plot_files(sources: list[str | Path], out_dir: str | Path, baseline: str | Path | None = None) -> list[Path]:
    """``polytrace plot``: the throughput plots of every result file (or folder), and with
    ``baseline`` each one's gate-ratio plot against it. Every input is read and checked first,
    and the PNGs replace earlier ones only once all of them rendered."""
    from .gate import GatePolicy, compare
    from .schema import load_result

    base = load_result(baseline) if baseline is not None else None
    loaded = [(src, load_result(src)) for src in sources]
    for _, result in loaded:
        _check_timed(result)
    with staged_pngs(out_dir) as stage:
        for src, result in loaded:
            _render_throughput(result, stage)
            if base is not None:
                _render_gate(compare(base, result, policy=GatePolicy(force=True)), stage,
                             plot_file_name("gate", Path(src).stem))
    return [stage.dest / n for n in stage.names]


STATIC = "static"  # results/static/: scripts/static_report.py's compiled-code reports, no timings


def report_links(results_root: str | Path) -> list[tuple[str, Path]]:
    """(title, path) of the baselines, result files, tuning files and PNG plots under
    ``results_root``, for ``polytrace report`` to link, and the compile-only reports of
    ``static/`` (titled "compile-only: ..."). Empty when the folder does not exist."""
    from .store import BASELINES, TUNING

    root = Path(results_root)
    if not root.is_dir():
        return []
    links: list[tuple[str, Path]] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).parts
        if path.suffix == ".png":
            links.append((f"plot: {path.stem.replace('_', ' ')}", path))
        elif path.suffix == ".json" and rel[0] == BASELINES:
            links.append((f"baseline: {path.stem}", path))
        elif path.suffix == ".json" and rel[0] == TUNING and len(rel) >= 3:
            links.append((f"tuned configs: {path.stem} on {rel[1]}", path))
        elif path.suffix == ".json" and rel[0] == STATIC:
            links.append((f"compile-only: {path.stem} (compiled code, no timings)", path))
        elif path.suffix == ".json" and len(rel) == 2:
            parts = path.stem.split("_", 2)
            title = f"results: {rel[0]} {' '.join(parts)}" if len(parts) == 3 else f"results: {rel[0]} {path.stem}"
            links.append((title, path))
    order = {"baseline": 0, "results": 1, "tuned configs": 2, "plot": 3, "compile-only": 4}
    links.sort(key=lambda t: (order.get(t[0].split(":")[0], 9), str(t[1])))
    return links
