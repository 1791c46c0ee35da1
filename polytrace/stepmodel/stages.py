"""Per-stage costs of one RL step from its sequence lengths and the run's configuration.

Stages (verl's names): ``gen`` (rollout), ``old_log_prob`` (actor forward), ``ref`` (reference
forward), ``values`` (critic forward), ``update_critic``, ``update_actor``. Each is a sum of
``Part``s, one per kernel family (``pricing.FAMILIES``) and kind of work (``GROUPS``), priced by
``rollout.py`` and ``training.py`` from measured kernel timings where a ``Pricer`` has them, else
at the roofline at the assumed efficiencies; ``validate`` calibrates how far real runs are from
them, one slowdown per kind of work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..errors import PolytraceError
from ..run.hardware import GPU
from ..run.models import ModelSpec
from ..run.spec import PRECISIONS as SPEC_PRECISIONS
from ..run.spec import Rollout, RunSpec, Trainer, declarations, default
from .efficiency import DEFAULT, Efficiency
from .engines import rollout_efficiency
from .pricing import HOST_PRICE, ROOFLINE, Pricer
from .quantiles import midpoint_quantiles
from .refit import colocated_refit_seconds
from .result import Price, price_of
from .rollout import VERL_TOOL_RESPONSE_CHARS, RolloutResult, simulate_rollout
from .training import TrainerLayout, offload_seconds, optimizer_seconds, pass_cost

STAGES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")
STAGE_GROUP = {"gen": "rollout", "old_log_prob": "forward", "ref": "forward", "values": "forward",
               "update_critic": "train", "update_actor": "train"}
# Kinds of work a stage's cost is made of; ``validate`` calibrates one slowdown per kind.
# "rollout": the inference engine's decode and prefill, device and host (kernels, launches,
# scheduler and sampler, tensor-parallel all-reduces); "forward": the trainer's FLOPs and bytes
# in forward-only passes (log-prob, values); "train": the same in the updates' forward and
# backward passes and the optimizer; "forward_overhead" and "train_overhead": what those passes
# pay per micro-batch whatever its tokens (kernel launches from Python or autograd, FSDP
# all-gathers and reduce-scatters, parameter offload).
GROUPS = ("rollout", "forward", "train", "forward_overhead", "train_overhead")
PRECISIONS = SPEC_PRECISIONS  # ``RunConfig.rollout_precision`` / ``train_precision`` (run/spec.py)
TRAIN_STAGES = STAGES[1:]  # the trainer's stages: all but the rollout


@dataclass
class RunConfig:
    model: ModelSpec
    gpu: GPU
    n_gpus: int
    prompts_per_step: int
    n: int
    max_prompt_len: int
    max_response_len: int
    rollout_tp: int = 1
    strategy: str = default("strategy")
    train_tp: int = default("train_tp")
    train_pp: int = default("train_pp")
    algorithm: str = default("algorithm")  # "grpo" (no critic) or "ppo" (critic)
    use_ref: bool = default("use_ref")
    critic_model: ModelSpec | None = None
    # a reference policy other than the actor (``actor_rollout_ref.ref.model.path``: a teacher, a
    # distillation target); None: the actor's own weights
    ref_model: ModelSpec | None = None
    micro_batch_tokens: int | None = None  # dynamic batching token budget per GPU
    micro_batch_seqs: int | None = default("micro_batch_seqs")  # fixed micro-batch size per GPU
    remove_padding: bool = default("remove_padding")
    # the critic's own ``critic.model.use_remove_padding`` where a log states it (None: as the
    # actor's); a padded critic costs the same every step whatever the lengths
    critic_remove_padding: bool | None = default("critic_remove_padding")
    mem_fraction: float = default("mem_fraction")  # gpu_memory_utilization of the inference engine
    gradient_checkpointing: bool = default("gradient_checkpointing")
    max_num_seqs: int = default("max_num_seqs")
    # a multi-turn run's share of response tokens the model generated, where its logs measure it
    # (``logs.generations``); None: the prior (``rollout.GENERATED_SHARE_PRIOR``)
    generated_share: float | None = None
    # verl's ``multi_turn.max_tool_response_length``: a tool's text is cut at this many characters
    # (``rollout.generated_share_floor``)
    max_tool_response_chars: int = VERL_TOOL_RESPONSE_CHARS
    # Prompts per generation batch where they differ from the prompts trained on (DAPO's dynamic
    # sampling, verl's ``data.gen_batch_size``: ``calibrate/dynamic_sampling.py``); None: the same
    gen_batch_prompts: int | None = None
    # generation batches per step (estimate's --gen-batches: a DAPO run's mean; a log's steps say
    # their own, ``calibrate/dynamic_sampling.py``)
    gen_batches: float = default("gen_batches")
    eager: bool = default("eager")  # inference engine without CUDA graphs (verl's enforce_eager)
    # the engine's loop (vLLM's V1 or V0) and V1's asynchronous scheduling (``engines.py``)
    engine: str = default("engine")
    async_scheduling: bool = default("async_scheduling")
    colocated: bool = True  # trainer and inference engine share the GPUs (verl's hybrid engine)
    balance_batch: bool = True  # verl's trainer.balance_batch: token-balanced ranks of equal counts
    old_log_prob_in_gen: bool = False  # older verl computed it inside generate_sequences
    ref_offload: bool = default("ref_offload")
    # verl's actor FSDP ``param_offload`` / ``optimizer_offload``: the sharded fp32 parameters
    # (Adam moments) wait in CPU memory between the stages that use them and cross PCIe both ways
    # around every such stage (``offload_parts``)
    param_offload: bool = default("param_offload")
    optimizer_offload: bool = default("optimizer_offload")
    # The colocated switch between trainer and engine, as the framework does it once a step
    # (``offload_parts``): ``engine_weights_offload``, vLLM's ``sleep(level=1)`` (NeMo RL's
    # colocated engines; verl with vLLM < 0.8.5 or under LoRA), backs the engine's weights up to
    # CPU memory at sleep and restores them at wake, where level 2 discards them for the refit to
    # reload; ``switch_offload``, NeMo RL's colocated Megatron worker, moves its optimizer state
    # to CPU memory before the refit (``offload_before_refit``) and its parameters after it
    # (``offload_after_refit``), both back before the passes that use them.
    engine_weights_offload: bool = False
    switch_offload: bool = False
    lora_rank: int = default("lora_rank")  # LoRA adapter rank; 0: full fine-tuning
    mini_batches: int = 1  # optimizer steps per update (train batch / mini-batch x epochs)
    # per-stage micro-batching where it differs from the defaults above: stage -> (sequences per
    # GPU or None, token budget per GPU or None); verl sets log-prob, ref and critic ones apart
    stage_micro_batches: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Megatron's expert, context and virtual-pipeline parallelism and vLLM's expert parallelism
    # (``parallel.py``: checked by ``parallel.check_layout``, priced in training.py and rollout.py)
    train_ep: int = default("train_ep")
    train_cp: int = default("train_cp")
    train_vpp: int = default("train_vpp")
    rollout_ep: int = default("rollout_ep")
    # Precision of the engine's linear layers (vLLM's ``quantization="fp8"``: half the weight bytes
    # to read and hold, FP8 tensor cores where the GPU has them) and of the trainer's GEMMs
    # (Transformer Engine FP8, as NeMo RL's FP8 recipes train): "bf16" or "fp8". Each changes its
    # side's cost up to 2x, so neither is ever assumed: bf16 unless stated.
    rollout_precision: str = default("rollout_precision")
    train_precision: str = default("train_precision")
    # Megatron's HybridDeviceOptimizer (``optimizer_cpu_offload`` with ``optimizer_offload_fraction``,
    # as verl's and slime's recipes for 235B-671B models on 96 GB GPUs set it): this share of the
    # actor's optimizer (its fp32 master weights and Adam moments) lives in CPU memory for the whole
    # run and steps there; each optimizer step copies that share's gradients to the host and its
    # updated weights back (``cpu_optimizer_parts``). ``cpu_optimizer_overlap``: Megatron's
    # ``overlap_cpu_optimizer_d2h_h2d``, the copies and the CPU step pipelined per parameter.
    cpu_optimizer: float = default("cpu_optimizer")
    cpu_optimizer_overlap: bool = default("cpu_optimizer_overlap")

    def __post_init__(self):
        # each declared setting's type and bounds, and the layout checks between them, as the
        # RunSpec checks them (run/spec.py), named by this type's fields
        values = {name: getattr(self, name) for name in _DECLARED}
        values.update(gpus=self.n_gpus, prompts=self.prompts_per_step)
        if self.strategy != "megatron":  # FSDP ignores a Megatron layout a log may still print
            values.pop("train_tp"), values.pop("train_pp")
        RunSpec.build(values, origin=lambda name: _FIELD_OF.get(name, name))
        if self.train_precision == "fp8" and not self.gpu.has_fp8:
            raise PolytraceError(f"FP8 training needs FP8 tensor cores (Transformer Engine: Hopper or later); "
                                 f"{self.gpu.slug} has none")
        v = self.mini_batches
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise PolytraceError(f"mini_batches must be a positive integer, got {v!r}")

    @property
    def engine_model(self) -> ModelSpec:
        """The model as the inference engine holds it (``rollout_precision``): the trainer's copy
        is always bf16."""
        if self.rollout_precision == self.model.weight_dtype:
            return self.model
        return dataclasses.replace(self.model, weight_dtype=self.rollout_precision)

    def engine_efficiency(self, eff: Efficiency = DEFAULT) -> Efficiency:
        """``eff`` with this run's engine costs added (its LoRA adapter's launches per decode
        iteration, the host work asynchronous scheduling hides, ``engines.py``): the efficiencies
        every rollout of the run is priced at, the batch and the stream alike."""
        return rollout_efficiency(eff, self.engine_model, lora_rank=self.lora_rank, engine=self.engine,
                                  async_scheduling=self.async_scheduling, eager=self.eager)

    @property
    def rollout_settings(self) -> Rollout:
        """The engine's settings as ``RunSpec``'s ``Rollout`` section, its TP resolved (what the
        rollout functions take: ``rollout.simulate_rollout``)."""
        return _section(self, Rollout)

    @property
    def trainer_settings(self) -> Trainer:
        """The trainer's settings as ``RunSpec``'s ``Trainer`` section (``refit.colocated_refit_seconds``)."""
        return _section(self, Trainer)

    @property
    def use_critic(self) -> bool:
        return self.algorithm == "ppo"

    def layout(self, stage: str | None = None) -> TrainerLayout:
        seqs, tokens = self.micro_batch_seqs, self.micro_batch_tokens
        if stage in self.stage_micro_batches:
            seqs, tokens = self.stage_micro_batches[stage]
        return TrainerLayout(
            n_gpus=self.n_gpus, strategy=self.strategy,
            tp=self.train_tp if self.strategy == "megatron" else 1,
            pp=self.train_pp if self.strategy == "megatron" else 1,
            micro_batch_seqs=seqs, micro_batch_tokens=tokens,
            remove_padding=(self.critic_remove_padding if stage in ("values", "update_critic")
                            and self.critic_remove_padding is not None else self.remove_padding),
            pad_to=self.max_prompt_len + self.max_response_len,
            gradient_checkpointing=self.gradient_checkpointing, mini_batches=self.mini_batches,
            balance=self.balance_batch,
            lora_rank=self.lora_rank if stage in (None, "old_log_prob", "update_actor") else 0,
            fp8=self.train_precision == "fp8",
            **({"ep": self.train_ep, "cp": self.train_cp, "vpp": self.train_vpp} if self.strategy == "megatron"
               else {}))

    def to_dict(self) -> dict:
        """Every field as JSON (a calibration file's ``config``, ``--json``'s): the model and GPU by
        name, the critic and reference by the model they run where the run has them."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "notes":
                continue
            if f.name in ("model", "gpu"):
                value = value.name if f.name == "model" else value.slug
            elif f.name in ("critic_model", "ref_model"):
                used = self.use_critic if f.name == "critic_model" else self.use_ref
                value = (value or self.model).name if used else None
            elif f.name == "stage_micro_batches":
                value = {k: list(v) for k, v in value.items()}
            out[f.name] = value
        return out


def _section(cfg: RunConfig, section: type):
    """``cfg``'s values of a ``RunSpec`` section: every field of it is a ``RunConfig`` field of the same name."""
    return section(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(section)})


# RunConfig's fields the RunSpec declares under the same name, and the two it names otherwise
_FIELD_OF = {"gpus": "n_gpus", "prompts": "prompts_per_step"}
_DECLARED = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name in declarations()
                  and f.name not in ("model", "gpu"))


@dataclass(frozen=True)
class Part:
    """Seconds of one kernel family's work in one stage."""

    stage: str
    family: str  # pricing.FAMILIES, or "tool" (multi-turn tool latency)
    group: str  # the kind of work (GROUPS) ``validate`` calibrates one slowdown for, or "tool"
    seconds: float
    source: str = ROOFLINE  # the result file(s) and provider, or "roofline"
    # where the seconds come from, where the source text alone does not say (a model's host price)
    price: Price | None = None

    @property
    def priced(self) -> Price:
        return self.price or price_of(self.source)


@dataclass
class StageCosts:
    parts: list[Part]
    rollout: RolloutResult
    train_imbalance_gpu_s: float
    tokens: int
    details: dict = field(default_factory=dict)
    other_s: float = 0.0  # the step outside the stages: rule-based reward scoring, advantages

    @property
    def seconds(self) -> dict[str, float]:
        """Stage -> seconds (0 for stages the run does not have)."""
        out = {k: 0.0 for k in STAGES}
        for p in self.parts:
            out[p.stage] += p.seconds
        return out

    def _seconds_by(self, attr: str) -> dict[str, dict[str, float]]:
        """Stage -> the parts' ``attr`` (their kind of work or kernel family) -> seconds."""
        out: dict[str, dict[str, float]] = {k: {} for k in STAGES}
        for p in self.parts:
            key = getattr(p, attr)
            out[p.stage][key] = out[p.stage].get(key, 0.0) + p.seconds
        return out

    @property
    def components(self) -> dict[str, dict[str, float]]:
        """Stage -> kind of work (GROUPS) -> seconds: what ``validate`` calibrates."""
        return self._seconds_by("group")

    @property
    def kernels(self) -> dict[str, dict[str, float]]:
        """Stage -> kernel family -> seconds."""
        return self._seconds_by("family")

    @property
    def step_s(self) -> float:
        return float(sum(self.seconds.values())) + self.other_s


def _pass_parts(stage: str, pc, kind: str) -> list[Part]:
    parts = [Part(stage, fam, kind, s, pc.sources.get(fam, ROOFLINE)) for fam, s in pc.kernels.items()]
    parts += [Part(stage, "comm", f"{kind}_overhead", pc.comm_s), Part(stage, "host", f"{kind}_overhead", pc.host_s)]
    if pc.plan_s:
        parts.append(Part(stage, "packing", f"{kind}_overhead", pc.plan_s, pc.plan_source))
    return parts


def stage_costs(cfg: RunConfig, prompt_lens, response_lens, *, eff: Efficiency = DEFAULT,
                pricer: Pricer | None = None, rollout: bool = True) -> StageCosts:
    """Seconds of every stage for one step's sequences, as parts by kernel family: measured
    kernel timings where ``pricer`` has them, else the roofline (the default). ``rollout=False``:
    the trainer's stages only (a trainer with GPUs of its own: ``modes.py``)."""
    pricer = pricer or Pricer(cfg.gpu, eff)
    p = np.asarray(prompt_lens, dtype=np.int64)
    r = np.asarray(response_lens, dtype=np.int64)
    seq = p + r
    if rollout:
        roll = simulate_rollout(cfg.engine_model, cfg.gpu, p, r, n_gpus=cfg.n_gpus, engine=cfg.rollout_settings,
                                eff=cfg.engine_efficiency(eff),
                                pricer=pricer)
    else:
        roll = RolloutResult(0.0, 0.0, 0.0, 0, [], 0.0, 0.0, cfg.n_gpus)
    critic = cfg.critic_model or cfg.model
    passes = {}  # stage -> PassCost on the trainer
    ref = cfg.ref_model or cfg.model
    for stage, model, backward, head in (("old_log_prob", cfg.model, False, True), ("ref", ref, False, True),
                                         ("update_actor", cfg.model, True, True), ("values", critic, False, False),
                                         ("update_critic", critic, True, False)):
        if stage == "ref" and not cfg.use_ref or stage in ("values", "update_critic") and not cfg.use_critic:
            continue
        passes[stage] = pass_cost(model, cfg.gpu, seq, cfg.layout(stage), backward=backward, lm_head=head,
                                  eff=eff, pricer=pricer)
    parts = [Part("gen", fam, "rollout", v, roll.sources.get(fam, ROOFLINE)) for fam, v in roll.kernels.items()]
    refit = None
    if rollout and cfg.colocated:  # the updated weights into the engine on the same GPUs, once a step
        refit = colocated_refit_seconds(cfg.model, cfg.gpu, cfg.n_gpus, cfg.rollout_tp, cfg.trainer_settings, eff=eff)
        moved = refit["total"] - refit["tensors"]
        parts.append(Part("gen", "comm", "rollout", moved * pricer.scale("comm"), "roofline (refit)"))
        if refit["tensors"]:  # host work, not a link: no measured collective rate scales it
            parts.append(Part("gen", "comm", "rollout", refit["tensors"],
                              f"{HOST_PRICE}refit: {cfg.model.expert_tensor_count} expert tensors x "
                              f"{eff.refit_s_per_expert_tensor * 1e3:.2g} ms)", Price.ROOFLINE))
    for stage, pc in passes.items():
        parts += _pass_parts(stage, pc, "train" if stage.startswith("update") else "forward")
    if cfg.use_ref and cfg.ref_offload and not cfg.lora_rank:  # under LoRA the reference is the base model
        ref_offload = offload_seconds(cfg.ref_model or cfg.model, cfg.n_gpus, eff, cfg.gpu) * pricer.scale("offload")
        parts.append(Part("ref", "offload", "forward_overhead", ref_offload))
    parts += offload_parts(cfg, eff, pricer)
    opt = (optimizer_seconds(cfg.model, cfg.gpu, cfg.n_gpus, cfg.mini_batches, cfg.lora_rank)
           * (1.0 - cfg.cpu_optimizer) * pricer.scale("optimizer"))
    parts.append(Part("update_actor", "optimizer", "train", opt))
    parts += cpu_optimizer_parts(cfg, eff, pricer)
    if cfg.use_critic:
        parts.append(Part("update_critic", "optimizer", "train",
                          optimizer_seconds(critic, cfg.gpu, cfg.n_gpus, cfg.mini_batches)
                          * pricer.scale("optimizer")))
    if cfg.old_log_prob_in_gen:  # older verl: the old-policy forward runs inside gen
        parts = [Part("gen", x.family, x.group, x.seconds, x.source) if x.stage == "old_log_prob" else x
                 for x in parts]
    imbalance = sum(pc.imbalance_gpu_s for pc in passes.values())
    fwd, upd = passes["old_log_prob"], passes["update_actor"]
    other = len(r) * eff.reward_s_per_response
    return StageCosts(parts, roll, imbalance, int(seq.sum()), other_s=other,
                      details={"forward": fwd.to_dict(), "update": upd.to_dict(), "optimizer_s": opt,
                               **({"refit": refit} if refit else {})})


def offload_parts(cfg: RunConfig, eff: Efficiency = DEFAULT, pricer: Pricer | None = None) -> list[Part]:
    """verl's actor offload, priced: with ``param_offload`` the sharded fp32 parameters (4 bytes
    per parameter over the GPUs) are loaded before and offloaded after every stage that uses the
    actor (its log-prob, its update, and the weight sync into the colocated engine, counted in
    ``gen``); with ``optimizer_offload`` the Adam moments (8 bytes per trained parameter) do the
    same around the update. Both directions cross PCIe at ``eff.pcie_gbps`` (a faster host link
    at the same share of its peak: ``efficiency.host_copy_gbps``). Colocated, the
    switch's own traffic (``RunConfig.engine_weights_offload``, ``switch_offload``): the engine's
    1/tp of the bf16 weights out at sleep and back at wake; the trainer's bf16 parameter shard and
    its optimizer shard out during generation and back before the log-prob pass and the update."""
    from .efficiency import host_copy_gbps
    from .parallel import shard_params
    from .training import trained_params

    pricer = pricer or Pricer(cfg.gpu, eff)
    pcie = host_copy_gbps(cfg.gpu, eff) * 1e9
    params = 4.0 * cfg.model.params_total / cfg.n_gpus
    trained = trained_params(cfg.model, cfg.lora_rank)
    on_gpu = 1.0 - cfg.cpu_optimizer  # the CPU optimizer's share never leaves CPU memory
    moments = 8.0 * trained / cfg.n_gpus * on_gpu
    scale = pricer.scale("offload")
    parts = []
    if cfg.param_offload:
        stages = (["gen"] if cfg.colocated else []) + ["old_log_prob", "update_actor"]
        for stage in stages:
            if stage == "old_log_prob" and cfg.old_log_prob_in_gen:
                continue
            group = "train_overhead" if stage == "update_actor" else "forward_overhead"
            parts.append(Part(stage, "offload", group, 2.0 * params / pcie * scale))
    if cfg.optimizer_offload:
        parts.append(Part("update_actor", "offload", "train_overhead", 2.0 * moments / pcie * scale))
    if cfg.colocated and cfg.engine_weights_offload:  # the engine's shard of the weights out and back
        parts.append(Part("gen", "offload", "rollout",
                          2.0 * cfg.engine_model.weight_bytes() / cfg.rollout_tp / pcie * scale))
    if cfg.colocated and cfg.switch_offload:
        # bf16 parameters (Megatron's shard; FSDP's 1/n) and the distributed optimizer's shard of
        # fp32 master weights and two moments (12 bytes a parameter over all GPUs: the dense
        # weights over TP x PP x DP x CP, the experts over EP x PP x expert-DP), once out during
        # generation and once back
        shard = (shard_params(cfg.model, cfg.train_tp, cfg.train_pp, cfg.train_ep) if cfg.strategy == "megatron"
                 else cfg.model.params_total / cfg.n_gpus)
        weights, optimizer = 2.0 * shard / pcie * scale, 12.0 * trained / cfg.n_gpus * on_gpu / pcie * scale
        parts += [Part("gen", "offload", "rollout", weights + optimizer),
                  Part("old_log_prob", "offload", "forward_overhead", weights),
                  Part("update_actor", "offload", "train_overhead", optimizer)]
    return parts


def cpu_optimizer_parts(cfg: RunConfig, eff: Efficiency = DEFAULT, pricer: Pricer | None = None) -> list[Part]:
    """Megatron's HybridDeviceOptimizer, priced (``RunConfig.cpu_optimizer``): per optimizer step
    its share of the local optimizer shard (the distributed optimizer's ``trained / gpus``
    parameters) sends its fp32 gradients to the host (4 bytes a parameter), steps torch's AdamW
    in CPU memory (``eff.cpu_adam_bytes_per_param`` through DRAM, ``GPU.host_memory_gbps`` per GPU
    at ``eff.host_dram``) and copies the fp32 weights back into the bf16 parameters (4 bytes
    across the link, converted on the GPU). Without ``cpu_optimizer_overlap`` the three run one
    after another; with it, per parameter on their own streams, so the slowest of the three sets
    the time. All of it is host-memory traffic: the ``offload`` family, under the offload prior."""
    from .efficiency import host_copy_gbps
    from .training import trained_params

    if not cfg.cpu_optimizer:
        return []
    pricer = pricer or Pricer(cfg.gpu, eff)
    trained = trained_params(cfg.model, cfg.lora_rank)
    local = cfg.cpu_optimizer * trained / cfg.n_gpus
    link = host_copy_gbps(cfg.gpu, eff) * 1e9
    step = local * eff.cpu_adam_bytes_per_param / (cfg.gpu.host_memory_gbps * 1e9 * eff.host_dram)
    copies = (4.0 * local / link, 4.0 * local / link)
    each = max(step, *copies) if cfg.cpu_optimizer_overlap else step + sum(copies)
    seconds = cfg.mini_batches * each * pricer.scale("offload")
    source = (f"{HOST_PRICE}CPU AdamW: {cfg.cpu_optimizer:g} of the optimizer, {eff.cpu_adam_bytes_per_param:g} B a "
              f"parameter at {eff.host_dram:g} x {cfg.gpu.host_memory_gbps:g} GB/s a GPU)")
    return [Part("update_actor", "offload", "train_overhead", seconds, source, Price.ROOFLINE)]


def synthetic_lengths(n_seqs: int, mean: float, max_len: float, min_len: float | None = None,
                      clip_ratio: float | None = None, cap: float | None = None, shape: float = 1.5
                      ) -> np.ndarray:
    """Deterministic lengths with a given mean, maximum, minimum and share at the cap: the
    uncapped part follows the quantiles of a Beta(shape, b) on [min, max], b chosen to match the
    mean, and the longest sequence is the reported maximum. Used when only a log's summary
    statistics of a step are known.

    The quantiles are interpolated (``quantiles.py``: within ``REL_ERROR``, 2e-8 relative) unless
    a length would then sit too close to a rounding boundary to be sure of its whole number; then
    they are computed to scipy's precision, so the lengths are the ones scipy's quantiles give."""
    n = max(1, int(n_seqs))
    lo = float(min_len) if min_len is not None and np.isfinite(min_len) else max(1.0, 0.1 * mean)
    hi = float(max_len)
    lo = min(lo, mean)
    mean = float(np.clip(mean, lo, hi))
    n_cap = 0
    if clip_ratio is not None and np.isfinite(clip_ratio) and cap is not None and hi >= cap:
        n_cap = int(round(clip_ratio * n))
    out = np.full(n, hi)
    out[:n - n_cap], err = _free_lengths(n - n_cap, n_cap, mean, lo, hi, shape, polish=False)
    if err > 0:
        # rescaling at most doubles the quantiles' relative error; a length that close to .5
        # could round either way: compute it again to scipy's precision
        near_half = np.abs(out - np.floor(out) - 0.5) <= 2.5 * err * np.maximum(np.abs(out), 1.0)
        if near_half.any():
            out[:n - n_cap], _ = _free_lengths(n - n_cap, n_cap, mean, lo, hi, shape, polish=True)
    return np.maximum(np.round(out), 1).astype(np.int64)


def _free_lengths(n_free: int, n_cap: int, mean: float, lo: float, hi: float, shape: float,
                  polish: bool) -> tuple[np.ndarray, float]:
    """The lengths of the responses not cut at the cap (unrounded), and the relative error bound
    of the quantiles they came from."""
    n = n_free + n_cap
    if n_free <= 0:
        return np.zeros(0), 0.0
    m_free = (mean * n - n_cap * hi) / n_free
    m_free = float(np.clip(m_free, lo, hi))
    top = hi if n_cap == 0 else hi - 1
    if top <= lo or m_free >= top:
        return np.full(n_free, m_free), 0.0
    frac = (m_free - lo) / (top - lo)
    frac = float(np.clip(frac, 1e-3, 1 - 1e-3))
    b = shape * (1 - frac) / frac
    quantiles, err = midpoint_quantiles(n_free, shape, b, polish=polish)
    free = lo + (top - lo) * quantiles
    if n_cap == 0 and n_free > 1:
        free[-1] = hi  # the reported maximum; the others carry the rest of the mean
        rest = m_free * n_free - hi
        free[:-1] = lo + (free[:-1] - lo) * max(rest - lo * (n_free - 1), 0.0) / max(
            float((free[:-1] - lo).sum()), 1e-9)
    else:
        free = lo + (free - lo) * (m_free - lo) / max(float(free.mean()) - lo, 1e-9)
    return np.clip(free, lo, hi), err
