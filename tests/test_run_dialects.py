"""Trainer dialects (``polytrace/run/dialects.py``): a log's verl trainer backend read from its
strategy, its ``--config-name`` or its Megatron config section, and each setting read under that
backend's own key and default (issue 35 step 7, issue 36's Megatron item): verl's Megatron workers
read ``actor_rollout_ref.actor.megatron.use_remove_padding`` (default True), never the model's
FSDP key (default False)."""

from __future__ import annotations

import pytest
from _verl_logs import Run, write_log

from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.settings import REGISTRY, SettingError, given_settings, parse_settings
from polytrace.logs.reader import read_log
from polytrace.run.dialects import dialect_key, other_backend_keys, trainer_backend
from polytrace.run.spec import verl_default, verl_key

FSDP_PAD = "actor_rollout_ref.model.use_remove_padding"
MEG_PAD = "actor_rollout_ref.actor.megatron.use_remove_padding"
LAUNCH = "PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\\n"


def _log(tmp_path, *, config_name=None, drop=(), add=()):
    """A synthetic console log whose launch script is edited: ``--config-name`` added, lines
    holding ``drop`` removed, ``add`` overrides appended."""
    run = Run(steps=14)
    from _verl_logs import script_markdown

    script = script_markdown(run)
    lines = [line for line in script.splitlines(keepends=True) if not any(d in line for d in drop)]
    script = "".join(lines)
    extra = "".join(f"    {a} \\\n" for a in add)
    if config_name:
        extra = f"    --config-name={config_name} \\\n" + extra
    script = script.replace(LAUNCH, LAUNCH + extra)
    path = write_log(tmp_path / "run.log", run, header=script)
    return read_log(path)


def test_backend_from_strategy_config_name_section_or_default():
    assert trainer_backend({"actor_rollout_ref.actor.strategy": "megatron"})[0] == "megatron"
    assert trainer_backend({"actor_rollout_ref.actor.strategy": "fsdp2"})[0] == "fsdp"
    # the strategy stated wins over a Megatron-looking launch line
    assert trainer_backend({"actor_rollout_ref.actor.strategy": "fsdp"},
                           "python -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer")[0] == "fsdp"
    for line in ("python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml x=1",
                 "python3 -m verl.trainer.main_ppo --config-name ppo_megatron_trainer x=1",
                 "python3 -m verl.trainer.main_ppo --config-name='ppo_megatron_trainer' x=1"):
        assert trainer_backend({}, line) == ("megatron", "--config-name=ppo_megatron_trainer" +
                                             (".yaml" if ".yaml" in line else ""))
    assert trainer_backend({}, "python3 -m verl.trainer.main_ppo --config-name=ppo_trainer")[0] == "fsdp"
    assert trainer_backend({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2})[0] == "megatron"
    assert trainer_backend({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": None})[0] == "fsdp"
    assert trainer_backend({})[0] == "fsdp"


def test_each_backend_names_and_defaults_padding_removal_its_own_way():
    assert (verl_key("remove_padding", "fsdp"), verl_default("remove_padding", "fsdp")) == (FSDP_PAD, False)
    assert (verl_key("remove_padding", "megatron"), verl_default("remove_padding", "megatron")) == (MEG_PAD, True)
    assert dialect_key(FSDP_PAD, "megatron") == MEG_PAD and dialect_key(MEG_PAD, "fsdp") == FSDP_PAD
    assert dialect_key("actor_rollout_ref.ref.fsdp_config.param_offload", "megatron") == \
        "actor_rollout_ref.ref.megatron.param_offload"
    assert dialect_key("actor_rollout_ref.rollout.n", "megatron") == "actor_rollout_ref.rollout.n"
    assert other_backend_keys("megatron")[FSDP_PAD] == MEG_PAD
    assert other_backend_keys("fsdp")[MEG_PAD] == FSDP_PAD
    assert REGISTRY[MEG_PAD].default is True and REGISTRY[FSDP_PAD].default is False


@pytest.mark.parametrize("case,kw,strategy,padding", [
    ("fsdp, stated on", {}, "fsdp", True),
    ("fsdp, unstated: verl's FSDP default", {"drop": (FSDP_PAD,)}, "fsdp", False),
    # the FSDP key a Megatron run's config carries is read by nothing: the Megatron default holds
    ("megatron by config name, the FSDP key off", {"config_name": "ppo_megatron_trainer",
                                                   "drop": (FSDP_PAD,), "add": (f"{FSDP_PAD}=False",)},
     "megatron", True),
    ("megatron, its own key off", {"config_name": "ppo_megatron_trainer", "add": (f"{MEG_PAD}=False",)},
     "megatron", False),
    ("megatron by its config section", {"add": ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",),
                                        "drop": (FSDP_PAD,)}, "megatron", True),
])
def test_log_read_in_its_trainers_dialect(tmp_path, case, kw, strategy, padding):
    log = _log(tmp_path, **kw)
    run, notes = config_from_log(log, Overrides())
    assert (run.strategy, run.remove_padding) == (strategy, padding), case
    if strategy == "megatron" and "config_name" in kw:
        assert any("--config-name=ppo_megatron_trainer" in n for n in notes)


def test_a_set_in_the_other_trainers_key_is_one_line(tmp_path):
    log = _log(tmp_path, config_name="ppo_megatron_trainer")
    with pytest.raises(SettingError, match=f"--set {FSDP_PAD}: this run's actor strategy is megatron, whose "
                                           f"workers read {MEG_PAD}"):
        given_settings(log, Overrides(settings=parse_settings([f"{FSDP_PAD}=false"])))
    run, _ = config_from_log(given_settings(log, Overrides(settings=parse_settings([f"{MEG_PAD}=false"]))),
                             Overrides())
    assert run.remove_padding is False
    with pytest.raises(SettingError, match="name one switch"):
        parse_settings([f"{FSDP_PAD}=true", f"{MEG_PAD}=true"])
