"""One ``RunSpec``: every setting of an RL run declared once (vidur's ``config/config.py``: a tree
of dataclasses whose fields carry their own metadata).

Each field of a section is declared with ``setting(...)``: its kind (which fixes the type and the
check), default, unit, bounds, help text, command-line flag and, where verl has one, its key and
verl's own default per trainer backend (``fsdp`` / ``megatron``: the two name and default some
settings differently). From these declarations, and nowhere else:

- ``estimate`` / ``impact`` / ``calibrate --stage-times`` build their flags (``polytrace.cli.runflags``),
- a calibration file's ``config`` fills the flags not given (``calibrate.rundefaults``),
- ``--set KEY=VALUE`` reads the verl keys (``calibrate.settings.REGISTRY``),
- ``compose.estimate.configure`` prices a ``RunSpec`` built and checked here once.

``RunSpec.build(values, origin)`` checks every given value against its declaration; a bad one is
a one-line error naming the setting as the user gave it (``origin``: the flag, ``--set`` key or
calibration file key) and exits 2. No module-level work beyond the declarations.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from functools import cache

from ..errors import PolytraceError

BACKENDS = ("fsdp", "megatron")
PRECISIONS = ("bf16", "fp8")
# the inference engine's loop (``stepmodel/engines.py`` prices what each changes): vLLM's V1 engine
# (the default from vLLM 0.8, the only one from 0.11) and its V0 loop (vLLM 0.6-0.8)
ENGINES = ("vllm-v1", "vllm-v0")


class SpecError(PolytraceError):
    """A setting given with a value its declaration refuses (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Verl:
    """A setting's verl key and verl's default when the key is absent (``ppo_trainer.yaml`` /
    ``ppo_megatron_trainer.yaml`` of verl 0.3-0.5, the shared logs' versions; their printed configs
    show the same values)."""

    key: str
    default: object = None
    effect: str = ""  # what the key changes in the step model (``--set``'s documentation)
    # verl's spellings -> the setting's value, for a key whose values are not the setting's (verl's
    # rollout ``quantization``: a method name, or null for the model's own bf16 weights)
    values: tuple = ()


@dataclass(frozen=True)
class Decl:
    """One setting's declaration (``declarations()``)."""

    name: str  # the RunSpec field (and ``build_config`` keyword)
    section: str
    kind: str  # "count", "nonneg", "fraction", "share", "float", "bool", "choice", "text"
    default: object
    help: str
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    flag: str | None = None  # the command-line spelling; None: no flag (a --set key or a log sets it)
    dest: str | None = None  # the argparse destination where it differs from ``name``
    metavar: str | None = None
    inverted: bool = False  # a store_true flag that sets the setting False (--no-ref)
    verl: tuple = ()  # ((backend, Verl), ...)
    config_key: str | None = None  # its key in a calibration file's ``config`` (RunConfig.to_dict)
    # a flag a first run leaves at its default: listed by ``--help-all``, not ``--help`` (estimate's
    # --help was 223 lines; the main settings alone fit a screen)
    advanced: bool = False

    @property
    def argument(self) -> str:
        return self.dest or self.name

    def verl_key(self, backend: str = "fsdp") -> Verl | None:
        return dict(self.verl).get(backend)

    def check(self, value, origin: str):
        """``value`` as this setting holds it, or a ``SpecError`` naming ``origin``."""
        if value is None and self.kind != "bool":
            return None
        kind = self.kind
        if kind in ("bool", "switch"):  # a switch: on, off or None (the mode's default)
            if not isinstance(value, bool):
                raise SpecError(f"{origin} must be true or false, got {value!r}")
            return value
        if kind in ("choice", "text"):
            if not isinstance(value, str) or (self.choices and value not in self.choices) or not value:
                what = f"one of {', '.join(self.choices)}" if self.choices else "a name"
                raise SpecError(f"{origin} must be {what}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise SpecError(f"{origin} must be {self.bounds_text()}, got {value!r}")
        if kind in ("count", "nonneg"):
            if not isinstance(value, numbers.Integral) or value < self.lo:
                raise SpecError(f"{origin} must be {self.bounds_text()}, got {value!r}")
            if value > self.hi:
                raise SpecError(f"{origin} {value} is too large (at most {self.hi:,})")
            return int(value)
        if not self.lo <= value <= self.hi:
            raise SpecError(f"{origin} must be {self.bounds_text()}, got {value}")
        return float(value)

    def bounds_text(self) -> str:
        if self.kind == "count":
            return "a positive integer"
        if self.kind == "nonneg":
            return "a non-negative integer"
        if self.kind == "share":
            return "a share in [0, 1]"
        if self.hi == math.inf:
            return f"a finite number >= {self.lo:g}"
        return f"in [{self.lo:g}, {self.hi:g}]"


# kind -> (lo, hi) when the declaration gives none
_BOUNDS = {"count": (1, math.inf), "nonneg": (0, math.inf), "share": (0.0, 1.0), "fraction": (0.05, 0.99),
           "float": (-math.inf, math.inf)}


def setting(default, kind: str, help: str, **meta):
    """A RunSpec field: its default and its declaration (``Decl``'s fields)."""
    lo, hi = _BOUNDS.get(kind, (None, None))
    meta.setdefault("lo", lo)
    meta.setdefault("hi", hi)
    verl = meta.pop("fsdp", None), meta.pop("megatron", None)
    meta["verl"] = tuple((b, v) for b, v in zip(BACKENDS, verl) if v is not None)
    return field(default=default, metadata={"decl": dict(kind=kind, default=default, help=help, **meta)})


_A, _R, _M = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.model"
CPU_OPTIMIZER = f"{_A}.optim.override_optimizer_config"


def _both(key: str, default, effect: str, values: tuple = ()) -> dict:
    """The same key and default under both trainer backends."""
    return {"fsdp": Verl(key, default, effect, values), "megatron": Verl(key, default, effect, values)}


# verl's rollout ``quantization`` as written -> the engine's precision: vLLM's "fp8", or null
# (YAML's null, ~, or an empty value) for the model's bf16 weights; torchao's and the others are
# not priced (a log's: bf16 with a note; --set's: refused)
QUANTIZATIONS = (("fp8", "fp8"), ("null", "bf16"), ("none", "bf16"), ("~", "bf16"), ("", "bf16"))


def _offload(role: str, what: str, effect: str) -> dict:
    """An offload switch: under ``fsdp_config`` for FSDP workers, ``megatron`` for Megatron's."""
    return {"fsdp": Verl(f"actor_rollout_ref.{role}.fsdp_config.{what}", False, effect),
            "megatron": Verl(f"actor_rollout_ref.{role}.megatron.{what}", False, effect)}


@dataclass(frozen=True)
class Cluster:
    model: object = setting(None, "text", "model preset (e.g. qwen2.5-7b) or a HF config.json", config_key="model")
    gpu: object = setting(None, "text", "GPU preset (e.g. h100, a100-80g, h200)")
    gpus: int | None = setting(None, "count", "GPU count", unit="GPUs", config_key="n_gpus")


@dataclass(frozen=True)
class Batch:
    prompts: int | None = setting(None, "count", "prompts per step (default: profile)", unit="prompts",
                                  config_key="prompts_per_step",
                                  **_both("data.train_batch_size", None, "prompts per step"))
    n: int | None = setting(None, "count", "responses per prompt (default: the profile's)", unit="responses",
                            config_key="n", **_both(f"{_R}.n", 1, "responses per prompt"))
    ppo_mini_batch: int | None = setting(
        None, "count", "prompts per optimizer step (verl's ppo_mini_batch_size; default 256 or the whole batch "
        "when smaller): each step waits for the slowest trainer rank", unit="prompts", metavar="PROMPTS",
        **_both(f"{_A}.ppo_mini_batch_size", 256, "prompts per optimizer step"), advanced=True)
    responses_per_step: int | None = setting(None, "count", "generation batch in responses (prompts x --n; NeMo "
                                             "RL's G-GBS)", unit="responses", metavar="R", advanced=True)
    train_batch: int | None = setting(None, "count", "responses per optimizer step (NeMo RL's "
                                      "train_global_batch_size; verl's ppo_mini_batch_size x n)",
                                      unit="responses", metavar="R", advanced=True)
    # DAPO's dynamic sampling (verl's recipe/dapo; stepmodel/dynamic_sampling.py)
    gen_batch: int | None = setting(
        None, "count", "DAPO: prompts per generation batch (verl's data.gen_batch_size; default --prompts), of which "
        "the trainer keeps --prompts", unit="prompts", metavar="PROMPTS", advanced=True,
        **_both("data.gen_batch_size", None, "DAPO: prompts per generation batch, of which train_batch_size train"))
    gen_batches: float = setting(1.0, "float", "DAPO: generation batches per step (a log's mean train/num_gen_batches; "
                                 "default 1)", lo=1.0, hi=1000.0, metavar="K", advanced=True)
    # "auto": 16384, or max prompt + max response rounded up to 1024 when longer (estimate's
    # auto_micro_batch_tokens); None: fixed-size micro-batches (a --set micro-batch size)
    micro_batch_tokens: object = setting(
        "auto", "count", "token budget per micro-batch per GPU; at least the longest sequence (default: 16384, "
        "or max prompt + max response rounded up to 1024 when longer)", unit="tokens", config_key="micro_batch_tokens",
        **_both(f"{_A}.ppo_max_token_len_per_gpu", 16384, "token budget of an update micro-batch per GPU"),
        advanced=True)
    # not a flag: a --set key or the log's config says it. With it, micro-batches are fixed-size
    # (``micro_batch_tokens`` None: verl ignores the token budget with dynamic batching off)
    micro_batch_seqs: int | None = setting(
        None, "count", "sequences per update micro-batch per GPU (fixed-size micro-batches)", unit="sequences",
        flag=None, **_both(f"{_A}.ppo_micro_batch_size_per_gpu", None, "sequences per update micro-batch per GPU"))


@dataclass(frozen=True)
class Lengths:
    max_prompt_len: int | None = setting(None, "count", "prompt cap in tokens (default: the profile's)",
                                         unit="tokens", config_key="max_prompt_len",
                                         **_both("data.max_prompt_length", None,
                                                 "prompt cap (and the padded length with padding)"))
    max_response_len: int | None = setting(
        None, "count", "response cap in tokens; longer sampled responses are cut there (default: the profile's)",
        unit="tokens", config_key="max_response_len",
        **_both("data.max_response_length", None, "response cap (and the padded length with padding)"))
    generated_share: float | None = setting(
        None, "share", "a multi-turn profile's share of response tokens the model generates (the rest is tool "
        "output, prefilled between turns), in place of its trace's: a code sandbox's short outputs leave ~0.95, a "
        "search engine's documents ~0.16 (default: the trace's own split)", metavar="SHARE", lo=0.0, hi=1.0,
        advanced=True)


@dataclass(frozen=True)
class Rollout:
    rollout_tp: int | None = setting(None, "count", "rollout tensor parallelism (default: fit)", unit="GPUs",
                                     config_key="rollout_tp",
                                     **_both(f"{_R}.tensor_model_parallel_size", 2,
                                             "GPUs per inference engine: weights read per decode step and engines "
                                             "sharing the batch"), advanced=True)
    rollout_ep: int = setting(1, "count", "vLLM expert parallelism over each engine's GPUs (1 or the rollout TP)",
                              metavar="N", config_key="rollout_ep", advanced=True)
    mem_fraction: float = setting(0.5, "fraction", "GPU memory share of the inference engine", unit="share",
                                  config_key="mem_fraction",
                                  **_both(f"{_R}.gpu_memory_utilization", 0.5,
                                          "the engine's memory share: the KV cache it leaves bounds how many "
                                          "sequences decode at once"), advanced=True)
    rollout_precision: str = setting(
        "bf16", "choice", "the engine's linear layers: bf16 (default) or fp8 (vLLM quantization=fp8: half the weight "
        "bytes, FP8 tensor cores where the GPU has them, weight-only on Ampere)", choices=PRECISIONS,
        config_key="rollout_precision", advanced=True,
        **_both(f"{_R}.quantization", None, "the engine's weights: fp8 (vLLM FP8: the linear layers one byte, FP8 "
                "tensor cores) or null (bf16); estimate's --rollout-precision", QUANTIZATIONS))
    # not flags: a --set key or the log's config says them (estimate assumes CUDA graphs: vLLM's
    # default, where verl's own enforce_eager default is True)
    eager: bool = setting(False, "bool", "the inference engine launches every kernel of every decode step (on) "
                          "or replays CUDA graphs (off)", flag=None,
                          **_both(f"{_R}.enforce_eager", True, "the inference engine launches every kernel of every "
                                  "decode step (on) or replays CUDA graphs (off)"))
    max_num_seqs: int = setting(1024, "count", "most sequences one engine decodes at once", flag=None,
                                **_both(f"{_R}.max_num_seqs", 1024, "most sequences one engine decodes at once"))
    # estimate assumes vLLM's V1 engine scheduling in step with the GPU (vLLM 0.8-0.13's default, and
    # the one whose cost the corpus's logs measure) and says so on its first line; a log's reader
    # takes what the log states (calibrate/logconfig.py). verl has no key for the engine: the vLLM
    # it is installed with picks it.
    engine: str = setting(
        "vllm-v1", "choice", "the inference engine's loop: vllm-v1 (vLLM >= 0.8's V1 engine, the only one from "
        "0.11; default) or vllm-v0 (vLLM 0.6-0.8's V0 loop); priced alike in step with the GPU (engines.py)",
        choices=ENGINES, flag="--rollout-engine", config_key="engine", advanced=True)
    async_scheduling: bool = setting(
        False, "bool", "vLLM's --async-scheduling (V1 engine, vLLM >= 0.11): the scheduler's and input "
        "preparation's host work for decode step k+1 runs while step k's kernels do, so an iteration costs the "
        "larger of its GPU and host work, not their sum", config_key="async_scheduling", advanced=True,
        **_both(f"{_R}.engine_kwargs.vllm.async_scheduling", False,
                "vLLM's asynchronous scheduling: the engine's per-step host work overlaps the GPU's"))


@dataclass(frozen=True)
class Trainer:
    strategy: str = setting("fsdp", "choice", "trainer parallelism: fsdp (default) or megatron (with --train-tp / "
                            "--train-pp)", choices=BACKENDS, config_key="strategy", advanced=True)
    train_tp: int = setting(1, "count", "Megatron tensor parallelism", config_key="train_tp", advanced=True)
    train_pp: int = setting(1, "count", "Megatron pipeline parallelism", config_key="train_pp", advanced=True)
    train_ep: int = setting(1, "count", "Megatron expert parallelism (MoE)", metavar="N", config_key="train_ep",
                            advanced=True)
    train_cp: int = setting(1, "count", "Megatron context parallelism", metavar="N", config_key="train_cp",
                            advanced=True)
    train_vpp: int = setting(1, "count", "Megatron virtual pipeline chunks per stage (interleaved 1F1B: a "
                             "smaller bubble)", metavar="N", config_key="train_vpp", advanced=True)
    train_precision: str = setting("bf16", "choice", "the trainer's GEMMs: bf16 (default) or fp8 (Transformer "
                                   "Engine, Hopper or later)", choices=PRECISIONS, config_key="train_precision",
                                   advanced=True)
    algorithm: str = setting("grpo", "choice", "ppo adds a critic", choices=("grpo", "ppo"), flag="--algo",
                             dest="algo", config_key="algorithm", advanced=True)
    use_ref: bool = setting(True, "bool", "no reference model", flag="--no-ref", dest="no_ref", inverted=True,
                            config_key="use_ref", advanced=True)
    lora_rank: int = setting(0, "nonneg", "train LoRA adapters of this rank instead of the full model (verl's "
                             "actor_rollout_ref.model.lora_rank; default 0: full fine-tuning)", hi=1 << 16,
                             config_key="lora_rank",
                             **_both(f"{_M}.lora_rank", 0, "LoRA adapters of this rank train instead of the model"),
                             advanced=True)
    param_offload: bool = setting(False, "bool", "verl's actor FSDP param_offload: parameters wait in CPU memory "
                                  "between stages (priced: PCIe both ways around each actor stage)",
                                  config_key="param_offload",
                                  **_offload("actor", "param_offload", "the actor's parameters wait in CPU memory "
                                             "and cross PCIe around each actor stage"), advanced=True)
    optimizer_offload: bool = setting(False, "bool", "verl's actor FSDP optimizer_offload: Adam moments wait in CPU "
                                      "memory between updates (priced: PCIe both ways around the update)",
                                      config_key="optimizer_offload",
                                      **_offload("actor", "optimizer_offload", "the optimizer state waits in CPU "
                                                 "memory and crosses PCIe around each update"), advanced=True)
    # not a flag: a --set key or the log's config says it
    ref_offload: bool = setting(False, "bool", "verl's reference param_offload: the reference model's weights "
                                "wait in CPU memory and reload over PCIe for each reference pass", flag=None,
                                **_offload("ref", "param_offload", "the reference model's weights reload over PCIe "
                                           "for each reference pass"))
    cpu_optimizer: float = setting(
        0.0, "share", "Megatron's CPU optimizer (optimizer_cpu_offload with optimizer_offload_fraction SHARE, 0-1): "
        "that share of the fp32 master weights and Adam moments lives in CPU memory and steps there (priced: "
        "gradients to the host, AdamW at the host's DRAM bandwidth, weights back)", metavar="SHARE",
        config_key="cpu_optimizer",
        megatron=Verl(f"{CPU_OPTIMIZER}.optimizer_offload_fraction", 0.0,
                      "the share of the optimizer (fp32 master weights and Adam moments) the CPU holds and steps, "
                      "with optimizer_cpu_offload on"), advanced=True)
    cpu_optimizer_overlap: bool = setting(
        False, "bool", "Megatron's overlap_cpu_optimizer_d2h_h2d: the CPU optimizer's copies overlap its step",
        config_key="cpu_optimizer_overlap",
        megatron=Verl(f"{CPU_OPTIMIZER}.overlap_cpu_optimizer_d2h_h2d", False,
                      "the CPU optimizer's gradient and weight copies overlap its step (estimate's "
                      "--cpu-optimizer-overlap)"), advanced=True)
    # not flags: a --set key or the log's config says them. estimate assumes recompute on and
    # padding removed (what verl's example scripts set), where verl's own defaults are off.
    gradient_checkpointing: bool = setting(
        True, "bool", "the update recomputes each layer's forward in the backward pass (+1 forward per update)",
        flag=None, **_both(f"{_M}.enable_gradient_checkpointing", False,
                           "the update recomputes each layer's forward in the backward pass (+1 forward per update)"))
    # verl's Megatron workers read their own key (engine/megatron.yaml: True; megatron_actor.py
    # picks the thd or bshd layout from it), its FSDP workers the model's (ppo_trainer.yaml: False)
    remove_padding: bool = setting(
        True, "bool", "trainer passes run on the sequences' own tokens (on) or on every sequence padded to max "
        "prompt + max response (off: cost constant in the lengths)", flag=None,
        fsdp=Verl(f"{_M}.use_remove_padding", False, "trainer passes run on the sequences' own tokens (on) or on "
                  "every sequence padded to max prompt + max response (off: cost constant in the lengths)"),
        megatron=Verl(f"{_A}.megatron.use_remove_padding", True, "Megatron's trainer passes in the packed thd "
                      "layout (on) or padded bshd (off: cost constant in the lengths)"))
    # None: the critic's passes as the actor's (``remove_padding``); a padded critic costs the same
    # every step whatever the lengths. One key under both backends (verl's critic section)
    critic_remove_padding: bool | None = setting(
        None, "switch", "the critic's passes without padding (on), padded (off), or as the actor's (unset)",
        flag=None, **_both("critic.model.use_remove_padding", False, "as use_remove_padding, for the critic's passes"))


@dataclass(frozen=True)
class Mode:
    mode: str = setting("sync", "choice", "sync: rollout and training colocated on all GPUs (default); "
                        "one-step-off: the rollout generates batch k+1 on its own GPUs while the trainer trains on "
                        "batch k; fully-async: the rollout streams samples to the trainer under a staleness bound",
                        choices=("sync", "one-step-off", "fully-async"))
    rollout_gpus: int | None = setting(None, "count", "GPUs of the rollout in the separated modes", advanced=True)
    train_gpus: int | None = setting(None, "count", "GPUs of the trainer in the separated modes", advanced=True)
    framework: str = setting("verl", "choice", "the RL framework's mechanics where they change the cost",
                             choices=("verl", "nemo-rl"), advanced=True)
    # the separated modes' settings (stepmodel/modes.py); None: the mode's own default there
    staleness: float | None = setting(None, "float", "fully-async: the share of a batch the rollout may generate "
                                      "ahead on old weights (verl's staleness_threshold)", lo=0.0, advanced=True)
    partial_rollout: bool | None = setting(None, "switch", "fully-async: resume the sequences in flight at a "
                                           "weight sync", advanced=True)
    updates_per_sync: int | None = setting(None, "count", "fully-async: local updates per batch before the "
                                           "weights sync (verl's trigger_parameter_sync_step)", advanced=True)
    in_flight_updates: bool | None = setting(None, "switch", "the rollout keeps decoding through the weight sync",
                                             advanced=True)
    pipelined_sync: bool | None = setting(None, "switch", "the weight sync's gather and broadcast overlap",
                                          advanced=True)
    checkpoint_engine: bool | None = setting(None, "switch", "the weight sync's tensors packed into buckets",
                                             advanced=True)
    trainer_logprobs: bool | None = setting(None, "switch", "fully-async: the trainer runs the old-policy "
                                            "log-prob pass (NeMo RL)", flag=None)


SECTIONS = {"cluster": Cluster, "batch": Batch, "lengths": Lengths, "rollout": Rollout, "trainer": Trainer,
            "mode": Mode}


@dataclass(frozen=True)
class RunSpec:
    """A run: one value per declared setting, checked once (``build``)."""

    cluster: Cluster = field(default_factory=Cluster)
    batch: Batch = field(default_factory=Batch)
    lengths: Lengths = field(default_factory=Lengths)
    rollout: Rollout = field(default_factory=Rollout)
    trainer: Trainer = field(default_factory=Trainer)
    mode: Mode = field(default_factory=Mode)

    @classmethod
    def build(cls, values: dict, origin=None) -> RunSpec:
        """A RunSpec of ``values`` (setting name -> value; unknown names refused), each checked
        against its declaration; ``origin(name) -> str`` says where a value came from (default:
        its flag)."""
        decls = declarations()
        unknown = sorted(set(values) - set(decls))
        if unknown:
            raise SpecError(f"not a run setting: {', '.join(unknown)}")
        where = origin or (lambda name: decls[name].flag or name)
        parts: dict[str, dict] = {s: {} for s in SECTIONS}
        for name, value in values.items():
            d = decls[name]
            if name in ("model", "gpu") or (name == "micro_batch_tokens" and value in ("auto", None)):
                parts[d.section][name] = value  # a preset, a ModelSpec / GPU, or the automatic budget
                continue
            parts[d.section][name] = d.check(value, where(name))
        spec = cls(**{s: SECTIONS[s](**kw) for s, kw in parts.items()})
        spec.check_layout(where)
        return spec

    def check_layout(self, where) -> None:
        """The checks between settings that need no model or profile: one-line errors."""
        t, gpus, tp = self.trainer, self.cluster.gpus, self.rollout.rollout_tp
        if gpus is not None and tp is not None and gpus % tp:
            raise SpecError(f"{where('rollout_tp')} {tp} does not divide {where('gpus')} {gpus}: every inference "
                            f"engine needs whole GPUs")
        if gpus is not None and t.strategy == "megatron" and gpus % (t.train_tp * t.train_pp):
            raise SpecError(f"{where('train_tp')} {t.train_tp} x {where('train_pp')} {t.train_pp} does not divide "
                            f"{where('gpus')} {gpus}")
        if t.strategy != "megatron":
            # verl's FSDP trainer shards every parameter over all GPUs: no tensor or pipeline split to
            # price, so a Megatron layout given with it would be dropped unsaid
            for name, what in (("train_tp", "tensor"), ("train_pp", "pipeline")):
                value = getattr(t, name)
                if value != default(name):
                    raise SpecError(f"{where(name)} {value} is Megatron's {what} parallelism: add --strategy "
                                    f"megatron (verl's FSDP trainer has none)")
        if self.rollout.async_scheduling and self.rollout.engine != "vllm-v1":
            raise SpecError(f"{where('async_scheduling')} needs the V1 engine ({where('engine')} vllm-v1): vLLM's "
                            f"V0 loop has no asynchronous scheduler")
        if t.cpu_optimizer and t.strategy != "megatron":
            raise SpecError("--cpu-optimizer is Megatron's HybridDeviceOptimizer: it needs --strategy megatron "
                            "(FSDP's CPU offload of the optimizer is --optimizer-offload)")

    def flat(self) -> dict:
        """Setting name -> value."""
        return {name: getattr(getattr(self, d.section), name) for name, d in declarations().items()}

    def run_settings(self) -> dict:
        """Setting name -> value of what one side of a run is priced from: all but the cluster
        (model, GPU, count) and the execution mode."""
        return {name: getattr(getattr(self, d.section), name) for name, d in declarations().items()
                if d.section not in ("cluster", "mode")}

    def with_mode(self, mode: str, **values) -> RunSpec:
        """This run in ``mode``: the mode settings given in ``values``, the others unset."""
        return dataclasses.replace(self, mode=Mode(mode=mode, framework=self.mode.framework, **values))

    def replace(self, **values) -> RunSpec:
        return RunSpec.build({**self.flat(), **values})


@cache
def declarations() -> dict[str, Decl]:
    """Setting name -> its declaration, in the sections' order."""
    out = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata["decl"])
            meta.setdefault("flag", "--" + f.name.replace("_", "-"))
            out[f.name] = Decl(name=f.name, section=section, **meta)
    return out


def default(name: str):
    """A setting's default (the one place it is written: its declaration)."""
    return declarations()[name].default


def verl_default(name: str, backend: str = "fsdp"):
    """verl's own default of a setting under ``backend`` (its key absent from a run's config)."""
    v = declarations()[name].verl_key(backend)
    if v is None:
        raise KeyError(f"{name} has no verl key under {backend}")
    return v.default


def verl_key(name: str, backend: str = "fsdp") -> str:
    v = declarations()[name].verl_key(backend)
    if v is None:
        raise KeyError(f"{name} has no verl key under {backend}")
    return v.key


def by_verl_key() -> dict[str, tuple[Decl, str]]:
    """verl key -> (the setting it sets, the backend it belongs to; "both" when one key serves both)."""
    out: dict[str, tuple[Decl, str]] = {}
    for d in declarations().values():
        for backend, v in d.verl:
            have = out.get(v.key)
            out[v.key] = (d, "both" if have and have[0] is d else backend)
    return out


# the sections whose flags each command writes itself (their help differs per command: required,
# or the profile's; the execution modes' group)
OWN_FLAGS = ("cluster", "mode")


def flag_settings() -> list[Decl]:
    """The declarations whose flags are generated (``polytrace.cli._settings.add_run_flags``)."""
    return [d for d in declarations().values() if d.flag and d.section not in OWN_FLAGS]


# The settings a log may leave unstated that validate and calibrate LOG take as flags (their
# ``Overrides``, ``calibrate.logconfig``): the flags are generated from these declarations.
LOG_OVERRIDES = ("model", "gpu", "gpus", "prompts", "n", "max_prompt_len", "max_response_len", "rollout_tp")
