"""Bytes moved by pack/unpack (pure Python; no torch or triton import). Both are copies: no FLOPs.

pack reads the T valid rows of the padded tensor and writes them packed (padding rows are never
read), plus the B+1 int32 cu_seqlens. unpack reads T packed rows and writes all B*S padded rows
(zeros included)."""

from __future__ import annotations

import math


def features(trailing_shape) -> int:
    return int(math.prod(trailing_shape)) if trailing_shape else 1


def pack_bytes(total_tokens: int, batch: int, trailing_shape=(), elem_bytes: int = 2) -> int:
    f = features(trailing_shape)
    return 2 * total_tokens * f * elem_bytes + 4 * (batch + 1)


def unpack_bytes(total_tokens: int, batch: int, max_len: int, trailing_shape=(), elem_bytes: int = 2) -> int:
    f = features(trailing_shape)
    return total_tokens * f * elem_bytes + batch * max_len * f * elem_bytes + 4 * (batch + 1)


def pack_flops(*_args, **_kwargs) -> int:
    return 0
