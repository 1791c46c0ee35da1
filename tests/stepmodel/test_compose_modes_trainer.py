"""What the execution modes rest on: the trainer's own tail (optimizer steps waiting for the
slowest rank), collectives across nodes, LoRA and offload priced, the rollout tail's scaling with
GPU count, and the idle figures named by cause."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel import estimate, simulate_rollout
from polytrace.stepmodel.rollout import ONE_GPU_ENGINE, iteration_costs
from polytrace.stepmodel.training import TrainerLayout, lora_params, pass_cost

M7 = get_model("qwen2.5-7b")
H100 = get_gpu("h100")
GB = 1e9


def _tail_lengths(n=512, seed=0):
    rng = np.random.default_rng(seed)
    r = rng.integers(100, 800, n)
    r[::64] = 8000  # a few long responses, as RL batches have
    return r


def test_optimizer_steps_wait_for_the_slowest_rank():
    lens = _tail_lengths(2048) + 200
    one = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_tokens=16384), backward=True)
    many = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_tokens=16384, mini_batches=16),
                     backward=True)
    assert many.flops == pytest.approx(one.flops, rel=1e-12)  # the same work...
    # ...but at every step the ranks wait for the one holding a long response
    assert many.imbalance_gpu_s > 3 * one.imbalance_gpu_s
    assert many.compute_s > one.compute_s and many.time_s > one.time_s
    assert many.micro_batches >= 16  # every optimizer step runs at least one micro-batch
    # forward-only passes have no optimizer steps
    fwd = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_tokens=16384, mini_batches=16),
                    backward=False)
    assert fwd.time_s == pytest.approx(
        pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, micro_batch_tokens=16384), backward=False).time_s)
    # across nodes every optimizer step's micro-batch also gathers the weights over the NICs, the
    # ring's channels spread over a node's 8 NICs (8 x 50 GB/s, under NVLink's 450 GB/s)
    wide = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=32, micro_batch_tokens=16384, mini_batches=16),
                     backward=True)
    assert H100.collective_gbps(32) == pytest.approx(8 * H100.scaleout_gbps)
    assert H100.collective_gbps(8) == H100.interconnect_gbps and H100.link_gbps(32) == H100.scaleout_gbps
    gather = M7.weight_bytes() * 31 / 32 / (H100.collective_gbps(32) * 1e9)  # one all-gather at full rate
    # the forward's and backward's gathers hide behind their matmuls, all but each micro-batch's
    # first layer's (nothing is issued before it)
    assert 16 * gather / M7.layers < wide.comm_s < 16 * 4 * gather


def test_balanced_ranks_as_verl_balance_batch():
    from polytrace.stepmodel.training import rank_indices

    # 16 prompts x 8 responses, each prompt's responses alike (long prompts and short ones)
    lens = np.repeat(np.linspace(100, 4000, 16), 8) + np.tile(np.arange(8), 16)
    balanced = rank_indices(lens, 8, balance=True)
    contiguous = rank_indices(lens, 8, balance=False)
    for split in (balanced, contiguous):
        assert sorted(np.concatenate(split).tolist()) == list(range(len(lens)))
        assert {len(x) for x in split} == {16}
    assert all(np.all(np.diff(x) > 0) for x in balanced)  # each rank keeps batch order
    sums = [lens[x].sum() for x in balanced]
    assert max(sums) / min(sums) < 1.05  # a prompt's long responses spread over the ranks
    assert max(lens[x].sum() for x in contiguous) / min(lens[x].sum() for x in contiguous) > 5


def test_fsdp_forward_gathers_hide_behind_compute_and_cross_nodes_at_the_ring_rate():
    per_gather = {n: M7.weight_bytes() * (n - 1) / n / (H100.collective_gbps(n) * 1e9 * 0.7) for n in (8, 16)}
    # long micro-batches (8,000 tokens: ~0.16 s of matmuls against a ~0.05 s gather): every
    # layer's gather but the first hides behind the previous layer's forward
    long = np.full(64, 8000)
    eight = pass_cost(M7, H100, long, TrainerLayout(n_gpus=8, micro_batch_seqs=1), backward=False)
    sixteen = pass_cost(M7, H100, long, TrainerLayout(n_gpus=16, micro_batch_seqs=1), backward=False)
    assert eight.comm_s == pytest.approx(8 * per_gather[8] / M7.layers, rel=1e-9)
    assert sixteen.comm_s == pytest.approx(4 * per_gather[16] / M7.layers, rel=1e-9)
    # across nodes the ring runs over the node's eight NICs (400 GB/s), not one (50 GB/s)
    # (15/16 of the bytes at 400 GB/s against 7/8 at 450 GB/s: 1.21x; at one NIC it would be 9.6x)
    assert per_gather[8] < per_gather[16] < 1.25 * per_gather[8]
    # short micro-batches: the compute cannot hide the gathers; what it does not cover shows
    short = np.full(64, 200)
    exposed = pass_cost(M7, H100, short, TrainerLayout(n_gpus=8, micro_batch_seqs=1), backward=False)
    compute = exposed.kernels["gemm"]
    assert 8 * per_gather[8] / M7.layers < exposed.comm_s < 8 * per_gather[8]
    assert exposed.comm_s > 8 * per_gather[8] - compute - 1e-9


def test_lora_trains_adapters_only():
    assert lora_params(M7, 64) == 161_480_704  # PEFT: Qwen2-7B, r=64, all-linear
    assert lora_params(M7, 0) == 0
    lens = np.full(128, 1500)
    # without recompute (the layout's default follows the run's: recompute on), as the ratio below counts
    full = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, gradient_checkpointing=False), backward=True)
    lora = pass_cost(M7, H100, lens, TrainerLayout(n_gpus=8, lora_rank=64, gradient_checkpointing=False),
                     backward=True)
    # no weight gradients for the frozen base: 3 matmul passes become 2 (+ the small adapters)
    assert 0.6 < lora.kernels["gemm"] / full.kernels["gemm"] < 0.75
    base = estimate("search-r1-7b", "qwen2.5-7b", "h100", 8, prompts=32)
    adapt = estimate("search-r1-7b", "qwen2.5-7b", "h100", 8, prompts=32, lora_rank=64)
    assert adapt.summary["mean_stages_s"]["update_actor"] < base.summary["mean_stages_s"]["update_actor"]
    opt = adapt.summary["kernels"]["update_actor"]["optimizer"]["s"]
    assert opt < 0.05 * base.summary["kernels"]["update_actor"]["optimizer"]["s"]
    mem, mem0 = adapt.memory, base.memory
    assert "ref_weights_bf16" not in mem["training_state"]  # the reference is the base model
    assert mem["training_state"]["actor_adam_moments"] == pytest.approx(8 * 161_480_704 / 8 / GB, rel=1e-9)
    assert mem["training_state_total"] < 0.5 * mem0["training_state_total"]


def test_offload_is_priced_per_stage_and_frees_the_rollout():
    plain = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8)
    params = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8, param_offload=True)
    both = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8, param_offload=True, optimizer_offload=True)
    p = get_model("qwen2.5-32b").params_total
    pcie = 20e9
    move = 2 * 4.0 * p / 8 / pcie  # the fp32 shards to the GPU and back
    k = params.summary["kernels"]
    for stage in ("gen", "old_log_prob", "update_actor"):
        assert k[stage]["offload"]["s"] == pytest.approx(move, rel=1e-9), stage
    assert "offload" not in k["ref"] or k["ref"]["offload"]["s"] != pytest.approx(move)
    moments = 2 * 8.0 * p / 8 / pcie
    assert both.summary["kernels"]["update_actor"]["offload"]["s"] == pytest.approx(move + moments, rel=1e-9)
    assert both.summary["mean_step_s"] > params.summary["mean_step_s"] > plain.summary["mean_step_s"]
    # the rollout no longer holds the parked state: the rollout warning clears
    assert any("rollout needs" in w for w in plain.warnings)
    assert not any("rollout needs" in w for w in both.warnings)
    assert both.memory["rollout_resident"] < 0.2 * plain.memory["rollout_resident"]


def test_rollout_tail_stops_the_step_from_falling():
    """More engines shorten the bulk of the rollout, never the longest response: it decodes at
    its engine's per-token latency whatever the batch, so generation time stops falling."""
    p = np.full(2048, 300)
    r = _tail_lengths(2048)
    times = [simulate_rollout(M7, H100, p, r, n_gpus=n).time_s for n in (8, 16, 32, 64, 128)]
    assert all(a >= b for a, b in zip(times, times[1:]))  # never slower with more GPUs
    floor = r.max() * float(iteration_costs(M7, H100, ONE_GPU_ENGINE, np.array([1.0]), np.array([300.0]))[0])
    assert min(times) >= floor  # the longest response at batch-1 latency
    assert times[-1] < 1.25 * floor  # at 128 engines the tail is nearly all of it
    assert times[0] / times[1] > times[-2] / times[-1]  # doubling GPUs buys less and less


def test_idle_figures_are_named_by_cause():
    res = estimate("dapo-math-32b", "qwen2.5-7b", "h100", 16, steps=[0])
    s = res.summary
    assert s["rank_imbalance_share"] == pytest.approx(s["rollout_engine_wait_share"] + s["trainer_rank_wait_share"])
    # in an RL step the rank-imbalance figure is mostly rollout engines waiting for the slowest one
    assert s["rollout_engine_wait_share"] > s["trainer_rank_wait_share"]
    row = res.rows[0]["idle"]
    gpu_s = res.rows[0]["step_s"] * 16
    assert row["rollout_engine_wait_share"] == pytest.approx(row["rollout_imbalance_gpu_s"] / gpu_s)


def test_report_names_the_idle_figures(tmp_path):
    from polytrace.report import ReportRun, build_report

    out = build_report(ReportRun("search-r1-7b", gpus=8), steps=[0], output_dir=tmp_path / "r")
    text = out["text"]
    assert "rollout engines waiting for the slowest engine" in text
    assert "trainer ranks waiting for the slowest rank" in text
    assert "Two tail figures" in open(out["path"]).read()
    assert "idle from rank imbalance" not in text
