"""Vocabulary-parallel token log-probs and entropies for a TP-sharded LM head (Megatron's
vocab-parallel cross entropy; verl's ``dist_process_group``): each rank of a torch.distributed
process group holds the logits of its own vocabulary columns, [T, V_r] for columns
[vocab_start, vocab_start + V_r), and every rank gets the log-probs and entropies of the whole
vocabulary, [T] in fp32.

Each rank runs the logits kernels on its shard with the tokens it owns (others out of its range:
no target read, no one-hot term), giving its running maximum m_r, log-sum log s_r and local
entropy H_r. Two all-reduces combine them per row: the maximum M, then one SUM over
``[s_r e^(m_r - M), (x_t - M) on the owning rank, s_r e^(m_r - M) (mean_r(x) - M), owners]``:

    log-prob = (x_t - M) - log S,   entropy = log S - U / S

with S and U the first and third sums (the entropy kept relative to M, as the kernels keep it
relative to their running maximum). The backward needs no communication: with the global M,
log S and entropy saved in place of the local ones, the logits backward kernel writes each
shard's gradient ``[i == t] - p_i`` (and ``-p_i (log p_i + H)``) directly.
"""

from __future__ import annotations

import numbers

import torch

from .api import _logits_forward, _LogitsBackward, _save_logits_ctx
from .validation import _check_logits_call


def _all_reduce(t: torch.Tensor, op: str, group) -> torch.Tensor:
    import torch.distributed as dist

    if group is None and not (dist.is_available() and dist.is_initialized()):
        return t  # one process, the whole vocabulary: nothing to combine
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=group)
    return t


class _VocabParallelLogprobs(_LogitsBackward):
    @staticmethod
    def forward(ctx, logits, tokens, vocab_start, temperature, return_entropy, ignore_index, group, softcap,
                check_tokens, config, backward_config):
        n_rows, local_vocab = logits.shape
        ignored = tokens == ignore_index
        local = tokens - vocab_start
        owned = (local >= 0) & (local < local_vocab) & ~ignored
        # a token another rank owns: outside [0, V_r) and not ignore_index (NaN log-prob, not read)
        foreign = -1 if ignore_index != -1 else local_vocab
        tok_local = torch.where(ignored, tokens, torch.where(owned, local, torch.full_like(tokens, foreign)))
        lp_r, ent_r, stats = _logits_forward(logits, tok_local, temperature, True, ignore_index, config, softcap)
        m_r, log_s_r = stats[0], stats[1]
        live = ~ignored
        zero = torch.zeros_like(m_r)
        m_r = torch.where(live, m_r, zero)  # ignored rows: m = +inf from the kernel
        big_m = _all_reduce(m_r.clone(), "max", group)
        shift = m_r - big_m
        # a shard whose logits of the row are all -inf (constrained decoding masked them) holds no
        # mass: its max and log-sum are -inf and its entropy NaN, so it adds 0 to every sum (not
        # 0 x NaN) and its target, if it owns it, sits at -inf
        held = live & (m_r != float("-inf"))
        scaled = torch.where(held, torch.exp(log_s_r + shift), zero)  # s_r e^(m_r - M)
        # x_t - M on the owner: (x_t - m_r - log s_r) + log s_r + (m_r - M)
        target = torch.where(owned, torch.where(held, (lp_r + log_s_r) + shift, float("-inf")), zero)
        mean = torch.where(held, scaled * ((log_s_r - ent_r) + shift), zero)  # s_r e^(m_r-M) (E_r[x] - M)
        sums = _all_reduce(torch.stack([scaled, target, mean, owned.float()]), "sum", group)
        if check_tokens and bool((live & (sums[3] != 1)).any()):
            i = int((live & (sums[3] != 1)).nonzero()[0, 0])
            raise ValueError(f"tokens[{i}] = {int(tokens[i])} is owned by {int(sums[3][i])} ranks' vocabulary shards "
                             "(must be exactly 1: in [0, V) and not ignore_index)")
        log_s = torch.log(torch.where(live, sums[0], torch.ones_like(zero)))
        logprob = (sums[1] - log_s).clamp(max=0.0).masked_fill(ignored, 0.0)
        entropy = (log_s - sums[2] / torch.where(live, sums[0], torch.ones_like(zero))).masked_fill(ignored, 0.0)
        glob = torch.stack([torch.where(live, big_m, torch.full_like(zero, float("inf"))), log_s])
        _save_logits_ctx(ctx, logits, tok_local, glob, entropy, return_entropy, temperature, ignore_index,
                         backward_config, softcap, n_inputs=11)
        return logprob, entropy


def vocab_parallel_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, vocab_start: int,
                                  temperature: float = 1.0, return_entropy: bool = False, ignore_index: int = -100,
                                  *, group=None, softcap: float | None = None, check_tokens: bool = True,
                                  config: dict | None = None, backward_config: dict | None = None):
    """``token_logprobs`` over a vocabulary sharded across the ranks of ``group``.

    Args:
        logits: this rank's shard [T, V_r] (columns ``vocab_start`` to ``vocab_start + V_r`` of the
            full vocabulary), as ``token_logprobs`` takes them.
        tokens: [T] token ids in the *full* vocabulary (the same on every rank), or ``ignore_index``.
        vocab_start: the first vocabulary column this rank holds.
        group: a ``torch.distributed`` process group (None: the default group when one is
            initialised, else a single process holding the whole vocabulary).
        check_tokens: check (one host sync, after the reductions) that each non-ignored token is
            owned by exactly one rank's shard.
        temperature, return_entropy, ignore_index, softcap, config, backward_config: as
            ``token_logprobs``.

    Returns the log-probs (and entropies) of the full vocabulary, [T] fp32, the same on every rank.
    Differentiable with respect to ``logits`` (this rank's shard); the backward communicates nothing.
    Two collectives per call (a MAX of [T] and a SUM of [4, T] fp32): every rank must call it.
    """
    temperature, ignore_index, softcap = _check_logits_call(logits, tokens, temperature, ignore_index, softcap,
                                                           "[tokens, vocab shard]")
    if isinstance(vocab_start, bool) or not isinstance(vocab_start, numbers.Integral) or vocab_start < 0:
        raise ValueError(f"vocab_start must be a non-negative int, got {vocab_start!r}")
    logprob, entropy = _VocabParallelLogprobs.apply(logits, tokens.contiguous(), int(vocab_start), temperature,
                                                    bool(return_entropy), ignore_index, group, softcap,
                                                    bool(check_tokens), config, backward_config)
    return (logprob, entropy) if return_entropy else logprob
