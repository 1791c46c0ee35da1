"""Cases of the attention suite's decode part (``suites/test_attention.py``): split-KV decode
attention across the KV lengths a rollout visits.

Shapes: for each of four built-in profiles, one sampled step run through continuous batching on
one engine of ``GPU_DECODE_SLOTS`` (256, vLLM's default max_num_seqs) sequences at once, FIFO, as
``polytrace/stepmodel/rollout.py`` simulates it (``shapes.decode_trajectory``); the running batch is
read off at ``DECODE_POINTS`` of the rollout: a full batch at prompt-sized KV lengths early, the
long tail's few sequences at long lengths late. Heads of Qwen2.5-7B and Qwen2.5-32B. Shape keys:
``batch`` (running sequences), ``kv_len_mean``, ``kv_len_max``, ``kv_total``, ``heads_q``,
``heads_kv``, ``head_dim``, ``progress`` (fraction of the rollout's iterations) and ``iteration``.

Providers: ``ours`` (split-KV), ``ours-1split`` (no split: what splitting buys on skewed lengths),
``ours-paged16`` / ``ours-paged256`` (the same cache in pages of 16 tokens, vLLM's default, or 256,
scattered in a shuffled page pool with a block table, built outside the timing),
``torch-varlen`` (packed K/V of exactly the cached tokens, built outside the timing),
``flash-attn`` (``flash_attn_with_kvcache``) and ``sdpa-padded`` (masked SDPA over the padded
cache). Every provider gets the same metadata: the cache lengths on the device and the cache's
padded length (a host int).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np

from polytrace_kernels.attention import spec

from . import checks
from .attention_cases import CPU_HEADS, HEAD_CONFIGS, PROFILES, _torch_varlen_available, dtype, flash_attn_available
from .harness import Case, Provider, on_gpu
from .registry import BenchCase, Bound, family_module

SUITE = "attention"
FAMILY = "attention"
GPU_DECODE_SLOTS = 256  # sequences one engine decodes at once (vLLM's default max_num_seqs)
DECODE_POINTS = (0.05, 0.3, 0.6, 0.9)  # fractions of the rollout's decode iterations
CPU_DECODE_POINT = 0.3
MAX_CACHE_BYTES = 48 << 30  # skip a contiguous K+V cache larger than this
PAGED_PROVIDERS = {"ours-paged16": 16, "ours-paged256": 256}  # provider -> page size (tokens)


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
    iteration: int
    weight: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.label}-{self.model}"

    def shape(self) -> dict:
        lens = self.kv_lens
        return {"profile": self.profile, "model": self.model, "batch": len(lens), "kv_len_mean": round(
                float(np.mean(lens)), 1), "kv_len_max": int(max(lens)), "kv_total": int(sum(lens)),
                "heads_q": self.heads_q, "heads_kv": self.heads_kv, "head_dim": self.head_dim,
                "progress": self.progress, "iteration": self.iteration}


@functools.cache
def decode_shapes() -> tuple[DecodeShape, ...]:
    from . import shapes

    out = []
    if on_gpu():
        for profile in PROFILES:
            for point in shapes.decode_trajectory(profile, slots=GPU_DECODE_SLOTS, points=DECODE_POINTS):
                for model, (hq, hkv, d) in HEAD_CONFIGS.items():
                    out.append(DecodeShape(f"{profile}/p{point.progress}", profile, model,
                                           [int(x) for x in point.kv_lens], hq, hkv, d, point.progress,
                                           point.iteration))
    else:
        profile = PROFILES[0]
        point = shapes.decode_trajectory(profile, slots=GPU_DECODE_SLOTS, points=(CPU_DECODE_POINT,))[0]
        lens = shapes.cpu_scale(point.kv_lens, 160, max_seqs=6)
        for model, (hq, hkv, d) in CPU_HEADS.items():
            out.append(DecodeShape(f"{profile}/p{point.progress}-cpu", profile, model, [int(x) for x in lens],
                                   hq, hkv, d, point.progress, point.iteration))
    # each point stands for an equal slice of its rollout's iterations, each profile for one rollout
    for s in out:
        s.weight = 1.0 / len(out)
    return tuple(out)


DECODE_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("ours-1split", kind="ours"),
    Provider("ours-paged16", kind="ours"),
    Provider("ours-paged256", kind="ours"),
    Provider("torch-varlen", available=_torch_varlen_available),
    Provider("flash-attn", available=flash_attn_available),
    Provider("sdpa-padded", kind="baseline"),
]


@dataclass
class DecodeInputs:
    q: object  # [B, Hq, D]
    k_cache: object  # [B, Lmax, Hkv, D]
    v_cache: object
    seqlens: object  # [B] int32 on the device
    kv_lens: list


def _cache_bytes(s: DecodeShape) -> int:
    return 2 * len(s.kv_lens) * max(s.kv_lens) * s.heads_kv * s.head_dim * 2


def _inputs(s: DecodeShape):
    def make(device, seed: int) -> DecodeInputs:
        import pytest
        import torch

        if _cache_bytes(s) > MAX_CACHE_BYTES:
            pytest.skip(f"contiguous cache would need {_cache_bytes(s) / 2**30:.1f} GiB")
        gen = torch.Generator(device=device).manual_seed(seed)
        b, lmax = len(s.kv_lens), max(s.kv_lens)
        q = torch.randn(b, s.heads_q, s.head_dim, generator=gen, device=device, dtype=dtype())
        # filled on the device: a host randn of tens of GB would dominate the suite
        kc = torch.empty(b, lmax, s.heads_kv, s.head_dim, device=device, dtype=dtype()).normal_(generator=gen)
        vc = torch.empty_like(kc).normal_(generator=gen)
        sl = torch.tensor(s.kv_lens, dtype=torch.int32, device=device)
        return DecodeInputs(q, kc, vc, sl, list(s.kv_lens))
    return make


def _bind(provider: str, s: DecodeShape):
    def bind(inp: DecodeInputs, kernels) -> Bound:
        import pytest
        import torch

        q, kc, vc, sl = inp.q, inp.k_cache, inp.v_cache, inp.seqlens
        b, lmax = len(s.kv_lens), max(s.kv_lens)
        if provider in PAGED_PROVIDERS:
            if 2 * _cache_bytes(s) > MAX_CACHE_BYTES:
                pytest.skip(f"a paged copy of the cache would need {2 * _cache_bytes(s) / 2**30:.1f} GiB in all")
            kp, vp, table = paged_cache(kc, vc, PAGED_PROVIDERS[provider], seed=1)
            decode = family_module(kernels, FAMILY).decode_attention
            call = lambda: decode(q, kp, vp, sl, block_table=table)  # noqa: E731
            extra = {"kv_layout": "paged", "page_size": PAGED_PROVIDERS[provider]}
        elif provider in ("ours", "ours-1split"):
            decode = family_module(kernels, FAMILY).decode_attention
            splits = {"num_splits": 1} if provider == "ours-1split" else {}
            call, extra = (lambda: decode(q, kc, vc, sl, **splits)), dict(splits)
        elif provider == "flash-attn":
            from flash_attn import flash_attn_with_kvcache

            q4 = q[:, None]
            call, extra = (lambda: flash_attn_with_kvcache(q4, kc, vc, cache_seqlens=sl)[:, 0]), {}
        elif provider == "torch-varlen":
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
            call, extra = (lambda: varlen_attn(q, kp, vp, cu_q, cu_k, 1, lmax, **kw)), {"kv_layout": "packed"}
        elif provider == "sdpa-padded":
            import torch.nn.functional as F

            mask = (torch.arange(lmax, device=q.device)[None, :] < sl[:, None])[:, None, None, :]
            qs = q[:, :, None]  # [B, Hq, 1, D]
            ks, vs = kc.transpose(1, 2), vc.transpose(1, 2)  # [B, Hkv, Lmax, D] views
            group = s.heads_q // s.heads_kv
            try:
                F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=group > 1)
                call = lambda: F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=group > 1)[:, :, 0]
                extra = {}
            except TypeError:  # torch < 2.5: no enable_gqa
                ke, ve = ks.repeat_interleave(group, 1), vs.repeat_interleave(group, 1)
                call = lambda: F.scaled_dot_product_attention(qs, ke, ve, attn_mask=mask)[:, :, 0]
                extra = {"kv_expanded": True}
        else:
            raise AssertionError(f"unregistered provider {provider}")

        def fwd():
            with torch.no_grad():
                return call()
        return Bound(fwd, extra)
    return bind


def paged_cache(kc, vc, page: int, seed: int = 0):
    """The contiguous cache ``[B, Lmax, Hkv, D]`` as a pool of ``page``-token pages in a shuffled
    order (as a long-running engine's allocator leaves them) and the block table ``[B, pages]``
    int32 that maps each sequence's pages back: ``decode_attention(..., block_table=table)`` on it
    gives the contiguous cache's result."""
    import torch

    b, lmax, hkv, d = kc.shape
    per_seq = -(-lmax // page)
    pad = per_seq * page - lmax
    gen = torch.Generator(device="cpu").manual_seed(seed)
    perm = torch.randperm(b * per_seq, generator=gen).to(kc.device)  # slot j of the pool holds page perm[j]
    table = torch.empty(b * per_seq, dtype=torch.int32, device=kc.device)
    table[perm] = torch.arange(b * per_seq, dtype=torch.int32, device=kc.device)

    def pool(cache):
        full = torch.nn.functional.pad(cache, (0, 0, 0, 0, 0, pad)) if pad else cache
        return full.reshape(b * per_seq, page, hkv, d)[perm].contiguous()

    return pool(kc), pool(vc), table.reshape(b, per_seq)


def _truth(s: DecodeShape):
    def truth(inp: DecodeInputs) -> dict:
        import torch

        from polytrace_kernels.attention.reference import decode_attention_reference

        seqs = checks.subset_rows(len(s.kv_lens), device=inp.q.device)
        out = {"seqs": seqs}
        for key, dt in (("want", torch.float64), ("same", inp.q.dtype)):
            rows = [decode_attention_reference(inp.q[i:i + 1], inp.k_cache[i:i + 1, :n], inp.v_cache[i:i + 1, :n],
                                               inp.seqlens[i:i + 1], compute_dtype=dt)
                    for i, n in ((int(i), s.kv_lens[int(i)]) for i in seqs)]
            out[key] = torch.cat(rows, 0)
        return out
    return truth


def _compare(provider: str):
    def compare(out, truth: dict, inp) -> list:
        return checks.verify("out", out[truth["seqs"]], truth["want"], ours=provider.startswith("ours"),
                             torch_same=truth["same"])
    return compare


def cases() -> list[BenchCase]:
    out = []
    dt = "bf16" if on_gpu() else "fp16"
    for s in decode_shapes():
        lens = s.kv_lens
        for p in DECODE_PROVIDERS:
            info = {"dtype": dt, "skew_max_over_mean": round(max(lens) / max(float(np.mean(lens)), 1.0), 2),
                    "check_subset": checks.subset_note(len(lens), what="sequences"),
                    "check_coverage": {"out": checks.rows_cover(len(lens), "sequences",
                                                                "a sequence's output, exact in fp64 over its cache")},
                    "computes": ["out", "lse"] if p.name.startswith("ours") else ["out"]}
            meta = Case(FAMILY, "decode_attention", p.name, "decode", s.shape(),
                        flops=spec.decode_attention_flops(lens, s.heads_q, s.head_dim),
                        bytes_moved=spec.decode_attention_bytes(lens, s.heads_q, s.heads_kv, s.head_dim, dtype=dt),
                        roofline="hbm", profile=s.profile, seed=0, step=0, weight=s.weight, extra=info)
            out.append(BenchCase(SUITE, meta, p, _inputs(s), _bind(p.name, s), _truth(s), _compare(p.name),
                                 label=f"decode-{p.name}-{s.id}"))
    return out
