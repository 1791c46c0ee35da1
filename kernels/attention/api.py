"""Public API of the attention family: validation, work lists, block choice, autograd.

``varlen_attention``  packed variable-length attention (flash-attn's ``flash_attn_varlen_func``
                      layout), forward + FA2-style backward, GQA, causal bottom-right.
``decode_attention``  one query token per sequence against its KV cache, split over KV.
``varlen_plan``       the device-built, longest-first work list; built once per ``cu_seqlens``
                      tensor object and reused (by every layer of a model, and by the backward).

Host syncs: none in the hot path. The grid is sized from a bound known on the host
(``T // BLOCK_M + batch`` tiles, tighter when ``max_seqlen_q`` is given) and the work list is built
with torch ops on the device; programs past the real number of tiles exit at once. The only sync is
the optional content check of ``cu_seqlens`` (``check_inputs=True``, the default), which runs once
per ``cu_seqlens`` tensor object, when its plan is first built, and never again for that object;
pass ``check_inputs=False`` to skip even that one.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import os
import weakref
from dataclasses import dataclass

import torch

from .kernel import (
    LOG2E,
    bwd_preprocess_kernel,
    decode_combine_kernel,
    decode_split_kernel,
    varlen_bwd_dkdv_kernel,
    varlen_bwd_dq_kernel,
    varlen_fwd_kernel,
)

try:  # vendoring kernels/attention alone must work: the tuning table is optional
    from .._tuning import lookup as _tuning_lookup
except ImportError:  # pragma: no cover - exercised only when vendored
    _tuning_lookup = None

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
SCHEDULES = ("longest_first", "naive")
MAX_HEAD_DIM = 256

FWD_KERNEL = "varlen_attention_fwd"
DKDV_KERNEL = "varlen_attention_bwd_dkdv"
DQ_KERNEL = "varlen_attention_bwd_dq"
DECODE_KERNEL = "decode_attention"

# Search space of the forward for ``polytrace tune`` (BLOCK_M x BLOCK_N x warps x stages).
TUNING_SPACE = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [32, 64, 128],
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4],
}

try:  # optional: a family folder vendored alone runs without it (needed by the triton<3.9 interpreter only)
    from .._interpreter import interpreter_loop_bounds_fix as _interpreter_loop_bounds_fix
except ImportError:  # pragma: no cover
    def _interpreter_loop_bounds_fix() -> None:
        return None



def tuning_bucket(head_dim: int, dtype, causal: bool = True, group: int = 1) -> str:
    """Bucket of the forward's tuned config. Deliberately independent of the batch (lengths,
    token count): block sizes fixed by head dim and dtype keep a sequence's result bitwise the
    same however it is packed."""
    name = str(dtype).replace("torch.", "")
    return f"d{int(head_dim)}-{name}-{'causal' if causal else 'full'}-g{int(group)}"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (int(head_dim) - 1).bit_length())


# Defaults. GPU tiles follow the Triton fused-attention tutorial's Hopper choices (fwd 128x64 on 8
# warps; dK/dV 32 query rows x 128 keys), checked offline with ptxas for sm_90a: fwd 128x64 on 8
# warps uses 186 registers at D=128 and 115 at D=64, no spill (128x128 needs 250; 4 warps spill
# 400 B at D=128). A starting point for ``polytrace tune``, not yet timed on a GPU. In the
# interpreter every tile is a numpy op, so 16x16 tiles keep the CPU tests fast and still cover
# multi-block sequences.
def default_fwd_config(head_dim: int, dtype=torch.bfloat16, on_cuda: bool | None = None) -> dict:
    if on_cuda is None:
        on_cuda = not _interpreting()
    if not on_cuda:
        return {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    if head_dim <= 64:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    if head_dim <= 128:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}


def default_bwd_config(head_dim: int, dtype=torch.bfloat16, on_cuda: bool | None = None,
                       capability: tuple[int, int] | None = None) -> dict:
    """dK/dV tile (``DKDV_BLOCK_M`` query rows per step x ``DKDV_BLOCK_N`` keys) and the dQ key
    step ``DQ_BLOCK_N``; the dQ query tile is the forward's BLOCK_M so it reuses its work list.
    ``capability`` is the GPU's compute capability (``varlen_attention`` passes the device's);
    None means Hopper's choice. Depends on head dim and device only, never on the batch.

    Hopper (>= 9.0), tiles for which ptxas (sm_90a, triton 3.9, compiled offline) reports no spill
    or almost none (D=128: dK/dV 32x128 on 8 warps 255 registers, 4 B spilled; dQ 128x32 on 8 warps
    176 registers. D=64: dK/dV 32x128 on 8 warps 182; dQ 128x64 on 8 warps 132).

    Below 9.0 (A100 and the other Ampere/Ada parts) the Hopper dK/dV tile spills on sm_80: D=128
    32x128/8 warps/3 stages 64 B (full) / 120 B (causal) per thread under triton 3.9, 168 / 344 B
    under 3.6. ``_SM80_DKDV`` holds the offline search's picks; see the comment there. The dQ tiles
    above do not spill on sm_80 (0 B, both versions, causal and not, fp16 and bf16) and are the
    largest that don't (dQ 128x64 at D=128 spills 84 B or more at every warps/stages setting), so dQ
    is the same on every GPU. D > 128 keeps one choice everywhere (not searched: on sm_80 its dK/dV
    spills 0-12 B full, 72-104 B causal). Not yet timed on a GPU."""
    if on_cuda is None:
        on_cuda = not _interpreting()
    if not on_cuda:
        return {"DKDV_BLOCK_M": 16, "DKDV_BLOCK_N": 16, "DKDV_WARPS": 4, "DKDV_STAGES": 1,
                "DQ_BLOCK_N": 16, "DQ_WARPS": 4, "DQ_STAGES": 1}
    if head_dim <= 64:
        cfg = {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 3,
               "DQ_BLOCK_N": 64, "DQ_WARPS": 8, "DQ_STAGES": 3}
    elif head_dim <= 128:
        cfg = {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 3,
               "DQ_BLOCK_N": 32, "DQ_WARPS": 8, "DQ_STAGES": 3}
    else:
        return {"DKDV_BLOCK_M": 16, "DKDV_BLOCK_N": 64, "DKDV_WARPS": 8, "DKDV_STAGES": 2,
                "DQ_BLOCK_N": 16, "DQ_WARPS": 8, "DQ_STAGES": 2}
    if capability is not None and tuple(capability) < (9, 0):
        cfg.update(_SM80_DKDV[64 if head_dim <= 64 else 128])
    return cfg


# dK/dV tiles for compute capability < 9.0, from an offline search (triton.compile for sm_80, ptxas
# -v spill bytes per thread, triton 3.6 and 3.9, causal and not, bf16; fp16 rechecked for the picks
# and runners-up, same bytes) over BLOCK_M, BLOCK_N in {16..128}, 4 or 8 warps, 1-3 stages, 192
# configs. Rule: 0 B spilled in every compile; shared memory <= 99 KB, so sm_86/sm_89 (99 KB a
# block) launch it too, not only the A100 (163 KB); then the largest tile BLOCK_M x BLOCK_N (more
# work per program); then the larger BLOCK_N (each key tile re-reads all of Q and dO: 2 x BLOCK_N
# flops per byte loaded, whatever BLOCK_M); then more stages.
#   D=128: 64x64, 8 warps, 1 stage: 0 B, 228 registers, 80 KB shared. Larger tiles all spill or
#          overflow 99 KB: 128x64/8w/1 stage 0 B but 112 KB; 64x128/8w 348-19984 B; 32x128/8w (the
#          Hopper tile) 64-372 B; 128x32/8w/1 stage 0 B, 96 KB (same area, BLOCK_N 32). With 2 or 3
#          stages 64x64 spills 16-76 B; the pipelined spill-free tiles are 32x64 and 64x32 at 8 warps.
#   D=64:  32x128, 8 warps, 1 stage: 0 B, 240 registers, 44 KB shared (the Hopper tile, so the
#          same key tiles and dK/dV work list). With 3 stages it spills 28-36 B under triton 3.6
#          (0 under 3.9), with 2 stages 76 B causal (3.6). 64x64 and 64x128 spill 24-22228 B at
#          every setting; 128x32/8w/2-3 stages is spill-free (BLOCK_N 32: 4x the Q/dO reads).
# Candidates for ``polytrace tune`` on an A100; none of this is timed yet.
_SM80_DKDV = {
    64: {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 1},
    128: {"DKDV_BLOCK_M": 64, "DKDV_BLOCK_N": 64, "DKDV_WARPS": 8, "DKDV_STAGES": 1},
}


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of a CUDA device (queried once per device, at the first launch), None
    elsewhere and in the interpreter (no CUDA query on the CPU path)."""
    if device.type != "cuda" or _interpreting():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability(index)


def default_decode_config(head_dim: int, on_cuda: bool | None = None) -> dict:
    if on_cuda is None:
        on_cuda = not _interpreting()
    if not on_cuda:
        return {"BLOCK_N": 16, "SPLIT_TOKENS": 32, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_N": 64 if head_dim <= 128 else 32, "SPLIT_TOKENS": 0, "num_warps": 4, "num_stages": 3}


def _resolve(kernel: str, bucket: str, default: dict, config: dict | None, device: torch.device,
             argname: str = "config") -> dict:
    if config is not None:
        if not isinstance(config, dict):
            raise ValueError(f"{argname} must be a dict or None, got {type(config).__name__}")
        merged = dict(default)
        unknown = set(config) - set(default)
        if unknown:
            raise ValueError(f"{argname}: unknown keys {sorted(unknown)}; valid keys {sorted(default)}")
        for key, value in config.items():
            # block sizes feed tl.arange / tl.dot: powers of two >= 16; SPLIT_TOKENS 0 means "choose"
            low = 0 if key == "SPLIT_TOKENS" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{argname}[{key!r}] must be an int >= {low}, got {value!r}")
            if "BLOCK" in key and (value < 16 or value & (value - 1)):
                raise ValueError(f"{argname}[{key!r}] must be a power of two >= 16, got {value}")
        merged.update(config)
        return merged
    if device.type == "cuda" and _tuning_lookup is not None:
        return _tuning_lookup(kernel, bucket, torch.cuda.get_device_name(device), default)
    return dict(default)


# ----------------------------------------------------------------------------------------------
# validation


def _check_tensor(name: str, t, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")


def _check_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device} (the device of q)")


def _check_runnable_device(device: torch.device) -> None:
    if device.type == "cuda":
        return
    if device.type == "cpu" and _interpreting():
        _interpreter_loop_bounds_fix()
        return
    raise ValueError(f"q is on {device}: the Triton kernels need a CUDA device "
                     "(or TRITON_INTERPRET=1 for CPU tensors)")


def _check_qkv(q, k, v, names=("q", "k", "v"), ndim=3, kv_ndim=None) -> None:
    _check_tensor(names[0], q, ndim)
    for name, t in zip(names[1:], (k, v)):
        _check_tensor(name, t, ndim if kv_ndim is None else kv_ndim)
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"{names[0]} has dtype {q.dtype}; supported: float16, bfloat16")
    for name, t in zip(names[1:], (k, v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, expected {q.dtype} (the dtype of {names[0]})")
        _check_device(name, t, q.device)
    _check_runnable_device(q.device)
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"{names[1]} has head dim {k.shape[-1]}, expected {d} (the head dim of {names[0]})")
    if v.shape != k.shape:
        raise ValueError(f"{names[2]} has shape {tuple(v.shape)}, expected {tuple(k.shape)} (the shape of {names[1]})")
    if d < 1 or d > MAX_HEAD_DIM:
        raise ValueError(f"{names[0]} has head dim {d}; supported: 1..{MAX_HEAD_DIM}")
    hq, hkv = q.shape[-2], k.shape[-2]
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"{names[1]} has {hkv} heads; the {hq} heads of {names[0]} must be a multiple of it")


def _check_cu(name: str, cu, device: torch.device, batch: int | None) -> None:
    _check_tensor(name, cu, 1)
    if cu.dtype != torch.int32:
        raise ValueError(f"{name} must be int32, got {cu.dtype}")
    _check_device(name, cu, device)
    if cu.numel() < 1:
        raise ValueError(f"{name} must hold at least one entry (0)")
    if cu.numel() > 1 and cu.stride(0) != 1:
        # the kernels index it as a dense array; a copy here would defeat the per-object plan cache
        raise ValueError(f"{name} must be contiguous (stride 1), got stride {cu.stride(0)}; "
                         f"pass {name}.contiguous() (once, and reuse it)")
    if batch is not None and cu.numel() != batch + 1:
        raise ValueError(f"{name} has {cu.numel()} entries, expected {batch + 1} (as many as cu_seqlens_q)")


def _optional_length(name: str, val) -> int | None:
    """None, or a non-negative integer (numpy and 0-d torch integers accepted, as flash-attn does)."""
    if val is None:
        return None
    if isinstance(val, torch.Tensor):
        if val.numel() != 1 or val.dtype.is_floating_point:
            raise ValueError(f"{name} must be a non-negative int or None, got a tensor of shape {tuple(val.shape)}")
        val = int(val)  # a host sync for a device tensor: pass a Python int to avoid it
    try:
        out = operator.index(val)
    except TypeError:
        raise ValueError(f"{name} must be a non-negative int or None, got {val!r}") from None
    if isinstance(val, bool) or out < 0:
        raise ValueError(f"{name} must be a non-negative int or None, got {val!r}")
    return out


def _check_scale(softmax_scale, head_dim: int) -> float:
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise ValueError(f"softmax_scale must be a number or None, got {type(softmax_scale).__name__}")
    if not math.isfinite(softmax_scale):
        raise ValueError(f"softmax_scale must be finite, got {softmax_scale}")
    return float(softmax_scale)


def _check_cu_contents(name: str, cu: torch.Tensor, total: int, max_seqlen: int | None,
                       max_name: str) -> None:
    """The syncing check (one device-to-host copy of a few bytes), run once per cu_seqlens object."""
    vals = cu.detach().to("cpu", torch.int64)
    if int(vals[0]) != 0:
        raise ValueError(f"{name} must start at 0, got {int(vals[0])}")
    if vals.numel() > 1:
        lens = vals[1:] - vals[:-1]
        if bool((lens < 0).any()):
            bad = int(torch.nonzero(lens < 0)[0, 0])
            raise ValueError(f"{name} must be non-decreasing; entry {bad + 1} ({int(vals[bad + 1])}) "
                             f"is below entry {bad} ({int(vals[bad])})")
        longest = int(lens.max())
    else:
        longest = 0
    if int(vals[-1]) != total:
        raise ValueError(f"{name} must end at the number of tokens {total}, got {int(vals[-1])}")
    if max_seqlen is not None and max_seqlen < longest:
        raise ValueError(f"{max_name}={max_seqlen} is below the longest sequence ({longest})")


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


# ----------------------------------------------------------------------------------------------
# launches


def _fwd(q, k, v, plan: VarlenPlan, causal: bool, scale: float, cfg: dict):
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    o = torch.empty_like(q)
    lse = torch.empty((hq, total_q), device=q.device, dtype=torch.float32)
    n_slots = plan.n_slots
    if n_slots == 0 or total_q == 0:
        return o, lse
    grid = (n_slots * hq,)
    varlen_fwd_kernel[grid](
        q, k, v, o, lse, plan.cu_seqlens_q, plan.cu_seqlens_k, plan.work_seq, plan.work_block,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        lse.stride(0), scale * LOG2E, n_slots, hq, hq // hkv,
        HEAD_DIM=d, BLOCK_D=_block_d(d), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=causal,
        HEADS_INNER=plan.schedule == "longest_first", EVEN_D=_block_d(d) == d,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return o, lse


def _bwd(do, q, k, v, o, lse, plan: VarlenPlan, causal: bool, scale: float, cfg: dict):
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
    if n_kv_slots:
        varlen_bwd_dkdv_kernel[(n_kv_slots * hkv,)](
            q, k, v, do, lse, delta, dk, dv, plan.cu_seqlens_q, plan.cu_seqlens_k, kv_seq, kv_blk,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
            dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), lse.stride(0),
            scale, scale * LOG2E, hkv, group,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=cfg["DKDV_BLOCK_M"], BLOCK_N=cfg["DKDV_BLOCK_N"], CAUSAL=causal,
            EVEN_D=even_d, num_warps=cfg["DKDV_WARPS"], num_stages=cfg["DKDV_STAGES"])
    if plan.n_slots:
        varlen_bwd_dq_kernel[(plan.n_slots * hq,)](
            q, k, v, do, lse, delta, dq, plan.cu_seqlens_q, plan.cu_seqlens_k, plan.work_seq, plan.work_block,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
            dq.stride(0), dq.stride(1), lse.stride(0),
            scale, scale * LOG2E, hq, group,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=plan.block_m, BLOCK_N=cfg["DQ_BLOCK_N"], CAUSAL=causal,
            EVEN_D=even_d, num_warps=cfg["DQ_WARPS"], num_stages=cfg["DQ_STAGES"])
    return dq, dk, dv


def _contig(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, causal, scale, fwd_cfg, bwd_cfg):
        o, lse = _fwd(q, k, v, plan, causal, scale, fwd_cfg)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan, ctx.causal, ctx.scale, ctx.bwd_cfg = plan, causal, scale, bwd_cfg
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd(_contig(do), q, k, v, o, lse, ctx.plan, ctx.causal, ctx.scale, ctx.bwd_cfg)
        return dq, dk, dv, None, None, None, None, None


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=True,
                     softmax_scale=None, *, return_lse: bool = False, schedule: str = "longest_first",
                     check_inputs: bool = True, plan: VarlenPlan | None = None, config: dict | None = None,
                     bwd_config: dict | None = None):
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
    group = q.shape[1] // k.shape[1]
    bucket = tuning_bucket(d, q.dtype, causal, group)
    fwd_cfg = _resolve(FWD_KERNEL, bucket, default_fwd_config(d, q.dtype), config, q.device)
    bwd_cfg = _resolve(DKDV_KERNEL, bucket, default_bwd_config(d, q.dtype, capability=device_capability(q.device)),
                       bwd_config, q.device, "bwd_config")
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
    o, lse = _VarlenAttention.apply(q, k, v, plan, bool(causal), scale, fwd_cfg, bwd_cfg)
    return (o, lse) if return_lse else o


# ----------------------------------------------------------------------------------------------
# decode


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 8
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_split_tokens(batch: int, heads_kv: int, max_len: int, block_n: int, num_sms: int) -> int:
    """Tokens per KV split, from host-known sizes only (no look at the lengths: no sync).

    Aims at about 64 programs per SM if every sequence were at the cache's length ``max_len``; on a
    long-tailed batch (mean length ~1/8 of the cap in PolyTrace's rollouts) that still leaves ~8
    waves of active programs, while one split of 256-2048 tokens (128 KB-1 MB of K+V at D=128) is
    long enough that the fp32 partial it writes (4 B x D per query head) stays under ~3% of traffic.
    """
    want = _cdiv(max(batch * heads_kv * max_len, 1), 64 * num_sms)
    split = 1 << max(0, (want - 1).bit_length())
    split = min(max(split, 256), 2048)
    split = min(split, 1 << max(0, (max(max_len, 1) - 1).bit_length()))
    return max(block_n, _cdiv(split, block_n) * block_n)


def decode_attention(q, k_cache, v_cache, cache_seqlens, softmax_scale=None, *, block_table=None,
                     num_splits: int | None = None, return_lse: bool = False, config: dict | None = None):
    """One query token per sequence against its own KV length, split over the KV axis.

    q ``[B, Hq, D]`` (or ``[B, 1, Hq, D]``); contiguous cache ``k_cache``/``v_cache``
    ``[B, Lmax, Hkv, D]``, or a paged cache ``[num_pages, page_size, Hkv, D]`` with
    ``block_table`` int32 ``[B, max_pages]``; ``cache_seqlens`` int32 ``[B]`` (0..Lmax, or
    0..max_pages * page_size when paged; not checked on the host, which would be a sync: a
    sequence with a length outside that range gets NaN output and lse, and reads nothing).
    Returns ``out`` shaped like q (and lse ``[B, Hq]`` fp32 with ``return_lse``). ``num_splits``
    overrides the split count chosen from (B, Hkv, Lmax, SMs).
    """
    squeeze = False
    if isinstance(q, torch.Tensor) and q.dim() == 4:
        if q.shape[1] != 1:
            raise ValueError(f"q must be [B, Hq, D] or [B, 1, Hq, D], got shape {tuple(q.shape)}")
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
    else:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache has batch {k_cache.shape[0]}, expected {batch} (the batch of q)")
        page_size = 1
        max_len = k_cache.shape[1]
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")
    hkv = k_cache.shape[2]
    group = hq // hkv
    scale = _check_scale(softmax_scale, d)
    cfg = _resolve(DECODE_KERNEL, f"d{d}-g{group}-{'paged' if paged else 'contig'}",
                   default_decode_config(d), config, q.device)
    block_n = cfg["BLOCK_N"]
    if num_splits is not None:
        split_tokens = max(block_n, _cdiv(_cdiv(max(max_len, 1), num_splits), block_n) * block_n)
    elif cfg["SPLIT_TOKENS"]:
        split_tokens = max(block_n, _cdiv(cfg["SPLIT_TOKENS"], block_n) * block_n)
    else:
        split_tokens = choose_split_tokens(batch, hkv, max_len, block_n, _num_sms(q.device))
    n_splits = max(1, _cdiv(max_len, split_tokens))
    q = _contig(q)
    k_cache, v_cache = _contig(k_cache), _contig(v_cache)
    out = torch.empty_like(q)
    lse = torch.empty((batch, hq), device=q.device, dtype=torch.float32)
    if batch == 0:
        return (out, lse) if return_lse else out
    block_d = _block_d(d)
    block_g = max(16, 1 << (group - 1).bit_length())
    single = n_splits == 1
    if single:
        o_part, lse_part = out, lse
        part_strides = (0, 0, 0)
        lse_strides = (lse.stride(0), lse.stride(1))
    else:
        o_part = torch.empty((batch, hq, n_splits, d), device=q.device, dtype=torch.float32)
        lse_part = torch.empty((batch, hq, n_splits), device=q.device, dtype=torch.float32)
        part_strides = (o_part.stride(0), o_part.stride(1), o_part.stride(2))
        lse_strides = (lse_part.stride(0), lse_part.stride(1))
    bt = block_table if paged else cache_seqlens  # placeholder pointer when not paged
    decode_split_kernel[(n_splits, batch * hkv)](
        q, k_cache, v_cache, cache_seqlens, bt, out, o_part, lse_part,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        *part_strides, *lse_strides, block_table.stride(0) if paged else 0,
        scale * LOG2E, hkv, group, split_tokens, max_len,
        HEAD_DIM=d, BLOCK_D=block_d, BLOCK_G=block_g, BLOCK_N=block_n, PAGE_SIZE=page_size, PAGED=paged,
        SINGLE_SPLIT=single, EVEN_D=block_d == d, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if not single:
        pow2 = 1 << (n_splits - 1).bit_length()
        decode_combine_kernel[(batch * hq,)](
            o_part, lse_part, cache_seqlens, out, lse,
            o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
            out.stride(0), out.stride(1), lse.stride(0), hq, split_tokens, max_len,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_S=min(16, pow2), N_SPLITS_POW2=pow2, num_warps=4)
    if squeeze:
        out = out[:, None]
    return (out, lse) if return_lse else out
