"""Roofline efficiencies and fixed costs the composition layer assumes when no measured table
covers a kernel. One table, each figure with its reason. They are starting points: ``polytrace
validate`` calibrates a handful of scalars on real logs on top of them, and measured results in
``results/<gpu>/`` replace them where present (see ``measured.py``).
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
    # Host-to-device copies (parameter offload) over PCIe Gen4/5 x16: ~20 GB/s in practice.
    pcie_gbps: float = 20.0
    # Per decode iteration: ~12 kernel launches per layer at ~8 us each in eager mode; with CUDA
    # graphs one replay (~0.3 ms for the whole model, independent of depth).
    launch_s_per_kernel: float = 8e-6
    kernels_per_layer: int = 12
    graph_replay_s: float = 3e-4
    # Host work per running sequence per decode step (vLLM's scheduler, sampler, detokeniser):
    # ~15-25 us in vLLM 0.x.
    host_s_per_seq_iter: float = 20e-6
    # Memory vLLM keeps for activations and CUDA graphs outside the KV cache, bytes.
    engine_reserve_bytes: float = 2e9


DEFAULT = Efficiency()


def with_overrides(**kw) -> Efficiency:
    return replace(DEFAULT, **kw)
