"""Per-GPU memory of an RL step and whether the setup can run at all.

A small model, not an allocator trace: it answers "does this fit, and how much KV cache is left",
which is what decides a rollout's concurrency. Every figure is an estimate (bytes per GPU).

Trainer (actor; the critic alike under PPO), with ``P`` parameters:

- FSDP (verl's mixed precision): the sharded parameters are the fp32 master copy, gradients are
  kept and reduce-scattered in fp32, AdamW keeps two fp32 moments: ``(4 + 4 + 8) P / gpus``. The
  bf16 weights exist only as the all-gathered layers being computed: the current and the
  prefetched one, ``2 x 2 x layer params``.
- Megatron (TP x PP, distributed optimizer as verl sets it): bf16 weights ``2 P / (tp pp)``,
  fp32 main gradients ``4 P / (tp pp)``, fp32 master and moments ``12 P / gpus`` (sharded over
  data parallelism too). With expert parallelism the routed experts' weights and gradients
  split over EP x PP instead of TP x PP (expert tensor parallelism 1). Megatron's CPU optimizer
  (``RunConfig.cpu_optimizer``, a share) keeps that share of the master weights and moments in CPU
  memory: ``12 P (1 - share) / gpus`` stay.
- The reference model's bf16 weights, sharded like the trainer's (``2 P / gpus`` under FSDP,
  nothing with ``ref_offload``).

Activations of one micro-batch of ``T`` tokens (the ``--micro-batch-tokens`` budget per GPU):

- a decoder layer's saved tensors per token, bf16: ``2 (8 h + 2 kv_dim + 3 I)`` bytes (norm
  inputs, Q/K/V, attention output and projection input, residuals: ~8 h; K and V: 2 kv_dim; the
  gated MLP's gate, up and activation outputs: 3 I; FlashAttention keeps no S x S matrix);
- with gradient checkpointing only each layer's input stays (``2 h`` bytes per layer) plus one
  layer's full set during its recomputation; without it every layer's full set stays;
- the logits: bf16 logits and their fp32 log-softmax, ``6 V`` bytes per token (the largest single
  term for 150k-vocabulary models at long sequences);
- Megatron divides all of it by TP (sequence parallelism) and CP (each GPU holds 1/cp of a
  sequence); 1F1B keeps PP micro-batches of layers/PP layers in flight on the first stage, the
  same total as no pipeline.

Rollout (vLLM, ``gpu_memory_utilization = mem_fraction`` of each GPU): the bf16 weights divided
by the rollout TP, ``engine_reserve_bytes`` for activations and CUDA graphs, and the KV cache
taking the rest of the share. KV bytes per token per GPU: ``2 (K, V) x layers x max(kv_heads / tp, 1) x
head_dim x 2`` (bf16), the figure the rollout simulation uses.

LoRA (``lora_rank``): the frozen base weights stay as sharded fp32 (as verl loads the actor), only
the adapters (``training.lora_params``) have gradients and Adam moments, and the reference is the
actor with its adapters off (no second copy). verl's actor offload (``param_offload``,
``optimizer_offload``) parks the sharded parameters / moments in CPU memory between stages: the
rollout phase no longer holds them; the update still does.

Phases: verl colocates trainer and engine on the same GPUs. During training the engine sleeps
(weights and KV cache freed), so the training peak is trainer state + activations. During the
rollout the trainer keeps its fp32 master weights, moments and the reference weights (gradients
are freed after the update), next to the engine's whole share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import PolytraceError
from ..run.hardware import GPU
from ..run.models import ModelSpec
from .efficiency import DEFAULT, Efficiency

GB = 1e9
# Logit bytes held per vocabulary entry per token at the loss: the bf16 logits (2) and their fp32
# log-softmax (4). The logits' gradient reuses those buffers (verl's log-probs go through
# flash-attn's cross-entropy with ``inplace_backward``), so it adds nothing at the peak. At 152k
# vocabulary that is 0.9 MB per token: 15 GB for a 16k-token micro-batch.
LOGIT_BYTES_PER_ELEMENT = 6.0
# All-gathered bf16 layers FSDP holds at once: the one computing and the prefetched next one.
FSDP_GATHERED_LAYERS = 2


def layer_params(model: ModelSpec) -> float:
    return float(model.attn_params_per_layer + model.mlp_params_per_layer(False))


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int) -> float:
    """Bytes of bf16 K and V per cached token on one GPU of a rollout engine of ``tp`` GPUs."""
    return model.kv_bytes_per_token_per_gpu(tp)


def engine_kv_bytes(model: ModelSpec, gpu: GPU, tp: int, mem_fraction: float,
                    eff: Efficiency = DEFAULT) -> float:
    """Bytes per GPU left for the KV cache in the engine's share (may be negative: no room)."""
    return mem_fraction * gpu.memory_gb * GB - model.weight_bytes() / tp - eff.engine_reserve_bytes


def activation_bytes_per_token(model: ModelSpec, *, layers: float, checkpointing: bool, lm_head: bool) -> float:
    """Saved activations of one token over ``layers`` decoder layers (see the module docstring)."""
    kv_dim = 2 * model.kv_heads * model.head_dim
    inter = (model.active_experts * model.moe_intermediate + model.shared_experts * model.moe_intermediate
             if model.experts else model.intermediate)
    full_layer = 2.0 * (8 * model.hidden + kv_dim + 3 * inter)
    if checkpointing:
        body = layers * 2.0 * model.hidden + full_layer
    else:
        body = layers * full_layer
    head = LOGIT_BYTES_PER_ELEMENT * model.vocab if lm_head else 8.0  # a critic's value: one fp32 + grad
    return body + head


def trainer_state_bytes(model: ModelSpec, n_gpus: int, strategy: str, tp: int, pp: int,
                        lora_rank: int = 0, ep: int = 1, cpu_optimizer: float = 0.0) -> dict:
    """Per-GPU bytes of one trained model: bf16 weights, fp32 master weights, Adam moments,
    gradients. Under LoRA (``lora_rank`` > 0) the base weights stay (sharded fp32, as verl loads
    the actor) but only the adapters have gradients and moments. Megatron with expert
    parallelism: the routed experts split over EP x PP, the rest over TP x PP
    (``parallel.shard_params``); context parallelism replicates the weights like DP. Megatron's
    CPU optimizer (``cpu_optimizer``, a share): that share of the master weights and moments
    lives in CPU memory, not on the GPU."""
    from .parallel import shard_params
    from .training import trained_params

    p = float(model.params_total)
    trained = trained_params(model, lora_rank)
    master = p + (trained if lora_rank > 0 else 0.0)  # frozen base + the adapters' own fp32 copy
    if strategy == "megatron":
        held = shard_params(model, tp, pp, ep)
        held_trained = held if lora_rank <= 0 else trained / (tp * pp)
        on_gpu = 1.0 - cpu_optimizer
        return {"weights_bf16": 2 * held, "master_fp32": 4 * master / n_gpus * on_gpu,
                "adam_moments": 8 * trained / n_gpus * on_gpu, "gradients": 4 * held_trained}
    return {"weights_bf16": FSDP_GATHERED_LAYERS * 2 * layer_params(model), "master_fp32": 4 * master / n_gpus,
            "adam_moments": 8 * trained / n_gpus, "gradients": 4 * trained / n_gpus}


@dataclass
class MemoryPlan:
    """Per-GPU bytes of the two phases of a colocated RL step, and the KV cache's capacity."""

    gpu_bytes: float
    training_state: dict  # component -> bytes (actor, critic, reference)
    activations: float  # peak micro-batch's saved activations
    activation_tokens: int  # tokens of that micro-batch
    rollout_weights: float  # bf16 weights / rollout TP
    engine_reserve: float
    kv_cache: float  # bytes of KV cache per GPU (0 when there is no room)
    kv_bytes_per_token: float  # per GPU
    kv_capacity_tokens: int  # tokens one engine holds
    rollout_resident: float  # trainer bytes kept during the rollout

    @property
    def training_state_total(self) -> float:
        return float(sum(self.training_state.values()))

    @property
    def train_peak(self) -> float:
        return self.training_state_total + self.activations

    @property
    def rollout_peak(self) -> float:
        return self.rollout_resident + self.rollout_weights + self.engine_reserve + self.kv_cache

    def to_dict(self) -> dict:
        """GB per GPU, and the KV capacity in tokens."""
        d = {k: v / GB for k, v in asdict(self).items() if isinstance(v, float)}
        d["training_state"] = {k: v / GB for k, v in self.training_state.items()}
        d["training_state_total"] = self.training_state_total / GB
        d["train_peak"] = self.train_peak / GB
        d["rollout_peak"] = self.rollout_peak / GB
        d["activation_tokens"] = self.activation_tokens
        d["kv_capacity_tokens"] = self.kv_capacity_tokens
        d["kv_bytes_per_token"] = self.kv_bytes_per_token  # bytes, not GB
        d["unit"] = "GB per GPU (estimated)"
        return d


def _micro_batch_tokens(cfg, seqs: int | None, budget: int | None, longest_seq: int, rank_tokens: int) -> int:
    """Tokens of the largest micro-batch: the token budget (dynamic batching), else ``seqs`` of
    the longest sequences (fixed size), else the whole rank's share (one micro-batch)."""
    if budget:
        return int(budget)
    if seqs:
        return int(seqs) * int(longest_seq)
    return int(rank_tokens) or int(longest_seq)


def memory_plan(cfg, longest_seq: int, eff: Efficiency = DEFAULT, seq_lens=None) -> MemoryPlan:
    """The memory of ``cfg`` (a ``RunConfig``) for a batch whose longest sequence is
    ``longest_seq`` (``seq_lens``, the batch's lengths, size the micro-batch when there is
    neither a token budget nor a sequence count)."""
    model, n = cfg.model, cfg.n_gpus
    mega = cfg.strategy == "megatron"
    tp, pp = (cfg.train_tp, cfg.train_pp) if mega else (1, 1)
    ep, cp = (getattr(cfg, "train_ep", 1), getattr(cfg, "train_cp", 1)) if mega else (1, 1)
    state: dict[str, float] = {}
    models = [("actor", model, True)]
    if cfg.use_critic:
        models.append(("critic", cfg.critic_model or model, False))
    act = 0.0
    tokens = 0
    rank_tokens = 0
    if seq_lens is not None and len(seq_lens):
        # contiguous chunks over the data-parallel ranks, as training.py splits them
        lens = np.asarray(seq_lens, dtype=np.int64)
        dp = max(1, n // (tp * pp * cp))
        bounds = np.linspace(0, len(lens), dp + 1).round().astype(int)
        rank_tokens = max(int(lens[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:]))
    for role, m, head in models:
        lora = cfg.lora_rank if role == "actor" else 0
        cpu_share = getattr(cfg, "cpu_optimizer", 0.0) if role == "actor" else 0.0
        for k, v in trainer_state_bytes(m, n, cfg.strategy, tp, pp, lora, ep if m.experts else 1, cpu_share).items():
            state[f"{role}_{k}"] = v
        seqs, budget = cfg.micro_batch_seqs, cfg.micro_batch_tokens
        stage = "update_actor" if role == "actor" else "update_critic"
        if stage in cfg.stage_micro_batches:
            seqs, budget = cfg.stage_micro_batches[stage]
        t = _micro_batch_tokens(cfg, seqs, budget, longest_seq, rank_tokens)
        per_tok = activation_bytes_per_token(m, layers=m.layers, checkpointing=cfg.gradient_checkpointing,
                                             lm_head=head)
        if mega:  # sequence parallelism splits a micro-batch's activations over TP, context parallelism over CP
            per_tok /= tp * cp
        if t * per_tok > act:
            act, tokens = t * per_tok, t
    if cfg.use_ref and not cfg.ref_offload and not cfg.lora_rank:
        # (under LoRA the reference is the actor with its adapters switched off: no second copy)
        from .parallel import shard_params

        ref = cfg.ref_model or model  # a teacher of its own, else the actor's initial weights
        state["ref_weights_bf16"] = 2.0 * (shard_params(ref, tp, pp, ep) if mega else ref.params_total / n)
    # kept through the rollout: master weights, moments, bf16 weights where persistent, reference;
    # less what verl's actor offload parks in CPU memory meanwhile
    offloaded = (("actor_master_fp32", "actor_weights_bf16") if cfg.param_offload else ()) + \
        (("actor_adam_moments",) if cfg.optimizer_offload else ())
    resident = float(sum(v for k, v in state.items() if not k.endswith("gradients") and k not in offloaded
                         and not (k.endswith("weights_bf16") and not mega and not k.startswith("ref"))))
    if not cfg.colocated:
        resident = 0.0  # a trainer of its own: no engine shares its GPUs
    engine = cfg.engine_model  # the weights as the engine holds them (FP8: linear layers one byte)
    rw = engine.weight_bytes() / cfg.rollout_tp
    kv = max(0.0, engine_kv_bytes(engine, cfg.gpu, cfg.rollout_tp, cfg.mem_fraction, eff))
    kv_tok = kv_bytes_per_token_per_gpu(engine, cfg.rollout_tp)
    return MemoryPlan(cfg.gpu.memory_gb * GB, state, act, tokens, rw, eff.engine_reserve_bytes, kv, kv_tok,
                      int(kv // kv_tok), resident)


def check_feasibility(cfg, longest_seq: int, *, rollout_tp_given: bool, eff: Efficiency = DEFAULT,
                      seq_lens=None) -> tuple[MemoryPlan, list[str]]:
    """Raise ``PolytraceError`` for a setup that cannot run; return the memory plan and warnings
    for one that runs only with help the estimate does not price (offload, a smaller share).

    Errors are setups no framework would start, so any time printed for them would be fiction:
    a micro-batch budget below the longest sequence (verl's dynamic batching asserts: a sequence
    is never split across micro-batches), and an engine whose KV cache cannot hold one sequence of
    the configured maximum length (vLLM refuses to start when ``max_model_len`` exceeds the cache).
    Warnings are setups that run with changes the estimate ignores: trainer state over the GPU
    (it fits only if FSDP keeps parameters and optimizer in CPU memory while computing, not priced
    here) and a rollout share that does not leave room for the trainer's resident state (verl's
    ``--param-offload`` / ``--optimizer-offload``, priced, park it in CPU memory meanwhile)."""
    model, gpu, n = cfg.engine_model, cfg.gpu, cfg.n_gpus  # the engine's checks: its weights as it holds them
    check_micro_batches(cfg, longest_seq)
    max_model_len = cfg.max_prompt_len + cfg.max_response_len
    need = max(longest_seq, max_model_len)
    gb = gpu.memory_gb

    def room(tp: int) -> float:
        return engine_kv_bytes(model, gpu, tp, cfg.mem_fraction, eff) / kv_bytes_per_token_per_gpu(model, tp)

    from .checks import gpus_where_state_fits, tp_splits_heads

    largest = max(t for t in range(1, n + 1) if n % t == 0 and tp_splits_heads(model, t))
    if room(largest) < need:
        raise PolytraceError(
            f"{model.name} cannot serve a {need}-token sequence on {n} x {gpu.slug} even at rollout TP {largest}: "
            f"weights {model.weight_bytes() / largest / GB:.1f} GB per GPU + {eff.engine_reserve_bytes / GB:.0f} GB "
            f"engine reserve leave {max(0.0, room(largest)):.0f} tokens of KV cache in --mem-fraction "
            f"{cfg.mem_fraction:g} of {gb:g} GB; " + _gpus_that_serve(model, n, need, room))
    if room(cfg.rollout_tp) < need:
        fit = next(t for t in range(cfg.rollout_tp, n + 1) if n % t == 0 and tp_splits_heads(model, t)
                   and room(t) >= need)
        what = "--rollout-tp" if rollout_tp_given else "rollout TP"
        raise PolytraceError(
            f"{what} {cfg.rollout_tp}: {model.name} weights {model.weight_bytes() / cfg.rollout_tp / GB:.1f} GB "
            f"per GPU leave KV cache for {max(0.0, room(cfg.rollout_tp)):.0f} tokens, below one {need}-token "
            f"sequence, at --mem-fraction {cfg.mem_fraction:g}; use --rollout-tp {fit} or more")
    plan = memory_plan(cfg, longest_seq, eff, seq_lens)
    if plan.training_state_total > plan.gpu_bytes:  # no micro-batch size helps: an error, not a warning
        import dataclasses

        fits = gpus_where_state_fits(cfg, lambda k: memory_plan(dataclasses.replace(cfg, n_gpus=k), longest_seq, eff,
                                                                seq_lens).training_state_total)
        raise PolytraceError(
            f"--gpus {n}: {model.name}'s training state is {plan.training_state_total / GB:.0f} GB per GPU on a "
            f"{gb:g} GB {gpu.slug} (bf16 weights, fp32 master weights, gradients and Adam moments"
            + (", reference weights" if cfg.use_ref else "") + "); "
            + (f"use --gpus {fits} or more" if fits else "use many more GPUs")
            + (", or --strategy megatron with --train-tp" if cfg.strategy == "fsdp" else
               ", or --cpu-optimizer 1 (Megatron's optimizer in CPU memory)" if getattr(cfg, "cpu_optimizer", 0.0) < 1
               else "")
            + (", or --lora-rank" if not cfg.lora_rank else ""))
    warnings = []
    if plan.train_peak > plan.gpu_bytes:
        hint = ("more --gpus, --strategy megatron with --train-tp, or a smaller --micro-batch-tokens"
                if cfg.strategy == "fsdp" else "more --gpus, a larger --train-tp / --train-pp, or a smaller "
                "--micro-batch-tokens")
        warnings.append(
            f"training needs {plan.train_peak / GB:.0f} GB per GPU (state {plan.training_state_total / GB:.0f} GB + "
            f"activations {plan.activations / GB:.0f} GB) on a {gb:g} GB {gpu.slug}: it runs only if the state leaves "
            f"the GPU while it computes (FSDP CPU offload of parameters and optimizer), which this estimate does not "
            f"price (--param-offload/--optimizer-offload price verl's offload between stages, which frees the "
            f"rollout, not the update); try {hint}")
    if plan.rollout_peak > plan.gpu_bytes:
        warnings.append(
            f"rollout needs {plan.rollout_peak / GB:.0f} GB per GPU (trainer state kept "
            f"{plan.rollout_resident / GB:.0f} GB + engine share {cfg.mem_fraction * gb:.0f} GB) on a {gb:g} GB "
            f"{gpu.slug}: lower --mem-fraction, or park the trainer in CPU memory during the rollout with "
            f"--param-offload / --optimizer-offload (priced)")
    return plan, warnings


def _gpus_that_serve(model, n: int, need: int, room) -> str:
    """The nearest GPU count above ``n`` with a rollout TP that splits the heads and holds one
    ``need``-token sequence (a multiple of the smallest such TP)."""
    from .checks import tp_splits_heads

    tp = next((t for t in range(1, 4 * int(model.heads) + 1) if tp_splits_heads(model, t) and room(t) >= need), None)
    if tp is None:
        return "raise --mem-fraction"
    return f"use --gpus {-(-(n + 1) // tp) * tp} (rollout TP {tp}) or raise --mem-fraction"


def check_micro_batches(cfg, longest_seq: int) -> None:
    """A micro-batch token budget below the longest sequence cannot run: verl's dynamic batching
    never splits a sequence across micro-batches."""
    budgets = [cfg.micro_batch_tokens] + [tok for _, tok in cfg.stage_micro_batches.values()]
    for budget in budgets:
        if budget and budget < longest_seq:
            raise PolytraceError(
                f"--micro-batch-tokens {budget} is smaller than the longest sequence of the sampled batch "
                f"({longest_seq} tokens); a sequence cannot be split across micro-batches")


def smallest_rollout_tp(model: ModelSpec, gpu: GPU, n_gpus: int, mem_fraction: float, need_tokens: int,
                        eff: Efficiency = DEFAULT) -> int | None:
    """The smallest TP dividing ``n_gpus`` and splitting the heads (vLLM's rule) whose KV cache
    holds one ``need_tokens`` sequence."""
    from .checks import tp_splits_heads

    for tp in range(1, n_gpus + 1):
        if n_gpus % tp or not tp_splits_heads(model, tp):
            continue
        kv = engine_kv_bytes(model, gpu, tp, mem_fraction, eff)
        if kv / kv_bytes_per_token_per_gpu(model, tp) >= need_tokens:
            return tp
    return None


__all__ = ["MemoryPlan", "activation_bytes_per_token", "check_feasibility", "check_micro_batches", "engine_kv_bytes",
           "kv_bytes_per_token_per_gpu", "memory_plan", "smallest_rollout_tp", "trainer_state_bytes"]
