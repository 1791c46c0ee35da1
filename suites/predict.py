"""Predicted time of every suite case, beside its measured median: the roofline at attainable
ceilings (``polytrace.measure.results.floor.predicted_s``) and, when a static performance report exists
under ``results/static/`` (``*.json``, read at run time, optional), its issue-bound estimate.

The static report's contract (what this reader takes from it; anything else in the file is
ignored): a top-level ``"predictions"`` object keyed ``"<family>/<kernel>/<mode>"`` (or
``"<family>/<kernel>"`` for every mode), each value an object with ``issue_bound_bytes_per_s``
(a memory-bound kernel's rate cap from its instructions per element) and/or
``issue_bound_flops_per_s``, and optionally ``note``. The case's bytes (FLOPs) over that rate is its
issue-bound time. A file that cannot be read, or a value that is not a positive number, is ignored
with a note in ``extra_info["prediction_note"]``; it never fails a benchmark.

The reports ``scripts/static_report.py`` writes (``results/static/triton-<version>.json``, schema in
``results/static/README.md``) key their entries ``"<kernel config>@sm_<arch>"`` and state each
memory-bound kernel's ``issue_bound_tbps``; ``STATIC_CASES`` names the suite case each such config
is the default launch of, and the entries of the GPU's own architecture are read as the contract's
``predictions``.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parents[1] / "results" / "static"


# static-report kernel config -> the suite case whose default launch it is
STATIC_CASES = {"logprob-fwd-entropy": "logprob/token_logprobs/fwd",
                "decode-split-contig-d128-g8": "attention/decode_attention/decode",
                "pack-F4096-bf16": "packing/pack/fwd", "unpack-F4096-bf16": "packing/unpack/fwd"}
# GPU preset slug prefix -> the architecture its static entries are compiled for
ARCH_OF_SLUG = (("gh200", "sm_90"), ("h", "sm_90"), ("a100", "sm_80"), ("a800", "sm_80"))


def arch_of(gpu) -> str | None:
    slug = str(getattr(gpu, "slug", "") or "")
    return next((arch for prefix, arch in ARCH_OF_SLUG if slug.startswith(prefix)), None)


def _from_kernels(kernels: dict, arch: str | None) -> dict:
    """The contract's ``predictions`` from a static report's ``kernels`` (its own schema)."""
    out = {}
    for name, case_key in STATIC_CASES.items():
        entry = kernels.get(f"{name}@{arch}") if arch else None
        tbps = entry.get("issue_bound_tbps") if isinstance(entry, dict) else None
        if isinstance(tbps, (int, float)) and not isinstance(tbps, bool) and math.isfinite(tbps) and tbps > 0:
            out[case_key] = {"issue_bound_bytes_per_s": float(tbps) * 1e12,
                             "note": f"{name}@{arch}: {entry.get('bound', '')}"[:200]}
    return out


@functools.cache
def static_predictions(folder: str = str(STATIC_DIR), arch: str | None = None) -> tuple[dict, str]:
    """({key: entry}, note) merged from ``folder/*.json`` (later files win); ``arch``: the
    architecture whose entries of a static report's ``kernels`` are read."""
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
        kernels = data.get("kernels") if isinstance(data, dict) else None
        if isinstance(kernels, dict):
            merged.update(_from_kernels(kernels, arch))
        preds = data.get("predictions") if isinstance(data, dict) else None
        if isinstance(preds, dict):
            merged.update({k: v for k, v in preds.items() if isinstance(k, str) and isinstance(v, dict)})
    return merged, "; ".join(problems)


def _rate(entry: dict, key: str) -> float:
    value = entry.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else 0.0


def static_estimate(case, folder: str = str(STATIC_DIR), arch: str | None = None) -> tuple[float | None, str]:
    """(issue-bound seconds of ``case`` from the static report, note), or (None, note)."""
    preds, note = static_predictions(folder, arch)
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
    from polytrace.measure.results import floor

    if gpu is None:
        return
    static_s, note = static_estimate(case, folder, arch_of(gpu))
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
