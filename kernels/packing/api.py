"""pack / unpack: right-padded [B, S, ...] <-> packed [T, ...] with cu_seqlens, in Triton.

``pack(padded, lengths)`` -> ``(packed, cu_seqlens, max_seqlen)``; ``unpack(packed, cu_seqlens,
max_len)`` -> padded with zeros. Any trailing feature shape; autograd through both (each one's
backward is the other). Host syncs: computing ``cu_seqlens`` is on the device; the output size
``T`` and ``max_seqlen`` need the lengths on the host, so a caller that already knows them (the
planner does) passes ``total_tokens=`` and ``max_seqlen=`` and nothing waits for the GPU.
Without them, ``pack`` reads the lengths once (one sync) and validates them.
"""

from __future__ import annotations

import operator

import torch
import triton

from .kernel import _pack_kernel, _unpack_kernel

try:  # the one reading of TRITON_INTERPRET (kernels/_interpreter.py); vendored alone: triton's own knob
    from .._interpreter import check_runnable as _check_runnable
except ImportError:  # pragma: no cover - exercised only when vendored
    def _check_runnable(tensor, name: str) -> None:
        from triton import knobs

        if tensor.device.type != "cuda" and not (tensor.device.type == "cpu" and knobs.runtime.interpret):
            raise ValueError(f"{name} is on {tensor.device}: these Triton kernels need CUDA tensors, or CPU "
                             "tensors under the Triton interpreter (TRITON_INTERPRET=1)")

DEFAULT_CONFIG = {"BLOCK_T": 16, "BLOCK_F": 256, "num_warps": 4}
TUNING_SPACE = {"BLOCK_T": [4, 8, 16, 32], "BLOCK_F": [64, 128, 256, 512, 1024], "num_warps": [2, 4, 8]}


def tuning_bucket(features: int, dtype: torch.dtype) -> str:
    """Tuned configs are keyed by feature width (next power of two, capped) and dtype."""
    f = 1
    while f < features and f < 16384:
        f *= 2
    return f"F{f}-{str(dtype).replace('torch.', '')}"


def default_config(features: int, dtype: torch.dtype, capability: tuple[int, int] | None = None) -> dict:
    """The launch config for rows of ``features`` elements: the same on every GPU (``capability``)
    and in the interpreter, so the CPU tests run exactly the GPU default."""
    cfg = dict(DEFAULT_CONFIG)
    # narrow rows: more rows per program so each moves >= ~4 KB
    f = max(1, features)
    block_f = 1
    while block_f < f and block_f < DEFAULT_CONFIG["BLOCK_F"]:
        block_f *= 2
    cfg["BLOCK_F"] = max(16, block_f)
    cfg["BLOCK_T"] = max(16, min(256, 4096 // cfg["BLOCK_F"]))
    return cfg


def _config(kernel: str, features: int, dtype: torch.dtype, device: torch.device, config: dict | None) -> dict:
    if config is not None:
        merged = dict(DEFAULT_CONFIG)
        merged.update(config)
        return merged
    cfg = default_config(features, dtype)
    if device.type == "cuda":
        try:
            from .._tuning import lookup
        except ImportError:
            return cfg
        cfg = lookup(kernel, tuning_bucket(features, dtype), torch.cuda.get_device_name(device), cfg)
    return cfg


def cu_seqlens_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """[B] lengths -> [B+1] int32 prefix sums, on the lengths' device (no host sync)."""
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    torch.cumsum(lengths.reshape(-1), 0, dtype=torch.int32, out=cu[1:])
    return cu


def _as_size(name: str, value) -> int | None:
    """None, or a non-negative integer (numpy and Python ints; not bool, not float)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}") from None
    if out < 0:
        raise ValueError(f"{name} must be a non-negative int, got {out}")
    return out


def _check_data_device(name: str, t: torch.Tensor) -> None:
    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (no data); pass a CPU or CUDA tensor")


def _launch_pack(padded3: torch.Tensor, cu: torch.Tensor, total: int, config: dict | None) -> torch.Tensor:
    B, S, F = padded3.shape
    packed = padded3.new_empty((total, F))
    if total == 0 or B == 0 or F == 0:
        return packed
    _check_runnable(padded3, "padded")  # also here: the backward of unpack launches this

    cfg = _config("pack", F, padded3.dtype, padded3.device, config)
    grid = (B, triton.cdiv(S, cfg["BLOCK_T"]), triton.cdiv(F, cfg["BLOCK_F"]))
    _pack_kernel[grid](padded3, packed, cu, total, S, F, padded3.stride(0), padded3.stride(1),
                       BLOCK_T=cfg["BLOCK_T"], BLOCK_F=cfg["BLOCK_F"], num_warps=cfg["num_warps"])
    return packed


def _launch_unpack(packed2: torch.Tensor, cu: torch.Tensor, max_len: int, config: dict | None) -> torch.Tensor:
    T, F = packed2.shape
    B = cu.numel() - 1
    out = packed2.new_empty((B, max_len, F))
    if B == 0 or max_len == 0 or F == 0:
        return out
    _check_runnable(packed2, "packed")

    cfg = _config("unpack", F, packed2.dtype, packed2.device, config)
    grid = (B, triton.cdiv(max_len, cfg["BLOCK_T"]), triton.cdiv(F, cfg["BLOCK_F"]))
    _unpack_kernel[grid](packed2, out, cu, T, max_len, F, out.stride(0), out.stride(1),
                         BLOCK_T=cfg["BLOCK_T"], BLOCK_F=cfg["BLOCK_F"], num_warps=cfg["num_warps"])
    return out


class _Pack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, padded3, cu, total, config):
        ctx.save_for_backward(cu)
        ctx.S = padded3.shape[1]
        ctx.config = config
        return _launch_pack(padded3.contiguous(), cu, total, config)

    @staticmethod
    def backward(ctx, grad):
        (cu,) = ctx.saved_tensors
        return _launch_unpack(grad.contiguous(), cu, ctx.S, ctx.config), None, None, None


class _Unpack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, packed2, cu, max_len, config):
        ctx.save_for_backward(cu)
        ctx.T = packed2.shape[0]
        ctx.config = config
        return _launch_unpack(packed2.contiguous(), cu, max_len, config)

    @staticmethod
    def backward(ctx, grad):
        (cu,) = ctx.saved_tensors
        return _launch_pack(grad.contiguous(), cu, ctx.T, ctx.config), None, None, None


def pack(padded: torch.Tensor, lengths: torch.Tensor, *, total_tokens: int | None = None,
         max_seqlen: int | None = None, config: dict | None = None):
    """Pack a right-padded ``[B, S, ...]`` tensor into ``[T, ...]``.

    ``lengths``: ``[B]`` integer tensor (valid rows per sequence, each <= S), on any device.
    Returns ``(packed, cu_seqlens int32 [B+1], max_seqlen: int)``. Pass ``total_tokens`` (= T) and
    ``max_seqlen`` when known to avoid the one host sync. Lengths on the CPU are always checked
    (no sync), against both; lengths on the GPU with both given are trusted: a wrong
    ``total_tokens`` then gives a wrong (never out-of-bounds) result."""
    if not isinstance(padded, torch.Tensor) or padded.dim() < 2:
        raise ValueError(f"padded must be a tensor of shape [B, S, ...], got {getattr(padded, 'shape', padded)!r}")
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.numel() != padded.shape[0]:
        raise ValueError(f"lengths must be a 1-D tensor of {padded.shape[0]} entries, "
                         f"got {getattr(lengths, 'shape', lengths)!r}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
        raise ValueError(f"lengths must hold integers, got dtype {lengths.dtype}")
    _check_data_device("padded", padded)
    _check_data_device("lengths", lengths)
    _check_runnable(padded, "padded")
    total_tokens = _as_size("total_tokens", total_tokens)
    max_seqlen = _as_size("max_seqlen", max_seqlen)
    B, S = padded.shape[0], padded.shape[1]
    if lengths.device.type == "cpu" or total_tokens is None or max_seqlen is None:
        # CPU lengths: free to check. Device lengths: the one host sync, only when a size is missing.
        host = lengths.to("cpu", torch.int64)
        if host.numel() and (int(host.min()) < 0 or int(host.max()) > S):
            raise ValueError(f"lengths must lie in [0, {S}] (padded.shape[1]), got "
                             f"[{int(host.min())}, {int(host.max())}]")
        real_total = int(host.sum())
        real_max = int(host.max()) if host.numel() else 0
        if total_tokens is not None and total_tokens != real_total:
            raise ValueError(f"total_tokens={total_tokens} but lengths sum to {real_total}")
        if max_seqlen is not None and max_seqlen < real_max:
            raise ValueError(f"max_seqlen={max_seqlen} is below the longest length {real_max}")
        total_tokens = real_total if total_tokens is None else total_tokens
        max_seqlen = real_max if max_seqlen is None else max_seqlen
    lengths = lengths.to(padded.device)
    cu = cu_seqlens_from_lengths(lengths)
    trailing = tuple(padded.shape[2:])
    features = 1
    for d in trailing:
        features *= d
    padded3 = padded.reshape(B, S, features)
    packed = _Pack.apply(padded3, cu, int(total_tokens), config)
    return packed.reshape((int(total_tokens),) + trailing), cu, int(max_seqlen)


def unpack(packed: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int, *, config: dict | None = None):
    """Scatter ``[T, ...]`` back to ``[B, max_len, ...]`` (zeros past each length; rows of a
    sequence longer than ``max_len`` are cut). No host sync: ``cu_seqlens`` on the CPU is checked
    (0, non-decreasing, ends at T), one on the GPU is not (the kernel never reads outside
    ``packed`` whatever it holds)."""
    if not isinstance(packed, torch.Tensor) or packed.dim() < 1:
        raise ValueError(f"packed must be a tensor of shape [T, ...], got {getattr(packed, 'shape', packed)!r}")
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        raise ValueError("cu_seqlens must be a 1-D tensor of B+1 offsets")
    if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype == torch.bool:
        raise ValueError(f"cu_seqlens must hold integers, got dtype {cu_seqlens.dtype}")
    _check_data_device("packed", packed)
    _check_data_device("cu_seqlens", cu_seqlens)
    _check_runnable(packed, "packed")
    try:
        max_len = _as_size("max_len", max_len)
    except ValueError:
        raise ValueError(f"max_len must be an int >= 0, got {max_len!r}") from None
    if max_len is None:
        raise ValueError("max_len must be an int >= 0, got None")
    if cu_seqlens.device.type == "cpu":
        vals = cu_seqlens.to(torch.int64)
        if int(vals[0]) != 0:
            raise ValueError(f"cu_seqlens must start at 0, got {int(vals[0])}")
        if vals.numel() > 1 and bool((vals[1:] < vals[:-1]).any()):
            raise ValueError("cu_seqlens must be non-decreasing")
        if int(vals[-1]) != packed.shape[0]:
            raise ValueError(f"cu_seqlens must end at the number of packed rows {packed.shape[0]}, "
                             f"got {int(vals[-1])}")
    # the kernel reads it as a dense int32 array
    cu = cu_seqlens.to(device=packed.device, dtype=torch.int32).contiguous()
    trailing = tuple(packed.shape[1:])
    features = 1
    for d in trailing:
        features *= d
    packed2 = packed.reshape(packed.shape[0], features)
    out = _Unpack.apply(packed2, cu, max_len, config)
    return out.reshape((cu.numel() - 1, max_len) + trailing)
