"""The results store: ``results/<gpu-slug>/<date>_<commit>_<suite>.json`` and one baseline per GPU
at ``results/baselines/<gpu-slug>.json``; tables of a result file."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import PolytraceError
from .schema import CPU_MEASURED_ON, ResultFile, load_result, merged_json, natural_key
from .validation import read_json

BASELINES = "baselines"
TUNING = "tuning"
PLOTS = "plots"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_root() -> Path:
    """``$POLYTRACE_RESULTS_DIR`` or ``./results``."""
    return Path(os.environ.get("POLYTRACE_RESULTS_DIR") or "results")


def safe_name(text: str) -> str:
    return _SAFE.sub("-", text).strip("-") or "unknown"


def result_filename(result: ResultFile, suite: str | None = None) -> str:
    commit = result.commit.replace("-dirty", "d")[:13]
    return f"{result.date}_{safe_name(commit)}_{safe_name(suite or result.suite)}.json"


def result_path(root: str | Path, result: ResultFile, suite: str | None = None) -> Path:
    return Path(root) / safe_name(result.gpu_slug) / result_filename(result, suite)


def baseline_path(root: str | Path, gpu_slug: str) -> Path:
    return Path(root) / BASELINES / f"{safe_name(gpu_slug)}.json"


def _write_json(path: Path, obj: dict) -> None:
    from ...atomic_write import atomic_write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # --root is a file, or not writable
        raise PolytraceError(f"--root: cannot create folder {path.parent}: {exc.strerror or exc}") from None
    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def refuse_unfit(result: ResultFile, what: str, *, allow_cpu: bool = False, force: bool = False) -> None:
    """The store holds GPU timings measured on a quiet GPU: refuse CPU-interpreter runs (unless
    ``allow_cpu``) and runs whose environment record marks them throttled (unless ``force``)."""
    if result.measured_on == CPU_MEASURED_ON and not allow_cpu:
        raise PolytraceError(f"{result.path}: timed in the CPU interpreter (a smoke test, not performance); "
                             f"{what} takes GPU results (--allow-cpu for a test)")
    if result.throttled and not force:
        why = "; ".join(result.throttle_reasons()) or "see machine_info.polytrace.environment"
        raise PolytraceError(f"{result.path}: the run is marked throttled ({why}); its timings are suspect: "
                             f"rerun on a quiet GPU (--allow-throttled to {what} it anyway)")


def store_result(src: str | Path, root: str | Path | None = None, suite: str | None = None,
                 overwrite: bool = False, *, allow_cpu: bool = False, force: bool = False) -> Path:
    """Copy one result file into the layout; returns where it went. Refuses CPU-interpreter
    results and throttled runs (see ``refuse_unfit``)."""
    result = load_result(src)
    if Path(src).is_dir():
        raise PolytraceError(f"{src}: store takes result files, not folders")
    if not result.benchmarks:
        raise PolytraceError(f"{src}: holds no benchmarks (did every test fail or skip?); nothing to store")
    refuse_unfit(result, "store", allow_cpu=allow_cpu, force=force)
    dest = result_path(root or default_root(), result, suite)
    if dest.exists() and not overwrite:
        raise PolytraceError(f"{dest} already exists (pass --overwrite to replace it)")
    _write_json(dest, read_json(src))
    return dest


def set_baseline(srcs: list[str | Path], root: str | Path | None = None, allow_cpu: bool = False,
                 force: bool = False) -> Path:
    """Merge the result files of one run (one per suite) into ``baselines/<gpu-slug>.json``.
    Refuses CPU-interpreter results (unless ``allow_cpu``) and throttled runs (unless ``force``)."""
    if not srcs:
        raise PolytraceError("set-baseline needs at least one result file")
    files: list[Path] = []
    for s in srcs:
        p = Path(s)
        found = sorted(p.glob("*.json")) if p.is_dir() else [p]
        if not found:
            raise PolytraceError(f"{p}: folder holds no *.json result files")
        files.extend(found)
    obj = merged_json(files)
    merged = [load_result(f) for f in files]
    for r in merged:  # the CPU case is refused below, for the merged run
        refuse_unfit(r, "set-baseline", allow_cpu=True, force=force)
    result = merged[0] if len(files) == 1 else None
    benches = [b for r in merged for b in r.benchmarks]
    if not benches:
        raise PolytraceError(f"{', '.join(map(str, files))}: no benchmarks; a baseline needs timed benchmarks")
    if not any(b.rounds.size for b in benches):
        raise PolytraceError(f"{', '.join(map(str, files))}: no raw rounds (stats.data) in any benchmark, so the "
                             "gate could never test against this baseline; run the suites with "
                             "--benchmark-save-data")
    machine = obj["machine_info"].get("polytrace") or {}
    measured = machine.get("measured_on") or (result.measured_on if result else "")
    if measured == CPU_MEASURED_ON and not allow_cpu:
        raise PolytraceError("these results were timed in the CPU interpreter; a baseline must come from a GPU "
                             "(pass --allow-cpu for a test baseline)")
    slug = machine.get("gpu_slug") or (result.gpu_slug if result else "unknown")
    dest = baseline_path(root or default_root(), slug)
    _write_json(dest, obj)
    return dest


@dataclass
class Entry:
    path: Path
    kind: str  # "result", "baseline", "tuning"
    gpu_slug: str
    date: str
    commit: str
    suite: str
    n_benchmarks: int
    measured_on: str


def list_results(root: str | Path | None = None) -> list[Entry]:
    """Every result, baseline and tuning file under ``root``, sorted by kind, GPU, date."""
    base = Path(root or default_root())
    if not base.is_dir():
        raise PolytraceError(f"{base}: results folder not found")
    entries: list[Entry] = []
    for path in sorted(base.rglob("*.json")):
        rel = path.relative_to(base).parts
        if rel[0] == TUNING:
            try:
                data = read_json(path, "tuning file")
            except PolytraceError:
                continue  # ls lists only what it can read (a FIFO, a broken or deeply nested file: skipped)
            if not isinstance(data, dict) or not isinstance(data.get("configs") or {}, (dict, list)):
                continue
            entries.append(Entry(path, "tuning", rel[1] if len(rel) > 2 else "?", str(data.get("created", ""))[:10],
                                 str(data.get("commit", "")), str(data.get("kernel", path.stem)),
                                 len(data.get("configs") or {}), str(data.get("measured_on", ""))))
            continue
        try:
            r = load_result(path)
        except PolytraceError:
            continue  # not a result file (e.g. a plot index); ls lists only what it can read
        kind = "baseline" if rel[0] == BASELINES else "result"
        entries.append(Entry(path, kind, r.gpu_slug, r.date, r.commit, ",".join(r.suites) or "-",
                             len(r.benchmarks), r.measured_on))
    order = {"baseline": 0, "result": 1, "tuning": 2}
    entries.sort(key=lambda e: (order[e.kind], e.gpu_slug, e.date, str(e.path)))
    return entries


def format_listing(entries: list[Entry]) -> str:
    from tabulate import tabulate

    if not entries:
        return "no result files"
    rows = [[e.kind, e.gpu_slug, e.date, e.commit, e.suite, e.n_benchmarks, e.measured_on, str(e.path)]
            for e in entries]
    return tabulate(rows, headers=["kind", "gpu", "date", "commit", "suite", "n", "measured on", "path"])


def _fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def format_time(seconds: float | None) -> str:
    if not seconds:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def show_rows(result: ResultFile) -> list[dict]:
    """One row per benchmark, grouped by shape so providers of one shape sit together, with the
    speed relative to the fastest provider of that shape."""
    best: dict[tuple, float] = {}
    for b in result.benchmarks:
        key = (b.family, b.kernel, b.mode, b.shape_id)
        if b.median_s:
            best[key] = min(best.get(key, float("inf")), b.median_s)
    rows = []
    for b in sorted(result.benchmarks, key=lambda b: (b.family, b.kernel, b.mode, natural_key(b.shape_id), b.provider)):
        key = (b.family, b.kernel, b.mode, b.shape_id)
        check = b.extra.get("check") if isinstance(b.extra.get("check"), dict) else {}
        predicted = b.extra.get("predicted_s")
        predicted = float(predicted) if isinstance(predicted, (int, float)) and predicted > 0 else None
        rows.append({
            "id": b.id, "family": b.family, "kernel": b.kernel, "mode": b.mode, "shape": b.shape_id or b.name,
            "provider": b.provider, "weight": b.weight, "median_s": b.median_s, "rounds": int(b.rounds.size),
            "tflops": b.tflops, "gbps": b.gbps, "pct_peak": b.pct_peak, "roofline": b.roofline,
            "vs_best": (b.median_s / best[key]) if b.median_s and key in best else None,
            "predicted_s": predicted,
            "vs_predicted": b.median_s / predicted if predicted and b.median_s else None,
            "prediction_flag": str(b.extra.get("prediction_flag") or ""),
            "check_verdict": str(check.get("verdict") or ("pass" if check.get("ok") is True else "")),
            "check_coverage": check.get("coverage_min"),
            "throttled": b.extra.get("throttled") is True,
        })
    return rows


def _check_cell(r: dict) -> str:
    cov = r["check_coverage"]
    text = {"pass": "ok", "16-bit-only": "16-bit only"}.get(r["check_verdict"], r["check_verdict"] or "-")
    return text + (f" {100 * cov:.0f}%" if isinstance(cov, (int, float)) else "")


def _notes(rows: list[dict]) -> list[str]:
    """Cases flagged for a look: off their prediction by more than 2x, 16-bit-only checks, throttled."""
    out = []
    for r in rows:
        if r["prediction_flag"]:
            out.append(f"{r['id']}: {r['prediction_flag']} (predicted {format_time(r['predicted_s'])}, "
                       f"measured {format_time(r['median_s'])})")
        if r["check_verdict"] == "16-bit-only":
            out.append(f"{r['id']}: output meets only the 16-bit bound (see check.rule)")
        if r["throttled"]:
            out.append(f"{r['id']}: THROTTLED during its rounds (SM clock > 10% below the session's max)")
    return out


def format_show(result: ResultFile) -> str:
    from tabulate import tabulate

    cpu = result.measured_on == CPU_MEASURED_ON
    head = [f"{result.path}: {len(result.benchmarks)} benchmarks, suites {', '.join(result.suites) or '-'}",
            f"device: {result.gpu_name} ({result.measured_on}), commit {result.commit}, {result.datetime}, "
            f"torch {result.machine.get('torch_version', '?')}, triton {result.machine.get('triton_version', '?')}"]
    if cpu:
        head.append("CPU-interpreter timings: a smoke test of the code path, not performance figures; "
                    "no % of peak.")
    if result.throttled:
        head.append("THROTTLED: " + ("; ".join(result.throttle_reasons()) or "see the environment record")
                    + " - these timings are suspect")
    rows = []
    shown = show_rows(result)
    for r in shown:
        peak = "-" if cpu or r["pct_peak"] is None else f"{r['pct_peak']:.1f}% {r['roofline']}"
        flag = " !" if r["prediction_flag"] else ""
        pred = "-" if r["vs_predicted"] is None else f"{r['vs_predicted']:.2f}x{flag}"
        rows.append([f"{r['family']}/{r['kernel']}" if r["family"] else r["id"], r["mode"], r["shape"],
                     _fmt(r["weight"], ".3f"), r["provider"], format_time(r["median_s"]), r["rounds"],
                     _fmt(r["tflops"], ".2f"), _fmt(r["gbps"], ".1f"), peak, _fmt(r["vs_best"], ".2f") + "x",
                     format_time(r["predicted_s"]), pred, _check_cell(r)])
    table = tabulate(rows, headers=["kernel", "mode", "shape", "weight", "provider", "median", "rounds",
                                    "TFLOP/s", "GB/s", "% of peak", "vs best", "predicted", "vs pred", "check"],
                     disable_numparse=True)
    notes = _notes(shown)
    tail = ("\n\nflagged for a look (measured vs predicted beyond 2x either way is a note, not a failure):\n"
            + "\n".join(f"  {n}" for n in notes)) if notes else ""
    return "\n".join(head) + "\n\n" + table + tail


def brief_rows(result: ResultFile) -> list[dict]:
    """One row per (family/kernel/mode, provider): how many shapes, the trace-weighted geometric
    mean of time relative to the fastest provider of each shape (1.00 = fastest everywhere), and
    the weighted mean and the best % of peak."""
    import math

    rows = show_rows(result)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((f"{r['family']}/{r['kernel']}" if r["family"] else r["id"], r["mode"], r["provider"]),
                          []).append(r)
    out = []
    for (kernel, mode, provider), rs in sorted(groups.items()):
        w = [r["weight"] if r["weight"] else 0.0 for r in rs]
        if sum(w) <= 0:
            w = [1.0] * len(rs)
        timed = [(wi, r) for wi, r in zip(w, rs) if r["vs_best"]]
        tw = sum(wi for wi, _ in timed)
        vs_best = math.exp(sum(wi * math.log(r["vs_best"]) for wi, r in timed) / tw) if tw > 0 else None
        peaks = [(wi, r["pct_peak"]) for wi, r in zip(w, rs) if r["pct_peak"] is not None]
        pw = sum(wi for wi, _ in peaks)
        out.append({"kernel": kernel, "mode": mode, "provider": provider, "n": len(rs), "vs_best": vs_best,
                    "pct_peak_mean": sum(wi * p for wi, p in peaks) / pw if pw > 0 else None,
                    "pct_peak_max": max((p for _, p in peaks), default=None), "roofline": rs[0]["roofline"]})
    return out


def format_brief(result: ResultFile) -> str:
    from tabulate import tabulate

    cpu = result.measured_on == CPU_MEASURED_ON
    head = f"{Path(result.path).name}: {len(result.benchmarks)} benchmarks on {result.gpu_name} ({result.measured_on})"
    if cpu:
        head += " - CPU interpreter: not performance"
    if result.throttled:
        head += "\nTHROTTLED: " + ("; ".join(result.throttle_reasons()) or "see the environment record")
    rows = [[r["kernel"], r["mode"], r["provider"], r["n"], _fmt(r["vs_best"], ".2f") + "x",
             "-" if cpu or r["pct_peak_mean"] is None else f"{r['pct_peak_mean']:.1f}% {r['roofline']}",
             "-" if cpu or r["pct_peak_max"] is None else f"{r['pct_peak_max']:.1f}%"]
            for r in brief_rows(result)]
    table = tabulate(rows, headers=["kernel", "mode", "provider", "shapes", "time vs best (weighted)",
                                    "% of peak (weighted)", "best"], disable_numparse=True)
    return head + "\n" + table
