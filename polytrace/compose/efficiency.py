"""Roofline efficiencies and fixed costs the composition layer assumes when no measured table
covers a kernel. One table, each figure with its reason. They are starting points: ``polytrace
validate`` calibrates a handful of scalars on real logs on top of them, and measured results in
``results/<gpu>/`` replace them per kernel family where present (see ``pricing.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Efficiency:
    # Large bf16 GEMMs in training reach 55-65% of the dense datasheet peak (Megatron-LM and
    # FSDP MFU reports on A100/H100 sit at 40-55% end to end; the GEMMs alone are higher).
    gemm: float = 0.60
    # Attention (FlashAttention-2 forward on A100 ~ 70% of peak at long sequences, less at short).
    attention: float = 0.45
    # Decode streams weights and KV cache: vLLM reaches ~70-80% of HBM bandwidth at batch >= 32.
    decode_hbm: float = 0.75
    # Prefill is GEMM-bound like the forward pass.
    prefill: float = 0.55
    # Collectives reach ~70% of the per-GPU scale-up bandwidth (NCCL bus bandwidth on NVLink).
    comm: float = 0.70
    # Element-wise passes (log-softmax, entropy over the vocabulary) stream at ~80% of HBM peak.
    elementwise_hbm: float = 0.80
    # Bytes moved per logit per forward: the bf16 logits written and read, an fp32 copy for the
    # temperature and log-softmax, and the entropy's softmax: ~4 passes of 4 bytes.
    logit_bytes_per_element: float = 16.0
    # Planning a pass's micro-batches over the ranks (a host algorithm): our planner split 8192
    # sequences into 8 balanced ranks in 12.4-13.8 ms on one CPU core (docs/kernels.md, packing section):
    # ~1.6 us per sequence.
    plan_s_per_sequence: float = 1.6e-6
    # Host-to-device copies (parameter offload) over PCIe Gen4/5 x16: ~20 GB/s in practice.
    pcie_gbps: float = 20.0
    # Per decode iteration: ~12 kernel launches per layer at ~8 us each in eager mode; with CUDA
    # graphs one replay (~0.3 ms for the whole model, independent of depth).
    launch_s_per_kernel: float = 8e-6
    kernels_per_layer: int = 12
    graph_replay_s: float = 3e-4
    # Training passes in eager PyTorch: ~25 kernels per decoder layer forward (two norms, four
    # projections, rotary, flash-attention, MLP matmuls and activation, residual adds; FSDP's
    # per-layer hooks cost about as much again on the host), the backward about twice as many;
    # ~30 more per micro-batch for the head, log-softmax, entropy and loss.
    train_kernels_per_layer: int = 25
    train_kernels_per_micro_batch: int = 30
    # Backward kernels are launched by autograd's C++ engine: ~1/3 of the host time of a kernel
    # launched from Python (~3 us against ~8-10 us).
    backward_launch_share: float = 0.35
    # Host work per running sequence per decode step (vLLM's scheduler, sampler, detokeniser):
    # ~15-25 us in vLLM 0.x.
    host_s_per_seq_iter: float = 15e-6
    # Host work per decode iteration whatever the batch: vLLM 0.x's scheduler, input preparation,
    # sampler set-up and output processing take a few ms per step (vLLM's v0.6 performance notes
    # found them at up to half of a small model's step time).
    host_s_per_iter: float = 2.5e-3
    # The step outside the timed model stages: rule-based reward scoring (answer extraction and
    # comparison in Python) and advantages, per response: 0.2-0.4 ms in verl runs of 256-5120
    # responses per step.
    reward_s_per_response: float = 3e-4
    # Memory vLLM keeps for activations and CUDA graphs outside the KV cache, bytes.
    engine_reserve_bytes: float = 2e9


DEFAULT = Efficiency()


def with_overrides(**kw) -> Efficiency:
    return replace(DEFAULT, **kw)
