"""The priors scored on what they were not fitted on: leave-one-group-out over the corpus.

Leave-one-log-out lets a log's twin (the same model, GPU and recipe at another batch) stay in the
fit; it measures interpolation. Here whole groups are held out (``GROUPINGS``): every log of one
model size (the ladder's rungs), one model family, one GPU type or one trainer backend, fitted on
the rest and scored zero-shot, beside the leave-one-log-out folds and two baselines fitted on the
same training logs:

- ``naive``: every step predicted at the training logs' median step seconds (knows nothing of the
  configuration);
- ``roofline x scalar``: the base roofline times one scalar, the training logs' median ratio of
  actual to roofline step seconds (a model with one fitted number).

Each fold's fitted numbers are kept, so their spread across folds shows what the corpus identifies,
and every fold where one sits on a bound of the fit (an efficiency of 1, ``MIN_SLOWDOWN``,
``MAX_SLOWDOWN``, a constant at 0 or ``MAX_CONSTANT_S``) is flagged by name.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ..errors import PolytraceError
from . import priors as P
from .fit import MIN_SLOWDOWN

# The corpus: the nine logs of ``validation-logs/`` and the December additions the reader reads.
CORPUS_GLOBS = ("*.log", "ladder/*.log", "more/*.log")
# Read, but kept out of the fit, each with the reason (``docs/step-model.md``).
EXCLUDED = {
    "more/verl-on-gke_b200_vllm0.11_parsed_metrics.csv":
        "its README states B200s and its MFU reads verl's B200 peak (2222 of 2250 TFLOP/s), but priced on a B200 "
        "with the trainer settings validate infers (remove-padding off, undecided between on and off on the window) "
        "the update beats its roofline (0.82x): a setting is unidentified, so the log is scored, not fitted",
    "more/verl_getting-started_notebook.ipynb":
        "a Colab notebook (metadata names a T4, which no preset prices) with no MFU to read its GPU from",
}
BOUND_REL = 1e-3  # a fitted number within this of a bound sits on it


def corpus_names(folder) -> list[str]:
    """The corpus's files under ``validation-logs`` (``CORPUS_GLOBS``), relative, sorted."""
    root = Path(folder)
    names = sorted({str(p.relative_to(root)) for g in CORPUS_GLOBS for p in root.glob(g)})
    if not names:
        raise PolytraceError(f"{root}: no logs ({', '.join(CORPUS_GLOBS)})")
    return [n for n in names if n not in EXCLUDED]


def _size(model: str) -> str:
    m = re.search(r"(\d+(?:\.\d+)?)b$", model)
    return f"{m.group(1)}B" if m else model


def _family(model: str) -> str:
    m = re.match(r"(.+?)-?\d+(?:\.\d+)?b$", model)
    return m.group(1) if m else model


# grouping -> the group of a corpus log (``corpus.Corpus``)
GROUPINGS = {
    "log": lambda c: c.name,
    "size": lambda c: _size(c.model),
    "family": lambda c: _family(c.model),
    "gpu": lambda c: c.gpu,
    "backend": lambda c: c.strategy,
}


def _on_bounds(doc: dict) -> list[str]:
    """The fitted numbers of a priors fit (``priors.fit_priors``) that sit on a bound, said."""
    out = []
    kinds = dict(doc["kinds"])
    if "common_slowdown" in doc:  # a single series's one slowdown (``priors.MIN_SERIES``)
        kinds["common (one series)"] = {**doc["common_slowdown"], "logs": ["(one series)"]}
    for k, v in kinds.items():
        if not v["logs"] or "fixed" in v or "fallback" in v:
            continue
        s, floor = v["slowdown"], v["floor"]
        if floor >= MIN_SLOWDOWN and s <= floor * (1 + BOUND_REL):
            out.append(f"{k} at its roofline floor (efficiency 1 on some step)")
        elif s <= MIN_SLOWDOWN * (1 + BOUND_REL):
            out.append(f"{k} at the lower bound {MIN_SLOWDOWN}")
        elif s >= P.MAX_SLOWDOWN * (1 - BOUND_REL):
            out.append(f"{k} at the upper bound {P.MAX_SLOWDOWN:g}")
    for k, v in doc["constants_s"].items():
        if k in doc.get("constants_fixed", {}):
            continue
        if v <= 1e-6:
            out.append(f"constant {k} at 0 s")
        elif v >= P.MAX_CONSTANT_S * (1 - BOUND_REL):
            out.append(f"constant {k} at {P.MAX_CONSTANT_S:g} s")
    return out


def _params(doc: dict) -> dict:
    out = {f"slowdown {k}": v["slowdown"] for k, v in doc["kinds"].items()
           if v["logs"] and "fixed" not in v and "fallback" not in v}
    if "common_slowdown" in doc:
        out["slowdown common (one series)"] = doc["common_slowdown"]["slowdown"]
    out.update({f"constant {k} s": v for k, v in doc["constants_s"].items() if k not in doc.get("constants_fixed", {})})
    return out


def not_identified(doc: dict) -> list[str]:
    """The kinds and constants a priors fit did not fit because too few series of its training logs
    exercise them (``priors.MIN_SERIES``), each with what it took instead."""
    out = [f"{k}: {v['fallback'].split(': ', 1)[1]}" for k, v in doc["kinds"].items()
           if "not identified in this fit" in v.get("fallback", "")]
    return out + [f"constant {k}: 0 s" for k, why in doc.get("constants_fixed", {}).items()
                  if why.startswith("not identified in this fit")]


def peak_share(doc: dict) -> float:
    """The largest fraction of its peak any kernel family runs at under a fit's slowdowns
    (``priors.fit_priors``' ``family_peak_share``): above 1 a fold prices work past the hardware."""
    return max((x for v in doc["kinds"].values() for x in v.get("family_peak_share", {}).values()), default=0.0)


def _baseline_scores(train: list, held: list) -> dict:
    """The naive and roofline-times-scalar predictions of ``held``, fitted on ``train``."""
    step_s = float(np.median([np.mean([r.actual["step"] for r in c.rows]) for c in train]))
    ratios = []
    for c in train:
        roof = P.predict_log(None, c)["step"]
        ratios.append(math.log(np.mean([r.actual["step"] for r in c.rows]) / float(np.mean(roof))))
    k = math.exp(float(np.median(ratios)))
    out = {}
    for c in held:
        a = np.array([r.actual["step"] for r in c.rows])
        roof = P.predict_log(None, c)["step"] * k
        out[c.name] = {"naive_ratio": float(step_s / a.mean()),
                       "naive_median_error": float(np.median(np.abs(step_s / a - 1.0))),
                       "scalar_ratio": float(roof.mean() / a.mean()),
                       "scalar_median_error": float(np.median(np.abs(roof / a - 1.0))),
                       "scalar": k}
    return out


def leave_group_out(corpus: list, grouping: str, fit=None) -> dict:
    """Every group of ``grouping`` (``GROUPINGS``) held out in turn: the priors fitted on the rest
    (``fit``, default ``priors.fit_priors``), each held-out log scored zero-shot (``priors.score``)
    beside the baselines; per fold the logs fitted on, the fitted numbers and those on a bound."""
    fit = fit or P.fit_priors
    key = GROUPINGS[grouping]
    groups: dict[str, list] = {}
    for c in corpus:
        groups.setdefault(key(c), []).append(c)
    per_log, folds = {}, {}
    for g, held in sorted(groups.items()):
        train = [c for c in corpus if key(c) != g]
        if not train:
            continue
        doc = fit(train)
        base = _baseline_scores(train, held)
        for c in held:
            per_log[c.name] = {**P.score(doc, c), "baselines": base[c.name], "group": g}
        folds[g] = {"held_out": [c.name for c in held], "fitted_on": [c.name for c in train],
                    "params": _params(doc), "on_bounds": _on_bounds(doc), "peak_share": peak_share(doc),
                    "not_identified": not_identified(doc)}
    return {"grouping": grouping, "per_log": per_log, "folds": folds, "summary": summarise(per_log)}


def summarise(per_log: dict) -> dict:
    """Median over held-out logs of the step's median error (the priors, the naive predictor, the
    roofline times a scalar), the generation's, and the worst step ratio."""
    if not per_log:
        return {"logs": 0}

    def worst(rs):
        return float(max(rs, key=lambda r: abs(math.log(r))))

    step = [v["step"]["median_error"] for v in per_log.values()]
    gen = [v["gen"]["median_error"] for v in per_log.values() if "gen" in v]
    ratios = [v["step"]["ratio"] for v in per_log.values()]
    b = [v["baselines"] for v in per_log.values()]
    return {"logs": len(per_log), "step_median_error": float(np.median(step)),
            "gen_median_error": float(np.median(gen)) if gen else None,
            "worst_step_ratio": worst(ratios), "logs_past_2x": sum(not 0.5 <= r <= 2.0 for r in ratios),
            "naive_step_median_error": float(np.median([x["naive_median_error"] for x in b])),
            "naive_worst_step_ratio": worst([x["naive_ratio"] for x in b]),
            "scalar_step_median_error": float(np.median([x["scalar_median_error"] for x in b])),
            "scalar_worst_step_ratio": worst([x["scalar_ratio"] for x in b])}


def spread(results: dict) -> dict:
    """Per fitted number, its min, median and max over every fold of every grouping in ``results``
    (``{grouping: leave_group_out(...)}``), and the folds where it sat on a bound."""
    vals: dict[str, list] = {}
    bounds = []
    for grouping, res in results.items():
        for g, f in res["folds"].items():
            for k, v in f["params"].items():
                vals.setdefault(k, []).append(v)
            bounds += [f"{grouping}={g}: {b}" for b in f["on_bounds"]]
    return {"params": {k: [float(min(v)), float(np.median(v)), float(max(v))] for k, v in sorted(vals.items())},
            "on_bounds": bounds}


def evaluate(corpus: list, groupings=tuple(GROUPINGS), fit=None) -> dict:
    """``leave_group_out`` for each grouping and the fitted numbers' ``spread`` over all folds."""
    results = {g: leave_group_out(corpus, g, fit) for g in groupings}
    return {"groupings": {g: {"summary": r["summary"], "per_log": r["per_log"],
                              "folds": {k: {"held_out": f["held_out"], "on_bounds": f["on_bounds"],
                                            "peak_share": f["peak_share"], "not_identified": f["not_identified"]}
                                        for k, f in r["folds"].items()}}
                          for g, r in results.items()},
            "spread": spread(results)}


def markdown_table(doc: dict) -> str:
    """The group-held-out headline (``docs/step-model.md``, README): per grouping the median step
    error, the worst log and the logs past 2x, the naive predictor and roofline x scalar beside."""
    lines = ["| held out | logs | step median err | worst step pred/actual | past 2x | gen median err | "
             "naive step err (worst) | roofline x scalar step err (worst) |", "|---|---|---|---|---|---|---|---|"]
    for g, r in doc["groupings"].items():
        s = r["summary"]
        if not s["logs"]:
            lines.append(f"| one {g} | - (the corpus has one {g}) | | | | | | |")
            continue
        gen = f"{100 * s['gen_median_error']:.0f}%" if s.get("gen_median_error") is not None else "-"
        lines.append(f"| one {g} | {s['logs']} | **{100 * s['step_median_error']:.0f}%** | "
                     f"{s['worst_step_ratio']:.2f}x | "
                     f"{s['logs_past_2x']} | {gen} | {100 * s['naive_step_median_error']:.0f}% "
                     f"({s['naive_worst_step_ratio']:.2f}x) | {100 * s['scalar_step_median_error']:.0f}% "
                     f"({s['scalar_worst_step_ratio']:.2f}x) |")
    return "\n".join(lines) + "\n"


def spread_table(doc: dict) -> str:
    """Each fitted number's min, median and max over every fold of every grouping, and in how many
    folds it sat on a bound (``docs/step-model.md``)."""
    sp = doc["spread"]
    folds = sum(len(r["folds"]) for r in doc["groupings"].values())
    lines = [f"| fitted number | min | median | max over {folds} folds | folds on a bound |", "|---|---|---|---|---|"]
    for k, (lo, med, hi) in sp["params"].items():
        name = k.split(" ", 1)[1].removesuffix(" s")
        what = "constant " + name if k.startswith("constant") else name
        hits = sum(b.split(": ", 1)[1].startswith(what + " ") for b in sp["on_bounds"])
        lines.append(f"| {k} | {lo:.3g} | {med:.3g} | {hi:.3g} | {hits} |")
    return "\n".join(lines) + "\n"
