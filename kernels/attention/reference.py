"""Pure-torch references: attention per sequence with an explicit mask.

``compute_dtype=torch.float32`` (the default) is the accuracy reference; passing the inputs' own
dtype gives "torch's own same-dtype error" that the kernels' error is compared with (the rule of
flash-attention's tests). Rows that see no key give output 0 and log-sum-exp ``+inf`` (flash-attn's
convention, which the kernels follow).
"""

from __future__ import annotations

import math

import torch


def _attend(q, k, v, scale, causal, compute_dtype, softcap=0.0, window_size=(-1, -1)):
    # q [Lq, Hq, D], k/v [Lk, Hkv, D] -> out [Lq, Hq, D], lse [Hq, Lq] (fp32)
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    qc = q.to(compute_dtype).transpose(0, 1)  # [Hq, Lq, D]
    kc = k.to(compute_dtype).transpose(0, 1).repeat_interleave(group, 0)
    vc = v.to(compute_dtype).transpose(0, 1).repeat_interleave(group, 0)
    scores = torch.matmul(qc, kc.transpose(1, 2)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    left, right = (int(w) for w in window_size)
    right = 0 if causal else right  # flash-attn: causal is the window (left, 0)
    if left >= 0 or right >= 0:
        rel = torch.arange(lk, device=q.device)[None, :] - torch.arange(lq, device=q.device)[:, None] - (lk - lq)
        allowed = (rel <= right) if right >= 0 else torch.ones_like(rel, dtype=torch.bool)  # bottom-right
        if left >= 0:
            allowed = allowed & (rel >= -left)
        scores = scores.masked_fill(~allowed, float("-inf"))
    # [Hq, Lq], fp32 for 16-bit scores (torch's own computation), fp64 for the ground truth
    lse = torch.logsumexp(scores if scores.dtype == torch.float64 else scores.float(), dim=-1)
    empty = torch.isneginf(lse)
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(empty[..., None], torch.zeros_like(probs), probs)
    out = torch.matmul(probs, vc).transpose(0, 1)
    return out, torch.where(empty, torch.full_like(lse, float("inf")), lse)


def varlen_attention_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool = True,
                               softmax_scale: float | None = None, compute_dtype=torch.float32,
                               return_lse: bool = False, softcap: float = 0.0, window_size=(-1, -1)):
    """Per-sequence attention over packed [T, H, D] tensors. Differentiable (autograd). ``softcap``
    c > 0: scores c tanh(s / c); ``window_size`` (left, right) as flash-attn's (negative: unbounded)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    cq = [int(x) for x in cu_seqlens_q.tolist()]
    ck = [int(x) for x in cu_seqlens_k.tolist()]
    outs, lses = [], []
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if qe == qs:
            continue
        out, lse = _attend(q[qs:qe], k[ks:ke], v[ks:ke], scale, causal, compute_dtype, softcap, window_size)
        outs.append(out)
        lses.append(lse)
    if outs:
        out = torch.cat(outs, 0)
        lse = torch.cat(lses, 1)
    else:
        out = q.new_zeros(q.shape, dtype=compute_dtype)
        lse = q.new_zeros((q.shape[1], q.shape[0]), dtype=torch.float64 if compute_dtype == torch.float64
                          else torch.float32)
    return (out, lse) if return_lse else out


def decode_attention_reference(q, k_cache, v_cache, cache_seqlens, softmax_scale: float | None = None,
                               compute_dtype=torch.float32, block_table=None, return_lse: bool = False,
                               softcap: float = 0.0, window_size=(-1, -1), causal: bool = False):
    """One query token per sequence (q [B, Hq, D]), or Sq (q [B, Sq, Hq, D]: the last Sq positions,
    ``causal`` bottom-right), against its own first ``cache_seqlens[b]`` cached tokens (k_cache
    [B, Lmax, Hkv, D], or pages [N, page, Hkv, D] with ``block_table``). ``softcap`` and
    ``window_size`` as ``varlen_attention_reference``'s. lse [B, Hq], or [B, Hq, Sq] for a 4-d q."""
    multi = q.dim() == 4
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    lens = [int(x) for x in cache_seqlens.tolist()]
    outs, lses = [], []
    for b, n in enumerate(lens):
        if block_table is None:
            kb, vb = k_cache[b, :n], v_cache[b, :n]
        else:
            page = k_cache.shape[1]
            pages = block_table[b, : (n + page - 1) // page].long()
            kb = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n]
            vb = v_cache[pages].reshape(-1, *v_cache.shape[2:])[:n]
        if multi:
            out, lse = _attend(q[b], kb, vb, scale, causal, compute_dtype, softcap, window_size)
            outs.append(out)
            lses.append(lse)
            continue
        out, lse = _attend(q[b : b + 1], kb, vb, scale, False, compute_dtype, softcap, window_size)
        outs.append(out[0])
        lses.append(lse[:, 0])
    out = torch.stack(outs, 0)
    lse = torch.stack(lses, 0)
    return (out, lse) if return_lse else out
