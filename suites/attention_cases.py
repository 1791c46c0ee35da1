"""Cases of the attention suite's varlen part (``suites/test_attention.py``; decode lives in
``decode_cases.py``): attention over packed variable-length sequences on PolyTrace shapes.

Shapes: micro-batches of sampled steps of four built-in profiles (dapo-math-32b: long tail to 32k;
deepcoder-14b: many responses near the 16k cap; video-vl-7b: bimodal prompts; search-r1-7b:
multi-turn), planned as a trainer packs them (``shapes.microbatches``), with the attention heads of
Qwen2.5-7B (28 q / 4 kv, D 128) and Qwen2.5-32B (40 / 8, D 128), plus a long-tail scheduling shape.

Providers (modes ``fwd``; ``bwd``: the forward runs once outside the timing, each round computes
dq, dk, dv from a fixed upstream gradient):

- ``ours``: polytrace_kernels.attention, longest-first work list (the default).
- ``ours-naive-order``: the same kernel, tiles in sequence order with heads outermost (the launch
  order of a conventional (blocks, batch, heads) grid): the skew-aware scheduling's effect alone.
- ``torch-varlen``: ``torch.nn.attention.varlen.varlen_attn`` (flash-attention 2 inside; CUDA).
- ``flash-attn``: ``flash_attn_varlen_func`` when installed.
- ``flex``: FlexAttention with a document mask, compiled per shape (``compiled.py``). Block-mask
  creation is timed apart (``block_mask_s``); ``flex+mask`` times mask creation plus attention.
- ``sdpa-padded``: ``scaled_dot_product_attention`` on right-padded [B, H, Lmax, D]: the cost of not
  packing (pad/unpad copies not timed).

Metadata is the same for all: cu_seqlens on the device and max_seqlen on the host, built once per
batch outside the timing. Our work list is built once per cu_seqlens tensor and reused by every
layer (and the backward), like the peers' host-side max_seqlen; its build time is ``plan_build_s``.

On CPU (Triton interpreter) one tiny, clearly labelled batch per mode, fp16 (bf16 ``tl.dot`` is
wrong in the interpreter): a smoke test of the code paths, never a performance figure.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from dataclasses import dataclass

import numpy as np

from polytrace_kernels.attention import spec

from . import checks, compiled, harness
from .attention_ref import attention_rows, sample_sequences, to_packed
from .harness import Case, Provider, module_available, needs_cuda, on_gpu
from .registry import BenchCase, Bound, family_module

SUITE = "attention"
FAMILY = "attention"
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
PADDED_LIMIT_BYTES = 8 << 30  # skip padded SDPA when one padded tensor would exceed this
FULL_CHECK_TOKENS = 4096  # up to this many tokens the whole output and every gradient is checked
LONG_TAIL_STEPS = (0, 100, 200, 300, 400, 500)  # sampled steps searched for the longest sequence
# FLOP conventions beside ours (kernels/attention/spec.py): the same as flash-attention's
# benchmarks/benchmark_flash_attention.py and tritonbench's, so TFLOP/s compare directly
FLOP_CONVENTIONS = {"polytrace": "fwd 4*D*Lq*Lk per head, halved when causal; bwd 2.5x fwd (5 matmuls)",
                    "flash-attn": "the same (benchmark_flash_attention.py: 4*B*L^2*H*D, /2 causal; bwd 2.5x)",
                    "floor": "the roofline floor counts 4 of the backward's 5 matmuls (floor_flops)"}


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
    from . import shapes

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


def long_tail_batch(profile: str, seed: int = 0) -> tuple[list[int], float, int]:
    """The skew case for the scheduling comparison: the longest sequence of a few sampled steps
    (the profile's drift makes late steps longer) packed with randomly drawn others of the same
    step, up to the longest + GPU_MAX_TOKENS tokens (a packer filling the budget around one long
    response). Returns (lengths, token share of the step, step)."""
    from . import shapes

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


def dtype():
    import torch

    return torch.bfloat16 if on_gpu() else torch.float16  # bf16 tl.dot is wrong in the interpreter


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


def flash_attn_available() -> str | None:
    return needs_cuda() or module_available("flash_attn")


VARLEN_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("ours-naive-order", kind="ours"),
    Provider("torch-varlen", available=_torch_varlen_available),
    Provider("flash-attn", available=flash_attn_available),
    Provider("flex", available=_flex_available, kind="baseline"),
    Provider("flex+mask", available=_flex_available, kind="baseline"),
    Provider("sdpa-padded", kind="baseline"),
]
BWD_PROVIDERS = [p for p in VARLEN_PROVIDERS if p.name != "flex+mask"]


@dataclass
class VarlenInputs:
    q: object  # [T, Hq, D] leaves (require grad in bwd)
    k: object
    v: object
    cu: object  # [B+1] int32 on the device
    seqlens: list
    dout: object = None  # [T, Hq, D] upstream gradient (bwd)


def _inputs(s: VarlenShape, grad: bool):
    def make(device, seed: int) -> VarlenInputs:
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)  # on the device: a host randn of GBs would dominate
        total = sum(s.seqlens)

        def rand(heads):
            return torch.randn(total, heads, s.head_dim, generator=gen, device=device, dtype=dtype())

        q, k, v = (rand(h).requires_grad_(grad) for h in (s.heads_q, s.heads_kv, s.heads_kv))
        cu = torch.zeros(len(s.seqlens) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(s.seqlens), 0)
        return VarlenInputs(q, k, v, cu.to(device), list(s.seqlens), rand(s.heads_q) if grad else None)
    return make


def _timed_once(fn) -> float:
    harness.sync()
    t0 = time.perf_counter()
    fn()
    harness.sync()
    return time.perf_counter() - t0


def _sm_count() -> int:
    if on_gpu():
        import torch

        return torch.cuda.get_device_properties(0).multi_processor_count
    return EST_SMS


def _call_ours(inp: VarlenInputs, s: VarlenShape, schedule: str, kernels):
    api = family_module(kernels, FAMILY, "api")
    q, k, v, cu, mx = inp.q, inp.k, inp.v, inp.cu, max(s.seqlens)
    block_m = api.default_fwd_config(s.head_dim, q.dtype)["BLOCK_M"]
    build = functools.partial(api.varlen_plan, cu, cu, q.shape[0], k.shape[0], block_m=block_m, causal=True,
                              schedule=schedule, max_seqlen_q=mx)
    build()  # first call out of the measurement
    plan_s = _timed_once(build)
    # Tail-effect model (spec.schedule_makespan): one resident forward program per SM at the GPU
    # tiles (186-250 registers x 256 threads, sm_90a): an estimate, labelled as such.
    sms = _sm_count()
    est = spec.schedule_makespan(s.seqlens, s.heads_q, api.default_fwd_config(s.head_dim, on_cuda=True)["BLOCK_M"],
                                 schedule=schedule, n_slots=sms)
    call = lambda: api.varlen_attention(q, k, v, cu, cu, mx, mx, causal=True, schedule=schedule)
    return call, (q, k, v), {"schedule": schedule, "plan_build_s": plan_s,
                             "est_makespan_over_balanced": round(est, 4), "est_sms": sms}


def _call_torch_varlen(inp: VarlenInputs, s: VarlenShape):
    from torch.nn.attention.varlen import varlen_attn

    q, k, v, cu, mx = inp.q, inp.k, inp.v, inp.cu, max(s.seqlens)
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
        kk = k.detach().repeat_interleave(group, 1).requires_grad_(k.requires_grad)
        vv = v.detach().repeat_interleave(group, 1).requires_grad_(v.requires_grad)
        extra["kv_expanded"] = True
    return lambda: varlen_attn(q, kk, vv, cu, cu, mx, mx, **kw), (q, kk, vv), extra


def _call_flex(inp: VarlenInputs, s: VarlenShape, mode: str, include_mask: bool):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = inp.q, inp.k, inp.v
    dev, total = q.device, q.shape[0]
    doc = torch.repeat_interleave(torch.arange(len(s.seqlens), device=dev), torch.tensor(s.seqlens, device=dev))

    def document_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    make_mask = lambda: create_block_mask(document_causal, None, None, total, total, device=dev)
    block_mask = make_mask()
    mask_s = _timed_once(make_mask)
    flex = compiled.guarded(compiled.compile_for_shape(flex_attention, f"{s.id}-{mode}"))
    qf, kf, vf = (t.transpose(0, 1)[None] for t in (q, k, v))  # [1, H, T, D] views of the leaves
    gqa = s.heads_q != s.heads_kv
    if include_mask:
        call = lambda: flex(qf, kf, vf, block_mask=make_mask(), enable_gqa=gqa)
    else:
        call = lambda: flex(qf, kf, vf, block_mask=block_mask, enable_gqa=gqa)
    return call, (q, k, v), {"block_mask_s": mask_s, "mask_in_timing": include_mask}


def _padded_bytes(s: VarlenShape) -> int:
    return len(s.seqlens) * max(s.seqlens) * s.heads_q * s.head_dim * 2


def _pad(t, seqlens, heads):
    b, lmax = len(seqlens), max(seqlens)
    out = t.new_zeros(b, lmax, heads, t.shape[-1])
    start = 0
    for i, n in enumerate(seqlens):
        out[i, :n] = t[start:start + n]
        start += n
    return out.transpose(1, 2).contiguous()  # [B, H, Lmax, D]


def _call_sdpa_padded(inp: VarlenInputs, s: VarlenShape):
    import pytest
    import torch.nn.functional as F

    if _padded_bytes(s) > PADDED_LIMIT_BYTES:
        pytest.skip(f"sdpa-padded: one padded tensor would need {_padded_bytes(s) / 2**30:.1f} GiB")
    group = s.heads_q // s.heads_kv
    grad = inp.q.requires_grad
    qp = _pad(inp.q.detach(), s.seqlens, s.heads_q).requires_grad_(grad)
    # K/V repeated per query head outside the timing: SDPA's fused backends need equal heads
    kp = _pad(inp.k.detach().repeat_interleave(group, 1), s.seqlens, s.heads_q).requires_grad_(grad)
    vp = _pad(inp.v.detach().repeat_interleave(group, 1), s.seqlens, s.heads_q).requires_grad_(grad)
    # right padding + causal: valid rows never see padded keys, so no extra mask is needed
    return (lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=True), (qp, kp, vp),
            {"padded_tokens": len(s.seqlens) * max(s.seqlens), "kv_expanded": True})


def _bind(provider: str, s: VarlenShape, mode: str):
    def bind(inp: VarlenInputs, kernels) -> Bound:
        import torch

        if provider in ("ours", "ours-naive-order"):
            call, leaves, extra = _call_ours(inp, s, "longest_first" if provider == "ours" else "naive", kernels)
        elif provider == "torch-varlen":
            call, leaves, extra = _call_torch_varlen(inp, s)
        elif provider == "flash-attn":
            from flash_attn import flash_attn_varlen_func

            q, k, v, cu, mx = inp.q, inp.k, inp.v, inp.cu, max(s.seqlens)
            call, leaves, extra = (lambda: flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True)), (q, k, v), {}
        elif provider in ("flex", "flex+mask"):
            call, leaves, extra = _call_flex(inp, s, mode, provider == "flex+mask")
        elif provider == "sdpa-padded":
            call, leaves, extra = _call_sdpa_padded(inp, s)
        else:
            raise AssertionError(f"unregistered provider {provider}")
        if mode == "fwd":
            def fwd():
                with torch.no_grad():
                    return call()
            return Bound(fwd, extra)
        out = call()  # the forward once, outside the timing; each round runs the backward
        dout = _as_layout(inp.dout, out, s)
        # no CUDA graph: autograd runs each backward op on its forward's stream, and the forward ran
        # outside any capture, so a graph of the backward alone would not hold its kernels
        return Bound(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True), extra, graph_ok=False)
    return bind


def _as_layout(dout, out, s: VarlenShape):
    """The packed upstream gradient in the provider's output layout."""
    if out.dim() == 3:
        return dout
    if out.shape[0] == 1:  # flex: [1, H, T, D]
        return dout.transpose(0, 1)[None]
    return _pad(dout, s.seqlens, s.heads_q)  # sdpa-padded: [B, H, Lmax, D]


# ------------------------------------------------------------------------------- checks and cases


def _truth(s: VarlenShape, mode: str):
    def truth(inp: VarlenInputs) -> dict:
        total = sum(s.seqlens)
        rows = None if total <= FULL_CHECK_TOKENS else checks.subset_rows(total, device=inp.q.device)
        seqs = _kv_sequences(s) if rows is not None and mode == "bwd" else None
        return attention_rows(inp.q.detach(), inp.k.detach(), inp.v.detach(), s.seqlens, rows,
                              inp.dout if mode == "bwd" else None, seqs)
    return truth


def _kv_sequences(s: VarlenShape) -> list[int]:
    """The whole sequences whose dK/dV are checked past FULL_CHECK_TOKENS tokens."""
    return sample_sequences(s.seqlens, FULL_CHECK_TOKENS)


def _compare(s: VarlenShape, provider: str, mode: str):
    ours = provider.startswith("ours")

    def compare(out, truth: dict, inp) -> list:
        rows = truth["rows"]
        outs = (out,) if mode == "fwd" else tuple(out)
        names = ("out",) if mode == "fwd" else ("dq", "dk", "dv")
        results = []
        for i, name in enumerate(names):
            kv = name in ("dk", "dv")
            grad = outs[i]
            if kv and provider == "sdpa-padded" and s.heads_q != s.heads_kv:
                # its K/V were repeated per query head (SDPA's fused backends need equal heads): the
                # gradient of a KV head is the sum over the query heads that shared it
                b, _, lmax, d = grad.shape
                grad = grad.view(b, s.heads_kv, s.heads_q // s.heads_kv, lmax, d).sum(2)
            got = to_packed(grad, s.seqlens, s.heads_kv if kv else s.heads_q)
            if rows is not None:
                got = got[truth["kv_index"]] if kv else got[rows]
            if kv and "kv_scale" in truth:  # sampled key rows: one rounding of an fp32 sum over the queries
                results += checks.verify(name, got, truth["want"][name], ours=ours, rounded=True,
                                         scale=truth["kv_scale"][name], terms=max(s.seqlens) * s.heads_q)
            else:
                results += checks.verify(name, got, truth["want"][name], ours=ours, torch_same=truth["same"][name])
        return results
    return compare


def _check_note(s: VarlenShape, mode: str) -> str:
    total = sum(s.seqlens)
    if total <= FULL_CHECK_TOKENS:
        return f"all {total} rows in fp64"
    note = checks.subset_note(total, what="query rows")
    if mode == "bwd":
        seqs = _kv_sequences(s)
        note += (f"; dk, dv: {len(seqs)} of {len(s.seqlens)} whole sequences "
                 f"({sum(s.seqlens[i] for i in seqs)} of {total} tokens) in fp64" if seqs else
                 "; dk, dv: " + checks.subset_note(total, what="key rows") + ", each over all its queries")
    return note


def _coverage(s: VarlenShape, mode: str) -> dict:
    total = sum(s.seqlens)
    if total <= FULL_CHECK_TOKENS:
        whole = checks.cover(total, total, "rows", "the whole batch in fp64")
        return {n: dict(whole) for n in (("out",) if mode == "fwd" else ("dq", "dk", "dv"))}
    rows = checks.rows_cover(total, "query rows", "a query row, exact in fp64 against its own sequence")
    if mode == "fwd":
        return {"out": rows}
    seqs = _kv_sequences(s)
    if seqs:
        kv = checks.cover(sum(s.seqlens[i] for i in seqs), total, "key rows",
                          f"{len(seqs)} of {len(s.seqlens)} whole sequences, exact in fp64")
    else:  # every sequence longer than FULL_CHECK_TOKENS
        kv = checks.rows_cover(total, "key rows", "a key row, exact in fp64 over every query of its sequence")
    return {"dq": rows, "dk": kv, "dv": dict(kv)}


def cases() -> list[BenchCase]:
    out = []
    for mode, providers in (("fwd", VARLEN_PROVIDERS), ("bwd", BWD_PROVIDERS)):
        dt = "bf16" if on_gpu() else "fp16"
        for s in varlen_shapes():
            lens = s.seqlens
            flops = spec.varlen_attention_flops(lens, s.heads_q, s.head_dim, causal=True, mode=mode)
            nbytes = spec.varlen_attention_bytes(sum(lens), sum(lens), s.heads_q, s.heads_kv, s.head_dim, dtype=dt,
                                                 mode=mode)
            for p in providers:
                info = {"dtype": dt, "skew_max_over_mean": round(max(lens) / (sum(lens) / len(lens)), 2),
                        "sum_sq_tokens": int(sum(x * x for x in lens)), "check_subset": _check_note(s, mode),
                        "check_coverage": _coverage(s, mode),
                        "flop_conventions": FLOP_CONVENTIONS,
                        # the floor counts the 4 matmuls a backward cannot avoid (dV, dP, dQ, dK), not the
                        # conventional 5 (with QK^T recomputed): a kernel storing P would not recompute it
                        "floor_flops": flops * (4.0 / 5.0 if mode == "bwd" else 1.0),
                        # and reads Q, K, V, dO, writes dQ, dK, dV (O and the LSE are a design choice)
                        "floor_bytes": nbytes - ((2 * s.head_dim + 4) * sum(lens) * s.heads_q  # O (16-bit), LSE
                                                 if mode == "bwd" else 0.0),
                        "computes": ["out", "lse"] if p.name.startswith("ours") or p.name in ("flash-attn",
                                                                                              "torch-varlen")
                        else ["out"]}
                meta = Case(FAMILY, "varlen_attention", p.name, mode, s.shape(), flops=flops, bytes_moved=nbytes,
                            roofline="bf16", profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)
                out.append(BenchCase(SUITE, meta, p, _inputs(s, mode == "bwd"), _bind(p.name, s, mode),
                                     _truth(s, mode), _compare(s, p.name, mode),
                                     label=f"varlen-{p.name}-{mode}-{s.id}",
                                     rotate_inputs=not p.name.startswith("flex"), finish=_totals,
                                     slow_setup=p.name.startswith("flex")))
    return out


def _totals(info: dict) -> None:
    """Totals with the per-batch setup (plan or block mask) added, beside the per-call median."""
    median = info.get("median_s")
    if not median:
        return
    for key in ("plan_build_s", "block_mask_s"):
        if key in info and not info.get("mask_in_timing"):
            info[f"total_with_{key[:-2]}_s"] = median + info[key]
