"""Roofline efficiencies and fixed costs the composition layer assumes when no measured table
covers a kernel, and the shared physical priors fitted over them.

``Efficiency`` is the base price of each kernel family: one table, each figure with its reason
(datasheet-grounded). Measured results in ``results/<gpu>/`` replace it per kernel family where
present (see ``pricing.py``). Real runs are slower than these base prices by a factor per kind of
work that the priors (``polytrace/data/priors.json``, fitted on every public log the project reads
by ``scripts/fit_priors.py``) hold: ``prior_scalars`` gives them as calibration scalars, each a
slowdown at or above its physical bound (no kind of work faster than its peak roofline:
``roofline_share``). ``polytrace validate --zero-shot`` scores them; a calibration shrinks toward
them.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import PolytraceError
from .devices import scale_priors

# Published refits that time a MoE's expert tensors handed over one at a time, bytes and all:
# (source, seconds, expert tensors). verl's two are its syncs (15.76 and 58.57 s) less their bytes
# at our link rates.
REFIT_EXPERT_TENSOR_MEASUREMENTS = (
    ("NVIDIA-NeMo/RL pull request #3294: Qwen3-30B-A3B, B200, colocated, MXFP8 rollout", 9.67, 18_432),
    ("NVIDIA-NeMo/RL pull request #3294: Qwen3-235B-A22B, B200, colocated, MXFP8 rollout", 18.40, 36_096),
    ("verl recipe/fully_async_policy/README.md: Qwen3-30B-A3B, H20, checkpoint engine off", 12.4, 18_432),
    ("verl recipe/fully_async_policy/README.md: Qwen3-235B-A22B, H20, checkpoint engine off", 31.9, 36_096),
    ("NVIDIA-NeMo/RL DeepSeek-V3 NCCL refit benchmark: BF16, destination-local experts", 14.21, 44_544),
)

def refit_expert_tensor_median() -> float:
    """Seconds of host work per routed-expert tensor in a refit: the median of
    ``REFIT_EXPERT_TENSOR_MEASUREMENTS`` (0.32-0.88 ms; 0.525 ms)."""
    return statistics.median(s / n for _, s, n in REFIT_EXPERT_TENSOR_MEASUREMENTS)


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
    # An optimizer stepping in CPU memory (Megatron's HybridDeviceOptimizer: ``RunConfig.
    # cpu_optimizer``) runs torch's AdamW on fp32 CPU tensors, one element-wise op at a time
    # (``_single_tensor_adamw``: weight decay, the two moments' updates, sqrt, divide, add eps, the
    # step): 12 reads and 8 writes of 4 bytes, 80 bytes a parameter through DRAM. Measured on this
    # project's 2-core CPU machine (AMD EPYC, torch 2.13, 2026-12-02; a CPU timing): a 32M-parameter
    # step took 171 ms, 19.5x a copy of the same tensor (0.2 Gparam/s on 2 threads, core-bound). A
    # server rank has ~14 cores (2 x 56 for 8 GPUs), 7x those 2, so there it is DRAM-bound:
    # ``GPU.host_memory_gbps`` at ``host_dram`` of the peak (0.67 Gparam/s a GPU on an HGX host).
    cpu_adam_bytes_per_param: float = 80.0
    # STREAM-style kernels reach ~70% of a DDR5 server's peak DRAM bandwidth (assumed).
    host_dram: float = 0.70
    # Per decode iteration: ~12 kernel launches per layer at ~8 us each in eager mode; with CUDA
    # graphs one replay (~0.3 ms for the whole model, independent of depth).
    launch_s_per_kernel: float = 8e-6
    kernels_per_layer: int = 12
    graph_replay_s: float = 3e-4
    # Per decoder layer, the launches an engine setting adds to an eager iteration (LoRA's Triton
    # shrink and expand kernels: ``stepmodel/engines.py``, which sets it; 0 without an adapter).
    adapter_launch_s_per_layer: float = 0.0
    # Share of the engine's per-step host work (scheduling, input preparation, per-sequence output
    # processing) run while the GPU works on the step before: 0 in step (vLLM's V0 loop, and V1
    # without --async-scheduling), 1 with V1's asynchronous scheduling (``stepmodel/engines.py``,
    # which sets it; priced in ``rollout.iteration_parts``), and the slowdowns the priors give the
    # parts that meet in that overlap, (device, collectives, host, per-sequence host): the overlap is
    # taken on the seconds as priced, not on the base prices the priors scale afterwards.
    host_overlap: float = 0.0
    overlap_slowdowns: tuple = (1.0, 1.0, 1.0, 1.0)
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
    # A refit's host work per routed-expert tensor (Megatron holds a layer's experts in one
    # grouped tensor; the Hugging Face export and vLLM's ``load_weights`` take them one by one:
    # a gather, a copy into the hand-off buffer and a Python weight loader each): the median of
    # the published refits in ``REFIT_EXPERT_TENSOR_MEASUREMENTS`` (0.525 ms), computed from them,
    # not rounded. Dense models have a few hundred tensors: their bytes dominate.
    refit_s_per_expert_tensor: float = field(default_factory=refit_expert_tensor_median)
    # The same with verl's checkpoint engine (``async_training.checkpoint_engine.enable``, on by
    # default in its fully-async recipe): tensors packed into 4 GB buckets, broadcast and loaded a
    # bucket at a time. Its README's ablation: Qwen3-30B-A3B 16:16 syncs in 4.38 s, 0.99 s past its
    # bytes at our link rates: 0.054 ms per expert tensor (Qwen3-235B-A22B's 23.70 s is under our
    # bytes' 26.7 s: no more there).
    refit_s_per_expert_tensor_bucketed: float = 5.4e-5
    # Memory vLLM keeps for activations and CUDA graphs outside the KV cache, bytes.
    engine_reserve_bytes: float = 2e9

    # --- tensor-parallel all-reduce latency (stepmodel/parallel.py, ``allreduce_latency_seconds``) ---
    # Within one host vLLM runs its own custom all-reduce over NVLink (2, 4, 6 or 8 GPUs): ~8 us a
    # call at decode's message sizes. An engine whose TP group is larger or spans hosts cannot
    # (vLLM disables the custom all-reduce for a group across nodes) and calls NCCL, whose tuning model
    # (src/graph/tuning.cc, NVIDIA/nccl at b6475625) prices the lowest-latency all-reduce across
    # nodes, tree over the LL protocol, at a 6.8 us base plus 0.6 us per NVLink hop and 5.0 us
    # per network hop, both ways: 25.2 us for two 8-GPU nodes.
    allreduce_latency_s: float = 8e-6
    nccl_tree_base_s: float = 6.8e-6
    nccl_nvlink_hop_s: float = 0.6e-6
    nccl_net_hop_s: float = 5.0e-6

    # --- MoE expert parallelism (stepmodel/parallel.py) ---------------------------------------
    # All-to-all (token dispatch and combine) reaches less of the link than a ring all-reduce:
    # many small peer-to-peer messages. NCCL all-to-all bus bandwidth on 8x H100 NVLink sits at
    # ~50-60% of the all-reduce figure in nccl-tests at MB-sized messages: assumed 0.5.
    all_to_all: float = 0.5
    # Launch and synchronisation per all-to-all: ~15-25 us for NCCL at these sizes; assumed 20 us.
    all_to_all_latency_s: float = 20e-6
    # The busiest EP rank's expert tokens over the mean, drop-less routing with a load-balancing
    # loss: assumed 1.2 (not measured in this project; a routed batch is never perfectly even).
    moe_load_imbalance: float = 1.2


DEFAULT = Efficiency()


def with_overrides(**kw) -> Efficiency:
    return replace(DEFAULT, **kw)


# The fraction of its kind's peak roofline each kernel family's base price above assumes: a part
# priced at ``seconds`` cannot run faster than ``seconds * roofline_share(family)`` (its work at
# the datasheet peak). Conservative where a family mixes rates (the smaller share: a bound that is
# never above the truth). Host work (launches, schedulers, packing plans) and tool latency have no
# roofline: share 0. PCIe Gen4 x16 carries 32 GB/s per direction (PCI-SIG), so ``pcie_gbps`` 20 is
# 0.625 of it; the optimizer is priced at the HBM peak itself (share 1).
PCIE_PEAK_GBPS = 32.0


def host_copy_gbps(gpu, eff: Efficiency = DEFAULT) -> float:
    """GB/s of an offload copy between a GPU and CPU memory, one direction: ``eff.pcie_gbps``
    over a PCIe slot; over a faster host link (``GPU.host_link_gbps``, Grace's NVLink-C2C) the
    same share of its peak as ``pcie_gbps`` is of PCIe Gen4's."""
    link = getattr(gpu, "host_link_gbps", None)
    return eff.pcie_gbps if link is None else eff.pcie_gbps / PCIE_PEAK_GBPS * float(link)


def roofline_share(family: str, eff: Efficiency = DEFAULT) -> float:
    shares = {
        "gemm": min(eff.gemm, eff.decode_hbm),  # training GEMMs at gemm, decode GEMMs at max(compute, memory)
        "attention": eff.attention,
        "decode": eff.decode_hbm,
        "prefill": eff.prefill,
        "logprob": min(eff.gemm, eff.elementwise_hbm),  # LM head GEMM + log-softmax passes
        "optimizer": 1.0,
        # collectives: FSDP prefetches the next layer's all-gather under this layer's compute and
        # vLLM's TP all-reduce overlaps across micro-steps, so they bound no stage (share 0);
        # the stage is still held by its compute parts' bound
        "comm": 0.0,
        "offload": min(1.0, eff.pcie_gbps / PCIE_PEAK_GBPS),
    }
    return float(shares.get(family, 0.0))


def priced_share(family: str, eff: Efficiency = DEFAULT) -> float:
    """The largest fraction of its peak roofline any part of ``family`` is priced at: a part
    priced at the larger of a compute time at ``gemm`` and a memory time at ``decode_hbm`` runs at
    0.75 of the HBM peak where memory bounds it. A slowdown ``s`` on a kind of work runs each of
    its families at up to ``priced_share / s`` of the peak, so ``s >= priced_share`` of every
    family the kind holds keeps all of them at or under the peak (``roofline_share`` is the
    other side: the smallest fraction, for a bound on seconds that is never above the truth)."""
    shares = {
        "gemm": max(eff.gemm, eff.decode_hbm),  # decode GEMMs are memory-bound at decode_hbm
        "attention": eff.attention,
        "decode": max(eff.gemm, eff.decode_hbm),
        "prefill": eff.prefill,
        "logprob": max(eff.gemm, eff.elementwise_hbm),
        "optimizer": 1.0,
        "comm": eff.comm,
        "offload": min(1.0, eff.pcie_gbps / PCIE_PEAK_GBPS),
    }
    return float(shares.get(family, 0.0))


# ---- shared physical priors (``polytrace/data/priors.json``, fitted by scripts/fit_priors.py) ----

PRIORS_PATH = Path(__file__).resolve().parents[1] / "data" / "priors.json"
# ``estimate(calibration=PRIORS)``: price with the shared priors (the CLI's default)
PRIORS = "priors"
# Stage -> the kind of per-call constant seconds the priors hold for it.
CONSTANT_KIND = {"gen": "gen", "old_log_prob": "forward", "ref": "forward", "values": "forward",
                 "update_actor": "update", "update_critic": "update"}


@functools.lru_cache(maxsize=4)
def load_priors(path: str | None = None) -> dict:
    """The shipped priors document (``polytrace/data/priors.json``): per kind of work and engine
    setting a slowdown over the base prices above (and the fraction of the peak roofline that
    makes), per-call constant seconds per kind of stage, and the provenance of the fit."""
    p = Path(path) if path else PRIORS_PATH
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PolytraceError(f"{p}: cannot read the priors ({exc}); refit with scripts/fit_priors.py") from None
    if doc.get("format") != "polytrace.priors":
        raise PolytraceError(f"{p}: not a polytrace priors file")
    return doc


# Kernel families the priors price apart from the main work of their kind (the rest of a kind's
# families -- GEMMs, attention, decode, prefill, log-prob, optimizer -- share its slowdown). The
# rollout's host work per running sequence is a kind of its own: fitted with the per-iteration
# work, one factor cannot fit a 0.5B run (0.6x its generation) and a 7B run (1.9x) at once.
# The optimizer is priced at the HBM peak itself (``training.optimizer_seconds``: ~32 bytes per
# parameter): sharing the update's slowdown, any slowdown under 1 would run it past the peak, so it
# is a kind of its own, not fitted (``priors.FIXED_KINDS``).
SEPARATE_FAMILIES = {"host": "host", "seq_host": "seq_host", "packing": "host", "comm": "collectives",
                     "offload": "offload", "optimizer": "optimizer"}


def prior_kind(group: str, family: str = "gemm", eager: bool = True, gradient_checkpointing: bool = False) -> str:
    """The priors' key for a part of a stage (its kind of work, ``stages.GROUPS``, and kernel
    family) under the run's engine settings."""
    base = group.replace("_overhead", "")
    setting = ""
    if base == "rollout":
        setting = ".eager" if eager else ".cuda_graphs"
    elif base == "train":
        setting = ".checkpointing" if gradient_checkpointing else ".no_checkpointing"
    sep = SEPARATE_FAMILIES.get(family)
    if sep == "seq_host":  # only the rollout has it; CUDA graphs do not touch the per-sequence Python
        return "rollout_seq_host"
    if sep == "host":
        return f"rollout_host{setting}" if base == "rollout" else "trainer_host"
    if sep:
        return sep
    return f"{base}{setting}" if base in ("rollout", "train") else base


def prior_scalars(eager: bool = True, gradient_checkpointing: bool = False, doc: dict | None = None,
                  gpu=None) -> dict:
    """The priors as calibration scalars: ``<group>_slowdown`` for a kind's main work,
    ``<group>_<family>_slowdown`` for the families priced apart (``SEPARATE_FAMILIES``),
    ``<stage>_overhead_s`` and ``other_overhead_s``: what ``estimate`` applies when no calibration
    file is given (``compose.estimate.calibrated_kernels`` reads both patterns). ``gpu``: a device
    off the corpus takes its published achievable fractions (``devices.scale_priors``)."""
    doc = scale_priors(doc or load_priors(), gpu)
    kinds = doc["kinds"]
    out = {}
    for g in ("rollout", "forward", "train", "forward_overhead", "train_overhead"):
        out[f"{g}_slowdown"] = float(kinds[prior_kind(g, "gemm", eager, gradient_checkpointing)]["slowdown"])
        for fam in SEPARATE_FAMILIES:
            out[f"{g}_{fam}_slowdown"] = float(kinds[prior_kind(g, fam, eager, gradient_checkpointing)]["slowdown"])
    for stage, kind in CONSTANT_KIND.items():
        out[f"{stage}_overhead_s"] = float(doc["constants_s"][kind])
    out["other_overhead_s"] = float(doc["constants_s"]["other"])
    return out


def part_slowdown(scalars: dict, group: str, family: str) -> float:
    """A part's slowdown under calibration scalars: its family's own if the scalars price it
    apart, else its kind of work's, else 1."""
    return float(scalars.get(f"{group}_{family}_slowdown", scalars.get(f"{group}_slowdown", 1.0)))
