"""verl settings: ``--set KEY=VALUE`` (parsing, refusals, effect on estimates) and the inference
of settings a log leaves unstated from its calibration window."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _settings_logs import SETTINGS, growing_log, model_log, setting_note

from polytrace.calibrate.infer import ROOFLINE_FLOOR, stage_misfit
from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.settings import REGISTRY, SettingError, estimate_arguments, parse_settings
from polytrace.calibrate.validate import prepare, validate
from polytrace.cli import main
from polytrace.logs import read_log

RP = "actor_rollout_ref.model.use_remove_padding"
REF_OFF = "actor_rollout_ref.ref.fsdp_config.param_offload"
ACT_OFF = "actor_rollout_ref.actor.fsdp_config.param_offload"
EAGER = "actor_rollout_ref.rollout.enforce_eager"
CKPT = "actor_rollout_ref.model.enable_gradient_checkpointing"
MEM = "actor_rollout_ref.rollout.gpu_memory_utilization"
DYN = "actor_rollout_ref.actor.use_dynamic_bsz"
BUDGET = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
SMALL_BATCH = dict(model="Qwen/Qwen2.5-7B-Instruct", gpus=8, prompts=16, n=2, max_response=4096)


# --- parsing and refusals -------------------------------------------------------------------------


def test_parse_types():
    got = parse_settings([f"{RP}=true", f"{EAGER}=False", f"{MEM}=0.6", f"{BUDGET}=8192", f"{CKPT}=0"])
    assert got == {RP: True, EAGER: False, MEM: 0.6, BUDGET: 8192, CKPT: False}
    assert parse_settings([f"{RP}=yes", f"{RP}=on"]) == {RP: True}  # the same value twice is no contradiction


@pytest.mark.parametrize("item, needle", [
    ("actor_rollout_ref.model.use_remove_paddin=true", RP),  # near match on the whole key
    ("actor.use_remove_padding=true", RP),  # near match on the last part
    ("no_such_key=1", "not a setting"),
    ("use_remove_padding", "expected KEY=VALUE"),
    (f"{RP}=maybe", "expected true or false"),
    (f"{BUDGET}=lots", "whole number"),
    (f"{BUDGET}=0", "whole number"),
    (f"{MEM}=1.5", "fraction"),
    (f"{MEM}=nan", "fraction"),
])
def test_bad_values_are_named(item, needle):
    with pytest.raises(SettingError) as exc:
        parse_settings([item])
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("items, needle", [
    ([f"{RP}=true", f"{RP}=false"], "given twice"),
    ([f"{DYN}=false", f"{BUDGET}=4096"], "applies only with dynamic batch sizes"),
    ([f"{DYN}=true", f"{MICRO}=4"], "ignores the micro-batch size"),
])
def test_contradictions(items, needle):
    with pytest.raises(SettingError, match=needle):
        parse_settings(items)


def test_every_setting_has_a_type_default_and_effect():
    for key, s in REGISTRY.items():
        assert s.kind in ("bool", "int", "fraction", "share", "model", "quantization") and s.effect, key
        assert key.count(".") >= 1


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100", "--gpus", "2", "--set", "actor.use_remove_padding=1"],
     "did you mean "),
    (["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100", "--gpus", "2", "--set", f"{MEM}=0.6",
      "--mem-fraction", "0.4"], "contradicts --mem-fraction"),
    (["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100", "--gpus", "2", "--set", f"{MICRO}=2",
      "--micro-batch-tokens", "8192"], "contradicts --micro-batch-tokens"),
    (["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100", "--gpus", "2", "--set", f"{RP}=perhaps"],
     "expected true or false"),
    (["estimate", "--model", "qwen2.5-0.5b", "--gpu", "h100", "--gpus", "2", "--set",
      "actor_rollout_ref.actor.ppo_epochs=2"], "estimate does not price it"),
])
def test_cli_refusals_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polytrace: error:") and needle in err and "\n" not in err


def test_validate_set_against_its_flag(tmp_path, capsys):
    path = growing_log(tmp_path / "run.log", steps=12)
    argv = ["validate", path, "--rollout-tp", "2", "--set", "actor_rollout_ref.rollout.tensor_model_parallel_size=4"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "contradicts --rollout-tp 2" in err and "\n" not in err
    assert main(["validate", path, "--set", "critic.model.use_remove_paddng=true"]) == 2
    assert "did you mean critic.model.use_remove_padding" in capsys.readouterr().err


# --- --set changes the estimate in the expected direction and by the expected amount -------------------------


def _estimate(**extra):
    from polytrace.stepmodel.estimate import estimate

    return estimate("search-r1-7b", "qwen2.5-1.5b", "h100", 8, steps=[0], results=None, rollout_tp=1,
                    results_root="/nonexistent", **extra)


def _with(items):
    kwargs, fields = estimate_arguments(parse_settings(items))
    return _estimate(**kwargs, run_fields=fields or None)


@pytest.fixture(scope="module")
def base_estimate():
    return _estimate()


def test_set_padding_scales_the_trainer_by_the_padded_tokens(base_estimate):
    padded = _with([f"{RP}=false"])
    base = base_estimate.rows[0]
    cfg = base_estimate.config
    tokens = base["tokens"]
    pad_tokens = base["sequences"] * (cfg["max_prompt_len"] + cfg["max_response_len"])
    ratio = padded.rows[0]["stages_s"]["update_actor"] / base["stages_s"]["update_actor"]
    # linear layers scale with the tokens, attention with their squares: between the two ratios
    assert pad_tokens / tokens * 0.9 <= ratio
    pad_to = cfg["max_prompt_len"] + cfg["max_response_len"]
    assert ratio <= pad_tokens / tokens * pad_to / (tokens / base["sequences"])
    assert padded.rows[0]["stages_s"]["gen"] == pytest.approx(base["stages_s"]["gen"], rel=1e-12)


def test_set_eager_adds_launches_per_decode_iteration(base_estimate):
    from polytrace.run.models import get_model
    from polytrace.stepmodel.efficiency import DEFAULT

    eager = _with([f"{EAGER}=true"])
    base = base_estimate.rows[0]
    layers = get_model("qwen2.5-1.5b").layers
    per_iter = layers * DEFAULT.kernels_per_layer * DEFAULT.launch_s_per_kernel - DEFAULT.graph_replay_s
    delta = eager.rows[0]["stages_s"]["gen"] - base["stages_s"]["gen"]
    # launches are queued asynchronously: an iteration pays the part of them its device work
    # (GEMMs, attention, collectives) does not hide, so the added seconds lie between every
    # launch paid and every launch less all the device time of the rollout
    iters = base["rollout_iterations"]
    kernels = base_estimate.summary["kernels"]["gen"]
    device = sum(kernels[f]["s"] for f in ("gemm", "decode", "comm") if f in kernels)
    assert 0 < delta <= iters * per_iter * 1.02, (delta, iters * per_iter)
    assert delta >= (iters * per_iter - device) * 0.98 and iters * per_iter > device, (delta, iters * per_iter, device)
    assert eager.summary["kernels"]["gen"]["host"]["s"] - kernels["host"]["s"] == pytest.approx(delta, rel=0.02)
    assert eager.rows[0]["stages_s"]["update_actor"] == pytest.approx(base["stages_s"]["update_actor"], rel=1e-12)


def test_set_memory_share_and_micro_batches_move_the_right_stages(base_estimate):
    base = base_estimate.rows[0]["stages_s"]
    tight = _with([f"{MEM}=0.1"]).rows[0]["stages_s"]
    assert tight["gen"] > base["gen"] and tight["update_actor"] == pytest.approx(base["update_actor"], rel=1e-12)
    fixed = _with([f"{MICRO}=1"]).rows[0]["stages_s"]  # one sequence per micro-batch: more launches
    assert fixed["update_actor"] > base["update_actor"] and fixed["gen"] == pytest.approx(base["gen"], rel=1e-12)


# --- inference of what a log leaves unstated --------------------------------------------------------------


@pytest.mark.parametrize("truth", [True, False])
def test_remove_padding_inferred_from_the_trend(tmp_path, truth):
    path = growing_log(tmp_path / "run.log", remove_padding=truth, steps=14)
    _, run, notes, _, _ = prepare(path, Overrides())
    assert run.remove_padding is truth
    assert "inferred" in setting_note(notes, RP)


@pytest.mark.parametrize("key", [REF_OFF, ACT_OFF])
@pytest.mark.parametrize("truth", ["True", "False"])
def test_offload_inferred_from_the_same_pass(tmp_path, key, truth):
    path = model_log(tmp_path / "run.log", dict(SETTINGS, **{key: truth}), hide=(key,), steps=12, **SMALL_BATCH)
    _, run, notes, _, _ = prepare(path, Overrides(gpu="a100-80g"))
    assert (run.ref_offload if key == REF_OFF else run.param_offload) is (truth == "True")
    assert f"inferred {truth}" in setting_note(notes, key)


MEG_ACT_OFF = "actor_rollout_ref.actor.megatron.param_offload"
MEG_REF_OFF = "actor_rollout_ref.ref.megatron.param_offload"
MEGATRON = {k: v for k, v in SETTINGS.items() if ".fsdp_config." not in k}
MEGATRON.update({"actor_rollout_ref.actor.strategy": "megatron", MEG_ACT_OFF: "False",
                 "actor_rollout_ref.actor.megatron.optimizer_offload": "False", MEG_REF_OFF: "False"})


@pytest.mark.parametrize("key", [MEG_REF_OFF, MEG_ACT_OFF])
def test_a_megatron_runs_offload_is_its_own_key(tmp_path, key):
    """verl's Megatron workers read actor_rollout_ref.actor.megatron.param_offload, not the FSDP
    config: a Megatron log's offload is read there, and inferred and named there when unstated."""
    attr = "ref_offload" if key == MEG_REF_OFF else "param_offload"
    stated = model_log(tmp_path / "stated.log", dict(MEGATRON, **{key: "True"}), steps=4, **SMALL_BATCH)
    run, _ = config_from_log(read_log(stated), Overrides(gpu="a100-80g"))
    assert run.strategy == "megatron" and getattr(run, attr) is True
    # an FSDP switch in a Megatron run's command is not the one verl reads
    fsdp_key = key.replace(".megatron.", ".fsdp_config.")
    other = model_log(tmp_path / "fsdp.log", dict(MEGATRON, **{fsdp_key: "True"}), steps=4, **SMALL_BATCH)
    run, _ = config_from_log(read_log(other), Overrides(gpu="a100-80g"))
    assert getattr(run, attr) is False
    hidden = model_log(tmp_path / "run.log", dict(MEGATRON, **{key: "True"}), hide=(key,), steps=12, **SMALL_BATCH)
    _, run, notes, _, _ = prepare(hidden, Overrides(gpu="a100-80g"))
    assert getattr(run, attr) is True and "inferred True" in setting_note(notes, key)
    assert not [n for n in notes if "fsdp_config" in n], notes


def test_an_offload_switch_the_runs_trainer_does_not_read_is_refused(tmp_path):
    from polytrace.calibrate.settings import given_settings

    fsdp_log = read_log(model_log(tmp_path / "fsdp.log", SETTINGS, steps=3, **SMALL_BATCH))
    with pytest.raises(SettingError, match="actor strategy is fsdp, whose workers read .*fsdp_config.param_offload"):
        given_settings(fsdp_log, Overrides(settings={MEG_ACT_OFF: True}))
    meg_log = read_log(model_log(tmp_path / "meg.log", MEGATRON, steps=3, **SMALL_BATCH))
    with pytest.raises(SettingError, match="actor strategy is megatron"):
        given_settings(meg_log, Overrides(settings={ACT_OFF: True}))
    assert given_settings(meg_log, Overrides(settings={MEG_ACT_OFF: True})).config[MEG_ACT_OFF] is True


@pytest.mark.parametrize("strategy, key, code", [("fsdp", MEG_ACT_OFF, 2), ("megatron", ACT_OFF, 2),
                                                 ("megatron", MEG_ACT_OFF, 0), ("fsdp", ACT_OFF, 0)])
def test_estimate_takes_the_offload_key_of_its_strategy(capsys, strategy, key, code):
    argv = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--step", "0", "--strategy", strategy,
            "--set", f"{key}=true", "--json"]
    assert main(argv) == code
    out, err = capsys.readouterr()
    if code:
        assert f"this run's actor strategy is {strategy}" in err
    else:
        assert json.loads(out)["config"]["param_offload"] is True


def test_one_offload_switch_under_two_names_is_refused():
    with pytest.raises(SettingError, match="name one switch"):
        parse_settings([f"{ACT_OFF}=true", f"{MEG_ACT_OFF}=true"])


# Eager launches cost only what outlasts the device work they queue: a launch-bound run (a 0.5B
# model decoding 16 responses, ~0.3 ms of GPU work an iteration against 2.3 ms of launches) shows
# them; a 3B model's 64 x 8 batch hides all but ~0.5 ms an iteration and cannot tell the values apart.
LAUNCH_BOUND = dict(model="Qwen/Qwen2.5-0.5B-Instruct", prompts=8, n=2)


@pytest.mark.parametrize("key, attr, run_kw", [(EAGER, "eager", LAUNCH_BOUND), (CKPT, "gradient_checkpointing", {})])
def test_a_fast_run_rules_out_the_costlier_setting(tmp_path, key, attr, run_kw):
    # a run at half its modelled price (0.4x plus a 10% constant): the costlier setting's price
    # (launches on every decode step; a recomputed forward) would put it under the roofline floor
    path = model_log(tmp_path / "run.log", dict(SETTINGS, **{key: "False"}), hide=(key,), steps=12, slowdown=0.4,
                     micro=16, **run_kw)
    _, run, notes, _, _ = prepare(path, Overrides(gpu="a100-80g"))
    assert getattr(run, attr) is False
    note = setting_note(notes, key)
    assert "True rejected" in note and "roofline" in note and "inferred False" in note


@pytest.mark.parametrize("key, attr", [(EAGER, "eager"), (CKPT, "gradient_checkpointing")])
def test_an_unidentified_setting_keeps_the_default_with_a_note(tmp_path, key, attr):
    # at 1.8x the price either value fits with its own slope: the window cannot tell them apart
    path = model_log(tmp_path / "run.log", dict(SETTINGS, **{key: str(not REGISTRY[key].default)}), hide=(key,),
                     steps=12, slowdown=1.8)
    _, run, notes, _, _ = prepare(path, Overrides(gpu="a100-80g"))
    assert getattr(run, attr) is REGISTRY[key].default
    note = setting_note(notes, key)
    assert "does not tell the values apart" in note and f"--set {key}=" in note


def test_set_wins_over_inference(tmp_path):
    path = growing_log(tmp_path / "run.log", remove_padding=False, steps=12)
    _, run, notes, _, _ = prepare(path, Overrides(settings={RP: True}))
    assert run.remove_padding is True
    assert not [n for n in notes if RP in n]


def test_a_short_window_identifies_nothing(tmp_path):
    path = growing_log(tmp_path / "run.log", remove_padding=True, steps=2)
    _, run, notes, _, _ = prepare(path, Overrides())
    assert run.remove_padding is False  # verl's default, said so
    assert "cannot identify it" in setting_note(notes, RP)


def test_a_window_no_value_fits_keeps_the_default_and_stays_finite(tmp_path):
    # stage times far below any hypothesis' roofline: every value is rejected
    path = model_log(tmp_path / "run.log", dict(SETTINGS), hide=(RP,), steps=14, slowdown=0.05)
    res = validate(path, calibrate_steps=6, overrides=Overrides(gpu="a100-80g"))
    assert "no value fits within the physical bounds" in setting_note(res.notes, RP)
    assert res.config["remove_padding"] is False
    assert all(math.isfinite(v) for a in res.accuracy.values() for v in a.values() if v is not None)


def test_stage_misfit_bounds():
    x = np.linspace(1.0, 2.0, 10)
    assert stage_misfit(2.0 * x + 0.5, x, x) == pytest.approx(0.0, abs=1e-9)
    # flat times and growing prices: the constant may carry at most 60% of the stage
    flat = np.full(10, 3.0)
    assert stage_misfit(flat, x, x) > 0.05
    # a stage faster than the roofline floor allows is rejected
    assert stage_misfit(0.9 * ROOFLINE_FLOOR * x, x, x) is None


# --- the shared GPG log, its use_remove_padding taken out ----------------------------------------------


def test_gpg_log_remove_padding_inferred(validation_logs, tmp_path):
    src = validation_logs / "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"
    text = src.read_text(errors="replace").splitlines(keepends=True)
    stripped = [line.replace(f"{RP}=True ", "") for line in text]
    kept = [line for line in stripped
            if "'use_remove_padding': True," not in line and "use_remove_padding=True" not in line]
    path = tmp_path / "gpg_unstated.log"
    path.write_text("".join(kept))
    assert read_log(path).config.get(RP) is None
    _, run, notes, _, _ = prepare(path, Overrides(gpu="h100"))
    assert run.remove_padding is True
    assert "inferred True" in setting_note(notes, RP)


def test_config_from_log_reads_set_values(tmp_path):
    path = growing_log(tmp_path / "run.log", steps=3)
    run, _ = config_from_log(read_log(path), Overrides(settings={MEM: 0.3, EAGER: True}))
    assert run.mem_fraction == 0.3 and run.eager is True


@pytest.mark.parametrize("steps", [2, 14])
def test_the_note_and_the_configuration_agree(tmp_path, steps):
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    path = growing_log(tmp_path / "run.log", hide=(RP, tp), steps=steps)
    _, run, notes, _, _ = prepare(path, Overrides())
    note = setting_note(notes, tp)
    value = int(note.split("inferred " if "inferred " in note else "default ")[1].split()[0].rstrip(","))
    assert run.rollout_tp == value
    assert not [n for n in notes if n.startswith("rollout tensor parallelism not stated")]


def test_inference_work_is_bounded_by_the_window(tmp_path, monkeypatch):
    """Hypotheses are priced on the calibration window only: a longer log adds one pricing per
    extra step, whatever the number of unstated settings."""
    import polytrace.calibrate.validate as v

    calls = []
    real = v.stage_costs

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(v, "stage_costs", counting)
    hide = (RP, EAGER, CKPT, ACT_OFF)
    counts = []
    for steps in (14, 30):
        calls.clear()
        prepare(growing_log(tmp_path / f"run{steps}.log", hide=hide, steps=steps), Overrides())
        counts.append(len(calls))
    assert counts[1] - counts[0] == 30 - 14
    assert counts[0] > 14 + 10 * len(hide)  # every hypothesis priced the 10-step window


def test_a_rollout_tp_that_cannot_hold_the_model_is_rejected(tmp_path):
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    path = model_log(tmp_path / "run.log", dict(SETTINGS, **{tp: "4"}), hide=(tp,), steps=12,
                     model="Qwen/Qwen2.5-32B-Instruct", gpus=8, prompts=16, n=2, max_response=2048)
    _, run, notes, _, _ = prepare(path, Overrides(gpu="a100-80g"))
    note = setting_note(notes, tp)
    assert "1 rejected: gen would run at" in note  # 64 GB of weights in a 48 GB share: one sequence at a time
    assert run.rollout_tp in (2, 4, 8)


REF_MODEL = "actor_rollout_ref.ref.model.path"


def test_set_reference_model_prices_the_reference_pass_on_it(base_estimate):
    from polytrace.run.models import get_model

    other = _with([f"{REF_MODEL}=qwen2.5-7b"])
    base = base_estimate.rows[0]["stages_s"]
    got = other.rows[0]["stages_s"]
    assert got["old_log_prob"] == pytest.approx(base["old_log_prob"], rel=1e-12)
    ratio = get_model("qwen2.5-7b").params_total / get_model("qwen2.5-1.5b").params_total
    assert 0.6 * ratio < got["ref"] / base["ref"] < 1.2 * ratio  # a forward pass scales with the parameters
    assert other.config["ref_model"] == "qwen2.5-7b"


def test_reference_model_read_from_a_log(tmp_path):
    path = tmp_path / "run.log"
    for value, want in (("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("Qwen/Qwen2.5-3B-Instruct", None)):
        growing_log(path, steps=3)
        text = path.read_text().replace("trainer.n_gpus_per_node", f"+{REF_MODEL}={value} trainer.n_gpus_per_node", 1)
        path.write_text(text)
        run, _ = config_from_log(read_log(path), Overrides())
        assert (run.ref_model.name if run.ref_model else None) == want
    growing_log(path, steps=3)
    run, notes = config_from_log(read_log(path), Overrides(settings={REF_MODEL: "/nowhere/teacher"}))
    assert run.ref_model is None and any("reference model /nowhere/teacher is no known preset" in n for n in notes)


def test_set_reference_model_must_be_a_model():
    with pytest.raises(SettingError, match=REF_MODEL):
        parse_settings([f"{REF_MODEL}=no-such-model-9b"])


def test_any_text_is_a_value_or_a_one_line_refusal():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    keys = st.sampled_from(sorted(REGISTRY) + ["", "x", "actor_rollout_ref.model.use_remove_padding.extra"])

    @settings(max_examples=300, deadline=None)
    @given(keys, st.text(max_size=60), st.booleans())
    def check(key, value, with_sep):
        item = f"{key}={value}" if with_sep else key + value
        try:
            got = parse_settings([item])
        except SettingError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 600
            return
        (k, v), = got.items()
        kind = REGISTRY[k].kind
        assert isinstance(v, {"bool": bool, "int": int, "fraction": float, "model": str, "quantization": str}[kind])
        if kind == "quantization":
            assert v in ("bf16", "fp8")
        if kind == "fraction":
            assert 0.05 <= v <= 0.99

    check()


def test_memory_share_hypotheses_only_where_the_kv_cache_binds(tmp_path):
    from polytrace.calibrate.infer import _candidates

    run, _ = config_from_log(read_log(growing_log(tmp_path / "run.log", steps=3)), Overrides(gpu="a100-80g"))
    # 3B at TP 1 with 9,216-token sequences, 512 of them on 4 engines: the cache binds at every share
    binding = _candidates(MEM, run, None)
    assert len(binding) >= 4 and binding == sorted(binding)
    small = run.__class__(**{**run.__dict__, "prompts_per_step": 4, "n": 1, "notes": []})
    assert _candidates(MEM, small, None) == []  # one sequence per engine fits at any share: nothing to tell


def test_validate_prints_the_setting_notes(tmp_path, capsys):
    path = growing_log(tmp_path / "run.log", remove_padding=True, steps=14)
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert f"note: setting: {RP} not stated" in out and "inferred True" in out


def test_the_docs_list_every_setting():
    """docs/step-model.md's registry table names every key ``--set`` takes, once."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "step-model.md").read_text(encoding="utf-8")
    rows = [line for line in docs.splitlines() if line.startswith("| `") and "." in line.split("|")[1]]
    listed = [line.split("|")[1].strip().strip("`") for line in rows]
    for key in REGISTRY:
        assert listed.count(key) == 1, key
