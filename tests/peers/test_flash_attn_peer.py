"""flash-attention's own varlen and kvcache tests, against polytrace_kernels.attention.

Adapted from Dao-AILab/flash-attention ``tests/test_flash_attn.py`` at commit
0251105a2fb19d2957484b7f023cd8c115286ced (2026-08-15): ``test_flash_attn_varlen_output``,
``test_flash_attn_varlen_causal``, ``test_flash_attn_bwd_varlen_overflow``,
``test_flash_attn_kvcache`` and ``test_flash_attn_kvcache_paged_block_table_bounds``. Each keeps
the peer's seed, input construction, reference (``attention_ref``: fp32 truth, and torch's own
same-dtype error with ``upcast=False, reorder_ops=True``) and assertions (output within 2x torch's
error, gradients 3x in varlen_output and 2x + 1e-5 in varlen_causal, kvcache 3x + 1e-5; no NaN in
the overflow test; a RuntimeError naming block_table past the paged capacity). The calls go through
the shims of ``_flash_attn_adapt.py``.

Shapes: with CUDA the peer's shapes and values, 64 combinations of each test's product drawn with
a fixed seed (the whole product, thousands of cases, with ``POLYTRACE_PEERS_FULL=1``), fp16 and
bf16; on a CPU (Triton interpreter) the small cases of the ``*_CPU`` lists (shorter sequences,
fewer heads and batch rows in varlen_causal, 4 heads and 3 batch rows in varlen_output, 2 heads in
bwd_varlen_overflow, 2 / 4 / 6 query heads for mha / gqa (ratio 2, as the peer's 6 / 3) / mqa in
kvcache), fp16 only: bf16 runs on a
GPU only, since Triton 3.9's interpreter multiplies bf16 bit patterns in tl.dot (no conversion is
made in the harness).

Peer parameters not run, and why (each skipped case says which):
- ``dropout_p=0.17``: no dropout (RL training of LLMs runs without attention dropout).
- ``alibi=True``: no ALiBi bias (none of the RL model families uses it).
- ``deterministic=True``: the same call as False; our backward is always deterministic (no atomics).
- ``kvpacked=True`` runs (the shim unbinds kv); the qkvpacked / non-varlen tests are not adapted.
- varlen_causal ``paged_kv_block_size=256/512``: varlen attention over a paged K/V is not offered.
- kvcache ``new_kv=True`` (k/v append into the cache), ``rotary_fraction > 0`` (rotary applied
  in the kernel), ``has_leftpad`` (cache_leftpad), ``alibi``: not offered by decode_attention.
- kvcache_paged_block_table_bounds ``append_knew=True``: k/v append is not offered.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest
import torch
from _flash_attn_adapt import (
    attention_ref,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_with_kvcache,
    paged_kvcache,
    random_padding_mask,
    unpadded_q_kv,
    unpadded_qkv,
)

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
DTYPES = [torch.float16, torch.bfloat16] if GPU else [torch.float16]
SKIP = {
    "dropout": "dropout is not offered",
    "alibi": "ALiBi is not offered",
    "paged-varlen": "varlen attention over a paged K/V is not offered",
    "append": "k/v append into the cache is not offered",
    "leftpad": "cache_leftpad is not offered",
}


def _grid(names, gpu, cpu, n_gpu=64):
    """On a CPU an explicit list of small cases. On a GPU (``gpu`` marker) the peer's values and
    shapes: ``n_gpu`` combinations drawn from its product with a fixed seed (the same every run),
    or the whole product (thousands of cases) with ``POLYTRACE_PEERS_FULL=1``. A tuple value, as
    (seqlen_q, seqlen_k), spreads over its names."""
    if not GPU:
        return pytest.mark.parametrize(names, cpu)
    combos = list(itertools.product(*gpu))
    if os.environ.get("POLYTRACE_PEERS_FULL") != "1" and len(combos) > n_gpu:
        combos = random.Random(0).sample(combos, n_gpu)
    flat = [sum((v if isinstance(v, tuple) else (v,) for v in combo), ()) for combo in combos]
    return pytest.mark.parametrize(names, [pytest.param(*c, marks=pytest.mark.gpu) for c in flat])


def _max_err(a, b):
    return (a - b).abs().max().item()


# ------------------------------------------------------------------------------- varlen_output

VARLEN_SEQLENS = [(1, 147), (113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024),
                  (1023, 1024), (1024, 1023), (2048, 2048)]
VARLEN_OUTPUT_CPU = [
    # (seqlen_q, seqlen_k, d, causal, local, mha_type, kvpacked, softcap)
    (1, 47, 32, False, False, "mha", False, 0.0),
    (29, 21, 59, True, False, "gqa", False, 0.0),
    (21, 29, 32, False, True, "mqa", True, 0.0),
    (29, 21, 32, True, True, "mha", False, 0.0),
    (13, 37, 59, False, False, "gqa", True, 50.0),
    (37, 13, 32, True, False, "mqa", False, 50.0),
    (21, 29, 32, True, True, "gqa", False, 50.0),
    (29, 21, 59, False, True, "mha", False, 50.0),
]


@_grid("seqlen_q,seqlen_k,d,causal,local,mha_type,kvpacked,softcap",
       [VARLEN_SEQLENS, [32, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256], [False, True], [False, True],
        ["mha", "mqa", "gqa"], [True, False], [0.0, 50.0]], VARLEN_OUTPUT_CPU)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_varlen_output(seqlen_q, seqlen_k, d, causal, local, mha_type, kvpacked, softcap, dtype):
    device = DEVICE
    torch.random.manual_seed(0)
    # CPU: 3 sequences (the peer's 4 on a GPU), each padded to its own random length as the peer
    # pads (so the packed layout still has a sequence boundary and padded rows), and 4 heads (gqa
    # 2, mqa 1): the interpreter's cost is per (sequence block, head) program
    batch_size = 4 if GPU else 3
    nheads = (6 if softcap == 0.0 else 4) if GPU else 4
    nheads_k = nheads if mha_type == "mha" else (1 if mha_type == "mqa" else 2)
    window_size = (-1, -1) if not local else torch.randint(0, seqlen_k, (2,))
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=device, dtype=dtype, requires_grad=True)
    if softcap > 0:
        q = q * softcap  # the peer's: scores well inside the softcap's curved range
    if kvpacked:
        kv = torch.randn(batch_size, seqlen_k, 2, nheads_k, d, device=device, dtype=dtype, requires_grad=True)
        k, v = kv.unbind(2)
    else:
        k = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype, requires_grad=True)
        v = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype, requires_grad=True)
    query_padding_mask = random_padding_mask(seqlen_q, batch_size, device, mode="random")
    key_padding_mask = random_padding_mask(seqlen_k, batch_size, device, mode="random")
    kw = dict(causal=causal, window_size=window_size, softcap=softcap)
    if kvpacked:
        (q_unpad, kv_unpad, cu_q, cu_k, max_q, max_k, q, kv, pad_out, pad_k) = unpadded_q_kv(
            q, kv, query_padding_mask, key_padding_mask)
        out_unpad, _, _ = flash_attn_varlen_kvpacked_func(q_unpad, kv_unpad, cu_q, cu_k, max_q, max_k, 0.0,
                                                          return_attn_probs=True, **kw)
        k, v = kv.unbind(2)
        leaves, ref_leaves = (q_unpad, kv_unpad), (q, kv)
    else:
        (q_unpad, k_unpad, v_unpad, cu_q, cu_k, max_q, max_k, q, k, v, pad_out, pad_k) = unpadded_qkv(
            q, k, v, query_padding_mask, key_padding_mask)
        out_unpad, _, _ = flash_attn_varlen_func(q_unpad, k_unpad, v_unpad, cu_q, cu_k, max_q, max_k, 0.0,
                                                 return_attn_probs=True, **kw)
        leaves, ref_leaves = (q_unpad, k_unpad, v_unpad), (q, k, v)
    out = pad_out(out_unpad)
    out_ref, _ = attention_ref(q, k, v, query_padding_mask, key_padding_mask, **kw)
    out_pt, _ = attention_ref(q, k, v, query_padding_mask, key_padding_mask, upcast=False, reorder_ops=True, **kw)

    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, g)
    grads_ref = torch.autograd.grad(out_ref, ref_leaves, g)
    grads_pt = torch.autograd.grad(out_pt, ref_leaves, g)
    if kvpacked:
        dq, (dk, dv) = pad_out(grads[0]), pad_k(grads[1]).unbind(2)
        (dq_ref, (dk_ref, dv_ref)), (dq_pt, (dk_pt, dv_pt)) = ((a, b.unbind(2)) for a, b in (grads_ref, grads_pt))
    else:
        dq, dk, dv = pad_out(grads[0]), pad_k(grads[1]), pad_k(grads[2])
        (dq_ref, dk_ref, dv_ref), (dq_pt, dk_pt, dv_pt) = grads_ref, grads_pt

    assert _max_err(out, out_ref) <= 2 * _max_err(out_pt, out_ref)
    assert _max_err(dq, dq_ref) <= 3 * _max_err(dq_pt, dq_ref)
    assert _max_err(dk, dk_ref) <= 3 * _max_err(dk_pt, dk_ref)
    assert _max_err(dv, dv_ref) <= 3 * _max_err(dv_pt, dv_ref)


# ------------------------------------------------------------------------------- varlen_causal

CAUSAL_SEQLENS = [(1, 239), (3, 799), (127, 512), (127, 513), (113, 203), (128, 217), (113, 211), (108, 256),
                  (256, 512), (1023, 1024)]
VARLEN_CAUSAL_CPU = [
    # (seqlen_q, seqlen_k, swap_sq_sk, d, local, paged_kv_block_size)
    (1, 39, False, 32, False, None),
    (3, 49, True, 59, False, None),
    (27, 33, False, 40, True, None),
    (17, 33, True, 32, True, None),
    (27, 33, False, 32, False, 256),
]


@_grid("seqlen_q,seqlen_k,swap_sq_sk,d,local,paged_kv_block_size",
       [CAUSAL_SEQLENS, [False, True], [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256], [False, True],
        [None, 256, 512]], VARLEN_CAUSAL_CPU)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_varlen_causal(seqlen_q, seqlen_k, swap_sq_sk, d, local, paged_kv_block_size, dtype):
    if paged_kv_block_size is not None:
        pytest.skip(SKIP["paged-varlen"])
    if swap_sq_sk:
        seqlen_q, seqlen_k = seqlen_k, seqlen_q
    device = DEVICE
    causal = True
    torch.random.manual_seed(0)
    batch_size = 8 if GPU else 3
    nheads = 9 if GPU else 2
    window_size = (-1, -1) if not local else torch.randint(0, seqlen_k, (2,))
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(batch_size, seqlen_k, nheads, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(batch_size, seqlen_k, nheads, d, device=device, dtype=dtype, requires_grad=True)
    query_padding_mask = random_padding_mask(seqlen_q, batch_size, device, mode="random")
    key_padding_mask = random_padding_mask(seqlen_k, batch_size, device, mode="random")
    (q_unpad, k_unpad, v_unpad, cu_q, cu_k, max_q, max_k, q, k, v, pad_out, pad_k) = unpadded_qkv(
        q, k, v, query_padding_mask, key_padding_mask)
    out_unpad = flash_attn_varlen_func(q_unpad, k_unpad, v_unpad, cu_q, cu_k, max_q, max_k, 0.0, causal=causal,
                                       window_size=window_size)
    out = pad_out(out_unpad)
    kw = dict(causal=causal, window_size=window_size)
    out_ref, _ = attention_ref(q, k, v, query_padding_mask, key_padding_mask, **kw)
    out_pt, _ = attention_ref(q, k, v, query_padding_mask, key_padding_mask, upcast=False, reorder_ops=True, **kw)
    g = torch.randn_like(out)
    dq_unpad, dk_unpad, dv_unpad = torch.autograd.grad(out, (q_unpad, k_unpad, v_unpad), g)
    dq, dk, dv = pad_out(dq_unpad), pad_k(dk_unpad), pad_k(dv_unpad)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(out_ref, (q, k, v), g)
    dq_pt, dk_pt, dv_pt = torch.autograd.grad(out_pt, (q, k, v), g)

    assert _max_err(out, out_ref) <= 2 * _max_err(out_pt, out_ref) + 1e-5
    assert _max_err(dq, dq_ref) <= 2 * _max_err(dq_pt, dq_ref) + 1e-5
    assert _max_err(dk, dk_ref) <= 2 * _max_err(dk_pt, dk_ref) + 1e-5
    assert _max_err(dv, dv_ref) <= 2 * _max_err(dv_pt, dv_ref) + 1e-5


# ------------------------------------------------------------------------- bwd_varlen_overflow


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 32, 64])
def test_flash_attn_bwd_varlen_overflow(d, causal):
    """The peer's shape at every size (256 queries over 3 one-key sequences): dQ was NaN here
    before the fix (non-causal, every d). The peer's 5 heads on a GPU; 2 in the interpreter, whose
    cost is per (block, head) program: each head runs the same programs on its own slice, and the
    overflow is along the sequences (a query block past its one key), not across heads."""
    device = DEVICE
    dtype = torch.float16
    torch.random.manual_seed(0)
    nheads = 5 if GPU else 2
    q_cuseqlen = torch.tensor([0, 76, 110, 256], device=device, dtype=torch.int32)
    k_cuseqlen = torch.tensor([0, 1, 2, 3], device=device, dtype=torch.int32)
    Mq, Mk = 256, 3
    q = torch.randn([Mq, nheads, d], dtype=dtype, device=device) * 3
    k, v = (torch.randn([Mk, nheads, d], dtype=dtype, device=device) * 3 for _ in range(2))
    for t in (q, k, v):
        t.requires_grad_(True)
    out = flash_attn_varlen_func(q, k, v, q_cuseqlen, k_cuseqlen, Mq, Mk, causal=causal)
    g = torch.randn_like(out)
    out.backward(g)
    assert not q.grad.isnan().any()
    assert not k.grad.isnan().any()
    assert not v.grad.isnan().any()


# -------------------------------------------------------------------------------------- kvcache

KVCACHE_SEQLENS = [(1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048), (16, 20000),
                   (1, 128 * 1024), (16, 128 * 1024), (128, 128)]
KVCACHE_CPU = [
    # (seqlen_q, seqlen_k, d, mha_type, causal, local, num_splits, paged_kv_block_size)
    (1, 128, 32, "mha", False, False, 1, None),
    (1, 339, 59, "gqa", True, False, 0, None),
    (1, 339, 32, "mqa", False, False, 0, 256),
    (1, 128, 59, "mha", True, False, 1, 256),
    (1, 339, 32, "gqa", False, True, 0, None),
    (1, 339, 59, "mqa", True, True, 1, 256),
    (1, 128, 32, "mha", False, True, 0, 256),
    (3, 128, 32, "mha", True, False, 0, None),
    (3, 339, 59, "gqa", False, False, 0, 256),
    (16, 339, 32, "mqa", True, True, 0, 256),
    (64, 256, 32, "gqa", True, False, 1, None),
]


@_grid("seqlen_q,seqlen_k,d,mha_type,causal,local,num_splits,paged_kv_block_size",
       [KVCACHE_SEQLENS, [32, 59, 64, 80, 128, 256], ["mha", "mqa", "gqa"], [False, True], [False, True], [1, 0],
        [None, 256]], KVCACHE_CPU)
@pytest.mark.parametrize("new_kv,rotary_fraction,has_leftpad,alibi", [(False, 0.0, False, False)])
def test_flash_attn_kvcache(seqlen_q, seqlen_k, d, mha_type, causal, local, num_splits, paged_kv_block_size, new_kv,
                            rotary_fraction, has_leftpad, alibi):
    """The peer's grid over new_kv, rotary, leftpad and alibi is pinned to the values we offer (see
    the module docstring); has_batch_idx is False in the peer's grid too."""
    device, dtype = DEVICE, torch.float16
    torch.random.manual_seed(0)
    batch_size = 2
    # the peer's 6 query heads over 6 / 3 / 1 KV heads on a GPU. CPU: mha 2 over 2, gqa 4 over 2,
    # mqa 6 over 1 -- the same kinds (several KV heads, or one) and the mqa ratio 6 (6 x seqlen_q
    # rows per program block), at the fewest (head, split) programs the interpreter runs one by one
    nheads = 6 if GPU or mha_type == "mqa" else (2 if mha_type == "mha" else 4)
    nheads_k = nheads if mha_type == "mha" else (1 if mha_type == "mqa" else (3 if GPU else 2))
    window_size = (-1, -1) if not local else torch.randint(0, seqlen_k, (2,))
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=device, dtype=dtype)
    if paged_kv_block_size is None:
        k_cache = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
        v_cache = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
        block_table = None
    else:
        k_cache, v_cache, block_table, k_cache_paged, v_cache_paged, _ = paged_kvcache(
            seqlen_k, paged_kv_block_size, batch_size, nheads_k, d, device, dtype)
    cache_seqlens = torch.randint(1, seqlen_k + 1, (batch_size,), dtype=torch.int32, device=device)
    key_padding_mask = torch.arange(seqlen_k, device=device)[None, :] < cache_seqlens[:, None]
    k_cache_rep = k_cache.repeat_interleave(nheads // nheads_k, dim=2)
    v_cache_rep = v_cache.repeat_interleave(nheads // nheads_k, dim=2)
    out = flash_attn_with_kvcache(
        q, k_cache if paged_kv_block_size is None else k_cache_paged,
        v_cache if paged_kv_block_size is None else v_cache_paged, cache_seqlens=cache_seqlens,
        block_table=block_table, causal=causal, window_size=window_size, num_splits=num_splits)
    kw = dict(causal=causal, window_size=window_size)
    out_ref, _ = attention_ref(q, k_cache_rep, v_cache_rep, None, key_padding_mask, **kw)
    out_pt, _ = attention_ref(q, k_cache_rep, v_cache_rep, None, key_padding_mask, upcast=False, reorder_ops=True,
                              **kw)
    mult = 3  # the peer's 5 applies with alibi only
    assert _max_err(out, out_ref) <= mult * _max_err(out_pt, out_ref) + 1e-5


@pytest.mark.parametrize("append_knew", [False, True])
def test_flash_attn_kvcache_paged_block_table_bounds(append_knew):
    if append_knew:
        pytest.skip(SKIP["append"])
    device, dtype = DEVICE, torch.float16
    paged_kv_block_size = 256
    batch_size, nheads, d = 1, 1, 64
    capacity = 1 * paged_kv_block_size
    num_blocks = 4  # a pool with spare pages: the guard must fire on the length, not a missing page
    k_cache_paged = torch.randn(num_blocks, paged_kv_block_size, nheads, d, device=device, dtype=dtype)
    v_cache_paged = torch.randn(num_blocks, paged_kv_block_size, nheads, d, device=device, dtype=dtype)
    block_table = torch.zeros(batch_size, 1, dtype=torch.int32, device=device)
    q = torch.randn(batch_size, 1, nheads, d, device=device, dtype=dtype)
    cache_seqlens = torch.full((batch_size,), capacity + 1, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="block_table"):
        flash_attn_with_kvcache(q, k_cache_paged, v_cache_paged, cache_seqlens=cache_seqlens,
                                block_table=block_table, causal=False)
    cache_seqlens_ok = torch.full((batch_size,), capacity, dtype=torch.int32, device=device)
    out = flash_attn_with_kvcache(q, k_cache_paged, v_cache_paged, cache_seqlens=cache_seqlens_ok,
                                  block_table=block_table, causal=False)
    assert out.shape == (batch_size, 1, nheads, d)
    assert not out.isnan().any()
