"""``polytrace pack-compare``: our packing planner side by side with verl's on sampled batches.

For each sampled step of a profile, both planners split the batch across ``ranks`` data-parallel
ranks and then into micro-batches of at most ``max_tokens`` tokens:

- ours: ``polytrace_kernels.packing.plan_microbatches`` (KK + local search; the token budget is a hard
  bound; every rank gets the same number of micro-batches).
- verl (when installed): what verl 0.9's trainer does: ``get_seqlen_balanced_partitions`` over
  ``calculate_workload`` with ``equal_size=True`` across ranks (``RayPPOTrainer._balance_batch``),
  then ``rearrange_micro_batches`` on every rank, run twice to emulate ``same_micro_num_in_dp``
  (the all-reduce MAX of micro-batch counts) without torch.distributed. verl's KK does not enforce
  the token budget, so its micro-batches may exceed it: counted in ``over_budget``.

Both are scored with the same cost model: imbalance (max rank cost / mean), the gap to the lower
bound max(largest sequence cost, total / ranks), the number of micro-batches per rank, lock-step
imbalance (sum over micro-batch steps of the slowest rank / ideal) and planning time (wall clock
on this machine's CPU, one core; verl's includes slicing a minimal TensorDict per micro-batch).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import PolytraceError

VERL_SKIP = None  # filled lazily: reason verl is unavailable, or "" when usable


@dataclass
class Row:
    profile: str
    step: int
    method: str
    n_sequences: int
    imbalance: float | None = None
    gap: float | None = None
    n_microbatches: int | None = None
    lockstep_imbalance: float | None = None
    over_budget: int | None = None
    max_microbatch_tokens: int | None = None
    plan_ms: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def verl_unavailable() -> str | None:
    """None when verl's planner can be imported, else the reason."""
    try:
        import tensordict  # noqa: F401
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions  # noqa: F401
    except Exception as exc:  # verl's import chain pulls ray, transformers, ...: any failure = skip
        return f"verl not importable ({type(exc).__name__}: {exc}); pip install 'polytrace[peers]'"
    return None


def _lockstep(costs_per_rank: list[list[float]], mean: float) -> float:
    m = max((len(c) for c in costs_per_rank), default=0)
    if m == 0 or mean <= 0:
        return 1.0
    padded = np.zeros((len(costs_per_rank), m))
    for r, c in enumerate(costs_per_rank):
        padded[r, :len(c)] = c
    return float(padded.max(axis=0).sum() / mean)


def plan_ours(seqlens: np.ndarray, ranks: int, max_tokens: int, cost: str, equal_size: bool) -> tuple[dict, float]:
    from polytrace_kernels.packing import plan_microbatches

    t0 = time.perf_counter()
    plan = plan_microbatches(seqlens, ranks, max_tokens, cost=cost, equal_size=equal_size)
    elapsed = time.perf_counter() - t0
    return {"imbalance": plan.imbalance, "gap": plan.gap, "n_microbatches": plan.n_microbatches,
            "lockstep_imbalance": plan.lockstep_imbalance, "over_budget": 0,
            "max_microbatch_tokens": plan.max_microbatch_tokens}, elapsed


def plan_verl(seqlens: np.ndarray, ranks: int, max_tokens: int, cost: str) -> tuple[dict, float]:
    import torch
    from tensordict import TensorDict
    from verl.utils.seqlen_balancing import (
        calculate_workload,
        get_seqlen_balanced_partitions,
        rearrange_micro_batches,
    )

    from polytrace_kernels.packing import plan_stats, sequence_costs

    lengths = torch.as_tensor(seqlens, dtype=torch.int64)
    n = lengths.numel()
    if n < ranks:
        raise ValueError(f"verl needs at least as many sequences as ranks ({n} < {ranks})")
    # one nested (jagged) int8 input_ids per rank, built outside the timed region: verl reads the
    # lengths from its offsets, so slicing it stays cheap and the timing is about planning
    t0 = time.perf_counter()
    workloads = calculate_workload(lengths).tolist()
    # verl balances ranks with equal_size=True, which needs n % ranks == 0 (its dispatch chunks evenly)
    rank_parts = get_seqlen_balanced_partitions(workloads, ranks, equal_size=(n % ranks == 0))
    t_rank = time.perf_counter() - t0
    tds = []
    for part in rank_parts:
        sub = lengths[part]
        off = torch.zeros(sub.numel() + 1, dtype=torch.int64)
        off[1:] = torch.cumsum(sub, 0)
        ids = torch.nested.nested_tensor_from_jagged(torch.zeros(int(off[-1]), dtype=torch.int8), off)
        tds.append(TensorDict({"input_ids": ids}, batch_size=[sub.numel()]))
    t0 = time.perf_counter()
    first = [rearrange_micro_batches(td, max_token_len=max_tokens)[1] for td in tds]
    m = max(len(idx) for idx in first)
    per_rank = [rearrange_micro_batches(td, max_token_len=max_tokens, min_num_micro_batch=m)[1] for td in tds]
    elapsed = t_rank + time.perf_counter() - t0
    costs = sequence_costs(seqlens, cost)
    report = plan_stats(seqlens, rank_parts, cost)
    mb_costs, over, biggest = [], 0, 0
    for part, idx in zip(rank_parts, per_rank):
        part = np.asarray(part, dtype=np.int64)
        rank_costs = []
        for mb in idx:
            seqs = part[np.asarray(mb, dtype=np.int64)]
            tok = int(seqlens[seqs].sum())
            over += tok > max_tokens
            biggest = max(biggest, tok)
            rank_costs.append(float(costs[seqs].sum()))
        mb_costs.append(rank_costs)
    return {"imbalance": report.imbalance, "gap": report.gap, "n_microbatches": m,
            "lockstep_imbalance": _lockstep(mb_costs, float(costs.sum()) / ranks), "over_budget": int(over),
            "max_microbatch_tokens": biggest}, elapsed


def default_max_tokens(profile) -> int:
    """max prompt + max response of the profile, rounded up to 1024: the smallest budget verl
    accepts (``max_token_len >= max sequence length``)."""
    cfg = profile.config
    return int(math.ceil((cfg.max_prompt_len + cfg.max_response_len) / 1024) * 1024)


def compare(profile: str, *, steps=(0,), seed: int = 0, ranks: int = 8, max_tokens: int | None = None,
            cost: str = "attention", equal_size: bool = True, peers: bool = True) -> dict:
    """Plan every sampled step with ours and (when available) verl's; rows plus a summary."""
    from .profiles import get_profile

    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise PolytraceError(f"--gpus must be an integer >= 1, got {ranks!r}")
    if cost not in ("tokens", "attention"):
        raise PolytraceError(f"--cost must be 'tokens' or 'attention', got {cost!r}")
    steps = list(steps)
    if not steps or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps):
        raise PolytraceError(f"--steps must be non-negative integers, got {steps!r}")
    prof = get_profile(profile)
    budget = default_max_tokens(prof) if max_tokens is None else max_tokens
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise PolytraceError(f"--micro-batch-tokens must be a positive integer, got {max_tokens!r}")
    # a peer that cannot run at all is said once for the command (``peers_skipped``), not in a row
    # per step; with --no-peers it is not asked for, so nothing is said
    verl_reason = verl_unavailable() if peers else None
    skipped = {"verl": verl_reason} if verl_reason else {}
    rows: list[Row] = []
    for step in steps:
        seqlens = np.asarray(prof.sample(step=step, seed=seed).seq_lens, dtype=np.int64)
        longest = int(seqlens.max()) if seqlens.size else 0
        if ranks > len(seqlens):  # as estimate refuses: a rank without a sequence (65,536 of them ran 119 s)
            raise PolytraceError(f"--gpus {ranks}: {ranks:,} data-parallel ranks for the {len(seqlens):,} sequences "
                                 f"of {profile} step {step}: ranks without a sequence do no work; use --gpus "
                                 f"{len(seqlens):,} or fewer")
        if longest > budget:
            raise PolytraceError(f"--micro-batch-tokens {budget} is smaller than the longest sequence of "
                                 f"{profile} step {step} ({longest} tokens)")
        stats, elapsed = plan_ours(seqlens, ranks, budget, cost, equal_size)
        rows.append(Row(profile, step, "ours", len(seqlens), plan_ms=elapsed * 1e3, **stats))
        if verl_reason or not peers:
            continue
        try:
            stats, elapsed = plan_verl(seqlens, ranks, budget, cost)
        except Exception as exc:  # a peer failing on a batch is reported, not fatal
            rows.append(Row(profile, step, "verl", len(seqlens), skipped=f"{type(exc).__name__}: {exc}"))
            continue
        rows.append(Row(profile, step, "verl", len(seqlens), plan_ms=elapsed * 1e3, **stats))
    return {"profile": profile, "seed": seed, "steps": steps, "ranks": ranks, "max_tokens": budget,
            "cost": cost, "equal_size": equal_size, "measured_on": "cpu (planning time, wall clock)",
            "peers_skipped": skipped, "rows": [r.as_dict() for r in rows], "summary": summarize(rows)}


def summarize(rows: list[Row]) -> dict:
    """Per method: mean/max imbalance and gap, mean micro-batches and time; and ours vs verl."""
    out: dict = {}
    for method in sorted({r.method for r in rows}):
        done = [r for r in rows if r.method == method and r.skipped is None]
        if not done:
            out[method] = {"skipped": next(r.skipped for r in rows if r.method == method)}
            continue
        out[method] = {
            "batches": len(done),
            "mean_imbalance": float(np.mean([r.imbalance for r in done])),
            "max_imbalance": float(np.max([r.imbalance for r in done])),
            "mean_gap": float(np.mean([r.gap for r in done])),
            "mean_microbatches": float(np.mean([r.n_microbatches for r in done])),
            "mean_lockstep_imbalance": float(np.mean([r.lockstep_imbalance for r in done])),
            "over_budget": int(sum(r.over_budget for r in done)),
            "mean_plan_ms": float(np.mean([r.plan_ms for r in done])),
        }
    ours = {r.step: r for r in rows if r.method == "ours" and r.skipped is None}
    verl = {r.step: r for r in rows if r.method == "verl" and r.skipped is None}
    common = sorted(set(ours) & set(verl))
    if common:
        never_worse = all(ours[s].imbalance <= verl[s].imbalance for s in common)
        better = bool(np.mean([ours[s].imbalance for s in common]) < np.mean([verl[s].imbalance for s in common]))
        # where verl already sits on the lower bound nothing can beat it: equal is the goal there
        verl_at_bound = all(verl[s].gap <= 1e-9 for s in common)
        out["ours_vs_verl"] = {
            "batches": len(common), "never_worse": never_worse, "better_on_average": better,
            "verl_at_lower_bound": verl_at_bound, "goal_met": never_worse and (better or verl_at_bound),
        }
    return out
