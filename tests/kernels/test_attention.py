"""Correctness of kernels/attention against fp64 torch references computed from the same inputs.

On CPU the kernels run in the Triton interpreter at tiny shapes (<= ~100 tokens, 16x16 tiles so
sequences still span several blocks) in fp16; bf16 checks need a GPU (tl.dot on bf16 is wrong in
the interpreter of triton 3.9). The accuracy rules (``polytrace_kernels.tolerance``, applied by
``tests/_bounds.py``): the fp32 log-sum-exp within 8 fp32 roundings at its scale; the fp16/bf16
output and gradients within 2x torch's own same-dtype error (flash-attention's rule) and with no
relative scale error beyond 6 standard errors of their residuals. The GPU default tiles and split
counts run in ``tests/kernels/test_attention_configs.py``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _bounds import attention_lse_scale, decode_lse_scale, expect, sixteen_bit_checks

from polytrace_kernels.attention import (
    build_work_list,
    decode_attention,
    decode_attention_reference,
    spec,
    varlen_attention,
    varlen_attention_reference,
)
from polytrace_kernels.attention.api import clear_plan_cache, default_bwd_config, default_fwd_config
from polytrace_kernels.tolerance import check_fp32

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _cu(lens) -> torch.Tensor:
    out = [0]
    for n in lens:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32, device=DEVICE)


def _inputs(lens_q, lens_k, hq, hkv, d, dtype=torch.float16, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, hq, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(tk, hkv, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(tk, hkv, d, generator=g).to(DEVICE, dtype)
    return q, k, v, _cu(lens_q), _cu(lens_k)


def check_varlen(q, k, v, cu_q, cu_k, causal, softcap=0.0, window_size=(-1, -1), softmax_scale=None, **kw):
    """Run varlen_attention (forward and backward) and check out, lse, dq, dk, dv against fp64."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    feats = dict(softcap=softcap, window_size=window_size, softmax_scale=softmax_scale)
    out, lse = varlen_attention(q, k, v, cu_q, cu_k, causal=causal, return_lse=True, **feats, **kw)
    g = torch.Generator(device="cpu").manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(out.device, out.dtype)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref, ref_lse = varlen_attention_reference(q64, k64, v64, cu_q, cu_k, causal=causal, return_lse=True,
                                              compute_dtype=torch.float64, **feats)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    same = varlen_attention_reference(q, k, v, cu_q, cu_k, causal=causal, compute_dtype=q.dtype, **feats)
    same_grads = torch.autograd.grad(same, (q, k, v), dout)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale
    lse_scale, most_keys = attention_lse_scale(q, k, cu_q, cu_k, causal, scale, softcap, window_size)
    checks = [check_fp32("lse", lse, ref_lse, terms=most_keys, scale=lse_scale)]
    for name, ours, exact, torch_same in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads),
                                             (same, *same_grads)):
        assert torch.isfinite(ours).all(), f"{name} has non-finite values"
        checks += sixteen_bit_checks(name, ours, torch_same, exact.detach())
    expect(*checks)
    return out, lse, grads



# (lens_q, lens_k, heads_q, heads_kv, head_dim, causal): each case covers one issue bullet
VARLEN_CASES = {
    "ragged-0-1-gqa1": ([5, 0, 17, 1, 33, 16], None, 2, 2, 32, True),
    "gqa4-d64": ([23, 9, 40], None, 4, 1, 64, True),
    "gqa7-d16": ([31, 2, 18], None, 7, 1, 16, True),
    "q-shorter-than-k": ([3, 10, 0, 7, 1], [9, 29, 4, 7, 5], 4, 2, 32, True),
    "q-longer-than-k": ([12, 20], [5, 0], 2, 1, 32, True),
    "long-among-short": ([70, 1, 3, 2, 1, 5, 2, 1], None, 2, 1, 32, True),
    "non-causal-cross": ([5, 21, 0], [8, 30, 6], 3, 1, 32, False),
    "head-dim-24": ([19, 13], None, 2, 2, 24, True),
}


@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_against_fp64(case):
    lens_q, lens_k, hq, hkv, d, causal = VARLEN_CASES[case]
    q, k, v, cu_q, cu_k = _inputs(lens_q, lens_k or lens_q, hq, hkv, d)
    check_varlen(q, k, v, cu_q, cu_k, causal)


# The forward folds the scale into exp2's FFMA after the row max of the raw scores, exact for a
# positive scale only; api.py runs a negative scale as -q at |scale| and zero as q = 0 at scale 1.
# Each case fails without that rewrite (the max of s.qk is then the row's min, and 0 x -inf = NaN in
# the masked lanes); -0.3 makes the softmax peak on the most negative scores.
@pytest.mark.parametrize(("scale", "causal"), [(-0.3, True), (-0.3, False), (0.0, True)])
def test_nonpositive_softmax_scale_against_fp64(scale, causal):
    q, k, v, cu_q, cu_k = _inputs([17, 1, 30], [17, 1, 30] if causal else [9, 4, 33], 2, 1, 32)
    check_varlen(q, k, v, cu_q, cu_k, causal, softmax_scale=scale)


def test_rows_without_keys_are_zero_with_infinite_lse():
    # q longer than k, causal bottom-right: the first Lq - Lk rows see no key (flash-attn gives 0, lse +inf)
    q, k, v, cu_q, cu_k = _inputs([9], [4], 2, 2, 32)
    out, lse = varlen_attention(q, k, v, cu_q, cu_k, causal=True, return_lse=True)
    assert torch.equal(out[:5].float(), torch.zeros_like(out[:5].float()))
    assert torch.isposinf(lse[:, :5]).all() and torch.isfinite(lse[:, 5:]).all()


def test_all_lengths_one_with_max_seqlen_one():
    lens = [1] * 9
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 1, 32)
    out = varlen_attention(q, k, v, cu_q, cu_k, max_seqlen_q=1, max_seqlen_k=1)
    # one key per query: softmax is 1, the output is that key's value
    torch.testing.assert_close(out.float(), v.float().repeat_interleave(2, 1), atol=0, rtol=0)


def test_empty_batch_and_zero_length_sequences():
    q, k, v, cu_q, cu_k = _inputs([0, 0], [0, 0], 2, 2, 32)
    out, lse = varlen_attention(q, k, v, cu_q, cu_k, return_lse=True)
    assert out.shape == (0, 2, 32) and lse.shape == (2, 0)
    q, k, v, cu_q, cu_k = _inputs([], [], 2, 2, 32)
    assert varlen_attention(q, k, v, cu_q, cu_k).shape == (0, 2, 32)


def test_packing_invariance_is_bitwise():
    """A sequence's output and gradients are identical alone or packed among others (tile
    arithmetic depends only on the sequence; blocks come from D and dtype, never the batch)."""
    lens = [7, 37, 0, 21, 3]
    # GQA 2 over one KV head (the property is per sequence; the interpreter pays per head program)
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 1, 32, seed=3)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(DEVICE, q.dtype)
    for t in (q, k, v):
        t.requires_grad_(True)
    out = varlen_attention(q, k, v, cu_q, cu_k)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    s, e = 7, 44  # the 37-token sequence
    qa, ka, va = (t.detach()[s:e].clone().requires_grad_(True) for t in (q, k, v))
    cu_alone = _cu([37])
    out_a = varlen_attention(qa, ka, va, cu_alone, cu_alone)
    dqa, dka, dva = torch.autograd.grad(out_a, (qa, ka, va), dout[s:e])
    for packed, alone in ((out, out_a), (dq, dqa), (dk, dka), (dv, dva)):
        assert torch.equal(packed[s:e], alone)


def test_schedules_give_identical_results():
    lens = [50, 2, 9, 1, 17]
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 1, 32, seed=5)  # GQA 2: both program -> (slot, head) maps
    a = varlen_attention(q, k, v, cu_q, cu_k, schedule="longest_first")
    b = varlen_attention(q, k, v, cu_q, cu_k, schedule="naive")
    assert torch.equal(a, b)


def test_strided_views_of_a_fused_qkv_match_contiguous_inputs():
    # q, k, v sliced from one [T, Hq + 2 Hkv, D] projection output: token stride (Hq + 2 Hkv) * D
    # (4 x 32 here, against 2 x 32 and 32 contiguous; head strides are D in both layouts)
    lens = [11, 30]
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 1, 32, seed=7)
    qkv = torch.cat([q, k, v], 1)
    assert not qkv[:, :2].is_contiguous()
    for t in (q, k, v, qkv):
        t.requires_grad_(True)
    out = varlen_attention(q, k, v, cu_q, cu_k)
    out_s = varlen_attention(qkv[:, :2], qkv[:, 2:3], qkv[:, 3:], cu_q, cu_k)
    assert torch.equal(out, out_s)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(8)).to(DEVICE, out.dtype)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    (dqkv,) = torch.autograd.grad(out_s, (qkv,), dout)
    assert torch.equal(torch.cat(grads, 1), dqkv)


def test_k_and_v_in_different_layouts_and_a_strided_output_gradient():
    """K contiguous beside a V that is half of a fused [T, 2, Hkv, D] K/V projection (token strides
    Hkv D and 2 Hkv D), and an upstream gradient that is a head slice of a wider one: each tensor
    is read with its own strides, bit-for-bit the contiguous result, forward and backward."""
    lens = [11, 30]
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 1, 32, seed=10)
    kv = torch.stack([torch.zeros_like(v), v], 1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, kv)]
    out = varlen_attention(*leaves[:3], cu_q, cu_k)
    out_s = varlen_attention(leaves[0], leaves[1], leaves[3][:, 1], cu_q, cu_k)
    assert leaves[3][:, 1].stride(0) != k.stride(0) and torch.equal(out, out_s)
    wide = torch.randn(out.shape[0], 3, out.shape[2], generator=torch.Generator().manual_seed(11)).to(DEVICE, out.dtype)
    dout = wide[:, :2]
    assert not dout.is_contiguous()
    dense = torch.autograd.grad(out, leaves[:3], dout.contiguous())
    strided = torch.autograd.grad(out_s, (leaves[0], leaves[1], leaves[3]), dout)
    for name, got, want in zip(("dq", "dk", "dv"), (strided[0], strided[1], strided[2][:, 1]), dense):
        assert torch.equal(got, want), name



def test_upstream_gradients_in_any_layout():
    """An upstream gradient whose head dim is not contiguous (a permuted one, strides (32, 1, 2)) or
    an expanded one (``out.sum()``'s: every stride 0) gives the contiguous copy's gradients."""
    lens = [11, 24]
    q, k, v, cu, _ = _inputs(lens, lens, 2, 1, 16, seed=15)
    gen = torch.Generator().manual_seed(16)
    permuted = torch.randn(q.shape[0], 16, 2, generator=gen).to(DEVICE, q.dtype).permute(0, 2, 1)
    expanded = torch.ones((), dtype=q.dtype, device=DEVICE).expand(q.shape)
    for dout in (permuted, expanded):
        assert dout.stride(-1) != 1
        got, want = _out_and_grads(q, k, v, cu, dout), _out_and_grads(q, k, v, cu, dout.contiguous())
        for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
            assert torch.equal(g, w), (name, dout.stride())


@pytest.mark.parametrize("causal,over_keys", [(True, False), (False, False), (True, True)])
def test_work_list_covers_every_tile_once_longest_first(causal, over_keys):
    lens_q = [130, 0, 1, 64, 65, 7, 300]
    lens_k = [130, 5, 1, 80, 65, 0, 310]
    block = 64
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    tiled = lens_k if over_keys else lens_q
    n_slots = sum(tiled) // block + len(tiled)
    seq, blk = build_work_list(cu_q, cu_k, n_slots, block, causal=causal, over_keys=over_keys)
    seq, blk = seq.cpu().tolist(), blk.cpu().tolist()
    tiles = [(s, b) for s, b in zip(seq, blk) if s >= 0]
    expected = {(s, b) for s, n in enumerate(tiled) for b in range((n + block - 1) // block)}
    assert sorted(tiles) == sorted(expected) and len(tiles) == len(expected)
    assert all(s < 0 for s in seq[len(tiles):]), "idle slots must come last"

    def cost(s, b):
        lq, lk = lens_q[s], lens_k[s]
        if over_keys:
            return max(0, lq - max(0, b * block - (lk - lq))) if causal else lq
        return max(0, min(lk, (b + 1) * block + lk - lq)) if causal else lk

    costs = [cost(s, b) for s, b in tiles]
    assert costs == sorted(costs, reverse=True)
    naive, _ = build_work_list(cu_q, cu_k, n_slots, block, causal=causal, schedule="naive", over_keys=over_keys)
    naive = [s for s in naive.cpu().tolist() if s >= 0]
    assert naive == sorted(naive)  # sequence order


def test_schedule_model_longest_first_removes_the_tail():
    """spec.schedule_makespan (the estimate the suite prints beside its timings): on a long-tail
    batch with few heads per launch, naive order leaves a tail; longest-first stays near balance."""
    lens = [4000] + [300, 500, 200, 800, 150, 600, 400, 350] * 3
    naive = spec.schedule_makespan(lens, 5, 128, schedule="naive", n_slots=132)
    ours = spec.schedule_makespan(lens, 5, 128, schedule="longest_first", n_slots=132)
    assert ours < 1.1 < naive
    assert spec.schedule_makespan([], 5, 128) == 1.0
    # the model's tile costs agree with the device work list's cost (keys seen by a tile's last row)
    assert spec.tile_costs([5, 130], 64, overhead=0) == [5, 64, 128, 130]
    assert spec.tile_costs([3], 64, seqlens_k=[10], overhead=0) == [10]


def test_plan_is_cached_per_cu_seqlens_object_and_revalidated_after_mutation():
    clear_plan_cache()
    lens = [5, 9]
    q, k, v, cu_q, cu_k = _inputs(lens, lens, 2, 2, 32)
    varlen_attention(q, k, v, cu_q, cu_k)
    cu_q[1] = 20  # in place: bumps the version counter, so the cached plan is not reused
    with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
        varlen_attention(q, k, v, cu_q, cu_k)


def _out_and_grads(q, k, v, cu, dout, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = varlen_attention(*leaves, cu, cu, **kw)
    return [out.detach(), *torch.autograd.grad(out, leaves, dout)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("changed", ["BLOCK_M", "DKDV_BLOCK_N"])
def test_a_cached_plan_follows_each_calls_tiles(causal, changed):
    """The plan cached on the cu_seqlens objects is tiled for one forward BLOCK_M and one dK/dV
    DKDV_BLOCK_N: a later call with a smaller tile on the same objects must not reuse those work
    lists (40 rows or keys in tiles of 32 then 16: the last ones would have no tile, their output
    never written). The first call runs on other inputs, so memory it leaves behind cannot pass
    for the second call's results."""
    q, k, v, cu, _ = _inputs([40], [40], 2, 2, 16, seed=12)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(13)).to(DEVICE, q.dtype)
    fwd, bwd = default_fwd_config(16), {**default_bwd_config(16), "DKDV_BLOCK_M": 16}

    def tiles(size):
        return dict(config={**fwd, "BLOCK_M": size if changed == "BLOCK_M" else 16},
                    bwd_config={**bwd, "DKDV_BLOCK_N": size if changed == "DKDV_BLOCK_N" else 16})

    clear_plan_cache()
    _out_and_grads(q * 2, k.flip(0), v * 3, cu, dout, causal=causal, **tiles(32))
    again = _out_and_grads(q, k, v, cu, dout, causal=causal, **tiles(16))
    clear_plan_cache()  # the same call with no plan cached: what it should give
    fresh = _out_and_grads(q, k, v, cu, dout, causal=causal, **tiles(16))
    for name, got, want in zip(("out", "dq", "dk", "dv"), again, fresh):
        assert torch.equal(got, want), name


def test_a_plan_built_unchecked_is_checked_when_a_later_call_asks():
    clear_plan_cache()
    q, k, v, cu, _ = _inputs([40], [40], 2, 2, 16, seed=14)
    varlen_attention(q, k, v, cu, cu, max_seqlen_q=8, max_seqlen_k=40, check_inputs=False)  # the caller's risk
    with pytest.raises(ValueError, match="max_seqlen_q=8"):
        varlen_attention(q, k, v, cu, cu, max_seqlen_q=8, max_seqlen_k=40, check_inputs=True)


# ---------------------------------------------------------------------------------------- decode


def _decode_inputs(lens, lmax, hq, hkv, d, dtype=torch.float16, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b = len(lens)
    q = torch.randn(b, hq, d, generator=g).to(DEVICE, dtype)
    kc = torch.randn(b, lmax, hkv, d, generator=g).to(DEVICE, dtype)
    vc = torch.randn(b, lmax, hkv, d, generator=g).to(DEVICE, dtype)
    return q, kc, vc, torch.tensor(lens, dtype=torch.int32, device=DEVICE)


def check_decode(q, kc, vc, seqlens, softcap=0.0, window_size=(-1, -1), **kw):
    """decode_attention's out (2x torch fp16/bf16, no scale bias) and lse (fp32 rule) against fp64."""
    feats = dict(softcap=softcap, window_size=window_size)
    out, lse = decode_attention(q, kc, vc, seqlens, return_lse=True, **feats, **kw)
    bt = kw.get("block_table")
    ref, ref_lse = decode_attention_reference(q.double(), kc.double(), vc.double(), seqlens, block_table=bt,
                                              return_lse=True, compute_dtype=torch.float64, **feats)
    same = decode_attention_reference(q, kc, vc, seqlens, block_table=bt, compute_dtype=q.dtype, **feats)
    lse_scale, longest = decode_lse_scale(q, kc, seqlens, 1.0 / math.sqrt(q.shape[-1]), block_table=bt, **feats)
    expect(check_fp32("decode/lse", lse, ref_lse, terms=longest, scale=lse_scale),
           *sixteen_bit_checks("decode/out", out, same, ref))
    return out



@pytest.mark.parametrize("num_splits", [None, 1])
def test_decode_lengths_one_to_lmax(num_splits):
    lmax = 40
    lens = list(range(1, lmax + 1))
    lens = lens[::3] + lens[1::3] + lens[2::3] + [0]  # every length 1..Lmax, shuffled, plus an empty cache
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4, 1, 32)
    out = check_decode(q, kc, vc, sl, num_splits=num_splits)
    assert torch.equal(out[-1].float(), torch.zeros_like(out[-1].float()))


def test_decode_gqa7_skewed_splits_and_4d_query():
    lens = [97, 3, 1, 12, 0, 5]  # one long sequence over 4 splits of 32 tokens, the rest short
    q, kc, vc, sl = _decode_inputs(lens, 100, 7, 1, 64, seed=4)
    out = check_decode(q, kc, vc, sl)
    out4 = decode_attention(q[:, None], kc, vc, sl)
    assert out4.shape == (6, 1, 7, 64) and torch.equal(out4[:, 0], out)


def _paged(kc, vc, page, seed):
    """The contiguous cache [B, L, Hkv, D] as shuffled pages [B * L / page, page, Hkv, D] and its table."""
    b, lmax = kc.shape[:2]
    per_seq = lmax // page
    table = torch.randperm(b * per_seq, generator=torch.Generator().manual_seed(seed))
    table = table.reshape(b, per_seq).to(torch.int32).to(DEVICE)
    kp = torch.empty(b * per_seq, page, *kc.shape[2:], dtype=kc.dtype, device=DEVICE)
    vp = torch.empty_like(kp)
    for i, j in itertools.product(range(b), range(per_seq)):
        kp[table[i, j]] = kc[i, j * page:(j + 1) * page]
        vp[table[i, j]] = vc[i, j * page:(j + 1) * page]
    return kp, vp, table


def test_decode_paged_cache_matches_contiguous():
    lens, lmax, page = [45, 7, 30], 48, 16
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4, 2, 32, seed=6)
    kp, vp, table = _paged(kc, vc, page, seed=0)
    paged = check_decode(q, kp, vp, sl, block_table=table)
    assert torch.equal(paged, decode_attention(q, kc, vc, sl))


@pytest.mark.parametrize("num_splits", [1, None])
def test_decode_head_dim_not_a_power_of_two(num_splits):
    """D = 40 runs in 64-wide blocks: the 24 padded columns are masked on every load and store
    (unmasked, they read the next head's and write past the output)."""
    q, kc, vc, sl = _decode_inputs([50, 33], 50, 4, 2, 40, seed=17)
    check_decode(q, kc, vc, sl, num_splits=num_splits)


def test_decode_with_k_and_v_in_different_layouts_and_a_sliced_block_table():
    """A V cache that is half of a fused [B, L, 2, Hkv, D] K/V buffer (token stride 2 Hkv D) beside
    a contiguous K cache, and a block table that is the first columns of a wider one (vLLM keeps
    one table for the longest sequence): each read with its own strides, bit-for-bit the dense result."""
    lens, lmax, page = [45, 7, 30], 48, 16
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4, 2, 32, seed=9)
    kv = torch.stack([torch.zeros_like(vc), vc], 2)
    assert kv[:, :, 1].stride(1) != kc.stride(1)
    dense = decode_attention(q, kc, vc, sl)
    assert torch.equal(decode_attention(q, kc, kv[:, :, 1], sl), dense)
    kp, vp, table = _paged(kc, vc, page, seed=1)
    wide = torch.full((len(lens), table.shape[1] + 3), -1, dtype=table.dtype, device=DEVICE)
    wide[:, :table.shape[1]] = table
    wide[:, table.shape[1]:] = table[:, :1]  # valid pages, never the sequence's own next ones
    assert torch.equal(decode_attention(q, kp, vp, sl, block_table=wide[:, :table.shape[1]]), dense)


def test_paged_decode_with_k_and_v_pages_in_different_layouts():
    """V's pages as half of a fused [pages, page, 2, Hkv, D] buffer (page stride 2 x page x Hkv x D,
    token stride 2 Hkv D) beside dense K pages: each cache read with its own page and token strides,
    bit-for-bit the dense pages' result, in one split and in several."""
    lens, lmax, page = [45, 7, 30], 48, 16
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4, 2, 32, seed=18)
    kp, vp, table = _paged(kc, vc, page, seed=2)
    v_half = torch.stack([torch.zeros_like(vp), vp], 2)[:, :, 1]
    assert v_half.stride()[:2] != kp.stride()[:2]
    for num_splits in (1, None):
        assert torch.equal(decode_attention(q, kp, v_half, sl, block_table=table, num_splits=num_splits),
                           decode_attention(q, kp, vp, sl, block_table=table, num_splits=num_splits))


# (softcap, window_size, num_splits, page): Gemma 2's softcap 50 (q scaled x30 so scores reach its
# curved range) and left windows of 0, 9 and 30 keys, over split and single-split launches.
DECODE_FEATURES = {
    "softcap50-splits": (50.0, (-1, -1), None, None),
    "window9-splits": (0.0, (9, -1), None, None),
    "window0-paged": (0.0, (0, 0), None, 16),
    "window30-softcap-paged-single": (50.0, (30, 4), 1, 16),
}


@pytest.mark.parametrize("case", list(DECODE_FEATURES))
def test_decode_softcap_and_window(case):
    softcap, window, num_splits, page = DECODE_FEATURES[case]
    lens, lmax = [45, 7, 30, 0, 1], 48
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4, 2, 32, seed=9)
    if softcap:
        q = q * 30
    kw = {}
    if page:
        kc, vc, kw["block_table"] = _paged(kc, vc, page, seed=3)
    out = check_decode(q, kc, vc, sl, softcap=softcap, window_size=window, num_splits=num_splits, **kw)
    assert torch.isfinite(out).all()


# (Sq, causal, window_size, num_splits, page): several query tokens per sequence, the last Sq
# positions of each cache; the 1-token and empty caches leave queries that see no key (out 0).
DECODE_MULTI = {
    "sq4-causal-paged": (4, True, (-1, -1), None, 16),
    "sq7-full-single": (7, False, (-1, -1), 1, None),
    "sq6-causal-window": (6, True, (5, -1), None, None),
}


@pytest.mark.parametrize("case", list(DECODE_MULTI))
def test_decode_multi_token_query(case):
    sq, causal, window, num_splits, page = DECODE_MULTI[case]
    lens, lmax = [45, 7, 30, 0, 1], 48
    q, kc, vc, sl = _decode_inputs(lens, lmax, 4 * sq, 2, 32, seed=10)
    q = q.reshape(len(lens), sq, 4, 32)
    packed_k = torch.cat([kc[b, :n] for b, n in enumerate(lens)])  # the lse's scale as varlen attention's
    kw = {"block_table": None}
    if page:
        kc, vc, kw["block_table"] = _paged(kc, vc, page, seed=4)
    feats = dict(causal=causal, window_size=window, **kw)
    out, lse = decode_attention(q, kc, vc, sl, return_lse=True, num_splits=num_splits, **feats)
    assert out.shape == q.shape and lse.shape == (len(lens), 4, sq)
    ref, ref_lse = decode_attention_reference(q.double(), kc.double(), vc.double(), sl, return_lse=True,
                                              compute_dtype=torch.float64, **feats)
    same = decode_attention_reference(q, kc, vc, sl, compute_dtype=q.dtype, **feats)
    cu_q, cu_k = _cu([sq] * len(lens)), _cu(lens)
    lse_scale, longest = attention_lse_scale(q.reshape(-1, 4, 32), packed_k, cu_q, cu_k, causal,
                                             1.0 / math.sqrt(32), window_size=window)
    expect(check_fp32("decode/lse", lse.transpose(1, 2).reshape(-1, 4), ref_lse.transpose(1, 2).reshape(-1, 4),
                      terms=longest, scale=lse_scale.t()), *sixteen_bit_checks("decode/out", out, same, ref))


# ------------------------------------------------------------------------------------- bad input


def _bad_varlen(**over):
    q, k, v, cu_q, cu_k = _inputs([4, 6], [4, 6], 4, 2, 32)
    args = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    for key, val in over.items():
        args[key] = val(args) if callable(val) else val
    return args


BAD_VARLEN = {
    "heads not a multiple": ({"k": lambda a: a["k"][:, :1].repeat(1, 3, 1).contiguous(),
                              "v": lambda a: a["v"][:, :1].repeat(1, 3, 1).contiguous()}, "k has 3 heads"),
    "head dims differ": ({"k": lambda a: a["k"][..., :16].contiguous()}, "k has head dim 16"),
    "v shape differs": ({"v": lambda a: a["v"][:5]}, "v has shape"),
    "fp32 inputs": ({"q": lambda a: a["q"].float(), "k": lambda a: a["k"].float(),
                     "v": lambda a: a["v"].float()}, "q has dtype"),
    "k dtype differs": ({"k": lambda a: a["k"].to(torch.bfloat16)}, "k has dtype"),
    "cu int64": ({"cu_seqlens_q": lambda a: a["cu_seqlens_q"].long()}, "cu_seqlens_q must be int32"),
    "cu batch differs": ({"cu_seqlens_k": lambda a: torch.tensor([0, 4, 6, 10], dtype=torch.int32, device=DEVICE)},
                         "cu_seqlens_k has 4 entries"),
    "cu decreasing": ({"cu_seqlens_k": lambda a: torch.tensor([0, 8, 10], dtype=torch.int32, device=DEVICE),
                       "cu_seqlens_q": lambda a: torch.tensor([0, 11, 10], dtype=torch.int32, device=DEVICE)},
                      "cu_seqlens_q must be non-decreasing"),
    "cu not ending at T": ({"cu_seqlens_q": lambda a: torch.tensor([0, 4, 9], dtype=torch.int32, device=DEVICE)},
                           "cu_seqlens_q must end at the number of tokens 10"),
    "cu not starting at 0": ({"cu_seqlens_k": lambda a: torch.tensor([1, 4, 10], dtype=torch.int32,
                                                                     device=DEVICE)}, "cu_seqlens_k must start at 0"),
    "cu on another device": ({"cu_seqlens_q": lambda a: a["cu_seqlens_q"].to("meta")}, "cu_seqlens_q is on meta"),
    "q not 3-d": ({"q": lambda a: a["q"][None]}, "q must have 3 dimensions"),
}


@pytest.mark.parametrize("case", list(BAD_VARLEN))
def test_bad_varlen_input_names_the_argument(case):
    over, message = BAD_VARLEN[case]
    clear_plan_cache()
    with pytest.raises(ValueError, match=message):
        varlen_attention(**_bad_varlen(**over))


def test_bad_max_seqlen_and_schedule():
    args = _bad_varlen()
    with pytest.raises(ValueError, match="max_seqlen_q=3 is below the longest sequence"):
        varlen_attention(**args, max_seqlen_q=3)
    with pytest.raises(ValueError, match="max_seqlen_k must be a non-negative int"):
        varlen_attention(**args, max_seqlen_k=6.5)
    with pytest.raises(ValueError, match="schedule must be one of"):
        varlen_attention(**args, schedule="random")
    with pytest.raises(ValueError, match="config: unknown keys"):
        varlen_attention(**args, config={"BLOCK_Q": 16})


def test_bad_decode_input_names_the_argument():
    q, kc, vc, sl = _decode_inputs([3, 5], 8, 4, 2, 32)
    with pytest.raises(ValueError, match="cache_seqlens must be int32"):
        decode_attention(q, kc, vc, sl.long())
    with pytest.raises(ValueError, match="cache_seqlens has 1 entries"):
        decode_attention(q, kc, vc, sl[:1])
    with pytest.raises(ValueError, match="k_cache has head dim 16"):
        decode_attention(q, kc[..., :16], vc[..., :16], sl)
    with pytest.raises(ValueError, match="k_cache has batch 1"):
        decode_attention(q, kc[:1], vc[:1], sl)
    with pytest.raises(ValueError, match="block_table must be int32"):
        decode_attention(q, kc, vc, sl, block_table=torch.zeros(2, 1, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="num_splits must be a positive int"):
        decode_attention(q, kc, vc, sl, num_splits=0)


# --------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("hq,hkv", [(28, 4), (40, 8)])
def test_gpu_varlen_real_heads(dtype, hq, hkv):
    lens = [1, 0, 700, 129, 2048, 64, 5, 300]
    q, k, v, cu_q, cu_k = _inputs(lens, lens, hq, hkv, 128, dtype=dtype)
    assert default_fwd_config(128, dtype)["BLOCK_M"] >= 64
    check_varlen(q, k, v, cu_q, cu_k, True)


@pytest.mark.gpu
def test_gpu_varlen_q_shorter_than_k_bf16_d64():
    q, k, v, cu_q, cu_k = _inputs([100, 1, 513], [900, 50, 513], 8, 8, 64, dtype=torch.bfloat16)
    check_varlen(q, k, v, cu_q, cu_k, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_decode_skewed_bf16(dtype):
    lens = [16000, 12, 900, 1, 0, 3000, 77, 250]
    q, kc, vc, sl = _decode_inputs(lens, 16384, 28, 4, 128, dtype=dtype)
    check_decode(q, kc, vc, sl)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("softcap,window,page", [(50.0, (-1, -1), None), (0.0, (4096, -1), 256), (50.0, (700, 0), 16)])
def test_gpu_decode_softcap_window(dtype, softcap, window, page):
    lens = [8000, 12, 900, 1, 0, 3000, 77, 250]
    q, kc, vc, sl = _decode_inputs(lens, 8192, 32, 8, 128, dtype=dtype)
    kw = {}
    if page:
        kc, vc, kw["block_table"] = _paged(kc, vc, page, seed=5)
    check_decode(q * 30 if softcap else q, kc, vc, sl, softcap=softcap, window_size=window, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sq,group,page", [(4, 8, 16), (16, 8, 256), (5, 4, None)])
def test_gpu_decode_multi_token(dtype, sq, group, page):
    lens = [8000, 12, 900, 1, 0, 3000, 77, 250]
    q, kc, vc, sl = _decode_inputs(lens, 8192, 4 * group * sq, 4, 128, dtype=dtype)
    q = q.reshape(len(lens), sq, 4 * group, 128)
    kw = {"block_table": None}
    if page:
        kc, vc, kw["block_table"] = _paged(kc, vc, page, seed=6)
    out = decode_attention(q, kc, vc, sl, causal=True, **kw)
    ref = decode_attention_reference(q.double(), kc.double(), vc.double(), sl, compute_dtype=torch.float64,
                                     causal=True, **kw)
    same = decode_attention_reference(q, kc, vc, sl, compute_dtype=q.dtype, causal=True, **kw)
    expect(*sixteen_bit_checks("decode/out", out, same, ref))
