"""Forward (log-prob, values) and update (actor, critic) time of one RL step on the trainer.

Device time is a sum of kernel families (``pricing.py``): the decoder's linear layers, causal
attention, the LM head with the log-prob and entropy over the vocabulary, and packing; each from
measured timings where a ``Pricer`` has them, else FLOPs or bytes over the roofline at its
efficiency (linear layers at ``gemm``, attention at ``attention``, the logits passes at
``elementwise_hbm``). Sequences are split over the
data-parallel ranks in contiguous chunks as verl does; the slowest rank sets the time and the
others' wait is reported as rank imbalance. Without padding removal every sequence of a micro-batch
costs as much as the configured maximum length (verl pads prompts and responses to the configured
maxima). FSDP adds a parameter all-gather per micro-batch pass and a gradient reduce-scatter;
Megatron adds tensor-parallel all-reduces and the pipeline bubble.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hardware import GPU
from ..models import ModelSpec
from .efficiency import DEFAULT, Efficiency
from .pricing import Pricer


@dataclass
class TrainerLayout:
    n_gpus: int
    strategy: str = "fsdp"  # "fsdp" or "megatron"
    tp: int = 1
    pp: int = 1
    micro_batch_seqs: int | None = None  # sequences per micro-batch per GPU (fixed-size batching)
    micro_batch_tokens: int | None = None  # token budget per micro-batch per GPU (dynamic batching)
    remove_padding: bool = True
    pad_to: int | None = None  # padded sequence length when remove_padding is False
    gradient_checkpointing: bool = False

    @property
    def dp(self) -> int:
        return max(1, self.n_gpus // max(1, self.tp * self.pp))


@dataclass
class PassCost:
    time_s: float  # slowest rank, host included
    compute_s: float  # device seconds of the slowest rank (= sum of ``kernels``)
    comm_s: float
    flops: float
    micro_batches: int
    imbalance_gpu_s: float
    host_s: float = 0.0  # host-side seconds (kernel launches, hooks) of the slowest rank, in time_s
    kernels: dict[str, float] = field(default_factory=dict)  # device seconds by kernel family (pricing.py)
    sources: dict[str, str] = field(default_factory=dict)  # family -> result file and provider, or "roofline"
    plan_s: float = 0.0  # host seconds planning the pass's micro-batches (packing family), in time_s
    plan_source: str = "roofline"

    def to_dict(self) -> dict:
        return {"time_s": self.time_s, "compute_s": self.compute_s, "comm_s": self.comm_s, "host_s": self.host_s,
                "plan_s": self.plan_s, "flops": self.flops, "micro_batches": self.micro_batches,
                "imbalance_gpu_s": self.imbalance_gpu_s, "kernels_s": dict(self.kernels)}


def _micro_batches(lens: np.ndarray, layout: TrainerLayout) -> int:
    if len(lens) == 0:
        return 0
    if layout.micro_batch_tokens:
        return int(np.ceil(lens.sum() / layout.micro_batch_tokens))
    mb = layout.micro_batch_seqs or len(lens)
    return int(np.ceil(len(lens) / mb))


def pass_cost(model: ModelSpec, gpu: GPU, seq_lens, layout: TrainerLayout, *, backward: bool,
              lm_head: bool = True, eff: Efficiency = DEFAULT, pricer: Pricer | None = None) -> PassCost:
    """One pass over the batch: forward only (``backward=False``: log-prob, values) or forward and
    backward (an update). Each rank's device time is a sum of kernel families (linear layers,
    attention, LM head and log-prob, packing), each priced by ``pricer`` from measured timings
    where it has them, else at the roofline (the default)."""
    pricer = pricer or Pricer(gpu, eff)
    lens = np.asarray(seq_lens, dtype=np.float64)
    dp = layout.dp
    bounds = np.linspace(0, len(lens), dp + 1).round().astype(int)
    # fwd = 1, fwd+bwd = 3, plus one recomputed forward with activation checkpointing
    mult = 1.0 if not backward else (4.0 if layout.gradient_checkpointing else 3.0)
    # attention's backward recomputes QK^T: five matmuls against the forward's two, 2.5x its FLOPs
    attn_mult = 1.0 if not backward else (2.0 if layout.gradient_checkpointing else 1.0) + 2.5
    fwd_passes = 2 if backward and layout.gradient_checkpointing else 1
    rate = gpu.ceiling("bf16") * eff.gemm
    attn_rate = gpu.ceiling("bf16") * eff.attention
    model_shards = layout.tp * layout.pp
    layers = model.layers / layout.pp
    weight_bytes = model.weight_bytes()
    head_flops = 2.0 * model.lm_head_params if lm_head else 0.0  # per token
    body_flops = model.matmul_flops_per_token(lm_head) - head_flops
    fused = lm_head and pricer.fused_logprob(backward)  # the LM head inside the log-prob kernel
    ranks = []  # (device seconds by family, sources, comm seconds) per data-parallel rank
    total_flops, n_micro_max = 0.0, 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        chunk = lens[a:b]
        if not layout.remove_padding:  # every sequence padded to the configured maximum
            chunk = np.full(len(chunk), float(layout.pad_to or chunk.max(initial=0)))
        tokens = float(chunk.sum())
        pairs = float((chunk * (chunk + 1) / 2).sum())
        total_flops += (model.matmul_flops_per_token(lm_head) * tokens * mult
                        + model.attn_flops_per_pair * pairs * attn_mult)
        n_micro = _micro_batches(chunk, layout)
        n_micro_max = max(n_micro_max, n_micro)
        fam: dict[str, float] = {}
        src: dict[str, str] = {}
        if tokens > 0:
            per_mb = tokens / n_micro
            launches = n_micro * layers
            fam["gemm"], src["gemm"] = pricer.gemm(
                model, per_mb, launches, tp=layout.tp, fwd_passes=fwd_passes, backward=backward,
                roofline_s=body_flops * tokens * mult / (rate * model_shards))
            fam["attention"], src["attention"] = pricer.attention(
                model, float((chunk * chunk).sum()) / n_micro, launches, tp=layout.tp, fwd_passes=fwd_passes,
                backward=backward,
                roofline_s=model.attn_flops_per_pair * pairs * attn_mult / (attn_rate * model_shards))
            if lm_head:  # log-softmax and entropy over the vocabulary: memory-bound passes over the logits
                logit_bytes = tokens * model.vocab * eff.logit_bytes_per_element * (3.0 if backward else 1.0)
                fam["logprob"], src["logprob"] = pricer.logprob(
                    model, per_mb, n_micro, tp=layout.tp, backward=backward,
                    roofline_s=logit_bytes / (gpu.ceiling("hbm") * eff.elementwise_hbm * layout.tp))
                if not fused:
                    head, head_src = pricer.lm_head(model, per_mb, n_micro, tp=layout.tp, fwd_passes=fwd_passes,
                                                    backward=backward,
                                                    roofline_s=head_flops * tokens * mult / (rate * model_shards))
                    fam["gemm"] += head
                    if head_src != src["gemm"]:
                        src["gemm"] = f"{src['gemm']} + {head_src}"
            if layout.remove_padding:
                fam["packing"], src["packing"] = pricer.packing(
                    tokens=per_mb, seqs=len(chunk) / n_micro, max_len=float(chunk.max()), n_micro=n_micro,
                    outputs=2 if lm_head else 1, backward=backward)
        comm = 0.0
        link = gpu.interconnect_gbps * 1e9 * eff.comm
        if layout.strategy == "fsdp" and layout.n_gpus > 1:
            # per micro-batch: the forward all-gathers the parameters; the backward gathers them
            # again (activation recomputation reuses that gather) and reduce-scatters gradients
            # in fp32 (verl's FSDP mixed precision), twice the bytes of a bf16 gather
            gathers = n_micro * (1 + (3 if backward else 0))
            comm = gathers * weight_bytes * (layout.n_gpus - 1) / layout.n_gpus / link
        elif layout.strategy == "megatron":
            if layout.tp > 1:
                act = 2.0 * model.hidden * tokens * 2 * (layout.tp - 1) / layout.tp
                comm += model.layers / layout.pp * act * (3 if backward else 1) / link
            if layout.pp > 1 and n_micro:
                bubble = (n_micro + layout.pp - 1) / n_micro  # pipeline bubble
                fam = {k: v * bubble for k, v in fam.items()}
            if backward and dp > 1:
                comm += 2 * weight_bytes / model_shards * (dp - 1) / dp / link
        ranks.append((fam, src, comm * pricer.scale("comm")))
    rank_times = [sum(f.values()) + c for f, _, c in ranks]
    slowest_i = int(np.argmax(rank_times)) if rank_times else 0
    slowest = rank_times[slowest_i] if rank_times else 0.0
    comm_s = max((c for _, _, c in ranks), default=0.0)
    imbalance = sum(slowest - t for t in rank_times) * model_shards
    compute_s = slowest - comm_s
    kernels, sources = (dict(ranks[slowest_i][0]), dict(ranks[slowest_i][1])) if ranks else ({}, {})
    device = sum(kernels.values())
    if device > 0:
        # the pass's collectives take as long as the longest any rank waits for (they synchronise
        # the ranks); the slowest rank's kernels fill the rest of its time
        kernels = {k: v * compute_s / device for k, v in kernels.items()}
    host = n_micro_max * host_seconds_per_micro_batch(model, layout, backward=backward, eff=eff) * pricer.scale("host")
    plan, plan_src = (pricer.planning(len(lens)) if layout.micro_batch_tokens and len(lens) else (0.0, "roofline"))
    return PassCost(slowest + host + plan, compute_s, comm_s, total_flops, n_micro_max, imbalance, host, kernels,
                    sources, plan, plan_src)


def host_seconds_per_micro_batch(model: ModelSpec, layout: TrainerLayout, *, backward: bool,
                                 eff: Efficiency = DEFAULT) -> float:
    """Host-side seconds of one micro-batch in eager PyTorch: every kernel of every layer of the
    forward is launched from Python (activation checkpointing runs the forward again); the
    backward launches about twice as many kernels but from autograd's C++ engine, at a fraction
    of the host cost; plus the head, log-softmax, entropy and loss kernels."""
    fwd = model.layers / layout.pp * eff.train_kernels_per_layer
    passes = 1.0
    if backward:
        passes += 2.0 * eff.backward_launch_share + (1.0 if layout.gradient_checkpointing else 0.0)
    return float((fwd * passes + eff.train_kernels_per_micro_batch) * eff.launch_s_per_kernel)


def optimizer_seconds(model: ModelSpec, gpu: GPU, n_gpus: int, steps: int) -> float:
    """AdamW over the local shard: fp32 master weights, grads and two moments read and written
    (~32 bytes per parameter), ``steps`` times (one per mini-batch)."""
    return steps * 32.0 * model.params_total / max(1, n_gpus) / gpu.ceiling("hbm")


def offload_seconds(model: ModelSpec, n_gpus: int, eff: Efficiency = DEFAULT) -> float:
    """Loading offloaded parameters back to the GPUs (FSDP param offload of the reference)."""
    return model.weight_bytes() / max(1, n_gpus) / (eff.pcie_gbps * 1e9)
