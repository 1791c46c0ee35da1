"""Predicted time of every suite case, beside its measured median: the roofline at attainable
ceilings (``polytrace.results.floor.predicted_s``) and, when a static performance report exists
under ``results/static/`` (``*.json``, read at run time, optional), its issue-bound estimate.

The static report's contract (what this reader takes from it; anything else in the file is
ignored): a top-level ``"predictions"`` object keyed ``"<family>/<kernel>/<mode>"`` (or
``"<family>/<kernel>"`` for every mode), each value an object with ``issue_bound_bytes_per_s``
(a memory-bound kernel's rate cap from its instructions per element) and/or
``issue_bound_flops_per_s``, and optionally ``note``. The case's bytes (FLOPs) over that rate is its
issue-bound time. A file that cannot be read, or a value that is not a positive number, is ignored
with a note in ``extra_info["prediction_note"]``; it never fails a benchmark.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parents[1] / "results" / "static"


@functools.cache
def static_predictions(folder: str = str(STATIC_DIR)) -> tuple[dict, str]:
    """({key: entry}, note) merged from ``folder/*.json`` (later files win)."""
    base = Path(folder)
    if not base.is_dir():
        return {}, ""
    merged, problems = {}, []
    for path in sorted(base.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {exc}"[:200])
            continue
        preds = data.get("predictions") if isinstance(data, dict) else None
        if isinstance(preds, dict):
            merged.update({k: v for k, v in preds.items() if isinstance(k, str) and isinstance(v, dict)})
    return merged, "; ".join(problems)


def _rate(entry: dict, key: str) -> float:
    value = entry.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else 0.0


def static_estimate(case, folder: str = str(STATIC_DIR)) -> tuple[float | None, str]:
    """(issue-bound seconds of ``case`` from the static report, note), or (None, note)."""
    preds, note = static_predictions(folder)
    entry = preds.get(f"{case.family}/{case.kernel}/{case.mode}") or preds.get(f"{case.family}/{case.kernel}")
    if not entry:
        return None, note
    times = []
    rate = _rate(entry, "issue_bound_bytes_per_s")
    if rate and case.bytes_moved:
        times.append(case.bytes_moved / rate)
    rate = _rate(entry, "issue_bound_flops_per_s")
    if rate and case.flops:
        times.append(case.flops / rate)
    text = str(entry.get("note", ""))[:200]
    return (max(times) if times else None), text


def annotate(info: dict, case, gpu, median: float | None, folder: str = str(STATIC_DIR)) -> None:
    """``predicted_s``, ``prediction_basis``, ``vs_predicted`` and ``prediction_flag`` in ``info``."""
    from polytrace.results import floor

    if gpu is None:
        return
    static_s, note = static_estimate(case, folder)
    predicted, basis = floor.predicted_s(gpu, flops=case.flops, bytes_moved=case.bytes_moved, roofline=case.roofline,
                                         static_s=static_s, static_note=note)
    if not predicted:
        return
    info["predicted_s"] = predicted
    info["prediction_basis"] = basis
    if static_s:
        info["static_estimate_s"] = static_s
    if median:
        info["vs_predicted"] = median / predicted
        flag = floor.prediction_flag(median, predicted)
        if flag:
            info["prediction_flag"] = flag
