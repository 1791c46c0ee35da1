"""Trainer dialects: which verl trainer backend a run's configuration speaks, and its keys in that
backend's names (``spec``'s declarations carry each setting's key and verl default per backend).

verl's FSDP and Megatron trainers read some settings under different keys with different
defaults: padding removal is ``actor_rollout_ref.model.use_remove_padding`` (default False,
``ppo_trainer.yaml``) for FSDP workers, ``actor_rollout_ref.actor.megatron.use_remove_padding``
(default True, ``engine/megatron.yaml``; ``megatron_actor.py`` picks the thd or bshd layout from it)
for Megatron's; the offload switches sit under ``fsdp_config`` or ``megatron``. A Megatron run's
printed config may still carry the FSDP key, which its workers never read.
"""

from __future__ import annotations

import re

from .spec import BACKENDS, declarations

STRATEGY_KEY = "actor_rollout_ref.actor.strategy"
# ``--config-name=ppo_megatron_trainer`` (verl's Megatron recipe; ``.yaml`` optional, ``=`` or a space)
_CONFIG_NAME = re.compile(r"--config-name[= ]['\"]?([\w./-]+)")
# a config section only verl's Megatron workers have
_MEGATRON_SECTION = "actor_rollout_ref.actor.megatron."


def trainer_backend(config: dict, command: str = "") -> tuple[str, str]:
    """(the backend, "fsdp" or "megatron"; why): the actor's ``strategy`` where the config states
    it, else the launch line's ``--config-name`` (``ppo_megatron_trainer``), else a config with
    the actor's ``megatron`` section, else FSDP (verl's default trainer)."""
    stated = config.get(STRATEGY_KEY)
    if isinstance(stated, str) and stated.strip():
        backend = "megatron" if stated.strip().startswith("megatron") else "fsdp"
        return backend, f"{STRATEGY_KEY}={stated.strip()}"
    m = _CONFIG_NAME.search(command or "")
    if m and "megatron" in m.group(1):
        return "megatron", f"--config-name={m.group(1)}"
    if any(k.startswith(_MEGATRON_SECTION) and config[k] is not None for k in config):
        return "megatron", f"the config's {_MEGATRON_SECTION.rstrip('.')} section"
    return "fsdp", "verl's default trainer (no strategy, Megatron config name or section stated)"


def dialect_key(key: str, backend: str) -> str:
    """``key`` (a declared setting's key under either backend, or an FSDP offload switch) as
    ``backend``'s workers name it; other keys unchanged."""
    for d in declarations().values():
        keys = dict((b, v.key) for b, v in d.verl)
        if key in keys.values() and backend in keys:
            return keys[backend]
    if backend == "megatron" and ".fsdp_config." in key:
        return key.replace(".fsdp_config.", ".megatron.")
    if backend == "fsdp" and key.startswith("actor_rollout_ref.") and ".megatron." in key and key.endswith("offload"):
        return key.replace(".megatron.", ".fsdp_config.")
    return key


def other_backend_keys(backend: str) -> dict[str, str]:
    """The declared keys only the other backend's workers read -> the key ``backend`` reads for
    the same setting (a ``--set`` of one of them would be read by nothing)."""
    out = {}
    for d in declarations().values():
        keys = dict((b, v.key) for b, v in d.verl)
        mine = keys.get(backend)
        for b in BACKENDS:
            if b != backend and b in keys and mine and keys[b] != mine:
                out[keys[b]] = mine
    return out


# NeMo RL (NVIDIA-NeMo/RL's examples/configs/grpo_math_1B.yaml, 0.3-0.4): its config key -> the
# RunSpec setting it states. Its trainer is DTensor (``policy.dtensor_cfg``, FSDP-like) or
# Megatron (``policy.megatron_cfg.enabled``); each backend's section is read only when enabled.
NEMO_RL = "nemo-rl"
_NEMO_COMMON = {
    "grpo.num_prompts_per_step": "prompts",
    "grpo.num_generations_per_prompt": "n",
    "policy.train_global_batch_size": "train_batch",  # responses, where verl's mini-batch is prompts
    "policy.generation.max_new_tokens": "max_response_len",
    "policy.generation.vllm_cfg.tensor_parallel_size": "rollout_tp",
    "policy.generation.vllm_cfg.gpu_memory_utilization": "mem_fraction",
    "policy.generation.vllm_cfg.enforce_eager": "eager",
    "policy.sequence_packing.enabled": "remove_padding",
}
_NEMO_BACKEND = {
    "fsdp": {"policy.dtensor_cfg.activation_checkpointing": "gradient_checkpointing"},
    "megatron": {"policy.megatron_cfg.activation_checkpointing": "gradient_checkpointing",
                 "policy.megatron_cfg.tensor_model_parallel_size": "train_tp",
                 "policy.megatron_cfg.pipeline_model_parallel_size": "train_pp",
                 "policy.megatron_cfg.context_parallel_size": "train_cp",
                 "policy.megatron_cfg.expert_model_parallel_size": "train_ep"},
}
NEMO_RL_KEYS = {**_NEMO_COMMON, **_NEMO_BACKEND["fsdp"], **_NEMO_BACKEND["megatron"]}
# the verl keys logconfig reads for the settings the RunSpec declares without one: the strategy and
# the Megatron actor's layout (verl's engine/megatron.yaml: every size 1, the virtual pipeline null)
VERL_EXTRA = {"strategy": "actor_rollout_ref.actor.strategy",
              "train_tp": "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
              "train_pp": "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
              "train_cp": "actor_rollout_ref.actor.megatron.context_parallel_size",
              "train_ep": "actor_rollout_ref.actor.megatron.expert_model_parallel_size",
              "train_vpp": "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"}
_NEMO_MODEL, _NEMO_NODES, _NEMO_GPUS = "policy.model_name", "cluster.num_nodes", "cluster.gpus_per_node"


def trainer_dialect(config: dict) -> str:
    """``"nemo-rl"`` for a NeMo RL configuration (its ``grpo`` and ``policy`` sections), else ``"verl"``."""
    return NEMO_RL if _NEMO_MODEL in config and any(k.startswith("grpo.") for k in config) else "verl"


def nemo_rl_settings(config: dict) -> dict:
    """A NeMo RL configuration's settings as the RunSpec names them, each checked by its
    declaration (a bad value is a ``SpecError`` naming NeMo RL's key); ``strategy`` from which
    trainer section is enabled."""
    decls = declarations()
    backend = "megatron" if config.get("policy.megatron_cfg.enabled") is True else "fsdp"
    out = {"strategy": backend, "framework": NEMO_RL}
    if config.get("grpo.async_grpo.enabled") is True:  # trajectories up to max_trajectory_age_steps old
        out["mode"] = "fully-async"
    for key, name in {**_NEMO_COMMON, **_NEMO_BACKEND[backend]}.items():
        if config.get(key) is not None:
            out[name] = decls[name].check(config[key], f"NeMo RL's {key}")
    return out


def nemo_rl_as_verl(config: dict) -> dict:
    """A NeMo RL configuration under verl's keys (the vocabulary ``calibrate.logconfig`` reads), for
    the chosen backend: the model path, the GPU layout, and every setting of ``nemo_rl_settings``
    with a verl key. The responses per optimizer step become verl's prompts per mini-batch
    (``train_global_batch_size`` / ``num_generations_per_prompt``) where they divide."""
    got = nemo_rl_settings(config)
    backend = got["strategy"]
    decls = declarations()
    out = {}
    for name, value in got.items():
        verl = decls[name].verl_key(backend) if name in decls else None
        key = verl.key if verl is not None else VERL_EXTRA.get(name)
        if key is not None:
            out[key] = value
    n, train = got.get("n"), got.get("train_batch")
    if n and train and train % n == 0:
        out["actor_rollout_ref.actor.ppo_mini_batch_size"] = train // n
    if isinstance(config.get(_NEMO_MODEL), str):
        out["actor_rollout_ref.model.path"] = config[_NEMO_MODEL]
    for src, dst in ((_NEMO_NODES, "trainer.nnodes"), (_NEMO_GPUS, "trainer.n_gpus_per_node")):
        if config.get(src) is not None:
            out[dst] = decls["gpus"].check(config[src], f"NeMo RL's {src}")
    return out
