"""The verl settings the step model prices, in verl's own key names: one registry, read by
``--set KEY=VALUE`` (``validate``, ``calibrate``, ``estimate``) and by the inference of what a log
leaves unstated (``polytrace.calibrate.infer``).

Each entry names the key, its type, the default verl uses when the key is absent
(``verl/trainer/config/ppo_trainer.yaml`` of verl 0.3-0.4, the versions of the shared logs; their
printed configs show the same values), and what it changes in the model. A value given with
``--set`` is checked here (type and range) and enters the run's configuration exactly as if the
log's printed config had held it, so the log's own reading (``logconfig``) does the rest.

Refused, each as a one-line usage error: a key not in the registry (with the nearest names), a
value of the wrong type, the same key twice with two values, and settings that contradict each
other (a token budget with dynamic batching off, a micro-batch size with it on, or a ``--set``
against the dedicated flag of the same quantity).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace

from ..errors import PolytraceError
from ..run.dialects import other_backend_keys, trainer_backend
from ..run.spec import declarations


class SettingError(PolytraceError):
    """A bad ``--set``: the CLI reports it as a usage error (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Setting:
    key: str  # verl's key
    # "bool", "int", "fraction" (an engine's memory share, [0.05, 0.99]), "share" ([0, 1]), "model" (a
    # preset name, HF repo id or config.json) or "quantization" (vLLM's: "fp8", or null for the
    # model's own bf16 weights)
    kind: str
    default: object  # what verl uses when the key is absent (None: no default, the log or flag decides)
    effect: str  # what it changes in the step model
    lo: int = 1
    hi: int = 1 << 20
    # the ``estimate`` argument it sets (``compose.estimate.build_config``), or ``run:<field>`` for
    # a ``RunConfig`` field set after the configuration is built
    estimate: str | None = None
    cost_2x: bool = False  # can change a stage's cost 2x or more (inferred when a log leaves it unstated)


_A, _R, _F, _C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref", "critic"
# Megatron's OptimizerConfig fields, as verl's Megatron actor passes them through (its scripts add
# them with hydra's ``+``: ``+actor_rollout_ref.actor.optim.override_optimizer_config.<field>=``);
# absent, Megatron-core's defaults hold: the optimizer on the GPU
CPU_OPTIMIZER = f"{_A}.optim.override_optimizer_config"

# (role, switch, the declared setting it sets: its help says what it prices, polytrace/run/spec.py)
OFFLOAD_SWITCHES = (
    ("actor", "param_offload", "param_offload"),
    ("actor", "optimizer_offload", "optimizer_offload"),
    ("ref", "param_offload", "ref_offload"),
)


# a declared setting's kind (polytrace.run.spec) -> the registry's
# ("switch": on, off or unset; ``--set`` gives on or off)
_KINDS = {"count": "int", "nonneg": "int", "fraction": "fraction", "share": "share", "bool": "bool",
          "switch": "bool"}


def _declared(name: str, backend: str = "fsdp", *, cost_2x: bool = False) -> Setting:
    """The registry entry of a RunSpec setting's verl key under ``backend``: its kind, bounds,
    verl default and effect as the setting declares them; ``--set`` gives the setting itself."""
    d = declarations()[name]
    v = d.verl_key(backend)
    hi = d.hi if d.hi is not None and d.hi != float("inf") else 1 << 20
    # a key spelled otherwise than its setting: verl's rollout quantization, the one such key
    kind = "quantization" if v.values else _KINDS[d.kind]
    return Setting(v.key, kind, v.default, v.effect, lo=0 if d.kind == "nonneg" else 1, hi=int(hi),
                   estimate=name, cost_2x=cost_2x)


def offload_key(strategy: str, role: str, what: str) -> str:
    """verl's key of an offload switch for the trainer ``strategy`` ("fsdp" or "megatron"):
    ``actor_rollout_ref.{role}.fsdp_config.{what}`` or ``actor_rollout_ref.{role}.megatron.{what}``."""
    return f"actor_rollout_ref.{role}.{'megatron' if strategy == 'megatron' else 'fsdp_config'}.{what}"


REGISTRY: dict[str, Setting] = {s.key: s for s in (
    _declared("remove_padding", cost_2x=True),
    _declared("remove_padding", "megatron", cost_2x=True),
    _declared("critic_remove_padding"),
    _declared("gradient_checkpointing", cost_2x=True),
    _declared("lora_rank"),
    _declared("eager", cost_2x=True),
    _declared("async_scheduling"),
    _declared("mem_fraction", cost_2x=True),
    _declared("rollout_tp", cost_2x=True),
    _declared("max_num_seqs"),
    _declared("rollout_precision", cost_2x=True),
    _declared("n"),
    # not a RunSpec setting: its value is a model (a preset, HF id or config.json, resolved to a
    # ModelSpec that RunConfig.ref_model holds), which the declarations' scalar checks cannot hold;
    # only the actor's model is declared (Cluster.model, checked by get_model outside the RunSpec)
    Setting(f"{_F}.model.path", "model", None,
            "a reference policy other than the actor (a teacher): the reference pass runs that model",
            estimate="run:ref_model", cost_2x=True),
    _declared("prompts"),
    _declared("max_prompt_len"),
    _declared("max_response_len"),
    _declared("ppo_mini_batch"),
    _declared("gen_batch"),
    # no estimate target, so no RunSpec setting (docs/run-spec.md): read from a log into
    # RunConfig.mini_batches (epochs x mini-batches), like the other passes' micro-batching below
    # (into RunConfig.stage_micro_batches); estimate prices every pass with the update's
    Setting(f"{_A}.ppo_epochs", "int", 1, "passes of the update over the batch", hi=1000),
    # the offload switches, under the FSDP workers' fsdp_config and under verl's Megatron workers
    # (actor_rollout_ref.actor.strategy=megatron): a run reads the one of its strategy
    *(_declared(target, trainer, cost_2x=True)
      for trainer in ("fsdp", "megatron") for _role, _what, target in OFFLOAD_SWITCHES),
    # not a RunSpec setting: verl's switch and optimizer_offload_fraction state one quantity, the
    # declared cpu_optimizer share (off, or on with fraction 0, is share 0); estimate_arguments folds
    # the pair into it, so a second setting would be a second name for the same share
    Setting(f"{CPU_OPTIMIZER}.optimizer_cpu_offload", "bool", False,
            "Megatron's HybridDeviceOptimizer: optimizer_offload_fraction of the optimizer lives in CPU memory "
            "and steps there (Megatron trainer; estimate's --cpu-optimizer)", estimate="run:cpu_optimizer_offload"),
    _declared("cpu_optimizer", "megatron"),
    _declared("cpu_optimizer_overlap", "megatron"),
    # not a RunSpec setting: it picks which of two declared settings verl reads, micro_batch_tokens
    # (on) or micro_batch_seqs (off); the RunSpec states it as micro_batch_tokens None with fixed
    # micro-batches, and estimate_arguments folds the switch into that (a second copy would disagree)
    Setting(f"{_A}.use_dynamic_bsz", "bool", False,
            "update micro-batches of up to ppo_max_token_len_per_gpu tokens (on) or of "
            "ppo_micro_batch_size_per_gpu sequences (off): the per-micro-batch cost follows the tokens",
            estimate="run:dynamic", cost_2x=True),
    _declared("micro_batch_tokens", cost_2x=True),
    _declared("micro_batch_seqs", cost_2x=True),
    Setting(f"{_R}.log_prob_use_dynamic_bsz", "bool", False, "dynamic batching of the old-policy log-prob pass"),
    Setting(f"{_R}.log_prob_max_token_len_per_gpu", "int", 16384, "token budget of a log-prob micro-batch"),
    Setting(f"{_R}.log_prob_micro_batch_size_per_gpu", "int", None, "sequences per log-prob micro-batch per GPU"),
    Setting(f"{_F}.log_prob_use_dynamic_bsz", "bool", False, "dynamic batching of the reference pass"),
    Setting(f"{_F}.log_prob_max_token_len_per_gpu", "int", 16384, "token budget of a reference micro-batch"),
    Setting(f"{_F}.log_prob_micro_batch_size_per_gpu", "int", None, "sequences per reference micro-batch per GPU"),
    Setting(f"{_C}.use_dynamic_bsz", "bool", False, "dynamic batching of the critic's passes"),
    Setting(f"{_C}.ppo_max_token_len_per_gpu", "int", 32768, "token budget of a critic update micro-batch"),
    Setting(f"{_C}.ppo_micro_batch_size_per_gpu", "int", None, "sequences per critic update micro-batch per GPU"),
    Setting(f"{_C}.forward_micro_batch_size_per_gpu", "int", None, "sequences per critic forward micro-batch"),
    Setting(f"{_C}.forward_max_token_len_per_gpu", "int", 32768, "token budget of a critic forward micro-batch"),
)}

# (dynamic-batching switch, its token budget, its micro-batch size): the budget applies only with
# the switch on, the size only with it off (verl ignores the other).
_MICRO_GROUPS = (
    (f"{_A}.use_dynamic_bsz", f"{_A}.ppo_max_token_len_per_gpu", f"{_A}.ppo_micro_batch_size_per_gpu"),
    (f"{_R}.log_prob_use_dynamic_bsz", f"{_R}.log_prob_max_token_len_per_gpu",
     f"{_R}.log_prob_micro_batch_size_per_gpu"),
    (f"{_F}.log_prob_use_dynamic_bsz", f"{_F}.log_prob_max_token_len_per_gpu",
     f"{_F}.log_prob_micro_batch_size_per_gpu"),
    (f"{_C}.use_dynamic_bsz", f"{_C}.ppo_max_token_len_per_gpu", f"{_C}.ppo_micro_batch_size_per_gpu"),
)

# verl's rollout ``quantization`` as written -> the engine's precision (``RunConfig.rollout_precision``),
# as its declaration spells it
QUANTIZATIONS = dict(declarations()["rollout_precision"].verl_key().values)
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def near_keys(key: str, n: int = 3) -> list[str]:
    """The registry's keys nearest to ``key``: on the whole key, then on its last part."""
    keys = list(REGISTRY)
    out = difflib.get_close_matches(key, keys, n=n, cutoff=0.6)
    tail = key.rsplit(".", 1)[-1]
    by_tail = {k.rsplit(".", 1)[-1]: k for k in keys}
    for t in difflib.get_close_matches(tail, list(by_tail), n=n, cutoff=0.7):
        if by_tail[t] not in out:
            out.append(by_tail[t])
    return out[:n]


def _value(setting: Setting, text: str):
    t = text.strip()
    what = f"--set {setting.key}={text[:40]!r}"
    if setting.kind == "bool":
        if t.lower() in _TRUE:
            return True
        if t.lower() in _FALSE:
            return False
        raise SettingError(f"{what}: expected true or false")
    if setting.kind == "quantization":
        if t.lower() in QUANTIZATIONS:
            return QUANTIZATIONS[t.lower()]
        raise SettingError(f"{what}: expected fp8 or null (the model's bf16 weights); other quantizations are not "
                           "priced")
    if setting.kind == "model":
        from ..run.models import get_model

        try:
            get_model(t)
        except PolytraceError as exc:
            raise SettingError(f"{what}: {exc}") from None
        return t
    if setting.kind == "int":
        try:
            v = int(t)
        except ValueError:
            raise SettingError(f"{what}: expected a whole number in [{setting.lo:,}, {setting.hi:,}]") from None
        if not setting.lo <= v <= setting.hi:
            raise SettingError(f"{what}: expected a whole number in [{setting.lo:,}, {setting.hi:,}]")
        return v
    try:
        v = float(t)
    except ValueError:
        v = float("nan")
    if setting.kind == "share":
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise SettingError(f"{what}: expected a share in [0, 1]")
        return v
    if not (math.isfinite(v) and 0.05 <= v <= 0.99):
        raise SettingError(f"{what}: expected a fraction in [0.05, 0.99]")
    return v


def parse_settings(items) -> dict:
    """``--set KEY=VALUE`` items -> {verl key: typed value}, checked (module docstring)."""
    out: dict = {}
    for item in items or ():
        key, sep, text = str(item).partition("=")
        key = key.strip().lstrip("+")  # hydra's append marks, as verl's scripts write them
        if not sep or not key:
            raise SettingError(f"--set {str(item)[:80]!r}: expected KEY=VALUE in verl's key names, e.g. "
                               "--set actor_rollout_ref.model.use_remove_padding=true")
        setting = REGISTRY.get(key)
        if setting is None:
            near = near_keys(key[:200])
            hint = f"; did you mean {' or '.join(near)}?" if near else "; docs/step-model.md lists the keys"
            raise SettingError(f"--set {key[:80]!r}: not a setting the step model prices{hint}")
        value = _value(setting, text)
        if key in out and out[key] != value:
            raise SettingError(f"--set {key} is given twice, as {out[key]} and {value}: keep one")
        out[key] = value
    _check_consistent(out)
    return out


def check_offload_keys(given: dict, strategy: str) -> None:
    """An offload switch under the other trainer's name would be read by nothing: a one-line
    error naming the key that ``strategy``'s workers read."""
    strategy = "megatron" if strategy.startswith("megatron") else "fsdp"
    other = "fsdp" if strategy == "megatron" else "megatron"
    pairs = {offload_key(other, role, what): offload_key(strategy, role, what)
             for role, what, _target in OFFLOAD_SWITCHES}
    pairs.update(other_backend_keys(strategy))  # e.g. padding removal: each trainer's own key
    for wrong, right in pairs.items():
        if wrong in given:
            raise SettingError(f"--set {wrong}: this run's actor strategy is {strategy}, whose workers read "
                               f"{right}")


def _check_consistent(given: dict) -> None:
    pairs = [(offload_key("fsdp", role, what), offload_key("megatron", role, what))
             for role, what, _target in OFFLOAD_SWITCHES]
    pairs += list(other_backend_keys("megatron").items())
    for fsdp, meg in pairs:
        if fsdp in given and meg in given:
            raise SettingError(f"--set {fsdp} and --set {meg} name one switch (verl reads the one of the run's "
                               f"actor_rollout_ref.actor.strategy): give one")
    for switch, budget, size in _MICRO_GROUPS:
        on = given.get(switch)
        if on is False and budget in given:
            raise SettingError(f"--set {budget}={given[budget]} contradicts --set {switch}=false: the token budget "
                               "applies only with dynamic batch sizes")
        if on is True and given.get(size) is not None:
            raise SettingError(f"--set {size}={given[size]} contradicts --set {switch}=true: with dynamic batch sizes "
                               "verl ignores the micro-batch size")


def check_flags(given: dict, flags: dict) -> None:
    """A ``--set`` against the dedicated flag of the same quantity (``flags``: verl key ->
    (flag spelling, value or None when not given)) must agree."""
    for key, (flag, value) in flags.items():
        if value is None or key not in given:
            continue
        if given[key] != value:
            raise SettingError(f"--set {key}={given[key]} contradicts {flag} {value}: give one")


def with_settings(log, given: dict):
    """``log`` with ``given`` (verl key -> value) in its printed config: the configuration is read
    from it as if the run had printed them. The log's steps are shared, not copied."""
    if not given:
        return log
    return replace(log, printed={**log.printed, **given})


# verl key -> (the flag of ``validate`` / ``calibrate`` stating the same quantity, its Overrides field)
LOG_FLAGS = {f"{_R}.tensor_model_parallel_size": ("--rollout-tp", "rollout_tp"),
             f"{_R}.n": ("--n", "n"), "data.train_batch_size": ("--prompts", "prompts"),
             "data.max_prompt_length": ("--max-prompt-len", "max_prompt_len"),
             "data.max_response_length": ("--max-response-len", "max_response_len")}


def given_settings(log, overrides):
    """``log`` with the ``--set`` values of ``overrides`` (``logconfig.Overrides``) in its config,
    after checking them against the flags that state the same quantities."""
    given = dict(getattr(overrides, "settings", None) or {})
    if not given:
        return log
    _check_consistent(given)
    check_offload_keys(given, trainer_backend(log.config, log.command)[0])
    check_flags(given, {k: (flag, getattr(overrides, attr, None)) for k, (flag, attr) in LOG_FLAGS.items()})
    return with_settings(log, given)


def stated(log, key: str) -> bool:
    """Whether the log (its printed config or launch command) states ``key``."""
    return log.config.get(key) is not None


def estimate_arguments(given: dict) -> tuple[dict, dict]:
    """``--set`` values for ``estimate``: (build_config arguments, RunConfig fields to set after
    it is built). Micro-batching: a token budget applies with dynamic batch sizes on (the
    default for ``estimate``), a sequence count turns them off."""
    kwargs, fields = {}, {}
    for key, value in given.items():
        s = REGISTRY[key]
        if s.estimate is None:
            raise SettingError(f"--set {key}: estimate does not price it separately (validate and calibrate read "
                               "it from a log); the keys estimate takes are marked in docs/step-model.md")
        if s.estimate.startswith("run:"):
            fields[s.estimate[4:]] = value
        else:
            kwargs[s.estimate] = value
    if fields.get("ref_model") is not None:
        from ..run.models import get_model

        fields["ref_model"] = get_model(fields["ref_model"])
    # Megatron steps a CPU share only with optimizer_cpu_offload on (its default fraction: 0)
    cpu_on = fields.pop("cpu_optimizer_offload", None)
    if cpu_on is not None or "cpu_optimizer" in kwargs:
        kwargs["cpu_optimizer"] = float(kwargs.get("cpu_optimizer", 0.0)) if cpu_on else 0.0
    dynamic = fields.pop("dynamic", None)
    if kwargs.get("micro_batch_seqs") is not None or dynamic is False:
        kwargs["micro_batch_tokens"] = None
    return kwargs, fields


def describe(key: str) -> str:
    s = REGISTRY[key]
    return f"{key} ({s.kind}, verl default {s.default}): {s.effect}"


