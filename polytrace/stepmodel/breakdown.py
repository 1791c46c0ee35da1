"""The kernel breakdown of an estimate: per stage the seconds of each kernel family, its share of
the step and where it came from; what a what-if changes; the Amdahl table ("this family N x
faster -> the step this much faster"); their text and Markdown tables.

A family's ``status`` is ``measured`` when every part of it came from result files,
``extrapolated`` when one was asked far outside the measured sizes, ``roofline`` when none
came from result files, ``partly measured`` otherwise (e.g. the GEMMs of training measured,
those of decoding at batch sizes the GEMM suite does not time at the roofline).
"""

from __future__ import annotations

from .pricing import FAMILIES, NOT_KERNELS, ROOFLINE
from .result import Price, combined, price_of
from .stages import STAGES

BREAKDOWN_STAGES = (*STAGES, "other")  # "other": the step outside the stages (reward scoring)
_ORDER = {f: i for i, f in enumerate((*FAMILIES, *NOT_KERNELS))}


def _family_key(family: str) -> tuple:
    return (_ORDER.get(family, len(_ORDER)), family)


def source_status(source: str, prices=None) -> str:
    """``measured``, ``roofline``, ``partly measured`` or ``extrapolated`` (``result.Price``) of a
    family whose parts were priced ``prices`` (their sources joined by " + " in ``source``). The
    model's own host prices are ``Price.ROOFLINE`` parts: no result file measured them. Without
    ``prices``, each piece of ``source`` is classified by its text (``result.price_of``)."""
    pieces = [p.strip() for p in source.replace(" | ", " + ").split(" + ") if p.strip()]
    if prices is None:
        prices = [price_of(p) for p in pieces]
    # a timing asked far outside its measured sizes (pricing.EXTRAPOLATION_LIMIT) is no measurement
    return combined(prices, pieces).value


def kernel_summary(rows: list[dict]) -> dict:
    """{stage: {family: {"s": mean seconds, "share": of the mean step, "source": ...}}} over the
    rows of ``estimate`` (families with no time left out). The shares add up to 1."""
    n = max(len(rows), 1)
    step = sum(r["step_s"] for r in rows) / n
    acc: dict[str, dict[str, float]] = {}
    srcs: dict[str, dict[str, list[str]]] = {}
    prices: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        for stage, fams in row["kernels"].items():
            for fam, s in fams.items():
                acc.setdefault(stage, {})
                acc[stage][fam] = acc[stage].get(fam, 0.0) + s / n
                src = row.get("kernel_sources", {}).get(stage, {}).get(fam, ROOFLINE)
                seen = srcs.setdefault(stage, {}).setdefault(fam, [])
                if src not in seen:
                    seen.append(src)
                priced = prices.setdefault(stage, {}).setdefault(fam, [])
                for p in row.get("kernel_prices", {}).get(stage, {}).get(fam, [price_of(src).value]):
                    if p not in priced:
                        priced.append(p)
    out: dict[str, dict] = {}
    for stage in BREAKDOWN_STAGES:
        fams = {f: s for f, s in acc.get(stage, {}).items() if s > 0}
        if fams:
            out[stage] = {f: {"s": s, "share": s / step if step > 0 else 0.0,
                              "source": " | ".join(srcs[stage][f]), "prices": prices[stage][f]}
                          for f, s in sorted(fams.items(), key=lambda kv: _family_key(kv[0]))}
    return out


def family_summary(kernels: dict, step_s: float) -> dict:
    """{family: {"s", "share", "status", "sources": {stage: source}}} summed over stages."""
    out: dict[str, dict] = {}
    for stage, fams in kernels.items():
        for fam, v in fams.items():
            d = out.setdefault(fam, {"s": 0.0, "share": 0.0, "sources": {}})
            d["s"] += v["s"]
            d["sources"][stage] = v["source"]
            d.setdefault("_prices", {})[stage] = v.get("prices")
    for fam, d in out.items():
        d["share"] = d["s"] / step_s if step_s > 0 else 0.0
        if fam == "tool":
            d["status"] = "trace"
        elif fam == "calibration":
            d["status"] = "calibration"
        else:
            statuses = {source_status(s, d["_prices"][stage]) for stage, s in d["sources"].items()}
            d["status"] = statuses.pop() if len(statuses) == 1 else Price.PARTLY_MEASURED.value
        d.pop("_prices", None)
    return dict(sorted(out.items(), key=lambda kv: _family_key(kv[0])))


def what_if_summary(rows: list[dict], reference: list[dict], providers: dict, speedups: dict) -> dict:
    """The estimate with what-ifs against the same estimate without them."""
    n = max(len(rows), 1)
    step = sum(r["step_s"] for r in rows) / n
    ref = sum(r["step_s"] for r in reference) / n
    stages = {}
    for s in STAGES:
        a = sum(r["stages_s"][s] for r in reference) / n
        b = sum(r["stages_s"][s] for r in rows) / n
        if a > 0 or b > 0:
            stages[s] = {"reference_s": a, "s": b, "change": b / a - 1.0 if a > 0 else 0.0}
    return {"providers": dict(providers), "speedups": dict(speedups), "reference_step_s": ref, "step_s": step,
            "step_change": step / ref - 1.0 if ref > 0 else 0.0, "stages": stages}


def amdahl_table(families: dict, step_s: float, factor: float, reprice) -> list[dict]:
    """For every kernel family with time in the step: the step time with that family ``factor``
    times faster everywhere (``reprice(family)`` re-runs the estimate) and how much faster the
    step gets; the family's share is the most any speedup of it can save."""
    rows = []
    for fam, d in families.items():
        if fam in NOT_KERNELS or d["s"] <= 0:
            continue
        new = reprice(fam)
        rows.append({"family": fam, "share": d["share"], "factor": factor, "step_s": new,
                     "step_faster": 1.0 - new / step_s if step_s > 0 else 0.0})
    return rows


# The family the estimate files the priors' fixed per-stage seconds under; in a table of kernel
# families it read as a kernel (6.8% of the default step, issue 38): it is a constant of the priors.
PRIORS_CONSTANT = "priors constant"


def priors_constant_named(summary: dict) -> dict:
    """``summary`` with the priors' per-stage constants (family "calibration" whose source is the
    priors) listed as "priors constant"; a fitted calibration's constants keep their name."""
    fam = summary.get("families", {}).get("calibration")
    if not fam or fam.get("status") != "priors":
        return summary

    def renamed(d: dict) -> dict:
        return {PRIORS_CONSTANT if k == "calibration" else k: v for k, v in d.items()}

    out = dict(summary, families=renamed(summary["families"]),
               kernels={stage: renamed(fams) for stage, fams in summary["kernels"].items()})
    if summary.get("amdahl"):
        out["amdahl"] = [dict(a, family=PRIORS_CONSTANT) if a.get("family") == "calibration" else a
                         for a in summary["amdahl"]]
    return out


# ---------------------------------------------------------------------------------- tables
def _stages_present(kernels: dict) -> list[str]:
    return [s for s in BREAKDOWN_STAGES if s in kernels]


def kernel_table(summary: dict, tablefmt: str = "simple") -> str:
    """Families down, stages across: seconds, the family's share of the step and its status."""
    from tabulate import tabulate

    kernels, families = summary["kernels"], summary["families"]
    stages = _stages_present(kernels)
    rows = []
    for fam, d in families.items():
        cells = [f"{kernels[s][fam]['s']:.2f}" if fam in kernels[s] else "" for s in stages]
        rows.append([fam, *cells, f"{d['s']:.2f}", f"{d['share']:.1%}", d["status"]])
    total = [f"{sum(v['s'] for v in kernels[s].values()):.2f}" for s in stages]
    rows.append(["step", *total, f"{summary['mean_step_s']:.2f}", "100.0%", ""])
    return tabulate(rows, headers=["family", *(f"{s} s" for s in stages), "total s", "share", "source"],
                    tablefmt=tablefmt, disable_numparse=True)


def source_lines(summary: dict) -> list[str]:
    """One line per family: measured / roofline, and from what."""
    out = []
    for fam, d in summary["families"].items():
        srcs: dict[str, list[str]] = {}
        for stage, src in d["sources"].items():
            srcs.setdefault(src, []).append(stage)
        if len(srcs) == 1:
            where = next(iter(srcs))
        else:
            where = "; ".join(f"{', '.join(stages)}: {src}" for src, stages in srcs.items())
        if where == d["status"] or where.startswith(f"{d['status']} ("):  # "roofline (why)" says it all
            out.append(f"{fam}: {where}")
        else:
            out.append(f"{fam}: {d['status']} ({where})")
    return out


def grouped_source_lines(summary: dict) -> list[str]:
    """``source_lines`` for reading: families with the same source share one line, with a count
    (``roofline (9 families): gemm, attention, ...``) instead of nine lines saying the same."""
    groups: dict[str, list[str]] = {}
    for line in source_lines(summary):
        fam, _, where = line.partition(": ")
        groups.setdefault(where, []).append(fam)
    return [f"{fams[0]}: {where}" if len(fams) == 1 else f"{where} ({len(fams)} families): {', '.join(fams)}"
            for where, fams in groups.items()]


def amdahl_lines(summary: dict, tablefmt: str = "simple") -> str:
    from tabulate import tabulate

    rows = [[r["family"], f"{r['share']:.1%}", f"{r['factor']:g}x faster", f"{r['step_s']:.2f}",
             f"{r['step_faster']:.1%}"] for r in summary.get("amdahl", [])]
    return tabulate(rows, headers=["family", "share of step", "what if", "step s", "step faster by"],
                    tablefmt=tablefmt, disable_numparse=True)


def what_if_lines(summary: dict) -> list[str]:
    w = summary.get("what_if")
    if not w:
        return []
    asked = [f"{f}={p}" for f, p in w["providers"].items()] + [f"{f} {x:g}x faster" for f, x in w["speedups"].items()]
    lines = [f"what-if ({', '.join(asked)}): step {w['step_s']:.2f} s against {w['reference_step_s']:.2f} s "
             f"without it ({w['step_change']:+.1%})"]
    lines += [f"  {s}: {v['reference_s']:.2f} -> {v['s']:.2f} s ({v['change']:+.1%})"
              for s, v in w["stages"].items() if abs(v["s"] - v["reference_s"]) > 1e-12]
    return lines


__all__ = ["BREAKDOWN_STAGES", "amdahl_lines", "amdahl_table", "family_summary", "grouped_source_lines",
           "kernel_summary", "kernel_table", "source_lines", "source_status", "what_if_lines", "what_if_summary"]
