"""Shared physical priors: one slowdown per kind of work and engine setting, and per-call constant
seconds per kind of stage, fitted across every public log the project reads, evaluated
leave-one-log-out, written to ``polytrace/data/priors.json`` with their provenance
(``scripts/fit_priors.py`` refits them; ``compose.efficiency.prior_scalars`` reads them).

The model is the calibration's own: a stage is its modelled work per part times the slowdown of
the part's kind, plus a constant per call. The kinds (``compose.efficiency.prior_kind``):

- ``rollout.eager`` / ``rollout.cuda_graphs``: the rollout's GEMMs, decode attention and prefill
  (vLLM with and without ``enforce_eager``); ``rollout_host.*``: its per-iteration host work
  (the scheduler's step, the launches the GPU's work does not hide), priced apart because it
  does not scale with the model; ``rollout_seq_host``: its host work per running sequence
  (block bookkeeping, sampler and detokeniser Python), apart again because it scales with the
  batch and not the iteration count; one kind whatever the launch mode, since CUDA graphs replay
  the model's kernels and leave that Python as it is. The KV-cache limit on concurrency
  (``gpu_memory_utilization``) is in the rollout simulation.
- ``forward``: the trainer's forward passes (log-prob, reference, values);
  ``train.no_checkpointing`` / ``train.checkpointing``: the update (forward, backward with or
  without activation recompute, the optimizer).
- ``trainer_host``: the trainer's per-micro-batch host work; ``collectives``: FSDP all-gathers
  and reduce-scatters, TP all-reduces, weight sync traffic; ``offload``: parameter offload
  traffic over PCIe.
- constants: ``gen``, ``forward`` (log-prob, reference and value passes), ``update`` (each
  update) and ``other`` (the step outside its stages), in seconds.

Each log is read and priced on its GPU by ``calibrate/corpus.py`` (``load_corpus``).

A kind no corpus log exercises (today: CUDA graphs in rollout) takes its sibling's slowdown, and
the file says so (``fallback``).

Fitted on log relative errors (every stage and the step of up to ``ROWS_PER_LOG`` evenly spaced
steps per log, each log weighing the same), soft-L1, each slowdown bounded below by the largest
peak-roofline share of its kind on any corpus step (``fit.roofline_bounds``: efficiency <= 1).
"""

from __future__ import annotations

import datetime as _dt
import math

import numpy as np

from ..errors import PolytraceError
from ..stepmodel.efficiency import CONSTANT_KIND, priced_share, prior_kind, roofline_share  # noqa: F401 (re-exported)
from .corpus import Corpus, roofline_margin
from .fit import MIN_SLOWDOWN

KINDS = ("rollout.eager", "rollout.cuda_graphs", "rollout_host.eager", "rollout_host.cuda_graphs", "rollout_seq_host",
         "forward",
         "train.no_checkpointing", "train.checkpointing", "trainer_host", "collectives", "offload", "optimizer")
CONSTANTS = ("gen", "forward", "update", "other")
# Constants the corpus does not identify, fixed instead of fitted (``folds``: fitted freely over the
# 38 group and log folds of the 22-log corpus, gen sat on its bound 0 s in 36 and other in 35,
# at most 1.3 and 1.5 s elsewhere; the per-call work of generation is in the host kinds, the
# step outside its stages is timed by verl apart).
FIXED_CONSTANTS = {
    "gen": (0.0, "not identified: on its bound 0 s in 36 of 38 folds of a free fit of the 22-log corpus; "
                 "fixed at 0 s"),
    "other": (0.0, "not identified: on its bound 0 s in 35 of 38 folds of a free fit of the 22-log corpus; "
                   "fixed at 0 s"),
}
FITTED_CONSTANTS = tuple(k for k in CONSTANTS if k not in FIXED_CONSTANTS)
# a kind with no corpus log takes this kind's slowdown
# The per-iteration host work of an engine replaying CUDA graphs is not the eager one's: eager pays
# a launch per kernel that graphs replace with one (the corpus's 5.1x on its eager host work is
# mostly those launches at the small models' sub-millisecond iterations). With no graph-mode log in
# the corpus it keeps its base price (``Efficiency.host_s_per_iter``, 2.5 ms: vLLM's v0.6
# performance notes), not the eager fit: inherited, it put the published NeMo RL runs (graph-mode
# engines) at up to 3x their step.
FALLBACK = {"rollout.cuda_graphs": "rollout.eager", "rollout.eager": "rollout.cuda_graphs",
            "rollout_host.eager": "rollout_host.cuda_graphs",
            "train.checkpointing": "train.no_checkpointing", "train.no_checkpointing": "train.checkpointing"}
# Kinds priced from the links alone (slowdown 1: NCCL's bus bandwidth at ``Efficiency.comm`` of the
# link, as nccl-tests measures it), not fitted: with FSDP's gathers and reduce-scatters behind the
# compute (``stepmodel/training.py``) the corpus leaves them a few percent of any stage, too little
# to identify a slowdown; fitted freely they absorbed other work (0.01 with the forward gathers in
# series, 6.3 once they overlap), and the estimates of runs whose collectives matter (expert
# all-to-all, tensor-parallel all-reduces) inherited it.
LINK_PRICED = ("collectives",)
# Kinds priced from a datasheet rate and not fitted, with the reason the file gives.
FIXED_KINDS = {
    "collectives": "priced from the links (NCCL bus bandwidth at Efficiency.comm), not fitted",
    "optimizer": "priced at the HBM peak (datasheet bandwidth, ~32 bytes per trained parameter per mini-batch), "
                 "not fitted: under 1% of every corpus update (8 ms of a 7B update on 8 H100s)",
}
# Identify, or do not fit (issue 36): a kind or constant that fewer than this many series of logs
# (``series``: the ladder's ten rungs are two) of a fit's training set exercise is not fitted from
# them. One series holds one configuration: the Megatron log alone (the fold that holds FSDP out)
# puts any mix of the rollout's device, per-iteration and per-sequence slowdowns on its one
# generation time (fitted from it, they priced the FSDP logs at 0.47-4.25x their step). Such a kind
# takes its engine-setting sibling's fitted slowdown (``FALLBACK``) where that one is identified;
# where the fit identifies no kind at all (one series), all of them share one slowdown, the one
# number one configuration identifies (the base prices' relative rates kept: a roofline times one
# scalar); else the base price (slowdown 1: the cited rates of ``stepmodel/efficiency.Efficiency``).
# Such a constant is 0 s. Never the full corpus's value, which would leak held-out logs into a fold.
MIN_SERIES = 2
SOFT_L1_LOG = 0.3  # log-ratio residuals past 0.3 (35%) weigh linearly: one odd log cannot pull the fit
MAX_CONSTANT_S = 120.0
MAX_SLOWDOWN = 100.0


def _predict(slow: np.ndarray, const: dict, stages: list[str], x: dict, other: np.ndarray,
             overlapped: tuple = (), fixed: dict | None = None) -> dict:
    fixed = fixed or {}
    pred = {s: x[s] @ slow + const[CONSTANT_KIND[s]] + fixed.get(s, 0.0) for s in stages}
    pred["step"] = sum(v for s, v in pred.items() if s not in overlapped) + other + const["other"]
    return pred


def _slowdowns(doc: dict) -> np.ndarray:
    return np.array([float(doc["kinds"][k]["slowdown"]) for k in KINDS])


def fit_priors(corpus: list[Corpus]) -> dict:
    """Kinds' slowdowns and the constants fitted on ``corpus`` (module docstring): ``{"kinds":
    {kind: {"slowdown", "floor", "logs", "efficiency_of_peak"}}, "constants_s": {...}}``."""
    from scipy.optimize import least_squares

    if not corpus:
        raise PolytraceError("no logs to fit the priors on")
    kinds = list(KINDS)
    mats = [(c, c.matrices(kinds, c.sample())) for c in corpus]
    by_kind = [{series(c) for c, (x, *_r) in mats if any(x[s][:, i].sum() > 0 for s in x)} for i in range(len(kinds))]
    seen = np.array([bool(s) for s in by_kind])
    ident = np.array([len(s) >= MIN_SERIES for s in by_kind])
    families = kind_families(corpus)
    # per family, not per kind: a kind's slowdown may not run any family it holds past the peak
    floor = np.array([max((priced_share(f) for f in families.get(k, ())), default=0.0) for k in kinds])
    free = [i for i in range(len(kinds)) if ident[i] and kinds[i] not in FIXED_KINDS]
    # a kind exercised but not identified rides on its identified sibling (whose floor it shares)
    tied = {i: kinds.index(FALLBACK[k]) for i, k in enumerate(kinds) if seen[i] and not ident[i]
            and kinds.index(FALLBACK.get(k, k)) in free}
    single = not free  # one series: every kind it exercises on one common slowdown
    common = [i for i in range(len(kinds)) if seen[i] and kinds[i] not in FIXED_KINDS] if single else []
    if common:
        free = common[:1]
        tied = {i: common[0] for i in common[1:]}
    nf = len(free)
    for i, j in tied.items():
        floor[j] = max(floor[j], floor[i])
    stage_series = {k: {series(c) for c in corpus if any(CONSTANT_KIND.get(s) == k for s in c.stages)}
                    for k in FITTED_CONSTANTS}
    fitted_consts = [k for k in FITTED_CONSTANTS if len(stage_series[k]) >= MIN_SERIES]
    const_fixed = {k: (v, why) for k, (v, why) in FIXED_CONSTANTS.items()}
    const_fixed.update({k: (0.0, f"not identified in this fit: {len(stage_series[k])} series of logs time it "
                                 f"(< {MIN_SERIES}); 0 s") for k in FITTED_CONSTANTS if k not in fitted_consts})

    def unpack(theta):
        slow = np.ones(len(kinds))
        slow[free] = np.exp(theta[:nf])
        for i, j in tied.items():
            slow[i] = slow[j]
        return slow, {**{k: v for k, (v, _why) in const_fixed.items()}, **dict(zip(fitted_consts, theta[nf:]))}

    # each log's weight, fixed for the fit (a log's stages and the step: len(stages) + 1 predictions)
    weights = [math.sqrt(source_weight(c, corpus) / (len(other) * (len(c.stages) + 1)))
               for c, (_x, _b, _y, other, _f) in mats]

    def residuals(theta):
        slow, const = unpack(theta)
        res = []
        for (c, (x, _b, y, other, fixed)), w in zip(mats, weights):
            pred = _predict(slow, const, c.stages, x, other, c.overlapped, fixed)
            res += [w * np.log(np.maximum(pred[k], 1e-9) / y[k]) for k in pred]
        return np.concatenate(res)

    nc = len(fitted_consts)
    lo = np.concatenate([np.log(np.maximum(floor[free], MIN_SLOWDOWN)), np.zeros(nc)])
    hi = np.concatenate([np.full(nf, math.log(MAX_SLOWDOWN)), np.full(nc, MAX_CONSTANT_S)])
    theta0 = np.clip(np.concatenate([np.zeros(nf), np.ones(nc)]), lo, hi)
    if len(theta0):
        theta = least_squares(residuals, theta0, bounds=(lo, hi), loss="soft_l1", f_scale=SOFT_L1_LOG).x
    else:  # nothing identified: the base prices
        theta = theta0
    slow, const = unpack(theta)
    slow[free] = np.maximum(slow[free], floor[free])
    for i, j in tied.items():
        slow[i] = slow[j]
    out = {}
    for i, k in enumerate(kinds):
        logs = sorted({c.name for c, (x, _b, _y, _o, _f) in mats if any(x[s][:, i].sum() > 0 for s in x)})
        out[k] = {"slowdown": float(slow[i]), "floor": float(floor[i]), "logs": logs}
        if seen[i] and not ident[i] and k not in FIXED_KINDS:
            src = ("one slowdown for every kind of this single series" if i in common else
                   f"{kinds[tied[i]]}'s slowdown" if i in tied else "the base price (1.0)")
            out[k]["fallback"] = (f"not identified in this fit: {len(by_kind[i])} series of logs exercise it "
                                  f"(< {MIN_SERIES}): {src}")
        if not seen[i]:
            src = FALLBACK.get(k)
            if src is not None and seen[kinds.index(src)]:
                out[k]["slowdown"] = float(slow[kinds.index(src)])
                out[k]["fallback"] = f"no log in the corpus: {src}'s slowdown"
            else:
                out[k]["fallback"] = "no log in the corpus: the base prices (1.0)"
        if k in FIXED_KINDS:
            out[k]["fixed"] = FIXED_KINDS[k]
        out[k]["family_peak_share"] = {f: priced_share(f) / out[k]["slowdown"] for f in sorted(families.get(k, ()))}
        effs = [e for c, m in mats if (e := _efficiency(m, i, out[k]["slowdown"])) is not None]
        out[k]["efficiency_of_peak"] = [float(min(effs)), float(np.median(effs)), float(max(effs))] if effs else None
    doc = {"kinds": out, "constants_s": {k: float(const[k]) for k in CONSTANTS},
           "constants_fixed": {k: why for k, (_v, why) in const_fixed.items()}}
    if common:  # the one number a single series identifies (``MIN_SERIES``)
        doc["common_slowdown"] = {"slowdown": float(slow[common[0]]), "floor": float(floor[common[0]]),
                                  "kinds": [kinds[i] for i in common]}
    return doc


def source_weight(c: Corpus, corpus: list[Corpus]) -> float:
    """A log's weight in the fit: one over the logs of its series (``series``) in ``corpus``, so
    that each independent source weighs as one log: the ladder's ten rungs (one publisher, one
    recipe, one cluster) weigh as two series, not ten logs."""
    mine = series(c)
    return 1.0 / sum(series(o) == mine for o in corpus)


def series(c: Corpus) -> str:
    """The series a corpus log belongs to: a ladder dataset (``ladder/`` GSM8K or MATH rungs), the
    on-policy distillation runs, else the log itself."""
    name = c.name
    if c.series:
        return c.series
    return name


def kind_families(corpus: list[Corpus]) -> dict[str, set]:
    """Kind -> the kernel families with priced work of that kind on some corpus row."""
    out: dict[str, set] = {}
    for c in corpus:
        for k, fams in c.kind_families().items():
            out.setdefault(k, set()).update(fams)
    return out


def _efficiency(m, i: int, slowdown: float) -> float | None:
    """Peak-roofline seconds over the priced seconds of kind ``i`` on a log's rows (<= 1)."""
    x, b = m[0], m[1]
    xs = sum(float(x[s][:, i].sum()) for s in x)
    bs = sum(float(b[s][:, i].sum()) for s in b)
    if xs <= 0 or bs <= 0:
        return None
    return bs / (slowdown * xs)


def predict_log(doc: dict | None, c: Corpus) -> dict[str, np.ndarray]:
    """Every step of ``c`` priced with the priors (``doc``), or with the base roofline (None)."""
    x, _b, _y, other, fixed = c.matrices(list(KINDS), c.rows)
    if doc is None:
        return _predict(np.ones(len(KINDS)), dict.fromkeys(CONSTANTS, 0.0), c.stages, x, other, c.overlapped, fixed)
    return _predict(_slowdowns(doc), doc["constants_s"], c.stages, x, other, c.overlapped, fixed)


def score(doc: dict, c: Corpus) -> dict:
    """Zero-shot: the priors' prediction of every step of ``c`` against the truth, per stage and
    for the step: mean predicted / actual seconds, their ratio, the median |pred/actual - 1| and
    the accuracy (100% - MAPE); beside it the same for the base roofline (no priors)."""
    preds, naive = predict_log(doc, c), predict_log(None, c)
    out = {}
    for k in c.stages + ["step"]:
        a = np.array([r.actual[k] for r in c.rows])
        entry = {"mean_actual_s": float(a.mean())}
        for label, pr in (("", preds), ("roofline_", naive)):
            p = pr[k]
            entry[f"{label}mean_predicted_s"] = float(p.mean())
            entry[f"{label}ratio"] = float(p.mean() / a.mean())
            entry[f"{label}median_error"] = float(np.median(np.abs(p / a - 1.0)))
            entry[f"{label}accuracy"] = float(100.0 - 100.0 * np.mean(np.abs(p - a) / a))
        out[k] = entry
    return out


def leave_one_out(corpus: list[Corpus]) -> dict:
    """Each log scored by priors fitted on the others: per log ``score``, and the corpus summary
    (median over logs of the step's and generation's median |pred/actual - 1|, the worst ratio)."""
    per_log = {}
    for c in corpus:
        others = [o for o in corpus if o is not c]
        per_log[c.name] = score(fit_priors(others), c)
    return {"per_log": per_log, "summary": summarise(per_log)}


def summarise(per_log: dict) -> dict:
    def med(key, field):
        vals = [v[key][field] for v in per_log.values() if key in v]
        return float(np.median(vals)) if vals else None

    ratios = [v["step"]["ratio"] for v in per_log.values()]
    worst = max(ratios, key=lambda r: abs(math.log(r)))
    return {"logs": len(per_log), "step_median_error": med("step", "median_error"),
            "gen_median_error": med("gen", "median_error"),
            "roofline_step_median_error": med("step", "roofline_median_error"),
            "roofline_gen_median_error": med("gen", "roofline_median_error"),
            "worst_step_ratio": float(worst),
            "goals": {"step_within_25pct": med("step", "median_error") <= 0.25,
                      "no_log_off_2x": all(0.5 <= r <= 2.0 for r in ratios),
                      "gen_within_30pct": (med("gen", "median_error") or 1.0) <= 0.30}}


def build_document(corpus: list[Corpus], folder: str, with_loo: bool = True, groups: dict | None = None) -> dict:
    """The priors file: the fit on the whole corpus, its leave-one-log-out evaluation and the
    provenance (logs and their hashes, the commit, the date); ``groups``: the group-held-out
    evaluation (``folds.evaluate``) to store, its leave-one-log-out grouping as ``leave_one_out``."""
    from .. import __version__
    from ..provenance import git_commit

    doc = {"format": "polytrace.priors", "version": 1, **fit_priors(corpus)}
    if groups is not None:  # ``folds.evaluate(corpus)``: leave-one-log-out is its "log" grouping
        per_log = {k: {s: v for s, v in e.items() if s not in ("baselines", "group")}
                   for k, e in groups["groupings"]["log"]["per_log"].items()}
        doc["leave_one_out"] = {"per_log": per_log, "summary": summarise(per_log)}
        doc["groups"] = groups
    elif with_loo:
        doc["leave_one_out"] = leave_one_out(corpus)
    doc["provenance"] = {
        "logs": [{"name": c.name, "sha256": c.sha256, "steps": len(c.rows), "gpu": c.gpu, "gpu_source": c.gpu_source,
                  "roofline_margin": round(roofline_margin(c), 3)}
                 for c in corpus],
        "folder": str(folder), "commit": git_commit(), "polytrace": __version__,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "script": "scripts/fit_priors.py",
        "method": "polytrace/calibrate/priors.py: slowdowns per kind of work and engine setting, constants per "
                  "kind of stage; log relative errors, soft-L1, each series of logs weighing as one log; slowdowns "
                  "bounded per kernel family by the peak roofline (priced_share)",
    }
    return doc


def markdown_table(doc: dict) -> str:
    """The leave-one-log-out table (docs/step-model.md): per log, zero-shot step and generation
    ratios and median errors, the base roofline's beside."""
    loo = doc["leave_one_out"]
    lines = ["| log | step pred/actual | step median err | roofline step pred/actual | gen pred/actual | "
             "gen median err | roofline gen pred/actual |", "|---|---|---|---|---|---|---|"]
    for name, v in loo["per_log"].items():
        st, gen = v["step"], v.get("gen")
        g = (f"{gen['ratio']:.2f}x | {100 * gen['median_error']:.0f}% | {gen['roofline_ratio']:.2f}x" if gen
             else "- | - | -")
        lines.append(f"| {name} | {st['ratio']:.2f}x | {100 * st['median_error']:.0f}% | {st['roofline_ratio']:.2f}x "
                     f"| {g} |")
    s = loo["summary"]
    lines.append(f"| **median over {s['logs']} logs** | | **{100 * s['step_median_error']:.0f}%** "
                 f"({100 * s['roofline_step_median_error']:.0f}% roofline) | | | "
                 f"**{100 * s['gen_median_error']:.0f}%** ({100 * s['roofline_gen_median_error']:.0f}% roofline) | |")
    return "\n".join(lines) + "\n"
