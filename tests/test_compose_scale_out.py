"""What a colocated step pays for spanning nodes, whatever its GPU count: a tensor-parallel engine
wider than a node calls NCCL across the NICs at every layer of every decode iteration
(``parallel.allreduce_latency_seconds``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polytrace.compose.efficiency import DEFAULT, with_overrides
from polytrace.compose.parallel import allreduce_latency_seconds
from polytrace.compose.rollout import iteration_comm_seconds, iteration_fixed_seconds, simulate_rollout
from polytrace.hardware import get_gpu
from polytrace.models import get_model

H100 = get_gpu("h100")
QWEN3_235B = get_model("qwen3-235b-a22b")


def test_allreduce_latency_within_a_node_and_across_nodes():
    assert allreduce_latency_seconds(H100, 1) == 0.0
    for tp in (2, 4, 8):  # vLLM's custom all-reduce over NVLink
        assert allreduce_latency_seconds(H100, tp) == DEFAULT.allreduce_latency_s == pytest.approx(8e-6)
    # NCCL's tree over two 8-GPU nodes: 6.8 + 2 (7 x 0.6 + 1 x 5.0) us
    assert allreduce_latency_seconds(H100, 16) == pytest.approx(25.2e-6, rel=1e-9)
    # four nodes: two network hops each way
    assert allreduce_latency_seconds(H100, 32) == pytest.approx((6.8 + 2 * (7 * 0.6 + 2 * 5.0)) * 1e-6, rel=1e-9)
    # one NVLink domain of 72 (GB200 NVL72): TP16 stays in the node
    assert allreduce_latency_seconds(get_gpu("gb200"), 16) == pytest.approx(8e-6)


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
    # the same GPU in a 16-GPU NVLink domain: the engine's latency is the node's 8 us
    big_node = dataclasses.replace(H100, gpus_per_node=16)
    fixed_gap = iteration_fixed_seconds(QWEN3_235B, H100, 16) - iteration_fixed_seconds(QWEN3_235B, big_node, 16)
    assert fixed_gap == pytest.approx(QWEN3_235B.layers * 2 * (25.2e-6 - 8e-6), rel=1e-9)


def test_the_latency_does_not_shrink_with_the_engines_batch():
    """Halving an engine's responses halves its all-reduce bytes, not its latency: the
    per-iteration latency of a TP16 engine is the same whether it decodes 32 or 64 responses."""
    rng = np.random.default_rng(0)
    r = rng.integers(200, 2000, size=64)
    p = np.full(64, 150)
    for n in (64, 32):
        roll = simulate_rollout(QWEN3_235B, H100, p[:n], r[:n], n_gpus=16, tp=16, mem_fraction=0.6)
        no_net = simulate_rollout(QWEN3_235B, H100, p[:n], r[:n], n_gpus=16, tp=16, mem_fraction=0.6,
                                  eff=with_overrides(nccl_net_hop_s=0.0))
        gap = roll.kernels["comm"] - no_net.kernels["comm"]
        assert gap == pytest.approx(roll.iterations * QWEN3_235B.layers * 2 * 2 * DEFAULT.nccl_net_hop_s, rel=1e-6)
