"""The log-prob kernels with each GPU's default launch config, in the interpreter (no CUDA needed).

The other CPU tests run the interpreter's defaults (BLOCK_V 1024; fused 16/64/32 tiles, 4 splits);
a GPU launch picks ``default_*_config(dtype, capability)`` instead (BLOCK_V 4096 or 2048; fused
128/128/64 or 64/64/32 tiles with 16 vocabulary splits), which would otherwise first run on a GPU.
Here each distinct default of sm_80 and sm_90 runs on shapes that exercise it: vocabularies of two
full blocks plus a tail, all 16 splits busy with a partial last one, several backward chunks.
fp16 and fp32 for the fused kernels (``tl.dot`` on bf16 is wrong in the interpreter), all three
dtypes for the logits kernels. Checked against fp64 with the tolerance rules (``tests/_bounds.py``).
"""

from __future__ import annotations

import pytest
import torch
from _bounds import expect, linear_checks, logits_checks
from _footprint import watch_kernels

from polytrace_kernels.logprob import (
    default_linear_bwd_config,
    default_linear_fwd_config,
    default_logits_bwd_config,
    default_logits_fwd_config,
    linear_token_logprobs,
    linear_token_logprobs_reference,
    token_logprobs,
    token_logprobs_reference,
)

CAPABILITIES = {"sm80": (8, 0), "sm90": (9, 0)}
IGNORE = -100


def _distinct(make, dtypes):
    """pytest params: one per distinct (dtype, config), named by the capabilities that pick it."""
    params = []
    for dtype in dtypes:
        seen = {}
        for name, cap in CAPABILITIES.items():
            cfg = make(dtype, cap)
            key = repr([sorted(c.items()) for c in cfg])
            seen.setdefault(key, (cfg, []))[1].append(name)
        for cfg, names in seen.values():
            params.append(pytest.param(dtype, cfg, id=f"{str(dtype)[6:]}-{'+'.join(names)}"))
    return params


def _upstream(n, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen), torch.randn(n, generator=gen)


@pytest.mark.parametrize("dtype,configs", _distinct(
    lambda dt, cap: (default_logits_fwd_config(dt, cap), default_logits_bwd_config(dt, cap)),
    (torch.float32, torch.float16, torch.bfloat16)))
def test_logits_kernels_with_gpu_defaults(dtype, configs):
    fwd, bwd = configs
    assert fwd["BLOCK_V"] >= 2048  # a GPU block, not the interpreter's 1024
    n_rows, temperature = 6, 0.8
    vocab = 2 * fwd["BLOCK_V"] + (48 if dtype == torch.float16 else 37)  # aligned and generic variants
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(n_rows, vocab, generator=gen) * 3).to(dtype)
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    tok[2] = IGNORE
    upstream = _upstream(n_rows, 8)
    res = {}
    with watch_kernels() as rec:
        for who in ("ours", "torch", "truth"):
            leaf = (x.double() if who == "truth" else x.clone()).requires_grad_()
            if who == "ours":
                lp, ent = token_logprobs(leaf, tok, temperature, True, config=fwd, backward_config=bwd)
            else:
                lp, ent = token_logprobs_reference(leaf, tok, temperature, True,
                                                   compute_dtype=torch.float64 if who == "truth" else None)
            torch.autograd.backward([lp, ent], [upstream[0].to(lp.dtype), upstream[1].to(ent.dtype)])
            res[who] = (lp.detach(), ent.detach(), leaf.grad)
    fwd_name = "token_logprobs_fwd_kernel" + ("" if vocab % 16 == 0 else "_generic")
    assert rec.one(fwd_name).args["BLOCK_V"] == fwd["BLOCK_V"]
    assert rec.one("token_logprobs_bwd_kernel").args["BLOCK_V"] == bwd["BLOCK_V"]
    expect(*logits_checks(f"gpu-default-{dtype}", x, tok, temperature, res["ours"], res["torch"], res["truth"],
                          upstream))


@pytest.mark.parametrize("dtype,configs", _distinct(
    lambda dt, cap: (default_linear_fwd_config(dt, cap), default_linear_bwd_config(dt, cap)),
    (torch.float32, torch.float16)))
def test_fused_kernels_with_gpu_defaults(dtype, configs):
    fwd, bwd = configs
    n_rows, temperature = 20, 0.9
    # every split busy with two vocabulary blocks, the last one partial; hidden size not a multiple
    # of BLOCK_K for fp16 (the masked K loop), a multiple for fp32
    vocab = fwd["NSPLIT"] * 2 * fwd["BLOCK_V"] - 100
    hidden = 72 if dtype == torch.float16 else 64
    gen = torch.Generator().manual_seed(9)
    h = torch.randn(n_rows, hidden, generator=gen).to(dtype)
    w = (torch.randn(vocab, hidden, generator=gen) * 0.3).to(dtype)
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    tok[5] = IGNORE
    upstream = _upstream(n_rows, 10)
    chunk_bytes = n_rows * h.element_size() * bwd["BLOCK_V"] * 8  # 8 vocabulary blocks per backward chunk
    res = {}
    with watch_kernels() as rec:
        for who in ("ours", "torch", "truth"):
            dt = torch.float64 if who == "truth" else dtype
            hl, wl = h.to(dt).clone().requires_grad_(), w.to(dt).clone().requires_grad_()
            if who == "ours":
                lp, ent = linear_token_logprobs(hl, wl, tok, temperature, True, config=fwd, backward_config=bwd,
                                                chunk_bytes=chunk_bytes)
            else:
                lp, ent = linear_token_logprobs_reference(hl, wl, tok, temperature, True, compute_dtype=None)
            torch.autograd.backward([lp, ent], [upstream[0].to(lp.dtype), upstream[1].to(ent.dtype)])
            res[who] = (lp.detach(), ent.detach(), hl.grad, wl.grad)
    launch = rec.one("linear_logprobs_fwd_kernel")
    assert launch.args["NSPLIT"] == fwd["NSPLIT"] == 16 and launch.args["BLOCK_T"] == fwd["BLOCK_T"]
    assert len(rec.of("linear_dlogits_kernel")) > 1 and rec.of("matmul_accumulate_kernel")
    expect(*linear_checks(f"gpu-default-{dtype}", h, w, tok, temperature, res["ours"], res["torch"], res["truth"],
                          upstream))


@pytest.mark.parametrize("asked, expected", [(None, "tf32"), ("tf32", "tf32"), ("ieee", "ieee")])
def test_fused_fp32_inputs_use_tensor_cores_unless_exactness_is_asked(asked, expected):
    """fp32 inputs run the fused kernels' dots in tf32 by default (tensor cores) and in exact fp32
    products ("ieee") when asked; 16-bit inputs keep the dtype's default (None)."""
    gen = torch.Generator().manual_seed(9)
    h = torch.randn(8, 32, generator=gen).requires_grad_()
    w = torch.randn(48, 32, generator=gen) * 0.3
    tok = torch.randint(0, 48, (8,), generator=gen)
    kw = {} if asked is None else {"fp32_precision": asked}
    with watch_kernels() as rec:
        linear_token_logprobs(h, w, tok, **kw).sum().backward()
        linear_token_logprobs(h.detach().half(), w.half(), tok, **kw)
    fwd = rec.of("linear_logprobs_fwd_kernel")
    assert [la.args["DOT_PRECISION"] for la in fwd] == [expected, None]
    assert rec.one("linear_dlogits_kernel").args["DOT_PRECISION"] == expected
