"""A provider whose computation *is* torch's 16-bit yardstick (``logprob_cases.TORCH_SAME``:
torch-eager, torch-compile, bare-matmul) is judged against the fp64 truth, never against itself:
compared with its own result every error passes (the ratio is 1) and a wrong torch baseline would
look exact. Run on the suites' CPU cases, through each case's own ``compare``."""

from __future__ import annotations

import pytest
import torch

from suites import logprob_cases, registry

# every such case but torch.compile's (a GPU's; minutes on a CPU), the fused LM-head cases included:
# the suite skips their torch side on a CPU to save time, but they run there at these tiny shapes
SELF = [c for c in registry.suite_cases("logprob") if c.meta.provider in logprob_cases.TORCH_SAME
        and c.meta.provider != "torch-compile"]


@pytest.mark.parametrize("case", SELF, ids=[c.id for c in SELF])
def test_torch_is_never_its_own_yardstick(case):
    inputs = case.make_inputs(torch.device("cpu"), 0)
    truth = case.truth(inputs)
    out = case.bind(inputs, registry.kernels_module()).fn()
    results = case.compare(out, truth, inputs)
    sixteen = [r for r in results if not r.name.endswith(" bias")]
    assert sixteen, [r.name for r in results]
    relative = [f"{r.name}: {r.rule}" for r in sixteen if "x torch" in r.rule]
    assert not relative, relative  # judged by the 16-bit model against fp64, or as one rounding of fp32
    if case.provider.available() is None:  # CPU fp16 matmul gradients miss the 16-bit model (2.2x): GPU-only
        assert all(r.verdict in ("pass", "16-bit-only") for r in results), [r.detail for r in results]


def test_the_self_cases_exist():
    """Both 16-bit dtypes and both modes reach the check (an empty list would pass vacuously)."""
    seen = {(c.meta.shape.get("dtype"), c.meta.mode) for c in SELF}
    assert {("bf16", "fwd"), ("fp16", "fwd"), ("bf16", "fwd+bwd"), ("fp16", "fwd+bwd")} <= seen, seen
