"""The registry of tunable kernels (``TUNABLES``) and the shape builders that turn a profile's
sampled step into each kernel's tuning buckets and inputs. Imported by ``session.py`` (the search
session and the file it writes) and ``measure.py`` (what a worker times); it imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import PolytraceError, unknown_name

# Micro-batch token budget on a GPU (verl's ppo_max_token_len_per_gpu default is 16384) and the
# number of micro-batch shapes each bucket is scored on (low / median / high padded size).
GPU_MAX_TOKENS = 16384
SHAPES_PER_BUCKET = 3
# CPU interpreter: keep every launch to a few milliseconds of numpy work.
CPU_MAX_TOKENS = 96
CPU_MAX_SEQS = 4


@dataclass
class TuneShape:
    """One concrete input of a bucket. ``build(device)`` allocates the inputs and returns
    ``launch(config) -> output`` (config None = the kernel's built-in default)."""

    bucket: str
    label: str
    weight: float
    build: Callable[[object], Callable[[dict | None], object]]
    # fits(config, device): False drops the candidate before it compiles (a tile over the GPU's
    # shared memory); None: every candidate runs
    fits: Callable[[dict, object], bool] | None = None


@dataclass
class TuneContext:
    profile: object  # polytrace.workload.profiles.Profile
    model: object  # polytrace.run.models.ModelSpec
    seed: int
    on_gpu: bool
    seqlens: list[np.ndarray] = field(default_factory=list)  # micro-batches of sequence lengths


@dataclass(frozen=True)
class Tunable:
    name: str  # the kernel name its launcher passes to polytrace_kernels._tuning.lookup (= the file name)
    family: str
    summary: str
    module: str  # the family module holding TUNING_SPACE and tuning_bucket
    shapes: Callable[[TuneContext], list[TuneShape]]
    atol: float = 0.0  # max |candidate - default| accepted (0: bitwise equal)
    space_attr: str = "TUNING_SPACE"
    fixed_space: dict | None = None  # a space given here instead of the module's (tests, narrowed searches)

    def space(self) -> dict:
        import importlib

        if self.fixed_space is not None:
            return dict(self.fixed_space)
        try:
            module = importlib.import_module(self.module)
        except ImportError as exc:
            raise PolytraceError(f"{self.name}: cannot import {self.module}: {exc}") from None
        space = getattr(module, self.space_attr, None)
        if not isinstance(space, dict) or not space:
            raise PolytraceError(f"{self.name}: {self.module} has no {self.space_attr} dict to search")
        return space


# ------------------------------------------------------------------------------------------------
# shapes from the profile


def _microbatches(ctx: TuneContext) -> list[np.ndarray]:
    """The sampled step's sequences in arrival order, cut into micro-batches of at most
    ``max_tokens`` tokens (the dynamic-batching rule verl uses); on CPU the lengths are shrunk
    (ratios kept) to interpreter size."""
    batch = ctx.profile.sample(step=0, seed=ctx.seed)
    lens = np.asarray(batch.seq_lens, dtype=np.int64)
    rng = np.random.default_rng(ctx.seed)
    lens = lens[rng.permutation(lens.size)]
    if ctx.on_gpu:
        max_tokens, max_seqs = GPU_MAX_TOKENS, None
        lens = np.minimum(lens, max_tokens)
    else:
        scale = (CPU_MAX_TOKENS / CPU_MAX_SEQS) / max(1.0, float(np.percentile(lens, 90)))
        lens = np.clip(np.round(lens * scale).astype(np.int64), 1, CPU_MAX_TOKENS)
        max_tokens, max_seqs = CPU_MAX_TOKENS, CPU_MAX_SEQS
    out, cur, total = [], [], 0
    for n in lens.tolist():
        if cur and (total + n > max_tokens or (max_seqs and len(cur) >= max_seqs)):
            out.append(np.array(cur, dtype=np.int64))
            cur, total = [], 0
        cur.append(n)
        total += n
    if cur:
        out.append(np.array(cur, dtype=np.int64))
    return out


def _representatives(mbs: list[np.ndarray], size: Callable[[np.ndarray], float]) -> list[tuple[np.ndarray, float]]:
    """Up to SHAPES_PER_BUCKET micro-batches at the 10th, 50th and 90th percentile of ``size``,
    each weighted by the share of micro-batches nearest to it."""
    if not mbs:
        return []
    order = sorted(range(len(mbs)), key=lambda i: size(mbs[i]))
    picks = sorted({order[min(len(order) - 1, int(q * len(order)))] for q in (0.1, 0.5, 0.9)},
                   key=lambda i: size(mbs[i]))[:SHAPES_PER_BUCKET]
    ranks = {i: r for r, i in enumerate(order)}
    counts = [0] * len(picks)
    for i in order:
        nearest = min(range(len(picks)), key=lambda k: abs(ranks[picks[k]] - ranks[i]))
        counts[nearest] += 1
    return [(mbs[p], c / len(mbs)) for p, c in zip(picks, counts)]


def _randn(shape, device, dtype, seed: int, scale: float = 1.0):
    """Seeded normal numbers made on the device itself (a 1.5 GB LM-head weight is not built on
    the host)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def _randint(high: int, n: int, device, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, high, (n,), generator=gen, device=device)


def _pack_shapes(ctx: TuneContext) -> list[TuneShape]:
    """pack(padded [B, S, F], lengths): the hidden states (F = hidden, bf16) and per-token scalars
    (F = 1, fp32: log-probs, advantages) of each micro-batch."""
    import torch

    from polytrace_kernels.packing import api

    widths = [(ctx.model.hidden, torch.bfloat16), (1, torch.float32)] if ctx.on_gpu else \
        [(48, torch.float16), (1, torch.float32)]
    shapes = []
    for features, dtype in widths:
        bucket = api.tuning_bucket(features, dtype)
        reps = _representatives(ctx.seqlens, lambda mb: mb.size * int(mb.max()))
        for lens, weight in reps:
            def build(device, lens=lens, features=features, dtype=dtype):
                S = int(lens.max())
                padded = _randn((lens.size, S, features), device, dtype, 0)
                lengths = torch.as_tensor(lens, device=device)
                total, mx = int(lens.sum()), S
                return lambda config: api.pack(padded, lengths, total_tokens=total, max_seqlen=mx, config=config)[0]

            shapes.append(TuneShape(bucket, f"B={lens.size},S={int(lens.max())},F={features}", weight, build))
    return shapes


def _attention_shapes(ctx: TuneContext) -> list[TuneShape]:
    """varlen_attention forward over a packed micro-batch: heads of the profile's model (one
    tensor-parallel rank of 8 on a GPU: verl's common TP for 32B), causal."""
    import torch

    from polytrace_kernels.attention import api

    m = ctx.model
    if ctx.on_gpu:
        hkv, d, dtype = max(1, m.kv_heads // 8), m.head_dim, torch.bfloat16
        hq = hkv * max(1, m.heads // m.kv_heads)
    else:
        hq, hkv, d, dtype = 2, 1, 16, torch.float16
    bucket = api.tuning_bucket(d, dtype, True, hq // hkv)
    shapes = []
    for lens, weight in _representatives(ctx.seqlens, lambda mb: float((mb.astype(np.float64) ** 2).sum())):
        def build(device, lens=lens):
            total = int(lens.sum())
            q = _randn((total, hq, d), device, dtype, 0)
            k = _randn((total, hkv, d), device, dtype, 1)
            v = _randn((total, hkv, d), device, dtype, 2)
            cu = torch.zeros(lens.size + 1, dtype=torch.int32)
            cu[1:] = torch.cumsum(torch.as_tensor(lens), 0)
            cu = cu.to(device)
            mx = int(lens.max())
            # no explicit plan: the work list depends on BLOCK_M, and the API caches one per config
            return lambda config: api.varlen_attention(q, k, v, cu, cu, mx, mx, causal=True, config=config,
                                                       check_inputs=False)

        shapes.append(TuneShape(bucket, f"B={lens.size},T={int(lens.sum())},Hq={hq},D={d}", weight, build,
                                lambda cfg, device: api.config_fits(cfg, d, dtype, api.device_capability(device))))
    return shapes


def _logprob_shapes(ctx: TuneContext) -> list[TuneShape]:
    """token_logprobs forward (polytrace_kernels.logprob.api): logits [N, V] of a micro-batch's tokens and
    their labels; the bucket is (dtype, vocabulary), never N."""
    import torch

    from polytrace_kernels.logprob import api

    vocab, dtype = (ctx.model.vocab, torch.bfloat16) if ctx.on_gpu else (96, torch.float32)
    bucket = api.tuning_bucket(vocab, dtype)
    shapes = []
    for lens, weight in _representatives(ctx.seqlens, lambda mb: float(mb.sum())):
        n = int(lens.sum())

        def build(device, n=n):
            logits = _randn((n, vocab), device, dtype, 0)
            tokens = _randint(vocab, n, device, 1)
            return lambda config: api.token_logprobs(logits, tokens, config=config, check_tokens=False)

        shapes.append(TuneShape(bucket, f"N={n},V={vocab}", weight, build))
    return shapes


def _linear_logprob_shapes(ctx: TuneContext) -> list[TuneShape]:
    """linear_token_logprobs forward (the fused LM head): hidden [N, H] and weight [V, H] of the
    profile's model; the bucket is (dtype, vocabulary, hidden size), never N. The interpreter runs
    fp32 (its bf16 tl.dot is wrong in triton 3.9)."""
    import torch

    from polytrace_kernels.logprob import api

    if ctx.on_gpu:
        vocab, hidden, dtype = ctx.model.vocab, ctx.model.hidden, torch.bfloat16
    else:
        vocab, hidden, dtype = 96, 32, torch.float32
    bucket = api.linear_tuning_bucket(vocab, hidden, dtype)
    shapes = []
    for lens, weight in _representatives(ctx.seqlens, lambda mb: float(mb.sum())):
        n = int(lens.sum())

        def build(device, n=n):
            w = _randn((vocab, hidden), device, dtype, 3, scale=hidden**-0.5)
            h = _randn((n, hidden), device, dtype, 0)
            tokens = _randint(vocab, n, device, 1)
            return lambda config: api.linear_token_logprobs(h, w, tokens, config=config, check_tokens=False)

        shapes.append(TuneShape(bucket, f"N={n},V={vocab},H={hidden}", weight, build))
    return shapes


TUNABLES: dict[str, Tunable] = {t.name: t for t in (
    # atol: a different block size changes the reduction order; fp32 accumulation keeps log-probs
    # (magnitude ~ln V ~ 12) within ~1e-4, so 1e-3 (1e-2 with the matmul) still catches a broken config.
    Tunable("token_logprobs", "logprob", "fused log-softmax + gather forward over [tokens, vocab] logits",
            "polytrace_kernels.logprob.api", _logprob_shapes, atol=1e-3),
    Tunable("linear_token_logprobs", "logprob", "fused LM-head matmul + log-softmax forward (no logits)",
            "polytrace_kernels.logprob.api", _linear_logprob_shapes, atol=1e-2, space_attr="LINEAR_TUNING_SPACE"),
    Tunable("pack", "packing", "right-padded [B, S, F] -> packed [T, F]", "polytrace_kernels.packing.api",
            _pack_shapes),
    Tunable("varlen_attention_fwd", "attention", "packed variable-length causal attention, forward",
            "polytrace_kernels.attention.api", _attention_shapes, atol=2e-2),
)}


def tunable_names() -> list[str]:
    return list(TUNABLES)


def get_tunable(name: str) -> Tunable:
    if name not in TUNABLES:
        raise unknown_name("tunable kernel", name, TUNABLES)
    return TUNABLES[name]
