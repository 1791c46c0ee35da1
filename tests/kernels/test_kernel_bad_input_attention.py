"""Bad and unusual input to the attention kernels' public APIs (varlen and decode; tiny shapes, CPU
interpreter).

Every case either matches the pure-torch reference or raises a ValueError whose message names the
offending argument: never a silent wrong answer, never an IndexError or a Triton error for a user
mistake. Decode lengths, which the host cannot check without a device sync, must give NaN for that
sequence, never a plausible number. The other kernel families' cases are in the sibling
``test_kernel_bad_input_*.py`` files, the helpers they share in ``_bad_input.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _bad_input import _close, _gen, _raises, no_interpreter  # noqa: F401  (no_interpreter: a fixture, used by name)

from polytrace_kernels.attention import api as attn
from polytrace_kernels.attention.reference import decode_attention_reference, varlen_attention_reference

# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------


def _packed(lens_q, lens_k=None, hq=4, hkv=2, d=16, seed=0):
    g = _gen(seed)
    lens_k = lens_q if lens_k is None else lens_k
    q = torch.randn(sum(lens_q), hq, d, generator=g).half()
    k = torch.randn(sum(lens_k), hkv, d, generator=g).half()
    v = torch.randn(sum(lens_k), hkv, d, generator=g).half()
    cu_q = torch.tensor([0, *np.cumsum(lens_q)], dtype=torch.int32)
    cu_k = torch.tensor([0, *np.cumsum(lens_k)], dtype=torch.int32)
    return q, k, v, cu_q, cu_k


Q, K, VV, CU, CU_K = _packed([5, 0, 17, 3])


def _varlen_case(name):
    q, k, v, cu, cu_k = Q, K, VV, CU.clone(), CU_K.clone()  # fresh cu objects: no cached plan
    bad = {
        "gqa-not-multiple": (lambda: attn.varlen_attention(q[:, :3], k, v, cu, cu_k), "k"),
        "head-dim-mismatch": (lambda: attn.varlen_attention(q, k[..., :8], v[..., :8], cu, cu_k), "k"),
        "v-shape": (lambda: attn.varlen_attention(q, k, v[:, :1], cu, cu_k), "v"),
        "fp32": (lambda: attn.varlen_attention(q.float(), k.float(), v.float(), cu, cu_k), "q"),
        "head-dim-300": (lambda: attn.varlen_attention(*_packed([3], d=300)), "q"),
        "cu-int64": (lambda: attn.varlen_attention(q, k, v, cu.long(), cu_k), "cu_seqlens_q"),
        "cu-float": (lambda: attn.varlen_attention(q, k, v, cu, cu_k.float()), "cu_seqlens_k"),
        "cu-not-ending-at-T": (lambda: attn.varlen_attention(q, k, v, cu - torch.tensor([0, 0, 0, 0, 1],
                                                                                        dtype=torch.int32), cu_k),
                               "cu_seqlens_q"),
        "cu-negative-step": (lambda: attn.varlen_attention(
            q, k, v, torch.tensor([0, 5, 3, 22, 25], dtype=torch.int32), cu_k), "cu_seqlens_q"),
        "cu-strided": (lambda: attn.varlen_attention(
            q, k, v, torch.stack([cu, cu], 1).reshape(-1)[::2], cu_k), "cu_seqlens_q"),
        "cu-batch-mismatch": (lambda: attn.varlen_attention(q, k, v, cu, cu_k[:-1]), "cu_seqlens_k"),
        "cu-meta": (lambda: attn.varlen_attention(q, k, v, cu.to("meta"), cu_k), "cu_seqlens_q"),
        "k-meta": (lambda: attn.varlen_attention(q, k.to("meta"), v, cu, cu_k), "k"),
        "max_seqlen_q-too-small": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, max_seqlen_q=4), "max_seqlen_q"),
        "max_seqlen_k-too-small": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, max_seqlen_k=4), "max_seqlen_k"),
        "max_seqlen-float": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, max_seqlen_q=17.0), "max_seqlen_q"),
        "softmax_scale-nan": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, softmax_scale=float("nan")),
                              "softmax_scale"),
        "config-not-pow2": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, config={"BLOCK_M": 24}), "config"),
        "bwd_config-key": (lambda: attn.varlen_attention(q, k, v, cu, cu_k, bwd_config={"X": 1}), "bwd_config"),
        "plan-for-other-cu": (lambda: attn.varlen_attention(
            q, k, v, cu, cu_k, plan=attn.varlen_plan(cu.clone(), cu_k.clone(), 25, 25, block_m=16)), "plan"),
    }
    return bad[name]


VARLEN_ERRORS = ["gqa-not-multiple", "head-dim-mismatch", "v-shape", "fp32", "head-dim-300", "cu-int64",
                 "cu-float", "cu-not-ending-at-T", "cu-negative-step", "cu-strided", "cu-batch-mismatch",
                 "cu-meta", "k-meta", "max_seqlen_q-too-small", "max_seqlen_k-too-small", "max_seqlen-float",
                 "softmax_scale-nan", "config-not-pow2", "bwd_config-key", "plan-for-other-cu"]


@pytest.mark.parametrize("case", VARLEN_ERRORS)
def test_varlen_bad_input_names_the_argument(case):
    _raises(*_varlen_case(case))


def test_varlen_max_seqlen_k_checked_even_with_a_cached_plan():
    cu, cu_k = CU.clone(), CU_K.clone()
    attn.varlen_attention(Q, K, VV, cu, cu_k, max_seqlen_q=17)  # caches a validated plan
    _raises(lambda: attn.varlen_attention(Q, K, VV, cu, cu_k, max_seqlen_q=17, max_seqlen_k=4), "max_seqlen_k")


def test_varlen_max_seqlen_q_checked_even_with_a_cached_plan():
    """A plan cached without max_seqlen_q, then a call on the same cu_seqlens objects with one below
    the longest sequence (17): the plan is keyed by max_seqlen_q, so that call validates it."""
    cu, cu_k = CU.clone(), CU_K.clone()
    attn.varlen_attention(Q, K, VV, cu, cu_k)  # caches a validated plan
    _raises(lambda: attn.varlen_attention(Q, K, VV, cu, cu_k, max_seqlen_q=4), "max_seqlen_q")


@pytest.mark.usefixtures("no_interpreter")
def test_attention_cpu_outside_interpreter_is_refused():
    _raises(lambda: attn.varlen_attention(Q, K, VV, CU, CU_K), "q")
    _raises(lambda: attn.decode_attention(*_decode_inputs(), DECODE_LENS), "q")


def _varlen_check(q, k, v, cu, cu_k, causal=True, tol=2e-2):
    out, lse = attn.varlen_attention(q, k, v, cu, cu_k, causal=causal, return_lse=True)
    ref, ref_lse = varlen_attention_reference(q, k, v, cu, cu_k, causal=causal, return_lse=True)
    _close(out, ref, tol)
    _close(lse, ref_lse, tol)


def _fused_views(name):
    if name == "fused-qkv-heads":
        qkv = torch.randn(Q.shape[0], 8, 16, generator=_gen(6)).half()
        return qkv[:, :4], qkv[:, 4:6], qkv[:, 6:8], CU, CU
    if name == "fused-qkv-unbind":
        q, k, v = torch.randn(Q.shape[0], 3, 2, 16, generator=_gen(7)).half().unbind(1)
        return q, k, v, CU, CU
    if name == "transposed-q":
        return Q.transpose(0, 1).contiguous().transpose(0, 1), K, VV, CU, CU_K
    if name == "expanded-kv-heads":
        return Q, K[:, :1].expand(-1, 2, -1), VV[:, :1].expand(-1, 2, -1), CU, CU_K
    if name == "expanded-last-dim":
        return Q, K[..., :1].expand(-1, -1, 16), VV, CU, CU_K
    if name == "head-dim-24":
        return _packed([5, 9], d=24)
    if name == "causal-rows-without-keys":
        return _packed([6, 3], lens_k=[2, 3])
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["fused-qkv-heads", "fused-qkv-unbind", "transposed-q", "expanded-kv-heads",
                                  "expanded-last-dim", "head-dim-24", "causal-rows-without-keys"])
def test_varlen_strided_views_match_reference(name):
    _varlen_check(*_fused_views(name))


@pytest.mark.parametrize("need", ["q", "k", "v"])
def test_varlen_requires_grad_on_one_input(need):
    ins = [t.clone().requires_grad_(n == need) for n, t in zip("qkv", (Q, K, VV))]
    refs = [t.float().requires_grad_(n == need) for n, t in zip("qkv", (Q, K, VV))]
    attn.varlen_attention(*ins, CU, CU_K).float().pow(2).sum().backward()
    varlen_attention_reference(*refs, CU, CU_K).pow(2).sum().backward()
    i = "qkv".index(need)
    _close(ins[i].grad, refs[i].grad, 5e-2)


def test_varlen_zero_tokens():
    q = torch.zeros(0, 4, 16, dtype=torch.float16, requires_grad=True)
    k = torch.zeros(0, 2, 16, dtype=torch.float16, requires_grad=True)
    for batch in (0, 2):
        cu = torch.zeros(batch + 1, dtype=torch.int32)
        out = attn.varlen_attention(q, k, k, cu, cu)
        out.sum().backward()
        assert out.shape == q.shape and q.grad.shape == q.shape


# decode


def _decode_inputs(batch=3, hq=4, hkv=2, d=16, max_len=40):
    g = _gen(8)
    return (torch.randn(batch, hq, d, generator=g).half(), torch.randn(batch, max_len, hkv, d, generator=g).half(),
            torch.randn(batch, max_len, hkv, d, generator=g).half())


DQ, DK, DV = _decode_inputs()
DECODE_LENS = torch.tensor([5, 0, 40], dtype=torch.int32)
PAGES_K = torch.randn(12, 8, 2, 16, generator=_gen(9)).half()
PAGES_V = torch.randn(12, 8, 2, 16, generator=_gen(10)).half()
BLOCK_TABLE = torch.tensor([[3, 1, 0, 0, 0], [2, 0, 0, 0, 0], [4, 5, 6, 7, 8]], dtype=torch.int32)

DECODE_ERRORS = {
    "gqa-not-multiple": (lambda: attn.decode_attention(DQ[:, :3], DK, DV, DECODE_LENS), "k_cache"),
    "cache-batch": (lambda: attn.decode_attention(DQ, DK[:2], DV[:2], DECODE_LENS), "k_cache"),
    "v-cache-shape": (lambda: attn.decode_attention(DQ, DK, DV[:, :30], DECODE_LENS), "v_cache"),
    "q-4d-no-tokens": (lambda: attn.decode_attention(DQ[:, None][:, :0], DK, DV, DECODE_LENS), "q"),
    "cache_seqlens-int64": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS.long()), "cache_seqlens"),
    "cache_seqlens-length": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS[:2]), "cache_seqlens"),
    "cache_seqlens-meta": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS.to("meta")), "cache_seqlens"),
    "num_splits-0": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, num_splits=0), "num_splits"),
    "num_splits-bool": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, num_splits=True), "num_splits"),
    "softmax_scale-inf": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, softmax_scale=math.inf),
                          "softmax_scale"),
    "block_table-int64": (lambda: attn.decode_attention(DQ, PAGES_K, PAGES_V, DECODE_LENS,
                                                        block_table=BLOCK_TABLE.long()), "block_table"),
    "config-block-not-pow2": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, config={"BLOCK_N": 20}),
                              "config"),
    "softcap-negative": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, softcap=-50.0), "softcap"),
    "softcap-nan": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, softcap=math.nan), "softcap"),
    "window-not-a-pair": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, window_size=4), "window_size"),
    "window-float": (lambda: attn.decode_attention(DQ, DK, DV, DECODE_LENS, window_size=(4.5, 0)), "window_size"),
}


@pytest.mark.parametrize("case", sorted(DECODE_ERRORS))
def test_decode_bad_input_names_the_argument(case):
    _raises(*DECODE_ERRORS[case])


def _decode_check(q, kc, vc, lens, block_table=None, **kw):
    out, lse = attn.decode_attention(q, kc, vc, lens, block_table=block_table, return_lse=True, **kw)
    ref, ref_lse = decode_attention_reference(q, kc, vc, lens, block_table=block_table, return_lse=True)
    _close(out, ref, 2e-2)
    _close(lse, ref_lse, 2e-2)


@pytest.mark.parametrize("name", ["strided-cache_seqlens", "strided-block_table", "sliced-cache", "fused-q",
                                  "expanded-kv-heads", "empty-cache"])
def test_decode_strided_views_match_reference(name):
    if name == "strided-cache_seqlens":
        return _decode_check(DQ, DK, DV, torch.stack([DECODE_LENS, DECODE_LENS], 1).reshape(-1)[::2])
    if name == "strided-block_table":
        wide = torch.stack([BLOCK_TABLE, BLOCK_TABLE], 2).reshape(3, -1)[:, ::2]
        return _decode_check(DQ, PAGES_K, PAGES_V, DECODE_LENS, block_table=wide)
    if name == "sliced-cache":
        big = torch.randn(3, 64, 2, 16, generator=_gen(11)).half()
        return _decode_check(DQ, big[:, :40], big.flip(1)[:, :40], DECODE_LENS, num_splits=3)
    if name == "fused-q":
        return _decode_check(torch.randn(3, 8, 16, generator=_gen(12)).half()[:, :4], DK, DV, DECODE_LENS)
    if name == "expanded-kv-heads":
        return _decode_check(DQ, DK[:, :, :1].expand(-1, -1, 2, -1), DV[:, :, :1].expand(-1, -1, 2, -1),
                             DECODE_LENS)
    return _decode_check(DQ, DK[:, :0], DV[:, :0], torch.zeros(3, dtype=torch.int32))


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("bad_len", [41, 75, -3])
def test_decode_out_of_range_length_gives_nan_for_that_sequence_only(paged, num_splits, bad_len):
    # with the host check off (check_inputs=False: no sync), the kernel must not read past the cache
    # and must not return a plausible number; with it on, a ValueError (test_attention_masked.py)
    lens = torch.tensor([5, 0, bad_len], dtype=torch.int32)
    if paged:
        out, lse = attn.decode_attention(DQ, PAGES_K, PAGES_V, lens, block_table=BLOCK_TABLE, num_splits=num_splits,
                                         return_lse=True, check_inputs=False)
    else:
        out, lse = attn.decode_attention(DQ, DK, DV, lens, num_splits=num_splits, return_lse=True, check_inputs=False)
    assert torch.isnan(out[2]).all() and torch.isnan(lse[2]).all()
    ref = decode_attention_reference(DQ, DK, DV, lens[:2].clone()) if not paged else \
        decode_attention_reference(DQ, PAGES_K, PAGES_V, lens[:2].clone(), block_table=BLOCK_TABLE[:2])
    _close(out[:2], ref, 2e-2)


def test_decode_zero_batch():
    out = attn.decode_attention(DQ[:0], DK[:0], DV[:0], DECODE_LENS[:0])
    assert out.shape == (0, 4, 16)
