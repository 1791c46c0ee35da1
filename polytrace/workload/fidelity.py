"""How close a profile's sampled batches come to a recorded trace.

For each trace step, the profile samples a batch of the same size (same step, so drift applies)
several times over (``replicas`` seeds), and the sampled responses are compared with the real
ones: per step, and pooled over all steps. Statistics:

- KS statistic and Wasserstein-1 distance of response lengths (W1 in tokens and relative to the
  real mean),
- relative error of p50 / p90 / p99 / max (max: the median over replicas of each replica's max,
  so it compares like-sized batches),
- within-group max/mean ratio: KS between the real and sampled distributions of the ratio and
  the relative error of its median,
- share of responses at the cap, real vs sampled.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .describe import partial_note
from .profiles.profile import Profile
from .trace.batch import Batch
from .trace.model import Trace

GOAL_KS = 0.05
GOAL_P99_REL_ERR = 0.10


def group_max_mean_ratio(batch: Batch) -> np.ndarray:
    """Per prompt group: longest response / mean response (1.0 = all alike)."""
    if len(batch) == 0:
        return np.zeros(0)
    g = batch.group_ids
    sizes = np.bincount(g)
    sums = np.bincount(g, weights=batch.response_lens)
    maxes = np.zeros(sizes.size)
    np.maximum.at(maxes, g, batch.response_lens)
    keep = sizes > 0
    return maxes[keep] / (sums[keep] / sizes[keep])


def compare(real: list[Batch], sampled: list[list[Batch]]) -> dict:
    """``real[i]`` against ``sampled[i]`` (replicas of the same step)."""
    r = np.concatenate([b.response_lens for b in real]).astype(np.float64)
    s = np.concatenate([b.response_lens for reps in sampled for b in reps]).astype(np.float64)
    out = {
        "n_real": int(r.size), "n_sampled": int(s.size),
        "ks": float(stats.ks_2samp(r, s).statistic) if r.size and s.size else float("nan"),
        "wasserstein": float(stats.wasserstein_distance(r, s)) if r.size and s.size else float("nan"),
    }
    out["wasserstein_rel"] = out["wasserstein"] / r.mean() if r.size else float("nan")
    for q in (50, 90, 99):
        rq, sq = np.percentile(r, q), np.percentile(s, q)
        out[f"p{q}_real"], out[f"p{q}_sampled"] = float(rq), float(sq)
        out[f"p{q}_rel_err"] = float(abs(sq - rq) / rq) if rq else float("nan")
    real_max = max(float(b.response_lens.max()) for b in real)
    rep_max = [max(float(b.response_lens.max()) for b in reps_of_rep) for reps_of_rep in _by_replica(sampled)]
    out["max_real"], out["max_sampled"] = real_max, float(np.median(rep_max))
    out["max_rel_err"] = abs(out["max_sampled"] - real_max) / real_max
    rr = np.concatenate([group_max_mean_ratio(b) for b in real])
    sr = np.concatenate([group_max_mean_ratio(b) for reps in sampled for b in reps])
    out["group_ratio_ks"] = float(stats.ks_2samp(rr, sr).statistic) if rr.size and sr.size else float("nan")
    out["group_ratio_median_real"] = float(np.median(rr)) if rr.size else float("nan")
    out["group_ratio_median_sampled"] = float(np.median(sr)) if sr.size else float("nan")
    out["group_ratio_median_rel_err"] = (abs(out["group_ratio_median_sampled"] - out["group_ratio_median_real"])
                                         / out["group_ratio_median_real"]) if rr.size else float("nan")
    out["cap_share_real"] = float(np.mean(np.concatenate([b.capped for b in real])))
    out["cap_share_sampled"] = float(np.mean(np.concatenate([b.capped for reps in sampled for b in reps])))
    return out


def _by_replica(sampled: list[list[Batch]]) -> list[list[Batch]]:
    n_rep = min(len(reps) for reps in sampled)
    return [[reps[i] for reps in sampled] for i in range(n_rep)]


def fidelity(profile: Profile, trace: Trace, replicas: int = 8, seed: int = 0, include_partial: bool = False) -> dict:
    """Per-step and pooled statistics of ``profile`` against ``trace``, with the goals checked.
    The trace's partial steps (``Trace.partial_flags``) are named in ``partial_steps`` and left out
    of the comparison unless ``include_partial``: a fragment of a step sampled at full group size
    would compare unlike batches."""
    flags = trace.partial_flags()
    real = [b for b, is_partial in zip(trace.batches(), flags) if include_partial or not is_partial]
    sampled = []
    for b in real:
        prompts = b.n_groups
        sampled.append([profile.sample(step=b.step, seed=seed + i, prompts=prompts) for i in range(replicas)])
    per_step = []
    for b, reps in zip(real, sampled):
        row = compare([b], [reps])
        row["step"] = b.step
        per_step.append(row)
    pooled = compare(real, sampled)
    pooled["goal_ks"] = GOAL_KS
    pooled["goal_p99_rel_err"] = GOAL_P99_REL_ERR
    pooled["meets_goals"] = bool(pooled["ks"] <= GOAL_KS and pooled["p99_rel_err"] <= GOAL_P99_REL_ERR)
    partial = [(s.step, s.n_responses) for s, is_partial in zip(trace.steps, flags) if is_partial]
    return {"profile": profile.name, "trace": trace.source or trace.name, "replicas": replicas, "seed": seed,
            "partial_steps": [s for s, _ in partial], "partial_step_responses": [n for _, n in partial],
            "typical_step_responses": trace.typical_step_size(), "include_partial": bool(include_partial),
            "pooled": pooled, "per_step": per_step}


_TABLE_KEYS = ["ks", "wasserstein_rel", "p50_rel_err", "p90_rel_err", "p99_rel_err", "max_rel_err",
               "group_ratio_ks", "group_ratio_median_rel_err", "cap_share_real", "cap_share_sampled"]


def format_fidelity(result: dict) -> str:
    """The text ``polytrace fidelity`` prints: one row per step and the pooled row, the partial
    steps left out, and the verdict against the goals."""
    from tabulate import tabulate

    rows = [[r["step"]] + [r[k] for k in _TABLE_KEYS] for r in result["per_step"]]
    rows.append(["pooled"] + [result["pooled"][k] for k in _TABLE_KEYS])
    lines = [f"profile {result['profile']} vs trace {result['trace']} ({result['replicas']} sampled batches per "
             f"step)"]
    note = partial_note(result["partial_steps"], result["partial_step_responses"], result["typical_step_responses"],
                        result["include_partial"])
    if note:
        lines.append(note)
    lines.append(tabulate(rows, headers=["step", "KS", "W1/mean", "p50 err", "p90 err", "p99 err", "max err",
                                         "grp KS", "grp med err", "cap real", "cap sampled"], floatfmt=".3f"))
    pooled = result["pooled"]
    verdict = "meets" if pooled["meets_goals"] else "MISSES"
    lines.append(f"\npooled: KS {pooled['ks']:.3f} (goal <= {pooled['goal_ks']}), p99 error "
                 f"{pooled['p99_rel_err']:.1%} (goal <= {pooled['goal_p99_rel_err']:.0%}): {verdict} the goals")
    return "\n".join(lines)
