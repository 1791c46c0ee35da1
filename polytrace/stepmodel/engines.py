"""What the inference engine's own setting adds to a decode iteration, from cited figures (not fitted).

The rollout simulation (``rollout.py``) prices a decode iteration's kernels, their launches and the
engine's scheduling; the priors (``polytrace/data/priors.json``) scale each kind of that work. What
depends on how the engine is set up rather than on the model's shapes is priced here, once, and
handed to the simulation as an ``Efficiency`` (``rollout_efficiency``), through one method,
``RunConfig.engine_efficiency``, that every rollout of a run (the batch and the stream) is priced at.

LoRA served by vLLM (verl's ``actor_rollout_ref.model.lora_rank > 0``: the rollout loads the actor's
adapter as a ``LoRARequest`` and runs the base model with vLLM's punica LoRA layers). Every wrapped
linear layer runs, besides its base GEMM, a shrink (``x @ A``) and an expand (``(x A) @ B``) Triton
kernel and zeroes their fp32 buffer (``vllm/lora/punica_wrapper/punica_gpu.py``, ``add_lora_linear``;
vLLM up to 0.7 launched a shrink and an expand per output slice, more, so this is a lower bound).
A dense decoder layer has four wrapped layers (``qkv_proj``, ``o_proj``, ``gate_up_proj``,
``down_proj``); of a MoE layer vLLM before 0.11 wraps only the attention's two. The adapter's
FLOPs at rank 32 are ~1% of the layer's and are left out; its launches are not: a Triton kernel
costs ~49 us of Python and driver work per launch after triton-lang/triton pull request #3638
(108 -> 49 us, the launcher that torch 2.4-2.6's Triton 3.0-3.2 ships; 40-62 us by argument count
before it, pull request #3503), against ~8 us for a kernel launched by torch (``launch_s_per_kernel``).
In eager mode (``enforce_eager``, every corpus log) these launches are host time a small model's
iteration cannot hide: 24 layers x (8 x 49 + 4 x 8) us = 10.2 ms an iteration for Qwen2.5-0.5B,
4.4x its 2.3 ms of base launches. Under CUDA graphs the graph replays them (no host price).
vLLM's LoRA slowdowns with ``enforce_eager`` are a known issue: vllm-project/vllm issues #9452
(0.6.2: 83.6 s with LoRA against 37.9 s without) and #13204 (0.7.0, eager: 6.5 against 17.6
tokens/s); NovaSky-AI/SkyRL pull request #665 turns eager off for LoRA runs because of it.
"""

from __future__ import annotations

from dataclasses import replace

from ..run.models import ModelSpec
from .efficiency import DEFAULT, Efficiency

# Seconds of host work per Triton kernel launch (triton-lang/triton pull request #3638: 49 us on the
# benchmark of issue #3619, down from 108 us).
TRITON_LAUNCH_S = 49e-6
# Per LoRA-wrapped linear layer and decode iteration: the shrink and the expand (Triton), the
# buffer's zeroing (a torch launch).
LORA_TRITON_LAUNCHES = 2
LORA_TORCH_LAUNCHES = 1
# Wrapped linear layers per decoder layer: qkv, o, gate_up, down (dense); qkv and o (MoE).
LORA_LAYERS_DENSE = 4
LORA_LAYERS_MOE = 2


def lora_launch_seconds_per_layer(model: ModelSpec, lora_rank: int, eff: Efficiency = DEFAULT) -> float:
    """Host seconds of one decoder layer's LoRA launches per decode iteration in an eager engine
    (0 without an adapter)."""
    if not lora_rank or lora_rank <= 0:
        return 0.0
    wrapped = LORA_LAYERS_MOE if model.experts else LORA_LAYERS_DENSE
    return wrapped * (LORA_TRITON_LAUNCHES * TRITON_LAUNCH_S + LORA_TORCH_LAUNCHES * eff.launch_s_per_kernel)


def rollout_efficiency(eff: Efficiency, model: ModelSpec, *, lora_rank: int = 0) -> Efficiency:
    """``eff`` with the engine setting's own per-iteration costs for ``model`` (LoRA's launches,
    ``Efficiency.adapter_launch_s_per_layer``; paid only in eager mode, ``rollout.py``)."""
    extra = lora_launch_seconds_per_layer(model, lora_rank, eff)
    return replace(eff, adapter_launch_s_per_layer=extra) if extra else eff


__all__ = ["TRITON_LAUNCH_S", "lora_launch_seconds_per_layer", "rollout_efficiency"]
