"""Correctness of kernels/logprob: token log-probs and entropies from logits and fused with the LM head.

Every output and gradient is compared with an fp64 reference computed from the same rounded inputs,
with the rule of ``polytrace_kernels.tolerance`` for its dtype (``tests/_bounds.py``): fp32 outputs
(log-prob, entropy, fp32 gradients) within 8 fp32 roundings at their scale, 16-bit gradients within
2x torch's same-dtype error, without a hidden scale error, and for the logits gradient (one rounding
of an fp32 result) within half an ulp. On CPU the kernels run in the Triton interpreter; the fused
kernels are checked in fp32 and fp16 there (``tl.dot`` on bf16 is wrong in the interpreter), in bf16
by the ``gpu`` tests, which also cover the real vocabulary. The GPU default configs run in
``tests/kernels/test_logprob_configs.py``.
"""

from __future__ import annotations

import pytest
import torch
from _bounds import expect, linear_checks, logits_checks

from polytrace_kernels.logprob import (
    TUNING_SPACE,
    linear_token_logprobs,
    linear_token_logprobs_reference,
    linear_tuning_bucket,
    spec,
    token_logprobs,
    token_logprobs_reference,
    tuning_bucket,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
IGNORE = -100


def _tokens(n_rows: int, vocab: int, seed: int, ignored=(3,)):
    gen = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    for i in ignored:
        if i < n_rows:
            tok[i] = IGNORE
    return tok.to(DEV)


def _logits(n_rows, vocab, dtype, seed, scale=3.0, shift=0.0):
    """Gaussian logits; for scale >= 1e3, uniform in [-scale, scale] (finite in fp16)."""
    gen = torch.Generator().manual_seed(seed)
    if scale >= 1e3:
        return ((torch.rand(n_rows, vocab, generator=gen) * 2 - 1) * scale).to(DEV, dtype)
    return (torch.randn(n_rows, vocab, generator=gen) * scale + shift).to(DEV, dtype)


def _logits_triplet(x, tok, temperature, weights, **kw):
    """(logprob, entropy, grad) from ours, torch in x's dtype and torch in fp64, with the same
    upstream gradients ``weights`` = (d logprob, d entropy)."""
    out = {}
    g_lp, g_ent = weights
    for name in ("ours", "torch", "truth"):
        leaf = (x.double() if name == "truth" else x.clone()).requires_grad_()
        if name == "ours":
            lp, ent = token_logprobs(leaf, tok, temperature, return_entropy=True, **kw)
        else:
            cd = torch.float64 if name == "truth" else None
            lp, ent = token_logprobs_reference(leaf, tok, temperature, True, IGNORE, compute_dtype=cd)
        torch.autograd.backward([lp, ent], [g_lp.to(lp.dtype), g_ent.to(ent.dtype)])
        out[name] = (lp.detach(), ent.detach(), leaf.grad)
    return out


def _upstream(n_rows, seed):
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(n_rows, generator=gen).to(DEV), torch.randn(n_rows, generator=gen).to(DEV)


# ------------------------------------------------------------------------------- logits kernels

LOGITS_CASES = {
    # name: (T, V, temperature, logits scale, shift, config)
    "awkward-T37-V1031-temp0.7": (37, 1031, 0.7, 3.0, 0.0, None),
    "aligned-V1024-many-blocks": (20, 1024, 1.0, 3.0, 0.0, {"BLOCK_V": 128}),
    "one-column-tail-V1025": (7, 1025, 0.9, 3.0, 0.0, {"BLOCK_V": 128}),
    "all-negative": (16, 777, 1.3, 2.0, -60.0, None),
    # every logit below -88: exp(x) alone underflows fp32 (only exp(x - max) keeps the sums)
    "all-below-exp-underflow": (9, 300, 1.0, 2.0, -200.0, None),
    "large-magnitude-1e4": (16, 515, 1.0, 1e4, 0.0, None),
    # |lse| ~ 1e4 but likely tokens have log-probs ~ -1: forming lse = m + log s first would cost
    # ulp(1e4) ~ 1e-3 there
    "offset-1e4": (16, 515, 1.0, 3.0, 1e4, None),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", list(LOGITS_CASES))
def test_token_logprobs_against_fp64(case, dtype):
    n_rows, vocab, temperature, scale, shift, config = LOGITS_CASES[case]
    x = _logits(n_rows, vocab, dtype, seed=1, scale=scale, shift=shift)
    tok = _tokens(n_rows, vocab, seed=2, ignored=(3, 7))
    upstream = _upstream(n_rows, 3)
    res = _logits_triplet(x, tok, temperature, upstream, config=config, backward_config=config)
    ours, same, truth = res["ours"], res["torch"], res["truth"]
    for i, name in enumerate(("logprob", "entropy", "grad")):
        assert torch.isfinite(ours[i]).all(), f"{name} has inf/NaN"
    expect(*logits_checks(case, x, tok, temperature, ours, same, truth, upstream))
    assert ours[0].dtype == torch.float32 and ours[1].dtype == torch.float32
    assert ours[2].dtype == dtype
    assert (ours[0] <= 0).all(), "a log-prob above 0"
    assert (ours[1] >= -1e-6).all(), "a negative entropy"


def test_ignored_rows_give_zero_and_no_gradient():
    x = _logits(12, 300, torch.float32, seed=4)
    tok = _tokens(12, 300, seed=5, ignored=(0, 5, 11))
    leaf = x.clone().requires_grad_()
    lp, ent = token_logprobs(leaf, tok, 0.9, return_entropy=True)
    (lp.sum() + ent.sum()).backward()
    ignored = tok == IGNORE
    assert (lp[ignored] == 0).all() and (ent[ignored] == 0).all()
    assert (leaf.grad[ignored] == 0).all()
    assert (lp[~ignored] < 0).all() and (leaf.grad[~ignored].abs().sum(1) > 0).all()


def test_ignore_index_inside_vocab():
    x = _logits(8, 64, torch.float32, seed=6)
    tok = _tokens(8, 64, seed=7, ignored=())
    tok[2] = 0
    lp, ent = token_logprobs(x, tok, ignore_index=0, return_entropy=True)
    ref = token_logprobs_reference(x.double(), tok, 1.0, True, ignore_index=0, compute_dtype=torch.float64)
    assert lp[2] == 0 and ent[2] == 0
    expect(*logits_checks("ignore_index=0", x, tok, 1.0, (lp, ent), None, ref, None, ignore_index=0))


@pytest.mark.parametrize("path", ["logits", "fused"])
def test_ignored_rows_take_no_gradient_whatever_their_upstream(path):
    """Rows at ignore_index (0 here, inside the vocabulary, so their token is a real column) get
    zero gradient and pass nothing to the shared weight: bit-for-bit the gradients of an upstream
    that is zero on them, even when it holds inf there."""
    gen = torch.Generator().manual_seed(60)
    h = torch.randn(8, 32, generator=gen).to(DEV)
    w = (torch.randn(100, 32, generator=gen) * 0.3).to(DEV)
    tok = _tokens(8, 100, seed=61, ignored=())
    tok[tok == 0] = 1
    tok[[1, 5]] = 0
    g = torch.randn(2, 8, generator=gen).to(DEV)

    def grads(upstream):
        leaves = [h.clone().requires_grad_(), w.clone().requires_grad_()]
        if path == "fused":
            lp, ent = linear_token_logprobs(*leaves, tok, 0.8, return_entropy=True, ignore_index=0)
        else:
            lp, ent = token_logprobs(leaves[0] @ leaves[1].t(), tok, 0.8, return_entropy=True, ignore_index=0)
        assert (lp[[1, 5]] == 0).all() and (ent[[1, 5]] == 0).all()
        torch.autograd.backward([lp, ent], [upstream[0], upstream[1]])
        return [x.grad for x in leaves]

    hostile, zeroed = g.clone(), g.clone()
    hostile[:, 1], zeroed[:, [1, 5]] = float("inf"), 0.0
    got, want = grads(hostile), grads(zeroed)
    assert (got[0][[1, 5]] == 0).all()
    for name, a, b in zip(("d hidden", "d weight"), got, want):
        assert torch.isfinite(a).all() and torch.equal(a, b), name


@pytest.mark.parametrize("which", ["logprob-only", "entropy-only"])
def test_single_output_gradients(which):
    x = _logits(9, 200, torch.float32, seed=8)
    tok = _tokens(9, 200, seed=9)
    g = _upstream(9, 10)[0]
    upstream = (g, torch.zeros_like(g)) if which == "logprob-only" else (torch.zeros_like(g), g)
    res = {}
    for impl in ("ours", "truth"):
        leaf = (x.double() if impl == "truth" else x.clone()).requires_grad_()
        if impl == "ours":
            lp, ent = token_logprobs(leaf, tok, 1.5, return_entropy=True)
        else:
            lp, ent = token_logprobs_reference(leaf, tok, 1.5, True, compute_dtype=torch.float64)
        out = lp if which == "logprob-only" else ent
        out.backward(g.to(out.dtype))
        res[impl] = (lp.detach(), ent.detach(), leaf.grad)
    expect(*logits_checks(which, x, tok, 1.5, res["ours"], None, res["truth"], upstream))


def test_logprob_only_path_matches_entropy_path():
    x = _logits(11, 333, torch.bfloat16, seed=11)
    tok = _tokens(11, 333, seed=12)
    lp_only = token_logprobs(x, tok, 0.8)
    lp, _ = token_logprobs(x, tok, 0.8, return_entropy=True)
    assert torch.equal(lp_only, lp)


def test_masked_vocabulary_minus_inf():
    """Constrained decoding masks logits to -inf: those tokens get probability 0, no NaN, and a
    whole first block of -inf is handled."""
    x = _logits(6, 600, torch.float32, seed=13)
    x[:, :300] = float("-inf")  # the whole first 256-wide block and more
    tok = _tokens(6, 600, seed=14, ignored=()).clamp(min=300)
    leaf = x.clone().requires_grad_()
    lp, ent = token_logprobs(leaf, tok, return_entropy=True, config={"BLOCK_V": 256},
                             backward_config={"BLOCK_V": 256})
    (lp.sum() + ent.sum()).backward()
    leaf64 = x.double().requires_grad_()
    ref_lp, ref_ent = token_logprobs_reference(leaf64, tok, 1.0, True, compute_dtype=torch.float64)
    (ref_lp.sum() + ref_ent.sum()).backward()
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all() and torch.isfinite(leaf.grad).all()
    ones = torch.ones(6, device=DEV)
    expect(*logits_checks("masked-vocab", x, tok, 1.0, (lp, ent, leaf.grad), None,
                          (ref_lp.detach(), ref_ent.detach(), leaf64.grad), (ones, ones)))
    assert (leaf.grad[:, :300] == 0).all()


def test_empty_batch():
    x = torch.randn(0, 1031, device=DEV).requires_grad_()
    tok = torch.zeros(0, dtype=torch.int64, device=DEV)
    lp, ent = token_logprobs(x, tok, 0.5, return_entropy=True)
    assert lp.shape == (0,) and ent.shape == (0,) and lp.dtype == torch.float32
    (lp.sum() + ent.sum()).backward()
    assert x.grad.shape == (0, 1031)
    h = torch.randn(0, 32, device=DEV).requires_grad_()
    w = torch.randn(100, 32, device=DEV).requires_grad_()
    lp = linear_token_logprobs(h, w, tok)
    assert lp.shape == (0,)
    lp.sum().backward()
    assert h.grad.shape == (0, 32) and (w.grad == 0).all()


def test_row_stride_and_int32_tokens():
    big = _logits(10, 1100, torch.float16, seed=15)
    view = big[:, :1031]  # row stride 1100, V 1031
    tok = _tokens(10, 1031, seed=16).to(torch.int32)
    lp, ent = token_logprobs(view, tok, return_entropy=True)
    ref_lp, ref_ent = token_logprobs(view.contiguous(), tok.long(), return_entropy=True)
    assert torch.equal(lp, ref_lp) and torch.equal(ent, ref_ent)


def test_unchecked_out_of_range_token_is_nan():
    x = _logits(4, 50, torch.float32, seed=17)
    tok = torch.tensor([1, 50, -3, IGNORE], device=DEV)
    lp = token_logprobs(x, tok, check_tokens=False)
    assert torch.isfinite(lp[0]) and torch.isnan(lp[1]) and torch.isnan(lp[2]) and lp[3] == 0


# ---------------------------------------------------------------------------- batch invariance


@pytest.mark.parametrize("vocab", [1031, 1024], ids=["V1031-generic", "V1024-aligned"])
def test_token_logprobs_batch_invariant(vocab):
    """A row's log-prob and entropy are bitwise the same alone, in a batch, and at another offset
    of a packed batch (with another row stride)."""
    n_rows = 24
    x = _logits(n_rows, vocab, torch.bfloat16, seed=18)
    tok = _tokens(n_rows, vocab, seed=19, ignored=(5,))
    lp_b, ent_b = token_logprobs(x, tok, 0.7, return_entropy=True)
    packed = _logits(n_rows + 9, vocab + 16, torch.bfloat16, seed=20)
    packed[9:, :vocab] = x
    tok_p = torch.cat([_tokens(9, vocab, seed=21, ignored=()), tok])
    lp_p, ent_p = token_logprobs(packed[:, :vocab], tok_p, 0.7, return_entropy=True)
    assert torch.equal(lp_p[9:], lp_b) and torch.equal(ent_p[9:], ent_b)
    for i in (0, 5, 13, n_rows - 1):
        lp_1, ent_1 = token_logprobs(x[i:i + 1].clone(), tok[i:i + 1], 0.7, return_entropy=True)
        assert torch.equal(lp_1, lp_b[i:i + 1]) and torch.equal(ent_1, ent_b[i:i + 1]), f"row {i}"
        lp_v = token_logprobs(x[i:i + 3], tok[i:i + 3], 0.7)  # a view at the row's own address
        assert torch.equal(lp_v[0], lp_b[i])


def _same_rows(got: torch.Tensor, want: torch.Tensor, terms: int) -> bool:
    """Batch invariance of a kernel whose rows go through ``tl.dot``. On a GPU, bit for bit: a
    row's result depends only on its own products, summed in the same order wherever the row
    sits. In the Triton interpreter ``tl.dot`` is the host's BLAS (numpy's matmul), whose edge
    kernels may sum a tile's last rows in another order (OpenBLAS on this project's AMD EPYC:
    1-3 ulps apart, ~1e-6 on log-probs near -8): there, within the fp32 rule of an output summed
    over ``terms`` (``tolerance.fp32_bound``), where a row read from its neighbour's place is off
    by O(1)."""
    from polytrace_kernels.tolerance import fp32_bound

    if DEV == "cuda":
        return torch.equal(got, want)
    return bool(((got - want).double().abs() <= fp32_bound(want.double(), terms=terms)).all())


def test_linear_batch_invariant():
    n_rows, vocab, hidden = 40, 300, 64
    gen = torch.Generator().manual_seed(22)
    h = torch.randn(n_rows, hidden, generator=gen).to(DEV, torch.float16)
    w = (torch.randn(vocab, hidden, generator=gen) * 0.2).to(DEV, torch.float16)
    tok = _tokens(n_rows, vocab, seed=23)
    lp_b, ent_b = linear_token_logprobs(h, w, tok, 0.9, return_entropy=True)
    pre = torch.randn(7, hidden, generator=gen).to(DEV, torch.float16)
    lp_p, ent_p = linear_token_logprobs(torch.cat([pre, h]), w, torch.cat([_tokens(7, vocab, 24, ()), tok]), 0.9,
                                        return_entropy=True)
    assert _same_rows(lp_p[7:], lp_b, vocab) and _same_rows(ent_p[7:], ent_b, vocab)
    for i in (0, 17, n_rows - 1):
        lp_1, ent_1 = linear_token_logprobs(h[i:i + 1].clone(), w, tok[i:i + 1], 0.9, return_entropy=True)
        assert _same_rows(lp_1, lp_b[i:i + 1], vocab) and _same_rows(ent_1, ent_b[i:i + 1], vocab), f"row {i}"
    # the bound still tells rows apart: a neighbour's result in a row's place fails it
    assert not _same_rows(lp_b.roll(1), lp_b, vocab) and not _same_rows(ent_b.roll(1), ent_b, vocab)


def test_tuning_bucket_ignores_token_count():
    import inspect

    assert list(inspect.signature(tuning_bucket).parameters) == ["vocab_size", "dtype"]
    assert tuning_bucket(151936, torch.bfloat16) == tuning_bucket(152064, torch.bfloat16)
    assert tuning_bucket(128256, torch.bfloat16) != tuning_bucket(152064, torch.bfloat16)
    assert linear_tuning_bucket(152064, 3584, torch.bfloat16) != linear_tuning_bucket(152064, 5120, torch.bfloat16)
    # no num_stages axis: the logits kernel has no tl.dot to pipeline (identical SASS, test_static_report.py)
    assert set(TUNING_SPACE) == {"BLOCK_V", "num_warps"}


# ------------------------------------------------------------------------------ fused LM head


def _linear_triplet(h, w, tok, temperature, weights, **kw):
    out = {}
    g_lp, g_ent = weights
    for name in ("ours", "torch", "truth"):
        dt = torch.float64 if name == "truth" else h.dtype
        hl, wl = h.detach().to(dt).clone().requires_grad_(), w.detach().to(dt).clone().requires_grad_()
        if name == "ours":
            lp, ent = linear_token_logprobs(hl, wl, tok, temperature, return_entropy=True, **kw)
        else:
            lp, ent = linear_token_logprobs_reference(hl, wl, tok, temperature, True, IGNORE, compute_dtype=None)
        torch.autograd.backward([lp, ent], [g_lp.to(lp.dtype), g_ent.to(ent.dtype)])
        out[name] = (lp.detach(), ent.detach(), hl.grad, wl.grad)
    return out


LINEAR_CASES = {
    # name: (T, V, H, temperature, kwargs)
    "T37-V1031-H64-temp0.7": (37, 1031, 64, 0.7, {}),
    "H40-uneven-K-chunked-bwd": (21, 515, 40, 1.0, {"chunk_bytes": 21 * 4 * 96}),
    # V = 16 * 64 + 1: the last vocabulary block (and split) holds a single column
    "one-column-last-block-V1025": (9, 1025, 32, 1.1, {}),
    # 32 vocabulary chunks of 32 columns (fp16; 16 in fp32): d(hidden) summed over chunks in fp32,
    # once rounded to 16 bits; summed in the input dtype its error grows ~3x (RMS, fp16)
    "32-chunks-V1024-H64": (16, 1024, 64, 1.0, {"chunk_bytes": 16 * 2 * 32}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_linear_token_logprobs_against_fp64(case, dtype):
    n_rows, vocab, hidden, temperature, kw = LINEAR_CASES[case]
    gen = torch.Generator().manual_seed(30)
    h = torch.randn(n_rows, hidden, generator=gen).to(DEV, dtype)
    w = (torch.randn(vocab, hidden, generator=gen) * 0.4).to(DEV, dtype)
    tok = _tokens(n_rows, vocab, seed=31, ignored=(2, 9))
    upstream = _upstream(n_rows, 32)
    if dtype == torch.float32:  # held to the fp32 bound: exact products asked (tf32 is the default)
        kw = dict(kw, fp32_precision="ieee")
    res = _linear_triplet(h, w, tok, temperature, upstream, **kw)
    ours, same, truth = res["ours"], res["torch"], res["truth"]
    for i, name in enumerate(("logprob", "entropy", "grad_hidden", "grad_weight")):
        assert torch.isfinite(ours[i]).all(), f"{name} has inf/NaN"
    expect(*linear_checks(case, h, w, tok, temperature, ours, same, truth, upstream))
    assert (ours[0] <= 0).all()
    assert ours[2].dtype == dtype and ours[3].dtype == dtype
    ignored = tok == IGNORE
    assert (ours[0][ignored] == 0).all() and (ours[2][ignored] == 0).all()


@pytest.mark.parametrize("vocab", [512, 509], ids=["even-V", "masked-V"])
def test_linear_skipped_ignored_blocks_and_target_tiles(vocab):
    """The fused forward's fast paths: V a multiple of the tile (no column mask), token blocks of
    ignored rows that run no GEMM (rows 0-19 and 40-55 ignored: whole 16-row blocks after the
    active rows are moved first), and targets on the first and last column of tiles and splits,
    several rows sharing a tile (the target select runs only on the tiles holding a token)."""
    n_rows, hidden = 64, 32
    gen = torch.Generator().manual_seed(36)
    h = torch.randn(n_rows, hidden, generator=gen).to(DEV, torch.float32)
    w = (torch.randn(vocab, hidden, generator=gen) * 0.4).to(DEV, torch.float32)
    tok = _tokens(n_rows, vocab, seed=37, ignored=[*range(20), *range(40, 56)])
    # the first active block (rows 20-35): tile edges, rows sharing a tile, and 192 alone at the
    # start of the tile after another hit tile of its split (splits of 2 tiles: 128 columns)
    tok[20:36] = torch.tensor([0, 5, 5, 6, 63, 64, 127, 128, 130, 192, 256, 257, 383, vocab - 64, vocab - 1, 1])
    upstream = _upstream(n_rows, 38)
    res = _linear_triplet(h, w, tok, 0.8, upstream, fp32_precision="ieee",
                          config={"BLOCK_T": 16, "BLOCK_V": 64, "NSPLIT": 4})
    ours = res["ours"]
    expect(*linear_checks(f"fast-paths-V{vocab}", h, w, tok, 0.8, ours, res["torch"], res["truth"], upstream))
    ignored = tok == IGNORE
    assert (ours[0][ignored] == 0).all() and (ours[1][ignored] == 0).all() and (ours[2][ignored] == 0).all()
    assert (ours[0][~ignored] < 0).all() and (ours[1][~ignored] > 0).all()


def test_linear_large_magnitude_and_frozen_weight():
    """Logits ~1e4 (no inf/NaN, log-probs <= 0) and a frozen weight (reference policy: only
    d(hidden) is computed)."""
    gen = torch.Generator().manual_seed(33)
    h = (torch.randn(12, 32, generator=gen) * 30).to(DEV, torch.float32).requires_grad_()
    w = (torch.randn(200, 32, generator=gen) * 30).to(DEV, torch.float32)
    tok = _tokens(12, 200, seed=34)
    lp, ent = linear_token_logprobs(h, w, tok, return_entropy=True, fp32_precision="ieee")
    ref_lp, ref_ent = linear_token_logprobs_reference(h.detach(), w, tok, 1.0, True, compute_dtype=torch.float64,
                                                      matmul_dtype=torch.float64)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all() and (lp <= 0).all()
    expect(*linear_checks("large", h.detach(), w, tok, 1.0, (lp, ent), None, (ref_lp, ref_ent), None))
    lp.sum().backward()
    assert torch.isfinite(h.grad).all() and w.grad is None


_REAL_EMPTY = torch.empty


def _poisoned_empty(*args, **kwargs):
    """torch.empty whose floating-point result is filled with NaN: on a CPU a fresh allocation is
    mostly zeros, which hides a buffer read before it is written (a GPU's caching allocator hands
    back whatever the last user left)."""
    out = _REAL_EMPTY(*args, **kwargs)
    if out.dtype.is_floating_point:
        out.fill_(float("nan"))
    return out


@pytest.mark.parametrize("which", ["logprob-only", "entropy-only"])
def test_linear_single_output_gradients(which, monkeypatch):
    """The fused head with the upstream gradient of one output only (the other one None in the
    backward, as when only the log-probs or only the entropies reach the loss): both gradients
    against fp64, fp32 with exact products, every ``torch.empty`` of the call poisoned with NaN."""
    gen = torch.Generator().manual_seed(62)
    h = torch.randn(13, 40, generator=gen).to(DEV)
    w = (torch.randn(200, 40, generator=gen) * 0.4).to(DEV)
    tok = _tokens(13, 200, seed=63)
    g = _upstream(13, 64)[0]
    upstream = (g, torch.zeros_like(g)) if which == "logprob-only" else (torch.zeros_like(g), g)
    res = {}
    for impl in ("ours", "truth"):
        dt = torch.float64 if impl == "truth" else torch.float32
        hl, wl = h.to(dt).clone().requires_grad_(), w.to(dt).clone().requires_grad_()
        if impl == "ours":
            monkeypatch.setattr(torch, "empty", _poisoned_empty)
            lp, ent = linear_token_logprobs(hl, wl, tok, 0.8, return_entropy=True, fp32_precision="ieee",
                                            chunk_bytes=13 * 4 * 64)  # 4 vocabulary chunks
        else:
            lp, ent = linear_token_logprobs_reference(hl, wl, tok, 0.8, True, IGNORE, compute_dtype=None)
        out = lp if which == "logprob-only" else ent
        out.backward(g.to(out.dtype))
        monkeypatch.undo()
        res[impl] = (lp.detach(), ent.detach(), hl.grad, wl.grad)
    expect(*linear_checks(which, h, w, tok, 0.8, res["ours"], None, res["truth"], upstream))


def test_linear_chunked_backward_with_strided_views():
    """A hidden and a weight sliced from padded buffers (row stride 48, hidden 40) through a
    backward of several vocabulary chunks (d(hidden) summed chunk by chunk in fp32): bit-for-bit
    the contiguous copies' gradients."""
    gen = torch.Generator().manual_seed(65)
    h_pad = torch.randn(10, 48, generator=gen).to(DEV)
    w_pad = (torch.randn(90, 48, generator=gen) * 0.3).to(DEV)
    tok = _tokens(10, 90, seed=66)

    def on_head(h, w, contiguous=False):
        assert h.stride(0) == w.stride(0) == 48
        if contiguous:
            h, w = h.contiguous(), w.contiguous()
        return linear_token_logprobs(h, w, tok, 0.9, return_entropy=True, chunk_bytes=10 * 4 * 32)

    views = _value_and_grads(on_head, h_pad, w_pad, width=40)
    dense = _value_and_grads(lambda h, w: on_head(h, w, True), h_pad, w_pad, width=40)
    for name, got, want in zip(("logprob", "entropy", "d hidden", "d weight"), views, dense):
        assert torch.equal(got, want), name


def test_linear_unchecked_out_of_range_token_is_nan():
    """As ``test_unchecked_out_of_range_token_is_nan`` for the fused head: tokens V and -3 with
    ``check_tokens=False`` give NaN, never a plausible number; the others are unchanged."""
    gen = torch.Generator().manual_seed(67)
    h = torch.randn(4, 32, generator=gen).to(DEV)
    w = (torch.randn(50, 32, generator=gen) * 0.3).to(DEV)
    tok = torch.tensor([1, 50, -3, IGNORE], device=DEV)
    lp = linear_token_logprobs(h, w, tok, check_tokens=False)
    assert torch.isfinite(lp[0]) and torch.isnan(lp[1]) and torch.isnan(lp[2]) and lp[3] == 0
    assert _same_rows(lp[:1], linear_token_logprobs(h[:1], w, tok[:1]), 50)


# ------------------------------------------------------------------------------------ bad input


def _ok_logits():
    return torch.randn(4, 10, device=DEV), torch.tensor([1, 2, 3, IGNORE], device=DEV)


@pytest.mark.parametrize("mutate,match", [
    (lambda x, t: (x[0], t), "logits must be 2-D"),
    (lambda x, t: (x.long(), t), "logits must be bfloat16"),
    (lambda x, t: (torch.randn(10, 4, device=DEV).t(), t), "logits must be contiguous along its last"),
    (lambda x, t: (x, t[:3]), r"tokens must have shape \(4,\)"),
    (lambda x, t: (x, t.float()), "tokens must be int32 or int64"),
    (lambda x, t: (x, t.tolist()), "tokens must be a torch.Tensor"),
    (lambda x, t: (x, torch.tensor([1, 2, 10, 0], device=DEV)), r"tokens\[2\] = 10 is outside \[0, 10\)"),
    (lambda x, t: (x, torch.tensor([1, -1, 0, 0], device=DEV)), r"tokens\[1\] = -1"),
    (lambda x, t: (x.to("meta"), t.to("meta")), "logits is on meta"),
    (lambda x, t: (x, t.to("meta")), "tokens is on meta"),
], ids=["1d", "int-logits", "transposed", "short-tokens", "float-tokens", "list-tokens", "token-too-big",
        "token-negative", "wrong-device", "device-mismatch"])
def test_token_logprobs_bad_input(mutate, match):
    x, t = mutate(*_ok_logits())
    with pytest.raises(ValueError, match=match):
        token_logprobs(x, t)


@pytest.mark.parametrize("kwargs,match", [
    ({"temperature": 0.0}, "temperature must be positive"),
    ({"temperature": float("nan")}, "temperature must be positive"),
    ({"temperature": torch.tensor(1.0)}, "temperature must be a Python number"),
    ({"ignore_index": 1.5}, "ignore_index must be an int"),
    ({"config": {"BLOCK_Q": 64}}, "config has unknown key"),
    ({"config": {"BLOCK_V": 100}}, r"config\['BLOCK_V'\] must be a power of two"),
    ({"config": {"num_warps": 0}}, r"config\['num_warps'\] must be a positive int"),
])
def test_token_logprobs_bad_arguments(kwargs, match):
    x, t = _ok_logits()
    with pytest.raises(ValueError, match=match):
        token_logprobs(x, t, **kwargs)


@pytest.mark.parametrize("mutate,match", [
    (lambda h, w, t: (h, w.half(), t), "weight dtype torch.float16 does not match hidden"),
    (lambda h, w, t: (h, w[:, :7], t), r"weight must be \[vocab, 8\]"),
    (lambda h, w, t: (h[0], w, t), "hidden must be 2-D"),
    (lambda h, w, t: (h, w, t[:2]), r"tokens must have shape \(4,\)"),
    (lambda h, w, t: (h, torch.randn(8, 30, device=DEV).t(), t), "weight must be contiguous along its last"),
    (lambda h, w, t: (h, w, torch.tensor([0, 1, 30, 2], device=DEV)), r"tokens\[2\] = 30 is outside \[0, 30\)"),
    (lambda h, w, t: (h, w.to("meta"), t), "weight is on meta"),
], ids=["dtype-mismatch", "hidden-size-mismatch", "1d-hidden", "short-tokens", "transposed-weight",
        "token-too-big", "device-mismatch"])
def test_linear_token_logprobs_bad_input(mutate, match):
    h = torch.randn(4, 8, device=DEV)
    w = torch.randn(30, 8, device=DEV)
    t = torch.tensor([0, 1, 2, IGNORE], device=DEV)
    h, w, t = mutate(h, w, t)
    with pytest.raises(ValueError, match=match):
        linear_token_logprobs(h, w, t)


def test_linear_bad_chunk_bytes():
    h, w = torch.randn(4, 8, device=DEV), torch.randn(30, 8, device=DEV)
    with pytest.raises(ValueError, match="chunk_bytes must be a positive int"):
        linear_token_logprobs(h, w, torch.tensor([0, 1, 2, 3], device=DEV), chunk_bytes=0)


# ------------------------------------------------------------------------------------------ spec


def test_spec_counts():
    t, v, h = 4096, 152064, 3584
    assert spec.logits_bytes(t, v, "bf16", "fwd") == pytest.approx(t * v * 2 + t * 24)
    assert spec.logits_bytes(t, v, "bf16", "fwd+bwd") == pytest.approx(3 * t * v * 2, rel=1e-3)
    assert spec.linear_flops(t, v, h, "fwd") == 2.0 * t * v * h
    assert spec.linear_flops(t, v, h, "fwd+bwd") == 4 * spec.linear_flops(t, v, h, "fwd")
    assert spec.matmul_flops(t, v, h, "fwd+bwd") == 3 * spec.matmul_flops(t, v, h, "fwd")
    # 16k tokens x 152k vocab: bf16 logits + fp32 copy + fp32 log-softmax = 24.9 GB; goal 1/8 of it
    assert spec.fused_memory_goal_bytes(16384, 152064) == pytest.approx(16384 * 152064 * 10 / 8)
    with pytest.raises(ValueError, match="mode must be"):
        spec.logits_bytes(1, 1, "bf16", "bwd-only")
    with pytest.raises(ValueError, match="dtype must be"):
        spec.linear_bytes(1, 1, 1, "int8")


# ------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_real_vocab_bf16():
    """V = 152064 (Qwen2.5), T = 4096, bf16: fp32 outputs within the fp32 bound, the bf16 gradient
    within half an ulp of it and 2x torch's bf16 error."""
    n_rows, vocab = 4096, 152064
    x = _logits(n_rows, vocab, torch.bfloat16, seed=40, scale=4.0)
    tok = _tokens(n_rows, vocab, seed=41, ignored=range(0, n_rows, 97))
    upstream = _upstream(n_rows, 42)
    res = _logits_triplet(x, tok, 1.0, upstream)
    ours, same, truth = res["ours"], res["torch"], res["truth"]
    for i in range(3):
        assert torch.isfinite(ours[i]).all()
    expect(*logits_checks("V152064", x, tok, 1.0, ours, same, truth, upstream))
    assert (ours[0] <= 0).all()


@pytest.mark.gpu
def test_gpu_real_vocab_batch_invariant():
    n_rows, vocab = 4096, 152064
    x = _logits(n_rows, vocab, torch.bfloat16, seed=43)
    tok = _tokens(n_rows, vocab, seed=44)
    lp_b, ent_b = token_logprobs(x, tok, return_entropy=True)
    for i in (0, 1, 1000, n_rows - 1):
        lp_1, ent_1 = token_logprobs(x[i:i + 1].clone(), tok[i:i + 1], return_entropy=True)
        assert torch.equal(lp_1, lp_b[i:i + 1]) and torch.equal(ent_1, ent_b[i:i + 1])
    lp_h, ent_h = token_logprobs(x[1000:1333], tok[1000:1333], return_entropy=True)
    assert torch.equal(lp_h, lp_b[1000:1333]) and torch.equal(ent_h, ent_b[1000:1333])
    # the generic (non-multiple-of-16) variant, rows at odd byte offsets
    lp_o, _ = token_logprobs(x[:, :1031], tok.remainder(1031), return_entropy=True)
    lp_oc = token_logprobs(x[7:8, :1031].clone(), tok[7:8].remainder(1031))
    assert torch.equal(lp_oc, lp_o[7:8])


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [3584])
def test_gpu_fused_bf16_real_vocab(hidden):
    """The fused LM-head kernel in bf16 at V = 152064 against fp64 and torch's bf16 path."""
    n_rows, vocab = 1024, 152064
    gen = torch.Generator().manual_seed(45)
    h = torch.randn(n_rows, hidden, generator=gen).to(DEV, torch.bfloat16)
    w = (torch.randn(vocab, hidden, generator=gen) * 0.03).to(DEV, torch.bfloat16)
    tok = _tokens(n_rows, vocab, seed=46, ignored=range(0, n_rows, 50))
    upstream = _upstream(n_rows, 47)
    res = _linear_triplet(h, w, tok, 1.0, upstream)
    ours, same, truth = res["ours"], res["torch"], res["truth"]
    for i in range(4):
        assert torch.isfinite(ours[i]).all()
    expect(*linear_checks("fused", h, w, tok, 1.0, ours, same, truth, upstream))
    lp_1 = linear_token_logprobs(h[5:6].clone(), w, tok[5:6])
    assert torch.equal(lp_1, ours[0][5:6])
    lp_s = linear_token_logprobs(h[3:300], w, tok[3:300])
    assert torch.equal(lp_s, ours[0][3:300])


def test_strided_tokens_and_hidden():
    """Non-contiguous token ids and hidden rows with a padded stride give the same results."""
    gen = torch.Generator().manual_seed(50)
    h_pad = torch.randn(10, 48, generator=gen).to(DEV, torch.float32)
    h = h_pad[:, :40]
    w = (torch.randn(90, 40, generator=gen) * 0.3).to(DEV, torch.float32)
    tok2 = torch.stack([_tokens(10, 90, seed=51), _tokens(10, 90, seed=52)], 1)
    tok = tok2[:, 0]  # stride 2
    lp = linear_token_logprobs(h, w, tok)
    assert torch.equal(lp, linear_token_logprobs(h.contiguous(), w, tok.contiguous()))
    x = _logits(10, 90, torch.float32, seed=53)
    assert torch.equal(token_logprobs(x, tok), token_logprobs(x, tok.contiguous()))


def _value_and_grads(fn, *padded, width):
    """fn's outputs and the gradients of its inputs, each input the first ``width`` columns of a
    padded leaf (a strided view: ``clone`` of such a view would be contiguous), or its copy."""
    leaves = [x.detach().clone().requires_grad_() for x in padded]
    views = [x[:, :width] for x in leaves]
    lp, ent = fn(*views)
    gen = torch.Generator().manual_seed(54)
    torch.autograd.backward([lp, ent], [torch.randn(lp.shape, generator=gen).to(DEV),
                                        torch.randn(ent.shape, generator=gen).to(DEV)])
    return [lp.detach(), ent.detach(), *(x.grad[:, :width] for x in leaves)]


def test_strided_views_in_the_backward():
    """Views a trainer hands over (logits rows of a wider buffer, a hidden and a weight sliced from
    padded ones) give bit-for-bit what their contiguous copies give, gradients included: a launcher
    passing a contiguous tensor's stride for a view reads other elements."""
    gen = torch.Generator().manual_seed(55)
    big = _logits(10, 1100, torch.float16, seed=56)
    tok = _tokens(10, 1031, seed=57)

    def on_logits(x, contiguous=False):
        assert x.stride(0) == 1100
        return token_logprobs(x.contiguous() if contiguous else x, tok, 0.9, return_entropy=True)

    views = _value_and_grads(on_logits, big, width=1031)  # row stride 1100, V 1031
    dense = _value_and_grads(lambda x: on_logits(x, True), big, width=1031)
    for name, got, want in zip(("logprob", "entropy", "d logits"), views, dense):
        assert torch.equal(got, want), name
    h_pad = torch.randn(10, 48, generator=gen).to(DEV, torch.float32)
    w_pad = (torch.randn(90, 48, generator=gen) * 0.3).to(DEV, torch.float32)
    tok_v = _tokens(10, 90, seed=58)

    def on_head(h, w, contiguous=False):
        assert h.stride(0) == w.stride(0) == 48
        if contiguous:
            h, w = h.contiguous(), w.contiguous()
        return linear_token_logprobs(h, w, tok_v, 0.9, return_entropy=True)

    views = _value_and_grads(on_head, h_pad, w_pad, width=40)  # row strides 48, hidden 40
    dense = _value_and_grads(lambda h, w: on_head(h, w, True), h_pad, w_pad, width=40)
    for name, got, want in zip(("logprob", "entropy", "d hidden", "d weight"), views, dense):
        assert torch.equal(got, want), name
