"""Benchmark shapes drawn from PolyTrace profiles.

The data flow is one way: a profile samples a step's batch, the packing planner
(``polytrace_kernels.packing.plan_microbatches``) splits it across data-parallel ranks into micro-batches
under a token budget, and the suites time kernels on those micro-batches. Each shape carries its
``weight``: the share of the sampled step's tokens it stands for, which the regression gate uses
to weight its geometric mean by how often the shape occurs in real training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Per-GPU micro-batch token budgets that trainers use for the log-prob and update passes
# (verl's ppo_max_token_len_per_gpu is typically 16k-32k for 7B-32B models).
GPU_MAX_TOKENS = 16384
CPU_MAX_TOTAL_TOKENS = 192  # interpreter-sized batches for CI runs

# The workloads the issue names, each for a different reason.
ATTENTION_PROFILES = ("dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b")


@dataclass
class MicroBatch:
    seqlens: np.ndarray  # prompt + response tokens per sequence, int64
    weight: float  # share of the sampled step's tokens this micro-batch stands for
    profile: str
    seed: int
    step: int
    label: str
    stratum_size: int = 1  # micro-batches this one represents

    @property
    def total_tokens(self) -> int:
        return int(self.seqlens.sum())

    @property
    def max_seqlen(self) -> int:
        return int(self.seqlens.max()) if self.seqlens.size else 0

    @property
    def sum_sq(self) -> int:
        """Sum of squared lengths: what attention FLOPs scale with."""
        return int((self.seqlens.astype(np.int64) ** 2).sum())


def sample_step(profile: str, *, seed: int = 0, step: int = 0):
    from polytrace.workload.profiles import get_profile

    return get_profile(profile).sample(step=step, seed=seed)


def microbatches(profile: str, *, max_tokens: int = GPU_MAX_TOKENS, seed: int = 0, step: int = 0,
                 dp_ranks: int = 8, max_batches: int | None = None) -> list[MicroBatch]:
    """Micro-batches of one sampled step, planned as a trainer would plan them.

    The budget is raised to the longest sequence when that exceeds ``max_tokens`` (trainers size
    the budget to fit it). With ``max_batches``, the micro-batches are ranked by attention cost
    (sum of squared lengths), cut into ``max_batches`` equal strata, and the median of each
    stratum represents it, carrying the whole stratum's token share as its weight.
    """
    from polytrace_kernels.packing import plan_microbatches

    batch = sample_step(profile, seed=seed, step=step)
    seqlens = batch.seq_lens.astype(np.int64)
    budget = max(int(max_tokens), int(seqlens.max()))
    plan = plan_microbatches(seqlens, dp_ranks, budget)
    total = float(seqlens.sum())
    mbs = []
    for r, rank in enumerate(plan.ranks):
        for j, idx in enumerate(rank):
            if len(idx) == 0:
                continue
            lens = seqlens[np.asarray(idx, dtype=np.int64)]
            mbs.append(MicroBatch(lens, float(lens.sum()) / total, profile, seed, step,
                                  f"{profile}/s{step}/r{r}m{j}"))
    if max_batches is None or len(mbs) <= max_batches:
        return mbs
    return representative(mbs, max_batches)


def representative(mbs: list[MicroBatch], k: int) -> list[MicroBatch]:
    order = sorted(mbs, key=lambda m: m.sum_sq)
    strata = np.array_split(np.arange(len(order)), k)
    out = []
    for s in strata:
        if s.size == 0:
            continue
        pick = order[int(s[s.size // 2])]
        weight = float(sum(order[i].weight for i in s))
        out.append(MicroBatch(pick.seqlens, weight, pick.profile, pick.seed, pick.step, pick.label, int(s.size)))
    return out


@dataclass
class DecodePoint:
    """The running batch at one decode iteration of a simulated rollout."""

    profile: str
    progress: float  # fraction of the rollout's decode iterations done
    iteration: int
    kv_lens: np.ndarray  # KV length (prompt + generated so far) of every running sequence
    seed: int = 0
    step: int = 0


def fifo_starts(response_lens: np.ndarray, slots: int) -> np.ndarray:
    """Decode iteration at which each sequence starts when at most ``slots`` run at once and a
    waiting sequence takes the first slot that frees, in batch order: the schedule of
    ``polytrace.stepmodel.rollout``'s engine simulation (``tests/suites/test_suites_registry.py`` checks
    the two agree)."""
    import heapq

    lens = np.maximum(np.asarray(response_lens, dtype=np.int64), 1)
    starts = np.zeros(lens.size, dtype=np.int64)
    if slots >= lens.size:
        return starts
    heap = [int(x) for x in lens[:slots]]
    heapq.heapify(heap)
    for i in range(slots, lens.size):
        t = heapq.heappop(heap)
        starts[i] = t
        heapq.heappush(heap, t + int(lens[i]))
    return starts


def decode_trajectory(profile: str, *, slots: int, points=(0.05, 0.3, 0.6, 0.9), seed: int = 0,
                      step: int = 0) -> list[DecodePoint]:
    """The KV lengths decode attention sees across a rollout: one sampled step of ``profile`` run
    through continuous batching on one engine with ``slots`` sequences at once (FIFO, as
    ``polytrace/stepmodel/rollout.py`` simulates it), the running batch read off at ``points``
    (fractions of the iterations until the last sequence finishes). Early points hold a full batch
    at prompt-sized KV lengths, late ones the few long responses of the tail at long lengths."""
    batch = sample_step(profile, seed=seed, step=step)
    prompts = np.asarray(batch.prompt_lens, dtype=np.int64)
    lens = np.maximum(np.asarray(batch.response_lens, dtype=np.int64), 1)
    starts = fifo_starts(lens, slots)
    ends = starts + lens
    horizon = int(ends.max())
    out = []
    for f in points:
        t = min(int(f * horizon), horizon - 1)
        running = (starts <= t) & (ends > t)
        kv = prompts[running] + (t - starts[running])
        if kv.size:
            out.append(DecodePoint(profile, float(f), t, np.sort(kv)[::-1], seed, step))
    return out


def cpu_scale(seqlens, max_total: int = CPU_MAX_TOTAL_TOKENS, max_seqs: int = 8) -> np.ndarray:
    """Shrink a batch for interpreter runs keeping its shape: at most ``max_seqs`` sequences
    (spread across the length ranking, so the longest stays), lengths scaled so they sum to at
    most ``max_total``, every sequence at least one token."""
    lens = np.sort(np.asarray(seqlens, dtype=np.int64))[::-1]
    if lens.size > max_seqs:
        lens = lens[np.linspace(0, lens.size - 1, max_seqs).round().astype(int)]
    total = lens.sum()
    if total > max_total:
        lens = np.maximum(1, np.floor(lens * (max_total / total))).astype(np.int64)
    return lens


def token_counts(profiles=ATTENTION_PROFILES, *, max_tokens: int = GPU_MAX_TOKENS, seed: int = 0, step: int = 0,
                 per_profile: int = 2) -> list[MicroBatch]:
    """Representative micro-batches of several profiles (for token-parallel kernels such as the
    log-prob kernels, only ``total_tokens`` matters)."""
    out = []
    for p in profiles:
        out.extend(microbatches(p, max_tokens=max_tokens, seed=seed, step=step, max_batches=per_profile))
    return out
