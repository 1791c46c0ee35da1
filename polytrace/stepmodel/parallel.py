"""Expert, context and virtual-pipeline parallelism: checks and prices.

The layouts large MoE and long-context runs state (Megatron's ``expert_model_parallel_size``,
``context_parallel_size``, ``virtual_pipeline_model_parallel_size``; vLLM's expert parallelism):

- **Expert parallelism (trainer, ``train_ep``)**: each MoE layer's experts are split over
  ``ep`` GPUs (expert tensor parallelism 1, as NeMo RL's and verl's Megatron MoE recipes set it).
  Every routed token's hidden state goes to its top-k experts and back: per MoE layer and pass
  an all-to-all dispatch and combine, ``tokens x k x hidden x 2 bytes x (ep - 1) / ep`` each way
  per GPU (its sequence-parallel share of the tokens), over the links the EP group spans: ``ep``
  consecutive GPUs (Megatron-core folds the MoE layers' own expert-tensor x expert x data
  parallel grid over the ranks apart from attention's TP x CP x DP; with expert TP 1 an EP group
  of 8 is one node; across nodes only the copies bound for another node cross the GPU's NIC,
  the rest NVLink, at once), at ``all_to_all`` efficiency, not hidden (Megatron's default dispatcher runs
  them between the attention and the experts). The experts of the
  busiest GPU get ``moe_load_imbalance`` times the mean tokens: its expert matmuls set the time.
- **Context parallelism (``train_cp``)**: each sequence is split over ``cp`` GPUs (load-balanced
  causal chunks), so each GPU computes 1/cp of its tokens and causal pairs; the ring exchanges
  K and V chunks (``(cp - 1) / cp`` of the sequence's KV per layer per GPU, forward; K, V and
  their gradients backward), overlapped with the attention blocks it feeds: what the attention
  time does not cover is exposed.
- **Virtual pipeline (``train_vpp``)**: interleaved 1F1B over ``vpp`` model chunks per stage cuts
  the pipeline bubble from ``(pp - 1) / m`` to ``(pp - 1) / (vpp m)`` of the ``m`` micro-batches.
- **Rollout expert parallelism (``rollout_ep``)**: vLLM's expert parallelism spans an engine's
  tensor-parallel GPUs: the MoE layers' all-reduce becomes a dispatch and a combine all-to-all
  of the running tokens per decode iteration.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PolytraceError
from ..run.hardware import GPU
from ..run.models import ModelSpec
from .efficiency import DEFAULT, Efficiency

BF16 = 2.0


# How ``check_layout``'s errors name each setting by default: the command line's flags.
LAYOUT_FLAGS = {"train_ep": "--train-ep", "train_cp": "--train-cp", "train_vpp": "--train-vpp",
                "rollout_ep": "--rollout-ep", "train_tp": "--train-tp", "train_pp": "--train-pp", "gpus": "--gpus",
                "strategy": "--strategy"}


def check_layout(model: ModelSpec, gpus: int, rollout_tp: int, trainer, rollout_ep: int | None = 1,
                 names: dict | None = None) -> dict:
    """The ``RunConfig`` fields of the layout (``trainer``: the RunSpec's trainer section), or a
    one-line error naming the setting: EP must divide the experts and the GPUs of a pipeline stage,
    CP the GPUs left by TP and PP; all three are Megatron's (verl's FSDP trainer has none of them).
    ``names`` maps a setting to how the error calls it (default ``LAYOUT_FLAGS``: the flags; a log's
    keys where the layout was read from one)."""
    n = {**LAYOUT_FLAGS, **(names or {})}
    strategy, train_tp, train_pp = trainer.strategy, trainer.train_tp, trainer.train_pp
    train_ep, train_cp, train_vpp, rollout_ep = (int(x or 1) for x in (trainer.train_ep, trainer.train_cp,
                                                                      trainer.train_vpp, rollout_ep))
    for name, v in (("train_ep", train_ep), ("train_cp", train_cp), ("train_vpp", train_vpp),
                    ("rollout_ep", rollout_ep)):
        if v < 1:
            raise PolytraceError(f"{n[name]} must be a positive integer, got {v}")
        if v > 1 and name.startswith("train") and strategy != "megatron":
            raise PolytraceError(f"{n[name]} {v} is Megatron's parallelism: add {n['strategy']} megatron (verl's "
                                 f"FSDP trainer has no {name[6:].upper()})")
    for name, ep in (("train_ep", train_ep), ("rollout_ep", rollout_ep)):
        if ep > 1 and not model.experts:
            raise PolytraceError(f"{n[name]} {ep}: {model.name} is a dense model, it has no experts to split")
        if ep > 1 and model.experts % ep:
            raise PolytraceError(f"{n[name]} {ep} does not divide {model.name}'s {model.experts} experts")
    if strategy == "megatron":
        stage_gpus = gpus // train_pp
        if train_ep > 1 and stage_gpus % train_ep:
            raise PolytraceError(f"{n['train_ep']} {train_ep} does not divide the {stage_gpus} GPUs of a pipeline "
                                 f"stage ({n['gpus']} {gpus} / {n['train_pp']} {train_pp})")
        if gpus % (train_tp * train_pp * train_cp):
            raise PolytraceError(f"{n['train_tp']} {train_tp} x {n['train_cp']} {train_cp} x {n['train_pp']} "
                                 f"{train_pp} does not divide {n['gpus']} {gpus}")
        if train_vpp > 1 and train_pp == 1:
            raise PolytraceError(f"{n['train_vpp']} {train_vpp} interleaves pipeline stages: it needs "
                                 f"{n['train_pp']} above 1")
        if train_vpp > 1 and model.layers % (train_pp * train_vpp):
            raise PolytraceError(f"{n['train_pp']} {train_pp} x {n['train_vpp']} {train_vpp} does not divide "
                                 f"{model.name}'s {model.layers} layers")
    if rollout_ep > 1 and rollout_ep != rollout_tp:
        raise PolytraceError(f"{n['rollout_ep']} {rollout_ep}: vLLM's expert parallelism spans an engine's "
                             f"tensor-parallel GPUs; pass {n['rollout_ep']} equal to the rollout TP ({rollout_tp}) "
                             "or 1")
    return {"train_ep": train_ep, "train_cp": train_cp, "train_vpp": train_vpp, "rollout_ep": rollout_ep}


def expert_params(model: ModelSpec) -> float:
    """Parameters of the routed experts (all MoE layers; DeepSeek-V3's three leading dense layers
    have none)."""
    return float(model.expert_tensor_count * model.hidden * model.moe_intermediate)


def shard_params(model: ModelSpec, tp: int, pp: int, ep: int = 1) -> float:
    """Parameters one Megatron GPU holds: the dense part over TP x PP, the routed experts over
    EP x PP (expert tensor parallelism 1) where EP is on, else over TP x PP like the rest."""
    experts = expert_params(model) if ep > 1 else 0.0
    return (float(model.params_total) - experts) / (tp * pp) + experts / (ep * pp)


def moe_layers(model: ModelSpec) -> int:
    return model.layers if model.experts else 0


def expert_flops_share(model: ModelSpec) -> float:
    """The routed experts' share of a token's decoder-layer matmul FLOPs (what EP moves)."""
    if not model.experts:
        return 0.0
    routed = model.layers * 2.0 * 3 * model.hidden * model.moe_intermediate * model.active_experts
    return routed / model.matmul_flops_per_token(lm_head=False)


def all_to_all_seconds(model: ModelSpec, gpu: GPU, tokens_per_gpu, ep: int, span: int, passes: float,
                       eff: Efficiency = DEFAULT):
    """Dispatch and combine of ``tokens_per_gpu`` tokens' hidden states to their top-k experts
    over ``ep`` GPUs, per MoE layer, ``passes`` times (forward 1; a recomputed forward and the
    backward's two add 2 more), plus a latency per all-to-all. The copies spread evenly over the
    group: within a node ``(ep - 1) / ep`` of them cross NVLink; a group spanning nodes
    (``span`` GPUs over ``gpus_per_node``) sends the ``(ep - gpus_per_node) / ep`` bound for other
    nodes over the GPU's own NIC and the rest over NVLink at the same time, the slower setting the
    time (EP16 over two 8-GPU nodes: half the copies through the NIC, not 15/16)."""
    tokens = np.asarray(tokens_per_gpu, dtype=np.float64)
    if ep <= 1 or not model.experts:
        return np.zeros_like(tokens)
    copies = tokens * model.active_experts * model.hidden * BF16
    node = gpu.gpus_per_node
    if span <= node:
        seconds = copies * (ep - 1) / ep / (gpu.link_gbps(span) * 1e9 * eff.all_to_all)
    else:
        local = min(node, ep)
        nic = copies * (ep - local) / ep / (gpu.link_gbps(span) * 1e9 * eff.all_to_all)
        nvlink = copies * (local - 1) / ep / (gpu.link_gbps(local) * 1e9 * eff.all_to_all)
        seconds = np.maximum(nic, nvlink)
    per_layer = 2.0 * (seconds + eff.all_to_all_latency_s)
    return moe_layers(model) * per_layer * passes


def ring_kv_seconds(model: ModelSpec, gpu: GPU, tokens_per_gpu, cp: int, tp: int, backward: bool,
                    eff: Efficiency = DEFAULT):
    """Context parallelism's ring: a GPU receives the K and V of the other ``cp - 1`` chunks of
    its sequences per layer (its own ``tokens_per_gpu`` times ``cp - 1``), bf16, KV heads split
    over tp; the backward sends K, V and their gradients (2x)."""
    tokens = np.asarray(tokens_per_gpu, dtype=np.float64)
    if cp <= 1:
        return np.zeros_like(tokens)
    kv = 2.0 * max(model.kv_heads / tp, 1.0) * model.head_dim * BF16
    per_layer = tokens * (cp - 1) * kv
    return model.layers * per_layer * (1.0 + (2.0 if backward else 0.0)) / (gpu.link_gbps(cp * tp) * 1e9 * eff.comm)


def pipeline_bubble(n_micro, pp: int, vpp: int = 1):
    """Time over the micro-batches' own time of 1F1B (interleaved over ``vpp`` chunks): the
    first stage waits ``(pp - 1) / vpp`` micro-batch times to fill and drain."""
    n_micro = np.asarray(n_micro, dtype=np.float64)
    if pp <= 1:
        return np.ones_like(n_micro)
    return np.where(n_micro > 0, (n_micro + (pp - 1) / max(1, vpp)) / np.maximum(n_micro, 1), 1.0)


# vLLM's custom all-reduce (``CustomAllreduce._SUPPORTED_WORLD_SIZES`` = 2, 4, 6, 8) runs over
# CUDA IPC between the GPUs of one host; a larger group, or one spanning hosts, calls NCCL.
CUSTOM_ALLREDUCE_MAX_GPUS = 8


def allreduce_latency_seconds(gpu: GPU, group_gpus: int, eff: Efficiency = DEFAULT) -> float:
    """Latency of one small all-reduce over ``group_gpus`` GPUs (the bandwidth term apart):
    none for one GPU, vLLM's custom all-reduce for up to 8 GPUs of one host
    (``allreduce_latency_s``), and otherwise NCCL's tree (its tuning model's lowest-latency
    choice): up the NVLink chain, across ``log2(nodes)`` network hops and back down,
    ``base + 2 ((gpus_per_node - 1) nvlink_hop + ceil(log2 nodes) net_hop)``. A TP16 engine on
    8-GPU nodes pays 25.2 us a call, 3.2x the 8 us within a node: 94 layers x 2 calls make it
    4.7 ms a decode iteration whatever the batch. Within one NVLink domain larger than a host (a
    GB200 NVL72 rack of 4-GPU trays) NCCL treats the domain as one node: a TP8 engine across two
    trays pays ``base + 2 x 7 nvlink_hop``, 15.2 us, a TP32 one 44 us."""
    if group_gpus <= 1:
        return 0.0
    if group_gpus <= min(CUSTOM_ALLREDUCE_MAX_GPUS, gpu.host_gpus):
        return eff.allreduce_latency_s
    if group_gpus <= gpu.gpus_per_node:  # NCCL within one NVLink domain
        return eff.nccl_tree_base_s + 2.0 * (group_gpus - 1) * eff.nccl_nvlink_hop_s
    nodes = -(-group_gpus // gpu.gpus_per_node)
    hops = (gpu.gpus_per_node - 1) * eff.nccl_nvlink_hop_s + math.ceil(math.log2(nodes)) * eff.nccl_net_hop_s
    return eff.nccl_tree_base_s + 2.0 * hops


def rollout_all_to_all_seconds(model: ModelSpec, gpu: GPU, tp: int, ep: int, active, eff: Efficiency = DEFAULT):
    """Decode with vLLM's expert parallelism over an engine's ``tp`` GPUs: per MoE layer a
    dispatch and a combine of the running tokens' hidden states (top-k copies), per iteration."""
    active = np.asarray(active, dtype=np.float64)
    if ep <= 1 or not model.experts:
        return np.zeros_like(active)
    return all_to_all_seconds(model, gpu, active / tp, ep, tp, 1.0, eff)


__all__ = ["all_to_all_seconds", "allreduce_latency_seconds", "check_layout", "expert_flops_share", "expert_params",
           "pipeline_bubble", "ring_kv_seconds", "rollout_all_to_all_seconds", "shard_params"]
