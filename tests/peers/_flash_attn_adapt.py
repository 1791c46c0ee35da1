"""Our own re-implementation of what flash-attention's tests/test_flash_attn.py needs around its
tests (read at Dao-AILab/flash-attention 0251105a2fb19d2957484b7f023cd8c115286ced): the padding
masks, unpadding into the varlen layout, ``attention_ref``'s arithmetic (same operation order, same
upcast / reorder_ops switches, same masking of padded and fully masked rows), and thin shims with
``flash_attn_varlen_func`` / ``flash_attn_with_kvcache`` signatures over polytrace_kernels.attention.

Written from the peer's semantics, without einops or flash_attn; no source of theirs is copied.
A shim raises ``NotImplementedError`` for a parameter we do not offer (the tests skip those cases
first, naming the reason) and turns our ``ValueError`` into the ``RuntimeError`` the peer's C++
extension raises, message unchanged.
"""

from __future__ import annotations

import math

import torch

from polytrace_kernels.attention import decode_attention, varlen_attention

# ------------------------------------------------------------------------------ inputs and layout


def random_padding_mask(max_seqlen, batch_size, device, mode="random"):
    """[batch, max_seqlen] bool: row b keeps its first n_b positions (the peer's three modes)."""
    if mode == "full":
        lengths = torch.full((batch_size, 1), max_seqlen, device=device, dtype=torch.int32)
    elif mode == "random":
        lengths = torch.randint(max(1, max_seqlen - 20), max_seqlen + 1, (batch_size, 1), device=device)
    else:
        lengths = torch.randint(max_seqlen // 3, max_seqlen + 1, (batch_size, 1), device=device)
    return torch.arange(max_seqlen, device=device)[None, :] < lengths


def _unpad(x, mask):
    """[b, s, ...] -> ([nnz, ...], flat indices, int32 cu_seqlens, max length)."""
    lens = mask.sum(-1, dtype=torch.int32)
    idx = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
    return x.reshape(-1, *x.shape[2:])[idx], idx, cu, int(lens.max())


def _pad(x, idx, batch, seqlen):
    out = torch.zeros(batch * seqlen, *x.shape[1:], device=x.device, dtype=x.dtype)
    out = out.index_put((idx,), x)  # out-of-place: differentiable, as the peer's pad_input
    return out.reshape(batch, seqlen, *x.shape[1:])


def unpadded_qkv(q, k, v, query_padding_mask, key_padding_mask):
    """The peer's ``generate_qkv(kvpacked=False)``: leaf tensors for the varlen call and for the
    padded reference, and the functions that pad outputs and gradients back."""
    batch, seqlen_q = q.shape[:2]
    seqlen_k = k.shape[1]
    q_un, idx_q, cu_q, max_q = _unpad(q, query_padding_mask)
    k_un, idx_k, cu_k, max_k = _unpad(k, key_padding_mask)
    v_un = _unpad(v, key_padding_mask)[0]
    leaves = [t.detach().requires_grad_() for t in (q_un, k_un, v_un, q, k, v)]
    return (*leaves[:3], cu_q, cu_k, max_q, max_k, *leaves[3:],
            lambda o: _pad(o, idx_q, batch, seqlen_q), lambda d: _pad(d, idx_k, batch, seqlen_k))


def unpadded_q_kv(q, kv, query_padding_mask, key_padding_mask):
    """``generate_qkv(kvpacked=True)``: kv [b, s, 2, h, d] unpadded to [nnz, 2, h, d]."""
    batch, seqlen_q = q.shape[:2]
    seqlen_k = kv.shape[1]
    q_un, idx_q, cu_q, max_q = _unpad(q, query_padding_mask)
    kv_un, idx_k, cu_k, max_k = _unpad(kv, key_padding_mask)
    leaves = [t.detach().requires_grad_() for t in (q_un, kv_un, q, kv)]
    return (*leaves[:2], cu_q, cu_k, max_q, max_k, *leaves[2:],
            lambda o: _pad(o, idx_q, batch, seqlen_q), lambda d: _pad(d, idx_k, batch, seqlen_k))


# ------------------------------------------------------------------------------------ reference


def local_mask(seqlen_q, seqlen_k, window_size, query_padding_mask, key_padding_mask, device):
    """True where a key is outside query row i's window [i + sk - sq - left, i + sk - sq + right],
    sk / sq the real lengths (bottom-right alignment); a negative left means no left bound."""
    row = torch.arange(seqlen_q, device=device)[:, None]
    col = torch.arange(seqlen_k, device=device)
    sk = seqlen_k if key_padding_mask is None else key_padding_mask.sum(-1).view(-1, 1, 1, 1)
    sq = seqlen_q if query_padding_mask is None else query_padding_mask.sum(-1).view(-1, 1, 1, 1)
    if window_size[0] < 0:
        return col > row + sk - sq + window_size[1]
    sk_full = torch.full_like(col, seqlen_k) if key_padding_mask is None else sk
    return (col > torch.minimum(row + sk - sq + window_size[1], sk_full)) | (col < row + sk - sq - window_size[0])


def attention_ref(q, k, v, query_padding_mask=None, key_padding_mask=None, causal=False, window_size=(-1, -1),
                  softcap=0.0, upcast=True, reorder_ops=False):
    """The peer's attention_ref without bias or dropout: [b, s, h, d] in, (out, probs) out, in q's dtype.
    ``upcast`` computes in fp32 (the truth); ``upcast=False, reorder_ops=True`` is "torch's own
    error" (same dtype, the scale applied to k instead of q)."""
    if causal:
        window_size = (window_size[0], 0)
    dtype_og = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    d = q.shape[-1]
    if not reorder_ops:
        scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k)
    else:
        scores = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(d))
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    if key_padding_mask is not None:
        scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
    local = window_size[0] >= 0 or window_size[1] >= 0
    if local:
        lmask = local_mask(seqlen_q, seqlen_k, window_size, query_padding_mask, key_padding_mask, q.device)
        scores = scores.masked_fill(lmask, float("-inf"))
    attention = torch.softmax(scores, dim=-1).to(v.dtype)
    if local:  # rows with every key masked: 0, not NaN
        attention = attention.masked_fill(torch.all(lmask, dim=-1, keepdim=True), 0.0)
    if query_padding_mask is not None:
        attention = attention.masked_fill(~query_padding_mask[:, None, :, None], 0.0)
    output = torch.einsum("bhts,bshd->bthd", attention, v)
    if query_padding_mask is not None:
        output = output.masked_fill(~query_padding_mask[:, :, None, None], 0.0)
    return output.to(dtype=dtype_og), attention.to(dtype=dtype_og)


# ----------------------------------------------------------------------------------------- shims


def _window(window_size):
    return tuple(int(w) for w in window_size)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """``deterministic`` is accepted and ignored: our backward is always deterministic (no atomics)."""
    if dropout_p > 0 or alibi_slopes is not None or block_table is not None:
        raise NotImplementedError("dropout, ALiBi and a paged K/V in varlen attention are not offered")
    extra = {}
    if softcap > 0:
        extra["softcap"] = float(softcap)
    if tuple(_window(window_size)) != (-1, -1):
        extra["window_size"] = _window(window_size)
    try:
        out, lse = varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                    softmax_scale=softmax_scale, return_lse=True, **extra)
    except ValueError as err:
        raise RuntimeError(str(err)) from err
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    **kw):
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, **kw)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """q ``[B, Sq, Hq, D]``: the last Sq positions of each cache, ``causal`` bottom-right, as the
    peer's; ``num_splits=0`` is the automatic choice, as the peer's. ``window_size``, ``softcap``
    and ``causal`` pass through to decode_attention."""
    unsupported = {"k/v append": k is not None or v is not None,
                   "rotary": rotary_cos is not None, "cache_batch_idx": cache_batch_idx is not None,
                   "cache_leftpad": cache_leftpad is not None, "alibi": alibi_slopes is not None}
    missing = [name for name, used in unsupported.items() if used]
    if missing:
        raise NotImplementedError(f"decode_attention does not offer: {', '.join(missing)}")
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    try:
        out, lse = decode_attention(q, k_cache, v_cache, cache_seqlens, softmax_scale, block_table=block_table,
                                    num_splits=num_splits or None, return_lse=True,
                                    window_size=_window(window_size), softcap=float(softcap), causal=causal)
    except ValueError as err:
        raise RuntimeError(str(err)) from err
    return (out, lse) if return_softmax_lse else out


def paged_kvcache(seqlen_k, page_size, batch_size, nheads_k, d, device, dtype):
    """The peer's ``_generate_block_kvcache``: a pool 3x the pages needed, a random block table,
    and the contiguous [b, seqlen_k, h, d] view of each sequence's pages for the reference."""
    num_blocks = math.ceil(seqlen_k / page_size) * batch_size * 3
    k_paged = torch.randn(num_blocks, page_size, nheads_k, d, device=device, dtype=dtype)
    v_paged = torch.randn(num_blocks, page_size, nheads_k, d, device=device, dtype=dtype)
    table = torch.randperm(num_blocks, dtype=torch.int32, device=device).reshape(batch_size, -1)

    def gather(pool):
        return pool[table.long().flatten()].reshape(batch_size, -1, nheads_k, d)[:, :seqlen_k]

    return gather(k_paged), gather(v_paged), table, k_paged, v_paged, num_blocks
