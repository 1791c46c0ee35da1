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

The engine's generation (``Rollout.engine``) and asynchronous scheduling (``Rollout.async_scheduling``).
What runs between two decode steps on the host (the scheduler, input preparation, per-sequence
output processing: ``Efficiency.host_s_per_iter`` and ``host_s_per_seq_iter``, scaled by the priors)
waits for the GPU and the GPU for it, in step, in vLLM's V0 loop and in V1 by default. vLLM's
``--async-scheduling`` (V1 only) runs that work for step k+1 while step k's kernels run:
vllm-project/vllm pull request #19970 (vLLM 0.10) puts the scheduler one step ahead of execution,
pull request #23569 (vLLM 0.11) makes the model runner asynchronous too, "full overlap of the cpu
operations (including prepare_inputs) and the model forward pass". From 0.11 the whole per-step host
work overlaps (``ASYNC_HOST_OVERLAP``): an iteration costs the larger of its GPU and host work, not
their sum (``rollout.overlapped_exposed_host``), taken on the seconds as the shipped priors price
each part (``overlap_slowdowns``; a calibrated estimate's overlap is weighed at them too, not at its
own scalars). vLLM turns it on by default from 0.14 for its
``mp``, ``uni`` and ``external_launcher`` executors and off with Ray's (docs/step-model.md quotes
both); estimate assumes it off unless told.

V1 against V0 in step: no factor, none citable. The V1 announcement (vllm-project/vllm-project.github.io
``_posts/2025-01-27-v1-alpha-release.md``, Jan 2025: persistent batch, diffs instead of per-step
rebuilds) measures "up to 1.7x higher throughput compared to V0 (without multi-step scheduling)",
an end-to-end serving figure (Llama 3.1 8B and 3.3 70B, ShareGPT) that holds the API server V1
moved to its own process, not the engine loop's per-step host work. The only breakdown published
(vLLM's v0.6.0 post, Sep 2024: Llama 3 8B on an H100 at v0.5.3, scheduling and input preparation
29% of the time, GPU 38%, API server 33%) predates V0's own asynchronous output processing, so it
is not V0 0.6-0.8's split either. The corpus holds both engines under one fitted price per kind:
V0 on its 0.5B logs (their XFORMERS backend falls back to it), V1 0.8.x in eager mode on its 7B
ones (they name ``vllm.v1.worker.gpu_worker.Worker``), so a factor between them would be a second
fit the corpus cannot identify. Both are priced at the fitted in-step price.

verl's agent loop (``rollout.mode=async``) serves through vLLM's ``AsyncLLM`` behind a Ray or HTTP
server, which an in-process engine does not. Priced: what the log measures or bounds (the tool
waits as logged, the generated share at least what the tool calls cannot have appended, the slowest
trajectory's whole response where it waited on no tool: ``calibrate/multiturn.py``). Not priced: the
server's own per-step cost. verl's ``ExternalRayDistributedExecutor.collective_rpc`` noted "~3ms
overhead per schedule step due to SchedulerOutput/ModelRunnerOutput serialization/deserialization"
(volcengine/verl ``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` before pull request
#3456, 2025-09-16, which moved to vLLM's native HTTP server); no corpus log prints its verl version,
so which server ran is unknown, and on the OPD 3B run's ~8,100 iterations a step it would be ~24 s
(~10% of its generation), which one series cannot confirm.
"""

from __future__ import annotations

from dataclasses import replace

from ..run.models import ModelSpec
from ..run.spec import default
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


# Share of the per-step host work run while the GPU works, with vLLM >= 0.11's asynchronous
# scheduling (pull requests #19970 and #23569: the scheduler, input preparation and output
# processing all overlap the forward pass); in step (V0, or V1 without it) none does.
ASYNC_HOST_OVERLAP = 1.0


def host_overlap(engine: str = default("engine"), async_scheduling: bool = default("async_scheduling")) -> float:
    """The share of an engine's per-step host work that overlaps its GPU work (``Efficiency.host_overlap``)."""
    if async_scheduling and engine != "vllm-v1":
        raise ValueError(f"engines: asynchronous scheduling needs vLLM's V1 engine, not {engine}")
    return ASYNC_HOST_OVERLAP if async_scheduling else 0.0


def overlap_slowdowns(eager: bool) -> tuple:
    """The shipped priors' slowdowns of the parts an overlapped iteration weighs against each other
    (``Efficiency.overlap_slowdowns``: device, collectives, host, per-sequence host). The priors
    scale each part after the simulation; a maximum taken before on base prices would compare
    the per-sequence work at its base 15 us against the device at its own, where the priors put
    them at ~7x and ~0.95x: it would hide work the GPU has no time for."""
    from .efficiency import part_slowdown, prior_scalars

    s = prior_scalars(eager=eager)
    return tuple(part_slowdown(s, "rollout", f) for f in ("gemm", "comm", "host", "seq_host"))


def rollout_efficiency(eff: Efficiency, model: ModelSpec, *, lora_rank: int = 0, engine: str = default("engine"),
                       async_scheduling: bool = default("async_scheduling"), eager: bool = default("eager")
                       ) -> Efficiency:
    """``eff`` with the engine setting's own per-iteration costs for ``model``: LoRA's launches
    (``Efficiency.adapter_launch_s_per_layer``; paid only in eager mode, ``rollout.py``) and the host
    work asynchronous scheduling hides (``Efficiency.host_overlap``, weighed at the priors'
    slowdowns of the run's launch mode, ``overlap_slowdowns``)."""
    extra = lora_launch_seconds_per_layer(model, lora_rank, eff)
    overlap = host_overlap(engine, async_scheduling)
    if extra:
        eff = replace(eff, adapter_launch_s_per_layer=extra)
    if overlap:
        return replace(eff, host_overlap=overlap, overlap_slowdowns=overlap_slowdowns(eager))
    return replace(eff, host_overlap=0.0, overlap_slowdowns=DEFAULT.overlap_slowdowns) if eff.host_overlap else eff


def engine_phrase(eager: bool, engine: str = default("engine"),
                  async_scheduling: bool = default("async_scheduling")) -> str:
    """How an estimate's first line names the inference engine's setting, always said: the launch
    mode (eager launches every kernel of every decode step, and a LoRA adapter adds its own: it can
    cost a small model's generation 2x and more) and the loop (asynchronous scheduling hides the
    per-step host work)."""
    launches = "eager" if eager else "CUDA graphs"
    loop = f"vLLM {'V0' if engine == 'vllm-v0' else 'V1'}, {'async' if async_scheduling else 'in-step'} scheduling"
    return f"{launches} | {loop}"


__all__ = ["ASYNC_HOST_OVERLAP", "TRITON_LAUNCH_S", "engine_phrase", "host_overlap", "lora_launch_seconds_per_layer",
           "overlap_slowdowns", "rollout_efficiency"]
