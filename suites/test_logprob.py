"""Token log-probs and entropies (kernels/logprob) against torch and the peers, on PolyTrace shapes.

Every RL step computes the log-probs of the sampled tokens three times (old policy, reference
policy, actor update with gradients), usually with the entropy. Shapes:

- Tokens per micro-batch: the ``total_tokens`` of micro-batches of sampled steps of four built-in
  profiles, packed as a trainer packs them under a 16k-token budget
  (``suites.shapes.token_counts``), each carrying its share of the step's tokens as ``weight``; plus
  one fixed ``goal`` shape at T = 16384 (the issue's memory and speed goals; weight 0).
- Vocabularies: 152064 (Qwen2.5, config.json ``vocab_size``) and 128256 (Llama 3). LM heads for the
  fused kernel: Qwen2.5-7B (V 152064, H 3584) and Qwen2.5-32B (V 152064, H 5120).

Providers, side by side in one run (a peer that is not installed is skipped, saying why):

- ``token_logprobs`` (logits [T, V] bf16 -> fp32 log-prob and entropy): ``ours``, ``torch-eager``
  (``reference.py``: fp32 upcast, log_softmax, gather, entropy), ``torch-compile`` (the same code
  under ``torch.compile``; CUDA only), ``flash-attn`` (``flash_attn.ops.triton.cross_entropy``) and
  ``liger`` (``liger_cross_entropy``, reduction "none"); the two peers compute no entropy
  (``extra_info['computes_entropy']``).
- ``linear_token_logprobs`` (hidden [T, H] and LM-head weight [V, H]): ``ours``, ``torch-eager``
  (bf16 matmul then the eager path above), ``torch-compile``, ``liger`` (fused linear cross
  entropy, reduction "none"; no entropy), ``verl`` (``verl.utils.kernel`` linear cross entropy,
  log-prob and entropy) and ``bare-matmul``: ``hidden @ weight.T`` alone (forward; plus its two
  gradient matmuls for fwd+bwd), the yardstick of the fused goal (time <= 1.15x).

Modes: ``fwd`` (under no_grad) and ``fwd+bwd`` (``torch.autograd.grad`` of log-prob + entropy sum,
no .grad accumulation). extra_info: bytes moved and GB/s and % of HBM (logits kernels), TFLOP/s and
% of dense bf16 (fused: the useful matmul FLOPs ``2TVH`` per matmul, the same for every provider;
ours' executed FLOPs with the backward's recompute are ``executed_flops``), peak memory.

Our kernels are timed with ``check_tokens=False`` after one validated call: the token range check
is a host sync the peers do not make (an out-of-range token then yields NaN, never a wrong number).

On CPU the suite runs one tiny, clearly labelled shape per kernel and mode, ours and the eager
logits path only (``measured_on: cpu-interpreter``): a smoke test of the code paths, never a
performance figure.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import pytest

from polytrace_kernels.logprob import spec
from suites import harness
from suites.harness import Case, Provider, module_available, needs_cuda, on_gpu

FAMILY = "logprob"
PROFILES = ("dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b")
# Vocabulary sizes (config.json vocab_size): Qwen2.5 7B-72B and Llama 3 8B/70B
VOCABS = {"qwen2.5": 152064, "llama-3": 128256}
# LM heads (vocab_size, hidden_size) from config.json: Qwen2.5-7B and Qwen2.5-32B
LM_HEADS = {"qwen2.5-7b": (152064, 3584), "qwen2.5-32b": (152064, 5120)}
GPU_MAX_TOKENS = 16384  # per-GPU micro-batch token budget (verl's ppo_max_token_len_per_gpu)
GPU_BATCHES_PER_PROFILE = 1  # representative micro-batches per profile
GOAL_TOKENS = 16384  # the goal shape: T = 16k, V = 152k
CPU_MAX_TOKENS = 48  # interpreter: ~0.5 s per call at V 1031
CPU_VOCAB, CPU_HIDDEN = 1031, 64  # awkward on purpose: V not a multiple of any block
TOKEN_SEED = 0


# ---------------------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class TokShape:
    label: str
    profile: str
    tokens: int
    weight: float
    model: str
    vocab: int
    hidden: int = 0
    seed: int | None = 0
    step: int | None = 0

    @property
    def id(self) -> str:
        return f"{self.label}-{self.model}-T{self.tokens}"

    def shape(self, dtype: str) -> dict:
        out = {"T": self.tokens, "V": self.vocab}
        if self.hidden:
            out["H"] = self.hidden
        out.update({"dtype": dtype, "model": self.model, "mb": self.label})
        return out


@functools.cache
def _token_counts() -> tuple:
    """(label, profile, tokens, weight, seed, step) per representative micro-batch."""
    from suites import shapes

    if on_gpu():
        mbs = shapes.token_counts(PROFILES, max_tokens=GPU_MAX_TOKENS, per_profile=GPU_BATCHES_PER_PROFILE)
        return tuple((m.label, m.profile, m.total_tokens, m.weight, m.seed, m.step) for m in mbs)
    mb = shapes.microbatches(PROFILES[0], max_tokens=GPU_MAX_TOKENS, max_batches=1)[0]
    tokens = int(shapes.cpu_scale(mb.seqlens, CPU_MAX_TOKENS).sum())
    return ((mb.label + "-cpu", mb.profile, tokens, mb.weight, mb.seed, mb.step),)


@functools.cache
def logits_shapes() -> tuple[TokShape, ...]:
    if not on_gpu():
        return tuple(TokShape(lb, p, t, w, "cpu-tiny", CPU_VOCAB, 0, sd, st) for lb, p, t, w, sd, st in _token_counts())
    out = [TokShape(lb, p, t, w, "qwen2.5", VOCABS["qwen2.5"], 0, sd, st) for lb, p, t, w, sd, st in _token_counts()]
    lb, p, t, w, sd, st = _token_counts()[0]
    out.append(TokShape(lb, p, t, w, "llama-3", VOCABS["llama-3"], 0, sd, st))
    out.append(TokShape("goal", "", GOAL_TOKENS, 0.0, "qwen2.5", VOCABS["qwen2.5"], 0, None, None))
    return tuple(out)


@functools.cache
def linear_shapes() -> tuple[TokShape, ...]:
    if not on_gpu():
        return tuple(TokShape(lb, p, t, w, "cpu-tiny", CPU_VOCAB, CPU_HIDDEN, sd, st)
                     for lb, p, t, w, sd, st in _token_counts())
    out = []
    for lb, p, t, w, sd, st in _token_counts():
        for model, (v, h) in LM_HEADS.items():
            out.append(TokShape(lb, p, t, w, model, v, h, sd, st))
    v, h = LM_HEADS["qwen2.5-7b"]
    out.append(TokShape("goal", "", GOAL_TOKENS, 0.0, "qwen2.5-7b", v, h, None, None))
    return tuple(out)


def _dtype_name(fused: bool) -> str:
    # bf16 on a GPU; the interpreter's tl.dot is wrong on bf16 (triton 3.9), so fused runs fp16 there
    return "bf16" if on_gpu() or not fused else "fp16"


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


# ------------------------------------------------------------------------------------- providers


def _cuda_and(module: str):
    return lambda: needs_cuda() or module_available(module)


def _cpu_smoke_only() -> str | None:
    return None if on_gpu() else "CPU run: only our kernels and the eager logits path are exercised"


def _compile_available() -> str | None:
    return needs_cuda()  # compiling on CPU takes minutes and times nothing useful


LOGITS_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("torch-eager", kind="baseline"),
    Provider("torch-compile", available=_compile_available, kind="baseline"),
    Provider("flash-attn", available=_cuda_and("flash_attn")),
    Provider("liger", available=_cuda_and("liger_kernel")),
]
LINEAR_PROVIDERS = [
    Provider("ours", kind="ours"),
    Provider("torch-eager", available=_cpu_smoke_only, kind="baseline"),
    Provider("torch-compile", available=_compile_available, kind="baseline"),
    Provider("liger", available=_cuda_and("liger_kernel")),
    Provider("verl", available=_cuda_and("verl")),
    Provider("bare-matmul", available=_cpu_smoke_only, kind="baseline"),
]


@dataclass
class Prepared:
    """A provider bound to one shape: ``run()`` returns the outputs whose sum is differentiated
    (log-probs, and entropies when computed) from the leaf tensors ``inputs``."""

    run: object
    inputs: tuple
    extra: dict = field(default_factory=dict)
    grad_outputs: tuple | None = None  # upstream gradients (default: the outputs' sum)


def _tokens(n: int, vocab: int):
    import torch

    gen = torch.Generator().manual_seed(TOKEN_SEED)
    # every token valid: verl's and liger's paths take no ignore mask the same way; RL masks after
    return torch.randint(0, vocab, (n,), generator=gen).to(harness.device())


def _logits(s: TokShape, requires_grad: bool):
    import torch

    torch.manual_seed(0)
    x = torch.randn(s.tokens, s.vocab, device=harness.device(), dtype=_torch_dtype(_dtype_name(False))) * 2.0
    return x.requires_grad_(requires_grad)


def _lm_head(s: TokShape, requires_grad: bool):
    import torch

    torch.manual_seed(0)
    dt = _torch_dtype(_dtype_name(True))
    h = torch.randn(s.tokens, s.hidden, device=harness.device(), dtype=dt).requires_grad_(requires_grad)
    # 0.02: the usual LM-head init scale, logits of order 1
    w = (torch.randn(s.vocab, s.hidden, device=harness.device(), dtype=dt) * 0.02).requires_grad_(requires_grad)
    return h, w


@functools.cache
def _compiled(fn):
    import torch

    return torch.compile(fn)


def _neg(loss_fn):
    """Peers return per-token cross entropy (= -log-prob); the sign flip is part of their cost."""
    return lambda: (-loss_fn(),)


def prepare_logits(provider: str, s: TokShape, requires_grad: bool) -> Prepared:
    from polytrace_kernels.logprob import token_logprobs, token_logprobs_reference

    x = _logits(s, requires_grad)
    tok = _tokens(s.tokens, s.vocab)
    if provider == "ours":
        token_logprobs(x, tok, return_entropy=True)  # validated once (tokens in range)
        return Prepared(lambda: token_logprobs(x, tok, return_entropy=True, check_tokens=False), (x,),
                        {"computes_entropy": True, "token_check": "once, before timing"})
    if provider == "torch-eager":
        return Prepared(lambda: token_logprobs_reference(x, tok, return_entropy=True), (x,),
                        {"computes_entropy": True})
    if provider == "torch-compile":
        fn = _compiled(token_logprobs_reference)
        return Prepared(lambda: fn(x, tok, return_entropy=True), (x,), {"computes_entropy": True})
    if provider == "flash-attn":
        from flash_attn.ops.triton.cross_entropy import cross_entropy_loss

        return Prepared(_neg(lambda: cross_entropy_loss(x, tok)[0]), (x,), {"computes_entropy": False})
    if provider == "liger":
        from liger_kernel.transformers.functional import liger_cross_entropy

        # liger writes the gradient into the logits during the forward (in place) when they
        # require grad: the timed rounds then run on gradient values, which costs the same
        return Prepared(_neg(lambda: liger_cross_entropy(x, tok, reduction="none")), (x,),
                        {"computes_entropy": False, "inplace_grad_in_forward": True})
    raise AssertionError(f"unregistered provider {provider}")


def _verl_call():
    from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy

    params = inspect.signature(linear_cross_entropy).parameters
    if "temperature" in params:
        return lambda h, w, t: linear_cross_entropy(h, w, t, 1.0, "none")
    return lambda h, w, t: linear_cross_entropy(h, w, t, "none")


def prepare_linear(provider: str, s: TokShape, requires_grad: bool) -> Prepared:
    import torch

    from polytrace_kernels.logprob import linear_token_logprobs, linear_token_logprobs_reference

    h, w = _lm_head(s, requires_grad)
    tok = _tokens(s.tokens, s.vocab)
    if provider == "ours":
        linear_token_logprobs(h, w, tok, return_entropy=True)
        return Prepared(lambda: linear_token_logprobs(h, w, tok, return_entropy=True, check_tokens=False), (h, w),
                        {"computes_entropy": True, "token_check": "once, before timing"})
    if provider == "torch-eager":
        return Prepared(lambda: linear_token_logprobs_reference(h, w, tok, return_entropy=True), (h, w),
                        {"computes_entropy": True})
    if provider == "torch-compile":
        fn = _compiled(linear_token_logprobs_reference)
        return Prepared(lambda: fn(h, w, tok, return_entropy=True), (h, w), {"computes_entropy": True})
    if provider == "bare-matmul":
        # fwd+bwd: the matmul and its two gradient matmuls, from a ready upstream gradient
        grad_out = (torch.randn(s.tokens, s.vocab, device=h.device, dtype=h.dtype),) if requires_grad else None
        return Prepared(lambda: (h @ w.t(),), (h, w), {"computes_entropy": False, "what": "hidden @ weight.T only"},
                        grad_out)
    if provider == "verl":
        call = _verl_call()
        return Prepared(lambda: call(h, w, tok), (h, w), {"computes_entropy": True})
    if provider == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        fn = lambda: liger_fused_linear_cross_entropy(h, w, tok, reduction="none")
        try:
            with torch.no_grad():
                fn()
        except Exception as exc:  # noqa: BLE001 - a peer's version without reduction="none"
            pytest.skip(f"liger: fused linear cross entropy rejected reduction='none': {exc}")
        return Prepared(_neg(fn), (h, w), {"computes_entropy": False})
    raise AssertionError(f"unregistered provider {provider}")


# ----------------------------------------------------------------------------------------- cases


def _logits_case(s: TokShape, provider: str, mode: str, extra: dict) -> Case:
    dtype = _dtype_name(False)
    info = dict(extra)
    info["eager_peak_bytes_estimate"] = spec.eager_logits_peak_bytes(s.tokens, s.vocab, dtype)
    return Case(FAMILY, "token_logprobs", provider, mode, s.shape(dtype),
                flops=spec.logits_flops(s.tokens, s.vocab, mode),
                bytes_moved=spec.logits_bytes(s.tokens, s.vocab, dtype, mode),
                roofline="hbm", profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)


def _linear_case(s: TokShape, provider: str, mode: str, extra: dict) -> Case:
    dtype = _dtype_name(True)
    info = dict(extra)
    info["memory_goal_bytes"] = spec.fused_memory_goal_bytes(s.tokens, s.vocab, "bf16")
    if provider == "ours":
        info["executed_flops"] = spec.linear_flops(s.tokens, s.vocab, s.hidden, mode)
    return Case(FAMILY, "linear_token_logprobs", provider, mode, s.shape(dtype),
                flops=spec.matmul_flops(s.tokens, s.vocab, s.hidden, mode),
                bytes_moved=spec.linear_bytes(s.tokens, s.vocab, s.hidden, dtype, mode),
                roofline="bf16", profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)


def _timed(benchmark, prepared: Prepared, case: Case, mode: str):
    import torch

    if mode == "fwd":
        with torch.no_grad():
            return harness.run(benchmark, prepared.run, case)

    def fwd_bwd():
        outs = prepared.run()
        if prepared.grad_outputs is not None:
            return torch.autograd.grad(outs, prepared.inputs, prepared.grad_outputs)
        loss = sum(o.float().sum() for o in outs)
        return torch.autograd.grad(loss, prepared.inputs)

    return harness.run(benchmark, fwd_bwd, case)


def _params(shapes, providers):
    return [pytest.param(p, s, id=f"{p.name}-{s.id}") for s in shapes for p in providers]


# ----------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("provider,shape", _params(logits_shapes(), LOGITS_PROVIDERS))
def test_token_logprobs(benchmark, provider, shape, mode):
    harness.skip_unavailable(provider)
    import torch

    prepared = prepare_logits(provider.name, shape, requires_grad=mode != "fwd")
    out = _timed(benchmark, prepared, _logits_case(shape, provider.name, mode, prepared.extra), mode)
    assert all(torch.isfinite(o.float()).all() for o in out)


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("provider,shape", _params(linear_shapes(), LINEAR_PROVIDERS))
def test_linear_token_logprobs(benchmark, provider, shape, mode):
    harness.skip_unavailable(provider)
    import torch

    prepared = prepare_linear(provider.name, shape, requires_grad=mode != "fwd")
    out = _timed(benchmark, prepared, _linear_case(shape, provider.name, mode, prepared.extra), mode)
    assert all(torch.isfinite(o.float()).all() for o in out)


def test_goal_conventions():
    """What the goals are measured against (not timed): the fused kernel's FLOPs are those of the
    bare matmul, and its memory goal is 1/8 of the eager logits + fp32 copy + log-softmax."""
    t, v, h = GOAL_TOKENS, VOCABS["qwen2.5"], LM_HEADS["qwen2.5-7b"][1]
    assert spec.matmul_flops(t, v, h, "fwd") == 2.0 * t * v * h
    assert spec.fused_memory_goal_bytes(t, v) == t * v * (2 + 4 + 4) / 8
