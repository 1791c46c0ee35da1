"""Shapes and provider preparation of the attention suite (``suites/test_attention.py``): the
PolyTrace micro-batch and decode shapes, and each provider's inputs bound to one shape. Apart from
the test file so that it holds the provider registrations and the benchmarks only.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from polytrace_kernels.attention import spec
from suites import harness
from suites.harness import on_gpu

PROFILES = ("dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b")
# (q heads, kv heads, head dim) per model: Qwen2.5-7B and Qwen2.5-32B config.json (no tensor parallel)
HEAD_CONFIGS = {"qwen2.5-7b": (28, 4, 128), "qwen2.5-32b": (40, 8, 128)}
# One tensor-parallel rank of Qwen2.5-32B at TP 8 (5 q / 1 kv heads): few heads per launch is where
# launch order decides the tail; used on the long-tail scheduling shape only.
TP_HEADS = {"qwen2.5-32b-tp8": (5, 1, 128)}
CPU_HEADS = {"cpu-tiny": (2, 1, 64)}
EST_SMS = 132  # SM count assumed by the tail estimate where no GPU is present (H100/H200 SXM)
GPU_MAX_TOKENS = 16384  # verl's ppo_max_token_len_per_gpu default; raised to the longest sequence
# representative micro-batches per profile (strata by sum of squared lengths); lower it with
# POLYTRACE_ATTENTION_BATCHES=1 (and select models/modes with -k) to fit a short GPU session
GPU_BATCHES_PER_PROFILE = int(os.environ.get("POLYTRACE_ATTENTION_BATCHES", "2"))
CPU_MAX_TOKENS = 128  # interpreter: ~1 s per forward at 2 heads, D 64
DECODE_PROGRESS = (0.25, 0.75)  # points of the rollout (fraction of the longest response's iterations)
GPU_DECODE_BATCH = 256  # active sequences per GPU (vLLM's default max_num_seqs)
PADDED_LIMIT_BYTES = 8 << 30  # skip padded SDPA when one padded tensor would exceed this


# ---------------------------------------------------------------------------------------- shapes


@dataclass
class VarlenShape:
    label: str
    profile: str
    model: str
    seqlens: list[int]
    weight: float
    heads_q: int
    heads_kv: int
    head_dim: int
    seed: int = 0
    step: int = 0

    @property
    def id(self) -> str:
        return f"{self.label}-{self.model}"

    def shape(self) -> dict:
        lens = self.seqlens
        return {"profile": self.profile, "model": self.model, "B": len(lens), "T": int(sum(lens)),
                "max_len": int(max(lens)), "Hq": self.heads_q, "Hkv": self.heads_kv, "D": self.head_dim,
                "mb": self.label.split("/")[-1]}


@functools.cache
def varlen_shapes() -> tuple[VarlenShape, ...]:
    from suites import shapes

    out = []
    if on_gpu():
        for profile in PROFILES:
            for mb in shapes.microbatches(profile, max_tokens=GPU_MAX_TOKENS, max_batches=GPU_BATCHES_PER_PROFILE):
                for model, (hq, hkv, d) in HEAD_CONFIGS.items():
                    out.append(VarlenShape(mb.label, profile, model, [int(x) for x in mb.seqlens], mb.weight,
                                           hq, hkv, d, mb.seed, mb.step))
        lens, weight, step = long_tail_batch(PROFILES[0])
        for model, (hq, hkv, d) in {**HEAD_CONFIGS, **TP_HEADS}.items():
            out.append(VarlenShape(f"{PROFILES[0]}/s{step}/longtail", PROFILES[0], model, lens, weight, hq, hkv, d,
                                   step=step))
    else:
        profile = PROFILES[0]
        mbs = shapes.microbatches(profile, max_tokens=GPU_MAX_TOKENS, max_batches=1)
        lens = shapes.cpu_scale(mbs[0].seqlens, CPU_MAX_TOKENS)
        for model, (hq, hkv, d) in CPU_HEADS.items():
            out.append(VarlenShape(mbs[0].label + "-cpu", profile, model, [int(x) for x in lens], mbs[0].weight,
                                   hq, hkv, d, mbs[0].seed, mbs[0].step))
    return tuple(out)


LONG_TAIL_STEPS = (0, 100, 200, 300, 400, 500)  # sampled steps searched for the longest sequence


def long_tail_batch(profile: str, seed: int = 0) -> tuple[list[int], float, int]:
    """The skew case for the scheduling comparison: the longest sequence of a few sampled steps
    (the profile's drift makes late steps longer) packed with randomly drawn others of the same
    step, up to the longest + GPU_MAX_TOKENS tokens (a packer filling the budget around one long
    response). Returns (lengths, token share of the step, step)."""
    from suites import shapes

    batches = {st: shapes.sample_step(profile, seed=seed, step=st).seq_lens.astype(np.int64)
               for st in LONG_TAIL_STEPS}
    step = max(batches, key=lambda st: int(batches[st].max()))
    lens = batches[step]
    order = np.random.default_rng(seed).permutation(lens.size)
    longest = int(np.argmax(lens))
    picked, budget = [int(lens[longest])], int(lens[longest]) + GPU_MAX_TOKENS
    for i in order:
        if i != longest and sum(picked) + int(lens[i]) <= budget:
            picked.append(int(lens[i]))
    return picked, float(sum(picked)) / float(lens.sum()), step


@dataclass
class DecodeShape:
    label: str
    profile: str
    model: str
    kv_lens: list[int]
    heads_q: int
    heads_kv: int
    head_dim: int
    progress: float

    @property
    def id(self) -> str:
        return f"{self.label}-{self.model}"

    def shape(self) -> dict:
        lens = self.kv_lens
        return {"profile": self.profile, "model": self.model, "B": len(lens), "kv_total": int(sum(lens)),
                "kv_max": int(max(lens)), "kv_mean": round(float(np.mean(lens)), 1), "Hq": self.heads_q,
                "Hkv": self.heads_kv, "D": self.head_dim, "progress": self.progress}


@functools.cache
def decode_shapes() -> tuple[DecodeShape, ...]:
    from suites import shapes

    out = []
    if on_gpu():
        for profile in PROFILES:
            for progress in DECODE_PROGRESS:
                lens = shapes.decode_snapshot(profile, batch_size=GPU_DECODE_BATCH, progress=progress)
                if lens.size == 0:
                    continue
                for model, (hq, hkv, d) in HEAD_CONFIGS.items():
                    out.append(DecodeShape(f"{profile}/p{progress}", profile, model, [int(x) for x in lens],
                                           hq, hkv, d, progress))
    else:
        profile = PROFILES[0]
        lens = shapes.decode_snapshot(profile, progress=DECODE_PROGRESS[0])
        lens = shapes.cpu_scale(lens, 160, max_seqs=6)
        for model, (hq, hkv, d) in CPU_HEADS.items():
            out.append(DecodeShape(f"{profile}/p{DECODE_PROGRESS[0]}-cpu", profile, model, [int(x) for x in lens],
                                   hq, hkv, d, DECODE_PROGRESS[0]))
    return tuple(out)


# ------------------------------------------------------------------------------------- providers


@dataclass
class Prepared:
    """A provider bound to one shape: ``run()`` returns the attention output, computed from the
    leaf tensors ``inputs`` (what the backward differentiates)."""

    run: object
    inputs: tuple
    extra: dict = field(default_factory=dict)


def _dtype():
    import torch

    return torch.bfloat16 if on_gpu() else torch.float16  # bf16 tl.dot is wrong in the interpreter


def _packed_inputs(s: VarlenShape, requires_grad: bool):
    import torch

    dev = harness.device()
    gen = torch.Generator(device=dev).manual_seed(0)  # on the device: a host randn of GBs would dominate
    total = sum(s.seqlens)

    def rand(heads):
        t = torch.randn(total, heads, s.head_dim, generator=gen, device=dev, dtype=torch.float32)
        return t.to(_dtype()).requires_grad_(requires_grad)

    q, k, v = rand(s.heads_q), rand(s.heads_kv), rand(s.heads_kv)
    cu = torch.zeros(len(s.seqlens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(s.seqlens), 0)
    return q, k, v, cu.to(dev)


def _timed_once(fn) -> float:
    harness.sync()
    t0 = time.perf_counter()
    fn()
    harness.sync()
    return time.perf_counter() - t0


def _prepare_ours(s: VarlenShape, schedule: str, requires_grad: bool) -> Prepared:
    from polytrace_kernels.attention import api

    q, k, v, cu = _packed_inputs(s, requires_grad)
    mx = max(s.seqlens)
    block_m = api.default_fwd_config(s.head_dim, q.dtype)["BLOCK_M"]
    build = functools.partial(api.varlen_plan, cu, cu, q.shape[0], k.shape[0], block_m=block_m, causal=True,
                              schedule=schedule, max_seqlen_q=mx)
    build()  # first call out of the measurement
    plan_s = _timed_once(build)
    run = lambda: api.varlen_attention(q, k, v, cu, cu, mx, mx, causal=True, schedule=schedule)
    # Tail-effect model (spec.schedule_makespan): one resident forward program per SM at the GPU
    # tiles (186-250 registers x 256 threads, sm_90a): an estimate, labelled as such.
    sms = _sm_count()
    est = spec.schedule_makespan(s.seqlens, s.heads_q, api.default_fwd_config(s.head_dim, on_cuda=True)["BLOCK_M"],
                                 schedule=schedule, n_slots=sms)
    return Prepared(run, (q, k, v), {"schedule": schedule, "plan_build_s": plan_s,
                                     "est_makespan_over_balanced": round(est, 4), "est_sms": sms})


def _sm_count() -> int:
    if on_gpu():
        import torch

        return torch.cuda.get_device_properties(0).multi_processor_count
    return EST_SMS


def _prepare_torch_varlen(s: VarlenShape, requires_grad: bool) -> Prepared:
    from torch.nn.attention.varlen import varlen_attn

    q, k, v, cu = _packed_inputs(s, requires_grad)
    mx = max(s.seqlens)
    params = inspect.signature(varlen_attn).parameters
    kw = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}  # 2.10 vs >= 2.11
    if "enable_gqa" in params and s.heads_q != s.heads_kv:
        kw["enable_gqa"] = True
    extra = {"kv_expanded": False}
    try:
        varlen_attn(q, k, v, cu, cu, mx, mx, **kw)
        kk, vv = k, v
    except (RuntimeError, ValueError):  # a torch without GQA in varlen_attn: repeat K/V (more bytes; recorded)
        group = s.heads_q // s.heads_kv
        kk = k.detach().repeat_interleave(group, 1).requires_grad_(requires_grad)
        vv = v.detach().repeat_interleave(group, 1).requires_grad_(requires_grad)
        extra["kv_expanded"] = True
    return Prepared(lambda: varlen_attn(q, kk, vv, cu, cu, mx, mx, **kw), (q, kk, vv), extra)


def _prepare_flash_attn(s: VarlenShape, requires_grad: bool) -> Prepared:
    from flash_attn import flash_attn_varlen_func

    q, k, v, cu = _packed_inputs(s, requires_grad)
    mx = max(s.seqlens)
    return Prepared(lambda: flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True), (q, k, v))


@functools.cache
def _compiled_flex():
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _prepare_flex(s: VarlenShape, requires_grad: bool, include_mask: bool) -> Prepared:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    q, k, v, cu = _packed_inputs(s, requires_grad)
    dev = q.device
    total = q.shape[0]
    doc = torch.repeat_interleave(torch.arange(len(s.seqlens), device=dev),
                                  torch.tensor(s.seqlens, device=dev))

    def document_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    make_mask = lambda: create_block_mask(document_causal, None, None, total, total, device=dev)
    block_mask = make_mask()
    mask_s = _timed_once(make_mask)
    flex = _compiled_flex()
    qf, kf, vf = (t.transpose(0, 1)[None] for t in (q, k, v))  # [1, H, T, D] views of the leaves
    gqa = s.heads_q != s.heads_kv
    if include_mask:
        run = lambda: flex(qf, kf, vf, block_mask=make_mask(), enable_gqa=gqa)
    else:
        run = lambda: flex(qf, kf, vf, block_mask=block_mask, enable_gqa=gqa)
    return Prepared(run, (q, k, v), {"block_mask_s": mask_s, "mask_in_timing": include_mask})


def _padded_bytes(s: VarlenShape) -> int:
    return len(s.seqlens) * max(s.seqlens) * s.heads_q * s.head_dim * 2


def _prepare_sdpa_padded(s: VarlenShape, requires_grad: bool) -> Prepared:
    import torch.nn.functional as F

    if _padded_bytes(s) > PADDED_LIMIT_BYTES:
        pytest.skip(f"sdpa-padded: one padded tensor would need {_padded_bytes(s) / 2**30:.1f} GiB")
    q, k, v, _ = _packed_inputs(s, False)
    b, lmax = len(s.seqlens), max(s.seqlens)
    group = s.heads_q // s.heads_kv

    def pad(t, heads):
        out = t.new_zeros(b, lmax, heads, s.head_dim)
        start = 0
        for i, n in enumerate(s.seqlens):
            out[i, :n] = t[start:start + n]
            start += n
        return out.transpose(1, 2).contiguous()  # [B, H, Lmax, D]

    qp = pad(q, s.heads_q).requires_grad_(requires_grad)
    # K/V repeated per query head outside the timing: SDPA's fused backends need equal heads
    kp = pad(k.repeat_interleave(group, 1), s.heads_q).requires_grad_(requires_grad)
    vp = pad(v.repeat_interleave(group, 1), s.heads_q).requires_grad_(requires_grad)
    # right padding + causal: valid rows never see padded keys, so no extra mask is needed
    return Prepared(lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=True), (qp, kp, vp),
                    {"padded_tokens": b * lmax, "kv_expanded": True})


def prepare_varlen(provider: str, s: VarlenShape, requires_grad: bool) -> Prepared:
    if provider == "ours":
        return _prepare_ours(s, "longest_first", requires_grad)
    if provider == "ours-naive-order":
        return _prepare_ours(s, "naive", requires_grad)
    if provider == "torch-varlen":
        return _prepare_torch_varlen(s, requires_grad)
    if provider == "flash-attn":
        return _prepare_flash_attn(s, requires_grad)
    if provider == "flex":
        return _prepare_flex(s, requires_grad, include_mask=False)
    if provider == "flex+mask":
        return _prepare_flex(s, requires_grad, include_mask=True)
    if provider == "sdpa-padded":
        return _prepare_sdpa_padded(s, requires_grad)
    raise AssertionError(f"unregistered provider {provider}")


# ---------------------------------------------------------------------------------------- decode


def _decode_inputs(s: DecodeShape):
    import torch

    dev = harness.device()
    gen = torch.Generator(device=dev).manual_seed(0)
    b, lmax = len(s.kv_lens), max(s.kv_lens)
    q = torch.randn(b, s.heads_q, s.head_dim, generator=gen, device=dev).to(_dtype())
    # filled on the device: a host randn of tens of GB would dominate the suite
    kc = torch.empty(b, lmax, s.heads_kv, s.head_dim, device=dev, dtype=_dtype()).normal_(generator=gen)
    vc = torch.empty_like(kc).normal_(generator=gen)
    sl = torch.tensor(s.kv_lens, dtype=torch.int32, device=dev)
    return q, kc, vc, sl


def prepare_decode(provider: str, s: DecodeShape):
    import torch

    from polytrace_kernels.attention import decode_attention

    cache_bytes = 2 * len(s.kv_lens) * max(s.kv_lens) * s.heads_kv * s.head_dim * 2
    if cache_bytes > 48 << 30:
        pytest.skip(f"contiguous cache would need {cache_bytes / 2**30:.1f} GiB")
    q, kc, vc, sl = _decode_inputs(s)
    b, lmax = len(s.kv_lens), max(s.kv_lens)
    if provider == "ours":
        return lambda: decode_attention(q, kc, vc, sl), {}
    if provider == "ours-1split":
        return lambda: decode_attention(q, kc, vc, sl, num_splits=1), {"num_splits": 1}
    if provider == "flash-attn":
        from flash_attn import flash_attn_with_kvcache

        q4 = q[:, None]
        return lambda: flash_attn_with_kvcache(q4, kc, vc, cache_seqlens=sl), {}
    if provider == "torch-varlen":
        from torch.nn.attention.varlen import varlen_attn

        # packed K/V of exactly the cached tokens (built outside the timing)
        kp = torch.cat([kc[i, :n] for i, n in enumerate(s.kv_lens)])
        vp = torch.cat([vc[i, :n] for i, n in enumerate(s.kv_lens)])
        cu_k = torch.zeros(b + 1, dtype=torch.int32, device=q.device)
        cu_k[1:] = torch.cumsum(sl, 0)
        cu_q = torch.arange(b + 1, dtype=torch.int32, device=q.device)
        params = inspect.signature(varlen_attn).parameters
        kw = {"enable_gqa": True} if "enable_gqa" in params and s.heads_q != s.heads_kv else {}
        try:
            varlen_attn(q, kp, vp, cu_q, cu_k, 1, lmax, **kw)
        except (RuntimeError, ValueError) as exc:
            pytest.skip(f"torch-varlen: this torch's varlen_attn cannot run GQA decode ({exc})")
        return lambda: varlen_attn(q, kp, vp, cu_q, cu_k, 1, lmax, **kw), {"kv_layout": "packed"}
    if provider == "sdpa-padded":
        import torch.nn.functional as F

        mask = (torch.arange(lmax, device=q.device)[None, :] < sl[:, None])[:, None, None, :]
        qs = q[:, :, None]  # [B, Hq, 1, D]
        ks, vs = kc.transpose(1, 2), vc.transpose(1, 2)  # [B, Hkv, Lmax, D] views
        group = s.heads_q // s.heads_kv
        try:
            F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=group > 1)
            return lambda: F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=group > 1), {}
        except TypeError:  # torch < 2.5: no enable_gqa
            ke, ve = ks.repeat_interleave(group, 1), vs.repeat_interleave(group, 1)
            return lambda: F.scaled_dot_product_attention(qs, ke, ve, attn_mask=mask), {"kv_expanded": True}
    raise AssertionError(f"unregistered provider {provider}")
