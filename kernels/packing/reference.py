"""Pure-torch references for pack/unpack (boolean-mask indexing, as flash-attention's
``unpad_input``/``pad_input`` do)."""

from __future__ import annotations

import torch


def cu_seqlens_reference(lengths: torch.Tensor) -> torch.Tensor:
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    cu[1:] = torch.cumsum(lengths.to(torch.int64), 0).to(torch.int32)
    return cu


def pack_reference(padded: torch.Tensor, lengths: torch.Tensor):
    """[B, S, ...] right-padded + lengths [B] -> (packed [T, ...], cu_seqlens [B+1] int32, max_seqlen)."""
    S = padded.shape[1]
    mask = torch.arange(S, device=padded.device)[None, :] < lengths.to(padded.device)[:, None]
    packed = padded[mask]
    return packed, cu_seqlens_reference(lengths), int(lengths.max()) if lengths.numel() else 0


def unpack_reference(packed: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int) -> torch.Tensor:
    """packed [T, ...] + cu_seqlens [B+1] -> [B, max_len, ...] with zeros past each length."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64)
    B = lengths.numel()
    out = packed.new_zeros((B, max_len) + tuple(packed.shape[1:]))
    mask = torch.arange(max_len, device=packed.device)[None, :] < lengths[:, None]
    out[mask] = packed
    return out
