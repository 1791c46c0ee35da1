"""What a training log's step metrics determine about its run, where its configuration leaves a
setting unstated (``logconfig.config_from_log`` reports each inferred value with its source):

- responses per prompt (n): ``perf/total_num_tokens = prompts x n x (prompt mean + response mean)``;
- prompts per step, from the same identity when n is known;
- GPU count: ``perf/total_num_tokens / (perf/throughput x perf/time_per_step)`` (throughput is
  tokens per second per GPU), or ``perf/total_num_tokens / global_seqlen/mean`` (tokens per
  data-parallel rank);
- the response and prompt caps: ``response_length/max`` on steps whose ``clip_ratio`` is above 0
  (those steps hold responses cut at the cap).
"""

from __future__ import annotations

import math

import numpy as np

from ..logs import TrainingLog

# Above this a count is a typo, not a cluster or a batch (the CLI's bound for the same flags).
MAX_COUNT = 1_000_000
# Longest prompt or response a configuration may state: 2^20 tokens (today's longest contexts are
# 128k-1M); past it the rollout simulation would allocate per token position for nothing.
MAX_TOKENS = 1 << 20
# An inferred count must land within 3% of a whole number to be believed (the metrics are
# rounded to 3 decimals and means are over the whole batch).
_INTEGER_TOLERANCE = 0.03
_INFER_STEPS = 20
_THROUGHPUT_KEYS = ("perf/throughput", "perf/tokens_per_sec_per_gpu", "Tokens/Sec/GPU")


def _finite_positive(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def _per_step(log: TrainingLog, fn) -> list[float]:
    out = []
    for s in log.steps[:_INFER_STEPS * 3]:
        try:
            v = fn(s.metrics)
        except (KeyError, ZeroDivisionError, TypeError):
            continue
        if v is not None and math.isfinite(v) and v > 0:
            out.append(v)
        if len(out) >= _INFER_STEPS:
            break
    return out


def _whole(values: list[float], hi: int) -> int | None:
    """The whole number the estimates agree on, or None when they do not land on one."""
    if not values:
        return None
    med = float(np.median(values))
    k = round(med)
    if k < 1 or k > hi or abs(med - k) > _INTEGER_TOLERANCE * k:
        return None
    return int(k)


def _tokens_per_sequence(m: dict) -> float:
    pm, rm = m["prompt_length/mean"], m["response_length/mean"]
    if not (_finite_positive(pm) and _finite_positive(rm)):
        raise KeyError
    return pm + rm


def infer_n(log: TrainingLog, prompts: int) -> int | None:
    return _whole(_per_step(log, lambda m: m["perf/total_num_tokens"] / (prompts * _tokens_per_sequence(m))),
                  MAX_COUNT)


def infer_prompts(log: TrainingLog, n: int) -> int | None:
    return _whole(_per_step(log, lambda m: m["perf/total_num_tokens"] / (n * _tokens_per_sequence(m))), MAX_COUNT)


def infer_gpus(log: TrainingLog) -> tuple[int, str] | None:
    def by_throughput(m):
        tput = next((m[k] for k in _THROUGHPUT_KEYS if k in m), None)
        t = m.get("perf/time_per_step", m.get("timing_s/step"))
        if not (_finite_positive(tput) and _finite_positive(t)):
            raise KeyError
        return m["perf/total_num_tokens"] / (tput * t)

    k = _whole(_per_step(log, by_throughput), MAX_COUNT)
    if k is not None:
        return k, "perf/total_num_tokens / (perf/throughput x step time)"
    k = _whole(_per_step(log, lambda m: m["perf/total_num_tokens"] / m["global_seqlen/mean"]), MAX_COUNT)
    if k is not None:
        return k, "perf/total_num_tokens / global_seqlen/mean (tokens per data-parallel rank)"
    return None


def infer_cap(log: TrainingLog, kind: str) -> int | None:
    """The length cap, from the maximum on steps where some ``kind`` lengths were clipped."""
    maxima = []
    for s in log.steps:
        clip, mx = s.metrics.get(f"{kind}_length/clip_ratio"), s.metrics.get(f"{kind}_length/max")
        if _finite_positive(clip) and _finite_positive(mx) and mx <= MAX_TOKENS:
            maxima.append(mx)
    if not maxima:
        return None
    vals, counts = np.unique(np.round(maxima), return_counts=True)
    return int(vals[np.argmax(counts)])


def observed_max(log: TrainingLog, key: str) -> int | None:
    vals = [s.metrics[key] for s in log.steps if _finite_positive(s.metrics.get(key))
            and s.metrics[key] <= MAX_TOKENS]
    return int(max(vals)) if vals else None
