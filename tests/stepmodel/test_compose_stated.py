"""A run stated by its averages: lengths rescaled from a profile's shape (``--lengths``), the
batch in responses (``--responses-per-step``, ``--train-batch``) and the MoE / long-context
layouts (``--train-ep``, ``--train-cp``, ``--train-vpp``, ``--rollout-ep``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.stepmodel import estimate
from polytrace.stepmodel.estimate import build_config
from polytrace.stepmodel.workloads import nearest_shape, stated_lengths_profile
from polytrace.workload.profiles import get_profile
from polytrace.workload.profiles.stated import describe, parse_lengths, rescale

SHAPES = ("dapo-math-32b", "deepcoder-14b", "model-b-math", "video-vl-7b")


def _pooled(prof, steps=range(20, 28), seed=5, prompts=256):
    """Responses of steps and a seed the factor was not solved on."""
    return np.concatenate([prof.sample(step=s, seed=seed, prompts=prompts).response_lens for s in steps])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mean, cap", [(3200, 4096), (1000, 4096), (600, 20000), (6000, 16384)])
def test_sampled_mean_is_the_stated_mean_at_the_stated_cap(shape, mean, cap):
    prof = rescale(get_profile(shape), mean, cap)
    r = _pooled(prof)
    assert r.max() <= cap and prof.config.max_response_len == cap
    # 2,048 groups: the sampling error of a strongly grouped shape is ~3% of the mean here
    assert abs(r.mean() / mean - 1) <= 0.05, (shape, mean, cap, r.mean())


@pytest.mark.parametrize("shape", SHAPES)
def test_the_shapes_order_and_pile_up_are_kept(shape):
    base = get_profile(shape).with_drift(None)
    prof = rescale(base, 2000, 8192)
    b0, b1 = base.sample(step=3, seed=1, prompts=64), prof.sample(step=3, seed=1, prompts=64)
    # the same draws, mapped monotonically: the order (so every group's ranks) is the shape's
    order = np.argsort(b0.response_lens, kind="stable")
    assert np.all(np.diff(b1.response_lens[order]) >= 0)
    assert np.array_equal(b0.group_ids, b1.group_ids)
    # a response the shape had at its cap is at the stated cap
    at_cap = b0.response_lens >= base.config.max_response_len
    assert np.all(b1.response_lens[at_cap] == 8192)
    assert prof.stated["capped_share"] >= prof.stated["shape_capped_share"]


def test_a_mean_below_the_shapes_pile_up_scales_everything_and_says_so():
    base = get_profile("deepcoder-14b")  # ~18% of its responses at its cap
    prof = rescale(base, 300, 20000)
    assert not prof.keep_capped and prof.notes and "cannot be kept" in prof.notes[0]
    assert abs(_pooled(prof).mean() / 300 - 1) <= 0.04


def test_a_stated_prompt_mean_scales_the_prompts():
    prof = rescale(get_profile("dapo-math-32b"), 1000, 4096, prompt=400)
    p = np.concatenate([prof.sample(step=s, seed=2, prompts=128).prompt_lens for s in range(4)])
    assert abs(p.mean() / 400 - 1) <= 0.05 and p.max() <= prof.config.max_prompt_len


def test_a_sequence_cap_leaves_each_response_what_its_prompt_does_not_take():
    """``total=T`` (vLLM's max_model_len): prompt + response <= T for every sequence, a short
    prompt's response may run past what the longest prompt leaves, the mean is still stated."""
    prof = rescale(get_profile("dapo-math-32b"), 800, prompt=300, total=2048)
    batches = [prof.sample(step=s, seed=4, prompts=256) for s in range(20, 26)]
    p = np.concatenate([b.prompt_lens for b in batches])
    r = np.concatenate([b.response_lens for b in batches])
    capped = np.concatenate([b.capped for b in batches])
    assert np.all(p + r <= 2048)
    longest_prompt = prof.config.max_prompt_len
    assert p.max() > 300 and np.any(r > 2048 - longest_prompt)  # not one cap for all: per prompt
    # a response at its cap ends exactly at the sequence cap; none below it is marked capped
    assert capped.any() and np.all(p[capped] + r[capped] == 2048) and np.all(p[~capped] + r[~capped] < 2048)
    assert abs(r.mean() / 800 - 1) <= 0.05, r.mean()
    assert prof.config.max_response_len == 2048 - int(np.clip(np.rint(
        np.concatenate([b.prompt_lens for b in [get_profile("dapo-math-32b").sample(step=s, seed=0, prompts=256)
                                                 for s in range(16)]]) * prof.prompt_factor), 1, None).min())
    assert prof.stated["total"] == 2048 and "sequence cap 2048" in describe(prof)
    # with max= as well, each response is within both
    both = rescale(get_profile("dapo-math-32b"), 800, 1500, prompt=300, total=2048)
    b = both.sample(step=21, seed=4, prompts=256)
    assert b.response_lens.max() <= 1500 and np.all(b.prompt_lens + b.response_lens <= 2048)


@pytest.mark.parametrize("text, match", [
    ("mean=2000,total=2048,prompt=100", "does not fit under the sequence cap total=2048"),
    ("mean=500,max=4096,total=4096", "max=4096 is not below total=4096"),
    ("mean=500,total=0", "at least 1"),
])
def test_bad_sequence_caps_are_one_line_errors(text, match):
    with pytest.raises(PolytraceError, match=match):
        parse_lengths(text)


def test_a_sequence_cap_below_the_longest_prompt_is_refused():
    with pytest.raises(PolytraceError, match="leaves no response to the longest prompt"):
        stated_lengths_profile("mean=10,total=200,prompt=150")


def test_the_cli_syntax_is_the_parsers():
    from polytrace.cli.compose_cmds import LENGTHS_SYNTAX as CLI
    from polytrace.workload.profiles.stated import FIELDS, LENGTHS_SYNTAX

    assert CLI == LENGTHS_SYNTAX and all(f"{f}=" in LENGTHS_SYNTAX for f in FIELDS)


def test_doubling_the_mean_at_a_fixed_cap_doubles_decode_work_and_the_trainers_tokens():
    kw = dict(steps=[0, 1], results_root="/nonexistent", prompts=64)
    runs = {m: estimate(stated_lengths_profile(f"mean={m},max=16384,prompt=100"), "qwen2.5-7b", "h100", 8, **kw)
            for m in (1500, 3000)}
    rows = {m: r.rows for m, r in runs.items()}
    decoded = {m: sum(x["response_tokens"] for x in rows[m]) for m in rows}
    trained = {m: sum(x["tokens"] for x in rows[m]) for m in rows}
    assert 1.9 <= decoded[3000] / decoded[1500] <= 2.1, decoded
    # the trainer sees prompts (~100 tokens) and responses: (100 + 3000) / (100 + 1500) = 1.94
    assert 1.85 <= trained[3000] / trained[1500] <= 2.05, trained
    # and prices them: the forward passes grow with the tokens (attention a little faster)
    olp = {m: r.summary["mean_stages_s"]["old_log_prob"] for m, r in runs.items()}
    assert 1.7 <= olp[3000] / olp[1500] <= 2.6, olp
    # decoding reads each running sequence's KV cache every iteration: twice the tokens over
    # contexts twice as long, ~4x the reads; the weight reads per iteration follow the longest
    # response (near the fixed cap in both), so generation grows by less than 2x
    kv = {m: r.summary["kernels"]["gen"]["decode"]["s"] for m, r in runs.items()}
    assert 3.0 <= kv[3000] / kv[1500] <= 4.5, kv
    gen = {m: r.summary["mean_stages_s"]["gen"] for m, r in runs.items()}
    assert 1.2 <= gen[3000] / gen[1500] < 2.0, gen


def test_nearest_shape_by_task():
    assert nearest_shape("qwen2.5-32b") == "dapo-math-32b"  # the DAPO recipe's model
    assert nearest_shape("deepcoder-14b") == "deepcoder-14b"
    assert nearest_shape("qwen2.5-vl-7b") == "video-vl-7b"
    assert nearest_shape("llama-3.1-8b") == "dapo-math-32b"  # math reasoning, the default task
    assert stated_lengths_profile("mean=500", model="deepcoder-14b").base.name == "deepcoder-14b"
    assert stated_lengths_profile("mean=500,shape=video-vl-7b", profile="dapo-math-32b").base.name == "video-vl-7b"


@pytest.mark.parametrize("text, match", [
    ("mean=5000,max=4096", "mean=5000 is above the cap max=4096"),
    ("max=4096", "the mean response length is required"),
    ("mean=abc", "mean='abc' is not a number"),
    ("mean=0", "must be a finite number of tokens, at least 1"),
    ("mean=inf", "must be a finite number"),
    ("mean=100,max=12.5", "must be a whole number"),
    ("mean=100,cap=200", "unknown field 'cap'"),
    ("mean=100,mean=200", "mean given twice"),
    ("mean", "expected mean=M"),
])
def test_bad_lengths_are_one_line_errors(text, match):
    with pytest.raises(PolytraceError, match=match):
        parse_lengths(text)


def test_a_mean_above_the_shapes_own_cap_and_multi_turn_shapes_are_refused():
    with pytest.raises(PolytraceError, match="above the cap of shape dapo-math-32b"):
        stated_lengths_profile("mean=50000")
    with pytest.raises(PolytraceError, match="multi-turn shape"):
        stated_lengths_profile("mean=500,shape=search-r1-7b")
    with pytest.raises(PolytraceError, match="disagree"):
        stated_lengths_profile("mean=500,max=4096", max_response_len=8192)


def _run(capsys, argv):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


BASE = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--step", "0"]


def test_cli_estimate_with_stated_lengths_and_batch_in_responses(capsys):
    rc, out, err = _run(capsys, [*BASE, "--lengths", "mean=3200,max=4096", "--responses-per-step", "1024",
                                 "--train-batch", "256", "--n", "16"])
    assert rc == 0, err
    assert "lengths: shape dapo-math-32b rescaled: responses mean" in out and "-> 3200 tokens" in out
    assert "64 prompts x 16" in out
    rc, out, err = _run(capsys, [*BASE, "--lengths", "mean=3200,max=4096", "--responses-per-step", "1024",
                                 "--train-batch", "256", "--n", "16", "--json"])
    doc = json.loads(out)
    assert doc["lengths"]["shape"] == "dapo-math-32b" and doc["lengths"]["mean"] == 3200
    assert doc["config"]["prompts_per_step"] == 64 and doc["config"]["mini_batches"] == 4
    assert doc["config"]["max_response_len"] == 4096


@pytest.mark.parametrize("extra, match", [
    (["--lengths", "mean=5000,max=4096"], "--lengths: mean=5000 is above the cap max=4096"),
    (["--lengths", "mean=300,shape=nope"], "unknown profile 'nope'"),
    (["--model", "qwen3-30b-a3b", "--strategy", "megatron", "--train-ep", "6"],
     "--train-ep 6 does not divide qwen3-30b-a3b's 128 experts"),
    (["--model", "qwen3-30b-a3b", "--strategy", "megatron", "--train-ep", "16"],
     "--train-ep 16 does not divide the 8 GPUs of a pipeline stage"),
    (["--strategy", "megatron", "--train-ep", "2"], "qwen2.5-7b is a dense model"),
    (["--train-cp", "2"], "--train-cp 2 is Megatron's parallelism"),
    (["--strategy", "megatron", "--train-tp", "4", "--train-cp", "4"], "does not divide --gpus 8"),
    (["--strategy", "megatron", "--train-vpp", "2"], "needs --train-pp above 1"),
    (["--model", "qwen3-30b-a3b", "--rollout-tp", "2", "--rollout-ep", "4"], "--rollout-ep 4: vLLM's expert"),
    (["--responses-per-step", "1000", "--n", "16"], "no whole number of groups of --n 16"),
    (["--responses-per-step", "1024", "--prompts", "32", "--n", "16"], "give one of them"),
    (["--train-batch", "100", "--n", "16"], "--train-batch 100 is no whole number"),
])
def test_cli_bad_layouts_and_batches_are_one_line_errors(capsys, extra, match):
    rc, out, err = _run(capsys, [*BASE, *extra])
    assert rc == 2 and match in err, err
    assert err.count("\n") == 1 and err.startswith("polytrace: error: ") and "Traceback" not in err


def test_calibrate_stage_times_and_impact_take_stated_lengths(tmp_path, capsys):
    from _compose_results import family_benches, result_file, write

    cal = tmp_path / "cal.json"
    rc, out, err = _run(capsys, ["calibrate", "--stage-times", "gen=100,old_log_prob=20,ref=20,update_actor=60",
                                 "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8",
                                 "--lengths", "mean=2000,max=4096", "--responses-per-step", "512", "--n", "8",
                                 "-o", str(cal), "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["source"]["profile"].startswith("dapo-math-32b@mean=2000,max=4096")
    # the candidate 2x faster, at the fixture's rates (none below its roofline floor)
    base = write(tmp_path / "a.json", result_file(family_benches("logprob", model="qwen2.5-7b", factor=2.0)))
    cand = write(tmp_path / "b.json", result_file(family_benches("logprob", model="qwen2.5-7b")))
    rc, out, err = _run(capsys, ["impact", str(base), str(cand), "--lengths", "mean=2000,max=4096",
                                 "--step", "0", "--model", "qwen2.5-7b", "--gpus", "8"])
    assert rc == 0, err
    assert out.startswith("lengths: shape dapo-math-32b rescaled") and "dapo-math-32b@mean=2000" in out
    rc, out, err = _run(capsys, ["calibrate", "x.log", "--lengths", "mean=2000", "-o", str(tmp_path / "y.json")])
    assert rc == 2 and "--lengths applies to --stage-times" in err


def test_calibrate_stage_times_takes_a_megatron_layout_and_a_framework(tmp_path, capsys):
    """The averages of a Megatron MoE run under NeMo RL: its layout reaches the calibration (the
    EP flags once asked for a --strategy calibrate did not have) and the framework's colocated
    switch is priced instead of falling to the fitted constants; a log refuses both."""
    base = ["calibrate", "--stage-times", "gen=300,old_log_prob=20,ref=20,update_actor=60,step=420",
            "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "32", "--strategy", "megatron", "--train-ep", "8",
            "--train-tp", "2", "--rollout-tp", "2", "--lengths", "mean=3050,total=4096,prompt=150",
            "--responses-per-step", "2048", "--n", "32", "--json"]
    docs = {}
    for fw in ("verl", "nemo-rl"):
        rc, out, err = _run(capsys, base + ["--framework", fw, "-o", str(tmp_path / f"{fw}.json")])
        assert rc == 0, err
        docs[fw] = json.loads(out)
    c = docs["nemo-rl"]["config"]
    assert (c["strategy"], c["train_tp"], c["train_ep"], c["rollout_tp"]) == ("megatron", 2, 8, 2)
    assert c["engine_weights_offload"] and c["switch_offload"] and not docs["verl"]["config"]["switch_offload"]
    # the same generation average, part of it now the switch's priced traffic: less left to the deviation
    assert docs["nemo-rl"]["scalars"]["rollout_slowdown"] < docs["verl"]["scalars"]["rollout_slowdown"]
    for flag in (["--strategy", "megatron"], ["--train-tp", "2"], ["--framework", "nemo-rl"]):
        rc, out, err = _run(capsys, ["calibrate", "x.log", *flag, "-o", str(tmp_path / "y.json")])
        assert rc == 2 and f"{flag[0]} applies to --stage-times" in err
    # estimating with the file prices the calibrated run: its layout and its framework's switch
    rc, out, err = _run(capsys, ["estimate", "--calibration", str(tmp_path / "nemo-rl.json"), "--step", "0", "--json"])
    assert rc == 0, err
    est = json.loads(out)
    assert (est["config"]["train_ep"], est["config"]["train_tp"]) == (8, 2) and est["framework"] == "nemo-rl"
    assert est["config"]["switch_offload"] and est["calibration"]["differs_from_run"] == []
    rc, out, err = _run(capsys, ["estimate", "--calibration", str(tmp_path / "nemo-rl.json"), "--step", "0",
                                 "--framework", "verl", "--json"])
    assert rc == 0 and "--framework verl (the calibrated run: nemo-rl)" in err


# ----------------------------------------------------------------------------- layouts priced
MOE = dict(results_root="/nonexistent", steps=[0], prompts=32, strategy="megatron")


def _moe(**kw):
    # a 288 GB MI355X: without expert parallelism the 30B model's Megatron state (267 GB a GPU at TP 1)
    # fits only there, and the comparison needs both layouts to run
    return estimate("dapo-math-32b", "qwen3-30b-a3b", "mi355x", 16, **{**MOE, **kw})


def test_expert_parallelism_adds_all_to_all_and_splits_the_experts_memory():
    from polytrace.run.hardware import get_gpu
    from polytrace.run.models import get_model
    from polytrace.stepmodel.efficiency import DEFAULT
    from polytrace.stepmodel.parallel import all_to_all_seconds, expert_flops_share

    m, g = get_model("qwen3-30b-a3b"), get_gpu("h100")
    # one MoE layer's dispatch and combine of 4096 tokens' top-8 copies, 7/8 of them to other GPUs
    one_layer = 2 * (4096 * 8 * m.hidden * 2 * 7 / 8 / (g.link_gbps(8) * 1e9 * DEFAULT.all_to_all)
                     + DEFAULT.all_to_all_latency_s)
    assert float(all_to_all_seconds(m, g, 4096.0, 8, 8, 3.0)) == pytest.approx(m.layers * one_layer * 3, rel=1e-12)
    assert float(all_to_all_seconds(m, g, 4096.0, 1, 1, 3.0)) == 0.0
    one, ep8 = _moe(), _moe(train_ep=8)
    gemm = {k: r.summary["kernels"]["update_actor"]["gemm"]["s"] for k, r in (("1", one), ("8", ep8))}
    # the busiest EP rank's experts: the routed share of the decoder's FLOPs x the load imbalance
    # (the LM head, also in this family, is not routed: the ratio is a little under that)
    want = 1 + expert_flops_share(m) * (DEFAULT.moe_load_imbalance - 1)
    assert want > 1.1 and 1 + 0.8 * (want - 1) < gemm["8"] / gemm["1"] < want, (gemm, want)
    w1, w8 = one.memory["training_state"]["actor_weights_bf16"], ep8.memory["training_state"][
        "actor_weights_bf16"]
    assert w8 < w1 / 4, (w1, w8)  # 30B of the 30.5B are experts: split 8 ways instead of kept whole


def test_context_parallelism_splits_sequences_and_prices_the_ring():
    from polytrace.run.hardware import get_gpu
    from polytrace.run.models import get_model
    from polytrace.stepmodel.parallel import ring_kv_seconds

    one, cp2 = (estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, **{**MOE, "train_cp": c}) for c in (1, 2))
    a1 = one.summary["kernels"]["update_actor"]["attention"]["s"]
    a2 = cp2.summary["kernels"]["update_actor"]["attention"]["s"]
    # each GPU holds half of every sequence, and the data-parallel ranks halve: the same attention per GPU
    assert a2 == pytest.approx(a1, rel=0.15)
    assert cp2.memory["activations"] < one.memory["activations"]
    m, g = get_model("qwen2.5-7b"), get_gpu("h100")
    ring = ring_kv_seconds(m, g, 8192.0, 2, 1, backward=False)
    # one layer: 8192 tokens' K and V (2 x 4 KV heads x 128 x 2 bytes) from the one other chunk
    per_layer = 8192 * 2 * m.kv_heads * m.head_dim * 2 / (g.link_gbps(2) * 1e9 * 0.70)
    assert float(ring) == pytest.approx(m.layers * per_layer, rel=1e-9)


def test_virtual_pipeline_shrinks_the_bubble():
    from polytrace.stepmodel.parallel import pipeline_bubble

    assert float(pipeline_bubble(4, 4, 1)) == pytest.approx(7 / 4)
    assert float(pipeline_bubble(4, 4, 2)) == pytest.approx(5.5 / 4)
    kw = dict(strategy="megatron", train_pp=2, results_root="/nonexistent", steps=[0], prompts=16)
    plain = estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, **kw).summary["mean_stages_s"]["update_actor"]
    vpp = estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, train_vpp=2, **kw).summary["mean_stages_s"][
        "update_actor"]
    assert vpp < plain


def test_rollout_expert_parallelism_replaces_the_moe_all_reduce():
    kw = dict(results_root="/nonexistent", steps=[0], prompts=16, rollout_tp=4)
    tp = estimate("dapo-math-32b", "qwen3-30b-a3b", "h100", 8, **kw)
    ep = estimate("dapo-math-32b", "qwen3-30b-a3b", "h100", 8, rollout_ep=4, **kw)
    c_tp, c_ep = (r.summary["kernels"]["gen"]["comm"]["s"] for r in (tp, ep))
    assert c_tp != pytest.approx(c_ep, rel=1e-3)
    assert ep.config["rollout_ep"] == 4


def test_batch_in_responses_maps_to_prompts_and_optimizer_steps():
    prof = get_profile("dapo-math-32b")
    cfg = build_config(prof, "qwen2.5-7b", "h100", 8, n=32, responses_per_step=2048, train_batch=512)
    assert cfg.prompts_per_step == 64 and cfg.mini_batches == 4
    cfg = build_config(prof, "qwen2.5-7b", "h100", 8, n=32, responses_per_step=2048)
    assert cfg.prompts_per_step == 64 and cfg.mini_batches == 1  # 64 prompts: under verl's default 256


def test_cli_estimate_says_the_engines_launch_mode(capsys):
    """A setting that can change generation 2x is never assumed silently: the first line names the
    engine's launch mode, CUDA graphs by default, eager when the run says so."""
    rc, out, err = _run(capsys, BASE)
    assert rc == 0, err
    assert "rollout TP 1, CUDA graphs |" in out.splitlines()[0], out.splitlines()[0]
    rc, out, err = _run(capsys, [*BASE, "--set", "actor_rollout_ref.rollout.enforce_eager=True"])
    assert rc == 0, err
    assert "rollout TP 1, eager |" in out.splitlines()[0], out.splitlines()[0]
