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


# A NeMo RL configuration (the shape of NVIDIA-NeMo/RL's examples/configs/grpo_*.yaml), flattened
_NEMO = {
    "grpo.num_prompts_per_step": 256, "grpo.num_generations_per_prompt": 5,
    "policy.model_name": "Qwen/Qwen2.5-0.5B-Instruct", "policy.train_global_batch_size": 320,
    "policy.generation.max_new_tokens": 1024, "policy.generation.vllm_cfg.tensor_parallel_size": 2,
    "policy.generation.vllm_cfg.gpu_memory_utilization": 0.6, "policy.generation.vllm_cfg.enforce_eager": False,
    "policy.dtensor_cfg.enabled": True, "policy.dtensor_cfg.activation_checkpointing": False,
    "policy.megatron_cfg.enabled": False, "policy.megatron_cfg.activation_checkpointing": True,
    "policy.megatron_cfg.tensor_model_parallel_size": 4, "policy.sequence_packing.enabled": True,
    "cluster.gpus_per_node": 8, "cluster.num_nodes": 1,
}


def _nemo_yaml(path, flat: dict):
    """``flat`` (dotted keys) written as the nested YAML file NeMo RL reads."""
    import yaml

    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(nested))
    return path


def test_nemo_rl_is_a_dialect_of_its_own_mapped_into_the_runspec():
    from polytrace.run.dialects import NEMO_RL, nemo_rl_as_verl, nemo_rl_settings, trainer_dialect
    from polytrace.run.spec import SpecError

    assert trainer_dialect(_NEMO) == NEMO_RL and trainer_dialect({"data.train_batch_size": 8}) == "verl"
    got = nemo_rl_settings(_NEMO)
    # the DTensor trainer is enabled: the Megatron section's recompute and TP are not read
    assert got == {"strategy": "fsdp", "framework": "nemo-rl", "prompts": 256, "n": 5, "train_batch": 320,
                   "max_response_len": 1024, "rollout_tp": 2, "mem_fraction": 0.6, "eager": False,
                   "remove_padding": True, "gradient_checkpointing": False}
    meg = nemo_rl_settings({**_NEMO, "policy.megatron_cfg.enabled": True, "grpo.async_grpo.enabled": True})
    assert (meg["strategy"], meg["train_tp"], meg["gradient_checkpointing"], meg["mode"]) == (
        "megatron", 4, True, "fully-async")
    verl = nemo_rl_as_verl(_NEMO)
    assert verl[verl_key("prompts")] == 256 and verl[verl_key("n")] == 5 and verl[verl_key("rollout_tp")] == 2
    assert verl[verl_key("gradient_checkpointing")] is False and verl[FSDP_PAD] is True
    # 320 responses per optimizer step of 5 per prompt: verl's mini-batch of 64 prompts
    assert verl["actor_rollout_ref.actor.ppo_mini_batch_size"] == 64
    assert verl["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert (verl["trainer.nnodes"], verl["trainer.n_gpus_per_node"]) == (1, 8)
    assert nemo_rl_as_verl({**_NEMO, "policy.megatron_cfg.enabled": True})[MEG_PAD] is True
    with pytest.raises(SpecError, match=r"NeMo RL's policy.generation.vllm_cfg.gpu_memory_utilization must be"):
        nemo_rl_settings({**_NEMO, "policy.generation.vllm_cfg.gpu_memory_utilization": 1.5})


def test_a_nemo_rl_config_file_configures_validate(tmp_path):
    """A console log with no launch line, given its NeMo RL config (``--config``): the run is read
    from NeMo RL's keys through the dialect."""
    run = Run(steps=14, rollout_tp=2)
    path = write_log(tmp_path / "run.log", run, header="")
    cfg = _nemo_yaml(tmp_path / "nemo.yaml", _NEMO)
    conf, notes = config_from_log(read_log(path), Overrides(gpu="h100", configs=(str(cfg),)))
    assert "read through its dialect" in " ".join(notes)
    got = conf.to_dict()
    assert (got["model"], got["n_gpus"], got["prompts_per_step"], got["n"], got["rollout_tp"]) == (
        "qwen2.5-0.5b", 8, 256, 5, 2), got
    assert (got["max_response_len"], got["mem_fraction"], got["gradient_checkpointing"]) == (1024, 0.6, False), got


MEG = "actor_rollout_ref.actor.megatron"
_MEG_TP_PP = (f"{MEG}.tensor_model_parallel_size=2", f"{MEG}.pipeline_model_parallel_size=2")


@pytest.mark.parametrize("add, want", [
    # verl's defaults (engine/megatron.yaml): every size 1, the virtual pipeline null
    ((), {"train_cp": 1, "train_ep": 1, "train_vpp": 1}),
    ((f"{MEG}.context_parallel_size=2", f"{MEG}.virtual_pipeline_model_parallel_size=2"),
     {"train_cp": 2, "train_ep": 1, "train_vpp": 2}),
    ((f"{MEG}.virtual_pipeline_model_parallel_size=null",), {"train_cp": 1, "train_ep": 1, "train_vpp": 1}),
    # verl before 0.4: layers per virtual stage; Qwen2.5-0.5B's 24 layers / (PP 2 x 3) = 4 chunks per stage
    ((f"{MEG}.num_layers_per_virtual_pipeline_stage=3",), {"train_cp": 1, "train_ep": 1, "train_vpp": 4}),
])
def test_a_megatron_logs_context_expert_and_virtual_pipeline_are_read(tmp_path, add, want):
    """The Megatron actor's layout a log states is priced, not dropped: a context-parallel log
    computes 1/CP of each sequence per GPU (its layout's ``cp``)."""
    log = _log(tmp_path, config_name="ppo_megatron_trainer", add=_MEG_TP_PP + add)
    run, _ = config_from_log(log, Overrides())
    assert {k: getattr(run, k) for k in want} == want
    layout = run.layout("update_actor")
    assert (layout.tp, layout.pp, layout.cp, layout.vpp) == (2, 2, want["train_cp"], want["train_vpp"])


@pytest.mark.parametrize("add, message", [
    ((f"{MEG}.context_parallel_size=3",), "actor_rollout_ref.actor.megatron: tensor_model_parallel_size 2 x "
     "context_parallel_size 3 x pipeline_model_parallel_size 2 does not divide the GPU count 8"),
    ((f"{MEG}.expert_model_parallel_size=2",), "expert_model_parallel_size 2: qwen2.5-0.5b is a dense model"),
    ((f"{MEG}.virtual_pipeline_model_parallel_size=5",), "pipeline_model_parallel_size 2 x "
     "virtual_pipeline_model_parallel_size 5 does not divide qwen2.5-0.5b's 24 layers"),
    ((f"{MEG}.context_parallel_size=two",), "context_parallel_size"),
])
def test_a_megatron_layout_the_gpus_or_model_cannot_hold_is_one_line_naming_the_key(tmp_path, add, message):
    from polytrace.errors import PolytraceError

    log = _log(tmp_path, config_name="ppo_megatron_trainer", add=_MEG_TP_PP + add)
    with pytest.raises(PolytraceError) as exc:
        config_from_log(log, Overrides())
    text = str(exc.value)
    assert str(log.path) in text and message in text and "\n" not in text, text


def test_an_fsdp_log_reads_no_megatron_layout_and_notes_ulysses(tmp_path):
    """verl's FSDP workers read no Megatron section; their sequence parallelism (Ulysses) is priced
    as data parallelism over the same GPUs, and a note says what that leaves out."""
    # a Megatron section alone would make the log Megatron: the FSDP strategy is stated
    log = _log(tmp_path, add=("actor_rollout_ref.actor.strategy=fsdp", f"{MEG}.context_parallel_size=2",
                              "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"))
    run, notes = config_from_log(log, Overrides())
    assert (run.strategy, run.train_cp, run.layout("update_actor").cp) == ("fsdp", 1, 1)
    assert any(n.startswith("ulysses_sequence_parallel_size 4: each sequence split over 4 GPUs") and
               "all-to-all" in n and "not priced" in n for n in notes), notes
    from polytrace.errors import PolytraceError

    log = _log(tmp_path, add=("actor_rollout_ref.actor.ulysses_sequence_parallel_size=3",))
    with pytest.raises(PolytraceError, match="ulysses_sequence_parallel_size in .* is 3, which does not divide the "
                                             "GPU count 8"):
        config_from_log(log, Overrides())


def test_a_nemo_rl_megatron_layout_reaches_the_run(tmp_path):
    """NeMo RL's context parallelism, mapped to verl's key by the dialect, is read like a verl log's."""
    path = _nemo_yaml(tmp_path / "nemo.yaml", {
        **_NEMO, "policy.megatron_cfg.enabled": True, "policy.dtensor_cfg.enabled": False,
        "policy.megatron_cfg.tensor_model_parallel_size": 2, "policy.megatron_cfg.context_parallel_size": 2})
    log = write_log(tmp_path / "run.log", Run(steps=14, rollout_tp=2), header="")
    run, _ = config_from_log(read_log(log), Overrides(gpu="h100", configs=(str(path),)))
    assert (run.strategy, run.train_tp, run.train_cp) == ("megatron", 2, 2)


def test_a_model_based_reward_is_noted_as_not_priced(tmp_path):
    """verl's ``reward_model.enable``: a reward model's forward pass each step, which only a note
    accounts for (the model prices rule-based scoring)."""
    on = _log(tmp_path, add=("reward_model.enable=True", "reward_model.model.path=sfairXC/FsfairX-LLaMA3-RM-v0.1"))
    _, notes = config_from_log(on, Overrides())
    assert [n for n in notes if n.startswith("reward_model.enable: a reward model (sfairXC/FsfairX-LLaMA3-RM-v0.1) "
                                             "scores every response") and "not priced" in n], notes
    _, notes = config_from_log(_log(tmp_path, add=("reward_model.enable=False",)), Overrides())
    assert not [n for n in notes if "reward model" in n], notes


GRANULARITY = "actor_rollout_ref.model.gradient_checkpointing_kwargs.activations_checkpoint_granularity"


@pytest.mark.parametrize("add, noted", [
    # verl's Megatron workers: recompute_granularity = the kwargs' granularity, "full" where absent
    (("actor_rollout_ref.model.enable_gradient_checkpointing=True", f"{GRANULARITY}=null"), True),
    (("actor_rollout_ref.model.enable_gradient_checkpointing=True", f"{GRANULARITY}=full"), False),
    (("actor_rollout_ref.model.enable_gradient_checkpointing=True",), False),
    (("actor_rollout_ref.model.enable_gradient_checkpointing=False", f"{GRANULARITY}=null"), False),
])
def test_a_megatron_recompute_switch_its_workers_do_not_act_on_is_noted(tmp_path, add, noted):
    """The corpus's Megatron GPG log states recompute on with a null granularity: its printed
    TransformerConfig has recompute_granularity=None. Priced as before (with recompute: the priors
    were fitted so), and a note says what the log states and how to price it without."""
    log = _log(tmp_path, config_name="ppo_megatron_trainer",
               drop=("enable_gradient_checkpointing",), add=add)
    run, notes = config_from_log(log, Overrides())
    said = [n for n in notes if n.startswith("activation recompute:")]
    assert bool(said) == noted, notes
    if noted:
        assert run.gradient_checkpointing is True
        assert "recompute_granularity None (no recompute)" in said[0] and \
            "--set actor_rollout_ref.model.enable_gradient_checkpointing=false" in said[0], said
