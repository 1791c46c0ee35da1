"""Forward (log-prob, values) and update (actor, critic) time of one RL step on the trainer.

Costs are FLOPs over the achieved rate: matmuls at ``gemm`` efficiency (or a measured rate), causal
attention at ``attention`` efficiency, over every GPU of the trainer. Sequences are split over the
data-parallel ranks in contiguous chunks as verl does; the slowest rank sets the time and the
others' wait is reported as rank imbalance. Without padding removal every sequence of a micro-batch
costs as much as the configured maximum length (verl pads prompts and responses to the configured
maxima). FSDP adds a parameter all-gather per micro-batch pass and a gradient reduce-scatter;
Megatron adds tensor-parallel all-reduces and the pipeline bubble.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hardware import GPU
from ..models import ModelSpec
from .efficiency import DEFAULT, Efficiency


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
    time_s: float  # slowest rank
    compute_s: float
    comm_s: float
    flops: float
    micro_batches: int
    imbalance_gpu_s: float
    host_s: float = 0.0  # host-side seconds (kernel launches, hooks) of the slowest rank, in time_s

    def to_dict(self) -> dict:
        return {"time_s": self.time_s, "compute_s": self.compute_s, "comm_s": self.comm_s, "host_s": self.host_s,
                "flops": self.flops, "micro_batches": self.micro_batches,
                "imbalance_gpu_s": self.imbalance_gpu_s}


def _micro_batches(lens: np.ndarray, layout: TrainerLayout) -> int:
    if len(lens) == 0:
        return 0
    if layout.micro_batch_tokens:
        return int(np.ceil(lens.sum() / layout.micro_batch_tokens))
    mb = layout.micro_batch_seqs or len(lens)
    return int(np.ceil(len(lens) / mb))


def pass_cost(model: ModelSpec, gpu: GPU, seq_lens, layout: TrainerLayout, *, backward: bool,
              lm_head: bool = True, eff: Efficiency = DEFAULT, gemm_rate: float | None = None) -> PassCost:
    """One pass over the batch: forward only (``backward=False``: log-prob, values) or forward and
    backward (an update). ``gemm_rate`` (FLOP/s per GPU) replaces the roofline where measured."""
    lens = np.asarray(seq_lens, dtype=np.float64)
    dp = layout.dp
    bounds = np.linspace(0, len(lens), dp + 1).round().astype(int)
    # fwd = 1, fwd+bwd = 3, plus one recomputed forward with activation checkpointing
    mult = 1.0 if not backward else (4.0 if layout.gradient_checkpointing else 3.0)
    rate = gemm_rate or gpu.ceiling("bf16") * eff.gemm
    attn_rate = gpu.ceiling("bf16") * eff.attention
    model_shards = layout.tp * layout.pp
    weight_bytes = model.weight_bytes()
    rank_times, total_flops, comm_s, n_micro_max = [], 0.0, 0.0, 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        chunk = lens[a:b]
        if not layout.remove_padding:  # every sequence padded to the configured maximum
            chunk = np.full(len(chunk), float(layout.pad_to or chunk.max(initial=0)))
        linear_tokens = chunk.sum()
        mm = model.matmul_flops_per_token(lm_head) * linear_tokens * mult
        at = model.attn_flops_per_pair * float((chunk * (chunk + 1) / 2).sum()) * mult
        total_flops += mm + at
        compute = mm / (rate * model_shards) + at / (attn_rate * model_shards)
        if lm_head:  # log-softmax and entropy over the vocabulary: memory-bound passes over the logits
            logit_bytes = linear_tokens * model.vocab * eff.logit_bytes_per_element * (3.0 if backward else 1.0)
            compute += logit_bytes / (gpu.ceiling("hbm") * eff.elementwise_hbm * layout.tp)
        n_micro = _micro_batches(chunk, layout)
        n_micro_max = max(n_micro_max, n_micro)
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
                act = 2.0 * model.hidden * linear_tokens * 2 * (layout.tp - 1) / layout.tp
                comm += model.layers / layout.pp * act * (3 if backward else 1) / link
            if layout.pp > 1 and n_micro:
                compute *= (n_micro + layout.pp - 1) / n_micro  # pipeline bubble
            if backward and dp > 1:
                comm += 2 * weight_bytes / model_shards * (dp - 1) / dp / link
        comm_s = max(comm_s, comm)
        rank_times.append(compute + comm)
    slowest = max(rank_times) if rank_times else 0.0
    imbalance = sum(slowest - t for t in rank_times) * model_shards
    compute_s = slowest - comm_s
    host = n_micro_max * host_seconds_per_micro_batch(model, layout, backward=backward, eff=eff)
    return PassCost(slowest + host, compute_s, comm_s, total_flops, n_micro_max, imbalance, host)


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
