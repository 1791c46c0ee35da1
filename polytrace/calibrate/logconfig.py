"""The run configuration of a training log, checked at the boundary, with what the log leaves
unstated inferred from its metrics.

Every value is read from the printed config, else the launch command (``polytrace.logs``), and
checked for type and range before anything is sized from it: a count is a whole number in
``[1, MAX_COUNT]``, a length in ``[1, MAX_TOKENS]``, a memory fraction in ``(0, 1]``. A bad value is
a one-line error naming the key, where it was read and the flag that overrides it; a shell
variable the log never assigns is named the same way.

What the log does not state is inferred from the step metrics where they determine it (n,
prompts per step, the GPU count, the length caps: ``logmetrics.py``), and every inferred value is
reported with its source.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import PolytraceError
from ..logs import TrainingLog, Unresolved
from ..logs.companion import attach, read_companion
from ..logs.timers import apply_stage_map
from ..run.dialects import NEMO_RL, VERL_EXTRA, nemo_rl_as_verl, trainer_backend, trainer_dialect
from ..run.spec import verl_default, verl_key
from ..stepmodel.stages import PRECISIONS, RunConfig
from ..wording import counted
from .engine import read_engine
from .identity import (  # noqa: F401
    DEFAULT_GPU,
    check_companion_batch,
    guess_model,
    host_gpu_count,
    model_family,
    resolve_critic_model,
    resolve_gpu,
    resolve_model,
    resolve_ref_model,
)
from .logmetrics import (
    MAX_COUNT,
    MAX_TOKENS,
    infer_cap,
    infer_gpus,
    infer_n,
    infer_prompts,
    observed_max,
)
from .settings import CPU_OPTIMIZER, given_settings
from .trainer_layout import megatron_layout, megatron_recompute_note, ulysses_note

# Sequences per step the simulation prices (the largest published RL batches are ~16k).
MAX_SEQUENCES = 1 << 20


@dataclass
class Overrides:
    """What the user states because the log does not (CLI flags)."""

    model: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    prompts: int | None = None
    n: int | None = None
    max_prompt_len: int | None = None
    max_response_len: int | None = None
    rollout_tp: int | None = None
    configs: tuple = ()  # companion files (--config)
    stage_map: dict | None = None  # stage -> timer (--stage gen=KEY)
    # ``--set KEY=VALUE`` in verl's key names, checked (``settings.parse_settings``): read as if the
    # log's printed config held them
    settings: dict = field(default_factory=dict)


class _Values:
    """Typed, range-checked access to a log's flattened config."""

    def __init__(self, log: TrainingLog):
        self.log = log
        self.cfg = log.config

    def raw(self, *keys):
        for k in keys:
            if self.cfg.get(k) is not None:
                return k, self.cfg[k]
        return None, None

    def _where(self, key: str) -> str:
        return f"{self.log.path}: {key} in {self.log.source_of(key)}"

    def _unresolved(self, key: str, value: Unresolved, flag: str | None) -> PolytraceError:
        hint = f"; pass {flag}" if flag else "; assign it in the script or fix the log"
        return PolytraceError(f"{self._where(key)} is {value.text!r}: {value.explain()}{hint}")

    def count(self, *keys, flag: str | None = None, lo: int = 1, hi: int = MAX_COUNT) -> int | None:
        key, value = self.raw(*keys)
        if key is None:
            return None
        if isinstance(value, Unresolved):
            raise self._unresolved(key, value, flag)
        hint = f"; pass {flag}" if flag else ""
        what = f"a whole number in [{lo:,}, {hi:,}]"
        if isinstance(value, bool) or isinstance(value, (list, dict, tuple)):
            raise PolytraceError(f"{self._where(key)} is {value!r}: expected {what}{hint}")
        if isinstance(value, str):
            try:
                value = int(value.strip()) if len(value) <= 20 else None
            except ValueError:
                value = None
            if value is None:
                raise PolytraceError(f"{self._where(key)} is {self.cfg[key]!r}: expected {what}{hint}")
        if isinstance(value, float):
            if not math.isfinite(value) or value != int(value):
                raise PolytraceError(f"{self._where(key)} is {value!r}: expected {what}{hint}")
            value = int(value)
        if not isinstance(value, int) or not lo <= value <= hi:
            raise PolytraceError(f"{self._where(key)} is {value!r}: expected {what}{hint}")
        return value

    def fraction(self, *keys) -> float | None:
        key, value = self.raw(*keys)
        if key is None:
            return None
        if isinstance(value, Unresolved):
            raise self._unresolved(key, value, None)
        try:
            v = float(value) if not isinstance(value, (bool, list, dict, tuple)) else float("nan")
        except (TypeError, ValueError, OverflowError):
            v = float("nan")
        if not (math.isfinite(v) and 0 < v <= 1):
            raise PolytraceError(f"{self._where(key)} is {value!r}: expected a fraction in (0, 1]")
        return v

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None or isinstance(value, Unresolved):
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value != 0
        if isinstance(value, str):
            # verl tests these with ``if value:``; hydra keeps an unknown word as a string
            return value.strip().lower() not in ("", "false", "0", "no", "off")
        return bool(value)

    def text(self, key: str, default: str) -> str:
        value = self.cfg.get(key)
        return value if isinstance(value, str) else default


# --- the configuration -------------------------------------------------------------------------


def _in_verl_keys(log: TrainingLog, notes: list) -> TrainingLog:
    """A NeMo RL run's configuration read under verl's keys too (``dialects.nemo_rl_as_verl``),
    where the log does not state them itself; the notes say so once."""
    config = log.config
    if trainer_dialect(config) != NEMO_RL:
        return log
    added = {k: v for k, v in nemo_rl_as_verl(config).items() if config.get(k) is None}
    notes.append(f"NeMo RL configuration: {len(added)} setting(s) read through its dialect (run/dialects.py)")
    return dataclasses.replace(log, companion={**log.companion, **added},
                               companion_sources={**log.companion_sources,
                                                  **{k: "the NeMo RL configuration" for k in added}})


def config_from_log(log: TrainingLog, ov: Overrides | None = None) -> tuple[RunConfig, list[str]]:
    """The run's configuration; notes list what was assumed or inferred rather than read."""
    ov = ov or Overrides()
    notes: list[str] = []
    if ov.configs:
        attach(log, [read_companion(c) for c in ov.configs])
    apply_stage_map(log, ov.stage_map, notes)
    log = given_settings(log, ov)  # --set wins over the log and its companion files
    log = _in_verl_keys(log, notes)
    v = _Values(log)
    stages = set(log.stages())
    model = resolve_model(log, ov.model, notes)
    critic = resolve_critic_model(log, notes)
    ref_model = resolve_ref_model(log, model, notes) if "ref" in stages else None
    gpu = resolve_gpu(log, ov.gpu, notes)
    n_gpus = ov.gpus or _gpu_count(log, v, notes)
    prompts = ov.prompts or _prompts_per_step(log, v, notes)
    n = ov.n or v.count("actor_rollout_ref.rollout.n", flag="--n N")
    if prompts is None and n is not None:
        prompts = infer_prompts(log, n)
        if prompts is not None:
            notes.append(f"inferred: prompts per step = {prompts} from perf/total_num_tokens / (n x (prompt "
                         "+ response mean length))")
    if prompts is None:
        raise PolytraceError(f"{log.path}: the log does not state the batch size (data.train_batch_size) and "
                             "its metrics do not determine it; pass --prompts N")
    if n is None:
        n = infer_n(log, prompts)
        if n is not None:
            notes.append(f"inferred: responses per prompt n = {n} from perf/total_num_tokens / (prompts x "
                         "(prompt + response mean length))")
        else:
            n = 1
            notes.append("responses per prompt not stated and not in the metrics: assumed verl's default n = 1 "
                         "(pass --n)")
    if prompts * n > MAX_SEQUENCES:
        raise PolytraceError(f"{log.path}: {prompts} prompts x {n} responses = {prompts * n:,} sequences per step, "
                             f"more than {MAX_SEQUENCES:,}; pass --prompts / --n")
    check_companion_batch(log, int(prompts), int(n), int(n_gpus), ov)
    max_p = ov.max_prompt_len or v.count("data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length",
                                         flag="--max-prompt-len L", hi=MAX_TOKENS)
    max_r = ov.max_response_len or v.count("data.max_response_length", "actor_rollout_ref.rollout.response_length",
                                           flag="--max-response-len L", hi=MAX_TOKENS)
    max_p = max_p or _length_cap(log, "prompt", "--max-prompt-len", notes)
    max_r = max_r or _length_cap(log, "response", "--max-response-len", notes)
    tp = ov.rollout_tp or v.count("actor_rollout_ref.rollout.tensor_model_parallel_size", flag="--rollout-tp T")
    if tp is None:
        tp = 1
        notes.append("rollout tensor parallelism not stated: assumed 1 (pass --rollout-tp)")
    if n_gpus % tp:
        raise PolytraceError(f"{log.path}: rollout tensor parallelism {tp} does not divide the GPU count {n_gpus}; "
                             "pass --rollout-tp or --gpus")
    strategy, why = trainer_backend(log.config, log.command)
    if strategy == "megatron" and not why.startswith("actor_rollout_ref"):
        notes.append(f"trainer: verl's Megatron workers, from {why} (their own keys and defaults read)")
    train_tp = v.count(VERL_EXTRA["train_tp"]) or 1
    train_pp = v.count(VERL_EXTRA["train_pp"]) or 1
    if strategy == "megatron" and n_gpus % (train_tp * train_pp):
        raise PolytraceError(f"{log.path}: Megatron TP {train_tp} x PP {train_pp} does not divide the GPU count "
                             f"{n_gpus}; pass --gpus")
    layout = megatron_layout(log, v, strategy, model, int(n_gpus), int(tp), train_tp, train_pp)
    ulysses_note(v, strategy, int(n_gpus), notes)
    megatron_recompute_note(v, strategy, _setting(v, "gradient_checkpointing", strategy), notes)
    if v.flag("reward_model.enable", False):
        # verl's model-based reward: a reward model's forward over every response, inside
        # timing_s/reward, where the model prices rule-based scoring only (Efficiency.reward_s_per_response)
        rm = v.text("reward_model.model.path", "")
        notes.append(f"reward_model.enable: a reward model{f' ({rm[:60]})' if rm else ''} scores every response with "
                     "a forward pass, which is not priced (only rule-based scoring is): a zero-shot step misses it; "
                     "a calibration takes it into the step's time outside the stages")
    stage_mb = _stage_micro_batches(v, int(n_gpus))
    mb_seqs, mb_tokens = stage_mb.get("update_actor", (None, None))
    mini = v.count("actor_rollout_ref.actor.ppo_mini_batch_size")
    epochs = v.count("actor_rollout_ref.actor.ppo_epochs") or 1
    mini_batches = max(1, prompts // mini) * epochs if mini else epochs
    mem = v.fraction(verl_key("mem_fraction", strategy)) or verl_default("mem_fraction", strategy)
    if not 0.05 <= mem <= 0.99:
        notes.append(f"gpu_memory_utilization {mem} priced as {min(max(mem, 0.05), 0.99)}")
        mem = min(max(mem, 0.05), 0.99)
    has_critic = "values" in stages or "update_critic" in stages
    precision = _rollout_precision(v, notes)
    async_scheduling = _setting(v, "async_scheduling", strategy)
    cpu_share = _cpu_optimizer_share(v, strategy, notes)
    run = RunConfig(
        model=model, gpu=gpu, n_gpus=int(n_gpus), prompts_per_step=int(prompts), n=int(n),
        max_prompt_len=int(max_p), max_response_len=int(max_r), rollout_tp=int(tp),
        strategy=strategy, train_tp=int(train_tp), train_pp=int(train_pp), **layout,
        algorithm="ppo" if has_critic else "grpo", use_ref="ref" in stages,
        critic_model=critic, ref_model=ref_model, micro_batch_tokens=mb_tokens or None,
        micro_batch_seqs=int(mb_seqs) if mb_seqs else None,
        # each trainer's own key and default (run/dialects.py): a Megatron run's printed config may
        # carry the FSDP key, which its workers never read
        remove_padding=_setting(v, "remove_padding", strategy),
        critic_remove_padding=(_setting(v, "critic_remove_padding", strategy)
                               if has_critic and v.raw(verl_key("critic_remove_padding", strategy))[0] else None),
        mem_fraction=float(mem),
        gradient_checkpointing=_setting(v, "gradient_checkpointing", strategy),
        max_num_seqs=v.count(verl_key("max_num_seqs", strategy)) or verl_default("max_num_seqs", strategy),
        eager=_setting(v, "eager", strategy), async_scheduling=async_scheduling,
        engine=read_engine(log, async_scheduling, notes),
        old_log_prob_in_gen="old_log_prob" not in stages,
        # the offload switches sit under the trainer's own config (fsdp_config or megatron)
        ref_offload=_setting(v, "ref_offload", strategy),
        param_offload=_setting(v, "param_offload", strategy),
        optimizer_offload=_setting(v, "optimizer_offload", strategy),
        lora_rank=min(v.count("actor_rollout_ref.model.lora_rank", lo=0) or 0, model.hidden),
        # verl balances the ranks' token sums (trainer.balance_batch) but still runs fixed-size
        # micro-batches in lock step, each waiting for its slowest rank; the contiguous split of
        # the shuffled synthetic batch (validate.step_batch) stands in for those waits. Modelling
        # the balance alone lowered the Qwen2-7B log's log-prob accuracy from 98.3% to 97.8%.
        balance_batch=False,
        mini_batches=mini_batches, stage_micro_batches=stage_mb, notes=notes, rollout_precision=precision,
        cpu_optimizer=cpu_share, cpu_optimizer_overlap=v.flag(f"{CPU_OPTIMIZER}.overlap_cpu_optimizer_d2h_h2d", False),
        generated_share=log.generated.share if log.generated is not None else None,
        max_tool_response_chars=v.count("actor_rollout_ref.rollout.multi_turn.max_tool_response_length")
        or RunConfig.max_tool_response_chars,
        gen_batch_prompts=_gen_batch_prompts(log, v, int(prompts), int(n)))
    if run.old_log_prob_in_gen:
        notes.append("no old_log_prob timer: this verl computes it inside gen, priced there")
    return run, notes


def _gen_batch_prompts(log: TrainingLog, v: _Values, prompts: int, n: int) -> int | None:
    """DAPO's ``data.gen_batch_size`` where it differs from the prompts trained on
    (``dynamic_sampling.py``); fewer prompts generated than trained on is no DAPO batch."""
    from .dynamic_sampling import GEN_BATCH_KEY

    gen = v.count(GEN_BATCH_KEY, hi=MAX_SEQUENCES)
    if gen is None or gen == prompts:
        return None
    if gen * n > MAX_SEQUENCES:
        raise PolytraceError(f"{log.path}: {GEN_BATCH_KEY} {gen} x {n} responses = {gen * n:,} sequences per "
                             f"generation batch, more than {MAX_SEQUENCES:,}; pass --set {GEN_BATCH_KEY}=N")
    if gen < prompts:
        raise PolytraceError(f"{log.path}: {GEN_BATCH_KEY} {gen} is below data.train_batch_size {prompts}: verl's "
                             "dynamic sampling generates at least the prompts it trains on")
    return gen


def _setting(v: _Values, name: str, backend: str) -> bool:
    """A declared switch as ``backend``'s workers read it: their key, else verl's default."""
    return v.flag(verl_key(name, backend), verl_default(name, backend))


def _cpu_optimizer_share(v: _Values, strategy: str, notes: list[str]) -> float:
    """The share of the actor's optimizer Megatron steps in CPU memory: verl's Megatron actor
    passes ``optimizer_cpu_offload`` and ``optimizer_offload_fraction`` to Megatron's optimizer
    (absent: Megatron-core's defaults, off and 0). Read for a Megatron actor only; FSDP's workers
    never read them (a note)."""
    if not v.flag(f"{CPU_OPTIMIZER}.optimizer_cpu_offload", False):
        return 0.0
    if strategy != "megatron":
        notes.append("optimizer_cpu_offload is a Megatron setting: this FSDP actor does not read it")
        return 0.0
    key, value = v.raw(f"{CPU_OPTIMIZER}.optimizer_offload_fraction")
    if key is None or value == 0:
        return 0.0
    return float(v.fraction(key))


def _rollout_precision(v: _Values, notes: list[str]) -> str:
    """The engine's precision from verl's ``actor_rollout_ref.rollout.quantization`` (null: the
    model's bf16 weights; "fp8": vLLM's FP8). Another quantization is priced as bf16, with a note."""
    from .settings import QUANTIZATIONS

    key = verl_key("rollout_precision")  # one key under both backends
    value = v.cfg.get(key)
    if value is None or isinstance(value, Unresolved):
        return "bf16"
    text = str(value).strip().lower()
    if text in QUANTIZATIONS or text in PRECISIONS:  # verl's value, or a --set one (already a precision)
        return QUANTIZATIONS.get(text, text)
    notes.append(f"rollout quantization {str(value)[:40]!r} not priced: the engine priced with bf16 weights")
    return "bf16"


def _prompts_per_step(log: TrainingLog, v: _Values, notes: list[str]) -> int | None:
    """``data.train_batch_size``; a fully async trainer leaves it 0 and trains on
    ``async_training.require_batches`` mini-batches of ``ppo_mini_batch_size`` prompts per step."""
    if log.mode == "fully-async" and v.raw("data.train_batch_size")[1] in (0, None):
        need = v.count("async_training.require_batches", flag="--prompts N") or 1
        mini = v.count("actor_rollout_ref.actor.ppo_mini_batch_size", flag="--prompts N")
        if mini:
            notes.append(f"fully async: {need} x ppo_mini_batch_size {mini} = {need * mini} prompts per trainer step")
            return need * mini
        return None
    return v.count("data.train_batch_size", flag="--prompts N")


def _gpu_count(log: TrainingLog, v: _Values, notes: list[str]) -> int:
    per_node = v.count("trainer.n_gpus_per_node", flag="--gpus N")
    nodes = v.count("trainer.nnodes", flag="--gpus N")
    split = execution_split(log)
    if per_node is None:
        per_node = host_gpu_count(log, None, notes)
    if per_node is not None:
        total = per_node * (nodes or 1)
        if split.rollout_gpus:
            total += split.rollout_gpus
        if total > MAX_COUNT:
            raise PolytraceError(f"{log.path}: {total:,} GPUs is more than {MAX_COUNT:,}; pass --gpus N")
        return total
    found = infer_gpus(log)
    if found is None:
        raise PolytraceError(f"{log.path}: the log does not state the GPU count (trainer.n_gpus_per_node) and its "
                             "metrics do not determine it; pass --gpus N")
    notes.append(f"inferred: {counted(found[0], 'GPU')} from {found[1]}")
    return found[0]


def _length_cap(log: TrainingLog, kind: str, flag: str, notes: list[str]) -> int:
    cap = infer_cap(log, kind)
    if cap is not None:
        notes.append(f"inferred: max {kind} length {cap} from {kind}_length/max on steps with "
                     f"{kind}_length/clip_ratio > 0")
        return cap
    cap = observed_max(log, f"{kind}_length/max")
    if cap is None:
        raise PolytraceError(f"{log.path}: no max {kind} length in the log; pass {flag}")
    notes.append(f"max {kind} length not stated and never reached: using the longest logged {kind} ({cap}; "
                 f"pass {flag})")
    return cap


@dataclass
class Split:
    mode: str  # "sync", "one-step-off", "fully-async"
    rollout_gpus: int = 0  # GPUs of a separate rollout pool (0: colocated with the trainer)


def execution_split(log: TrainingLog) -> Split:
    """The execution mode and, for the separated modes, the rollout pool's GPUs
    (``rollout.n_gpus_per_node`` x ``rollout.nnodes``) as the log states them."""
    v = _Values(log)
    mode = log.mode
    if mode == "sync":
        return Split(mode)
    per_node = v.count("rollout.n_gpus_per_node", "actor_rollout_ref.rollout.n_gpus_per_node", flag="--gpus N")
    nodes = v.count("rollout.nnodes", "actor_rollout_ref.rollout.nnodes", flag="--gpus N") or 1
    return Split(mode, per_node * nodes if per_node else 0)


# stage -> (config prefix, micro-batch key stem, dynamic-batching switch, token budget key)
_MICRO_KEYS = {
    "update_actor": ("actor_rollout_ref.actor", "ppo_micro_batch_size", "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
    "old_log_prob": ("actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_use_dynamic_bsz",
                     "log_prob_max_token_len_per_gpu"),
    "ref": ("actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_use_dynamic_bsz",
            "log_prob_max_token_len_per_gpu"),
    "update_critic": ("critic", "ppo_micro_batch_size", "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
    "values": ("critic", "forward_micro_batch_size", "use_dynamic_bsz", "forward_max_token_len_per_gpu"),
}


def _stage_micro_batches(v: _Values, n_gpus: int) -> dict:
    """Per-stage micro-batching as verl reads it: ``<key>_per_gpu``, else the older global
    ``<key>`` divided over the GPUs; a token budget where dynamic batching is on. The critic's
    forward falls back to its update's micro-batch, the log-prob ones to the actor's."""
    out = {}
    for stage, (prefix, key, dyn_key, tok_key) in _MICRO_KEYS.items():
        tokens = v.count(f"{prefix}.{tok_key}", hi=MAX_TOKENS * 64)
        if v.flag(f"{prefix}.{dyn_key}", False) and tokens:
            out[stage] = (None, tokens)
            continue
        seqs = v.count(f"{prefix}.{key}_per_gpu")
        if seqs is None:
            total = v.count(f"{prefix}.{key}")
            if total:
                seqs = max(1, total // max(1, n_gpus))
        if seqs is not None:
            out[stage] = (int(seqs), None)
    if "values" not in out and "update_critic" in out:
        out["values"] = out["update_critic"]
    for stage in ("old_log_prob", "ref"):
        if stage not in out and "update_actor" in out:
            out[stage] = out["update_actor"]
    return out
