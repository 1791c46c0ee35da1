"""The kernel families an RL step is made of, and the price of each.

Every stage is a sum of parts, one per kernel family (``FAMILIES``):

- ``gemm``: the decoder layers' linear layers (qkv, o, gate_up, down; MoE: experts and router).
- ``attention``: training attention over packed sequences (varlen forward and backward).
- ``decode``: the rollout's decode attention over the KV cache.
- ``prefill``: the rollout's prompt prefill (linear layers and attention of the prompts).
- ``logprob``: the LM head and the log-prob / entropy over the vocabulary (the logits path, or the
  fused LM-head kernel where that is what the provider measured).
- ``packing``: packing micro-batches (input ids in, per-token outputs back to the padded layout)
  and planning them (a host algorithm).
- ``optimizer``, ``comm`` (collectives), ``host`` (kernel launches, scheduler), ``offload``.

Five families are measured by the suites (``MEASURED``, the registry of ``families.py``); each
takes its time from the chosen provider's measured timings on the GPU (``timings.py``),
interpolated over the problem size, where they cover the work, else from the roofline at its
efficiency (``efficiency.py``). Every price comes with its ``source``: the result file(s) and
provider, ``roofline`` (with why, where timings exist but do not apply), or the file with
``extrapolated xF`` where the work lies more than ``EXTRAPOLATION_LIMIT`` times outside the
measured sizes (F: how far). ``speedups`` divide a family's time by a factor (what-ifs and the
Amdahl table).

Tensor parallelism (rollout TP, Megatron TP with or without sequence parallelism): a shard of a
linear layer holds 1/tp of its weights and does 1/tp of its FLOPs on the same tokens, so it is
priced as the whole layer measured at the same batch, divided by tp (a decode GEMM is
weight-read bound: the shard reads 1/tp of the bytes). Attention, decode attention and the
logits are priced at their per-GPU shapes (heads / tp, vocabulary / tp). Pipeline stages hold
layers / pp layers: the launch count carries it.

Log-prob is priced with the provider the run used: ``torch-eager`` by default (a stock verl run
writes the logits, then log-softmax and entropy in eager PyTorch, as the roofline prices it);
``--provider logprob=ours`` (or another measured provider) where the run used fused kernels.

The problem sizes are computed with the functions the suites record them with: each measured
family's ``spec.py`` functions, looked up in the registry (``families.py``: one line per family),
so a query lands on the same axis as the measurements. A family registered with its own trainer
work (``KernelFamily.trainer_work``) is priced by ``Pricer.family`` in every trainer pass, with no
method of its own here (docs/adding-a-kernel-family.md).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..errors import PolytraceError
from ..run.hardware import GPU
from ..run.models import ModelSpec
from .efficiency import DEFAULT, Efficiency
from .families import REGISTRY, KernelFamily, Work, size_fn, trainer_families
from .timings import Curve, KernelTimings

ROOFLINE = "roofline"
# A part priced by the model's own per-item host cost (the refit's expert tensors, the CPU
# optimizer's DRAM traffic), from published figures, not from a result file: a model price like the
# roofline's, never "measured"
HOST_PRICE = "host ("
FAMILIES = ("gemm", "attention", "decode", "prefill", "logprob", "packing", "optimizer", "comm", "host", "seq_host",
            "offload")
# Parts of a step that are no kernel: multi-turn tool latency, reward scoring outside the stages,
# and the fixed per-stage seconds a calibration adds. Shown in the breakdown, never sped up.
NOT_KERNELS = ("tool", "reward", "calibration")


# The measured families, one registry line each (``families.py``): their result-file keys,
# default providers and the spec functions that size their work
MEASURED = REGISTRY
MeasuredFamily = KernelFamily  # the name this module gave the entries before the registry

BF16 = 2  # bytes per element of bf16 activations, logits and KV cache


@dataclass(frozen=True)
class Linear:
    """One linear layer of a decoder layer, named as the GEMM suite names it."""

    layer: str  # qkv, o, gate_up, down, router, lm_head
    n: int  # output features
    k: int  # input features
    per_layer: int = 1  # launches per decoder layer (MoE: one per expert)
    token_share: float = 1.0  # share of the tokens each launch sees (MoE experts: active / experts)


def linear_layers(model: ModelSpec) -> list[Linear]:
    """The decoder layer's linear layers (the LM head is priced with ``logprob``). Their FLOPs per
    token add up to ``model.matmul_flops_per_token(lm_head=False)`` less the critic's value head
    and the qkv bias (under 1e-4 of it)."""
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    out = [Linear("qkv", q + 2 * kv, h), Linear("o", h, q)]
    if model.experts:
        share = model.active_experts / model.experts
        out += [Linear("gate_up", 2 * model.moe_intermediate, h, model.experts, share),
                Linear("down", h, model.moe_intermediate, model.experts, share)]
        if model.shared_experts:
            out += [Linear("gate_up", 2 * model.moe_intermediate, h, model.shared_experts),
                    Linear("down", h, model.moe_intermediate, model.shared_experts)]
        out.append(Linear("router", model.experts, h))
    else:
        out += [Linear("gate_up", 2 * model.intermediate, h), Linear("down", h, model.intermediate)]
    return out


# --- problem sizes, as the suites record them: the kernels' own spec.py functions (families.py)
def _size(family: str, kernel: str, *args, **kw):
    return size_fn(family, kernel)(*args, **kw)


# --- parsing what-ifs -----------------------------------------------------------------------
def parse_assignments(items, flag: str) -> dict[str, str]:
    """``["logprob=torch-eager", ...]`` -> ``{"logprob": "torch-eager"}``; one-line errors naming ``flag``."""
    out: dict[str, str] = {}
    for item in items or ():
        family, sep, value = str(item).partition("=")
        family, value = family.strip(), value.strip()
        if not sep or not family or not value:
            raise PolytraceError(f"{flag} {item!r}: expected FAMILY=VALUE, e.g. {flag} logprob=" +
                                 ("torch-eager" if flag == "--provider" else "1.5"))
        if family in out:
            raise PolytraceError(f"{flag} {family}: given twice")
        out[family] = value
    return out


def check_speedups(speedups: dict, flag: str = "--speedup") -> dict[str, float]:
    out = {}
    for family, value in (speedups or {}).items():
        valid = (*FAMILIES, *(f.name for f in trainer_families()))  # and the registry's new families
        if family not in valid:
            raise PolytraceError(f"{flag} {family}={value}: unknown kernel family; valid families: "
                                 f"{', '.join(valid)}")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise PolytraceError(f"{flag} {family}={value}: expected a factor above 0, e.g. 1.5") from None
        if not np.isfinite(x) or x <= 0:
            raise PolytraceError(f"{flag} {family}={value}: the factor must be a finite number above 0 "
                                 f"(2 = twice as fast, 0.5 = twice as slow)")
        out[family] = x
    return out


# Past this factor outside the measured sizes a timing is labelled extrapolated (with the factor):
# within 2x the rate of the nearest size holds on any curve the suites record (they step by 4x).
EXTRAPOLATION_LIMIT = 2.0


def extrapolation_factor(curve: Curve, sizes) -> float:
    """How far ``sizes`` (a number or an array; zeros ignored) lie outside ``curve``'s measured
    sizes: 1 inside, else the largest ratio to the nearest end."""
    s = np.asarray(sizes, dtype=np.float64)
    s = s[s > 0]
    if s.size == 0:
        return 1.0
    lo, hi = float(curve.sizes[0]), float(curve.sizes[-1])
    return float(max(1.0, lo / float(s.min()), float(s.max()) / hi))


# The GEMM suite times bf16 matmuls: an FP8 engine's or trainer's GEMMs are priced at their own
# (FP8) roofline, what-if speedups applied as to any roofline price.
FP8_UNMEASURED = "the GEMM suite times bf16"


def _roofline(why: str = "") -> str:
    """The source of a price at the roofline, with why where measurements exist but do not apply."""
    return f"{ROOFLINE} ({why})" if why else ROOFLINE


class Pricer:
    """Prices kernel work for one GPU: measured timings of the chosen provider per family where
    they cover the work, else the roofline; ``speedups`` divide a family's time.

    ``strict_model``: the GEMM family was measured, but not at ``model``'s linear shapes: an error
    naming ``--model`` (result files given explicitly) instead of the roofline with a note (the
    results found under ``results/<gpu>/``, measured for the built-in profiles' models)."""

    def __init__(self, gpu: GPU, eff: Efficiency = DEFAULT, timings: KernelTimings | None = None,
                 providers: dict[str, str] | None = None, speedups: dict[str, float] | None = None,
                 strict_model: bool = False):
        self.gpu, self.eff = gpu, eff
        self.timings = timings if timings is not None else KernelTimings.empty(gpu.slug)
        self.speedups = check_speedups(speedups or {})
        self.strict_model = strict_model
        self.used: set[tuple[str, str, str, str]] = set()  # (family, kernel, mode, provider) curves priced from
        self._memo: dict = {}
        self.chosen = {f: m.default_provider for f, m in MEASURED.items()}
        self.explicit = dict(providers or {})
        for family, provider in self.explicit.items():
            if family not in MEASURED:
                raise PolytraceError(f"--provider {family}={provider}: only measured families take a provider; "
                                     f"valid families: {', '.join(MEASURED)}")
            spec = MEASURED[family]
            have = self.timings.providers(spec.results_family, spec.kernels)
            if provider not in have:
                where = self.timings.origin or f"results/{gpu.slug}"
                listed = ", ".join(have) if have else "none"
                raise PolytraceError(f"--provider {family}={provider}: no measurements of {provider} for {family} "
                                     f"({'/'.join(spec.kernels)}) on {gpu.slug} in {where}; "
                                     f"measured providers: {listed}")
            self.chosen[family] = provider

    def with_efficiency(self, eff: Efficiency) -> Pricer:
        """This pricer at other efficiencies (an engine setting's own costs, ``engines.py``): the same
        timings, providers and speedups; the curves it prices count in the same ``used`` set (the
        memo holds GEMM curves, which do not depend on the efficiencies)."""
        if eff == self.eff:
            return self
        twin = copy.copy(self)
        twin.eff = eff
        return twin

    # ------------------------------------------------------------------------------- helpers
    def scale(self, family: str) -> float:
        return 1.0 / self.speedups.get(family, 1.0)

    def provider(self, family: str) -> str:
        return self.chosen[family]

    def _curve(self, family: str, kernel: str, mode: str, **match) -> Curve | None:
        spec = MEASURED[family]
        return self._use(self.timings.curve(spec.results_family, kernel, mode, self.chosen[family], **match))

    def _use(self, curve: Curve | None) -> Curve | None:
        if curve is not None:
            self.used.add(curve.key)
        return curve

    def _source(self, family: str, curves, what: str = "", queries=()) -> str:
        """``files: provider (what)``; ``queries`` ((curve, sizes) pairs): where any lies more than
        ``EXTRAPOLATION_LIMIT`` x outside its curve's measured sizes, ``(extrapolated xF)``."""
        files = sorted({f for c in curves for f in c.files})
        detail = f" ({what})" if what else ""
        far = max((extrapolation_factor(c, x) for c, x in queries), default=1.0)
        extra = f" (extrapolated x{far:.3g} outside the measured sizes)" if far > EXTRAPOLATION_LIMIT else ""
        return f"{', '.join(files)}: {self.chosen[family]}{detail}{extra}"

    # ------------------------------------------------------------------------------- GEMM
    def _gemm_curves(self, model: ModelSpec, layers: list[str], modes: tuple[str, ...]):
        """{(layer, mode): curve} for ``model``'s own GEMM shapes, or (None, reason)."""
        key = ("gemm-curves", model.name, tuple(layers), modes)
        if key not in self._memo:
            self._memo[key] = self._find_gemm_curves(model, layers, modes)
        curves, why = self._memo[key]
        if curves:
            self.used.update(c.key for c in curves.values() if c is not None)
        return curves, why

    def _find_gemm_curves(self, model: ModelSpec, layers: list[str], modes: tuple[str, ...]):
        kernel = MEASURED["gemm"].kernels[0]
        if not self.timings.select("gemm", kernel, modes[0], self.chosen["gemm"]):
            return None, ""
        if not self.timings.select("gemm", kernel, modes[0], self.chosen["gemm"], model=model.name):
            measured = ", ".join(self.timings.shape_values("gemm", kernel, "model")) or "unnamed shapes"
            if self.strict_model:
                raise PolytraceError(f"--model {model.name}: gemm ({self.chosen['gemm']}) was measured at the linear "
                                     f"shapes of {measured} only; pass one of those models, or results that "
                                     f"include {model.name}")
            return None, f"gemm measured for {measured} only"
        out = {}
        for layer in layers:
            for mode in modes:
                out[(layer, mode)] = self._curve("gemm", kernel, mode, model=model.name, layer=layer)
        return out, ""

    def gemm(self, model: ModelSpec, tokens: float, launches: float, layout, *,
             fwd_passes: int = 1, backward: bool = False, roofline_s: float) -> tuple[float, str]:
        """The decoder layers' linear layers over ``launches`` (micro-batch x layer) launches of
        ``tokens`` tokens each on ``layout``'s GPUs (a ``training.TrainerLayout``, unannotated:
        training.py imports this module; its ``tp`` shards each layer): ``fwd_passes`` forwards
        (2 with activation checkpointing) and, for an update, the backward's two gradient matmuls
        (the suite's ``bwd``), or only the input gradient when the weights are frozen
        (``layout.lora_rank`` > 0: half the suite's ``bwd``, whose two matmuls have equal FLOPs).
        ``layout.fp8``: Transformer Engine's FP8 GEMMs, at the roofline (``FP8_UNMEASURED``)."""
        tp, fp8, weight_grads = layout.tp, layout.fp8, layout.lora_rank == 0
        scale = self.scale("gemm")
        if fp8:
            return roofline_s * scale, _roofline(f"FP8 GEMMs; {FP8_UNMEASURED}")
        lins = linear_layers(model)
        modes = ("fwd", "bwd") if backward else ("fwd",)
        curves, why = self._gemm_curves(model, sorted({lin.layer for lin in lins}), modes)
        if curves is None:
            return roofline_s * scale, _roofline(why)
        rate = self.gpu.ceiling("bf16") * self.eff.gemm
        bwd_share = 1.0 if weight_grads else 0.5
        total, measured, unmeasured, queries = 0.0, [], [], []
        for lin in lins:
            # the whole layer at these tokens; a tensor-parallel shard does 1/tp of it
            f = 2.0 * tokens * lin.token_share * lin.n * lin.k
            cf, cb = curves[(lin.layer, "fwd")], curves.get((lin.layer, "bwd"))
            if cf is None or (backward and cb is None):
                unmeasured.append(lin.layer)  # this layer at the roofline, the others measured
                t = f * (fwd_passes + (bwd_share * 2.0 if backward else 0.0)) / rate
            else:
                measured += [cf] + ([cb] if backward else [])
                queries += [(cf, f)] + ([(cb, 2.0 * f)] if backward else [])
                t = cf.seconds(f) * fwd_passes + (bwd_share * cb.seconds(2.0 * f) if backward else 0.0)
            total += t / tp * lin.per_layer
        if not measured:
            return roofline_s * scale, _roofline("no layer of this model measured in this mode")
        src = self._source("gemm", measured, queries=queries)
        if unmeasured:
            src += f" + roofline ({', '.join(sorted(set(unmeasured)))})"
        return total * launches * scale, src

    def decode_gemm(self, model: ModelSpec, active: np.ndarray, tp: int, roofline_s: np.ndarray
                    ) -> tuple[np.ndarray, str]:
        """One decode iteration's linear layers and LM head at ``active`` running sequences
        (arrays over iterations), per GPU of a ``tp``-way engine: each layer's time measured at
        that batch, divided by tp (a shard reads 1/tp of the weights and does 1/tp of the FLOPs on
        the same batch). Measured only where the GEMM suite timed every layer at a batch at least
        that small (a smaller batch is never priced from a larger one's rate: decode GEMMs stream
        weights, and their time does not shrink with the batch), else the roofline (weights read
        at ``decode_hbm``). An FP8 engine (``model.weight_dtype``) at the roofline
        (``FP8_UNMEASURED``)."""
        scale = self.scale("gemm")
        if model.weight_dtype == "fp8":
            return roofline_s * scale, _roofline(f"FP8 weights; {FP8_UNMEASURED}")
        lins = [(lin, float(model.layers)) for lin in linear_layers(model)]
        lins.append((Linear("lm_head", model.vocab, model.hidden), 1.0))
        curves, why = self._gemm_curves(model, sorted({lin.layer for lin, _ in lins}), ("fwd",))
        if curves is None:
            return roofline_s * scale, _roofline(why)
        if any(c is None for c in curves.values()):
            missing = sorted({layer for (layer, _), c in curves.items() if c is None})
            return roofline_s * scale, _roofline(f"decode: no fwd timing of {', '.join(missing)}")
        active = np.asarray(active, dtype=np.float64)
        total = np.zeros_like(active)
        covered = np.ones(active.shape, dtype=bool)
        queries = []
        for lin, repeat in lins:
            curve = curves[(lin.layer, "fwd")]
            whole = 2.0 * active * lin.token_share * lin.n * lin.k
            covered &= whole >= curve.covers_from() * (1 - 1e-12)
            queries.append((curve, whole))
            total += curve.seconds(whole) / tp * lin.per_layer * repeat
        out = np.where(covered, total, roofline_s) * scale
        used = [(c, np.asarray(x)[covered]) for c, x in queries]
        if covered.all():
            return out, self._source("gemm", list(curves.values()), queries=used)
        if not covered.any():
            return out, _roofline("decode batches below the GEMM suite's smallest shapes")
        return out, (self._source("gemm", list(curves.values()), f"{covered.mean():.0%} of decode iterations",
                                  queries=used) + " + roofline (smaller batches)")

    # ------------------------------------------------------------------------------- attention
    def attention(self, model: ModelSpec, sum_sq_len: float, launches: float, *, tp: int = 1, fwd_passes: int = 1,
                  backward: bool = False, roofline_s: float) -> tuple[float, str]:
        """Training attention: ``launches`` (micro-batch x layer) launches over micro-batches
        whose squared sequence lengths sum to ``sum_sq_len``."""
        scale = self.scale("attention")
        cf = self._curve("attention", "varlen_attention", "fwd")
        cb = self._curve("attention", "varlen_attention", "bwd") if backward else None
        if cf is None or (backward and cb is None):
            return roofline_s * scale, self._missing("attention", "fwd" if cf is None else "bwd")
        # causal: sum(L^2) / 2 (query, key) pairs
        f = _size("attention", "varlen_attention", sum_sq_len / 2.0, max(model.heads / tp, 1.0), model.head_dim)
        t = cf.seconds(f) * fwd_passes + (cb.seconds(2.5 * f) if backward else 0.0)
        queries = [(cf, f)] + ([(cb, 2.5 * f)] if cb else [])
        return t * launches * scale, self._source("attention", [cf] + ([cb] if cb else []), queries=queries)

    def _missing(self, family: str, mode: str) -> str:
        if family in self.explicit or self.timings.providers(MEASURED[family].results_family, MEASURED[family].kernels):
            return _roofline(f"no usable {mode} timing of {self.chosen[family]}")
        return ROOFLINE

    def decode(self, model: ModelSpec, active: np.ndarray, kv_tokens: np.ndarray, tp: int,
               roofline_s: np.ndarray) -> tuple[np.ndarray, str]:
        """Decode attention of one iteration, all layers, per GPU of a ``tp``-way engine."""
        scale = self.scale("decode")
        curve = self._curve("decode", "decode_attention", "decode")
        if curve is None:
            return roofline_s * scale, self._missing("decode", "decode")
        # the KV heads a GPU reads: max(kv_heads / tp, 1) (replicated past tp = kv_heads); an MLA
        # latent as the heads of the same bytes (every GPU holds all of it)
        kv_heads_per_gpu = model.kv_bytes_per_token_per_gpu(tp) / (model.layers * 2.0 * model.head_dim * BF16)
        nbytes = _size("decode", "decode_attention", np.asarray(active, dtype=np.float64),
                       np.asarray(kv_tokens, dtype=np.float64), max(model.heads / tp, 1.0), kv_heads_per_gpu,
                       model.head_dim, dtype="bf16")
        return model.layers * curve.seconds(nbytes) * scale, self._source("decode", [curve], queries=[(curve, nbytes)])

    # ------------------------------------------------------------------------------- log-prob
    def fused_logprob(self, backward: bool) -> bool:
        """Whether the log-prob provider is priced by its fused LM-head kernel
        (``linear_token_logprobs``: it has no logits kernel timing in this mode but a fused one);
        then the LM head is part of ``logprob``, otherwise a GEMM beside the logits kernel."""
        mode = "fwd+bwd" if backward else "fwd"
        if self.timings.curve("logprob", "token_logprobs", mode, self.chosen["logprob"]) is not None:
            return False
        return self.timings.curve("logprob", "linear_token_logprobs", mode, self.chosen["logprob"]) is not None

    def logprob(self, model: ModelSpec, tokens: float, n_micro: float, *, tp: int = 1, backward: bool = False,
                roofline_s: float) -> tuple[float, str]:
        """Log-prob and entropy over the vocabulary of ``n_micro`` micro-batches of ``tokens``
        tokens: the provider's logits kernel (``token_logprobs``, verl's default path: the LM head
        writes logits, then log-probs; the LM head is priced with ``gemm``), else its fused LM-head
        kernel (``linear_token_logprobs``, LM head included), else the roofline (the logits passes
        at ``elementwise_hbm``)."""
        scale = self.scale("logprob")
        mode = "fwd+bwd" if backward else "fwd"
        vocab = model.vocab / tp
        logits = self._curve("logprob", "token_logprobs", mode)
        if logits is not None:
            size = _size("logprob", "token_logprobs", tokens, vocab, "bf16", mode)
            t = logits.seconds(size) * n_micro
            return t * scale, self._source("logprob", [logits], "token_logprobs", queries=[(logits, size)])
        fused = self._curve("logprob", "linear_token_logprobs", mode)
        if fused is not None:
            # what the suite records for the fused kernel: the bare hidden @ weight.T's FLOPs
            size = _size("logprob", "linear_token_logprobs", tokens, vocab, model.hidden, mode)
            t = fused.seconds(size) * n_micro
            return t * scale, self._source("logprob", [fused], "linear_token_logprobs, LM head included",
                                           queries=[(fused, size)])
        return roofline_s * scale, self._missing("logprob", mode)

    def lm_head(self, model: ModelSpec, tokens: float, n_micro: float, *, tp: int = 1, fwd_passes: int = 1,
                backward: bool = False, weight_grads: bool = True, roofline_s: float) -> tuple[float, str]:
        """The LM-head GEMM of the logits path (``gemm`` family, layer ``lm_head``); frozen under
        LoRA (``weight_grads=False``: the backward's input gradient only)."""
        scale = self.scale("gemm")
        curves, why = self._gemm_curves(model, ["lm_head"], ("fwd", "bwd") if backward else ("fwd",))
        if curves is None:
            return roofline_s * scale, _roofline(why)
        if any(c is None for c in curves.values()):
            return roofline_s * scale, _roofline("no LM-head GEMM timing")
        f = 2.0 * tokens * model.vocab * model.hidden  # the whole head; a vocabulary shard does 1/tp
        cf = curves[("lm_head", "fwd")]
        bwd_share = 1.0 if weight_grads else 0.5
        t = cf.seconds(f) * fwd_passes + (bwd_share * curves[("lm_head", "bwd")].seconds(2.0 * f) if backward else 0.0)
        queries = [(cf, f)] + ([(curves[("lm_head", "bwd")], 2.0 * f)] if backward else [])
        return t / tp * n_micro * scale, self._source("gemm", list(curves.values()), "LM head", queries=queries)

    # ------------------------------------------------------------------------------- packing
    def packing(self, *, tokens: float, seqs: float, max_len: float, n_micro: float, outputs: int,
                backward: bool) -> tuple[float, str]:
        """Device side of packing, per pass: each micro-batch packs its input ids and position
        ids (int64) into the packed layout and unpacks its per-token outputs (fp32 log-prob and
        entropy, or the critic's value) back to [B, S]; the backward packs their gradients."""
        scale = self.scale("packing")
        pack, unpack = size_fn("packing", "pack"), size_fn("packing", "unpack")
        packs = [(pack(tokens, seqs, (), 8), 2.0)]
        if backward:
            packs.append((pack(tokens, seqs, (), 4), float(outputs)))
        unpacks = [(unpack(tokens, seqs, max_len, (), 4), float(outputs))]
        cp = self._curve("packing", "pack", "fwd")
        cu = self._curve("packing", "unpack", "fwd")
        if cp is None or cu is None:
            total = sum(b * k for b, k in packs + unpacks)
            roof = total / (self.gpu.ceiling("hbm") * self.eff.elementwise_hbm)
            return roof * n_micro * scale, self._missing("packing", "pack" if cp is None else "unpack")
        t = sum(cp.seconds(b) * k for b, k in packs) + sum(cu.seconds(b) * k for b, k in unpacks)
        queries = [(cp, b) for b, _ in packs] + [(cu, b) for b, _ in unpacks]
        return t * n_micro * scale, self._source("packing", [cp, cu], "pack, unpack", queries=queries)

    def planning(self, sequences: float) -> tuple[float, str]:
        """Host seconds of planning one pass's micro-batches over the ranks (``plan_microbatches``
        on the step's sequences)."""
        scale = self.scale("packing")
        curve = self._curve("packing", "plan_microbatches", "plan")
        if curve is None or curve.axis != "sequences":
            return self.eff.plan_s_per_sequence * sequences * scale, ROOFLINE
        return curve.seconds(sequences) * scale, self._source("packing", [curve], "plan_microbatches",
                                                             queries=[(curve, sequences)])


    # ------------------------------------------------------------------------------- registered
    def family(self, name: str, work: Work) -> tuple[np.ndarray, str]:
        """A registered family's seconds in one trainer pass (``families.KernelFamily.trainer_work``
        gives its kernel, mode and size per micro-batch): the provider's timing at that size per
        micro-batch, else the size at the family's roofline (``hbm``: ``elementwise_hbm`` of the HBM
        bandwidth; ``bf16``: ``gemm`` of the dense bf16 peak)."""
        entry = MEASURED[name]
        kernel, mode, size = entry.trainer_work(work)
        scale = self.scale(name)
        curve = self._curve(name, kernel, mode)
        if curve is None:
            rate = (self.gpu.ceiling("bf16") * self.eff.gemm if entry.roofline == "bf16"
                    else self.gpu.ceiling("hbm") * self.eff.elementwise_hbm)
            return size / rate * work.n_micro * scale, self._missing(name, mode)
        return (curve.seconds(size) * work.n_micro * scale,
                self._source(name, [curve], kernel, queries=[(curve, size)]))


__all__ = ["EXTRAPOLATION_LIMIT", "FAMILIES", "MEASURED", "NOT_KERNELS", "ROOFLINE", "Linear", "MeasuredFamily",
           "Pricer", "check_speedups", "extrapolation_factor", "linear_layers", "parse_assignments"]
