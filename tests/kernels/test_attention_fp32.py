"""The attention kernels' arithmetic at fp32 precision (interpreter only).

The public API takes fp16/bf16, whose outputs round at 4.9e-4 (fp16) relative: a relative error of
3e-4 inside the arithmetic (the backward's delta, a scale, a log-sum-exp read 2e-4 high) can hide
under that rounding, whatever rule checks the 16-bit outputs. In the interpreter ``tl.dot`` on fp32
is an exact numpy matmul, so the same kernels, launched through the internal launchers
(``api._fwd``, ``api._bwd``, ``api._decode``) on fp32 q, k, v, compute every intermediate and
output in fp32, and every output (out, lse, dq, dk, dv, decode out and lse) must meet the fp32
rule of ``polytrace_kernels.tolerance`` with the elementwise scales of
``_bounds.attention_fp32_scales``. Measured: at most 1.4 fp32 roundings at that scale (bound: 8).
Includes every causal offset ``Lk - Lq`` modulo the key block (the unmasked-loop boundary).
"""

from __future__ import annotations

import math

import pytest
import torch
from _bounds import attention_fp32_scales, attention_lse_scale, decode_lse_scale, expect

from polytrace_kernels._interpreter import interpreting
from polytrace_kernels.attention import api, decode_attention_reference, varlen_attention_reference
from polytrace_kernels.attention.schedule import varlen_plan
from polytrace_kernels.tolerance import check_fp32

pytestmark = pytest.mark.skipif(not interpreting(), reason="fp32 attention needs the interpreter's exact fp32 tl.dot")


def _cu(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32)


CASES = {
    # name: (lens_q, lens_k, heads_q, heads_kv, head_dim, causal, tiles)
    "ragged-0-1": ([5, 0, 17, 1, 33, 16], None, 2, 2, 32, True, None),
    "gqa4-d64": ([23, 9, 40], None, 4, 1, 64, True, None),
    "q-shorter-than-k": ([3, 10, 0, 7, 1], [9, 29, 4, 7, 5], 4, 2, 32, True, None),
    "q-longer-than-k": ([12, 20], [5, 0], 2, 1, 32, True, None),
    "non-causal-cross": ([5, 21, 0], [8, 30, 6], 3, 1, 32, False, None),
    "head-dim-24": ([19, 13], None, 2, 2, 24, True, None),
    # Lk - Lq = 0..17 with 20 queries (two 16-row blocks): every residue of the 16-key block, so the
    # forward's unmasked-loop end and dK/dV's first query block are hit at each alignment
    "every-causal-offset": ([20] * 18, [20 + i for i in range(18)], 1, 1, 16, True, None),
    # GPU tiles (64-key blocks): offsets 61-65 around a block boundary, one sequence over two tiles
    "sm90-tiles-offsets": ([7, 7, 7, 7, 7, 130], [68, 69, 70, 71, 72, 130], 2, 1, 32, True, (9, 0)),
    "sm80-tiles-d128": ([70, 3, 20], [70, 66, 90], 2, 1, 128, True, (8, 0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_varlen_kernels_at_fp32_precision(case):
    lens_q, lens_k, hq, hkv, d, causal, capability = CASES[case]
    lens_k = lens_k or lens_q
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(sum(lens_q), hq, d, generator=gen) * 2
    k = torch.randn(sum(lens_k), hkv, d, generator=gen) * 2
    v = torch.randn(sum(lens_k), hkv, d, generator=gen)
    dout = torch.randn(sum(lens_q), hq, d, generator=gen)
    check_fp32_varlen(case, q, k, v, dout, _cu(lens_q), _cu(lens_k), causal, capability)


def check_fp32_varlen(case, q, k, v, dout, cu_q, cu_k, causal, capability=None, softcap=0.0, window_size=(-1, -1)):
    """Run the varlen kernels on fp32 q, k, v through the internal launchers; every output finite
    and within the fp32 rule of its fp64 truth. ``softcap`` / ``window_size`` run the ext kernels."""
    d = q.shape[-1]
    fwd = api.default_fwd_config(d, torch.float16, capability=capability)
    bwd = api.default_bwd_config(d, torch.float16, capability=capability)
    scale = 1.0 / math.sqrt(d)
    plan = varlen_plan(cu_q, cu_k, q.shape[0], k.shape[0], block_m=fwd["BLOCK_M"], causal=causal)
    window = None if min(window_size) < 0 and max(window_size) < 0 else tuple(window_size)
    ext = (softcap, window) if softcap or window else None
    out, lse = api._fwd(q, k, v, plan, causal, scale, fwd, ext)
    dq, dk, dv = api._bwd(dout, q, k, v, out, lse, plan, causal, scale, bwd, ext)
    assert out.dtype == dq.dtype == torch.float32  # the kernels really ran in fp32
    for name, t in (("out", out), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(t).all(), f"{case}/{name} has {int((~torch.isfinite(t)).sum())} non-finite values"
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    feats = dict(softcap=softcap, window_size=window_size)
    ref, ref_lse = varlen_attention_reference(q64, k64, v64, cu_q, cu_k, causal=causal, return_lse=True,
                                              compute_dtype=torch.float64, **feats)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    scales = attention_fp32_scales(q, k, v, dout, cu_q, cu_k, causal, scale, **feats)
    lse_scale, most = attention_lse_scale(q, k, cu_q, cu_k, causal, scale, **feats)
    expect(check_fp32(f"{case}/lse", lse, ref_lse, terms=most, scale=lse_scale),
           *[check_fp32(f"{case}/{name}", ours, truth.detach(), scale=scales[name])
             for name, ours, truth in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), (ref, *ref_grads))])


# name: (lens_q, lens_k, causal, softcap, window_size, tiles); 2 query heads over 1 KV head, d = 32
FEATURE_CASES = {
    # c = 5 against scores of std ~4: tanh far from linear, its slope down to ~0.1 in the backward
    "softcap-causal": ([23, 9, 40], None, True, 5.0, (-1, -1), None),
    "softcap-cross": ([5, 21, 0], [8, 30, 6], False, 5.0, (-1, -1), None),
    "window-both-sides": ([5, 37, 20], [8, 30, 33], False, 0.0, (6, 3), None),
    "window-left-causal": ([40, 3, 20], [40, 9, 26], True, 0.0, (7, 5), None),  # causal: right becomes 0
    "window-right-only": ([30, 12], [30, 20], False, 0.0, (-1, 2), None),
    # right 1 on 16-key / 16-row tiles: row 15 sees key 16, the first of the next key tile (the
    # forward's key range ends one past it), and key 16's first row is the last of row block 0 (the
    # backward's row range starts there): a range one short at either end drops that tile
    "window-right-1-tile-edge": ([40, 17], None, False, 0.0, (-1, 1), None),
    "window-left-0": ([17, 33], [17, 20], False, 0.0, (0, 0), None),  # one key each; rows past Lk see none
    "softcap-window-sm90": ([7, 130, 70], [68, 130, 90], True, 5.0, (70, -1), (9, 0)),
    # more queries than keys (diagonal -17 in the first sequence): an unbounded right side must reach
    # key 2 from query row 0, 19 keys right of its diagonal; one clamped at the key count (7) left
    # rows 0-9 with no key at all. (5, 100): a finite right past every diagonal is unbounded too
    "window-left-more-queries-than-keys": ([20, 6], [3, 4], False, 0.0, (5, -1), None),
    "window-right-past-the-keys": ([20, 6], [3, 4], False, 0.0, (5, 100), None),
    # the converse: fewer queries than keys (diagonal 37 in the first sequence) and an unbounded left
    # side: query row 0 must reach key 0, 37 keys left of its diagonal; a left side clamped at the
    # query count (8) instead of the key count cut keys 0-28 off
    "window-left-unbounded-fewer-queries-than-keys": ([3, 5], [40, 30], False, 0.0, (-1, 2), None),
}


@pytest.mark.parametrize("case", list(FEATURE_CASES))
def test_softcap_and_window_at_fp32_precision(case):
    lens_q, lens_k, causal, softcap, window, capability = FEATURE_CASES[case]
    lens_k = lens_k or lens_q
    gen = torch.Generator().manual_seed(13)
    q = torch.randn(sum(lens_q), 2, 32, generator=gen) * 2
    k = torch.randn(sum(lens_k), 1, 32, generator=gen) * 2
    v = torch.randn(sum(lens_k), 1, 32, generator=gen)
    dout = torch.randn(sum(lens_q), 2, 32, generator=gen)
    check_fp32_varlen(case, q, k, v, dout, _cu(lens_q), _cu(lens_k), causal, capability, softcap, window)


def check_fp32_decode(split_tokens, paged, softcap=0.0, window_size=(-1, -1), sq=0, causal=False,
                      lens=(40, 0, 1, 17, 32, 9)):
    """The decode kernels on fp32 inputs (by default 6 sequences of 0..40 tokens, GQA 2, d 32,
    16-key blocks), contiguous or paged (8-token pages), q [B, Hq, D] or (sq > 0) [B, sq, Hq, D],
    out and lse within the fp32 rule of their fp64 truth."""
    lens, lmax, hq, hkv, d, page = list(lens), 48, 4, 2, 32, 8
    gen = torch.Generator().manual_seed(12)
    q = torch.randn(len(lens), *([sq] if sq else []), hq, d, generator=gen) * 2
    kc = torch.randn(len(lens), lmax, hkv, d, generator=gen) * 2
    vc = torch.randn(len(lens), lmax, hkv, d, generator=gen)
    seqlens = torch.tensor(lens, dtype=torch.int32)
    table = None
    k_in, v_in, page_size = kc, vc, 1
    if paged:
        per_seq = lmax // page
        table = torch.randperm(len(lens) * per_seq, generator=gen).reshape(len(lens), per_seq).to(torch.int32)
        k_in = torch.empty(len(lens) * per_seq, page, hkv, d)
        v_in = torch.empty_like(k_in)
        for b in range(len(lens)):
            for j in range(per_seq):
                k_in[table[b, j]] = kc[b, j * page:(j + 1) * page]
                v_in[table[b, j]] = vc[b, j * page:(j + 1) * page]
        page_size = page
    cfg = api.default_decode_config(d, on_cuda=False)  # 16-key blocks
    scale = 1.0 / math.sqrt(d)
    right = (0 if causal else window_size[1]) if sq else -1  # one query token: nothing right of it
    ext = (softcap, window_size[0], right) if softcap or window_size[0] >= 0 or right >= 0 or sq else None
    out, lse = api._decode(q, k_in, v_in, seqlens, table, lmax, page_size, scale, split_tokens, cfg, ext)
    assert out.dtype == torch.float32
    feats = dict(softcap=softcap, window_size=window_size)
    ref, ref_lse = decode_attention_reference(q.double(), kc.double(), vc.double(), seqlens, return_lse=True,
                                              compute_dtype=torch.float64, causal=causal, **feats)
    # the decode is varlen attention with sq (or one) queries per sequence: the same error model
    packed_k = torch.cat([kc[b, :n] for b, n in enumerate(lens)])
    packed_v = torch.cat([vc[b, :n] for b, n in enumerate(lens)])
    packed_q = q.reshape(-1, hq, d)
    cu_q = _cu([max(sq, 1)] * len(lens))
    scales = attention_fp32_scales(packed_q, packed_k, packed_v, torch.zeros_like(packed_q), cu_q, _cu(lens),
                                   causal, scale, **feats)
    if sq:
        out, ref = out.reshape(-1, hq, d), ref.reshape(-1, hq, d)
        lse, ref_lse = lse.reshape(-1, hq), ref_lse.transpose(1, 2).reshape(-1, hq)
        lse_scale, longest = attention_lse_scale(packed_q, packed_k, cu_q, _cu(lens), causal, scale, **feats)
        lse_scale = lse_scale.t()
    else:
        lse_scale, longest = decode_lse_scale(q, kc, seqlens, scale, **feats)
    expect(check_fp32("decode/out", out, ref, scale=scales["out"]),
           check_fp32("decode/lse", lse, ref_lse, terms=longest, scale=lse_scale))


@pytest.mark.parametrize("split_tokens", [64, 32, 16])
@pytest.mark.parametrize("paged", [False, True])
def test_decode_kernels_at_fp32_precision(split_tokens, paged):
    """One split (the single-split path), and 2 or 3 splits merged by the combine kernel."""
    check_fp32_decode(split_tokens, paged)


# (split_tokens, paged, softcap, window_size). Left 5 on the 40-token cache keeps keys 34..39: two
# splits of 16 wholly left of the window (empty partials), the third's first tile masked at 32, 33;
# left 0 keeps only the last key; left 20 spans three splits; right never masks one query token.
DECODE_FEATURES = {
    "softcap-single": (64, False, 5.0, (-1, -1)),
    "softcap-paged-splits": (16, True, 5.0, (-1, -1)),
    "window5-splits": (16, False, 0.0, (5, -1)),
    "window5-paged-single": (64, True, 0.0, (5, 7)),
    "window0-paged-splits": (16, True, 0.0, (0, -1)),
    "window20-softcap-splits": (16, False, 5.0, (20, 0)),
    "window20-softcap-paged": (32, True, 5.0, (20, 3)),
    # left 8 on the 40-token cache: the window's first key, 31, is the last of the tile 16..31, so a
    # window start one key late skips that whole tile (the loop starts on a 16-key boundary)
    "window8-tile-edge-paged-splits": (16, True, 0.0, (8, -1)),
}


@pytest.mark.parametrize("case", list(DECODE_FEATURES))
def test_decode_softcap_and_window_at_fp32_precision(case):
    check_fp32_decode(*DECODE_FEATURES[case])


# (split_tokens, paged, softcap, window_size, sq, causal[, lens]): several query tokens per sequence
# (the last sq positions; queries of the 1-token cache before its start see no key: out 0, lse
# +inf), causal bottom-right or not, over single and split launches; 3 tokens x GQA 2 = 6 rows of a
# 16-row block, 33 tokens = 66 rows over three row blocks of 32 (the last holding 2): the fewest
# tokens with a third block. sq33 on 3 of the 6 caches (the interpreter's combine runs B x 33 x 4
# programs: 3 x 33 x 4, not 6 x 33 x 4): 40 tokens (three splits of 16, every row block with keys),
# 0 (idle splits) and 17 (a key past a 16-key tile; its first 16 queries precede the cache and see
# no key); the 1-, 9- and 32-token caches' paths are the sq3 cases' (the same splits and pages).
DECODE_MULTI = {
    "sq3-causal-paged-splits": (16, True, 0.0, (-1, -1), 3, True),
    "sq3-full-single": (64, False, 0.0, (-1, -1), 3, False),
    "sq5-window-causal-splits": (16, False, 0.0, (6, -1), 5, True),
    "sq4-window-both-softcap-paged": (32, True, 5.0, (4, 2), 4, False),
    "sq33-causal-paged-splits": (16, True, 0.0, (-1, -1), 33, True, (40, 0, 17)),
    # 3 tokens of the 40-token cache, left 6: the block's first row (position 37) needs key 31, the
    # last of the tile 16..31, the row block's window start on a tile edge
    "sq3-window6-tile-edge-splits": (16, False, 0.0, (6, -1), 3, True),
    # not causal, a left window only: each query also sees every key after its position (the right
    # side unbounded, not 0): 4 tokens over split and paged launches
    "sq4-window-left-only-not-causal-paged-splits": (16, True, 0.0, (5, -1), 4, False),
}


@pytest.mark.parametrize("case", list(DECODE_MULTI))
def test_decode_multi_token_at_fp32_precision(case):
    check_fp32_decode(*DECODE_MULTI[case])
