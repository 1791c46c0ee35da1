"""Bytes moved by the toy ``double`` (pure Python: no torch or triton): x read once, y written once."""

from __future__ import annotations

FP32 = 4


def double_bytes(tokens, features: int):
    """[tokens, features] fp32 in, the same out; numbers or arrays (the step model's ranks at once)."""
    return 2.0 * tokens * features * FP32
