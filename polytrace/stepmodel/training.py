"""Forward (log-prob, values) and update (actor, critic) time of one RL step on the trainer.

Device time is a sum of kernel families (``pricing.py``): the decoder's linear layers, causal
attention, the LM head with the log-prob and entropy over the vocabulary, and packing; each from
measured timings where a ``Pricer`` has them, else FLOPs or bytes over the roofline at its
efficiency (linear layers at ``gemm``, attention at ``attention``, the logits passes at
``elementwise_hbm``). Sequences are dealt to the data-parallel ranks as verl deals them
(``rank_indices``: token-balanced with ``trainer.balance_batch``, else contiguous chunks); at
every optimizer step the slowest rank sets the time and the others' wait is reported as rank
imbalance. Without padding removal every sequence of a micro-batch costs as much as the
configured maximum length (verl pads prompts and responses to the configured maxima). FSDP adds
a parameter all-gather per micro-batch pass and a gradient reduce-scatter; Megatron adds
tensor-parallel all-reduces, the pipeline bubble (interleaved over virtual stages; it stretches a
stage's exposed collectives with its matmuls), and with
expert or context parallelism the MoE all-to-alls, the busiest expert rank and the context ring
(``parallel.py``). A tensor-parallel shard of a linear layer is priced as the whole layer at the
same tokens over tp (``pricing.py``); context parallelism gives each GPU 1/cp of the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..run.hardware import GPU
from ..run.models import ModelSpec
from ..run.spec import default
from .efficiency import DEFAULT, Efficiency
from .families import Work, trainer_families
from .parallel import all_to_all_seconds, expert_flops_share, pipeline_bubble, ring_kv_seconds, shard_params
from .pricing import Pricer


@dataclass
class TrainerLayout:
    n_gpus: int
    strategy: str = default("strategy")  # "fsdp" or "megatron"
    tp: int = 1
    pp: int = 1
    micro_batch_seqs: int | None = None  # sequences per micro-batch per GPU (fixed-size batching)
    micro_batch_tokens: int | None = None  # token budget per micro-batch per GPU (dynamic batching)
    remove_padding: bool = default("remove_padding")
    pad_to: int | None = None  # padded sequence length when remove_padding is False
    gradient_checkpointing: bool = default("gradient_checkpointing")
    mini_batches: int = 1  # optimizer steps per update pass, each waiting for the slowest rank
    balance: bool = True  # verl's trainer.balance_batch: equal-count, token-balanced ranks (``rank_indices``)
    lora_rank: int = 0  # LoRA adapters of this rank train; the base weights stay frozen
    ep: int = 1  # Megatron expert parallelism (``parallel.py``)
    cp: int = 1  # Megatron context parallelism: each sequence split over cp GPUs
    vpp: int = 1  # Megatron virtual pipeline (interleaved 1F1B) chunks per stage
    # Transformer Engine FP8 GEMMs (``RunConfig.train_precision``): the linear layers at the FP8
    # tensor-core peak; attention, the optimizer and the weights kept stay bf16 / fp32
    fp8: bool = False

    @property
    def dp(self) -> int:
        return max(1, self.n_gpus // max(1, self.tp * self.pp * self.cp))

    @property
    def model_shards(self) -> int:
        """GPUs one data-parallel rank's sequences are computed on (TP x PP x CP)."""
        return self.tp * self.pp * self.cp


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


def trained_params(model: ModelSpec, lora_rank: int = 0) -> float:
    """Parameters the optimizer updates: the model's, or under LoRA its adapters' only."""
    return lora_params(model, lora_rank) if lora_rank > 0 else float(model.params_total)


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


def synced_weight_bytes(model: ModelSpec, lora_rank: int = 0) -> float:
    """The bf16 bytes a weight sync into the engines moves: under LoRA the adapters alone, else
    the whole model (the separated weight sync and the colocated refit alike)."""
    return 2.0 * lora_params(model, lora_rank) if lora_rank > 0 else float(model.weight_bytes())


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
class _RankCosts:
    """Per rank (arrays over the ranks of a pass's optimizer steps, step-major): device seconds
    by kernel family and collective seconds."""

    kernels: dict[str, np.ndarray]
    sources: dict[str, str]
    comm_s: np.ndarray
    micro_batches: np.ndarray
    flops: np.ndarray
    tokens: np.ndarray
    hidden_comm_s: np.ndarray | float = 0.0  # of ``comm_s``, what can hide behind compute (FSDP's backward)
    hide_s: np.ndarray | float = 0.0  # the backward compute it hides behind (at the roofline)
    hidden_fwd_comm_s: np.ndarray | float = 0.0  # of ``comm_s``, what can hide behind the forward (FSDP)
    hide_fwd_s: np.ndarray | float = 0.0  # the forward compute it hides behind (at the roofline)

    @property
    def exposed_comm_s(self) -> np.ndarray:
        """The collectives nothing hides. FSDP issues its all-gathers on a separate CUDA stream:
        in the forward the next layer's gather overlaps the current layer's compute (PyTorch's
        "implicit forward prefetching", always on; only the first layer's gather waits: see
        docs.pytorch.org/docs/stable/notes/fsdp.html), and with verl's backward prefetch the
        backward's gathers and gradient reduce-scatters overlap the backward's compute;
        Megatron's tensor-parallel all-reduces sit between the matmuls. The compute that hides
        them is taken at the roofline, so a kernel family's what-if (a measured provider, a
        speedup) moves that family's time only and the breakdown stays a sum of parts."""
        hidden = self.hidden_comm_s + self.hidden_fwd_comm_s
        return (self.comm_s - hidden + np.maximum(0.0, self.hidden_comm_s - self.hide_s)
                + np.maximum(0.0, self.hidden_fwd_comm_s - self.hide_fwd_s))

    @property
    def time_s(self) -> np.ndarray:
        total = np.zeros_like(self.comm_s)
        for v in self.kernels.values():
            total = total + v
        return total + self.exposed_comm_s


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
    the one holding the longest sets the time: the trainer's own long tail.

    Every rank of every optimizer step is priced at once (arrays over them: a 1,000-step log's
    trainer passes cost ~1/10 of pricing them rank by rank), the same arithmetic per rank."""
    pricer = pricer or Pricer(gpu, eff)
    lens = np.asarray(seq_lens, dtype=np.float64)
    dp = layout.dp
    groups = max(1, int(layout.mini_batches)) if backward else 1
    # per rank, its sequences cut into the optimizer steps' mini-batches (contiguous, as verl splits)
    shares = [_split(lens[idx], groups) for idx in rank_indices(lens, dp, layout.balance)]
    chunks = [share[j] for j in range(groups) for share in shares]  # optimizer step-major
    costs = _rank_costs(model, gpu, chunks, layout, backward=backward, lm_head=lm_head, eff=eff, pricer=pricer)
    n_ranks = len(shares)
    times = costs.time_s.reshape(groups, n_ranks) if n_ranks else np.zeros((groups, 0))
    total = PassCost(0.0, 0.0, 0.0, 0.0, 0, 0.0)
    kernels: dict[str, float] = {}
    sources = dict(costs.sources) if bool((costs.tokens > 0).any()) else {}
    model_shards = layout.model_shards
    micro = costs.micro_batches.reshape(groups, n_ranks) if n_ranks else np.zeros((groups, 0), dtype=np.int64)
    flops = costs.flops.reshape(groups, n_ranks) if n_ranks else np.zeros((groups, 0))
    for j in range(groups):
        rank_times = times[j].tolist()
        slowest_i = int(np.argmax(times[j])) if rank_times else 0
        slowest = rank_times[slowest_i] if rank_times else 0.0
        # the slowest rank's kernels, and the collective time its compute does not hide
        at = j * n_ranks + slowest_i
        fam = ({k: float(v[at]) for k, v in costs.kernels.items()}
               if rank_times and costs.tokens[at] > 0 else {})
        compute = sum(fam.values())
        comm = slowest - compute
        for k, v in fam.items():
            kernels[k] = kernels.get(k, 0.0) + v
        total.time_s += slowest
        total.comm_s += comm
        total.compute_s += compute
        total.flops += sum(flops[j].tolist())
        total.micro_batches += int(micro[j].max()) if rank_times else 0
        total.imbalance_gpu_s += sum(slowest - t for t in rank_times) * model_shards
    host = total.micro_batches * host_seconds_per_micro_batch(model, layout, backward=backward, eff=eff) \
        * pricer.scale("host")
    plan, plan_src = (pricer.planning(len(lens)) if layout.micro_batch_tokens and len(lens) else (0.0, "roofline"))
    return PassCost(total.time_s + host + plan, total.compute_s, total.comm_s, total.flops, total.micro_batches,
                    total.imbalance_gpu_s, host, kernels, sources, plan, plan_src)


def _split(a: np.ndarray, parts: int) -> list[np.ndarray]:
    """``np.array_split(a, parts)`` (the first ``len(a) % parts`` parts one longer), by slicing."""
    size, extra = divmod(len(a), parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    return [a[bounds[i]:bounds[i + 1]] for i in range(parts)]


def _chunk_stats(chunks: list[np.ndarray], layout: TrainerLayout):
    """Per chunk: sequences, tokens, sum of L(L+1)/2, sum of L^2 and the longest, after verl's
    padding to the configured maximum when padding is kept (whole numbers: the sums are exact)."""
    counts = np.array([len(c) for c in chunks], dtype=np.int64)
    n = len(chunks)
    tokens, pairs, squares, longest = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    full = counts > 0
    if full.any():
        values = np.concatenate([c for c in chunks if len(c)])
        starts = np.concatenate([[0], np.cumsum(counts[full])[:-1]])
        longest[full] = np.maximum.reduceat(values, starts)
        if not layout.remove_padding:  # every sequence padded to the configured maximum
            pad = np.full(int(full.sum()), float(layout.pad_to)) if layout.pad_to else longest[full]
            values = np.repeat(pad, counts[full])
            longest[full] = pad
        tokens[full] = np.add.reduceat(values, starts)
        pairs[full] = np.add.reduceat(values * (values + 1) / 2, starts)
        squares[full] = np.add.reduceat(values * values, starts)
    return counts, tokens, pairs, squares, longest


def _rank_costs(model: ModelSpec, gpu: GPU, chunks: list[np.ndarray], layout: TrainerLayout, *, backward: bool,
                lm_head: bool, eff: Efficiency, pricer: Pricer) -> _RankCosts:
    """Device seconds by kernel family and collective seconds of each rank's share of a pass
    (``chunks``: one array of sequence lengths per rank and optimizer step)."""
    lora = layout.lora_rank > 0
    fwd_passes = 2 if backward and layout.gradient_checkpointing else 1
    # matmul passes: the forward (again with activation checkpointing) and, in an update, the
    # input gradient and (unless LoRA freezes the weights) the weight gradient
    mult = fwd_passes + (0 if not backward else (1 if lora else 2))
    # attention's backward recomputes QK^T: five matmuls against the forward's two, 2.5x its FLOPs
    attn_mult = 1.0 if not backward else fwd_passes + 2.5
    rate = gpu.ceiling("fp8" if layout.fp8 else "bf16") * eff.gemm
    attn_rate = gpu.ceiling("bf16") * eff.attention
    model_shards = layout.model_shards
    cp = layout.cp  # each GPU of a context-parallel group computes 1/cp of a micro-batch's tokens
    layers = model.layers / layout.pp
    weight_bytes = model.weight_bytes()
    head_flops = 2.0 * model.lm_head_params if lm_head else 0.0  # per token
    body_flops = model.matmul_flops_per_token(lm_head) - head_flops
    # adapters: forward, and in an update both gradients (their weights train)
    adapter_flops = lora_flops_per_token(model, layout.lora_rank) * (fwd_passes + (2 if backward else 0))
    fused = lm_head and pricer.fused_logprob(backward)  # the LM head inside the log-prob kernel
    counts, tokens, pairs, squares, longest = _chunk_stats(chunks, layout)
    flops = (model.matmul_flops_per_token(lm_head) * tokens * mult + adapter_flops * tokens
             + model.attn_flops_per_pair * pairs * attn_mult)
    if layout.micro_batch_tokens:
        n_micro = np.ceil(tokens / layout.micro_batch_tokens).astype(np.int64)
    else:
        mb = np.full(len(chunks), layout.micro_batch_seqs) if layout.micro_batch_seqs else np.maximum(counts, 1)
        n_micro = np.ceil(counts / mb).astype(np.int64)
    n_micro = np.where(counts > 0, n_micro, 0)
    busy = tokens > 0  # a rank without tokens launches nothing
    safe_micro = np.where(busy, n_micro, 1)
    fam: dict[str, np.ndarray] = {}
    src: dict[str, str] = {}
    if busy.any():
        per_mb = tokens / safe_micro
        launches = n_micro * layers
        fam["gemm"], src["gemm"] = pricer.gemm(
            model, per_mb / cp, launches, layout, fwd_passes=fwd_passes, backward=backward,
            roofline_s=body_flops * tokens * mult / (rate * model_shards))
        if layout.ep > 1:  # the busiest expert-parallel rank's experts set the time
            fam["gemm"] = fam["gemm"] * (1.0 + expert_flops_share(model) * (eff.moe_load_imbalance - 1.0))
        if lora:  # rank-r matmuls: far below any measured GEMM shape, at the roofline (and labelled so)
            fam["gemm"] = fam["gemm"] + adapter_flops * tokens / (rate * model_shards) * pricer.scale("gemm")
            if not src["gemm"].startswith("roofline"):
                src["gemm"] += " + roofline (LoRA adapters)"
        fam["attention"], src["attention"] = pricer.attention(
            model, squares / safe_micro / cp, launches, tp=layout.tp, fwd_passes=fwd_passes, backward=backward,
            roofline_s=model.attn_flops_per_pair * pairs * attn_mult / (attn_rate * model_shards))
        if lm_head:  # log-softmax and entropy over the vocabulary: memory-bound passes over the logits
            logit_bytes = tokens * model.vocab * eff.logit_bytes_per_element * (3.0 if backward else 1.0)
            fam["logprob"], src["logprob"] = pricer.logprob(
                model, per_mb / cp, n_micro, tp=layout.tp, backward=backward,
                roofline_s=logit_bytes / (gpu.ceiling("hbm") * eff.elementwise_hbm * layout.tp * cp))
            if not fused:
                head, head_src = pricer.lm_head(model, per_mb / cp, n_micro, tp=layout.tp, fwd_passes=fwd_passes,
                                                backward=backward, weight_grads=not lora,
                                                roofline_s=head_flops * tokens * mult / (rate * model_shards))
                fam["gemm"] = fam["gemm"] + head
                if head_src != src["gemm"]:
                    src["gemm"] = f"{src['gemm']} + {head_src}"
        if layout.remove_padding:
            fam["packing"], src["packing"] = pricer.packing(
                tokens=per_mb, seqs=counts / safe_micro, max_len=longest, n_micro=n_micro,
                outputs=2 if lm_head else 1, backward=backward)
        work = Work(model, per_mb / cp, counts / safe_micro, longest, n_micro, layout.tp, backward)
        for entry in trainer_families():  # families registered with their own trainer work (families.py)
            fam[entry.name], src[entry.name] = pricer.family(entry.name, work)
        fam = {k: np.where(busy, np.broadcast_to(v, busy.shape), 0.0) for k, v in fam.items()}
    zero = np.zeros(len(chunks))
    if layout.strategy == "fsdp" and layout.n_gpus > 1:
        # per micro-batch: the forward all-gathers the parameters; the backward gathers them
        # again (activation recomputation reuses that gather) and reduce-scatters gradients
        # in fp32 (verl's FSDP mixed precision), twice the bytes of a bf16 gather; under LoRA
        # only the adapters' gradients move (under 1% of the weights: left out). Across nodes
        # the rings run over every NIC of a node (``GPU.collective_gbps``).
        link = gpu.collective_gbps(layout.n_gpus) * 1e9 * eff.comm
        per_gather = weight_bytes * (layout.n_gpus - 1) / layout.n_gpus / link * pricer.scale("comm")
        bwd = n_micro * (1 if lora else 3) * per_gather if backward else zero
        # the backward's matmuls at the roofline (the input and weight gradients)
        hide = body_flops * tokens * (mult - fwd_passes) / (rate * model_shards) if backward else zero
        # the forward's gathers behind the forward's matmuls, all but the first layer's
        fwd = n_micro * per_gather
        fwd_hidden = fwd * (1.0 - 1.0 / max(1.0, layers))
        fwd_hide = body_flops * tokens / (rate * model_shards)
        return _RankCosts(fam, src, fwd + bwd, n_micro, flops, tokens, hidden_comm_s=bwd,
                          hide_s=hide, hidden_fwd_comm_s=fwd_hidden, hide_fwd_s=fwd_hide)
    comm = zero
    if layout.strategy == "megatron":
        if layout.tp > 1:
            act = 2.0 * model.hidden * tokens / cp * 2 * (layout.tp - 1) / layout.tp
            comm = comm + layers * act * (3 if backward else 1) / (gpu.link_gbps(layout.tp) * 1e9 * eff.comm)
        passes = fwd_passes + (2 if backward else 0)
        comm = comm + all_to_all_seconds(model, gpu, tokens / (layout.tp * cp), layout.ep, layout.ep, passes,
                                         eff) / layout.pp
        if cp > 1:  # the ring's KV exchange, exposed where the attention blocks do not cover it
            ring = ring_kv_seconds(model, gpu, tokens / cp, cp, layout.tp, backward, eff) / layout.pp
            comm = comm + np.maximum(0.0, ring - fam.get("attention", 0.0))
        if layout.pp > 1:  # a stage's micro-batch time (its exposed collectives with it) over fill and drain
            bubble = pipeline_bubble(n_micro, layout.pp, layout.vpp)
            fam = {k: v * bubble for k, v in fam.items()}
            comm = comm * bubble
        dp = layout.dp * cp  # gradients are reduced over the data- and context-parallel ranks
        if backward and dp > 1:
            shard = (lora_params(model, layout.lora_rank) * 2 * 2 / (layout.tp * layout.pp) if lora
                     else 2.0 * shard_params(model, layout.tp, layout.pp, layout.ep))
            comm = comm + shard * (dp - 1) / dp / (gpu.collective_gbps(layout.n_gpus) * 1e9 * eff.comm)
    return _RankCosts(fam, src, comm * pricer.scale("comm"), n_micro, flops, tokens)


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
    return steps * 32.0 * trained_params(model, lora_rank) / max(1, n_gpus) / gpu.ceiling("hbm")


def offload_seconds(model: ModelSpec, n_gpus: int, eff: Efficiency = DEFAULT, gpu: GPU | None = None) -> float:
    """Loading offloaded parameters back to the GPUs (FSDP param offload of the reference), over
    ``gpu``'s host link (``efficiency.host_copy_gbps``; PCIe without one)."""
    from .efficiency import host_copy_gbps

    return model.weight_bytes() / max(1, n_gpus) / (host_copy_gbps(gpu, eff) * 1e9)
