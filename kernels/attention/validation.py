"""Argument checks of the attention family's public functions: tensors, dtypes, devices, head
counts, ``cu_seqlens`` layout and contents, lengths and the softmax scale. Each raises
``ValueError`` naming the argument; apart from ``api.py`` so the launch code stays short.
"""

from __future__ import annotations

import math
import numbers
import operator
import weakref

import torch

from .configs import _check_runnable

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256

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
    _check_runnable(q, names[0])
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


# cache_seqlens objects already checked against a capacity, with their in-place version counter:
# the check is a device-to-host copy (a sync), paid once per tensor state, not per decode call of
# every layer (a 64-layer model reads the same cache_seqlens 64 times per token).
_SEQLENS_CHECKED: dict = {}
_SEQLENS_CHECKED_SIZE = 16


def _check_cache_seqlens(cache_seqlens: torch.Tensor, capacity: int, where: str) -> None:
    """Every length in [0, capacity]; ``where`` says what sets the capacity (block_table or k_cache).
    Skipped while a CUDA graph is being captured (a sync is illegal there): the kernels' own guard
    (NaN for that sequence, nothing read) still holds."""
    if cache_seqlens.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    key = (id(cache_seqlens), capacity)
    hit = _SEQLENS_CHECKED.get(key)
    if hit is not None and hit[0]() is cache_seqlens and hit[1] == cache_seqlens._version:
        return
    vals = cache_seqlens.detach().to("cpu", torch.int64)
    bad = torch.nonzero((vals < 0) | (vals > capacity))
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"cache_seqlens[{i}] = {int(vals[i])} is outside 0..{capacity}, the capacity of {where}")
    if len(_SEQLENS_CHECKED) >= _SEQLENS_CHECKED_SIZE:
        _SEQLENS_CHECKED.clear()
    _SEQLENS_CHECKED[key] = (weakref.ref(cache_seqlens), cache_seqlens._version)


def _check_softcap(softcap) -> float:
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise ValueError(f"softcap must be a number (0 for none), got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap must be finite and >= 0 (0 for none), got {softcap}")
    return float(softcap)


def _check_window(window_size) -> tuple[int, int] | None:
    """flash-attn's ``(left, right)``, a negative side unbounded; None when both are."""
    try:
        left, right = (operator.index(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair of ints (left, right), -1 for unbounded, got "
                         f"{window_size!r}") from None
    if any(isinstance(w, bool) for w in window_size):
        raise ValueError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    return None if left < 0 and right < 0 else (left, right)
