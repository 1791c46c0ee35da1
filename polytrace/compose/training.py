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
    mini_batches: int = 1  # optimizer steps per update pass, each waiting for the slowest rank
    balance: bool = True  # verl's trainer.balance_batch: equal-count, token-balanced ranks (``rank_indices``)
    lora_rank: int = 0  # LoRA adapters of this rank train; the base weights stay frozen

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


def rank_indices(lens: np.ndarray, dp: int, balance: bool = True) -> list[np.ndarray]:
    """Which sequences each data-parallel rank gets. ``balance`` (verl's ``trainer.balance_batch``,
    on by default): the same number of sequences per rank with near-equal token sums (longest
    first, dealt to the ranks back and forth), each rank keeping them in batch order, as verl's
    balanced partitions do; a prompt's long responses land on different ranks. Otherwise
    contiguous chunks in batch order (a prompt's responses stay together)."""
    n = len(lens)
    if not balance or dp <= 1 or n == 0:
        bounds = np.linspace(0, n, dp + 1).round().astype(int)
        return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    order = np.argsort(-np.asarray(lens), kind="stable")
    lap = np.arange(n) % (2 * dp)
    rank = np.where(lap < dp, lap, 2 * dp - 1 - lap)
    return [np.sort(order[rank == r]) for r in range(dp)]


def lora_params(model: ModelSpec, rank: int) -> float:
    """Parameters of rank-``rank`` LoRA adapters on every linear layer of the decoder (verl's
    ``target_modules=all-linear``: q, k, v, o, gate, up, down; each adapter ``r x (in + out)``;
    MoE: every expert's MLP; the LM head and embeddings stay frozen without adapters)."""
    if rank <= 0:
        return 0.0
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    attn = (h + q) + 2 * (h + kv) + (q + h)
    if model.experts:
        mlp = 3 * (h + model.moe_intermediate) * (model.experts + model.shared_experts)
    else:
        mlp = 3 * (h + model.intermediate)
    return float(rank * (attn + mlp) * model.layers)


def lora_flops_per_token(model: ModelSpec, rank: int) -> float:
    """Forward FLOPs of the adapters per token: ``x A`` then ``(x A) B``, 2 r (in + out) per
    adapted linear layer (MoE: the active experts' only)."""
    if rank <= 0:
        return 0.0
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    attn = (h + q) + 2 * (h + kv) + (q + h)
    inter = model.moe_intermediate if model.experts else model.intermediate
    mlp = 3 * (h + inter) * ((model.active_experts + model.shared_experts) if model.experts else 1)
    return 2.0 * rank * (attn + mlp) * model.layers


@dataclass
class _RankCost:
    kernels: dict[str, float]
    sources: dict[str, str]
    comm_s: float
    micro_batches: int
    flops: float
    hidden_comm_s: float = 0.0  # of ``comm_s``, what can hide behind compute (FSDP's backward)
    hide_s: float = 0.0  # the backward compute it hides behind (at the roofline)

    @property
    def exposed_comm_s(self) -> float:
        """The collectives nothing hides. FSDP (verl's defaults: backward prefetch on, forward
        prefetch off) gathers each layer's parameters just before its forward, in series, while
        the backward's gathers and gradient reduce-scatters overlap the backward's compute;
        Megatron's tensor-parallel all-reduces sit between the matmuls. The compute that hides
        them is taken at the roofline, so a kernel family's what-if (a measured provider, a
        speedup) moves that family's time only and the breakdown stays a sum of parts."""
        return self.comm_s - self.hidden_comm_s + max(0.0, self.hidden_comm_s - self.hide_s)

    @property
    def time_s(self) -> float:
        return sum(self.kernels.values()) + self.exposed_comm_s


def pass_cost(model: ModelSpec, gpu: GPU, seq_lens, layout: TrainerLayout, *, backward: bool,
              lm_head: bool = True, eff: Efficiency = DEFAULT, pricer: Pricer | None = None) -> PassCost:
    """One pass over the batch: forward only (``backward=False``: log-prob, values) or forward and
    backward (an update). Each rank's device time is a sum of kernel families (linear layers,
    attention, LM head and log-prob, packing), each priced by ``pricer`` from measured timings
    where it has them, else at the roofline (the default).

    An update takes ``layout.mini_batches`` optimizer steps: each rank cuts its sequences into
    that many mini-batches (verl's ``ppo_mini_batch_size``), every one at least one micro-batch,
    and every optimizer step waits for the slowest rank, so the pass is the sum over mini-batches
    of the slowest rank's time. With many GPUs a rank holds a few sequences per mini-batch and
    the one holding the longest sets the time: the trainer's own long tail."""
    pricer = pricer or Pricer(gpu, eff)
    lens = np.asarray(seq_lens, dtype=np.float64)
    dp = layout.dp
    groups = max(1, int(layout.mini_batches)) if backward else 1
    # per rank, its sequences cut into the optimizer steps' mini-batches (contiguous, as verl splits)
    shares = [np.array_split(lens[idx], groups) for idx in rank_indices(lens, dp, layout.balance)]
    total = PassCost(0.0, 0.0, 0.0, 0.0, 0, 0.0)
    kernels: dict[str, float] = {}
    sources: dict[str, str] = {}
    model_shards = layout.tp * layout.pp
    for j in range(groups):
        ranks = [_rank_cost(model, gpu, share[j], layout, backward=backward, lm_head=lm_head, eff=eff,
                            pricer=pricer) for share in shares]
        rank_times = [r.time_s for r in ranks]
        slowest_i = int(np.argmax(rank_times)) if rank_times else 0
        slowest = rank_times[slowest_i] if rank_times else 0.0
        # the slowest rank's kernels, and the collective time its compute does not hide
        fam = dict(ranks[slowest_i].kernels) if ranks else {}
        compute = sum(fam.values())
        comm = slowest - compute
        for k, v in fam.items():
            kernels[k] = kernels.get(k, 0.0) + v
        for r in ranks:
            for k, v in r.sources.items():
                sources.setdefault(k, v)
        total.time_s += slowest
        total.comm_s += comm
        total.compute_s += compute
        total.flops += sum(r.flops for r in ranks)
        total.micro_batches += max((r.micro_batches for r in ranks), default=0)
        total.imbalance_gpu_s += sum(slowest - t for t in rank_times) * model_shards
    host = total.micro_batches * host_seconds_per_micro_batch(model, layout, backward=backward, eff=eff) \
        * pricer.scale("host")
    plan, plan_src = (pricer.planning(len(lens)) if layout.micro_batch_tokens and len(lens) else (0.0, "roofline"))
    return PassCost(total.time_s + host + plan, total.compute_s, total.comm_s, total.flops, total.micro_batches,
                    total.imbalance_gpu_s, host, kernels, sources, plan, plan_src)


def _rank_cost(model: ModelSpec, gpu: GPU, chunk: np.ndarray, layout: TrainerLayout, *, backward: bool,
               lm_head: bool, eff: Efficiency, pricer: Pricer) -> _RankCost:
    """Device seconds by kernel family and collective seconds of one rank's share of a pass."""
    lora = layout.lora_rank > 0
    fwd_passes = 2 if backward and layout.gradient_checkpointing else 1
    # matmul passes: the forward (again with activation checkpointing) and, in an update, the
    # input gradient and (unless LoRA freezes the weights) the weight gradient
    mult = fwd_passes + (0 if not backward else (1 if lora else 2))
    # attention's backward recomputes QK^T: five matmuls against the forward's two, 2.5x its FLOPs
    attn_mult = 1.0 if not backward else fwd_passes + 2.5
    rate = gpu.ceiling("bf16") * eff.gemm
    attn_rate = gpu.ceiling("bf16") * eff.attention
    model_shards = layout.tp * layout.pp
    layers = model.layers / layout.pp
    weight_bytes = model.weight_bytes()
    head_flops = 2.0 * model.lm_head_params if lm_head else 0.0  # per token
    body_flops = model.matmul_flops_per_token(lm_head) - head_flops
    # adapters: forward, and in an update both gradients (their weights train)
    adapter_flops = lora_flops_per_token(model, layout.lora_rank) * (fwd_passes + (2 if backward else 0))
    fused = lm_head and pricer.fused_logprob(backward)  # the LM head inside the log-prob kernel
    if not layout.remove_padding and len(chunk):  # every sequence padded to the configured maximum
        chunk = np.full(len(chunk), float(layout.pad_to or chunk.max(initial=0)))
    tokens = float(chunk.sum())
    pairs = float((chunk * (chunk + 1) / 2).sum())
    flops = (model.matmul_flops_per_token(lm_head) * tokens * mult + adapter_flops * tokens
             + model.attn_flops_per_pair * pairs * attn_mult)
    n_micro = _micro_batches(chunk, layout)
    fam: dict[str, float] = {}
    src: dict[str, str] = {}
    if tokens > 0:
        per_mb = tokens / n_micro
        launches = n_micro * layers
        fam["gemm"], src["gemm"] = pricer.gemm(
            model, per_mb, launches, tp=layout.tp, fwd_passes=fwd_passes, backward=backward, weight_grads=not lora,
            roofline_s=body_flops * tokens * mult / (rate * model_shards))
        if lora:  # rank-r matmuls: far below any measured GEMM shape, at the roofline
            fam["gemm"] += adapter_flops * tokens / (rate * model_shards) * pricer.scale("gemm")
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
                                                backward=backward, weight_grads=not lora,
                                                roofline_s=head_flops * tokens * mult / (rate * model_shards))
                fam["gemm"] += head
                if head_src != src["gemm"]:
                    src["gemm"] = f"{src['gemm']} + {head_src}"
        if layout.remove_padding:
            fam["packing"], src["packing"] = pricer.packing(
                tokens=per_mb, seqs=len(chunk) / n_micro, max_len=float(chunk.max()), n_micro=n_micro,
                outputs=2 if lm_head else 1, backward=backward)
    comm = 0.0
    if layout.strategy == "fsdp" and layout.n_gpus > 1:
        # per micro-batch: the forward all-gathers the parameters; the backward gathers them
        # again (activation recomputation reuses that gather) and reduce-scatters gradients
        # in fp32 (verl's FSDP mixed precision), twice the bytes of a bf16 gather; under LoRA
        # only the adapters' gradients move (under 1% of the weights: left out). Across nodes
        # the collectives run at the NIC's rate.
        link = gpu.link_gbps(layout.n_gpus) * 1e9 * eff.comm
        per_gather = weight_bytes * (layout.n_gpus - 1) / layout.n_gpus / link * pricer.scale("comm")
        bwd = n_micro * (1 if lora else 3) * per_gather if backward else 0.0
        # the backward's matmuls at the roofline (the input and weight gradients)
        hide = body_flops * tokens * (mult - fwd_passes) / (rate * model_shards) if backward else 0.0
        return _RankCost(fam, src, n_micro * per_gather + bwd, n_micro, flops, hidden_comm_s=bwd, hide_s=hide)
    elif layout.strategy == "megatron":
        if layout.tp > 1:
            act = 2.0 * model.hidden * tokens * 2 * (layout.tp - 1) / layout.tp
            comm += layers * act * (3 if backward else 1) / (gpu.link_gbps(layout.tp) * 1e9 * eff.comm)
        if layout.pp > 1 and n_micro:
            bubble = (n_micro + layout.pp - 1) / n_micro  # pipeline bubble
            fam = {k: v * bubble for k, v in fam.items()}
        dp = layout.dp
        if backward and dp > 1:
            grads = 2 * (lora_params(model, layout.lora_rank) * 2 if lora else weight_bytes) / model_shards
            comm += grads * (dp - 1) / dp / (gpu.link_gbps(layout.n_gpus) * 1e9 * eff.comm)
    return _RankCost(fam, src, comm * pricer.scale("comm"), n_micro, flops)


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


def optimizer_seconds(model: ModelSpec, gpu: GPU, n_gpus: int, steps: int, lora_rank: int = 0) -> float:
    """AdamW over the local shard: fp32 master weights, grads and two moments read and written
    (~32 bytes per parameter), ``steps`` times (one per mini-batch); under LoRA only the
    adapters' parameters."""
    params = lora_params(model, lora_rank) if lora_rank > 0 else model.params_total
    return steps * 32.0 * params / max(1, n_gpus) / gpu.ceiling("hbm")


def offload_seconds(model: ModelSpec, n_gpus: int, eff: Efficiency = DEFAULT) -> float:
    """Loading offloaded parameters back to the GPUs (FSDP param offload of the reference)."""
    return model.weight_bytes() / max(1, n_gpus) / (eff.pcie_gbps * 1e9)
