"""Features of the log-prob kernels that RL users rely on: the final-logit softcap (Gemma 2: 30,
applied as HF and verl do, logits -> cap * tanh(logits / cap) before the temperature) in the
forward and backward, and the vocabulary-parallel log-prob / entropy of a TP-sharded LM head
(``tests/_logprob_dist.py``: a gloo group of 2 CPU processes). Each against the fp64 reference on
the same rounded inputs, with the rules of ``tests/_bounds.py``."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from _bounds import expect, logits_checks

from polytrace_kernels.logprob import token_logprobs, token_logprobs_reference
from polytrace_kernels.logprob.softcap import _tanh

IGNORE = -100


def _case(n_rows, vocab, dtype, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(n_rows, vocab, generator=gen) * scale).to(dtype)
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    tok[3] = IGNORE
    up = (torch.randn(n_rows, generator=gen), torch.randn(n_rows, generator=gen))
    return x, tok, up


def _softcap_triplet(x, tok, temperature, cap, up, ignore_index=IGNORE, **kw):
    out = {}
    for name in ("ours", "torch", "truth"):
        leaf = (x.double() if name == "truth" else x.clone()).requires_grad_()
        if name == "ours":
            lp, ent = token_logprobs(leaf, tok, temperature, True, ignore_index=ignore_index, softcap=cap, **kw)
        else:
            cd = torch.float64 if name == "truth" else None
            lp, ent = token_logprobs_reference(leaf, tok, temperature, True, ignore_index, compute_dtype=cd,
                                               softcap=cap)
        torch.autograd.backward([lp, ent], [up[0].to(lp.dtype), up[1].to(ent.dtype)])
        out[name] = (lp.detach(), ent.detach(), leaf.grad)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("vocab, cap, config", [(1031, 5.0, None), (1024, 30.0, {"BLOCK_V": 128})],
                         ids=["V1031-cap5-tail", "V1024-cap30-aligned"])
def test_softcap_against_fp64(vocab, cap, config, dtype):
    """Logits of scale 4 cap: the tanh saturates for many columns (cap 5), or bites mildly (30 with
    scale 40); the tail block's masked columns must stay out of the sums (-inf is capped to -cap)."""
    x, tok, up = _case(12, vocab, dtype, seed=51, scale=4 * cap)
    res = _softcap_triplet(x, tok, 0.7, cap, up, config=config, backward_config=config)
    capped = torch.tanh(x.double() / cap) * cap  # the checks' error scale: the logits the softmax sees
    expect(*logits_checks(f"softcap{cap}-V{vocab}", capped, tok, 0.7, res["ours"], res["torch"], res["truth"], up))
    plain = token_logprobs(x, tok, 0.7)
    assert (plain - res["ours"][0]).abs().max() > 1e-2, "the cap changed nothing: not applied"


@pytest.mark.parametrize("bad", [0.0, -30.0, float("nan"), float("inf"), "30", True])
def test_softcap_bad_values_are_refused(bad):
    x, tok, _ = _case(4, 64, torch.float32, seed=52, scale=1.0)
    with pytest.raises(ValueError, match="softcap must be"):
        token_logprobs(x, tok, softcap=bad)


@triton.jit
def _tanh_probe(y_ptr, t_ptr, d_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    t, d = _tanh(tl.load(y_ptr + offs))
    tl.store(t_ptr + offs, t)
    tl.store(d_ptr + offs, d)


def test_softcap_tanh_and_its_derivative_to_fp32_rounding():
    """The kernels' tanh (from exp2) and 1 - tanh^2 on a dense grid across the |y| = 0.5 switch and
    out to saturation: tanh within 2 fp32 ulps of its value, the derivative within the input's own
    conditioning (2|y| x 1 ulp, from rounding y) plus 8 ulps."""
    y = torch.cat([torch.linspace(-0.6, 0.6, 3000), torch.linspace(-25.0, 25.0, 1000),
                   torch.tensor([0.0, 1e-30, -1e-8, 0.5, -0.5, float("inf"), float("-inf")])])
    y = torch.cat([y, torch.zeros(4096 - y.numel())])
    t, d = torch.empty_like(y), torch.empty_like(y)
    _tanh_probe[(1,)](y, t, d, BLOCK=4096)
    y64 = y.double()
    eps = torch.finfo(torch.float32).eps
    t64, d64 = torch.tanh(y64), 1.0 / torch.cosh(y64) ** 2
    assert ((t.double() - t64).abs() <= 2 * eps * t64.abs()).all()
    finite = torch.isfinite(y64)
    assert ((d.double() - d64).abs()[finite] <= ((2 * y64.abs() + 8) * eps * d64)[finite]).all()
    assert (d[~finite] == 0).all()


# ------------------------------------------------------------------ vocabulary-parallel (gloo, 2 ranks)

# id: (dtype, softcap, ignore_index, masked shards). -1 as the ignore index: a token another rank
# owns must not look ignored (the local id a foreign token takes is then the shard's width, not -1).
# Masked shards: constrained decoding sets one rank's whole shard of a row to -inf (rows 0-2 rank
# 1's, row 3 rank 0's): that rank holds no mass for the row, and its local max, log-sum and entropy
# (-inf, -inf, NaN) must add nothing to the sums, not 0 x NaN
_GLOO_CASES = {"fp32": (torch.float32, None, IGNORE, False), "bf16-cap30": (torch.bfloat16, 30.0, IGNORE, False),
               "fp32-ignore-minus-1": (torch.float32, None, -1, False),
               "fp32-a-shard-masked": (torch.float32, None, IGNORE, True)}
_BOUNDS = [0, 300, 513]


def _gloo_case(dtype, ignore_index=IGNORE, masked_shards=False):
    x, tok, up = _case(10, 513, dtype, seed=61, scale=8.0)
    tok[5] = 299  # the last column of rank 0, and the first of rank 1
    tok[6] = 300
    if masked_shards:
        x[0:3, 300:] = float("-inf")
        x[3, :300] = float("-inf")
        tok[0:3], tok[3] = torch.tensor([0, 150, 299]), 400  # each in the row's live shard
    tok[tok == IGNORE] = ignore_index
    return x, tok, up


@pytest.fixture(scope="module")
def gloo_ranks(tmp_path_factory):
    """Both cases below in one gloo group of 2 processes (one spawn, not one per case: each
    process start costs more than the case's work): {case id: [rank 0's results, rank 1's]}."""
    import torch.multiprocessing as mp
    from _logprob_dist import shard_worker

    out = tmp_path_factory.mktemp("gloo")
    cases = {}
    for name, (dtype, softcap, ignore_index, masked) in _GLOO_CASES.items():
        x, tok, up = _gloo_case(dtype, ignore_index, masked)
        cases[name] = {"logits": x, "tokens": tok, "temperature": 0.8, "g_lp": up[0], "g_ent": up[1],
                       "softcap": softcap, "ignore_index": ignore_index}
    mp.spawn(shard_worker, args=(2, str(out / "init"), _BOUNDS, cases, str(out)), nprocs=2, join=True)
    return {name: [torch.load(out / f"rank{r}-{name}.pt") for r in range(2)] for name in cases}


@pytest.mark.parametrize("case_id", list(_GLOO_CASES))
def test_vocab_parallel_against_fp64_with_two_gloo_ranks(gloo_ranks, case_id):
    """Two CPU processes in a gloo group, shards of 300 and 213 columns (uneven, one not a multiple
    of 16): each rank's log-probs and entropies are the full vocabulary's, and the concatenated shard
    gradients are the full logits' gradient, against fp64 on the whole matrix; a token no shard owns
    raises on every rank."""
    dtype, softcap, ignore_index, masked = _GLOO_CASES[case_id]
    x, tok, up = _gloo_case(dtype, ignore_index, masked)
    ranks = gloo_ranks[case_id]
    assert torch.equal(ranks[0]["logprob"], ranks[1]["logprob"]) and torch.equal(ranks[0]["entropy"],
                                                                                 ranks[1]["entropy"])
    ours = (ranks[0]["logprob"], ranks[0]["entropy"], torch.cat([r["grad"] for r in ranks], 1))
    assert torch.isfinite(ours[0]).all() and torch.isfinite(ours[1]).all()
    assert (ours[0][tok == ignore_index] == 0).all()
    res = _softcap_triplet(x, tok, 0.8, softcap, up, ignore_index=ignore_index)
    scale_x = torch.tanh(x.double() / softcap) * softcap if softcap else x
    expect(*logits_checks(f"vocab-parallel-{case_id}", scale_x, tok, 0.8, ours, res["torch"], res["truth"], up,
                          ignore_index=ignore_index))
    for r in ranks:
        assert "owned by 0 ranks" in r["bad_token_error"], r["bad_token_error"]


def test_vocab_parallel_single_process_is_the_whole_vocabulary():
    """Without a process group the one shard is the vocabulary: the fp64 checks hold as for
    ``token_logprobs``; a bad ``vocab_start`` is refused."""
    from polytrace_kernels.logprob import vocab_parallel_token_logprobs

    x, tok, up = _case(9, 300, torch.float32, seed=62, scale=3.0)
    leaf = x.clone().requires_grad_()
    lp, ent = vocab_parallel_token_logprobs(leaf, tok, 0, 0.9, True)
    torch.autograd.backward([lp, ent], list(up))
    res = _softcap_triplet(x, tok, 0.9, None, up)
    expect(*logits_checks("vocab-parallel-one-rank", x, tok, 0.9, (lp.detach(), ent.detach(), leaf.grad),
                          res["torch"], res["truth"], up))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="vocab_start must be"):
            vocab_parallel_token_logprobs(x, tok, bad)
    with pytest.raises(ValueError, match="owned by 0 ranks"):
        vocab_parallel_token_logprobs(x, torch.where(tok == IGNORE, tok, tok + 1000), 0)


# ------------------------------------------------------------------ fused LM head with the softcap

def _linear_softcap_triplet(h, w, tok, temperature, cap, up, **kw):
    from polytrace_kernels.logprob import linear_token_logprobs, linear_token_logprobs_reference

    out = {}
    for name in ("ours", "torch", "truth"):
        dt = torch.float64 if name == "truth" else h.dtype
        hl, wl = h.to(dt).clone().requires_grad_(), w.to(dt).clone().requires_grad_()
        if name == "ours":
            lp, ent = linear_token_logprobs(hl, wl, tok, temperature, True, softcap=cap, **kw)
        else:
            lp, ent = linear_token_logprobs_reference(hl, wl, tok, temperature, True, IGNORE, compute_dtype=None,
                                                      softcap=cap)
        torch.autograd.backward([lp, ent], [up[0].to(lp.dtype), up[1].to(ent.dtype)])
        out[name] = (lp.detach(), ent.detach(), hl.grad, wl.grad)
    return out


LINEAR_SOFTCAP_CASES = {
    # name: (T, V, H, weight scale, cap, dtype, config): logits of std ~ 2.5 x the weight scale
    # cap 5, logits std ~ 12: saturated columns; V 515 leaves a 3-column tail tile (masked after the cap)
    "fp32-cap5-V515-tail": (13, 515, 40, 2.0, 5.0, torch.float32, {"BLOCK_T": 16, "BLOCK_V": 64, "NSPLIT": 4}),
    # cap 30 (Gemma 2) on logits of std ~ 40, V a multiple of the tile (the EVEN_V path)
    "fp32-cap30-V512-even": (11, 512, 32, 16.0, 30.0, torch.float32, {"BLOCK_T": 16, "BLOCK_V": 64, "NSPLIT": 2}),
    "fp16-cap5-V515": (13, 515, 40, 2.0, 5.0, torch.float16, None),
}


def _linear_softcap_case(name):
    n_rows, vocab, hidden, wscale, cap, dtype, config = LINEAR_SOFTCAP_CASES[name]
    gen = torch.Generator().manual_seed(71)
    h = torch.randn(n_rows, hidden, generator=gen).to(dtype)
    w = (torch.randn(vocab, hidden, generator=gen) * (wscale / hidden ** 0.5)).to(dtype)
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    tok[3] = IGNORE
    tok[4] = vocab - 1  # a target in the tail tile
    up = (torch.randn(n_rows, generator=gen), torch.randn(n_rows, generator=gen))
    kw = {"fp32_precision": "ieee"} if dtype == torch.float32 else {}  # fp32 held to the fp32 bound
    if config is not None:
        kw.update(config=config, backward_config={"BLOCK_T": 16, "BLOCK_V": 64, "BLOCK_K": 16, "GROUP": 4,
                                                  "num_warps": 4, "num_stages": 1})
    return h, w, tok, cap, up, kw


@pytest.mark.parametrize("name", list(LINEAR_SOFTCAP_CASES))
def test_linear_softcap_against_fp64(name):
    """The fused LM head with Gemma 2's final-logit cap (Liger's ``softcap``): log-prob, entropy,
    d(hidden) and d(weight) against fp64 on the same rounded inputs (``linear_checks``)."""
    from _bounds import linear_checks

    from polytrace_kernels.logprob import linear_token_logprobs

    h, w, tok, cap, up, kw = _linear_softcap_case(name)
    res = _linear_softcap_triplet(h, w, tok, 0.8, cap, up, **kw)
    ours = res["ours"]
    for i in range(4):
        assert torch.isfinite(ours[i]).all()
    expect(*linear_checks(name, h, w, tok, 0.8, ours, res["torch"], res["truth"], up, IGNORE, softcap=cap))
    plain = linear_token_logprobs(h, w, tok, 0.8, **{k: v for k, v in kw.items() if k != "backward_config"})
    assert (plain - ours[0]).abs().max() > 0.1, "the cap changed nothing: not applied"
    assert (ours[0][tok == IGNORE] == 0).all() and (ours[2][tok == IGNORE] == 0).all()


@pytest.mark.parametrize("part", ["forward", "backward"])
def test_linear_softcap_scale_error_is_caught(part):
    """A cap off by 3e-4 (a planted scale error: c (1 + 3e-4) tanh(z / c) in the forward, or the
    backward's d(logits) from the wrong cap) fails the fp64 checks of the passing test above."""
    from _bounds import linear_checks

    import polytrace_kernels.logprob.api as api

    name = "fp32-cap5-V515-tail"
    h, w, tok, cap, up, kw = _linear_softcap_case(name)
    truth = _linear_softcap_triplet(h, w, tok, 0.8, cap, up, **kw)["truth"]
    real = api._linear_forward if part == "forward" else api._linear_backward

    def planted(*args):  # the kernels' softcap argument is the last one of both launchers
        return real(*args[:-1], args[-1] * (1 + 3e-4))

    setattr(api, real.__name__, planted)
    try:
        ours = _linear_softcap_triplet(h, w, tok, 0.8, cap, up, **kw)["ours"]
    finally:
        setattr(api, real.__name__, real)
    failed = [c for c in linear_checks(name, h, w, tok, 0.8, ours, None, truth, up, IGNORE, softcap=cap) if not c.ok]
    assert failed, "a softcap 3e-4 off passed every check"
