"""Masked lanes of the varlen attention kernels contribute exactly 0, at every dtype; a decode
length past its cache is an error, not NaN.

A key column past a sequence's ``k_len`` loads as 0, so its score is 0 and, unless masked, its
probability is ``exp(-lse)``. With every real score near -150 (q along +u, k along -u), that is
e^150: +inf in fp32 and far past fp16's 65504 once multiplied into dS; a zero key does not cancel it
(inf * 0 = NaN). flash-attention's ``test_flash_attn_bwd_varlen_overflow`` found this in our dQ
(non-causal fp16, d = 16/32/64: NaN where the truth is 0). Here: lengths that are not multiples of
any block (16-key blocks on the CPU, 64-128 on a GPU), causal and not, fp16 through the public API
(2x torch's same-dtype error), fp32 through the internal launchers (interpreter: exact fp32 dots,
the fp32 rule), bf16 on a GPU only (Triton 3.9's interpreter multiplies bf16 bit patterns in tl.dot).
"""

from __future__ import annotations

import pytest
import torch
from test_attention import DEVICE, _cu, check_varlen
from test_attention_fp32 import check_fp32_varlen

from polytrace_kernels._interpreter import interpreting

# (lens_q, lens_k): a few keys under long query blocks (the peer's shape, smaller; one key alone
# has dQ = dK = 0 exactly in torch, a bound of 0 no kernel rounding meets), and
# ragged lengths with partial last blocks on both axes
SHAPES = {
    "few-keys": ([20, 9, 37], [2, 3, 5]),
    "ragged": ([5, 19, 33], [7, 21, 18]),
}


def overflow_inputs(lens_q, lens_k, hq, hkv, d, dtype, seed=3, magnitude=None):
    """q ~ +m u + noise, k ~ -m u + noise with u = (1, ..., 1): every score is about
    -m^2 d / sqrt(d) = -150 (so lse ~ -150, e^150 overflows fp32), v and dout unit normal."""
    g = torch.Generator().manual_seed(seed)
    m = magnitude if magnitude is not None else (150.0 / d ** 0.5) ** 0.5
    tq, tk = sum(lens_q), sum(lens_k)
    q = m + 0.3 * torch.randn(tq, hq, d, generator=g)
    k = -m + 0.3 * torch.randn(tk, hkv, d, generator=g)
    v = torch.randn(tk, hkv, d, generator=g)
    dout = torch.randn(tq, hq, d, generator=g)
    return (t.to(DEVICE, dtype) for t in (q, k, v, dout))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_masked_keys_give_no_nan_fp16(shape, causal):
    lens_q, lens_k = SHAPES[shape]
    q, k, v, _ = overflow_inputs(lens_q, lens_k, 2, 1, 16, torch.float16)
    check_varlen(q, k, v, _cu(lens_q), _cu(lens_k), causal)


@pytest.mark.skipif(not interpreting(), reason="fp32 kernels need the interpreter's exact fp32 tl.dot")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_masked_keys_give_no_nan_fp32(shape, causal):
    lens_q, lens_k = SHAPES[shape]
    q, k, v, dout = overflow_inputs(lens_q, lens_k, 2, 1, 16, torch.float32)
    cu_q, cu_k = _cu(lens_q).cpu(), _cu(lens_k).cpu()
    check_fp32_varlen(f"{shape}-causal{int(causal)}", q, k, v, dout, cu_q, cu_k, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 64, 128])
def test_gpu_masked_keys_give_no_nan(d, causal, dtype):
    # GPU tiles: 64-128 keys and queries per block, lengths 1 off each side of them
    lens_q, lens_k = [76, 34, 146, 129, 63], [1, 2, 3, 127, 65]
    q, k, v, _ = overflow_inputs(lens_q, lens_k, 4, 2, d, dtype)
    check_varlen(q, k, v, _cu(lens_q), _cu(lens_k), causal)


# ------------------------------------------------------------------- decode: lengths past the cache


def _decode_cache(batch, lmax, page=None, seed=5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, 2, 16, generator=g).to(DEVICE, torch.float16)
    if page is None:
        kc, vc = (torch.randn(batch, lmax, 1, 16, generator=g).to(DEVICE, torch.float16) for _ in range(2))
        return q, kc, vc, {}
    pages = lmax // page
    kc, vc = (torch.randn(batch * pages + 2, page, 1, 16, generator=g).to(DEVICE, torch.float16) for _ in range(2))
    table = torch.arange(batch * pages, dtype=torch.int32, device=DEVICE).reshape(batch, pages)
    return q, kc, vc, {"block_table": table}


@pytest.mark.parametrize("page", [None, 16])
@pytest.mark.parametrize("bad", [33, -1])
def test_decode_length_past_capacity_is_an_error(page, bad):
    # the pool holds 2 spare pages, so a length past the table's 2 pages has pages to read but
    # no block_table entry for them (flash-attn's test_flash_attn_kvcache_paged_block_table_bounds)
    from polytrace_kernels.attention import decode_attention

    q, kc, vc, kw = _decode_cache(3, 32, page)
    lens = torch.tensor([5, bad, 32], dtype=torch.int32, device=DEVICE)
    where = "block_table" if page else "k_cache"
    with pytest.raises(ValueError, match=rf"^cache_seqlens\[1\] = {bad} is outside 0\.\.32, the capacity of {where}"):
        decode_attention(q, kc, vc, lens, **kw)
    lens[1] = 32  # at capacity: no error, finite
    assert torch.isfinite(decode_attention(q, kc, vc, lens, **kw)).all()


def test_decode_length_check_reruns_after_an_in_place_change():
    from polytrace_kernels.attention import decode_attention

    q, kc, vc, _ = _decode_cache(2, 16)
    lens = torch.tensor([3, 16], dtype=torch.int32, device=DEVICE)
    decode_attention(q, kc, vc, lens)  # checked and remembered for this tensor state
    lens[0] += 14  # a decode step's in-place update past the cache
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] = 17 is outside 0\.\.16"):
        decode_attention(q, kc, vc, lens)
    out = decode_attention(q, kc, vc, lens, check_inputs=False)  # the kernel's own guard: NaN, no read
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()


@pytest.mark.gpu
def test_gpu_decode_length_check_is_skipped_inside_a_cuda_graph_capture():
    from polytrace_kernels.attention import decode_attention

    q, kc, vc, _ = _decode_cache(2, 64)
    lens = torch.tensor([3, 64], dtype=torch.int32, device=DEVICE)
    decode_attention(q, kc, vc, lens, num_splits=1)  # compiles outside the capture
    fresh = lens.clone()  # never checked: the check would sync, which a capture forbids
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode_attention(q, kc, vc, fresh, num_splits=1)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, decode_attention(q, kc, vc, lens, num_splits=1))


# ----------------------------------------------------------------- softcap and window (fp16, API)

# (lens_q, lens_k, causal, softcap, window_size); fp32 arithmetic: test_attention_fp32.py
FEATURES = {
    "softcap-gemma2": ([23, 9, 40], None, True, 50.0, (-1, -1)),
    "softcap-5-cross": ([5, 21, 0], [8, 30, 6], False, 5.0, (-1, -1)),
    "window-mistral-like": ([40, 3, 33], None, True, 0.0, (8, -1)),
    "window-both-sides": ([5, 37, 20], [8, 30, 33], False, 0.0, (6, 3)),
    "softcap-window": ([30, 17], [30, 25], True, 5.0, (11, 0)),
}


@pytest.mark.parametrize("case", list(FEATURES))
def test_softcap_and_window_against_fp64(case):
    lens_q, lens_k, causal, softcap, window = FEATURES[case]
    lens_k = lens_k or lens_q
    g = torch.Generator().manual_seed(21)
    # scores of std 30: c tanh(s / c) bends them (slope 0.7 at one std, 0.3 at two)
    scale_q = 30.0 if softcap == 50.0 else 1.0
    q = (torch.randn(sum(lens_q), 4, 32, generator=g) * scale_q).to(DEVICE, torch.float16)
    k, v = (torch.randn(sum(lens_k), 2, 32, generator=g).to(DEVICE, torch.float16) for _ in range(2))
    check_varlen(q, k, v, _cu(lens_q), _cu(lens_k), causal, softcap=softcap, window_size=window)


def test_window_wider_than_every_sequence_is_the_plain_result():
    from polytrace_kernels.attention import varlen_attention

    lens = [23, 9, 40]
    q, k, v, _ = overflow_inputs(lens, lens, 2, 1, 16, torch.float16, magnitude=1.0)
    cu = _cu(lens)
    plain = varlen_attention(q, k, v, cu, cu, causal=False)
    wide = varlen_attention(q, k, v, cu, cu, causal=False, window_size=(1 << 20, 1 << 20))
    assert torch.equal(plain, wide)


@pytest.mark.parametrize("kw,argname", [({"softcap": -1.0}, "softcap"), ({"softcap": float("nan")}, "softcap"),
                                        ({"softcap": True}, "softcap"), ({"window_size": (3,)}, "window_size"),
                                        ({"window_size": (2.5, 1)}, "window_size"),
                                        ({"window_size": "ab"}, "window_size")])
def test_bad_softcap_or_window_names_the_argument(kw, argname):
    from polytrace_kernels.attention import varlen_attention

    q, k, v, _ = overflow_inputs([4], [4], 2, 1, 16, torch.float16, magnitude=1.0)
    with pytest.raises(ValueError, match=rf"^{argname} must"):
        varlen_attention(q, k, v, _cu([4]), _cu([4]), **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal,softcap,window", [(True, 50.0, (-1, -1)), (True, 0.0, (256, -1)),
                                                   (False, 30.0, (100, 37)), (True, 50.0, (129, 0))])
def test_gpu_softcap_and_window(dtype, causal, softcap, window):
    lens = [1, 700, 129, 1030, 64, 5]
    g = torch.Generator().manual_seed(22)
    q = (torch.randn(sum(lens), 8, 128, generator=g) * (softcap / 2 if softcap else 1.0)).to(DEVICE, dtype)
    k, v = (torch.randn(sum(lens), 2, 128, generator=g).to(DEVICE, dtype) for _ in range(2))
    check_varlen(q, k, v, _cu(lens), _cu(lens), causal, softcap=softcap, window_size=window)
