"""Fused token log-probabilities and entropies for RL training.

Every RL step computes the log-probabilities of the sampled tokens several times (old policy,
reference policy, and the actor update with gradients), usually with the entropy. The naive
``log_softmax(logits.float()).gather(...)`` materialises fp32 [T, V] tensors (V = 128k-152k) and
reads the logits several times. Here:

- ``token_logprobs(logits, tokens, temperature=1.0, return_entropy=False, ignore_index=-100)``:
  one read of the logits in the forward (online log-sum-exp over vocabulary blocks), one read and
  one write in the backward (from the saved log-sum-exp and entropy).
- ``linear_token_logprobs(hidden, weight, tokens, ...)``: the same from the hidden states and the
  LM-head weight, never holding [T, V] logits: the forward is a matmul whose epilogue keeps the
  running statistics; the backward recomputes logits tile by tile, one vocabulary chunk at a time.
- ``vocab_parallel_token_logprobs(logits_shard, tokens, vocab_start, ..., group=...)``: the same
  for a TP-sharded LM head (each rank holds a vocabulary shard; two all-reduces per call).
- ``token_logprobs_reference`` / ``linear_token_logprobs_reference``: pure torch (fp32 upcast by
  default), the tests' ground truth (in fp64) and the suites' eager baseline.

Outputs are fp32 [T]. Ignored positions (``tokens == ignore_index``) give 0 and no gradient.
Bad input (shape, dtype, device, layout, token range) raises ``ValueError`` naming the argument.

Batch invariance
----------------
The log-prob (and entropy) of a row is bitwise identical whether it is computed alone, in a batch
of other rows, or at another offset of a packed batch, on the same device with the same launch
config. This is what RL teams need for rollout and training to agree: a sequence's log-probs must
not change with how the trainer packed it. How it holds:

- ``token_logprobs``: one program per row, reducing over fixed vocabulary blocks in a fixed
  order; nothing is split across programs, whatever T is. The launch config comes from a bucket
  of (dtype, vocabulary size), never from T (``tuning_bucket``). Triton picks the register layout
  (and so the in-block summation order) from the alignment it can prove, so the kernel variant is
  chosen from the vocabulary size alone: V a multiple of 16 (every production vocabulary) uses
  the aligned variant, and a view that is not 16-byte aligned is copied first; any other V uses
  a variant compiled without alignment specialisation.
- ``linear_token_logprobs``: the vocabulary splits and tile sizes depend on (dtype, V, H) only;
  each logit is one fp32 dot product over H in fixed K-steps (no split-K), whichever tile row it
  lands in; the splits are merged in a fixed order by an elementwise kernel.
- Not covered: a different GPU model, Triton version or explicit ``config`` changes the bits
  (not the accuracy). The backward is deterministic run to run but not batch invariant (its
  d(hidden) chunking depends on T).
"""

from __future__ import annotations

from .._lazy import lazy_exports

# The public names, imported on first use (PEP 562): ``from polytrace_kernels.logprob import spec``
# (FLOPs and bytes, pure Python) must not pull in torch and triton, which ``api`` and ``reference`` do.
_LAZY = {
    "LINEAR_TUNING_KERNEL": "api",
    "LINEAR_TUNING_SPACE": "api",
    "TUNING_KERNEL": "api",
    "TUNING_SPACE": "api",
    "default_linear_bwd_config": "api",
    "default_linear_fwd_config": "api",
    "default_logits_bwd_config": "api",
    "default_logits_fwd_config": "api",
    "linear_token_logprobs": "api",
    "linear_token_logprobs_reference": "reference",
    "linear_tuning_bucket": "api",
    "token_logprobs": "api",
    "token_logprobs_reference": "reference",
    "tuning_bucket": "api",
    "vocab_parallel_token_logprobs": "parallel",
}

__all__ = [
    "LINEAR_TUNING_KERNEL",
    "LINEAR_TUNING_SPACE",
    "TUNING_KERNEL",
    "TUNING_SPACE",
    "default_linear_bwd_config",
    "default_linear_fwd_config",
    "default_logits_bwd_config",
    "default_logits_fwd_config",
    "linear_token_logprobs",
    "linear_token_logprobs_reference",
    "linear_tuning_bucket",
    "token_logprobs",
    "token_logprobs_reference",
    "tuning_bucket",
    "vocab_parallel_token_logprobs",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
