"""Rollout (generation) time: a decode-iteration simulation of continuous batching.

Each inference engine (``gpus / rollout_tp`` of them) takes a contiguous slice of the batch, as
verl chunks it. An engine runs at most ``min(max_num_seqs, KV-cache capacity)`` sequences at once;
a waiting sequence starts when a slot frees. Every decode iteration costs the larger of its
compute and its memory traffic (weights once, plus the KV cache of every running sequence), plus
launch and host overheads; the running batch shrinks as sequences finish, so the longest
responses set the time (the "long tail"). Prefill is charged at GEMM speed.

An iteration's device time is split into kernel families (``pricing.py``): ``gemm`` (the linear
layers and LM head: weights streamed, or their FLOPs when the batch is large) and ``decode``
(attention over the KV cache), each at the roofline the larger of its own compute and memory
time (they are separate kernels, run one after the other), with measured timings its kernels'
time. ``comm`` and ``host`` are the
tensor-parallel all-reduces and the host's launches and scheduling; ``prefill`` the prompts.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..run.hardware import GPU
from ..run.models import ModelSpec
from ..run.spec import Rollout, default
from .efficiency import DEFAULT, Efficiency
from .pricing import Pricer

# The engine settings of a rollout of single-GPU engines at the run's defaults: what the rollout
# functions price when no ``engine`` is given (a ``RunSpec`` ``Rollout`` section with its TP resolved:
# ``RunConfig.rollout_settings`` gives a run's). ``rollout_precision`` is the engine model's own
# (``RunConfig.engine_model``): the functions read the model's weight dtype, not this field.
ONE_GPU_ENGINE = Rollout(rollout_tp=1)


def engine_tp(engine: Rollout) -> int:
    """GPUs per engine of ``engine``: its rollout TP, which the caller resolves first
    (``estimate.default_rollout_tp``; None there means "fit", which only ``configure`` does)."""
    if engine.rollout_tp is None:
        raise ValueError("rollout: engine.rollout_tp is unset: resolve it (estimate.default_rollout_tp) first")
    return int(engine.rollout_tp)


@dataclass
class EngineResult:
    time_s: float
    prefill_s: float
    decode_s: float
    iterations: int
    concurrency: int
    tail_s: float  # decode time spent with fewer than half the peak running batch
    fixed_s: float = 0.0  # the part paid per iteration whatever the batch (weights read, launches)
    host_s: float = 0.0  # host-side seconds: kernel launches (or graph replays) and per-sequence scheduling
    comm_s: float = 0.0  # tensor-parallel all-reduces
    kernels: dict[str, float] = field(default_factory=dict)  # seconds by kernel family (sums to time_s)
    sources: dict[str, str] = field(default_factory=dict)  # family -> result file and provider, or "roofline"
    finish_s: np.ndarray | None = None  # when each of the engine's sequences is done, from the engine's start


@dataclass
class RolloutResult:
    time_s: float  # the slowest engine
    prefill_s: float
    decode_s: float
    iterations: int
    engines: list[EngineResult]
    tail_gpu_s: float  # GPU-seconds in the tail (fewer than half the peak batch running)
    imbalance_gpu_s: float  # GPU-seconds engines wait for the slowest one
    n_gpus: int
    fixed_s: float = 0.0  # of the slowest engine: per-iteration costs independent of the batch
    host_s: float = 0.0  # of the slowest engine: host-side seconds (launches, scheduler), part of time_s
    comm_s: float = 0.0  # of the slowest engine: tensor-parallel all-reduce seconds, part of time_s
    kernels: dict[str, float] = field(default_factory=dict)  # of the slowest engine, by kernel family
    sources: dict[str, str] = field(default_factory=dict)
    finish_s: np.ndarray | None = None  # when each sequence of the batch is done (batch order)

    def to_dict(self) -> dict:
        return {
            "time_s": self.time_s, "prefill_s": self.prefill_s, "decode_s": self.decode_s,
            "iterations": self.iterations, "tail_gpu_s": self.tail_gpu_s,
            "imbalance_gpu_s": self.imbalance_gpu_s,
            "engine_times_s": [e.time_s for e in self.engines],
            "concurrency": [e.concurrency for e in self.engines],
        }


def engine_gemm_rate(gpu: GPU, model: ModelSpec) -> float:
    """Peak FLOP/s of an engine's linear layers: FP8 tensor cores for an FP8 engine on a GPU
    that has them (twice bf16), else bf16 (on Ampere an FP8 checkpoint runs weight-only: the
    bytes halve, the math does not)."""
    return gpu.ceiling("fp8" if model.weight_dtype == "fp8" and gpu.has_fp8 else "bf16")


def kv_capacity_tokens(model: ModelSpec, gpu: GPU, tp: int, mem_fraction: float,
                       eff: Efficiency = DEFAULT) -> float:
    """Tokens of KV cache one engine holds: vLLM gives ``mem_fraction`` of each GPU's memory to
    weights, activations and the cache."""
    budget = mem_fraction * gpu.memory_gb * 1e9 - model.weight_bytes() / tp - eff.engine_reserve_bytes
    return max(0.0, budget) / model.kv_bytes_per_token_per_gpu(tp)


def kv_slots(model: ModelSpec, gpu: GPU, tp: int, mem_fraction: float, seq_len: float, max_num_seqs: int,
             eff: Efficiency = DEFAULT) -> int:
    """Sequences of ``seq_len`` tokens one engine runs at once: as many as its KV cache holds
    (``kv_capacity_tokens``), at most ``max_num_seqs``, at least one."""
    cap_tokens = kv_capacity_tokens(model, gpu, tp, mem_fraction, eff)
    by_kv = int(cap_tokens // max(seq_len, 1.0)) if cap_tokens > 0 else 1
    return max(1, min(max_num_seqs, by_kv))


def _schedule(lengths: np.ndarray, slots: int) -> np.ndarray:
    """Start iteration of each sequence when at most ``slots`` run at once (FIFO)."""
    n = len(lengths)
    if slots >= n:
        return np.zeros(n, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64).tolist()  # Python ints: the loop below is the hot path
    heap = lens[:slots]
    heapq.heapify(heap)
    out = [0] * n
    replace = heapq.heapreplace
    for i in range(slots, n):
        t = heap[0]  # the first running sequence to finish frees its slot
        out[i] = t
        replace(heap, t + lens[i])
    return np.array(out, dtype=np.int64)


def iteration_launch_seconds(model: ModelSpec, eff: Efficiency = DEFAULT, eager: bool = default("eager")) -> float:
    """Host seconds to launch one decode iteration's kernels: every kernel of every layer in eager
    mode (12 a layer at ~8 us: 2.7 ms for a 28-layer model, plus an adapter's, ``engines.py``), one
    graph replay with CUDA graphs."""
    per_layer = eff.kernels_per_layer * eff.launch_s_per_kernel + eff.adapter_launch_s_per_layer
    return model.layers * per_layer if eager else eff.graph_replay_s


def iteration_fixed_seconds(model: ModelSpec, gpu: GPU, tp: int, eff: Efficiency = DEFAULT,
                            eager: bool = default("eager")) -> float:
    """The part of a decode iteration that does not depend on the running batch: reading the
    weights once (the launches run ahead of it, ``iteration_host_seconds``), the scheduler's
    per-step work and collective latencies."""
    from .parallel import allreduce_latency_seconds

    weights = float(decode_weight_bytes(model, 1.0)) / (tp * gpu.ceiling("hbm") * eff.decode_hbm)
    launch = iteration_launch_seconds(model, eff, eager)
    latency = model.layers * 2 * allreduce_latency_seconds(gpu, tp, eff)
    return float(max(weights, launch) + eff.host_s_per_iter + latency)


def iteration_host_seconds(model: ModelSpec, active: np.ndarray, eff: Efficiency = DEFAULT,
                           eager: bool = default("eager"), device_s=0.0) -> np.ndarray:
    """Host-side seconds of decode iterations that the GPU waits for, whatever the running batch:
    the launches it does not hide (kernels are queued asynchronously, so they cost only where they
    take longer than the ``device_s`` of work they launch: a small model's iterations) and the
    engine's per-step scheduling and input preparation (``host_s_per_iter``), which runs between
    iterations. Per running sequence: ``iteration_seq_host_seconds``."""
    active = np.asarray(active, dtype=np.float64)
    exposed = np.maximum(iteration_launch_seconds(model, eff, eager) - np.asarray(device_s, dtype=np.float64), 0.0)
    return exposed + eff.host_s_per_iter + np.zeros_like(active)


def iteration_seq_host_seconds(active: np.ndarray, eff: Efficiency = DEFAULT) -> np.ndarray:
    """Host-side seconds of decode iterations per running sequence (the scheduler's block
    bookkeeping, the sampler's and detokeniser's per-sequence Python): between iterations, so the
    GPU waits for all of it. Priced apart from the per-iteration work (its own prior kind): the
    shared logs' engines spend 7x the base price per sequence but half of it per iteration, and
    one factor on both put 0.5B runs 0.6x and 7B runs 1.9x their generation time."""
    return eff.host_s_per_seq_iter * np.asarray(active, dtype=np.float64)


def iteration_costs(model: ModelSpec, gpu: GPU, engine: Rollout, active: np.ndarray, ctx: np.ndarray,
                    eff: Efficiency = DEFAULT, pricer: Pricer | None = None) -> np.ndarray:
    """Seconds per decode iteration for running-batch sizes ``active`` holding ``ctx`` context
    tokens in total (arrays of the same shape): device time plus the host time the GPU waits for
    (``iteration_host_seconds``, ``iteration_seq_host_seconds``)."""
    parts, _ = iteration_parts(model, gpu, engine, active, ctx, eff, pricer)
    return sum(parts.values())


def iteration_parts(model: ModelSpec, gpu: GPU, engine: Rollout, active: np.ndarray, ctx: np.ndarray,
                    eff: Efficiency = DEFAULT, pricer: Pricer | None = None
                    ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Seconds per decode iteration by kernel family (``gemm``, ``decode``, ``comm``, ``host`` per
    iteration, ``seq_host`` per running sequence) and where each came from. At the roofline the
    linear layers take the larger of their FLOPs and weight reads (``decode_weight_bytes``),
    attention the larger of its FLOPs and KV reads. ``engine``: its TP, expert parallelism and CUDA
    graphs (``eager``) are priced."""
    tp, ep, eager = engine_tp(engine), engine.rollout_ep, engine.eager
    pricer = pricer or Pricer(gpu, eff)
    active = np.asarray(active, dtype=np.float64)
    ctx = np.asarray(ctx, dtype=np.float64)
    mm_flops = model.matmul_flops_per_token() * active
    attn_flops = model.attn_flops_per_pair * ctx
    weight_bytes = decode_weight_bytes(model, active)
    # each GPU reads its own copy of the cache: 1/tp of it while the KV heads split, but a KV head
    # (and an MLA latent) is replicated on every GPU past tp = kv_heads, so Qwen3-235B's 4 KV heads
    # at TP 16 cost each GPU a quarter of the cache, not a sixteenth, and DeepSeek-V3's latent all of it
    kv_bytes_per_gpu = model.kv_bytes_per_token_per_gpu(tp) * ctx
    compute_rate = tp * engine_gemm_rate(gpu, model) * eff.gemm
    memory_rate = tp * gpu.ceiling("hbm") * eff.decode_hbm
    # the linear layers and attention are separate kernels run one after the other: each is
    # bound by its own larger of compute and memory time (the linear layers cross over at a
    # batch of ~peak FLOP/s over bandwidth tokens, ~160 on an H200; attention stays memory-bound)
    linear = np.maximum(mm_flops / compute_rate, weight_bytes / memory_rate)
    attention = np.maximum(attn_flops / compute_rate, kv_bytes_per_gpu / (gpu.ceiling("hbm") * eff.decode_hbm))
    gemm, gemm_src = pricer.decode_gemm(model, active, tp, linear)
    attn, attn_src = pricer.decode(model, active, ctx, tp, attention)
    comm = iteration_comm_seconds(model, gpu, tp, active, eff, ep) * pricer.scale("comm")
    device = gemm + attn + comm
    host = iteration_host_seconds(model, active, eff, eager, device) * pricer.scale("host")
    seq_host = iteration_seq_host_seconds(active, eff) * pricer.scale("seq_host")
    if eff.host_overlap:
        # on the seconds as the priors price them (each part times its slowdown), put back in base
        # seconds for the priors to scale as they scale every part
        s_dev, s_comm, s_host, s_seq = eff.overlap_slowdowns
        launch = iteration_launch_seconds(model, eff, eager) * pricer.scale("host") * s_host
        step = (np.zeros_like(active) + eff.host_s_per_iter * pricer.scale("host")) * s_host
        exposed = host * s_host - step
        host, seq_host = overlapped_exposed_host((gemm + attn) * s_dev + comm * s_comm, exposed, launch, step,
                                                 seq_host * s_seq, eff.host_overlap)
        host, seq_host = host / s_host, seq_host / s_seq
    parts = {"gemm": gemm, "decode": attn, "comm": comm, "host": host, "seq_host": seq_host}
    return parts, {"gemm": gemm_src, "decode": attn_src, "comm": "roofline", "host": "roofline",
                   "seq_host": "roofline"}


def overlapped_exposed_host(device, exposed_launch, launch, step, seq, share: float):
    """The host seconds a decode iteration exposes (per iteration, per sequence) when ``share`` of
    its between-step host work (``step`` per iteration, ``seq`` for its sequences) runs while the GPU
    works (vLLM's asynchronous scheduling, ``engines.py``). In step an iteration costs the launch-bound
    forward, ``device + exposed_launch``, plus that work; overlapped, the host thread's launches (at
    most the forward's time) and the shared work run beside the forward:
    ``max(forward, launches + share x work) + (1 - share) x work``: never slower than in step, never
    faster than its GPU work or its host work alone. The exposed rest is split over the two kinds
    by their shares of the work."""
    forward = device + exposed_launch
    work = step + seq
    total = np.maximum(forward, np.minimum(launch, forward) + share * work) + (1.0 - share) * work
    rest = total - forward  # in [0, work]
    with np.errstate(invalid="ignore", divide="ignore"):
        seq_part = np.where(work > 0, rest * seq / np.where(work > 0, work, 1.0), 0.0)
    return exposed_launch + rest - seq_part, seq_part


def decode_weight_bytes(model: ModelSpec, active) -> np.ndarray:
    """Weight bytes one decode iteration reads (all GPUs of the engine together) with ``active``
    running sequences: every linear layer and the LM head; of a MoE layer the experts the batch
    touches (up to all); of the embedding table only the ``active`` rows looked up (a gather, not
    a read of the table). The linear layers at the engine's width (``ModelSpec.weight_dtype``:
    one byte under FP8), the LM head (or the tied table it reads) at two."""
    active = np.asarray(active, dtype=np.float64)
    width = model.linear_bytes_per_param
    head = 2.0 * model.lm_head_params  # a tied head reads the embedding table: the same bytes
    body = float(model.params_total - model.embedding_params
                 - (0 if model.tied_embeddings else model.lm_head_params)) * width + head
    if model.experts:
        # the experts a batch touches: each token picks k of E, so an expert stays idle with
        # probability (1 - k/E)^active (uniform routing): 77% of 128 experts at 23 tokens of top-8,
        # where counting k x active (capped at E) would read them all. Only the routed experts
        # are skipped (of the routed layers: DeepSeek-V3's 58 of 61); the shared expert and the
        # router are read every iteration.
        share = model.active_experts / model.experts
        touched = model.experts * (1.0 - (1.0 - share) ** np.maximum(active, 1.0))
        routed = model.expert_tensor_count * model.hidden * model.moe_intermediate * width
        body = body - routed + routed * touched / model.experts
    return body + 2.0 * model.hidden * active


def iteration_comm_seconds(model: ModelSpec, gpu: GPU, tp: int, active: np.ndarray,
                           eff: Efficiency = DEFAULT, ep: int = 1) -> np.ndarray:
    """Tensor parallelism: two all-reduces of the running batch's hidden states per layer
    (bf16, ring: 2 (tp-1)/tp of the message over the link) plus a latency each
    (``parallel.allreduce_latency_seconds``: 8 us within a node, 25 us for a TP16 engine over two
    8-GPU nodes, which NCCL serves over the NICs). With vLLM's expert parallelism (``ep``) a MoE
    layer's second all-reduce is a dispatch and a combine all-to-all instead
    (``parallel.rollout_all_to_all_seconds``)."""
    from .parallel import allreduce_latency_seconds, rollout_all_to_all_seconds

    active = np.asarray(active, dtype=np.float64)
    if tp <= 1:
        return np.zeros_like(active)
    msg = 2.0 * model.hidden * active * 2.0 * (tp - 1) / tp
    reduces = 1 if ep > 1 and model.experts else 2
    return (model.layers * reduces * (msg / (gpu.link_gbps(tp) * 1e9 * eff.comm)
                                      + allreduce_latency_seconds(gpu, tp, eff))
            + rollout_all_to_all_seconds(model, gpu, tp, ep, active, eff))


def prefill_seconds(model: ModelSpec, gpu: GPU, tp: int, prompt_lens: np.ndarray,
                    eff: Efficiency = DEFAULT) -> float:
    p = np.asarray(prompt_lens, dtype=np.float64)
    flops = model.matmul_flops_per_token() * p.sum() + model.attn_flops_per_pair * float((p * p).sum()) / 2
    return float(flops / (tp * engine_gemm_rate(gpu, model) * eff.prefill))


def simulate_engine(model: ModelSpec, gpu: GPU, prompt_lens: np.ndarray, response_lens: np.ndarray, *,
                    engine: Rollout = ONE_GPU_ENGINE, eff: Efficiency = DEFAULT, pricer: Pricer | None = None,
                    slots: int | None = None) -> EngineResult:
    """One engine's continuous batching over its sequences. ``slots``: how many run at once when
    known (sequences already running, ``streaming.py``), else the KV cache's room for sequences
    of the mean length, at most ``engine.max_num_seqs``."""
    tp, eager = engine_tp(engine), engine.eager
    mem_fraction, max_num_seqs = engine.mem_fraction, engine.max_num_seqs
    p = np.asarray(prompt_lens, dtype=np.int64)
    r = np.maximum(np.asarray(response_lens, dtype=np.int64), 1)
    if len(r) == 0:
        return EngineResult(0.0, 0.0, 0.0, 0, 0, 0.0, finish_s=np.zeros(0))
    if slots is None:
        slots = kv_slots(model, gpu, tp, mem_fraction, float((p + r).mean()), max_num_seqs, eff)
    slots = max(1, min(int(slots), len(r)))
    starts = _schedule(r, slots)
    ends = starts + r
    horizon = int(ends.max())
    d_active = np.zeros(horizon + 1)
    d_base = np.zeros(horizon + 1)
    np.add.at(d_active, starts, 1.0)
    np.add.at(d_active, ends, -1.0)
    base = (p - starts).astype(np.float64)  # context of a running sequence at iteration t: p + t - start
    np.add.at(d_base, starts, base)
    np.add.at(d_base, ends, -base)
    active = np.cumsum(d_active)[:horizon]
    t = np.arange(horizon, dtype=np.float64)
    ctx = np.cumsum(d_base)[:horizon] + t * active
    pricer = pricer or Pricer(gpu, eff)
    parts, sources = iteration_parts(model, gpu, engine, active, ctx, eff, pricer)
    per_iter = sum(parts.values())
    decode = float(per_iter.sum())
    done_at = np.cumsum(per_iter)  # seconds of decode when iteration t is over
    tail = float(per_iter[active < 0.5 * active.max()].sum())
    prefill = prefill_seconds(model, gpu, tp, p, eff) * pricer.scale("prefill")
    fixed = min(decode, horizon * iteration_fixed_seconds(model, gpu, tp, eff, eager))
    kernels = {"prefill": prefill, **{k: float(v.sum()) for k, v in parts.items()}}
    sources = {"prefill": "roofline", **sources}
    return EngineResult(prefill + decode, prefill, decode, horizon, slots, tail, fixed,
                        kernels["host"] + kernels["seq_host"],
                        kernels["comm"], kernels, sources, prefill + done_at[ends - 1])


def simulate_rollout(model: ModelSpec, gpu: GPU, prompt_lens, response_lens, *, n_gpus: int,
                     engine: Rollout = ONE_GPU_ENGINE, eff: Efficiency = DEFAULT,
                     pricer: Pricer | None = None) -> RolloutResult:
    """The rollout of one step: the batch is split in contiguous slices over ``n_gpus // tp``
    engines (``engine.rollout_tp``), as verl does."""
    tp = engine_tp(engine)
    p = np.asarray(prompt_lens, dtype=np.int64)
    r = np.asarray(response_lens, dtype=np.int64)
    engines_n = max(1, n_gpus // max(1, tp))
    bounds = np.linspace(0, len(r), engines_n + 1).round().astype(int)
    pricer = pricer or Pricer(gpu, eff)
    results = [simulate_engine(model, gpu, p[a:b], r[a:b], engine=engine, eff=eff, pricer=pricer)
               for a, b in zip(bounds[:-1], bounds[1:])]
    slowest = max(results, key=lambda e: e.time_s)
    imbalance = sum(slowest.time_s - e.time_s for e in results) * tp
    tail = sum(e.tail_s for e in results) * tp
    return RolloutResult(slowest.time_s, slowest.prefill_s, slowest.decode_s, slowest.iterations, results,
                         tail, imbalance, n_gpus, slowest.fixed_s, slowest.host_s, slowest.comm_s,
                         dict(slowest.kernels), dict(slowest.sources),
                         np.concatenate([e.finish_s for e in results]) if results else np.zeros(0))


# Multi-turn rollouts (agent loops with tools): the share of a response's tokens the model
# generated; the rest is tool output appended to the context between turns, prefilled, not
# decoded. PolyTrace's Search-R1 trace (Qwen2.5-7B, search_r1/profile/multiturn_workload_log,
# 10,287 trajectories over 6 steps): 16.2% generated (loss tokens / response tokens), 2.6 turns and
# 1.6 tool calls per trajectory, 0.40 s mean tool latency. Used where a log gives no token split.
GENERATED_SHARE_PRIOR = 0.162

# What a tool call can append at most. verl's agent loop cuts a tool's text longer than
# ``multi_turn.max_tool_response_length`` characters (default 256, verl/trainer/config/rollout/
# rollout.yaml) to that many plus a "...(truncated)..." marker of 17 characters before it tokenizes it
# (volcengine/verl verl/experimental/agent_loop/tool_agent_loop.py, ``_call_tool``, commit b178a3c);
# a token of a byte-level BPE vocabulary holds at least one character of ASCII text, so at most one
# token a character; Qwen's hermes chat template wraps the text in a ``tool`` turn and opens the next
# assistant turn, 20 tokens counted from its markup (<|im_start|> user \n <tool_response> \n ... \n
# </tool_response> <|im_end|> \n <|im_start|> assistant \n, the two tags ~5 tokens each).
VERL_TOOL_RESPONSE_CHARS = 256
TOOL_TRUNCATION_MARK_CHARS = 17
TOOL_TURN_TEMPLATE_TOKENS = 20


def tool_tokens_max(max_tool_response_chars: int = VERL_TOOL_RESPONSE_CHARS) -> int:
    """The most tokens one tool call appends to a trajectory (the constants above)."""
    return max_tool_response_chars + TOOL_TRUNCATION_MARK_CHARS + TOOL_TURN_TEMPLATE_TOKENS


def generated_share_floor(tool_calls: float, mean_response: float,
                          max_tool_response_chars: int = VERL_TOOL_RESPONSE_CHARS) -> float:
    """The least share of a step's response tokens the model generated: what ``tool_calls`` calls
    per trajectory can have appended at most (``tool_tokens_max``) is the rest. 0 when the calls
    could fill the responses."""
    if mean_response <= 0 or tool_calls <= 0:
        return 0.0 if mean_response <= 0 else 1.0
    return float(min(max(1.0 - tool_calls * tool_tokens_max(max_tool_response_chars) / mean_response, 0.0), 1.0))


def tool_prefill_seconds(model: ModelSpec, gpu: GPU, tp: int, prompt_lens, response_lens, tool_tokens,
                         n_gpus: int, eff: Efficiency = DEFAULT) -> float:
    """Prefill of the tool output appended between turns, on the slowest engine (the batch split
    in contiguous slices over ``n_gpus // tp`` engines, as ``simulate_rollout``). Each appended
    token attends to its trajectory's context, on average the prompt and half the response; the
    prefix cache (verl's agent loop keeps a trajectory on one server) serves the rest."""
    p = np.asarray(prompt_lens, dtype=np.float64)
    r = np.asarray(response_lens, dtype=np.float64)
    t = np.asarray(tool_tokens, dtype=np.float64)
    flops = model.matmul_flops_per_token() * t + model.attn_flops_per_pair * t * (p + r / 2.0)
    engines = max(1, n_gpus // max(1, tp))
    bounds = np.linspace(0, len(t), engines + 1).round().astype(int)
    slowest = max((float(flops[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:])), default=0.0)
    return slowest / (tp * engine_gemm_rate(gpu, model) * eff.prefill)


def multiturn_rollout(model: ModelSpec, gpu: GPU, prompt_lens, response_lens, *, generated_share: float,
                      n_gpus: int, engine: Rollout = ONE_GPU_ENGINE, pricer: Pricer | None = None,
                      slowest_generated: int = 0) -> tuple[RolloutResult, float]:
    """A multi-turn rollout's engine work: the generated tokens decoded (``generated_share`` of
    each response, at least one) and the tool output prefilled between turns
    (``tool_prefill_seconds``). Tool waits are not engine work: the caller adds them. Priced at
    ``pricer``'s efficiencies (default: the roofline at ``efficiency.DEFAULT``). ``slowest_generated``:
    tokens the longest response is known to have generated itself (the log's slowest trajectory,
    which waited on no tool: no tool output in it), decoded whatever the share."""
    pricer = pricer or Pricer(gpu, DEFAULT)
    eff, tp = pricer.eff, engine_tp(engine)
    p = np.asarray(prompt_lens, dtype=np.int64)
    r = np.asarray(response_lens, dtype=np.int64)
    share = float(min(max(generated_share, 0.0), 1.0))
    decoded = np.maximum(np.round(r * share).astype(np.int64), 1)
    if slowest_generated > 0 and len(r):
        i = int(np.argmax(r))
        decoded[i] = max(int(decoded[i]), min(int(slowest_generated), int(r[i])))
    roll = simulate_rollout(model, gpu, p, decoded, n_gpus=n_gpus, engine=engine, eff=eff, pricer=pricer)
    scale = pricer.scale("prefill")
    prefill = tool_prefill_seconds(model, gpu, tp, p, r, np.maximum(r - decoded, 0), n_gpus, eff) * scale
    return roll, prefill
