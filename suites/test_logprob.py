"""Token log-probs and entropies (kernels/logprob) against torch and the peers, on PolyTrace shapes.

The cases (shapes, providers, inputs, fp64 checks) are declared in ``suites/logprob_cases.py``;
the tests below are generated from that registry (``suites/registry.py``).
"""

from __future__ import annotations

from polytrace_kernels.logprob import spec

from . import registry
from .logprob_cases import GOAL_TOKENS, LM_HEADS, VOCABS

CASES = registry.suite_cases("logprob")
test_token_logprobs = registry.make_test([c for c in CASES if c.meta.kernel == "token_logprobs"],
                                         "test_token_logprobs")
test_linear_token_logprobs = registry.make_test([c for c in CASES if c.meta.kernel == "linear_token_logprobs"],
                                                "test_linear_token_logprobs")


def test_goal_conventions():
    """What the goals are measured against (not timed): the fused kernel's FLOPs are those of the
    bare matmul, and its memory goal is 1/8 of the eager logits + fp32 copy + log-softmax."""
    t, v, h = GOAL_TOKENS, VOCABS["qwen2.5"], LM_HEADS["qwen2.5-7b"][1]
    assert spec.matmul_flops(t, v, h, "fwd") == 2.0 * t * v * h
    assert spec.fused_memory_goal_bytes(t, v) == t * v * (2 + 4 + 4) / 8
