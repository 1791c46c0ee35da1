"""The colocated refit: the trainer's updated weights into the inference engine on the same GPUs,
once a step, priced from the bytes and the links they cross.

Both frameworks the project reads hand every GPU's engine full bf16 tensors, one after another:
NeMo RL's Megatron worker exports the Hugging Face weights through Megatron-Bridge
(``export_hf_weights``: "PP/TP/EP gathers to materialize full unsharded tensors" on every rank,
``nemo_rl/models/policy/workers/megatron_policy_worker.py``), copies them into a CUDA-IPC staging
buffer and the colocated vLLM worker loads its tensor-parallel shard of each
(``stream_weights_via_ipc_zmq_impl``, ``nemo_rl/models/policy/utils.py``; NVIDIA-NeMo/RL at
7ea279ab); verl's FSDP worker gathers each parameter's full tensor from its FSDP shards and the
engine loads it the same way. What each GPU pays, whatever the GPU count (the bytes a GPU
receives are the model's, less the share it already holds):

- ``pipeline``: Megatron's broadcast of every stage's weights to the other ``pp - 1`` stages, at
  the GPU's TP / EP coordinates (its own share of each stage's layers), over the links the
  pipeline group spans: the stages sit on different nodes once the trainer spans nodes, and a
  broadcast moves the bytes once over each GPU's own link (``GPU.link_gbps``);
- ``gather``: the all-gathers within a stage (the dense weights over TP, the routed experts over
  EP; FSDP: everything over the GPUs), ring collectives at ``GPU.collective_gbps`` of the group;
- ``stage``: every full tensor copied into the hand-off buffer and the engine copying its
  ``1 / rollout_tp`` shard into place (HBM, read and write);
- ``tensors``: the host work of handing the routed experts over one tensor at a time
  (``ModelSpec.expert_tensor_count`` x ``Efficiency.refit_s_per_expert_tensor``, 0.525 ms each,
  the median of five published refits from three sources: ``REFIT_EXPERT_TENSOR_MEASUREMENTS``):
  DeepSeek-V3's 44,544 expert tensors take ~23 s whatever their bytes, where its bytes take
  ~8.5 s on 256 H100s. Under LoRA only the adapters move: none.

Collectives run at ``Efficiency.comm`` of the link, copies at ``elementwise_hbm`` of HBM. Not
priced here: the engines' sleep and wake (``stages.offload_parts``) and the host work of a dense
model's few hundred tensors (Qwen2.5-7B: 339; verl syncs its 15 GB in 0.12 s, bytes and all).
"""

from __future__ import annotations

from ..run.hardware import GPU
from ..run.models import ModelSpec
from ..run.spec import Trainer
from .efficiency import DEFAULT, Efficiency
from .parallel import BF16, expert_params

DEFAULT_TRAINER = Trainer()  # the RunSpec's defaults: verl's FSDP trainer, full fine-tuning


def colocated_refit_seconds(model: ModelSpec, gpu: GPU, n_gpus: int, rollout_tp: int,
                            trainer: Trainer = DEFAULT_TRAINER, *, eff: Efficiency = DEFAULT) -> dict:
    """Seconds of one colocated refit by part (``pipeline``, ``gather``, ``stage``, ``tensors``), their
    ``total`` and the ``bytes`` of the full bf16 model every GPU ends up holding. ``trainer``: its
    backend (``strategy``), Megatron layout (``train_tp`` / ``train_pp`` / ``train_ep``) and
    ``lora_rank`` are priced (default FSDP, no LoRA). Under LoRA only the adapters move (bf16),
    sharded like the dense weights."""
    from .training import synced_weight_bytes

    strategy, lora_rank = trainer.strategy, trainer.lora_rank
    train_tp, train_pp, train_ep = trainer.train_tp, trainer.train_pp, trainer.train_ep
    total = synced_weight_bytes(model, lora_rank)
    experts = BF16 * expert_params(model) if strategy == "megatron" and train_ep > 1 and not lora_rank else 0.0
    dense = total - experts
    if strategy == "megatron":
        tp, pp, ep = max(1, train_tp), max(1, train_pp), max(1, train_ep)
        own_stage = dense / tp + experts / ep  # of every stage's layers, what this GPU's coordinates hold
        pipeline = own_stage * (pp - 1) / pp / (gpu.link_gbps(n_gpus) * 1e9 * eff.comm) if pp > 1 else 0.0
        gather = 0.0
        if tp > 1:
            gather += dense * (tp - 1) / tp / (gpu.collective_gbps(tp) * 1e9 * eff.comm)
        if ep > 1:
            gather += experts * (ep - 1) / ep / (gpu.collective_gbps(ep) * 1e9 * eff.comm)
    else:  # FSDP: each tensor all-gathered over every GPU
        pipeline = 0.0
        gather = total * (n_gpus - 1) / n_gpus / (gpu.collective_gbps(n_gpus) * 1e9 * eff.comm) if n_gpus > 1 else 0.0
    stage = 2.0 * (total + total / max(1, rollout_tp)) / (gpu.ceiling("hbm") * eff.elementwise_hbm)
    tensors = expert_tensor_seconds(model, lora_rank, eff)
    return {"pipeline": pipeline, "gather": gather, "stage": stage, "tensors": tensors,
            "total": pipeline + gather + stage + tensors, "bytes": total}


def expert_tensor_seconds(model: ModelSpec, lora_rank: int = 0, eff: Efficiency = DEFAULT,
                          bucketed: bool = False) -> float:
    """Host seconds of a refit's routed-expert tensors, handed over one at a time (none under
    LoRA: only the adapters move); ``bucketed``: packed into buckets by verl's checkpoint engine
    (``Efficiency.refit_s_per_expert_tensor_bucketed``)."""
    price = eff.refit_s_per_expert_tensor_bucketed if bucketed else eff.refit_s_per_expert_tensor
    return 0.0 if lora_rank else model.expert_tensor_count * price


__all__ = ["colocated_refit_seconds", "expert_tensor_seconds"]
