"""The inference engine's generation and scheduling (``Rollout.engine``, ``Rollout.async_scheduling``;
priced in ``stepmodel/engines.py`` and ``rollout.overlapped_exposed_host``, read from logs in
``calibrate/engine.py``).

vLLM's V1 engine and its V0 loop are priced alike in step (no per-step figure tells them apart, and
the corpus measures both under one price), so a V1 discount slipped in fails here; asynchronous
scheduling hides the per-step host work behind the GPU's: an iteration costs at most what it costs
in step and at least the larger of its GPU and its host work, exactly that larger one when the whole
work overlaps (``ASYNC_HOST_OVERLAP``), so an overlap share other than vLLM 0.11's full overlap, a
host part dropped or double-counted, or a setting that does not reach the rollout fails."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polytrace.calibrate.engine import read_engine, vllm_version
from polytrace.calibrate.rundefaults import run_defaults
from polytrace.calibrate.settings import SettingError, estimate_arguments, parse_settings
from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.logs.devices import scan_lines
from polytrace.logs.record import StepRecord, TrainingLog
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.run.spec import Rollout, RunSpec, SpecError, declarations
from polytrace.stepmodel import engines as E
from polytrace.stepmodel.efficiency import DEFAULT, prior_scalars
from polytrace.stepmodel.rollout import iteration_launch_seconds, iteration_parts, overlapped_exposed_host
from polytrace.stepmodel.stages import RunConfig, stage_costs

H100 = get_gpu("h100")
SMALL, MID = get_model("qwen2.5-0.5b"), get_model("qwen2.5-7b")
ASYNC_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.async_scheduling"
BASE = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--step", "0"]


# --- the setting: declared once, through flags, --set, calibration files and its checks -------------

def test_declared_once_with_its_flags_and_keys():
    eng, asy = declarations()["engine"], declarations()["async_scheduling"]
    assert (eng.section, eng.default, eng.choices, eng.flag, eng.config_key) == (
        "rollout", "vllm-v1", ("vllm-v1", "vllm-v0"), "--rollout-engine", "engine")
    assert eng.verl == ()  # verl has no key: the vLLM it runs picks the engine
    assert (asy.section, asy.default, asy.flag, asy.config_key) == ("rollout", False, "--async-scheduling",
                                                                     "async_scheduling")
    assert {v.key for _b, v in asy.verl} == {ASYNC_KEY}
    spec = RunSpec.build({"engine": "vllm-v0"})
    assert (spec.rollout.engine, spec.rollout.async_scheduling) == ("vllm-v0", False)
    assert RunSpec.build({"async_scheduling": True}).rollout.engine == "vllm-v1"


@pytest.mark.parametrize("values,message", [
    ({"engine": "vllm-v2"}, "--rollout-engine must be one of vllm-v1, vllm-v0, got 'vllm-v2'"),
    ({"engine": "vllm-v0", "async_scheduling": True},
     "--async-scheduling needs the V1 engine (--rollout-engine vllm-v1)"),
    ({"async_scheduling": "yes"}, "--async-scheduling must be true or false"),
])
def test_a_bad_value_is_one_line_naming_the_setting(values, message):
    with pytest.raises(SpecError) as err:
        RunSpec.build(values)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_set_key_and_a_calibration_file_round_trip(tmp_path):
    assert estimate_arguments(parse_settings([f"{ASYNC_KEY}=true"])) == ({"async_scheduling": True}, {})
    with pytest.raises(SettingError, match=ASYNC_KEY.replace(".", r"\.")):
        parse_settings([f"{ASYNC_KEY}=sometimes"])
    cfg = RunConfig(model=MID, gpu=H100, n_gpus=8, prompts_per_step=16, n=4, max_prompt_len=256,
                    max_response_len=256, engine="vllm-v0")
    config = json.loads(json.dumps(cfg.to_dict()))
    assert (config["engine"], config["async_scheduling"]) == ("vllm-v0", False)
    got = run_defaults({"gpu": "h100", "config": config, "path": "cal.json"})
    assert (got["engine"], got["async_scheduling"]) == ("vllm-v0", False)
    with pytest.raises(PolytraceError, match=r"config\.engine is 'vllm-v9' \(the setting --rollout-engine"):
        run_defaults({"gpu": "h100", "config": {**config, "engine": "vllm-v9"}, "path": "cal.json"})
    with pytest.raises(PolytraceError, match="async_scheduling"):
        RunConfig(model=MID, gpu=H100, n_gpus=8, prompts_per_step=16, n=4, max_prompt_len=256,
                  max_response_len=256, engine="vllm-v0", async_scheduling=True)


def _cli(capsys, argv):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_estimate_says_the_engine_and_takes_its_flags(capsys):
    rc, out, err = _cli(capsys, BASE)
    assert rc == 0, err
    assert ", CUDA graphs | vLLM V1, in-step scheduling | fsdp |" in out.splitlines()[0], out.splitlines()[0]
    rc, out, err = _cli(capsys, [*BASE, "--rollout-engine", "vllm-v0", "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert (doc["config"]["engine"], doc["config"]["async_scheduling"]) == ("vllm-v0", False)
    rc, out, err = _cli(capsys, [*BASE, "--set", f"{ASYNC_KEY}=true"])
    assert rc == 0, err
    assert "| vLLM V1, async scheduling |" in out.splitlines()[0], out.splitlines()[0]
    rc, out, err = _cli(capsys, [*BASE, "--rollout-engine", "vllm-v0", "--async-scheduling"])
    assert rc == 2 and out == ""
    assert err.startswith("polytrace: error: --async-scheduling needs the V1 engine") and err.count("\n") == 1, err



@pytest.mark.parametrize("mode", ["one-step-off", "fully-async"])
def test_a_separated_mode_says_the_engine_too(capsys, mode):
    """The separated modes' first line names the engine's setting as the colocated one does."""
    eager = "actor_rollout_ref.rollout.enforce_eager=true"
    rc, out, err = _cli(capsys, [*BASE, "--mode", mode, "--set", eager, "--async-scheduling"])
    assert rc == 0, err
    head = out.splitlines()[0]
    assert f"| {mode} |" in head and "| eager | vLLM V1, async scheduling |" in head, head
    rc, out, err = _cli(capsys, [*BASE, "--mode", mode, "--rollout-engine", "vllm-v0"])
    assert rc == 0, err
    assert "| CUDA graphs | vLLM V0, in-step scheduling |" in out.splitlines()[0], out.splitlines()[0]


# --- the log's engine ---------------------------------------------------------------------------

def _log(lines=(), timers=()):
    steps = [StepRecord(1, {}, {t: 1.0 for t in timers})]
    return TrainingLog("run.log", "verl-console", steps, devices=scan_lines(enumerate(lines, 1)))


@pytest.mark.parametrize("lines,timers,engine", [
    ((), (), "vllm-v0"),  # nothing stated: the V0 loop verl ran before vLLM 0.8
    (("WARNING ... not implemented in <vllm.v1.worker.gpu_worker.Worker object at 0x7f>",), (), "vllm-v1"),
    (("WARNING [arg_utils.py:1708] VLLM_ATTENTION_BACKEND=XFORMERS is not supported by the V1 Engine. "
      "Falling back to V0.",), (), "vllm-v0"),
    (("export VLLM_ATTENTION_BACKEND=XFORMERS", "<vllm.v1.worker.gpu_worker.Worker object>"), (), "vllm-v1"),
    (("export VLLM_USE_V1=0",), (), "vllm-v0"),
    (("pip install vllm==0.7.3",), (), "vllm-v0"),
    (("INFO vLLM version 0.8.5",), (), "vllm-v1"),  # V1 the default from 0.8.0
    (("vllm==0.11.0", "export VLLM_USE_V1=0"), (), "vllm-v1"),  # 0.11 has no V0
    (("# pip install vllm==0.11.0", "# If you are using vllm<=0.6.3, set XFORMERS"), (), "vllm-v0"),  # comments
    ((), ("timing_s/agent_loop/generate_sequences/max",), "vllm-v1"),  # verl's agent loop: AsyncLLM
])
def test_the_engine_a_log_states(lines, timers, engine):
    notes: list[str] = []
    assert read_engine(_log(lines, timers), False, notes) == engine
    assert notes == []


def test_asynchronous_scheduling_overrules_a_v0_reading_with_a_note():
    notes: list[str] = []
    assert read_engine(_log(("export VLLM_USE_V1=0",)), True, notes) == "vllm-v1"
    assert len(notes) == 1 and "V0 has no asynchronous scheduler" in notes[0]


@pytest.mark.parametrize("name, says", [
    ("vllm", None), ("vllm_async", None), ("VLLM", None),
    ("sglang", "SGLang"), ("sglang_async", "SGLang"), ("hf", "HuggingFace generate"),
    ("trtllm", "not a rollout backend this model knows"),
])
def test_a_rollout_other_than_vllm_is_priced_as_vllm_with_a_note(name, says):
    """verl's ``actor_rollout_ref.rollout.name``: any other backend than vLLM is priced as vLLM's
    engine, and a note says so (a backend changes generation's cost 2x or more)."""
    log = _log()
    log.printed["actor_rollout_ref.rollout.name"] = name  # as verl prints its config at start-up
    notes: list[str] = []
    assert read_engine(log, False, notes) == "vllm-v0"
    if says is None:
        assert notes == []
    else:
        assert len(notes) == 1 and says in notes[0] and f"rollout.name={name!r}" in notes[0], notes
        assert "priced as vLLM's vllm-v0 engine" in notes[0], notes


def test_versions():
    assert vllm_version("0.8.3") == (0, 8) and vllm_version("0.11") == (0, 11)
    assert vllm_version("v0.8") is None and vllm_version("0.8.x") is None


@pytest.mark.parametrize("name,engine", [("verl_qwen2-7b_ppo_8gpu_b512x1.log", "vllm-v1"),
                                         ("verl_qwen2.5-0.5b_ppo_8gpu_b2048.log", "vllm-v0"),
                                         ("ladder/Qwen2.5-0.5B-bsz64_2-prompt512-resp1024-lorarank32-score0.543.log",
                                          "vllm-v0")])
def test_corpus_logs_read_as_they_ran(validation_logs, name, engine):
    from polytrace.calibrate.logconfig import config_from_log
    from polytrace.logs import read_log

    run, _notes = config_from_log(read_log(validation_logs / name))
    assert (run.engine, run.async_scheduling) == (engine, False)


# --- the price ----------------------------------------------------------------------------------

def test_the_overlap_share_is_vllm_0_11s_full_overlap():
    assert E.ASYNC_HOST_OVERLAP == 1.0
    assert E.host_overlap("vllm-v1", True) == 1.0
    assert E.host_overlap("vllm-v1", False) == E.host_overlap("vllm-v0", False) == 0.0
    with pytest.raises(ValueError, match="V1"):
        E.host_overlap("vllm-v0", True)
    eff = E.rollout_efficiency(DEFAULT, SMALL, async_scheduling=True, eager=True)
    assert eff.host_overlap == 1.0 and eff.adapter_launch_s_per_layer == 0.0
    # weighed at the shipped priors' slowdowns of the parts, under the run's launch mode
    for eager in (True, False):
        s = prior_scalars(eager=eager)
        assert E.overlap_slowdowns(eager) == (s["rollout_slowdown"], s["rollout_comm_slowdown"],
                                              s["rollout_host_slowdown"], s["rollout_seq_host_slowdown"])
    assert eff.overlap_slowdowns == E.overlap_slowdowns(True) != E.overlap_slowdowns(False)
    assert E.rollout_efficiency(DEFAULT, SMALL) is DEFAULT
    back = E.rollout_efficiency(eff, SMALL)  # a run in step resets both
    assert back.host_overlap == 0.0 and back.overlap_slowdowns == (1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize("model,eager", [(SMALL, True), (MID, True), (MID, False)])
def test_v1_and_v0_in_step_cost_the_same(model, eager):
    """No V1 discount: none is citable per step, and the corpus prices both at one fitted price."""
    p, r = np.full(48, 300), np.linspace(20, 600, 48).astype(int)
    base = dict(model=model, gpu=H100, n_gpus=2, prompts_per_step=12, n=4, max_prompt_len=300, max_response_len=600,
                rollout_tp=1, eager=eager)
    v1 = stage_costs(RunConfig(**base, engine="vllm-v1"), p, r)
    v0 = stage_costs(RunConfig(**base, engine="vllm-v0"), p, r)
    assert [x.seconds for x in v1.parts] == [x.seconds for x in v0.parts]


def _iteration(model, eager, active, overlap, slowdowns=(1.0, 1.0, 1.0, 1.0)):
    ctx = active * 400.0
    eff = dataclasses.replace(DEFAULT, host_overlap=overlap, host_s_per_iter=2e-3, host_s_per_seq_iter=60e-6,
                              overlap_slowdowns=slowdowns)
    parts, _ = iteration_parts(model, H100, Rollout(rollout_tp=1, eager=eager), active, ctx, eff)
    return parts, eff


@pytest.mark.parametrize("model,eager", [(SMALL, True), (SMALL, False), (MID, True), (MID, False)])
def test_async_scheduling_costs_the_larger_of_gpu_and_host_work(model, eager):
    active = np.array([1.0, 8.0, 64.0, 256.0, 1024.0])
    sync, eff = _iteration(model, eager, active, 0.0)
    over, _ = _iteration(model, eager, active, 1.0)
    device = sync["gemm"] + sync["decode"] + sync["comm"]
    for k in ("gemm", "decode", "comm"):
        assert np.array_equal(over[k], sync[k])  # the GPU's work is the GPU's work
    t_sync, t_over = sum(sync.values()), sum(over.values())
    launch = iteration_launch_seconds(model, eff, eager)
    exposed_launch = np.maximum(launch - device, 0.0)
    work = eff.host_s_per_iter + eff.host_s_per_seq_iter * active
    # the host thread launches the forward and does the between-step work while the GPU runs
    expected = np.maximum(device + exposed_launch, np.minimum(launch, device + exposed_launch) + work)
    assert t_over == pytest.approx(expected, rel=1e-12)
    assert np.all(t_over <= t_sync * (1 + 1e-12)) and np.all(t_over >= np.maximum(device, work) * (1 - 1e-12))
    # what hides is the GPU time the launches leave idle on the host thread, up to the whole work; a
    # launch-bound iteration (a 0.5B model in eager mode) keeps its host thread busy: nothing hides
    hidden = np.minimum(np.maximum(device - launch, 0.0), work)
    assert t_sync - t_over == pytest.approx(hidden, rel=1e-9, abs=1e-15)
    assert np.any(hidden > 0) == bool(np.any(device > launch))
    assert np.all(over["host"] >= exposed_launch - 1e-15) and np.all(over["seq_host"] >= 0)


@pytest.mark.parametrize("model", [SMALL, MID])
def test_the_overlap_holds_on_the_seconds_the_priors_price(model):
    """The priors scale each part after the simulation (device ~0.95x, per-sequence host ~7x): the
    bounds hold on the priced seconds, not only on the base ones."""
    w = (0.95, 1.0, 3.7, 7.0)
    weight = {"gemm": w[0], "decode": w[0], "comm": w[1], "host": w[2], "seq_host": w[3]}
    active = np.array([1.0, 16.0, 128.0, 512.0])
    sync, eff = _iteration(model, True, active, 0.0, w)
    over, _ = _iteration(model, True, active, 1.0, w)
    priced = {k: sum(parts[f] * weight[f] for f in parts) for k, parts in (("sync", sync), ("over", over))}
    device = (sync["gemm"] + sync["decode"]) * w[0] + sync["comm"] * w[1]
    forward = device + sync["host"] * w[2] - eff.host_s_per_iter * w[2]  # plus the exposed launches
    work = (eff.host_s_per_iter * w[2] + eff.host_s_per_seq_iter * active * w[3])
    launch = iteration_launch_seconds(model, eff, True) * w[2]
    assert priced["over"] == pytest.approx(np.maximum(forward, np.minimum(launch, forward) + work), rel=1e-12)
    assert np.all(priced["over"] <= priced["sync"] * (1 + 1e-12))
    assert np.all(priced["over"] >= np.maximum(device, work) * (1 - 1e-12))
    # at base weights the 7B model's per-sequence work would hide wholly where priced it does not (the
    # 0.5B model's eager iterations are launch-bound: nothing hides either way)
    base, _ = _iteration(model, True, active, 1.0)
    assert model is SMALL or not np.allclose(sum(base[f] * weight[f] for f in base), priced["over"], rtol=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.floats(0, 1e-1, allow_nan=False)] * 4), min_size=1, max_size=8),
       st.floats(0, 1, allow_nan=False))
def test_the_overlap_is_bounded_for_any_split(rows, share):
    device, launch, step, seq = (np.array(c) for c in zip(*rows))
    exposed = np.maximum(launch - device, 0.0)
    host, seq_part = overlapped_exposed_host(device, exposed, launch, step, seq, share)
    in_step = device + exposed + step + seq
    total = device + host + seq_part
    assert np.all(total <= in_step + 1e-15)
    assert np.all(total >= np.maximum(device + exposed, np.minimum(launch, device + exposed) + step + seq) - 1e-15)
    assert np.all(host >= exposed - 1e-15) and np.all(seq_part >= -1e-18) and np.all(seq_part <= seq + 1e-15)
    if share == 0:
        assert np.allclose(total, in_step, rtol=1e-12, atol=0)


def test_the_setting_reaches_the_rollout():
    p, r = np.full(64, 200), np.linspace(20, 500, 64).astype(int)
    # CUDA graphs: a 7B model's eager forward on an H100 is launch-bound at the priors' host price
    # (3.7 x 2.7 ms of launches against ~6 ms of weights), and a launch-bound host thread hides nothing
    base = dict(model=MID, gpu=H100, n_gpus=1, prompts_per_step=16, n=4, max_prompt_len=200, max_response_len=500,
                rollout_tp=1, eager=False)

    def gen(**kw):
        parts = [x for x in stage_costs(RunConfig(**base, **kw), p, r).parts if x.stage == "gen"]
        return {f: sum(x.seconds for x in parts if x.family == f) for f in {x.family for x in parts}}

    sync, over = gen(), gen(async_scheduling=True)
    gpu = ("gemm", "decode", "comm", "prefill")
    assert {k: over[k] for k in gpu if k in over} == pytest.approx({k: sync[k] for k in gpu if k in sync}, rel=1e-12)
    assert over["host"] + over["seq_host"] < sync["host"] + sync["seq_host"]


# --- the one vLLM 0.11 run read here, zero-shot (esaaren/verl-on-gke: 16 B200s, Qwen2.5-32B, TP 8) ----

def test_the_vllm_0_11_b200_run_under_each_engine_setting(validation_logs):
    """Read as it ran (V1: verl's agent loop; in step: vLLM 0.11's default, off until 0.14);
    V0 prices it the same; asynchronous scheduling hides nothing while its eager forward is
    launch-bound (64 layers of launches at the priors' host price outlast ~1 ms of weights a GPU),
    and lowers generation under CUDA graphs, never below the in-step GPU work."""
    from polytrace.calibrate.logconfig import Overrides, config_from_log
    from polytrace.calibrate.zeroshot import zero_shot
    from polytrace.logs import read_log

    csv = validation_logs / "more" / "verl-on-gke_b200_vllm0.11_parsed_metrics.csv"
    readme = str(validation_logs / "more" / "verl-on-gke_b200_vllm0.11.README.md")
    graphs = "actor_rollout_ref.rollout.enforce_eager=false"

    def gen(*sets):
        r = zero_shot(csv, Overrides(gpu="b200", configs=(readme,), settings=parse_settings(list(sets))))
        return r.config, r.accuracy["gen"]["mean_predicted_s"]

    config, eager = gen()
    assert (config["engine"], config["async_scheduling"], config["eager"]) == ("vllm-v1", False, True)
    assert gen(f"{ASYNC_KEY}=true")[1] == pytest.approx(eager, rel=1e-12)
    in_step, overlapped = gen(graphs)[1], gen(graphs, f"{ASYNC_KEY}=true")[1]
    assert overlapped < in_step
    run, _ = config_from_log(read_log(csv), Overrides(gpu="b200", configs=(readme,)))
    p, r = np.full(256, 105), np.linspace(60, 512, 256).astype(int)
    v1 = stage_costs(run, p, r)
    v0 = stage_costs(dataclasses.replace(run, engine="vllm-v0"), p, r)
    assert [x.seconds for x in v1.parts] == [x.seconds for x in v0.parts]
    device = sum(x.seconds for x in stage_costs(dataclasses.replace(run, eager=False), p, r).parts
                 if x.stage == "gen" and x.family not in ("host", "seq_host"))
    over = sum(x.seconds for x in stage_costs(dataclasses.replace(run, eager=False, async_scheduling=True), p, r).parts
               if x.stage == "gen")
    assert over >= device * (1 - 1e-12)
