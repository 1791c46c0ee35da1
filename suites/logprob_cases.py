"""Cases of the log-prob suite (``suites/test_logprob.py``): token log-probs and entropies
(``kernels/logprob``) against torch and the peers, on PolyTrace shapes.

Every RL step computes the log-probs of the sampled tokens three times (old policy, reference
policy, actor update with gradients), usually with the entropy. Shapes:

- Tokens per micro-batch: the ``total_tokens`` of micro-batches of sampled steps of four built-in
  profiles, packed as a trainer packs them under a 16k-token budget (``shapes.token_counts``), each
  carrying its share of the step's tokens as ``weight``; plus one fixed ``goal`` shape at T = 16384
  (the issue's memory and speed goals; weight 0).
- Vocabularies: 152064 (Qwen2.5, config.json ``vocab_size``) and 128256 (Llama 3). LM heads for the
  fused kernel: Qwen2.5-7B (V 152064, H 3584) and Qwen2.5-32B (V 152064, H 5120).

Providers, side by side in one run (a peer that is not installed is skipped, saying why):

- ``token_logprobs`` (logits [T, V] bf16 -> fp32 log-prob and entropy): ``ours``, ``torch-eager``
  (``reference.py``: fp32 upcast, log_softmax, gather, entropy), ``torch-compile`` (the same code
  compiled per shape; CUDA only), ``flash-attn`` (``flash_attn.ops.triton.cross_entropy``) and
  ``liger`` (``liger_cross_entropy``, reduction "none"); the two peers compute no entropy
  (``extra_info['computes']``).
- ``linear_token_logprobs`` (hidden [T, H] and LM-head weight [V, H]): ``ours``, ``torch-eager``
  (bf16 matmul then the eager path above), ``torch-compile``, ``liger`` (fused linear cross
  entropy, reduction "none"; no entropy), ``verl`` (``verl.utils.kernel`` linear cross entropy,
  log-prob and entropy) and ``bare-matmul``: ``hidden @ weight.T`` alone (forward; plus its two
  gradient matmuls for fwd+bwd), the yardstick of the fused goal (time <= 1.15x).

Modes: ``fwd`` (under no_grad) and ``fwd+bwd`` (``torch.autograd.grad`` of the sum of what the
provider computes, no .grad accumulation). Our kernels are timed with ``check_tokens=False`` after
one validated call: the token range check is a host sync the peers do not make.

On CPU the suite runs one tiny, clearly labelled shape per kernel and mode, ours and the eager
logits path only (``measured_on: cpu-interpreter``): a smoke test of the code paths, never a
performance figure.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

from polytrace_kernels.logprob import spec

from . import checks, compiled
from .harness import Case, Provider, module_available, needs_cuda, on_gpu
from .logprob_ref import FLOP_CONVENTIONS, dweight_rows, fp64_logits
from .registry import BenchCase, Bound, family_module

SUITE = "logprob"
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
MODES = ("fwd", "fwd+bwd")


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
    from . import shapes

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


def dtype_name(fused: bool) -> str:
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
# what each provider's outputs hold (the peers compute less than ours: no entropy)
COMPUTES = {"ours": ("logprob", "entropy"), "torch-eager": ("logprob", "entropy"),
            "torch-compile": ("logprob", "entropy"), "verl": ("logprob", "entropy"),
            "flash-attn": ("logprob",), "liger": ("logprob",), "bare-matmul": ("logits",)}
HOST_SYNCING = {"liger"}  # liger's cross entropy reads a count back to the host: no CUDA graph
# providers whose computation *is* the 16-bit yardstick ("torch_same"): never compared with it
TORCH_SAME = {"torch-eager", "torch-compile", "bare-matmul"}


@dataclass
class LogitsInputs:
    logits: object  # [T, V] 16-bit, a leaf (requires grad in fwd+bwd)
    tokens: object  # [T] int64


@dataclass
class LinearInputs:
    hidden: object  # [T, H]
    weight: object  # [V, H]
    tokens: object
    grad_logits: object = None  # bare-matmul fwd+bwd: the upstream gradient it starts from


def _tokens(n: int, vocab: int, device):
    import torch

    gen = torch.Generator().manual_seed(TOKEN_SEED)
    # every token valid: verl's and liger's paths take no ignore mask the same way; RL masks after
    return torch.randint(0, vocab, (n,), generator=gen).to(device)


def _generator(device, seed: int):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def _logits_inputs(s: TokShape, grad: bool):
    def make(device, seed: int) -> LogitsInputs:
        import torch

        x = torch.randn(s.tokens, s.vocab, device=device, dtype=_torch_dtype(dtype_name(False)),
                        generator=_generator(device, seed)) * 2.0
        return LogitsInputs(x.requires_grad_(grad), _tokens(s.tokens, s.vocab, device))
    return make


def _linear_inputs(s: TokShape, grad: bool, bare: bool):
    def make(device, seed: int) -> LinearInputs:
        import torch

        dt, gen = _torch_dtype(dtype_name(True)), _generator(device, seed)
        h = torch.randn(s.tokens, s.hidden, device=device, dtype=dt, generator=gen)
        # 0.02: the usual LM-head init scale, logits of order 1
        w = torch.randn(s.vocab, s.hidden, device=device, dtype=dt, generator=gen) * 0.02
        g = torch.randn(s.tokens, s.vocab, device=device, dtype=dt, generator=gen) if grad and bare else None
        return LinearInputs(h.requires_grad_(grad), w.requires_grad_(grad), _tokens(s.tokens, s.vocab, device), g)
    return make


def _timed(call, leaves: tuple, mode: str, grad_outputs=None):
    """One launch of the mode: outputs under no_grad (fwd), or the gradients of the outputs' sum
    (fwd+bwd; of ``grad_outputs`` when given) with respect to ``leaves``."""
    import torch

    if mode == "fwd":
        def fwd():
            with torch.no_grad():
                return call()
        return fwd

    def fwd_bwd():
        outs = call()
        if grad_outputs is not None:
            return torch.autograd.grad(outs, leaves, grad_outputs)
        return torch.autograd.grad(sum(o.float().sum() for o in outs), leaves)
    return fwd_bwd


def _neg(loss_fn):
    """Peers return per-token cross entropy (= -log-prob); the sign flip is part of their cost."""
    return lambda: (-loss_fn(),)


def _bind_logits(provider: str, s: TokShape, mode: str):
    def bind(inp: LogitsInputs, kernels) -> Bound:
        x, tok = inp.logits, inp.tokens
        ref = family_module(None, FAMILY, "reference").token_logprobs_reference
        extra = {}
        if provider == "ours":
            lp = family_module(kernels, FAMILY)
            lp.token_logprobs(x, tok, return_entropy=True)  # validated once (tokens in range)
            call = lambda: lp.token_logprobs(x, tok, return_entropy=True, check_tokens=False)
            extra["token_check"] = "once, before timing"
        elif provider == "torch-eager":
            call = lambda: ref(x, tok, return_entropy=True)
        elif provider == "torch-compile":
            fn = compiled.guarded(compiled.compile_for_shape(ref, f"{s.id}-{mode}"))
            call = lambda: fn(x, tok, return_entropy=True)
        elif provider == "flash-attn":
            from flash_attn.ops.triton.cross_entropy import cross_entropy_loss

            call = _neg(lambda: cross_entropy_loss(x, tok)[0])
        elif provider == "liger":
            from liger_kernel.transformers.functional import liger_cross_entropy

            # liger writes the gradient into the logits during the forward (in place) when they
            # require grad: the timed rounds then run on gradient values, which costs the same
            call = _neg(lambda: liger_cross_entropy(x, tok, reduction="none"))
            extra["inplace_grad_in_forward"] = True
        else:
            raise AssertionError(f"unregistered provider {provider}")
        return Bound(_timed(call, (x,), mode), extra, graph_ok=provider not in HOST_SYNCING)
    return bind


def _verl_call():
    from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy

    params = inspect.signature(linear_cross_entropy).parameters
    if "temperature" in params:
        return lambda h, w, t: linear_cross_entropy(h, w, t, 1.0, "none")
    return lambda h, w, t: linear_cross_entropy(h, w, t, "none")


def _liger_fused():
    """liger's fused linear cross entropy with per-token losses. Versions whose signature has no
    ``reduction`` cannot give per-token values: that (and only that) is a documented skip; any
    other liger error fails the case with its message."""
    import pytest
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    if "reduction" not in inspect.signature(liger_fused_linear_cross_entropy).parameters:
        pytest.skip("liger: this version's fused linear cross entropy has no reduction='none' (per-token values)")
    return liger_fused_linear_cross_entropy


def _bind_linear(provider: str, s: TokShape, mode: str):
    def bind(inp: LinearInputs, kernels) -> Bound:
        h, w, tok = inp.hidden, inp.weight, inp.tokens
        ref = family_module(None, FAMILY, "reference").linear_token_logprobs_reference
        extra, grad_out = {}, None
        if provider == "ours":
            lp = family_module(kernels, FAMILY)
            lp.linear_token_logprobs(h, w, tok, return_entropy=True)
            call = lambda: lp.linear_token_logprobs(h, w, tok, return_entropy=True, check_tokens=False)
            extra["token_check"] = "once, before timing"
        elif provider == "torch-eager":
            call = lambda: ref(h, w, tok, return_entropy=True)
        elif provider == "torch-compile":
            fn = compiled.guarded(compiled.compile_for_shape(ref, f"{s.id}-{mode}"))
            call = lambda: fn(h, w, tok, return_entropy=True)
        elif provider == "bare-matmul":
            # fwd+bwd: the matmul and its two gradient matmuls, from a ready upstream gradient
            call = lambda: (h @ w.t(),)
            grad_out = (inp.grad_logits,) if mode != "fwd" else None
            extra["what"] = "hidden @ weight.T only"
        elif provider == "verl":
            verl = _verl_call()
            call = lambda: verl(h, w, tok)
        elif provider == "liger":
            fused = _liger_fused()
            call = _neg(lambda: fused(h, w, tok, reduction="none"))
        else:
            raise AssertionError(f"unregistered provider {provider}")
        return Bound(_timed(call, (h, w), mode, grad_out), extra, graph_ok=provider not in HOST_SYNCING)
    return bind


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ------------------------------------------------------------------------------- fp64 references


def _logits_truth(s: TokShape, provider: str, mode: str):
    computes = COMPUTES[provider]

    def truth(inp: LogitsInputs) -> dict:
        import torch

        ref = family_module(None, FAMILY, "reference").token_logprobs_reference
        rows = checks.subset_rows(s.tokens, device=inp.logits.device)
        x = inp.logits.detach()[rows]
        tok = inp.tokens[rows]
        out = {"rows": rows, "scale": x.double().abs().amax(-1) if x.numel() else 0.0}
        if mode == "fwd":
            out["want"] = ref(x.double(), tok, return_entropy=True, compute_dtype=torch.float64)
            out["same"] = ref(x, tok, return_entropy=True, compute_dtype=None)
            return out
        grads = []
        for leaf, dtype in ((x.double(), torch.float64), (x.clone(), None)):
            leaf.requires_grad_(True)
            lp, ent = ref(leaf, tok, return_entropy=True, compute_dtype=dtype)
            loss = lp.sum() + (ent.sum() if "entropy" in computes else 0.0)
            grads.append(torch.autograd.grad(loss, leaf)[0])
        out["want"], out["same"] = (grads[0],), (grads[1],)
        return out
    return truth


def _logits_compare(s: TokShape, provider: str, mode: str):
    names = COMPUTES[provider] if mode == "fwd" else ("d(logits)",)

    def compare(out, truth: dict, inp) -> list:
        rows, outs = truth["rows"], _as_tuple(out)
        results = []
        for i, name in enumerate(names):
            j = ("logprob", "entropy").index(name) if mode == "fwd" else 0
            results += checks.verify(name, outs[i][rows], truth["want"][j], ours=provider == "ours",
                                     torch_same=truth["same"][j], terms=s.vocab,
                                     scale=truth["scale"] if mode == "fwd" else 0.0, rounded=mode != "fwd",
                                     self_same=provider in TORCH_SAME, inputs_dtype=inp.logits.dtype)
        return results
    return compare


def _logits_coverage(s: TokShape, provider: str, mode: str) -> dict:
    names = COMPUTES[provider] if mode == "fwd" else ("d(logits)",)
    how = "a token's row, exact in fp64 over the whole vocabulary"
    return {name: checks.rows_cover(s.tokens, "token rows", how) for name in names}


def _linear_truth(s: TokShape, provider: str, mode: str):
    computes = COMPUTES[provider]

    def truth(inp: LinearInputs) -> dict:
        import torch

        lp_ref = family_module(None, FAMILY, "reference").token_logprobs_reference
        h, w, tok = inp.hidden.detach(), inp.weight.detach(), inp.tokens
        rows = checks.subset_rows(s.tokens, device=h.device)
        whole = rows.numel() == s.tokens
        out = {"rows": rows, "whole": whole}
        if mode == "fwd":
            logits64, out["scale"] = fp64_logits(h[rows], w)
            if computes == ("logits",):
                out["want"], out["same"] = (logits64,), ((h[rows] @ w.t()),)
                return out
            out["want"] = lp_ref(logits64, tok[rows], return_entropy=True, compute_dtype=torch.float64)
            out["same"] = lp_ref(h[rows] @ w.t(), tok[rows], return_entropy=True, compute_dtype=None)
            return out
        if computes == ("logits",):  # d(hidden) rows, and d(weight) on as many vocabulary rows
            g = inp.grad_logits
            vrows = checks.subset_rows(s.vocab, device=h.device)
            out["vrows"] = vrows
            out["want"] = (g[rows].double() @ w.double(), g[:, vrows].double().t() @ h.double())
            out["same"] = (g[rows] @ w, g[:, vrows].t() @ h)
            out["scale_dh"] = g[rows].double().abs() @ w.double().abs()
            out["scale_dw"] = g[:, vrows].double().abs().t() @ h.double().abs()
            return out
        grads = []
        for dtype in (torch.float64, None):
            hh = (h[rows].double() if dtype else h[rows].clone()).requires_grad_(True)
            ww = (w.double() if dtype else w.clone()).requires_grad_(whole)
            logits = hh @ ww.t()
            lp, ent = lp_ref(logits, tok[rows], return_entropy=True, compute_dtype=dtype)
            loss = lp.sum() + (ent.sum() if "entropy" in computes else 0.0)
            grads.append(torch.autograd.grad(loss, (hh, ww) if whole else (hh,)))
        if not whole:  # d(weight) sums over every token: sample vocabulary rows, each exact over all tokens
            vrows = checks.subset_rows(s.vocab, device=h.device)
            out["vrows"] = vrows
            grads = [(grads[0][0], dweight_rows(h, w, tok, vrows, "entropy" in computes, torch.float64)),
                     (grads[1][0], dweight_rows(h, w, tok, vrows, "entropy" in computes, None))]
        out["want"], out["same"] = grads
        return out
    return truth


def _linear_compare(s: TokShape, provider: str, mode: str):
    computes = COMPUTES[provider]

    same_is_self = provider in TORCH_SAME

    def compare(out, truth: dict, inp) -> list:
        rows, outs, ours = truth["rows"], _as_tuple(out), provider == "ours"
        kw = {"ours": ours, "self_same": same_is_self, "inputs_dtype": inp.hidden.dtype}
        if mode == "fwd":
            if computes == ("logits",):
                return checks.verify("logits", outs[0][rows], truth["want"][0], torch_same=truth["same"][0],
                                     terms=s.hidden, scale=truth["scale"][:, None], rounded=True, **kw)
            return [c for i, name in enumerate(computes)
                    for c in checks.verify(name, outs[i][rows], truth["want"][i], torch_same=truth["same"][i],
                                           terms=s.vocab, scale=truth["scale"], **kw)]
        # bare-matmul's gradients are single roundings of fp32 matmuls: held to that, not to torch
        bare = computes == ("logits",)
        results = checks.verify("d(hidden)", outs[0][rows], truth["want"][0], torch_same=truth["same"][0],
                                terms=s.vocab, rounded=bare, scale=truth.get("scale_dh", 0.0), **kw)
        vrows = truth.get("vrows")
        got = outs[1] if vrows is None else outs[1][vrows]
        results += checks.verify("d(weight)", got, truth["want"][1], torch_same=truth["same"][1], terms=s.tokens,
                                 rounded=bare, scale=truth.get("scale_dw", 0.0), **kw)
        return results
    return compare


# ----------------------------------------------------------------------------------------- cases


def _linear_check_note(s: TokShape, provider: str, mode: str) -> str:
    note = checks.subset_note(s.tokens)
    if mode != "fwd" and (s.tokens > checks.CHECK_ROWS or COMPUTES[provider] == ("logits",)):
        note += "; d(weight): " + checks.subset_note(s.vocab, what="vocabulary rows") + ", each over every token"
    return note


def _linear_coverage(s: TokShape, provider: str, mode: str) -> dict:
    tok = "a token's row, exact in fp64"
    if mode == "fwd":
        return {name: checks.rows_cover(s.tokens, "token rows", tok) for name in COMPUTES[provider]}
    out = {"d(hidden)": checks.rows_cover(s.tokens, "token rows", tok + " over the whole vocabulary")}
    if s.tokens <= checks.CHECK_ROWS and COMPUTES[provider] != ("logits",):
        out["d(weight)"] = checks.cover(s.vocab, s.vocab, "vocabulary rows", "the whole gradient in fp64")
    else:
        out["d(weight)"] = checks.rows_cover(s.vocab, "vocabulary rows",
                                             "a vocabulary row, exact in fp64 over every token")
    return out


def cases() -> list[BenchCase]:
    out = []
    for mode in MODES:
        for s in logits_shapes():
            dtype = dtype_name(False)
            for p in LOGITS_PROVIDERS:
                info = {"computes": list(COMPUTES[p.name]), "check_subset": checks.subset_note(s.tokens),
                        "check_coverage": _logits_coverage(s, p.name, mode),
                        # the floor's bytes: a fused fwd+bwd (liger computes the gradient in its forward)
                        # reads the logits once and writes the gradient once, one read less than the spec
                        "floor_bytes": spec.logits_bytes(s.tokens, s.vocab, dtype, "fwd")
                        + (float(s.tokens) * s.vocab * spec.elem_bytes(dtype) if mode != "fwd" else 0.0),
                        "eager_peak_bytes_estimate": spec.eager_logits_peak_bytes(s.tokens, s.vocab, dtype)}
                meta = Case(FAMILY, "token_logprobs", p.name, mode, s.shape(dtype),
                            flops=spec.logits_flops(s.tokens, s.vocab, mode),
                            bytes_moved=spec.logits_bytes(s.tokens, s.vocab, dtype, mode), roofline="hbm",
                            profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)
                out.append(BenchCase(SUITE, meta, p, _logits_inputs(s, mode != "fwd"), _bind_logits(p.name, s, mode),
                                     _logits_truth(s, p.name, mode), _logits_compare(s, p.name, mode),
                                     label=f"token_logprobs-{p.name}-{mode}-{s.id}",
                                     slow_setup=p.name == "torch-compile"))
    for mode in MODES:
        for s in linear_shapes():
            dtype = dtype_name(True)
            for p in LINEAR_PROVIDERS:
                info = {"computes": list(COMPUTES[p.name]), "check_subset": _linear_check_note(s, p.name, mode),
                        "check_coverage": _linear_coverage(s, p.name, mode),
                        "memory_goal_bytes": spec.fused_memory_goal_bytes(s.tokens, s.vocab, "bf16")}
                if p.name == "ours":
                    info["executed_flops"] = spec.linear_flops(s.tokens, s.vocab, s.hidden, mode)
                # the floor's bytes: hidden and weight read once (and both gradients written once): the
                # spec's bytes also count our own d(logits) chunk buffer, which a peer need not have
                e = spec.elem_bytes(dtype)
                info["floor_bytes"] = (1.0 if mode == "fwd" else 2.0) * (s.tokens + s.vocab) * s.hidden * e
                if mode != "fwd":
                    t, v, h = s.tokens, s.vocab, s.hidden
                    info["flop_conventions"] = {**FLOP_CONVENTIONS, "flops_6thv": 6.0 * t * h * v,
                                                "flops_8mhv": 8.0 * t * h * v}
                meta = Case(FAMILY, "linear_token_logprobs", p.name, mode, s.shape(dtype),
                            flops=spec.matmul_flops(s.tokens, s.vocab, s.hidden, mode),
                            bytes_moved=spec.linear_bytes(s.tokens, s.vocab, s.hidden, dtype, mode), roofline="bf16",
                            profile=s.profile, seed=s.seed, step=s.step, weight=s.weight, extra=info)
                out.append(BenchCase(SUITE, meta, p, _linear_inputs(s, mode != "fwd", p.name == "bare-matmul"),
                                     _bind_linear(p.name, s, mode), _linear_truth(s, p.name, mode),
                                     _linear_compare(s, p.name, mode),
                                     label=f"linear_token_logprobs-{p.name}-{mode}-{s.id}",
                                     slow_setup=p.name == "torch-compile"))
    return out
