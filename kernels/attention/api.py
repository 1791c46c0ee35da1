"""Public API of the attention family: the launches, the autograd Function and the public functions.

``varlen_attention``  packed variable-length attention (flash-attn's ``flash_attn_varlen_func``
                      layout), forward + FA2-style backward, GQA, causal bottom-right.
``decode_attention``  one (or Sq) query tokens per sequence against its KV cache, split over KV.
``varlen_plan``       the device-built, longest-first work list; built once per ``cu_seqlens``
                      tensor object and reused (by every layer of a model, and by the backward).

Host syncs: none in the hot path. The grid is sized from a bound known on the host
(``T // BLOCK_M + batch`` tiles, tighter when ``max_seqlen_q`` is given) and the work list is built
with torch ops on the device; programs past the real number of tiles exit at once. The only sync is
the optional content check of ``cu_seqlens`` (``check_inputs=True``, the default), which runs once
per ``cu_seqlens`` tensor object, when its plan is first built, and never again for that object;
pass ``check_inputs=False`` to skip even that one.

Launch configs live in ``configs.py``, argument checks in ``validation.py`` and the work list and
plan cache in ``schedule.py``; the names the package and callers reach through ``api`` are
imported here.
"""

from __future__ import annotations

import torch

from .configs import TUNING_SPACE as TUNING_SPACE
from .configs import (
    _block_d,
    _resolve,
    default_bwd_config,
    default_decode_config,
    default_fwd_config,
    device_capability,
    tuning_bucket,
)
from .configs import _capability as _capability
from .configs import config_fits as config_fits
from .configs import short_fwd_config as short_fwd_config  # the package exports it from here (__init__)
from .kernel import (
    LOG2E,
    bwd_preprocess_kernel,
    decode_combine_kernel,
    decode_split_kernel,
    varlen_bwd_dkdv_kernel,
    varlen_bwd_dq_kernel,
    varlen_fwd_kernel,
)
from .kernel_decode import decode_split_ext_kernel
from .kernel_ext import varlen_bwd_dkdv_ext_kernel, varlen_bwd_dq_ext_kernel, varlen_fwd_ext_kernel
from .schedule import SCHEDULES, VarlenPlan, _cached_plan, _cdiv
from .schedule import build_work_list as build_work_list
from .schedule import clear_plan_cache as clear_plan_cache
from .schedule import varlen_plan as varlen_plan
from .validation import MAX_HEAD_DIM as MAX_HEAD_DIM
from .validation import SUPPORTED_DTYPES as SUPPORTED_DTYPES
from .validation import (
    _check_cache_seqlens,
    _check_cu,
    _check_device,
    _check_qkv,
    _check_scale,
    _check_softcap,
    _check_tensor,
    _check_window,
    _optional_length,
)

FWD_KERNEL = "varlen_attention_fwd"
DKDV_KERNEL = "varlen_attention_bwd_dkdv"
DQ_KERNEL = "varlen_attention_bwd_dq"
DECODE_KERNEL = "decode_attention"


# ----------------------------------------------------------------------------------------------
# launches


def _ext_args(ext, scale: float, causal: bool, total_q: int, total_k: int):
    """Softcap / window launch: (kernels, extra scalars, extra constexprs); the defaults for ext None.

    A window side is clamped to the widest it can matter, which keeps the kernels' index sums in
    int32: query i of a sequence sees keys j with -left <= j - i - (Lk - Lq) <= right, where that
    difference lies in [-(Lk - 1), Lq - 1]; so left = total_k and right = total_q are unbounded.
    (The right side clamped at total_k instead cut keys off every query row i < Lq - Lk - 1 of a
    sequence with more queries than keys: a row with no key, output 0.)"""
    if ext is None:
        return (varlen_fwd_kernel, varlen_bwd_dkdv_kernel, varlen_bwd_dq_kernel), (), {}
    softcap, window = ext
    left, right = window if window is not None else (-1, -1)
    unbounded_left, unbounded_right = max(total_k, 1), max(total_q, 1)
    left = unbounded_left if left < 0 else min(left, unbounded_left)
    right = 0 if causal else (unbounded_right if right < 0 else min(right, unbounded_right))
    scalars = (scale / softcap if softcap else 0.0, softcap * LOG2E, left, right)
    return ((varlen_fwd_ext_kernel, varlen_bwd_dkdv_ext_kernel, varlen_bwd_dq_ext_kernel), scalars,
            {"SOFTCAP": bool(softcap), "WINDOW": window is not None})


def _fwd(q, k, v, plan: VarlenPlan, causal: bool, scale: float, cfg: dict, ext=None):
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    o = torch.empty_like(q)
    lse = torch.empty((hq, total_q), device=q.device, dtype=torch.float32)
    n_slots = plan.n_slots
    if n_slots == 0 or total_q == 0:
        return o, lse
    grid = (n_slots * hq,)
    kernels, extra, extra_c = _ext_args(ext, scale, causal, total_q, k.shape[0])
    kernels[0][grid](
        q, k, v, o, lse, plan.cu_seqlens_q, plan.cu_seqlens_k, plan.work_seq, plan.work_block,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        lse.stride(0), scale * LOG2E, n_slots, hq, hq // hkv, *extra, **extra_c,
        HEAD_DIM=d, BLOCK_D=_block_d(d), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=causal,
        HEADS_INNER=plan.schedule == "longest_first", EVEN_D=_block_d(d) == d,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return o, lse


def _bwd(do, q, k, v, o, lse, plan: VarlenPlan, causal: bool, scale: float, cfg: dict, ext=None):
    total_q, hq, d = q.shape
    total_k, hkv, _ = k.shape
    group = hq // hkv
    block_d = _block_d(d)
    even_d = block_d == d
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)  # every key belongs to a tile (cu_seqlens_k ends at Tk), which writes it,
    dv = torch.empty_like(v)  # zeros included for sequences without queries
    if total_q == 0:
        return dq, dk, dv
    delta = torch.empty_like(lse)
    block_t = 64
    bwd_preprocess_kernel[(_cdiv(total_q, block_t), hq)](
        o, do, delta, total_q, hq, o.stride(0), o.stride(1), do.stride(0), do.stride(1), delta.stride(0),
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_T=block_t)
    kv_seq, kv_blk = plan.kv_work(cfg["DKDV_BLOCK_N"])
    n_kv_slots = kv_seq.numel()
    kernels, extra, extra_c = _ext_args(ext, scale, causal, total_q, total_k)
    if n_kv_slots:
        kernels[1][(n_kv_slots * hkv,)](
            q, k, v, do, lse, delta, dk, dv, plan.cu_seqlens_q, plan.cu_seqlens_k, kv_seq, kv_blk,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
            dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), lse.stride(0),
            scale, scale * LOG2E, hkv, group, *extra, **extra_c,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg["DKDV_BLOCK_M"], BLOCK_N=cfg["DKDV_BLOCK_N"], CAUSAL=causal,
            EVEN_D=even_d, num_warps=cfg["DKDV_WARPS"], num_stages=cfg["DKDV_STAGES"])
    if plan.n_slots:
        kernels[2][(plan.n_slots * hq,)](
            q, k, v, do, lse, delta, dq, plan.cu_seqlens_q, plan.cu_seqlens_k, plan.work_seq, plan.work_block,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
            dq.stride(0), dq.stride(1), lse.stride(0),
            scale, scale * LOG2E, hq, group, *extra, **extra_c,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=plan.block_m, BLOCK_N=cfg["DQ_BLOCK_N"], CAUSAL=causal,
            EVEN_D=even_d, num_warps=cfg["DQ_WARPS"], num_stages=cfg["DQ_STAGES"])
    return dq, dk, dv


def _contig(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, causal, scale, fwd_cfg, bwd_cfg, ext):
        o, lse = _fwd(q, k, v, plan, causal, scale, fwd_cfg, ext)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan, ctx.causal, ctx.scale, ctx.bwd_cfg, ctx.ext = plan, causal, scale, bwd_cfg, ext
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd(_contig(do), q, k, v, o, lse, ctx.plan, ctx.causal, ctx.scale, ctx.bwd_cfg, ctx.ext)
        return dq, dk, dv, None, None, None, None, None, None


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=True,
                     softmax_scale=None, *, return_lse: bool = False, schedule: str = "longest_first",
                     check_inputs: bool = True, plan: VarlenPlan | None = None, config: dict | None = None,
                     bwd_config: dict | None = None, window_size=(-1, -1), softcap: float = 0.0):
    """Attention over packed variable-length sequences (flash-attn ``flash_attn_varlen_func`` layout).

    q ``[Tq, Hq, D]``, k and v ``[Tk, Hkv, D]`` (Hq a multiple of Hkv: GQA without repeating K/V),
    fp16 or bf16; ``cu_seqlens_q``/``cu_seqlens_k`` int32 ``[B + 1]`` prefix sums from 0 to T.
    ``causal`` masks bottom-right (query i of a sequence sees key j iff j <= i + Lk - Lq).
    Returns ``out [Tq, Hq, D]`` (and ``lse [Hq, Tq]`` fp32, natural log, when ``return_lse``; rows
    that see no key get out 0 and lse +inf). Differentiable in q, k and v; lse is not.

    ``max_seqlen_*`` are optional: used only to tighten the grid bound, never required (no sync).
    ``schedule``: "longest_first" (default) or "naive" (sequence order, heads outermost: the order
    of a conventional (blocks, batch, heads) grid), for comparison. ``check_inputs`` validates
    cu_seqlens' contents (one small device-to-host copy per cu_seqlens object, cached with its
    plan). ``plan`` reuses a ``varlen_plan`` explicitly; ``config``/``bwd_config`` override block
    sizes (see ``TUNING_SPACE``, ``default_bwd_config``).

    ``window_size=(left, right)`` (flash-attn's): query i sees keys i + Lk - Lq - left ..
    i + Lk - Lq + right, a negative side unbounded, right 0 when causal. ``softcap`` c > 0 (Gemma 2:
    50) replaces each score s (after the scale) by c tanh(s / c). Both run separate kernels
    (``kernel_ext.py``); the defaults launch the plain ones.
    """
    _check_qkv(q, k, v)
    _check_cu("cu_seqlens_q", cu_seqlens_q, q.device, None)
    _check_cu("cu_seqlens_k", cu_seqlens_k, q.device, cu_seqlens_q.numel() - 1)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"v has {v.shape[0]} tokens, expected {k.shape[0]} (the tokens of k)")
    max_seqlen_q = _optional_length("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _optional_length("max_seqlen_k", max_seqlen_k)
    d = q.shape[-1]
    scale = _check_scale(softmax_scale, d)
    if scale <= 0.0:
        # The forward takes each row's max of the raw scores and folds the scale into exp2's FFMA
        # (kernel.py _fwd_step), exact for a positive scale only: s (q.k) = |s| (-q).k, and s = 0
        # is q = 0 at scale 1 (both exact in any dtype; autograd carries dq back through the sign).
        q, scale = (-q, -scale) if scale < 0.0 else (q * 0, 1.0)
    softcap, window = _check_softcap(softcap), _check_window(window_size)
    ext = (softcap, window) if softcap or window is not None else None
    group = q.shape[1] // k.shape[1]
    bucket = tuning_bucket(d, q.dtype, causal, group)
    capability = device_capability(q.device)
    fwd_cfg = _resolve(FWD_KERNEL, bucket, default_fwd_config(d, q.dtype, capability=capability), config, q.device)
    bwd_default = default_bwd_config(d, q.dtype, capability=capability, ext=ext is not None)
    bwd_cfg = _resolve(DKDV_KERNEL, bucket, bwd_default, bwd_config, q.device, "bwd_config")
    q, k, v = _contig(q), _contig(k), _contig(v)
    if plan is None:
        plan = _cached_plan(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], fwd_cfg["BLOCK_M"], bool(causal),
                            schedule, max_seqlen_q, max_seqlen_k, check_inputs)
    elif (plan.block_m != fwd_cfg["BLOCK_M"] or plan.causal != bool(causal) or plan.total_q != q.shape[0]
          or plan.total_k != k.shape[0]):
        raise ValueError("plan was built for another block size, causality or token count")
    elif plan.cu_seqlens_q is not cu_seqlens_q or plan.cu_seqlens_k is not cu_seqlens_k:
        # the kernels read the plan's own cu_seqlens: another tensor here would be silently ignored
        raise ValueError("plan was built for other cu_seqlens_q/cu_seqlens_k tensors; pass the same "
                         "tensor objects, or plan=None")
    o, lse = _VarlenAttention.apply(q, k, v, plan, bool(causal), scale, fwd_cfg, bwd_cfg, ext)
    return (o, lse) if return_lse else o


# ----------------------------------------------------------------------------------------------
# decode


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 8
    return torch.cuda.get_device_properties(device).multi_processor_count


# Smallest split: two 64-key blocks; the fp32 partial a split writes (4 B x D per query head) and
# the combine reads back is then <= 1/16 of the split's K+V bytes for a GQA group of 8 at D=128.
MIN_SPLIT_TOKENS = 128
# Rows (sequence x KV head) from which one split per row is enough: 4 waves of programs balance a
# long-tailed batch, and a single launch saves the combine's launch and partial traffic.
SINGLE_LAUNCH_WAVES = 4
SINGLE_LAUNCH_MAX_LEN = 4096  # a row's K+V at D=128: 2 MB, ~20 us for one SM, never the makespan


def choose_split_tokens(batch: int, heads_kv: int, max_len: int, block_n: int, num_sms: int) -> int:
    """Tokens per KV split, from host-known sizes only (no look at the lengths: no sync).

    - Many rows (batch x KV heads >= 4 x SMs) and caches up to 4096 tokens: one split per row,
      a single launch (no combine kernel, no partials).
    - Large problems: about 64 programs per SM if every sequence were at the cache's length
      ``max_len``; on a long-tailed batch (mean length ~1/8 of the cap in PolyTrace's rollouts)
      that still leaves ~8 waves of active programs, with splits of 256-2048 tokens.
    - Small problems (late-rollout decode: a few sequences of 1.5-3.3k tokens), where that rule
      gives fewer than two programs per SM: splits shrink, down to ``MIN_SPLIT_TOKENS``, until
      there are two programs per SM, so every SM streams K/V instead of a few dozen.
    A split never exceeds the cache (one split, one launch, when ``max_len`` fits in one).
    """
    rows = max(batch * heads_kv, 1)
    max_len = max(max_len, 1)
    whole = max(block_n, _cdiv(max_len, block_n) * block_n)
    if rows >= SINGLE_LAUNCH_WAVES * num_sms and max_len <= SINGLE_LAUNCH_MAX_LEN:
        return whole
    want = _cdiv(rows * max_len, 64 * num_sms)
    split = 1 << max(0, (want - 1).bit_length())
    split = min(max(split, 256), 2048)
    if rows * _cdiv(max_len, split) < 2 * num_sms:
        split = max(MIN_SPLIT_TOKENS, _cdiv(max_len, _cdiv(2 * num_sms, rows)))
    split = max(block_n, _cdiv(split, block_n) * block_n)
    return min(split, whole)


# Block-table entries a paged split reads at once, before its key loop: 1024 tokens' worth (64
# int32 at vLLM's 16-token pages, 4 at 256), a power of two (tl.arange), and a whole number of key
# tiles (so no tile straddles two chunks).
DECODE_CHUNK_TOKENS = 1024


def decode_chunk_pages(page_size: int, block_n: int) -> int:
    """Pages per block-table chunk of the paged decode (see DECODE_CHUNK_TOKENS)."""
    pages = 1 << max(0, (_cdiv(DECODE_CHUNK_TOKENS, page_size) - 1).bit_length())
    while (pages * page_size) % block_n:
        pages *= 2
    return pages


def decode_attention(q, k_cache, v_cache, cache_seqlens, softmax_scale=None, *, block_table=None,
                     num_splits: int | None = None, return_lse: bool = False, config: dict | None = None,
                     check_inputs: bool = True, softcap: float = 0.0, window_size=(-1, -1), causal: bool = False):
    """Query tokens of each sequence against its own KV length, split over the KV axis.

    q ``[B, Hq, D]`` (or ``[B, Sq, Hq, D]``: Sq query tokens per sequence, the last Sq positions of
    its L cached tokens, as flash-attn's ``flash_attn_with_kvcache``: chunked prefill, a shared
    prefix, speculative decoding; ``causal`` masks bottom-right inside them); contiguous cache ``k_cache``/``v_cache``
    ``[B, Lmax, Hkv, D]``, or a paged cache ``[num_pages, page_size, Hkv, D]`` with
    ``block_table`` int32 ``[B, max_pages]``; ``cache_seqlens`` int32 ``[B]`` (0..Lmax, or
    0..max_pages * page_size when paged). ``check_inputs`` (the default) raises ``ValueError``
    for a length outside that range; the check is a sync, paid once per ``cache_seqlens`` object
    and in-place version (not per layer), and skipped inside a CUDA-graph capture; with
    ``check_inputs=False`` (or unchecked) such a sequence gets NaN output and lse and reads nothing.
    Returns ``out`` shaped like q (and lse ``[B, Hq]`` fp32 with ``return_lse``, ``[B, Hq, Sq]``
    when Sq > 1; a query that sees no key gets out 0 and lse +inf). ``num_splits``
    overrides the split count chosen from (B, Hkv, Lmax, SMs).

    ``softcap`` c > 0 (Gemma 2: 50): scores c tanh(s / c). ``window_size=(left, right)``
    (flash-attn's): the query at position p sees keys p - left .. p + right (a negative side
    unbounded, right 0 when causal); the last query is at L - 1, so ``right`` and ``causal`` mask
    nothing for one query token. Softcap, a window and Sq > 1 run ``decode_split_ext_kernel``; the
    defaults launch the plain kernel.
    """
    squeeze, q_tokens = False, None
    if isinstance(q, torch.Tensor) and q.dim() == 4:
        if q.shape[1] < 1:
            raise ValueError(f"q must be [B, Hq, D] or [B, Sq >= 1, Hq, D], got shape {tuple(q.shape)}")
        if q.shape[1] > 1:
            q_tokens = q
        squeeze = True
        q = q[:, 0]
    _check_qkv(q, k_cache, v_cache, names=("q", "k_cache", "v_cache"), ndim=3, kv_ndim=4)
    _check_tensor("cache_seqlens", cache_seqlens, 1)
    if cache_seqlens.dtype != torch.int32:
        raise ValueError(f"cache_seqlens must be int32, got {cache_seqlens.dtype}")
    _check_device("cache_seqlens", cache_seqlens, q.device)
    cache_seqlens = cache_seqlens.contiguous()  # [B] ints, read as a dense array
    batch, hq, d = q.shape
    if cache_seqlens.numel() != batch:
        raise ValueError(f"cache_seqlens has {cache_seqlens.numel()} entries, expected {batch} (the batch of q)")
    paged = block_table is not None
    if paged:
        _check_tensor("block_table", block_table, 2)
        if block_table.dtype != torch.int32:
            raise ValueError(f"block_table must be int32, got {block_table.dtype}")
        _check_device("block_table", block_table, q.device)
        if block_table.shape[0] != batch:
            raise ValueError(f"block_table has {block_table.shape[0]} rows, expected {batch} (the batch of q)")
        if block_table.shape[1] > 1 and block_table.stride(1) != 1:
            block_table = block_table.contiguous()  # the kernel steps along a row with stride 1
        page_size = k_cache.shape[1]
        max_len = block_table.shape[1] * page_size
        where = f"block_table ({block_table.shape[1]} pages of {page_size} tokens)"
    else:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache has batch {k_cache.shape[0]}, expected {batch} (the batch of q)")
        page_size = 1
        max_len = k_cache.shape[1]
        where = f"k_cache ({max_len} tokens per sequence)"
    if check_inputs:
        _check_cache_seqlens(cache_seqlens, max_len, where)
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")
    hkv = k_cache.shape[2]
    group = hq // hkv
    scale = _check_scale(softmax_scale, d)
    softcap, window = _check_softcap(softcap), _check_window(window_size)
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    if q_tokens is None:
        right = -1  # the one query is the last position: no key right of it
    else:
        q = q_tokens
    ext = (softcap, left, right) if softcap or left >= 0 or right >= 0 or q_tokens is not None else None
    cfg = _resolve(DECODE_KERNEL, f"d{d}-g{group}-{'paged' if paged else 'contig'}",
                   default_decode_config(d, capability=device_capability(q.device)), config, q.device)
    block_n = cfg["BLOCK_N"]
    if num_splits is not None:
        split_tokens = max(block_n, _cdiv(_cdiv(max(max_len, 1), num_splits), block_n) * block_n)
    elif cfg["SPLIT_TOKENS"]:
        split_tokens = max(block_n, _cdiv(cfg["SPLIT_TOKENS"], block_n) * block_n)
    else:
        split_tokens = choose_split_tokens(batch, hkv, max_len, block_n, _num_sms(q.device))
    out, lse = _decode(_contig(q), _contig(k_cache), _contig(v_cache), cache_seqlens, block_table, max_len,
                       page_size, scale, split_tokens, cfg, ext)
    if q_tokens is not None:
        lse = lse.transpose(1, 2)  # flash-attn's [B, Hq, Sq]
    elif squeeze:
        out = out[:, None]
    return (out, lse) if return_lse else out


def _decode(q, k_cache, v_cache, cache_seqlens, block_table, max_len: int, page_size: int, scale: float,
            split_tokens: int, cfg: dict, ext=None):
    """The decode launches on validated, contiguous-last-dim inputs: split kernel, then the combine
    when there is more than one split. ``ext`` = (softcap, window left, right; -1: unbounded)
    launches decode_split_ext_kernel, as does q ``[B, Sq, Hq, D]``. Returns (out like q, lse
    [B, Hq] fp32, [B, Sq, Hq] for a 4-d q)."""
    q_shape = q.shape
    batch = cache_seqlens.numel()
    sq = q.shape[1] if q.dim() == 4 else 1
    q = q.reshape(batch * sq, *q.shape[-2:])  # rows t of sequence b at b * sq + t
    _, hq, d = q.shape
    hkv = k_cache.shape[2]
    group = hq // hkv
    paged = block_table is not None
    block_n = cfg["BLOCK_N"]
    n_splits = max(1, _cdiv(max_len, split_tokens))
    out = torch.empty_like(q)
    lse = torch.empty((batch * sq, hq), device=q.device, dtype=torch.float32)
    if batch == 0:
        return out.reshape(q_shape), lse.reshape(*q_shape[:-2], hq)
    block_d = _block_d(d)
    block_g = max(16, 1 << (group - 1).bit_length())
    single = n_splits == 1
    if single:
        o_part, lse_part = out, lse
        part_strides = (0, 0, 0)
        lse_strides = (lse.stride(0), lse.stride(1))
    else:
        o_part = torch.empty((batch * sq, hq, n_splits, d), device=q.device, dtype=torch.float32)
        lse_part = torch.empty((batch * sq, hq, n_splits), device=q.device, dtype=torch.float32)
        part_strides = (o_part.stride(0), o_part.stride(1), o_part.stride(2))
        lse_strides = (lse_part.stride(0), lse_part.stride(1))
    bt = block_table if paged else cache_seqlens  # placeholder pointer when not paged
    kernel, extra, extra_c, grid = decode_split_kernel, (), {}, (n_splits, batch * hkv)
    if ext is not None:
        softcap, left, right = ext
        unbounded = max(max_len, 1)  # no key is further away: int32-safe in the kernel's sums
        kernel = decode_split_ext_kernel
        extra = (scale / softcap if softcap else 0.0, softcap * LOG2E, min(left, unbounded) if left >= 0 else unbounded,
                 min(right, unbounded) if right >= 0 else unbounded, sq)
        extra_c = {"SOFTCAP": bool(softcap), "WINDOW": left >= 0 or right >= 0, "MULTI": sq > 1}
        if sq > 1:  # (token, head) rows in blocks of <= 32: at 64, D=128 spilled 440 B in the loop on sm_80
            block_g = max(16, min(32, 1 << (sq * group - 1).bit_length()))
            grid = grid + (_cdiv(sq * group, block_g),)
    kernel[grid](
        q, k_cache, v_cache, cache_seqlens, bt, out, o_part, lse_part,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        *part_strides, *lse_strides, block_table.stride(0) if paged else 0,
        scale * LOG2E, hkv, group, split_tokens, max_len, *extra, **extra_c,
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_G=block_g, BLOCK_N=block_n, PAGE_SIZE=page_size, PAGED=paged,
        SINGLE_SPLIT=single, EVEN_D=block_d == d, CHUNK_PAGES=decode_chunk_pages(page_size, block_n) if paged else 1,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if not single:
        pow2 = 1 << (n_splits - 1).bit_length()
        row_lens = cache_seqlens if sq == 1 else cache_seqlens.repeat_interleave(sq)  # the combine's rows
        decode_combine_kernel[(batch * sq * hq,)](
            o_part, lse_part, row_lens, out, lse,
            o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
            out.stride(0), out.stride(1), lse.stride(0), hq, split_tokens, max_len,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_S=min(16, pow2), N_SPLITS_POW2=pow2, num_warps=4)
    return out.reshape(q_shape), lse.reshape(*q_shape[:-2], hq)
