"""What a colocated step pays whatever its GPU count: a tensor-parallel engine wider than a node
calls NCCL across the NICs at every layer of every decode iteration
(``parallel.allreduce_latency_seconds``), and every GPU gathers the full model into its engine
once a step (``refit.colocated_refit_seconds``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.run.spec import Rollout, Trainer
from polytrace.stepmodel.efficiency import DEFAULT, refit_expert_tensor_median, with_overrides
from polytrace.stepmodel.parallel import allreduce_latency_seconds
from polytrace.stepmodel.refit import colocated_refit_seconds
from polytrace.stepmodel.rollout import iteration_comm_seconds, iteration_fixed_seconds, simulate_rollout

PER_EXPERT_TENSOR_S = refit_expert_tensor_median()  # 0.525 ms, the median of the published refits

H100 = get_gpu("h100")
QWEN3_235B = get_model("qwen3-235b-a22b")
TP16 = Rollout(rollout_tp=16, mem_fraction=0.6)  # one engine over two 8-GPU nodes


def test_allreduce_latency_within_a_node_and_across_nodes():
    assert allreduce_latency_seconds(H100, 1) == 0.0
    for tp in (2, 4, 8):  # vLLM's custom all-reduce over NVLink
        assert allreduce_latency_seconds(H100, tp) == DEFAULT.allreduce_latency_s == pytest.approx(8e-6)
    # NCCL's tree over two 8-GPU nodes: 6.8 + 2 (7 x 0.6 + 1 x 5.0) us
    assert allreduce_latency_seconds(H100, 16) == pytest.approx(25.2e-6, rel=1e-9)
    # four nodes: two network hops each way
    assert allreduce_latency_seconds(H100, 32) == pytest.approx((6.8 + 2 * (7 * 0.6 + 2 * 5.0)) * 1e-6, rel=1e-9)
    # one NVLink domain of 72 (GB200 NVL72) made of 4-GPU hosts: vLLM's custom all-reduce (at most
    # 8 GPUs of one host) within a tray; past it NCCL, which treats the domain as one node
    gb200 = get_gpu("gb200")
    assert gb200.host_gpus == 4 and gb200.gpus_per_node == 72 and H100.host_gpus == 8
    for tp in (2, 4):
        assert allreduce_latency_seconds(gb200, tp) == pytest.approx(8e-6)
    for tp in (8, 16, 32, 64):
        assert allreduce_latency_seconds(gb200, tp) == pytest.approx((6.8 + 2 * (tp - 1) * 0.6) * 1e-6, rel=1e-9)
    assert allreduce_latency_seconds(gb200, 8) == pytest.approx(15.2e-6, rel=1e-9)
    # past the rack (two NVL72 domains): the network hop on top of the rack's NVLink chain
    assert allreduce_latency_seconds(gb200, 128) == pytest.approx((6.8 + 2 * (71 * 0.6 + 5.0)) * 1e-6, rel=1e-9)
    # a 16-GPU group on one 16-GPU host would be past the custom all-reduce's 8 all the same
    assert allreduce_latency_seconds(dataclasses.replace(H100, gpus_per_node=16), 16) == pytest.approx(
        (6.8 + 2 * 15 * 0.6) * 1e-6, rel=1e-9)


def test_a_cross_node_tp_engine_pays_the_network_hops_at_every_layer():
    """The network hops are what a TP16 engine on 8-GPU nodes adds: 2 per all-reduce, 2
    all-reduces per layer, at any running batch; a TP8 engine pays none."""
    active = np.array([1.0, 32.0, 64.0])
    no_net = with_overrides(nccl_net_hop_s=0.0)
    extra16 = iteration_comm_seconds(QWEN3_235B, H100, 16, active) - iteration_comm_seconds(
        QWEN3_235B, H100, 16, active, no_net)
    assert extra16 == pytest.approx(np.full(3, QWEN3_235B.layers * 2 * 2 * DEFAULT.nccl_net_hop_s), rel=1e-9)
    extra8 = iteration_comm_seconds(QWEN3_235B, H100, 8, active) - iteration_comm_seconds(
        QWEN3_235B, H100, 8, active, no_net)
    assert np.all(extra8 == 0.0)
    # the same GPU in a 16-GPU NVLink domain: NCCL within the node, its 15 NVLink hops and no
    # network hop (24.8 us against 25.2 us across two nodes)
    big_node = dataclasses.replace(H100, gpus_per_node=16)
    fixed_gap = iteration_fixed_seconds(QWEN3_235B, H100, 16) - iteration_fixed_seconds(QWEN3_235B, big_node, 16)
    assert fixed_gap == pytest.approx(QWEN3_235B.layers * 2 * (25.2e-6 - 24.8e-6), rel=1e-6)


def test_the_latency_does_not_shrink_with_the_engines_batch():
    """Halving an engine's responses halves its all-reduce bytes, not its latency: the
    per-iteration latency of a TP16 engine is the same whether it decodes 32 or 64 responses."""
    rng = np.random.default_rng(0)
    r = rng.integers(200, 2000, size=64)
    p = np.full(64, 150)
    for n in (64, 32):
        roll = simulate_rollout(QWEN3_235B, H100, p[:n], r[:n], n_gpus=16, engine=TP16)
        no_net = simulate_rollout(QWEN3_235B, H100, p[:n], r[:n], n_gpus=16, engine=TP16,
                                  eff=with_overrides(nccl_net_hop_s=0.0))
        gap = roll.kernels["comm"] - no_net.kernels["comm"]
        assert gap == pytest.approx(roll.iterations * QWEN3_235B.layers * 2 * 2 * DEFAULT.nccl_net_hop_s, rel=1e-6)


def _expert_bytes(m) -> float:
    return 2.0 * m.layers * m.experts * 3 * m.hidden * m.moe_intermediate


def test_megatron_refit_from_bytes_and_link_rates():
    """Qwen3-235B-A22B, Megatron TP2 PP8 EP16 on 128 H100s into TP16 engines: each GPU receives
    the other stages' shards at its coordinates over its NIC, all-gathers the dense weights over
    TP and the experts over EP (rings, two nodes: 8 NICs), and copies the whole model into the
    hand-off buffer and its 1/16 into the engine."""
    m, eff = QWEN3_235B, DEFAULT
    total = float(m.weight_bytes())
    experts = _expert_bytes(m)
    dense = total - experts
    assert 0.9 < experts / total < 1.0  # routed experts: most of the 470 GB
    got = colocated_refit_seconds(m, H100, 128, 16, Trainer(strategy="megatron", train_tp=2, train_pp=8, train_ep=16))
    nic, ring8, nvlink = 50e9 * eff.comm, 8 * 50e9 * eff.comm, 450e9 * eff.comm
    assert got["pipeline"] == pytest.approx((dense / 2 + experts / 16) * 7 / 8 / nic, rel=1e-9)
    assert got["gather"] == pytest.approx(dense / 2 / nvlink + experts * 15 / 16 / ring8, rel=1e-9)
    assert got["stage"] == pytest.approx(2 * (total + total / 16) / (3.35e12 * eff.elementwise_hbm), rel=1e-9)
    # the 36,096 routed-expert tensors (94 MoE layers x 128 experts x gate/up/down), one at a time
    assert got["tensors"] == pytest.approx(94 * 128 * 3 * eff.refit_s_per_expert_tensor, rel=1e-12)
    assert got["total"] == pytest.approx(got["pipeline"] + got["gather"] + got["stage"] + got["tensors"], rel=1e-12)
    assert got["bytes"] == total and 2.0 < got["total"] - got["tensors"] < 4.0
    # what a GPU receives is the model less its share: the same on twice the GPUs (more data
    # parallelism, the same TP / PP / EP)
    assert colocated_refit_seconds(m, H100, 256, 16, Trainer(strategy="megatron", train_tp=2, train_pp=8,
                                                             train_ep=16)) == got
    # one node: the pipeline broadcast runs over NVLink, not the NIC
    small = get_model("qwen3-30b-a3b")
    one_node = colocated_refit_seconds(small, H100, 8, 2, Trainer(strategy="megatron", train_pp=2, train_ep=4))
    ex = _expert_bytes(small)
    assert one_node["pipeline"] == pytest.approx(((small.weight_bytes() - ex) + ex / 4) / 2 / nvlink, rel=1e-9)


def test_fsdp_refit_gathers_everything_over_the_gpus():
    m = get_model("qwen2.5-7b")
    b = float(m.weight_bytes())
    got = colocated_refit_seconds(m, H100, 8, 2)
    assert got["pipeline"] == 0.0
    assert got["gather"] == pytest.approx(b * 7 / 8 / (450e9 * DEFAULT.comm), rel=1e-9)
    assert colocated_refit_seconds(m, H100, 1, 1)["gather"] == 0.0
    # under LoRA only the bf16 adapters move
    from polytrace.stepmodel.training import lora_params
    adapters = 2.0 * lora_params(m, 64)
    lora = colocated_refit_seconds(m, H100, 8, 2, Trainer(lora_rank=64))
    assert lora["bytes"] == adapters and lora["gather"] == pytest.approx(adapters * 7 / 8 / (450e9 * DEFAULT.comm))
    assert lora["total"] < got["total"] / 20
    # two nodes: the ring runs over the 8 NICs of a node
    assert colocated_refit_seconds(m, H100, 16, 2)["gather"] == pytest.approx(
        b * 15 / 16 / (400e9 * DEFAULT.comm), rel=1e-9)


def test_the_per_expert_tensor_price_is_the_median_of_its_published_refits():
    from polytrace.stepmodel.efficiency import DEFAULT, REFIT_EXPERT_TENSOR_MEASUREMENTS

    per_tensor = [s / n for _, s, n in REFIT_EXPERT_TENSOR_MEASUREMENTS]
    price = DEFAULT.refit_s_per_expert_tensor
    assert len(per_tensor) == 5 and price == PER_EXPERT_TENSOR_S
    # the middle of the five, not a mean or a rounded figure: as many sources below as above
    assert sum(x < price for x in per_tensor) == sum(x > price for x in per_tensor) == 2
    assert price in per_tensor and 3e-4 < min(per_tensor) and max(per_tensor) < 9e-4
    assert all(src and s > 0 and n > 1000 for src, s, n in REFIT_EXPERT_TENSOR_MEASUREMENTS)


def test_the_colocated_step_carries_the_refit_and_a_separate_rollout_does_not():
    from polytrace.stepmodel.estimate import build_config
    from polytrace.stepmodel.stages import stage_costs
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile("mean=1000,max=4000,prompt=150", model="qwen3-30b-a3b")
    cfg = build_config(prof, "qwen3-30b-a3b", "h100", 16, rollout_tp=2, strategy="megatron", train_pp=2,
                       train_ep=8, n=8, responses_per_step=64, train_batch=64)
    p, r = np.full(64, 150), np.full(64, 900)
    got = colocated_refit_seconds(cfg.model, cfg.gpu, 16, 2,
                                  Trainer(strategy="megatron", train_tp=1, train_pp=2, train_ep=8))
    refit, host = got["total"], got["tensors"]
    costs = stage_costs(cfg, p, r)
    priced = [x for x in costs.parts if x.source == "roofline (refit)"]
    assert len(priced) == 1 and priced[0].stage == "gen" and priced[0].family == "comm"
    assert priced[0].seconds == pytest.approx(refit - host, rel=1e-12) and refit - host > 0.1
    # the expert tensors' host work: its own part, labelled with the count and the price
    handed = [x for x in costs.parts if x.source.startswith("host (refit: 18432 expert tensors")]
    assert len(handed) == 1 and handed[0].stage == "gen" and handed[0].seconds == pytest.approx(host, rel=1e-12)
    assert host == pytest.approx(18_432 * PER_EXPERT_TENSOR_S)
    assert costs.details["refit"]["total"] == pytest.approx(refit, rel=1e-12)
    assert not any("refit" in x.source for x in stage_costs(cfg, p, r, rollout=False).parts)
    cfg.colocated = False
    assert not any("refit" in x.source for x in stage_costs(cfg, p, r).parts)


def test_the_refits_tensor_price_is_no_measurement():
    """The expert tensors' host price comes from published refits, not from a result file: the
    estimate's source line and its warnings claim no measured timings for it, and its family reads
    "roofline" (it read "partly measured", and the header named a results/<gpu> folder that does
    not exist)."""
    from polytrace.stepmodel.breakdown import source_status
    from polytrace.stepmodel.estimate import estimate
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile("mean=1000,max=4000,prompt=150", model="qwen3-30b-a3b")
    res = estimate(prof, "qwen3-30b-a3b", "h100", 16, steps=range(1), results_root="/nonexistent", rollout_tp=2,
                   strategy="megatron", train_pp=2, train_ep=8, n=8, responses_per_step=64, train_batch=64)
    comm = res.summary["kernels"]["gen"]["comm"]
    assert "host (refit: 18432 expert tensors" in comm["source"]
    assert comm["prices"] == ["roofline"]  # the host price is a model price, said by its part
    assert source_status(comm["source"], comm["prices"]) == "roofline"
    assert res.summary["families"]["comm"]["status"] == "roofline"
    assert "measured" not in res.source and not any("measured" in w for w in res.warnings)
    assert source_status("results/h100/gemm.json (torch) + host (refit: 1 expert tensors x 0.5 ms)",
                         ["measured", "roofline"]) == "partly measured"


def test_the_pipeline_bubble_stretches_a_stages_exposed_collectives_too():
    """1F1B over PP stages: the first stage waits (pp - 1) micro-batch times to fill and drain,
    and a micro-batch's time on a stage is its matmuls and its exposed all-to-alls and TP
    all-reduces together. With fewer micro-batches per rank (more data parallelism) the bubble
    grows: 8 stages over 16 micro-batches stretch the forward's collectives by 23/16, over 64 by
    71/64 (a forward pass: no gradient reduction, which runs once after the flush)."""
    from polytrace.stepmodel.parallel import pipeline_bubble
    from polytrace.stepmodel.training import TrainerLayout, pass_cost

    seq = np.full(64, 8192)
    for gpus, n_micro in ((32 * 4, 16), (32, 64)):  # TP2 x CP2 x PP8 = 32 GPUs a replica
        kw = dict(strategy="megatron", tp=2, micro_batch_tokens=8192, ep=16, cp=2)
        staged = pass_cost(QWEN3_235B, H100, seq, TrainerLayout(gpus, pp=8, **kw), backward=False)
        assert staged.micro_batches == n_micro
        flat = pass_cost(QWEN3_235B, H100, seq, TrainerLayout(gpus, pp=8, vpp=47, **kw), backward=False)
        want = float(pipeline_bubble(n_micro, 8, 1) / pipeline_bubble(n_micro, 8, 47))
        assert staged.comm_s / flat.comm_s == pytest.approx(want, rel=1e-9) and staged.comm_s > 0


def _switch_cfg(gpu="h100", **fields):
    from polytrace.stepmodel.estimate import build_config
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile("mean=1000,max=4000,prompt=150", model="qwen3-235b-a22b")
    return build_config(prof, "qwen3-235b-a22b", gpu, 128, rollout_tp=16, strategy="megatron", train_tp=2,
                        train_pp=8, train_ep=16, train_cp=2, n=8, responses_per_step=64, train_batch=64,
                        run_fields=fields)


def test_the_colocated_switch_moves_engine_weights_and_trainer_state_over_pcie():
    """vLLM's level-1 sleep backs the engine's 1/16 of the 470 GB up to CPU memory and restores it
    (29.4 GB each way a GPU); NeMo RL's Megatron worker moves its bf16 parameter shard and its
    distributed-optimizer shard (12 bytes a parameter over all 128 GPUs: 22 GB) out during
    generation and back before the passes that use them, at 20 GB/s over PCIe."""
    from polytrace.stepmodel.parallel import shard_params
    from polytrace.stepmodel.stages import offload_parts

    m = QWEN3_235B
    pcie = DEFAULT.pcie_gbps * 1e9
    assert offload_parts(_switch_cfg()) == []
    engine = offload_parts(_switch_cfg(engine_weights_offload=True))
    assert [(p.stage, p.family) for p in engine] == [("gen", "offload")]
    assert engine[0].seconds == pytest.approx(2 * m.weight_bytes() / 16 / pcie, rel=1e-12)
    assert 2.5 < engine[0].seconds < 3.5
    switch = {p.stage: p.seconds for p in offload_parts(_switch_cfg(switch_offload=True))}
    weights = 2.0 * shard_params(m, 2, 8, 16) / pcie
    optimizer = 12.0 * m.params_total / 128 / pcie
    assert switch["old_log_prob"] == pytest.approx(weights, rel=1e-12)
    assert switch["update_actor"] == pytest.approx(optimizer, rel=1e-12)
    assert switch["gen"] == pytest.approx(weights + optimizer, rel=1e-12)
    assert 20e9 < 12.0 * m.params_total / 128 < 24e9
    # separate engines never switch: nothing priced
    cfg = _switch_cfg(engine_weights_offload=True, switch_offload=True)
    cfg.colocated = False
    assert offload_parts(cfg) == []


def test_a_grace_host_link_copies_faster_than_pcie():
    from polytrace.stepmodel.efficiency import PCIE_PEAK_GBPS, host_copy_gbps
    from polytrace.stepmodel.stages import offload_parts

    assert host_copy_gbps(H100) == DEFAULT.pcie_gbps and host_copy_gbps(None) == DEFAULT.pcie_gbps
    gb200 = get_gpu("gb200")
    assert gb200.host_link_gbps == 225.0
    assert host_copy_gbps(gb200) == pytest.approx(DEFAULT.pcie_gbps / PCIE_PEAK_GBPS * 225.0, rel=1e-12)
    h100 = offload_parts(_switch_cfg(engine_weights_offload=True))[0].seconds
    grace = offload_parts(_switch_cfg("gb200", engine_weights_offload=True))[0].seconds
    assert h100 / grace == pytest.approx(225.0 / PCIE_PEAK_GBPS, rel=1e-12)


def test_an_expert_group_across_nodes_sends_only_the_other_nodes_copies_over_the_nic():
    """EP16 over two 8-GPU nodes: of a GPU's top-8 copies, 8/16 go to the other node through its
    NIC (50 GB/s) while 7/16 cross NVLink at the same time; the NIC sets the time. EP32 over four
    nodes: 24/32 through the NIC."""
    from polytrace.stepmodel.parallel import all_to_all_seconds

    m, eff = QWEN3_235B, DEFAULT
    tokens = 4096.0
    copies = tokens * m.active_experts * m.hidden * 2
    for ep, off in ((16, 8 / 16), (32, 24 / 32)):
        want = m.layers * 2 * (copies * off / (50e9 * eff.all_to_all) + eff.all_to_all_latency_s)
        assert float(all_to_all_seconds(m, H100, tokens, ep, ep, 1.0)) == pytest.approx(want, rel=1e-12)
    # within a node every copy but the GPU's own crosses NVLink
    within = m.layers * 2 * (copies * 7 / 8 / (450e9 * eff.all_to_all) + eff.all_to_all_latency_s)
    assert float(all_to_all_seconds(m, H100, tokens, 8, 8, 1.0)) == pytest.approx(within, rel=1e-12)
    # a GB200 NVLink domain of 72 holds EP16 whole
    gb = get_gpu("gb200")
    assert float(all_to_all_seconds(m, gb, tokens, 16, 16, 1.0)) == pytest.approx(
        m.layers * 2 * (copies * 15 / 16 / (900e9 * eff.all_to_all) + eff.all_to_all_latency_s), rel=1e-12)
