"""Fitting a ``copula`` profile to a trace (``polytrace fit``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import PolytraceError
from ..trace.fields import MAX_TOKENS
from ..trace.model import Trace, describe_cap
from .drift import DriftCurve, get_drift
from .profile import BatchConfig, Profile
from .quantiles import QuantileTable, normal_scores

TURN_DECILES = 10


@dataclass(frozen=True)
class StatedBatch:
    """The batch settings a fit was told (``polytrace fit --prompts-per-step/--n/--max-prompt-len/
    --max-response-len``); None: read off the trace (see ``fit_profile``)."""

    prompts_per_step: int | None = None
    n: int | None = None
    max_prompt_len: int | None = None
    max_response_len: int | None = None


def fit_profile(trace: Trace, name: str | None = None, description: str = "", *,
                batch: StatedBatch = StatedBatch(), drift: DriftCurve | None = None,
                source: str | None = None) -> Profile:
    """Fit response and prompt quantile tables, the within-group correlation and, for multi-turn
    traces, the turn model. Unstated batch settings are read off the trace: prompts per step and
    n are the most common values, the caps the trace's cap and the longest prompt rounded up to a
    power of two."""
    prompts_per_step, n = batch.prompts_per_step, batch.n
    max_prompt_len, max_response_len = batch.max_prompt_len, batch.max_response_len
    pooled = trace.pooled()
    where = trace.source or trace.name or "trace"
    if len(pooled) == 0:
        raise PolytraceError(f"{where}: trace is empty")
    if trace.is_multiturn and (pooled.turns is None or len(pooled.turns) == 0):
        raise PolytraceError(f"{where}: a multi-turn trace without per-turn records: no turn model to fit")
    cap = int(max_response_len or trace.max_response_len)
    longest = int(pooled.response_lens.max())
    if cap < longest:
        raise PolytraceError(f"{where}: max_response_len={cap} is below the longest response ({longest})")
    cap_source = "stated" if max_response_len else trace.cap_source
    resp = pooled.response_lens  # none above the cap (refused above)
    resp_fit = np.where(pooled.capped, cap, resp)
    group_sizes = np.bincount(pooled.group_ids)
    n_mode = int(np.bincount(group_sizes).argmax())
    groups_per_step = [len(s.groups) for s in trace.steps]
    prompts_mode = int(np.bincount(groups_per_step).argmax())
    longest_prompt = int(pooled.prompt_lens.max())
    max_prompt = int(max_prompt_len or trace.max_prompt_len
                     or min(1 << int(np.ceil(np.log2(longest_prompt))), MAX_TOKENS))
    config = BatchConfig(prompts_per_step=int(prompts_per_step or prompts_mode), n=int(n or n_mode),
                         max_prompt_len=max(max_prompt, longest_prompt), max_response_len=cap)

    response = QuantileTable.fit(resp_fit, cap=cap)
    group_prompt = np.asarray([g.prompt_len for s in trace.steps for g in s.groups], dtype=np.float64)
    prompt = QuantileTable.fit(group_prompt)
    rho_icc, prompt_corr = _fit_group_structure(resp_fit, pooled.group_ids, group_prompt)
    rho = _match_group_spread(response, resp_fit, pooled.group_ids, config.n, rho_icc)
    params = {"response": response.to_json(), "prompt": prompt.to_json(), "rho": round(rho, 5),
              "prompt_corr": round(prompt_corr, 5)}
    stats = {"responses": int(len(pooled)), "groups": int(group_sizes.size), "steps": len(trace.steps),
             "cap_source": cap_source, "rho_icc": round(rho_icc, 5),
             "p_cap": round(float(np.mean(resp_fit >= cap)), 6),
             "mean_response": round(float(resp.mean()), 2)}
    if trace.is_multiturn:
        params["multiturn"] = _fit_turns(trace, pooled, resp_fit)
    return Profile(name=name or trace.name or "fitted", description=description or
                   f"fitted from {trace.source or trace.name}", kind=trace.kind, model="copula",
                   config=config, params=params, drift=drift, source=source or trace.source, fit_stats=stats)


def _fit_group_structure(resp, group_ids, group_prompt) -> tuple[float, float]:
    """Intra-class correlation of the responses' normal scores (one-way ANOVA estimator) and the
    correlation of prompt length with the group factor."""
    z = normal_scores(resp)
    sizes = np.bincount(group_ids)
    keep = sizes[group_ids] >= 2
    if keep.sum() < 4:
        rho = 0.0
    else:
        gid = np.unique(group_ids[keep], return_inverse=True)[1]
        zk = z[keep]
        k = np.bincount(gid)
        means = np.bincount(gid, weights=zk) / k
        ss_within = float(((zk - means[gid]) ** 2).sum())
        ss_between = float((k * (means - zk.mean()) ** 2).sum())
        g, nn = k.size, zk.size
        ms_w = ss_within / max(nn - g, 1)
        ms_b = ss_between / max(g - 1, 1)
        k0 = (nn - (k ** 2).sum() / nn) / max(g - 1, 1)
        var_b = max((ms_b - ms_w) / k0, 0.0)
        # every response of every group alike (no variance at all): no evidence of correlation
        rho = float(np.clip(var_b / (var_b + ms_w), 0.0, 0.98)) if var_b + ms_w > 0 else 0.0
    group_mean = np.bincount(group_ids, weights=z) / np.maximum(sizes, 1)
    if group_prompt.size < 3 or np.std(group_prompt) == 0 or rho <= 0:
        return rho, 0.0
    zp = normal_scores(group_prompt)
    gm = group_mean[: zp.size]
    if np.std(zp) == 0 or np.std(gm) == 0:  # a constant has no correlation (corrcoef would give NaN)
        return rho, 0.0
    r_obs = float(np.corrcoef(zp, gm)[0, 1])
    n_avg = float(np.mean(sizes))
    # corr(prompt, group mean) = r * sqrt(rho) / sqrt(rho + (1 - rho) / n): undo the attenuation.
    r = r_obs * np.sqrt(rho + (1 - rho) / n_avg) / np.sqrt(rho)
    return rho, float(np.clip(r, -0.95, 0.95))


def _median_group_ratio(lens: np.ndarray, group_ids: np.ndarray) -> float:
    sizes = np.bincount(group_ids)
    maxes = np.zeros(sizes.size)
    np.maximum.at(maxes, group_ids, lens)
    means = np.bincount(group_ids, weights=lens) / np.maximum(sizes, 1)
    keep = sizes >= 2
    return float(np.median(maxes[keep] / means[keep])) if keep.any() else 1.0


def _match_group_spread(table: QuantileTable, resp, group_ids, n: int, rho_start: float) -> float:
    """Refine the copula correlation so the sampled median within-group max/mean ratio matches the
    trace's (the spread GRPO's advantage and the packer see). The ratio falls monotonically as rho
    grows, so a bisection on a fixed set of normal draws (2048 groups) finds it; the intra-class
    correlation of normal scores is the starting point and the answer when the trace has no groups
    of two or more."""
    target = _median_group_ratio(np.asarray(resp, dtype=np.float64), group_ids)
    if n < 2 or not np.isfinite(target) or target <= 1.0:
        return rho_start
    rng = np.random.Generator(np.random.PCG64(12345))
    g = rng.standard_normal((2048, 1))
    e = rng.standard_normal((2048, n))
    ids = np.repeat(np.arange(2048), n)

    def ratio(rho: float) -> float:
        z = (np.sqrt(rho) * g + np.sqrt(1.0 - rho) * e).ravel()
        return _median_group_ratio(np.maximum(np.rint(table.sample(z)), 1.0), ids)

    lo, hi = 0.0, 0.98
    if ratio(lo) <= target:
        return lo
    if ratio(hi) >= target:
        return hi
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if ratio(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _fit_turns(trace: Trace, pooled, resp_fit) -> dict:
    from scipy.special import ndtri

    t = pooled.turns
    n_seq = len(pooled)
    turns_per_seq = t.turns_per_sequence(n_seq)
    t_max = int(turns_per_seq.max())
    z = normal_scores(resp_fit)
    decile_z = ndtri(np.arange(1, TURN_DECILES) / TURN_DECILES)
    decile = np.searchsorted(decile_z, z, side="right")
    pmf = np.zeros((TURN_DECILES, t_max))
    np.add.at(pmf, (decile, np.clip(turns_per_seq, 1, t_max) - 1), 1.0)
    pmf += 1e-3  # every turn count stays possible in every decile
    all_turns = [tn for s in trace.steps for g in s.groups for r in g.responses for tn in (r.turns or ())]
    per_turn_calls = np.asarray([len(tn.tool_calls) for tn in all_turns if tn.tool_calls], dtype=np.int64)
    latencies = np.asarray([c.latency_s for tn in all_turns for c in tn.tool_calls], dtype=np.float64)
    call_tokens = np.asarray([c.tokens for tn in all_turns for c in tn.tool_calls], dtype=np.float64)
    calls = [1.0]
    if per_turn_calls.size:
        hist = np.bincount(per_turn_calls)[1:].astype(np.float64)
        calls = [round(float(x), 6) for x in hist / hist.sum()]
    return {
        "turns_pmf_by_decile": np.round(pmf / pmf.sum(axis=1, keepdims=True), 6).tolist(),
        "decile_z": [round(float(x), 6) for x in decile_z],
        "completion_tokens": QuantileTable.fit(t.completion_tokens).to_json(),
        # per call: a turn with c calls draws c times the per-call figure
        "tool_tokens": QuantileTable.fit(call_tokens if call_tokens.size else [0.0]).to_json(),
        "tool_latency_s": QuantileTable.fit(latencies if latencies.size else [0.0]).to_json(),
        "calls_per_tool_turn_pmf": calls,
    }


@dataclass
class FitResult:
    profile: Profile
    path: Path

    def summary(self) -> str:
        """What ``polytrace fit`` prints: the profile written and where its length cap came from."""
        p, c = self.profile, self.profile.config
        return (f"wrote {self.path}: profile {p.name!r} ({p.kind}), {c.prompts_per_step} prompts x {c.n}, "
                f"rho {p.params['rho']:.3f}, {p.fit_stats['responses']} responses over {p.fit_stats['steps']} "
                f"steps\n{describe_cap(c.max_response_len, p.fit_stats['cap_source'])}")


def fit_file(trace_path, output, *, name: str | None = None, description: str = "",
             batch: StatedBatch = StatedBatch(), drift: str | DriftCurve | None = None) -> FitResult:
    """``polytrace fit``: read a trace, fit a profile and write it to ``output``, atomically and only
    once the written text has been read back into the same profile (a file ``describe`` or
    ``get_profile`` would refuse is never written)."""
    from ...atomic_write import atomic_write_text
    from ..trace.readers import load_trace

    out = Path(output)
    trace = load_trace(trace_path, max_response_len=batch.max_response_len)
    profile = fit_profile(trace, name=name or out.stem, description=description, batch=batch,
                          drift=get_drift(drift) if isinstance(drift, str) else drift)
    text = profile.dumps()
    try:
        again = Profile.loads(text, where=str(out))
    except PolytraceError as exc:
        raise PolytraceError(f"{out}: not written: the fitted profile does not read back ({exc})") from None
    if again.dumps() != text:
        raise PolytraceError(f"{out}: not written: the fitted profile changes when read back")
    atomic_write_text(out, text)
    return FitResult(profile, out)
