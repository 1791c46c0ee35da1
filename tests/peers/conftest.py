"""The peers' own tests run against our kernels (tests/peers/).

Each module adapts one peer test file at a pinned commit (named in its docstring) through thin
shims; the peer's reference, tolerances and assertions are kept. Without CUDA the kernels run in
Triton's interpreter (tests/conftest.py) at the small shapes of each module's ``CPU`` grids, bf16
cases only on a GPU (Triton 3.9's interpreter multiplies bf16 bit patterns in tl.dot,
triton-lang/triton#11584); with CUDA the modules use the peer's own (full) grids.
"""

from __future__ import annotations

FLASH_ATTN_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"


def pytest_report_header(config):
    return f"peers: flash-attention tests/test_flash_attn.py at {FLASH_ATTN_COMMIT}"
