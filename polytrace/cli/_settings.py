"""``--set KEY=VALUE``: verl settings in verl's own key names, the same flag in ``validate``,
``calibrate`` and ``estimate`` (the registry: ``polytrace.calibrate.settings``)."""

from __future__ import annotations

SET_HELP = ("a verl setting in verl's key name, e.g. --set actor_rollout_ref.model.use_remove_padding=true or "
            "--set actor_rollout_ref.rollout.gpu_memory_utilization=0.6 (repeatable; keys: docs/step-model.md, "
            "'Settings'); for a log it wins over what the log states, and settings the log leaves unstated are "
            "otherwise inferred from its first steps")


def add_set_flag(p) -> None:
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", dest="settings", help=SET_HELP)


def parsed_settings(args) -> dict:
    from ..calibrate.settings import parse_settings

    return parse_settings(getattr(args, "settings", None))


# estimate argument -> (its flag, the flag's default): a --set of the same quantity contradicts a
# flag given with another value
_ESTIMATE_FLAGS = {"rollout_tp": ("--rollout-tp", None), "mem_fraction": ("--mem-fraction", 0.5),
                   "micro_batch_tokens": ("--micro-batch-tokens", "auto"), "n": ("--n", None),
                   "prompts": ("--prompts", None), "max_prompt_len": ("--max-prompt-len", None),
                   "max_response_len": ("--max-response-len", None), "ppo_mini_batch": ("--ppo-mini-batch", None),
                   "lora_rank": ("--lora-rank", 0), "param_offload": ("--param-offload", False),
                   "optimizer_offload": ("--optimizer-offload", False),
                   "rollout_precision": ("--rollout-precision", "bf16"), "cpu_optimizer": ("--cpu-optimizer", 0.0),
                   "cpu_optimizer_overlap": ("--cpu-optimizer-overlap", False)}


def estimate_settings(args, kw: dict) -> dict:
    """The ``estimate`` arguments ``--set`` changes (``kw``: those the flags give), with
    ``run_fields`` for the settings that have no flag; a ``--set`` against a flag given with
    another value is a usage error."""
    from ..calibrate.settings import SettingError, check_offload_keys, estimate_arguments

    given = parsed_settings(args)
    if not given:
        _check_cpu_optimizer_overlap(args, kw)
        return {}
    check_offload_keys(given, kw.get("strategy") or "fsdp")
    kwargs, fields = estimate_arguments(given)
    for name, value in kwargs.items():
        flag, default = _ESTIMATE_FLAGS.get(name, (None, None))
        have = kw.get(name, default)
        if flag and have != default and have != value:
            raise SettingError(f"--set {_key_of(given, name)}: contradicts {flag} {have}: give one")
    out = dict(kwargs)
    if fields:
        out["run_fields"] = fields
    _check_cpu_optimizer_overlap(args, {**kw, **out})
    return out


def _check_cpu_optimizer_overlap(args, kw: dict) -> None:
    """``--cpu-optimizer-overlap`` given on the command line with no CPU optimizer to overlap
    (neither ``--cpu-optimizer`` nor verl's ``optimizer_offload_fraction`` above 0) would be a flag
    that changes nothing: refused. verl's own ``overlap_cpu_optimizer_d2h_h2d`` key is not: its
    DeepSeek-V3 script sets it whatever the fraction (0 on 256 GPUs)."""
    from ..calibrate.settings import SettingError

    if getattr(args, "cpu_optimizer_overlap", False) is True and not kw.get("cpu_optimizer"):
        raise SettingError("--cpu-optimizer-overlap overlaps the CPU optimizer's copies with its step: give "
                           "--cpu-optimizer SHARE (above 0) too")


def _key_of(given: dict, argument: str) -> str:
    from ..calibrate.settings import REGISTRY

    key = next((k for k in given if REGISTRY[k].estimate == argument), None)
    if key is not None:
        return f"{key}={given[key]}"
    # a micro-batch size (or dynamic batching off) leaves no token budget; optimizer_cpu_offload off
    # leaves no CPU share
    via = {"micro_batch_tokens": ("run:micro_batch_seqs", "run:dynamic"),
           "cpu_optimizer": ("run:cpu_optimizer_offload",)}
    return next(f"{k}={v}" for k, v in given.items() if REGISTRY[k].estimate in via.get(argument, ()))
