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
