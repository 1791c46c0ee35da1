"""The device-side schedule of varlen attention: the longest-first work list, ``VarlenPlan`` and
the plan cache keyed by ``cu_seqlens`` tensor objects. Apart from ``api.py`` (launches and
autograd) because a plan is built once per batch and shared by every layer and the backward.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from .validation import _check_cu_contents

SCHEDULES = ("longest_first", "naive")


# ----------------------------------------------------------------------------------------------
# work lists (built on the device, no host sync)


def _cdiv(a, b):
    return (a + b - 1) // b


def build_work_list(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, n_slots: int, block: int, *,
                    causal: bool, schedule: str = "longest_first", over_keys: bool = False):
    """(work_seq, work_block), int32 [n_slots]: one entry per tile of ``block`` query rows (or keys
    when ``over_keys``), slots past the real number of tiles hold ``work_seq = -1``.

    ``longest_first`` sorts tiles by the work they do (keys a query tile visits, or query rows a key
    tile serves), largest first, so the long sequences' tiles start in the first wave rather than
    the last (longest-processing-time-first list scheduling; a tile's cost is the same for every
    head). ``naive`` keeps sequence order. All torch ops on the device: no sync."""
    device = cu_seqlens_q.device
    cu_q = cu_seqlens_q.to(torch.int64)
    cu_k = cu_seqlens_k.to(torch.int64)
    len_q = cu_q[1:] - cu_q[:-1]
    len_k = cu_k[1:] - cu_k[:-1]
    batch = len_q.numel()
    tiled = len_k if over_keys else len_q
    n_blocks = _cdiv(tiled, block)
    ends = torch.cumsum(n_blocks, 0)
    slots = torch.arange(n_slots, device=device, dtype=torch.int64)
    seq = torch.searchsorted(ends, slots, right=True)
    valid = seq < batch
    seq = seq.clamp(max=max(batch - 1, 0))
    blk = slots - (ends - n_blocks)[seq]
    if schedule == "longest_first":
        lq, lk = len_q[seq], len_k[seq]
        if over_keys:
            if causal:  # query rows i with i + (lk - lq) >= first key of the block
                cost = (lq - (blk * block - (lk - lq)).clamp(min=0)).clamp(min=0)
            else:
                cost = lq
        else:
            if causal:  # keys seen by the tile's last row
                cost = torch.minimum(lk, (blk + 1) * block + lk - lq).clamp(min=0)
            else:
                cost = lk
        cost = torch.where(valid, cost + 1, torch.full_like(cost, -1))
        order = torch.argsort(cost, descending=True, stable=True)
        seq, blk, valid = seq[order], blk[order], valid[order]
    work_seq = torch.where(valid, seq, torch.full_like(seq, -1)).to(torch.int32)
    return work_seq, blk.to(torch.int32)


@dataclass
class VarlenPlan:
    """The device-side schedule of one packed batch. Reusable across calls (layers) with the same
    cu_seqlens, head dim and dtype; ``varlen_attention`` builds and caches one when not given."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    total_q: int
    total_k: int
    causal: bool
    schedule: str
    block_m: int
    work_seq: torch.Tensor
    work_block: torch.Tensor
    kv_block: int = 0
    kv_work_seq: torch.Tensor | None = None
    kv_work_block: torch.Tensor | None = None

    @property
    def n_slots(self) -> int:
        return int(self.work_seq.numel())

    def kv_work(self, kv_block: int):
        """The dK/dV work list (tiles of keys), built on first use by the backward."""
        if self.kv_work_seq is None or self.kv_block != kv_block:
            batch = self.cu_seqlens_q.numel() - 1
            n_slots = self.total_k // kv_block + batch
            self.kv_work_seq, self.kv_work_block = build_work_list(
                self.cu_seqlens_q, self.cu_seqlens_k, n_slots, kv_block, causal=self.causal,
                schedule=self.schedule, over_keys=True)
            self.kv_block = kv_block
        return self.kv_work_seq, self.kv_work_block


def varlen_plan(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int, *, block_m: int, causal: bool = True,
                schedule: str = "longest_first", max_seqlen_q: int | None = None) -> VarlenPlan:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    batch = cu_seqlens_q.numel() - 1
    n_slots = total_q // block_m + batch
    if max_seqlen_q is not None:
        n_slots = min(n_slots, batch * _cdiv(max(int(max_seqlen_q), 0), block_m))
    work_seq, work_block = build_work_list(cu_seqlens_q, cu_seqlens_k, n_slots, block_m, causal=causal,
                                           schedule=schedule)
    return VarlenPlan(cu_seqlens_q, cu_seqlens_k, total_q, total_k, causal, schedule, block_m, work_seq, work_block)


# Plans cached per cu_seqlens tensor *object* (weak references, so nothing is kept alive) and its
# in-place version counter: all layers of a forward share one plan and one validation.
_PLAN_CACHE: dict = {}
_PLAN_CACHE_SIZE = 16


def _cached_plan(cu_q, cu_k, total_q, total_k, block_m, causal, schedule, max_seqlen_q, max_seqlen_k,
                 check_inputs) -> VarlenPlan:
    key = (id(cu_q), id(cu_k), total_q, total_k, block_m, causal, schedule, max_seqlen_q, max_seqlen_k)
    hit = _PLAN_CACHE.get(key)
    if hit is not None:
        ref_q, ref_k, ver_q, ver_k, checked, plan = hit
        if (ref_q() is cu_q and ref_k() is cu_k and ver_q == cu_q._version and ver_k == cu_k._version
                and (checked or not check_inputs)):
            return plan
    if check_inputs:
        _check_cu_contents("cu_seqlens_q", cu_q, total_q, max_seqlen_q, "max_seqlen_q")
        _check_cu_contents("cu_seqlens_k", cu_k, total_k, max_seqlen_k, "max_seqlen_k")
    plan = varlen_plan(cu_q, cu_k, total_q, total_k, block_m=block_m, causal=causal, schedule=schedule,
                       max_seqlen_q=max_seqlen_q)
    if len(_PLAN_CACHE) >= _PLAN_CACHE_SIZE:
        for stale in [k for k, v in _PLAN_CACHE.items() if v[0]() is None or v[1]() is None] or [
                next(iter(_PLAN_CACHE))]:
            _PLAN_CACHE.pop(stale, None)
    _PLAN_CACHE[key] = (weakref.ref(cu_q), weakref.ref(cu_k), cu_q._version, cu_k._version, check_inputs, plan)
    return plan


def clear_plan_cache() -> None:
    _PLAN_CACHE.clear()
