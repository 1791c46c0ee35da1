#!/usr/bin/env python
"""Static performance report: what the compiled code of every default kernel config says, no GPU.

For each kernel of ``polytrace_kernels`` at the config a bf16 launch picks on sm_80 / sm_90 (the
list and the floors are in ``scripts/static_kernels.py``), compile with the installed Triton
(``triton.compile`` + its bundled ptxas) and read registers, spills, shared memory, CTAs per SM
(registers x threads and shared memory against the SM's limits), tensor-core instructions
(HGMMA / HMMA in SASS), global load/store widths, and for the memory-bound kernels the SASS
instructions per streamed element of the hot loop, with the bound that implies (issue vs HBM).
These are compiled-code estimates, not GPU timings.

    python scripts/static_report.py                      # both archs, writes results/static/triton-<ver>.json
    python scripts/static_report.py --arch 90 --only logprob -o /tmp/r.json --markdown
    /work/venv36/bin/python scripts/static_report.py     # another Triton version, from its own venv

Exit status: 0 when every kernel meets its floors (no spill, CTAs per SM at or above the stated
floor, instructions per element within budget), 1 otherwise (the failures are printed), 2 on a
usage error. ``tests/kernels/test_static_report.py`` checks the committed files and recompiles a few kernels.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import static_sass as S  # noqa: E402

SCHEMA = 1


def _ensure_kernels_importable() -> None:
    try:
        import polytrace_kernels  # noqa: F401
    except ImportError:  # a checkout that is not installed: kernels/ is the package
        import importlib.util

        spec = importlib.util.spec_from_file_location("polytrace_kernels", ROOT / "kernels" / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / "kernels")])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["polytrace_kernels"] = mod
        spec.loader.exec_module(mod)


def measure(spec, arch: int) -> dict:
    """Compile one spec for ``sm_<arch>`` and read its facts, bound and prediction."""
    t0 = time.perf_counter()
    ck, log = S.compile_with_log(spec.fn, spec.sig, spec.consts, spec.aligned, arch, spec.num_warps, spec.num_stages)
    rec = {"name": spec.name, "family": spec.family, "arch": f"sm_{arch}", "config": spec.config,
           "constexprs": {k: v for k, v in spec.consts.items() if isinstance(v, (int, bool, str)) or v is None},
           "aligned": list(spec.aligned), "num_warps": spec.num_warps, "num_stages": spec.num_stages}
    rec.update(S.ptxas_facts(log))
    rec["shared_bytes"] = int(ck.metadata.shared)
    occ = S.ctas_per_sm(arch, rec["registers"], spec.num_warps, rec["shared_bytes"])
    rec["ctas_per_sm"] = occ["ctas"]
    rec["occupancy_limiter"] = occ["limiter"]
    rec["warps_per_sm"] = occ["ctas"] * spec.num_warps
    instrs = S.parse_sass(S.sass_of(ck.asm["cubin"]))
    rec.update(S.sass_summary_of(instrs, spec.elem_bytes))
    rec["spills_in_loops"] = S.local_memory_in_loops(instrs)
    rec.update(S.mma_loop(instrs, spec.num_warps))
    if spec.name.startswith("attn-fwd") and rec.get("mma_loop_instructions"):
        # main-loop SASS instructions per score element a thread holds (BLOCK_M x BLOCK_N / threads)
        held = spec.consts["BLOCK_M"] * spec.consts["BLOCK_N"] / (32 * spec.num_warps)
        rec["instructions_per_score"] = round(rec["mma_loop_instructions"] / held, 2)
    if spec.name.startswith("linear-fwd"):
        # the fused LM-head forward's epilogue per logit a thread holds (BLOCK_T x BLOCK_V / threads)
        held = spec.consts["BLOCK_T"] * spec.consts["BLOCK_V"] / (32 * spec.num_warps)
        rec["epilogue_per_logit"] = round(S.epilogue_per_logit(instrs, held), 2)
    rec.update(S.ptx_facts(ck.asm["ptx"]))
    rec.update(S.ttgir_facts(ck.asm["ttgir"]))
    floors = {"max_spill_ops_in_loops": 0, "min_ctas_per_sm": spec.min_ctas}
    if spec.why_one_cta:
        floors["why_one_cta"] = spec.why_one_cta
    if spec.hbm_bytes:
        floors["max_instructions_per_element"] = round(S.instruction_budget(arch, spec.hbm_bytes), 2)
        floors["hbm_bytes_per_element"] = spec.hbm_bytes
    rec["floors"] = floors
    rec["bound"] = _bound(rec, arch, spec)
    rec["prediction"] = _predict(rec, arch, spec)
    rec["compile_s"] = round(time.perf_counter() - t0, 2)
    return rec


def _bound(rec: dict, arch: int, spec) -> str:
    ipe = rec.get("instructions_per_element")
    lim = S.GPU_LIMITS[arch]
    if spec.hbm_bytes and ipe:
        cap = S.issue_bound_bytes_s(arch, ipe, spec.hbm_bytes)
        rec["issue_bound_tbps"] = round(cap / 1e12, 2)
        if cap < lim.hbm_bytes_s:
            return f"issue: {cap / 1e12:.2f} TB/s at full issue < {lim.hbm_bytes_s / 1e12:.2f} TB/s HBM"
        if rec["ctas_per_sm"] < 2:
            return f"occupancy: 1 CTA/SM of {spec.num_warps} warps to hide HBM latency"
        return f"HBM: issue allows {cap / 1e12:.2f} TB/s >= {lim.hbm_bytes_s / 1e12:.2f} TB/s HBM"
    if rec.get("mma_loop_flops"):
        t = S.tensor_prediction(arch, rec, spec.num_warps)
        return (f"{t['bound']}: main loop {t['cycles_per_trip']['tensor core']:.0f} tensor-core / "
                f"{t['cycles_per_trip']['issue']:.0f} issue / {t['cycles_per_trip']['L2']:.0f} L2 cycles a trip")
    return "latency: small kernel (launch and one pass over its inputs)"


def _predict(rec: dict, arch: int, spec) -> dict:
    """The predicted rate and its fraction of the spec's anchor (``static_kernels.ANCHORS``)."""
    import static_kernels as SK

    if not spec.anchor:
        return {}
    value, unit, source = SK.ANCHORS[spec.anchor]
    lim = S.GPU_LIMITS[arch]
    out = {"anchor": spec.anchor, "anchor_value": value, "anchor_unit": unit, "anchor_source": source}
    if unit == "TF/s" or unit == "of tensor peak":
        if not rec.get("mma_loop_flops"):
            return out
        t = S.tensor_prediction(arch, rec, spec.num_warps)
        out.update(t)
        if unit == "TF/s" and arch != 90:  # the FA3 figures are an H100's: no fraction of them elsewhere
            out["anchor_note"] = f"an H100 (sm_90) figure: no fraction given for sm_{arch}"
            return out
        anchor_tf = value if unit == "TF/s" else value * lim.tc_flops_s / 1e12
        out.update(fraction_of_anchor=round(t["predicted_tflops"] / anchor_tf, 2),
                   upper_fraction_of_anchor=round(t["upper_tflops"] / anchor_tf, 2))
        return out
    ipe = rec.get("instructions_per_element")
    if ipe:  # memory-bound: the HBM share issue allows (occupancy aside)
        share = min(1.0, S.issue_bound_bytes_s(arch, ipe, spec.hbm_bytes) / lim.hbm_bytes_s)
        out.update(bound="HBM" if share >= 1.0 else "issue", predicted_hbm_fraction=round(share, 2),
                   fraction_of_anchor=round(share / value, 2))
    return out


# The backward's useful work is 5 matmuls of the forward's size (2.5x its flops: FA3's count); ours
# runs 7 (dK/dV recomputes QK^T and dP = dO V^T, dQ recomputes both again), 4 in dK/dV and 3 in dQ.
BWD_MATMULS = {"dkdv": 4, "dq": 3, "useful": 5}


def backward_predictions(kernels: dict) -> dict:
    """Per (causal, D, arch): the backward's rate counted as FA3 counts it (5 forward-sized matmuls)
    when dK/dV and dQ each run at their predicted rate, and its fraction of FA3's bwd anchor."""
    import static_kernels as SK

    out = {}
    for key, rec in kernels.items():
        if not rec["name"].startswith("attn-dkdv-"):
            continue
        dq = kernels.get(key.replace("attn-dkdv-", "attn-dq-"))
        p1, p2 = rec.get("prediction", {}), (dq or {}).get("prediction", {})
        if rec["arch"] != "sm_90" or not (p1.get("predicted_tflops") and p2.get("predicted_tflops")):
            continue  # FA3's bwd figure is an H100's
        value, _, source = SK.ANCHORS["fa3-bwd-16k"]
        res = {}
        for field in ("predicted_tflops", "upper_tflops"):
            time_units = BWD_MATMULS["dkdv"] / p1[field] + BWD_MATMULS["dq"] / p2[field]
            res[field] = round(BWD_MATMULS["useful"] / time_units, 1)
        res.update(fraction_of_anchor=round(res["predicted_tflops"] / value, 2),
                   upper_fraction_of_anchor=round(res["upper_tflops"] / value, 2), anchor_source=source)
        out[key.replace("attn-dkdv-", "attn-bwd-")] = res
    return out


def violations(rec: dict) -> list[str]:
    f = rec["floors"]
    bad = []
    in_loops = rec.get("spills_in_loops", [])
    if len(in_loops) > f.get("max_spill_ops_in_loops", 0):
        bad.append(f"{len(in_loops)} spill loads/stores inside loops (first: {in_loops[0]})")
    if rec["ctas_per_sm"] < f["min_ctas_per_sm"]:
        bad.append(f"{rec['ctas_per_sm']} CTA/SM < floor {f['min_ctas_per_sm']} ({rec['occupancy_limiter']})")
    budget = f.get("max_instructions_per_element")
    ipe = rec.get("instructions_per_element")
    if budget is not None and (ipe is None or ipe > budget):
        bad.append(f"{ipe} instructions/element > budget {budget}")
    return bad


def _commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "kernels"], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return sha + ("+kernels-modified" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def build_report(archs, only: str | None = None, log=print) -> dict:
    _ensure_kernels_importable()
    import static_kernels as SK

    kernels = {}
    for arch in archs:
        for spec in SK.specs(arch):
            if only and not re.search(only, spec.name) and only != spec.family:
                continue
            rec = measure(spec, arch)
            kernels[f"{spec.name}@sm_{arch}"] = rec
            bad = violations(rec)
            pred = rec["prediction"]
            frac = f", {pred['fraction_of_anchor']} of {pred['anchor']}" if "fraction_of_anchor" in pred else ""
            log(f"{spec.name}@sm_{arch}: {rec['registers']} regs, spill {rec['spill_bytes']} B "
                f"({len(rec['spills_in_loops'])} in loops), {rec['shared_bytes'] // 1024} KB smem, "
                f"{rec['ctas_per_sm']} CTA/SM, ipe {rec.get('instructions_per_element', '-')}, {rec['bound']}{frac}"
                + (f"  FAIL: {'; '.join(bad)}" if bad else ""))
    return {
        "schema": SCHEMA,
        "triton": S.triton_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _commit(),
        "made_by": "python scripts/static_report.py " + " ".join(sys.argv[1:]),
        "method": ("triton.compile for each capability with the default bf16 launch config (no tuned file); "
                   "registers and spills from the ptxas -v log; shared memory from the compile metadata; SASS "
                   "from the wheel's cuobjdump -sass; instructions per element = non-NOP SASS instructions of "
                   "the loop that loads the most global bytes, over the elements those loads bring in "
                   "(thread-level); spill floor: no local load/store (LDL/STL) inside a loop body (backward-branch "
                   "target to branch); prediction: static_sass.tensor_prediction (tensor-core kernels, main loop = "
                   "the loop with the most HGMMA/HMMA flops) or the HBM share issue allows (memory-bound), over "
                   "the anchor named per kernel; compiled-code estimates, not GPU timings"),
        "issue_headroom": S.ISSUE_HEADROOM,
        "limits": {f"sm_{a}": {k: v for k, v in vars(S.GPU_LIMITS[a]).items()} for a in archs},
        "kernels": kernels,
        "backward": backward_predictions(kernels),
    }


def markdown(report: dict) -> str:
    lines = [f"Static report, Triton {report['triton']}, commit {report['commit']}, {report['date']} "
             "(compiled-code estimates, CPU)", "",
             "| kernel | arch | regs | spill B (in loops) | smem KB | CTA/SM | MMA | LDG widths | "
             "instr/elem (budget) | bound | predicted / anchor |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---|---|"]
    for rec in report["kernels"].values():
        mma = rec["hgmma"] + rec["hmma"]
        ipe = rec.get("instructions_per_element")
        budget = rec["floors"].get("max_instructions_per_element")
        ipe_s = f"{ipe} ({budget})" if ipe is not None and budget else ("-" if ipe is None else str(ipe))
        widths = " ".join(f"{k}x{v}" for k, v in {**rec["ldg_widths"], **rec["ldgsts_widths"]}.items())
        lines.append(f"| {rec['name']} | {rec['arch']} | {rec['registers']} | {rec['spill_bytes']} | "
                     f"{rec['shared_bytes'] / 1024:.0f} | {rec['ctas_per_sm']} | {mma} | {widths} | {ipe_s} | "
                     f"{rec['bound']} | {_fraction(rec.get('prediction', {}))} |")
    for key, b in report.get("backward", {}).items():
        lines.append(f"| {key} (dK/dV + dQ) | | | | | | | | | {b['predicted_tflops']} TF/s useful | "
                     f"{b['fraction_of_anchor']} (upper {b['upper_fraction_of_anchor']}) of fa3-bwd-16k |")
    sources = {}
    for rec in report["kernels"].values():
        pred = rec.get("prediction", {})
        if pred.get("anchor"):
            sources[pred["anchor"]] = f"{pred['anchor_value']} {pred['anchor_unit']}: {pred['anchor_source']}"
    lines += ["", "Anchors:"] + [f"- {k}: {v}" for k, v in sorted(sources.items())]
    return "\n".join(lines)


def _fraction(pred: dict) -> str:
    if "fraction_of_anchor" not in pred:
        return "-"
    upper = f" (upper {pred['upper_fraction_of_anchor']})" if "upper_fraction_of_anchor" in pred else ""
    return f"{pred['fraction_of_anchor']}{upper} of {pred['anchor']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="static_report.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, action="append", choices=sorted(S.GPU_LIMITS),
                    help="compute capability x10 (repeatable; default 90 and 80)")
    ap.add_argument("--only", help="regex on kernel names (or a family name)")
    ap.add_argument("-o", "--out", help="output JSON (default results/static/triton-<version>.json)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--update", action="store_true",
                    help="replace only the kernels measured now in the existing output file (with --only)")
    args = ap.parse_args(argv)
    archs = args.arch or [90, 80]
    report = build_report(archs, args.only)
    out = Path(args.out) if args.out else ROOT / "results" / "static" / f"triton-{report['triton']}.json"
    if args.update and out.is_file():
        old = json.loads(out.read_text())
        if old.get("triton") != report["triton"]:
            print(f"static_report.py: error: {out} is for triton {old.get('triton')}, not {report['triton']}",
                  file=sys.stderr)
            return 2
        merged = dict(old["kernels"])
        merged.update(report["kernels"])
        report["kernels"] = merged
        report["backward"] = backward_predictions(merged)
        report["limits"] = {**old.get("limits", {}), **report["limits"]}
        report["made_by"] = old["made_by"] + " ; then " + report["made_by"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    print(f"wrote {out}")
    if args.markdown:
        print(markdown(report))
    failed = {k: violations(r) for k, r in report["kernels"].items() if violations(r)}
    for k, bad in failed.items():
        print(f"FLOOR {k}: {'; '.join(bad)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    sys.exit(main())
