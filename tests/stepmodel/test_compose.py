"""Composition layer: decode simulation, training passes, stage costs, estimate and the report pieces."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.errors import PolytraceError
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.run.spec import Rollout
from polytrace.stepmodel import (
    RunConfig,
    estimate,
    plot_stage_breakdown,
    report_section,
    simulate_rollout,
    stage_costs,
    synthetic_lengths,
)
from polytrace.stepmodel.training import TrainerLayout, pass_cost

M7 = get_model("qwen2.5-7b")
H100 = get_gpu("h100")


def test_synthetic_lengths_match_statistics():
    r = synthetic_lengths(5000, mean=300, max_len=1024, min_len=10, clip_ratio=0.05, cap=1024)
    assert r.mean() == pytest.approx(300, rel=0.01)
    assert r.max() == 1024 and r.min() >= 10
    assert np.mean(r == 1024) == pytest.approx(0.05, abs=0.002)
    r2 = synthetic_lengths(100, mean=50, max_len=400, min_len=5)
    assert r2.max() == 400 and r2.mean() == pytest.approx(50, rel=0.03)


def test_long_tail_sets_rollout_time():
    p = np.full(256, 200)
    even = np.full(256, 1000)
    tail = np.full(256, 900)
    tail[0] = 900 + 256 * 100  # same total tokens, one very long response
    assert tail.sum() == even.sum()
    t_even = simulate_rollout(M7, H100, p, even, n_gpus=1).time_s
    res = simulate_rollout(M7, H100, p, tail, n_gpus=1)
    assert res.iterations == tail.max()
    assert res.time_s > 5 * t_even  # a lone sequence decodes at batch 1 for ~25k iterations
    assert res.tail_gpu_s > 0.8 * res.decode_s


def test_kv_capacity_limits_concurrency():
    p = np.full(2048, 1000)
    r = np.full(2048, 4000)
    roomy = simulate_rollout(M7, H100, p, r, n_gpus=1, engine=Rollout(rollout_tp=1, mem_fraction=0.9))
    tight = simulate_rollout(M7, H100, p, r, n_gpus=1, engine=Rollout(rollout_tp=1, mem_fraction=0.3))
    assert tight.engines[0].concurrency < roomy.engines[0].concurrency
    assert tight.time_s > roomy.time_s


def test_engines_split_batch_and_report_imbalance():
    p = np.full(64, 100)
    r = np.concatenate([np.full(32, 100), np.full(32, 2000)])
    res = simulate_rollout(M7, H100, p, r, n_gpus=2, engine=Rollout(rollout_tp=1))
    assert len(res.engines) == 2
    assert res.imbalance_gpu_s == pytest.approx(abs(res.engines[0].time_s - res.engines[1].time_s), rel=1e-9)


def test_padding_and_checkpointing_change_training_cost():
    lens = np.full(64, 300)
    packed = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_seqs=8), backward=False)
    padded = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_seqs=8, remove_padding=False,
                                                     pad_to=1200), backward=False)
    assert padded.compute_s > 3.5 * packed.compute_s
    fb = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, gradient_checkpointing=False), backward=True)
    fb_ckpt = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, gradient_checkpointing=True), backward=True)
    # checkpointing recomputes one forward; attention's backward is 2.5x its forward (QK^T recomputed)
    fwd = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8), backward=False)
    assert fb_ckpt.flops - fb.flops == pytest.approx(fwd.flops, rel=1e-9)
    mm = 64 * 300 * M7.matmul_flops_per_token()
    assert fb.flops == pytest.approx(3 * mm + 3.5 * (fwd.flops - mm), rel=1e-9)
    # forward FLOPs: 2 x active params per token plus causal attention
    expected = 64 * 300 * M7.matmul_flops_per_token() + M7.attn_flops_per_pair * 64 * 300 * 301 / 2
    assert packed.flops == pytest.approx(expected, rel=1e-9)


def test_stage_costs_follow_algorithm():
    base = dict(model=M7, gpu=H100, n_gpus=8, prompts_per_step=32, n=4, max_prompt_len=512,
                max_response_len=2048, rollout_tp=2)
    p, r = np.full(128, 300), np.linspace(100, 2000, 128).astype(int)
    grpo = stage_costs(RunConfig(**base, algorithm="grpo", use_ref=False), p, r)
    assert grpo.seconds["ref"] == 0 and grpo.seconds["values"] == 0 and grpo.seconds["update_critic"] == 0
    ppo = stage_costs(RunConfig(**base, algorithm="ppo", use_ref=True), p, r)
    assert ppo.seconds["values"] > 0 and ppo.seconds["update_critic"] > 0 and ppo.seconds["ref"] > 0
    assert ppo.seconds["update_actor"] > 2.5 * ppo.seconds["old_log_prob"]
    old = stage_costs(RunConfig(**base, old_log_prob_in_gen=True), p, r)
    assert old.seconds["old_log_prob"] == 0
    assert old.seconds["gen"] == pytest.approx(grpo.seconds["gen"] + grpo.seconds["old_log_prob"], rel=1e-9)


@pytest.mark.parametrize("kw, match", [
    ({"rollout_tp": 3}, "does not divide"),
    ({"strategy": "deepspeed"}, "strategy"),
    ({"mem_fraction": 1.5}, r"mem_fraction must be in \[0.05, 0.99\], got 1.5"),
    ({"n_gpus": 0}, "n_gpus"),
])
def test_bad_run_config(kw, match):
    base = dict(model=M7, gpu=H100, n_gpus=8, prompts_per_step=32, n=4, max_prompt_len=512, max_response_len=2048)
    base.update(kw)
    with pytest.raises(PolytraceError, match=match):
        RunConfig(**base)


def test_estimate_profile_end_to_end():
    res = estimate("search-r1-7b", "qwen2.5-7b", "h100", 8, steps=range(2), prompts=32)
    assert res.source.startswith("estimated")
    assert len(res.rows) == 2
    for row in res.rows:
        assert row["other_s"] == pytest.approx(row["sequences"] * 3e-4)  # reward scoring per response
        assert row["step_s"] == pytest.approx(sum(row["stages_s"].values()) + row["other_s"], rel=1e-9)
        assert row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens"] / row["step_s"] / 8, rel=1e-9)
        assert 0 <= row["idle"]["rollout_tail_share"] < 1
    more = estimate("search-r1-7b", "qwen2.5-7b", "h100", 16, steps=[0], prompts=32)
    assert more.rows[0]["stages_s"]["update_actor"] < res.rows[0]["stages_s"]["update_actor"]


def test_estimate_bad_names():
    with pytest.raises(PolytraceError, match="valid GPUs"):
        estimate("search-r1-7b", "qwen2.5-7b", "tpu-v5", 8)
    with pytest.raises(PolytraceError, match="valid models"):
        estimate("search-r1-7b", "gpt-x", "h100", 8)


def test_report_section_and_plot(tmp_path):
    sec = report_section("search-r1-7b", "qwen2.5-7b", "h100", 8, steps=range(3), prompts=16)
    assert [r["step"] for r in sec["rows"]] == [0, 1, 2]
    assert {"gen", "update_actor", "step_s"} <= set(sec["rows"][0])
    out = plot_stage_breakdown(sec["rows"], tmp_path / "stages.png")
    assert open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
