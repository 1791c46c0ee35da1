"""tests/_interpreter_patch_once.py: in the interpreter a launch patches ``triton.language`` once, its
nested ``@triton.jit`` helpers do not walk it again, and the kernel computes what it computed."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from _interpreter_patch_once import install

from polytrace_kernels._interpreter import interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="the Triton interpreter only")


@triton.jit
def _twice(x):
    return x * 2.0


@triton.jit
def _plus_three_nested(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(3):  # three nested calls per program
        x = _twice(x)
    tl.store(y_ptr + offs, x + 3.0)


@triton.jit
def _plus_three_flat(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 8.0 + 3.0)


def _walks(monkeypatch, kernel) -> tuple[int, torch.Tensor]:
    from triton.runtime import interpreter

    calls = []
    walk = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a, **k: calls.append(1) or walk(*a, **k))
    x = torch.arange(32, dtype=torch.float32)
    y = torch.empty_like(x)
    kernel[(4,)](x, y, BLOCK=8)
    return len(calls), y


def test_nested_helpers_do_not_walk_the_language_again_and_compute_the_same(monkeypatch):
    assert install() and install()  # this Triton's interpreter has the shape it wraps; idempotent
    flat, y_flat = _walks(monkeypatch, _plus_three_flat)
    nested, y_nested = _walks(monkeypatch, _plus_three_nested)
    assert flat > 0 and nested == flat  # 12 nested calls, no walk beyond the launch's own
    expect = torch.arange(32, dtype=torch.float32) * 8.0 + 3.0
    assert torch.equal(y_flat, expect) and torch.equal(y_nested, expect)
