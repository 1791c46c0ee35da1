"""Helpers shared by the ``test_kernel_bad_input_*.py`` files (one per kernel family)."""

from __future__ import annotations

import pytest
import torch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _raises(fn, argname: str) -> None:
    with pytest.raises(ValueError) as info:
        fn()
    assert argname in str(info.value), str(info.value)


def _close(out, ref, tol):
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), (out, ref)
    keep = ~torch.isnan(ref)
    torch.testing.assert_close(out[keep], ref[keep], atol=tol, rtol=tol)


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
