"""Attention over packed variable-length sequences and split-KV decode, on PolyTrace shapes.

Shapes: micro-batches of sampled steps of four built-in profiles (dapo-math-32b: long tail to
32k; deepcoder-14b: many responses near the 16k cap; video-vl-7b: bimodal prompts; search-r1-7b:
multi-turn), planned as a trainer packs them (``suites.shapes.microbatches``), with the attention
heads of Qwen2.5-7B (28 q / 4 kv, D 128) and Qwen2.5-32B (40 / 8, D 128); decode KV lengths from a
rollout snapshot (``suites.shapes.decode_snapshot``), where the long tail is still generating.

Providers, side by side in one run:

- ``ours``: polytrace_kernels.attention, longest-first work list (the default).
- ``ours-naive-order``: the same kernel, tiles in sequence order with heads outermost (the launch
  order of a conventional (blocks, batch, heads) grid): the skew-aware scheduling's effect alone.
- ``torch-varlen``: ``torch.nn.attention.varlen.varlen_attn`` (flash-attention 2 inside; torch >= 2.10, CUDA).
- ``flash-attn``: ``flash_attn_varlen_func`` / ``flash_attn_with_kvcache`` when installed.
- ``flex``: FlexAttention with a document mask (compiled). Block-mask creation is timed apart and
  reported as ``block_mask_s``; ``flex+mask`` times mask creation plus attention as one total.
- ``sdpa-padded``: ``scaled_dot_product_attention`` on right-padded [B, H, Lmax, D]: the cost of not
  packing (pad/unpad copies not timed).
- decode also has ``ours-1split`` (no split-KV) to show what splitting buys on skewed lengths.

Our work list is built once per cu_seqlens tensor and reused by every layer (and the backward),
like the peers' host-side max_seqlen; its build time is reported as ``plan_build_s``.

On CPU (Triton interpreter) the suite runs one tiny, clearly labelled batch per mode
(``measured_on: cpu-interpreter``): a smoke test of the code paths, never a performance figure.

Shapes and the providers' preparation (inputs bound to a shape) live in ``suites/attention_cases.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from polytrace_kernels.attention import spec
from suites import harness
from suites.attention_cases import VarlenShape, decode_shapes, prepare_decode, prepare_varlen, varlen_shapes
from suites.harness import Case, Provider, module_available, needs_cuda, on_gpu

FAMILY = "attention"


# ------------------------------------------------------------------------------------- providers


def _torch_varlen_available() -> str | None:
    reason = needs_cuda()
    if reason:
        return reason
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return "torch.nn.attention.varlen is not in this torch (needs >= 2.10)"
    return None


def _flex_available() -> str | None:
    reason = needs_cuda()
    if reason:
        return reason
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return "torch.nn.attention.flex_attention is not in this torch"
    return None


def _flash_attn_available() -> str | None:
    return needs_cuda() or module_available("flash_attn")


VARLEN_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("ours-naive-order", kind="ours"),
    Provider("torch-varlen", available=_torch_varlen_available),
    Provider("flash-attn", available=_flash_attn_available),
    Provider("flex", available=_flex_available, kind="baseline"),
    Provider("flex+mask", available=_flex_available, kind="baseline"),
    Provider("sdpa-padded", kind="baseline"),
]
BWD_PROVIDERS = [p for p in VARLEN_PROVIDERS if p.name != "flex+mask"]
DECODE_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("ours-1split", kind="ours"),
    Provider("torch-varlen", available=_torch_varlen_available),
    Provider("flash-attn", available=_flash_attn_available),
    Provider("sdpa-padded", kind="baseline"),
]


def _case(s: VarlenShape, provider: str, mode: str, extra: dict) -> Case:
    dtype = "bf16" if on_gpu() else "fp16"
    lens = s.seqlens
    flops = spec.varlen_attention_flops(lens, s.heads_q, s.head_dim, causal=True, mode=mode)
    nbytes = spec.varlen_attention_bytes(sum(lens), sum(lens), s.heads_q, s.heads_kv, s.head_dim, dtype=dtype,
                                         mode=mode)
    info = dict(extra)
    info.update({"dtype": dtype, "skew_max_over_mean": round(max(lens) / (sum(lens) / len(lens)), 2),
                 "sum_sq_tokens": int(sum(x * x for x in lens))})
    return Case(FAMILY, "varlen_attention", provider, mode, s.shape(), flops=flops, bytes_moved=nbytes,
                roofline="bf16", profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)


# ----------------------------------------------------------------------------------------- tests


def _varlen_params(providers):
    return [pytest.param(p, s, id=f"{p.name}-{s.id}") for s in varlen_shapes() for p in providers]


@pytest.mark.parametrize("provider,shape", _varlen_params(VARLEN_PROVIDERS))
def test_varlen_fwd(benchmark, provider, shape):
    harness.skip_unavailable(provider)
    import torch

    prepared = prepare_varlen(provider.name, shape, requires_grad=False)
    with torch.no_grad():
        out = harness.run(benchmark, prepared.run, _case(shape, provider.name, "fwd", prepared.extra))
    assert torch.isfinite(out.float()).all()
    _record_totals(benchmark, prepared.extra)


@pytest.mark.parametrize("provider,shape", _varlen_params(BWD_PROVIDERS))
def test_varlen_bwd(benchmark, provider, shape):
    """Backward only: the forward runs once outside the timing; each round computes dq, dk, dv."""
    harness.skip_unavailable(provider)
    import torch

    prepared = prepare_varlen(provider.name, shape, requires_grad=True)
    out = prepared.run()
    dout = torch.randn_like(out)
    grads = lambda: torch.autograd.grad(out, prepared.inputs, dout, retain_graph=True)
    result = harness.run(benchmark, grads, _case(shape, provider.name, "bwd", prepared.extra))
    assert all(torch.isfinite(g.float()).all() for g in result)


def _record_totals(benchmark, extra: dict) -> None:
    """Totals with the per-batch setup (plan or block mask) added, beside the per-call median."""
    median = benchmark.extra_info.get("median_s")
    if not median:
        return
    for key in ("plan_build_s", "block_mask_s"):
        if key in extra and not extra.get("mask_in_timing"):
            benchmark.extra_info[f"total_with_{key[:-2]}_s"] = median + extra[key]


# ---------------------------------------------------------------------------------------- decode


@pytest.mark.parametrize("provider,shape",
                         [pytest.param(p, s, id=f"{p.name}-{s.id}") for s in decode_shapes() for p in DECODE_PROVIDERS])
def test_decode(benchmark, provider, shape):
    harness.skip_unavailable(provider)
    import torch

    fn, extra = prepare_decode(provider.name, shape)
    dtype = "bf16" if on_gpu() else "fp16"
    lens = shape.kv_lens
    info = dict(extra)
    info.update({"dtype": dtype, "skew_max_over_mean": round(max(lens) / max(float(np.mean(lens)), 1.0), 2)})
    case = Case(FAMILY, "decode_attention", provider.name, "decode", shape.shape(),
                flops=spec.decode_attention_flops(lens, shape.heads_q, shape.head_dim),
                bytes_moved=spec.decode_attention_bytes(lens, shape.heads_q, shape.heads_kv, shape.head_dim,
                                                        dtype=dtype),
                roofline="hbm", profile=shape.profile, seed=0, step=0,
                weight=1.0 / max(len(decode_shapes()), 1), extra=info)
    out = harness.run(benchmark, fn, case)
    assert torch.isfinite(out.float()).all()


def test_flops_convention():
    """The FLOPs the suite divides by: 4 * D * Hq * sum(L^2) / 2 for causal (not timed)."""
    assert spec.varlen_attention_flops([3, 4], 2, 8, causal=True) == 4 * 8 * 2 * (9 + 16) / 2
    assert math.isclose(spec.varlen_attention_flops([10], 1, 16, mode="bwd"),
                        2.5 * spec.varlen_attention_flops([10], 1, 16))
