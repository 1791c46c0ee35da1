"""Argument checks of the log-prob family's public functions: matrices, devices, tokens, scalars
and the token range (the one host sync). Each raises ``ValueError`` naming the argument; apart
from ``api.py`` so the launch code stays short.
"""

from __future__ import annotations

import math
import numbers

import torch

from .configs import _check_runnable

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_TOKEN_DTYPES = (torch.int32, torch.int64)

# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def _check_matrix(x, name: str, dims: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D {dims}, got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name} must be bfloat16, float16 or float32, got {x.dtype}")
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension (stride 1), got strides "
                         f"{tuple(x.stride())}; pass {name}.contiguous()")
    if x.shape[0] > 1 and x.stride(0) < x.shape[1]:
        raise ValueError(f"{name} rows overlap (row stride {x.stride(0)} < {x.shape[1]}); pass {name}.contiguous()")


def _check_device(x: torch.Tensor, name: str) -> None:
    _check_runnable(x, name)


def _check_tokens(tokens, n_rows: int, like: torch.Tensor, like_name: str) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dim() != 1 or tokens.shape[0] != n_rows:
        raise ValueError(f"tokens must have shape ({n_rows},) to match {like_name}, got {tuple(tokens.shape)}")
    if tokens.dtype not in _TOKEN_DTYPES:
        raise ValueError(f"tokens must be int32 or int64, got {tokens.dtype}")
    if tokens.device != like.device:
        raise ValueError(f"tokens is on {tokens.device} but {like_name} is on {like.device}")


def _check_scalars(temperature, ignore_index) -> tuple[float, int]:
    # numbers.Real / Integral take numpy scalars too; a tensor is refused (reading it is a sync)
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise ValueError(f"temperature must be a Python number, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise ValueError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    return float(temperature), int(ignore_index)


def _check_softcap(softcap) -> float | None:
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise ValueError(f"softcap must be a Python number or None, got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap must be positive and finite (or None for no cap), got {softcap}")
    return float(softcap)


def _check_token_range(tokens: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    """One device-to-host sync. Skipped with ``check_tokens=False``; the kernels then return NaN
    for an out-of-range token (never read outside the row, never a plausible number)."""
    if tokens.numel() == 0:
        return
    bad = ((tokens < 0) | (tokens >= vocab_size)) & (tokens != ignore_index)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"tokens[{i}] = {int(tokens[i])} is outside [0, {vocab_size}) and is not "
                         f"ignore_index ({ignore_index})")


def _check_logits_call(logits, tokens, temperature, ignore_index, softcap, dims: str):
    """The checks of a call on materialised logits (``token_logprobs``, the vocabulary-parallel
    one): returns the normalised (temperature, ignore_index, softcap)."""
    _check_matrix(logits, "logits", dims)
    _check_device(logits, "logits")
    _check_tokens(tokens, logits.shape[0], logits, "logits")
    temperature, ignore_index = _check_scalars(temperature, ignore_index)
    softcap = _check_softcap(softcap)
    if logits.shape[1] == 0:
        raise ValueError(f"logits must have at least one vocabulary column, got shape {tuple(logits.shape)}")
    return temperature, ignore_index, softcap
