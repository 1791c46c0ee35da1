"""Bad and unusual input to the kernel families' public APIs (tiny shapes, CPU interpreter).

Every case either matches the pure-torch reference or raises a ValueError whose message names the
offending argument: never a silent wrong answer, never an IndexError or a Triton error for a user
mistake. Cases that cannot be checked on the host without a device sync (decode lengths, trusted
packing sizes) must give NaN or stay inside the buffers, never a plausible number.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from polytrace_kernels.attention import api as attn
from polytrace_kernels.attention.reference import decode_attention_reference, varlen_attention_reference
from polytrace_kernels.logprob import linear_token_logprobs, token_logprobs
from polytrace_kernels.logprob.reference import linear_token_logprobs_reference, token_logprobs_reference
from polytrace_kernels.packing import api as packing
from polytrace_kernels.packing.planner import balance_partitions, plan_microbatches
from polytrace_kernels.packing.reference import pack_reference, unpack_reference

T, V, H = 5, 40, 24


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


LOGITS = torch.randn(T, V, generator=_gen(0))
TOKENS = torch.randint(0, V, (T,), generator=_gen(1))
HIDDEN = torch.randn(T, H, generator=_gen(2))
WEIGHT = torch.randn(V, H, generator=_gen(3)) * 0.3


def _raises(fn, argname: str) -> None:
    with pytest.raises(ValueError) as info:
        fn()
    assert argname in str(info.value), str(info.value)


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


# ---------------------------------------------------------------------------------------------
# logprob
# ---------------------------------------------------------------------------------------------

LOGPROB_ERRORS = {
    "tokens-shape": (lambda: token_logprobs(LOGITS, TOKENS[:3]), "tokens"),
    "tokens-float": (lambda: token_logprobs(LOGITS, TOKENS.float()), "tokens"),
    "tokens-out-of-range": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, V, 2, 3])), "tokens"),
    "tokens-negative": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, -1, 2, 3])), "tokens"),
    "tokens-huge-int64": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, 2**40, 2, 3])), "tokens"),
    "tokens-meta": (lambda: token_logprobs(LOGITS, TOKENS.to("meta")), "tokens"),
    "logits-fp64": (lambda: token_logprobs(LOGITS.double(), TOKENS), "logits"),
    "logits-3d": (lambda: token_logprobs(LOGITS[None], TOKENS), "logits"),
    "logits-list": (lambda: token_logprobs(LOGITS.tolist(), TOKENS), "logits"),
    "logits-transposed": (lambda: token_logprobs(torch.randn(V, T).t(), TOKENS), "logits"),
    "logits-V0": (lambda: token_logprobs(torch.randn(T, 0), TOKENS), "logits"),
    "logits-meta": (lambda: token_logprobs(LOGITS.to("meta"), TOKENS.to("meta")), "logits"),
    "temperature-0": (lambda: token_logprobs(LOGITS, TOKENS, 0.0), "temperature"),
    "temperature-negative": (lambda: token_logprobs(LOGITS, TOKENS, -1.0), "temperature"),
    "temperature-nan": (lambda: token_logprobs(LOGITS, TOKENS, float("nan")), "temperature"),
    "temperature-inf": (lambda: token_logprobs(LOGITS, TOKENS, float("inf")), "temperature"),
    "temperature-tensor": (lambda: token_logprobs(LOGITS, TOKENS, torch.tensor(0.7)), "temperature"),
    "ignore_index-float": (lambda: token_logprobs(LOGITS, TOKENS, ignore_index=-100.0), "ignore_index"),
    "config-key": (lambda: token_logprobs(LOGITS, TOKENS, config={"BLOCKV": 16}), "config"),
    "linear-H-mismatch": (lambda: linear_token_logprobs(HIDDEN, WEIGHT[:, :8], TOKENS), "weight"),
    "linear-dtype-mismatch": (lambda: linear_token_logprobs(HIDDEN, WEIGHT.half(), TOKENS), "weight"),
    "linear-weight-transposed": (lambda: linear_token_logprobs(HIDDEN, torch.randn(H, V).t(), TOKENS), "weight"),
    "linear-weight-meta": (lambda: linear_token_logprobs(HIDDEN, WEIGHT.to("meta"), TOKENS), "weight"),
    "linear-tokens-out-of-range": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS + V), "tokens"),
    "linear-temperature-nan": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, float("nan")),
                               "temperature"),
    "linear-chunk_bytes-0": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, chunk_bytes=0), "chunk_bytes"),
    "linear-fp32_precision": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, fp32_precision="fp64"),
                              "fp32_precision"),
}


@pytest.mark.parametrize("case", sorted(LOGPROB_ERRORS))
def test_logprob_bad_input_names_the_argument(case):
    _raises(*LOGPROB_ERRORS[case])


def test_logprob_cpu_outside_interpreter_is_refused(no_interpreter):
    _raises(lambda: token_logprobs(LOGITS, TOKENS), "logits")
    _raises(lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS), "hidden")


def _close(out, ref, tol):
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), (out, ref)
    keep = ~torch.isnan(ref)
    torch.testing.assert_close(out[keep], ref[keep], atol=tol, rtol=tol)


def _strided_views():
    big = torch.randn(T, V + 24, generator=_gen(4))
    odd = torch.randn(T, V + 1, generator=_gen(5))
    return {
        "row-stride-gt-V": big[:, :V],                # a padded-vocabulary slice
        "misaligned-offset": odd[:, 1:],              # data pointer not 16-byte aligned
        "int32-tokens": LOGITS,
    }


@pytest.mark.parametrize("view", ["row-stride-gt-V", "misaligned-offset", "int32-tokens"])
def test_logprob_strided_views_match_reference(view):
    x = _strided_views()[view]
    tokens = TOKENS.int() if view == "int32-tokens" else TOKENS[:1].expand(T)  # stride-0 tokens
    lp, ent = token_logprobs(x, tokens, temperature=0.7, return_entropy=True)
    rlp, rent = token_logprobs_reference(x, tokens, 0.7, return_entropy=True, compute_dtype=torch.float64)
    _close(lp, rlp, 1e-5)
    _close(ent, rent, 1e-5)


def test_logprob_numpy_scalars_are_accepted():
    tokens = TOKENS.clone()
    tokens[1] = 0
    out = token_logprobs(LOGITS, tokens, temperature=np.float32(0.5), ignore_index=np.int64(0))
    _close(out, token_logprobs_reference(LOGITS, tokens, 0.5, ignore_index=0, compute_dtype=torch.float64), 1e-5)
    assert out[1] == 0.0


# the interpreter's numpy warns on the deliberately non-finite arithmetic these tests feed it
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("poison", ["nan", "+inf", "all-neg-inf"])
def test_logprob_non_finite_row_gives_nan_not_a_plausible_number(poison):
    # tl.minimum(NaN, 0) is 0: a NaN row used to come back as log-prob 0 (probability 1)
    x = LOGITS.clone()
    if poison == "nan":
        x[2, 3] = float("nan")
    elif poison == "+inf":
        x[2, 3] = float("inf")
    else:
        x[2] = float("-inf")
    ref = token_logprobs_reference(x, TOKENS, compute_dtype=torch.float64)
    assert torch.isnan(ref[2])
    _close(token_logprobs(x, TOKENS), ref, 1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_linear_logprob_nan_hidden_row_gives_nan():
    h = HIDDEN.clone()
    h[2, 0] = float("nan")
    lp = linear_token_logprobs(h, WEIGHT, TOKENS)
    assert torch.isnan(lp[2]) and not torch.isnan(lp[[0, 1, 3, 4]]).any()


def test_logprob_masked_vocabulary_forward_and_gradient():
    # -inf logits (a masked vocabulary) are finite everywhere else, with a zero gradient there
    x = LOGITS.clone()
    x[:, 30:] = float("-inf")
    tokens = TOKENS % 30
    xg = x.clone().requires_grad_()
    lp, ent = token_logprobs(xg, tokens, return_entropy=True)
    (lp + 0.5 * ent).sum().backward()
    rlp, rent = token_logprobs_reference(x, tokens, return_entropy=True, compute_dtype=torch.float64)
    _close(lp, rlp, 1e-5)
    _close(ent, rent, 1e-5)
    # d(logprob)/dx = onehot - p; d(entropy)/dx = -p (log p + H)
    logp = torch.log_softmax(x.double()[:, :30], -1)
    p = logp.exp()
    onehot = torch.nn.functional.one_hot(tokens, 30).double()
    expected = (onehot - p) + 0.5 * (-p * (logp + rent[:, None]))
    _close(xg.grad[:, :30], expected, 1e-5)
    assert torch.all(xg.grad[:, 30:] == 0)


@pytest.mark.parametrize("need", ["hidden", "weight", "both", "none"])
def test_linear_logprob_requires_grad_combinations(need):
    tokens = TOKENS.clone()
    tokens[1] = -100
    h = HIDDEN.clone().requires_grad_(need in ("hidden", "both"))
    w = WEIGHT.clone().requires_grad_(need in ("weight", "both"))
    h64 = HIDDEN.double().requires_grad_(h.requires_grad)
    w64 = WEIGHT.double().requires_grad_(w.requires_grad)
    lp, ent = linear_token_logprobs(h, w, tokens, 0.8, True, fp32_precision="ieee")  # held to 1e-4
    rlp, rent = linear_token_logprobs_reference(h64, w64, tokens, 0.8, True, compute_dtype=torch.float64)
    _close(lp, rlp.detach(), 1e-4)
    if need == "none":
        assert not lp.requires_grad
        return
    (lp + 0.5 * ent).sum().backward()
    (rlp + 0.5 * rent).sum().backward()
    if h.requires_grad:
        _close(h.grad, h64.grad, 1e-4)
    if w.requires_grad:
        _close(w.grad, w64.grad, 1e-4)


def test_logprob_zero_tokens_forward_and_backward():
    x = torch.randn(0, V, requires_grad=True)
    lp, ent = token_logprobs(x, TOKENS[:0], return_entropy=True)
    (lp.sum() + ent.sum()).backward()
    assert lp.shape == (0,) and x.grad.shape == (0, V)
    h = torch.randn(0, H, requires_grad=True)
    w = WEIGHT.clone().requires_grad_()
    linear_token_logprobs(h, w, TOKENS[:0]).sum().backward()
    assert h.grad.shape == (0, H) and torch.all(w.grad == 0)


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


def test_attention_cpu_outside_interpreter_is_refused(no_interpreter):
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


# ---------------------------------------------------------------------------------------------
# packing
# ---------------------------------------------------------------------------------------------

PADDED = torch.randn(3, 6, 2, 4, generator=_gen(13))
LENGTHS = torch.tensor([2, 0, 6])
PACKED, CU_PACKED, _ = pack_reference(PADDED, LENGTHS)

PACK_ERRORS = {
    "negative-length": (lambda: packing.pack(PADDED, torch.tensor([2, -1, 6])), "lengths"),
    "length-above-S": (lambda: packing.pack(PADDED, torch.tensor([2, 7, 6])), "lengths"),
    "float-lengths": (lambda: packing.pack(PADDED, torch.tensor([2.0, 1.0, 6.0])), "lengths"),
    "list-lengths": (lambda: packing.pack(PADDED, [2, 0, 6]), "lengths"),
    "meta-lengths": (lambda: packing.pack(PADDED, LENGTHS.to("meta")), "lengths"),
    "total_tokens-float": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=8.5, max_seqlen=6), "total_tokens"),
    "total_tokens-wrong": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=3, max_seqlen=6), "total_tokens"),
    "max_seqlen-negative": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=8, max_seqlen=-2), "max_seqlen"),
    "max_seqlen-too-small": (lambda: packing.pack(PADDED, LENGTHS, max_seqlen=4), "max_seqlen"),
    "unpack-max_len-negative": (lambda: packing.unpack(PACKED, CU_PACKED, -1), "max_len"),
    "unpack-cu-float": (lambda: packing.unpack(PACKED, CU_PACKED.float(), 6), "cu_seqlens"),
    "unpack-cu-negative-step": (lambda: packing.unpack(PACKED, torch.tensor([0, 2, 1, 8]), 6), "cu_seqlens"),
    "unpack-cu-not-ending-at-T": (lambda: packing.unpack(PACKED, torch.tensor([0, 2, 2, 12]), 6), "cu_seqlens"),
    "unpack-cu-not-starting-at-0": (lambda: packing.unpack(PACKED, torch.tensor([1, 2, 2, 8]), 6), "cu_seqlens"),
    "unpack-0d": (lambda: packing.unpack(torch.tensor(1.0), CU_PACKED, 6), "packed"),
}


@pytest.mark.parametrize("case", sorted(PACK_ERRORS))
def test_packing_bad_input_names_the_argument(case):
    _raises(*PACK_ERRORS[case])


@pytest.mark.parametrize("name", ["transposed", "expanded", "int32-lengths", "stride0-lengths", "strided-cu",
                                  "numpy-max_len", "zero-batch", "zero-features"])
def test_packing_views_match_reference(name):
    padded, lengths, cu, max_len = PADDED, LENGTHS, None, 6
    if name == "transposed":
        padded = torch.randn(6, 3, 5, generator=_gen(14)).transpose(0, 1)
    elif name == "expanded":
        padded = torch.randn(1, 6, 5, generator=_gen(15)).expand(3, -1, -1)
    elif name == "int32-lengths":
        lengths = LENGTHS.int()
    elif name == "stride0-lengths":
        lengths = torch.tensor([3]).expand(3)
    elif name == "strided-cu":
        cu = torch.stack([CU_PACKED, CU_PACKED], 1).reshape(-1)[::2]
    elif name == "numpy-max_len":
        max_len = np.int64(6)
    elif name == "zero-batch":
        padded, lengths = PADDED[:0], LENGTHS[:0]
    elif name == "zero-features":
        padded = PADDED[..., :0]
    packed, cu_out, m = packing.pack(padded, lengths)
    ref, ref_cu, ref_m = pack_reference(padded, lengths)
    assert torch.equal(packed, ref) and torch.equal(cu_out, ref_cu) and m == ref_m
    out = packing.unpack(packed, cu_out if cu is None else cu, max_len)
    assert torch.equal(out, unpack_reference(ref, ref_cu, int(max_len)))


def test_packing_kernels_stay_inside_the_buffers_with_unchecked_sizes():
    # Device-side sizes are trusted (no sync): a wrong total or cu_seqlens must neither write nor
    # read outside the tensors; the rows that do fit are still right.
    padded3 = PADDED.reshape(3, 6, 8)
    cu = packing.cu_seqlens_from_lengths(LENGTHS)
    short = packing._launch_pack(padded3, cu, 3, None)
    assert torch.equal(short, PACKED.reshape(8, 8)[:3])
    bad_cu = torch.tensor([0, 2, 2, 12], dtype=torch.int32)  # ends past T = 8
    out = packing._launch_unpack(PACKED.reshape(8, 8), bad_cu, 12, None)
    expected = torch.zeros(3, 12, 8)
    expected[0, :2] = PACKED.reshape(8, 8)[:2]
    expected[2, :6] = PACKED.reshape(8, 8)[2:8]
    assert torch.equal(out, expected)


# ---------------------------------------------------------------------------------------------
# planner
# ---------------------------------------------------------------------------------------------

PLANNER_ERRORS = {
    "negative-length": (lambda: balance_partitions([5, -1], 2), "seqlens"),
    "non-integer-length": (lambda: balance_partitions([1.5, 2], 2), "seqlens"),
    "nan-length": (lambda: balance_partitions([float("nan")], 2), "seqlens"),
    "huge-float-length": (lambda: balance_partitions([1e30], 2), "too large"),
    "uint64-overflow": (lambda: balance_partitions(np.array([2**63 + 5], dtype=np.uint64), 2), "too large"),
    "string-lengths": (lambda: balance_partitions(["a"], 2), "seqlens"),
    "2d-lengths": (lambda: balance_partitions([[1, 2], [3, 4]], 2), "seqlens"),
    "scalar-lengths": (lambda: balance_partitions(5, 2), "seqlens"),
    "k-0": (lambda: balance_partitions([1, 2], 0), "k"),
    "k-float": (lambda: balance_partitions([1, 2], 2.0), "k"),
    "k-bool": (lambda: balance_partitions([1, 2], True), "k"),
    "max_tokens-too-small": (lambda: balance_partitions([10, 2], 2, max_tokens=5), "max_tokens"),
    "equal_size-not-bool": (lambda: balance_partitions([1, 2, 3], 2, equal_size="yes"), "equal_size"),
    "cost-unknown": (lambda: balance_partitions([1, 2], 2, cost="flops"), "cost"),
    "dp_ranks-0": (lambda: plan_microbatches([1, 2], 0, 10), "dp_ranks"),
    "budget-0": (lambda: plan_microbatches([1, 2], 1, 0), "max_tokens_per_microbatch"),
    "budget-below-sequence": (lambda: plan_microbatches([1, 20], 1, 10), "max_tokens_per_microbatch"),
    "plan-non-integer-length": (lambda: plan_microbatches([1, 2.5], 1, 10), "seqlens"),
    "plan-equal_size-not-bool": (lambda: plan_microbatches([1, 2], 1, 10, equal_size=1), "equal_size"),
}


@pytest.mark.parametrize("case", sorted(PLANNER_ERRORS))
def test_planner_bad_input_names_the_argument(case):
    _raises(*PLANNER_ERRORS[case])


def test_planner_accepts_integral_floats_numpy_and_torch():
    for seqlens in ([5.0, 3.0, 8.0], np.array([5, 3, 8], dtype=np.uint16), torch.tensor([5, 3, 8])):
        parts = balance_partitions(seqlens, np.int64(2))
        assert sorted(i for p in parts for i in p) == [0, 1, 2]
    assert balance_partitions([], 3) == [[], [], []]
