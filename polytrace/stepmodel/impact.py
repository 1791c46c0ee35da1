"""``impact``: what a change in kernel timings does to the RL step.

Two result files (or folders) of one GPU, a baseline and a candidate, price the same sampled steps
of a workload twice; the difference, per stage and kernel family, is what the change costs (or
buys) end to end. Each side uses its own timings where both measured a kernel (restricted to the
benchmarks both have, so a shape one run's time budget cut does not move the curve) and the
other side's where only one did, so a candidate file holding one suite is compared against a full
baseline without attributing anything to the kernels it did not re-measure.

``step_time_line`` is the one line ``polytrace gate`` (and ``polytrace ab``) print under their
verdict: ``step time on dapo-math-32b / qwen2.5-32b / 32 x H200: +0.4%``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import PolytraceError
from ..run.hardware import get_gpu
from ..wording import counted
from .estimate import estimate
from .pricing import MEASURED
from .scalars import Scalars
from .timings import KernelTimings, paired
from .workloads import DEFAULT_STEPS, default_workload


@dataclass
class ImpactResult:
    """``polytrace impact``: the ``workload`` priced (profile, model, GPUs, steps, how priced),
    the one ``line`` and the step's relative change (``step_change``), each side's step and
    stage seconds and files (``baseline``, ``candidate``), per ``stages`` and ``kernels`` what
    moved, the ``benchmarks`` whose medians moved, the ``providers`` chosen and the ``source``.
    ``to_json()`` is the ``--json`` document (the keys in this order, as before the type)."""

    workload: dict
    line: str
    step_change: float
    baseline: dict
    candidate: dict
    stages: dict
    kernels: list
    benchmarks: list
    providers: dict
    source: str

    @property
    def baseline_step_s(self) -> float:
        return float(self.baseline["step_s"])

    @property
    def candidate_step_s(self) -> float:
        return float(self.candidate["step_s"])

    @classmethod
    def from_json(cls, doc: dict) -> ImpactResult:
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _timings(source, flag: str, gpu_slug: str | None) -> KernelTimings:
    if isinstance(source, KernelTimings):
        return source
    items = list(source) if isinstance(source, (list, tuple)) else [source]
    if items and all(not isinstance(x, (str, Path)) for x in items):  # ResultFile objects (the gate's)
        return KernelTimings.from_results(items, gpu_slug, flag)
    return KernelTimings.from_paths(items, gpu_slug, flag)


def _percent(change: float) -> str:
    """+0.4%; two decimals below 0.1% so a small change does not read as none."""
    return f"{change:+.1%}" if abs(change) >= 0.001 else f"{change:+.2%}"


def _gpu_label(slug: str) -> str:
    return slug.upper()


def impact(baseline, candidate, *, profile=None, model=None, gpu=None, gpus=None, steps=DEFAULT_STEPS,
           seed: int = 0, roofline: bool = False, **config_kw) -> ImpactResult:
    """The step-time change from ``baseline``'s kernel timings to ``candidate``'s (paths, lists of
    paths or loaded result files) on a workload (default: ``dapo-math-32b`` with its model and GPU
    count, on the files' GPU). The step is priced as ``estimate`` prices it by default, with the
    shared priors: the host work, per-call constants and slowdowns a real run pays around the
    kernels make the step a kernel's change is a share of (``roofline``: the base prices alone,
    a shorter step, so every kernel a larger share of it). ``config_kw``: the run's shape, as
    ``estimate`` takes it (rollout TP, trainer layout, batch, precision, ...)."""
    slug = get_gpu(str(gpu)).slug if gpu else None
    base = _timings(baseline, "BASELINE", slug)
    cand = _timings(candidate, "CANDIDATE", slug)
    if slug is None:
        if base.gpu_slug != cand.gpu_slug:
            raise PolytraceError(f"BASELINE was measured on {base.gpu_slug}, CANDIDATE on {cand.gpu_slug}: "
                                 f"kernel timings of two GPUs do not compare")
        slug = base.gpu_slug
        try:
            get_gpu(slug)
        except PolytraceError:
            raise PolytraceError(f"BASELINE: measured on {slug}, which has no hardware preset; "
                                 f"pass --gpu with the closest preset") from None
    if not {p.id for p in base.points} & {p.id for p in cand.points}:  # else a silent "+0.00%" everywhere
        names = " and ".join(f"{side} {x}" for side, x in (("BASELINE", baseline), ("CANDIDATE", candidate))
                             if isinstance(x, (str, os.PathLike)))
        raise PolytraceError(f"{names or 'BASELINE and CANDIDATE'}: no benchmark occurs in both: nothing to compare")
    prof, model, n_gpus = default_workload(profile, model, gpus)
    pb, pc = paired(base, cand)
    # The question is what our kernels' timings do to the step: where a family's default provider
    # is a baseline (log-prob: eager torch, what a stock run uses) and both sides measured ours,
    # the step is priced with ours, as a run using our kernels
    providers = {fam: "ours" for fam, spec in MEASURED.items()
                 if spec.default_provider not in ("ours", "torch")
                 and all("ours" in t.providers(spec.results_family, spec.kernels) for t in (pb, pc))}
    kw = dict(steps=steps, seed=seed, providers=providers or None, calibration=None if roofline else Scalars.priors(),
              **config_kw)
    eb = estimate(prof, model, slug, n_gpus, results=pb, **kw)
    ec = estimate(prof, model, slug, n_gpus, results=pc, **kw)
    sb, sc = eb.summary, ec.summary
    base_step = sb["mean_step_s"]
    change = sc["mean_step_s"] / base_step - 1.0 if base_step > 0 else 0.0
    stages = {}
    for s, b in sb["mean_stages_s"].items():
        c = sc["mean_stages_s"][s]
        if b > 0 or c > 0:
            stages[s] = {"baseline_s": b, "candidate_s": c, "change_s": c - b,
                         "change": c / b - 1.0 if b > 0 else 0.0,
                         "step_share": (c - b) / base_step if base_step > 0 else 0.0}
    kernels = []
    for stage in sorted(set(sb["kernels"]) | set(sc["kernels"])):
        fb, fc = sb["kernels"].get(stage, {}), sc["kernels"].get(stage, {})
        for fam in sorted(set(fb) | set(fc)):
            b = fb.get(fam, {}).get("s", 0.0)
            c = fc.get(fam, {}).get("s", 0.0)
            if abs(c - b) > 1e-12 * max(base_step, 1e-300):
                kernels.append({"stage": stage, "family": fam, "baseline_s": b, "candidate_s": c, "change_s": c - b,
                                "step_share": (c - b) / base_step if base_step > 0 else 0.0,
                                "source": fc.get(fam, fb.get(fam, {})).get("source", "")})
    kernels.sort(key=lambda k: -abs(k["change_s"]))
    used = set(eb.timings_used or ()) | set(ec.timings_used or ())
    benchmarks = []
    cand_ids = cand.by_id()
    for bid, pb_point in base.by_id().items():
        pc_point = cand_ids.get(bid)
        if pc_point is None or pb_point.median_s <= 0:
            continue
        ratio = pc_point.median_s / pb_point.median_s
        if abs(math.log(ratio)) > 1e-9:
            benchmarks.append({"id": bid, "ratio": ratio, "on_path": "/".join(pb_point.key) in used})
    benchmarks.sort(key=lambda b: (not b["on_path"], -abs(math.log(b["ratio"]))))
    workload = {"profile": prof.name, "model": eb.config["model"], "gpus": n_gpus, "gpu": slug,
                "steps": list(steps), "seed": seed, "priced": "roofline" if roofline else "shared priors"}
    line = f"step time on {prof.name} / {workload['model']} / {n_gpus} x {_gpu_label(slug)}: {_percent(change)}"
    return ImpactResult(
        workload=workload, line=line, step_change=change,
        baseline={"files": base.files, "step_s": base_step, "stages_s": sb["mean_stages_s"]},
        candidate={"files": cand.files, "step_s": sc["mean_step_s"], "stages_s": sc["mean_stages_s"]},
        stages=stages, kernels=kernels, benchmarks=benchmarks, providers=providers,
        source="estimated: the same sampled steps priced with each side's kernel timings "
                      + ("at the base roofline" if roofline else "and the shared priors (polytrace/data/priors.json)")
               + " (polytrace/stepmodel/impact.py)")


def step_time_line(baseline, candidate, **workload) -> dict:
    """The one line under a gate's (or ``ab``'s) verdict, ``{"line", "step_change", "impact"}``
    (``impact``: the ``ImpactResult``'s document);
    never raises for input the gate accepted: a workload that cannot be priced says why on the
    line (``step_change`` None)."""
    try:
        res = impact(baseline, candidate, **workload)
    except PolytraceError as exc:
        prof, model, n_gpus = default_workload(workload.get("profile"), workload.get("model"), workload.get("gpus"))
        return {"line": f"step time on {prof.name} / {model} / {counted(n_gpus, 'GPU')}: not estimated ({exc})",
                "step_change": None, "impact": None}
    return {"line": res.line, "step_change": res.step_change, "impact": res.to_json()}


def format_impact(res: ImpactResult, markdown: bool = False, top: int = 10) -> str:
    """Per stage and in total, the kernels that cause it, the benchmarks that moved, the line."""
    from tabulate import tabulate

    fmt = "github" if markdown else "simple"
    w = res.workload
    head = (f"impact on {w['profile']} / {w['model']} / {w['gpus']} x {_gpu_label(w['gpu'])} "
            f"(estimated at the {w.get('priced', 'shared priors')}, mean of {len(w['steps'])} sampled steps, "
            f"seed {w['seed']})")
    rows = [[s, f"{v['baseline_s']:.3f}", f"{v['candidate_s']:.3f}", f"{v['change_s']:+.3f}", f"{v['change']:+.2%}",
             f"{v['step_share']:+.2%}"] for s, v in res.stages.items()]
    b, c = res.baseline_step_s, res.candidate_step_s
    rows.append(["step", f"{b:.3f}", f"{c:.3f}", f"{c - b:+.3f}", f"{res.step_change:+.2%}",
                 f"{res.step_change:+.2%}"])
    out = [f"**{head}**" if markdown else head, "",
           tabulate(rows, headers=["stage", "baseline s", "candidate s", "change s", "change", "of step"],
                    tablefmt=fmt, disable_numparse=True), ""]
    if res.kernels:
        krows = [[k["stage"], k["family"], f"{k['change_s']:+.3f}", f"{k['step_share']:+.2%}", k["source"]]
                 for k in res.kernels[:top]]
        out += ["kernels that cause it:", "",
                tabulate(krows, headers=["stage", "family", "change s", "of step", "priced from"], tablefmt=fmt,
                         disable_numparse=True), ""]
    else:
        out += ["no kernel on this workload's path changed", ""]
    if res.benchmarks:
        brows = [[x["id"], f"{x['ratio']:.3f}x", "yes" if x["on_path"] else "no"] for x in res.benchmarks[:top]]
        more = len(res.benchmarks) - top
        out += ["benchmarks that moved (candidate / baseline median):", "",
                tabulate(brows, headers=["benchmark", "time", "on the workload's path"], tablefmt=fmt,
                         disable_numparse=True)]
        if more > 0:
            out.append(f"... and {more} more (--json lists all)")
        out.append("")
    out.append(f"**{res.line}**" if markdown else res.line)
    return "\n".join(out)


__all__ = ["ImpactResult", "format_impact", "impact", "step_time_line"]
