"""PNG plots: throughput against shape per provider with the roofline ceiling, and the gate's
per-benchmark time ratios. matplotlib is imported on first use, with the Agg backend (no display)."""

from __future__ import annotations

from pathlib import Path

from ..errors import PolytraceError
from .gate import GateReport
from .schema import CPU_MEASURED_ON, BenchResult, ResultFile
from .store import safe_name

_STATUS_COLOURS = {"regression": "tab:red", "improvement": "tab:green", "underpowered": "tab:orange",
                   "unchanged": "tab:gray", "no-data": "lightgray"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _out_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolytraceError(f"-o {out}: cannot create folder: {exc}") from None
    return out


def plot_throughput(result: ResultFile, out_dir: str | Path) -> list[Path]:
    """One PNG per (family, kernel, mode): throughput of each provider over the shapes, sorted by
    problem size, with the device's datasheet roofline (TFLOP/s for compute-bound kernels, GB/s
    otherwise). Marker area follows the shape's weight in the workload."""
    from ..hardware import detect

    if not any(b.median_s for b in result.benchmarks):
        raise PolytraceError(f"{result.path}: no timed benchmarks (median) to plot")
    plt = _pyplot()
    out = _out_dir(out_dir)
    cpu = result.measured_on == CPU_MEASURED_ON
    gpu = None if cpu else detect(result.gpu_name)
    groups: dict[tuple[str, str, str], list[BenchResult]] = {}
    for b in result.benchmarks:
        if b.median_s:
            groups.setdefault((b.family or b.suite, b.kernel or b.name, b.mode), []).append(b)
    written = []
    for (family, kernel, mode), benches in sorted(groups.items()):
        compute = all(b.roofline == "bf16" and b.flops for b in benches)
        size = {}
        for b in benches:
            size.setdefault(b.shape_id or b.name, b.flops if compute else b.bytes_moved)
        shapes = sorted(size, key=lambda s: (size[s], s))
        xpos = {s: i for i, s in enumerate(shapes)}
        fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(shapes) + 3), 4.2))
        providers = sorted({b.provider for b in benches})
        for prov in providers:
            pts = sorted((xpos[b.shape_id or b.name], b) for b in benches if b.provider == prov)
            ys = [(b.tflops if compute else b.gbps) or 0.0 for _, b in pts]
            sizes = [20 + 200 * (b.weight or 0.0) for _, b in pts]
            ax.plot([x for x, _ in pts], ys, "-", alpha=0.5)
            ax.scatter([x for x, _ in pts], ys, s=sizes, label=prov)
        if gpu is not None:
            if compute:
                ceil = []
                for s in shapes:
                    b = next(x for x in benches if (x.shape_id or x.name) == s)
                    bound = gpu.ceiling("bf16")
                    if b.bytes_moved:
                        bound = min(bound, b.flops / b.bytes_moved * gpu.ceiling("hbm"))
                    ceil.append(bound / 1e12)
                ax.step(range(len(shapes)), ceil, where="mid", color="k", ls="--",
                        label=f"roofline ({gpu.slug} datasheet)")
            else:
                ax.axhline(gpu.ceiling("hbm") / 1e9, color="k", ls="--", label=f"HBM peak ({gpu.slug} datasheet)")
        ax.set_ylabel("TFLOP/s" if compute else "GB/s")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([s if len(s) <= 28 else s[:25] + "..." for s in shapes], rotation=40, ha="right",
                           fontsize=7)
        where = "CPU interpreter: code-path smoke test, NOT performance" if cpu else \
            f"{result.gpu_name}, measured ({result.measured_on})"
        ax.set_title(f"{family}/{kernel} {mode}\n{where}; commit {result.commit}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / safe_name(f"{family}_{kernel}_{mode}_{result.gpu_slug}_throughput.png")
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def plot_gate(report: GateReport, out_dir: str | Path, name: str = "gate_ratios.png") -> Path:
    """Horizontal bars of candidate / baseline median time per matched benchmark, coloured by the
    gate's verdict, with the threshold band."""
    plt = _pyplot()
    out = _out_dir(out_dir)
    comps = sorted((c for c in report.comparisons if c.ratio is not None), key=lambda c: c.ratio)
    if not comps:
        raise PolytraceError("the gate matched no benchmark with timings: nothing to plot")
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.22 * len(comps) + 1.5)))
    ax.barh(range(len(comps)), [c.ratio - 1 for c in comps], left=1,
            color=[_STATUS_COLOURS.get(c.status, "gray") for c in comps])
    ax.set_yticks(range(len(comps)))
    ax.set_yticklabels([c.id if len(c.id) <= 60 else "..." + c.id[-57:] for c in comps], fontsize=6)
    ax.axvline(1.0, color="k", lw=0.8)
    for x in (1 + report.threshold, 1 / (1 + report.threshold)):
        ax.axvline(x, color="k", ls=":", lw=0.8)
    ax.set_xlabel("candidate / baseline median time (>1 = slower)")
    ax.set_title(f"gate: {report.verdict}\n{report.candidate['gpu_name']} ({report.candidate['measured_on']}); "
                 f"{report.baseline['commit']} -> {report.candidate['commit']}", fontsize=9)
    fig.tight_layout()
    path = out / safe_name(name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def report_links(results_root: str | Path) -> list[tuple[str, Path]]:
    """(title, path) of the baselines, result files, tuning files and PNG plots under
    ``results_root``, for ``polytrace report`` to link. Empty when the folder does not exist."""
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
        elif path.suffix == ".json" and len(rel) == 2:
            parts = path.stem.split("_", 2)
            title = f"results: {rel[0]} {' '.join(parts)}" if len(parts) == 3 else f"results: {rel[0]} {path.stem}"
            links.append((title, path))
    order = {"baseline": 0, "results": 1, "tuned configs": 2, "plot": 3}
    links.sort(key=lambda t: (order.get(t[0].split(":")[0], 9), str(t[1])))
    return links
