"""Attention over packed variable-length sequences and split-KV decode, on PolyTrace shapes.

The cases are declared in ``suites/attention_cases.py`` (varlen forward and backward) and
``suites/decode_cases.py`` (decode across the KV lengths a rollout visits); the tests below are
generated from that registry (``suites/registry.py``).
"""

from __future__ import annotations

import math

from polytrace_kernels.attention import spec

from . import registry

CASES = registry.suite_cases("attention")
test_varlen_fwd = registry.make_test([c for c in CASES if c.meta.kernel == "varlen_attention"
                                      and c.meta.mode == "fwd"], "test_varlen_fwd")
test_varlen_bwd = registry.make_test([c for c in CASES if c.meta.kernel == "varlen_attention"
                                      and c.meta.mode == "bwd"], "test_varlen_bwd")
test_decode = registry.make_test([c for c in CASES if c.meta.kernel == "decode_attention"], "test_decode")


def test_flops_convention():
    """The FLOPs the suite divides by: 4 * D * Hq * sum(L^2) / 2 for causal (not timed)."""
    assert spec.varlen_attention_flops([3, 4], 2, 8, causal=True) == 4 * 8 * 2 * (9 + 16) / 2
    assert math.isclose(spec.varlen_attention_flops([10], 1, 16, mode="bwd"),
                        2.5 * spec.varlen_attention_flops([10], 1, 16))
