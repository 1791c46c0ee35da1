"""Pure-torch references: the tests' ground truth (in fp64) and the suites' eager baseline (fp32).

``compute_dtype`` is the dtype the arithmetic runs in: ``torch.float32`` (default, the usual fp32
upcast of RL trainers), ``torch.float64`` for ground truth, or ``None`` for the input's own dtype
(torch's same-dtype error, the yardstick of the tests). Outputs are in ``compute_dtype``.
"""

from __future__ import annotations

import torch


def _logprobs_from_logits(x: torch.Tensor, tokens: torch.Tensor, return_entropy: bool, ignore_index: int):
    logp = torch.log_softmax(x, dim=-1)
    ignored = tokens == ignore_index
    index = torch.where(ignored, torch.zeros_like(tokens), tokens).long()
    logprob = logp.gather(-1, index.unsqueeze(-1)).squeeze(-1).masked_fill(ignored, 0.0)
    if not return_entropy:
        return logprob
    p = logp.exp()
    # 0 * log 0 = 0 for masked (-inf) logits, without hiding NaN (a `p > 0` test would) and
    # without the NaN gradient a `where` over p * logp gives at p = 0
    plogp = p * logp.masked_fill(p == 0, 0.0)
    entropy = (-plogp.sum(-1)).masked_fill(ignored, 0.0)
    return logprob, entropy


def token_logprobs_reference(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                             return_entropy: bool = False, ignore_index: int = -100,
                             compute_dtype: torch.dtype | None = torch.float32, softcap: float | None = None):
    """log_softmax(logits / temperature) at ``tokens`` (and the entropy), eagerly: materialises
    the [T, V] log-probabilities in ``compute_dtype``. ``softcap``: logits -> softcap * tanh(logits
    / softcap) first (Gemma 2), as HF's Gemma2 model and verl apply it."""
    x = logits if compute_dtype is None else logits.to(compute_dtype)
    if softcap is not None:
        x = torch.tanh(x / softcap) * softcap
    if temperature != 1.0:
        x = x / temperature
    return _logprobs_from_logits(x, tokens, return_entropy, ignore_index)


def linear_token_logprobs_reference(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor,
                                    temperature: float = 1.0, return_entropy: bool = False,
                                    ignore_index: int = -100,
                                    compute_dtype: torch.dtype | None = torch.float32,
                                    matmul_dtype: torch.dtype | None = None, softcap: float | None = None):
    """The same from hidden states and the LM-head weight [V, H]. The logits ``hidden @ weight.T``
    are computed in ``matmul_dtype`` (default: the input dtype, as a model's lm_head does; fp64
    for ground truth), then capped (``softcap``) and the softmax run in ``compute_dtype`` as above."""
    if matmul_dtype is not None:
        hidden, weight = hidden.to(matmul_dtype), weight.to(matmul_dtype)
    logits = hidden @ weight.t()
    return token_logprobs_reference(logits, tokens, temperature, return_entropy, ignore_index, compute_dtype,
                                    softcap)
