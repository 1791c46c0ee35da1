"""The ``--set`` keys the RunSpec declares (issue 35 item 1): the reference's offload, the critic's
padding removal, the update's micro-batch size and the engine's quantization. Each is one
``polytrace.run.spec`` setting: ``--set`` takes its verl key per backend, the estimate's ``RunSpec``
carries it into ``RunConfig`` (no ``run_fields`` side door), its checks name the key the user gave,
and the log reader reads the same key and default (tests/calibrate/test_settings.py: a Megatron
run's reference offload)."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.calibrate.settings import REGISTRY, SettingError, estimate_arguments, parse_settings
from polytrace.run.spec import SpecError, declarations

pytestmark = pytest.mark.filterwarnings("ignore")

REF_OFF = {"fsdp": "actor_rollout_ref.ref.fsdp_config.param_offload",
           "megatron": "actor_rollout_ref.ref.megatron.param_offload"}
CRITIC_RP = "critic.model.use_remove_padding"
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
BUDGET = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
PROMPTS, RESPONSES = np.full(16, 150), np.full(16, 900)


def _cfg(items=(), **kw):
    from polytrace.stepmodel.estimate import build_config
    from polytrace.stepmodel.workloads import stated_lengths_profile

    kwargs, fields = estimate_arguments(parse_settings(list(items)))
    prof = stated_lengths_profile("mean=1000,max=4000,prompt=150", model="qwen2.5-1.5b")
    base = dict(rollout_tp=1, n=2, prompts=8)
    return build_config(prof, "qwen2.5-1.5b", "h100", 8, run_fields=fields or None, **{**base, **kw, **kwargs})


def _stages(cfg) -> dict:
    from polytrace.stepmodel.stages import stage_costs

    out: dict = {}
    for p in stage_costs(cfg, PROMPTS, RESPONSES).parts:
        out[p.stage] = out.get(p.stage, 0.0) + p.seconds
    return out


@pytest.mark.parametrize("name,keys", [("ref_offload", tuple(REF_OFF.values())),
                                       ("critic_remove_padding", (CRITIC_RP,)),
                                       ("micro_batch_seqs", (MICRO,))])
def test_each_key_is_its_declarations(name, keys):
    d = declarations()[name]
    assert d.flag is None  # a --set key or a log states it, no flag
    assert {v.key for _b, v in d.verl} == set(keys)
    for key in keys:
        assert REGISTRY[key].estimate == name and REGISTRY[key].effect == d.verl_key(
            "megatron" if ".megatron." in key else "fsdp").effect


def test_verls_quantization_is_rollout_precisions_key_in_its_own_spelling():
    quant = "actor_rollout_ref.rollout.quantization"
    d = declarations()["rollout_precision"]
    assert {b: v.key for b, v in d.verl} == {"fsdp": quant, "megatron": quant}
    assert REGISTRY[quant].estimate == "rollout_precision" and REGISTRY[quant].kind == "quantization"
    # each verl spelling maps onto one of the setting's own values, and --set reads them so
    spelled = dict(d.verl_key().values)
    assert set(spelled.values()) == set(d.choices) and spelled["fp8"] == "fp8" and spelled["null"] == "bf16"
    for text, value in spelled.items():
        assert parse_settings([f"{quant}={text}"]) == {quant: value}
    assert estimate_arguments(parse_settings([f"{quant}=fp8"])) == ({"rollout_precision": "fp8"}, {})
    with pytest.raises(SettingError, match="expected fp8 or null"):
        parse_settings([f"{quant}=bf16"])  # the setting's spelling, not verl's


def test_set_values_are_run_settings_not_run_fields():
    kwargs, fields = estimate_arguments(parse_settings([f"{REF_OFF['fsdp']}=true", f"{CRITIC_RP}=false",
                                                        f"{MICRO}=3"]))
    assert fields == {}
    assert kwargs == {"ref_offload": True, "critic_remove_padding": False, "micro_batch_seqs": 3,
                      "micro_batch_tokens": None}  # a micro-batch size turns dynamic batching off


def test_the_run_config_carries_them():
    base = _cfg()
    assert (base.ref_offload, base.critic_remove_padding, base.micro_batch_seqs) == (False, None, None)
    assert base.micro_batch_tokens == 16384  # the automatic budget: 571 + 4000 fits 16384
    assert (base.max_prompt_len, base.max_response_len) == (571, 4000)
    cfg = _cfg([f"{REF_OFF['fsdp']}=true", f"{CRITIC_RP}=false", f"{MICRO}=3"], algorithm="ppo")
    assert (cfg.ref_offload, cfg.critic_remove_padding, cfg.micro_batch_seqs) == (True, False, 3)
    assert cfg.micro_batch_tokens is None
    meg = _cfg([f"{REF_OFF['megatron']}=true"], strategy="megatron")
    assert meg.ref_offload is True


def test_set_ref_offload_prices_one_reload_on_the_reference_pass():
    from polytrace.stepmodel.efficiency import DEFAULT
    from polytrace.stepmodel.pricing import Pricer
    from polytrace.stepmodel.training import offload_seconds

    base, off = _cfg(), _cfg([f"{REF_OFF['fsdp']}=true"])
    a, b = _stages(base), _stages(off)
    reload = offload_seconds(off.model, off.n_gpus, DEFAULT, off.gpu) * Pricer(off.gpu, DEFAULT).scale("offload")
    assert reload > 0
    assert b["ref"] - a["ref"] == pytest.approx(reload, rel=1e-12)
    assert {k: v for k, v in b.items() if k != "ref"} == {k: v for k, v in a.items() if k != "ref"}


def test_set_critic_padding_moves_only_the_critics_stages():
    base, padded = _stages(_cfg(algorithm="ppo")), _stages(_cfg([f"{CRITIC_RP}=false"], algorithm="ppo"))
    same = _stages(_cfg([f"{CRITIC_RP}=true"], algorithm="ppo"))  # as the actor's (padding removed)
    assert same == base
    for stage in ("values", "update_critic"):
        # every sequence padded to 571 + 4000 tokens where it holds 150 + 900: 4.35x the tokens; the
        # parts that do not grow with them (the critic's optimizer step) keep the stage near 3.4x
        tokens = (571 + 4000) / (150 + 900)
        assert 3.0 * base[stage] < padded[stage] < tokens * base[stage], stage
    assert {k: padded[k] for k in ("gen", "old_log_prob", "ref", "update_actor")} == {
        k: base[k] for k in ("gen", "old_log_prob", "ref", "update_actor")}


def test_a_micro_batch_size_against_a_token_budget_is_refused():
    with pytest.raises(SettingError, match="contradicts"):
        parse_settings(["actor_rollout_ref.actor.use_dynamic_bsz=true", f"{MICRO}=2"])
    with pytest.raises(SettingError, match=r"expected a whole number in \[1,"):
        parse_settings([f"{MICRO}=0"])


def test_a_bad_value_is_named_by_the_key_given():
    from polytrace.stepmodel.estimate import build_config
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile("mean=1000,max=4000,prompt=150", model="qwen2.5-1.5b")
    with pytest.raises(SpecError, match=f"^--set {MICRO} must be a positive integer"):
        build_config(prof, "qwen2.5-1.5b", "h100", 8, micro_batch_seqs=0,
                     origins={"micro_batch_seqs": f"--set {MICRO}"})
    with pytest.raises(SpecError, match="^ref_offload must be true or false"):
        build_config(prof, "qwen2.5-1.5b", "h100", 8, ref_offload=1)
