"""Efficiency priors for accelerators off the corpus (issue 36 item 5): AMD, Ascend, consumer cards.

The shared priors (``polytrace/data/priors.json``) are slowdowns fitted on logs of NVIDIA data-centre
GPUs only (14 of the 22 corpus logs on H100 SXM, the rest on A100 / A800). Priced at the same
fraction of its datasheet peak, a device whose software reaches less of its peak looks too fast: the
issue's audit found MI300X's zero-shot trainer stages at 0.56-0.79x their measured time. Here each
such device carries what published benchmarks measured -- a large bf16 GEMM's TFLOP/s, a STREAM-like
HBM rate, a collective's bus bandwidth -- each against the datasheet figure it divides, and the
priors' slowdowns of the kinds each resource bounds are divided by

    ratio = min(1, device's measured fraction of its peak / the corpus reference's fraction)

so ``efficiency_on_device = fitted_efficiency x ratio``. The reference is H100 SXM measured by the
same benchmark (MAMF 794.5 of 989 TF: 0.803; the Azure suite's triad 2.97 of 3.35 TB/s: 0.887).
Collectives are not fitted (``calibrate.priors.LINK_PRICED``: every device at ``Efficiency.comm`` of
its link), so a device's collective fraction is taken against that 0.70 itself.

A ratio is never above 1: the corpus fit already runs one family at its peak (the update's log-prob
passes: ``priced_share`` 0.80 over slowdown 0.80 = 1.00 in priors.json), so no device can be
priced at a larger fraction of its own peak than the corpus reference without passing 1. A device
measured at or above the reference keeps the priors as fitted, and says so.

Nothing here is fitted on any log: a device with no published figure keeps the NVIDIA priors, and
its note says that too. The NVIDIA data-centre parts of the corpus's generations carry no note.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ..run.hardware import GPU


@dataclass(frozen=True)
class Published:
    """One published measurement: ``measured`` in ``unit`` against the datasheet figure ``divides``
    (as the source divides it), from ``source`` (title and URL, or repository and path)."""

    resource: str  # "gemm" (dense bf16 TF), "hbm" (GB/s), "comm" (all-reduce bus GB/s)
    measured: float
    divides: float
    unit: str
    source: str
    short: str  # the source in a few words, for the one-line note

    def fraction(self, gpu: GPU | None = None) -> float:
        """The measured figure over the peak the roofline prices at: ``gpu``'s preset figure (the
        datasheet peak ``hardware.py`` holds), else the figure the source divides by."""
        return self.measured / (self.peak(gpu) if gpu is not None else self.divides)

    def peak(self, gpu: GPU) -> float:
        return {"gemm": gpu.bf16_tflops, "hbm": gpu.hbm_tbps * 1000.0, "comm": gpu.interconnect_gbps}[self.resource]


MAMF = ("stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison "
        "table' (mamf-finder.py: best bf16 torch.matmul over a sweep of shapes), at 744d01e (2026-08-22)")
AZURE = "Azure/AI-benchmarking-guide, 'Azure Results/ND_H100_v5_results.md' (HBMBandwidth.py, NCCL all-reduce)"
AZURE_AMD = ("samuel-bohman/AI-benchmarking-guide (a fork of Azure/AI-benchmarking-guide, same benchmarks), "
             "Azure_Results/ND_MI300X_v5_results.md (HBMBandwidth.py, RCCL all-reduce)")

# The corpus reference: H100 SXM (14 of the 22 logs the priors were fitted on), measured by the same
# benchmarks as the devices below. Collectives take ``Efficiency.comm`` (0.70, the link share every
# device is priced at) instead: they are not fitted.
REFERENCE = {
    "gemm": Published("gemm", 794.5, 989.0, "TF", f"{MAMF}: NVIDIA H100 SXM, torch 2.7.0+cu126", "MAMF"),
    "hbm": Published("hbm", 2970.0, 3350.0, "GB/s", f"{AZURE}: ND H100 v5, STREAM triad 2.97 TB/s", "Azure"),
}
REFERENCE_GPU = "h100-sxm"
# ``Efficiency.comm``: the link share every device's collectives are priced at (``efficiency.py``
# imports this module, so the figure is repeated here; tests/stepmodel/test_devices.py holds them equal)
COMM_REFERENCE = 0.70

PUBLISHED: dict[str, tuple[Published, ...]] = {
    "mi300x": (
        Published("gemm", 668.4, 1300.0, "TF", f"{MAMF}: AMD MI300X, torch 2.5.1+rocm6.3, PYTORCH_TUNABLEOP_ENABLED=1",
                  "MAMF 668 of 1300 TF"),
        Published("hbm", 4090.0, 5300.0, "GB/s", f"{AZURE_AMD}: ND MI300X v5, STREAM triad 4.09 TB/s",
                  "Azure triad 4.09 of 5.3 TB/s"),
        Published("comm", 316.82, 448.0, "GB/s", f"{AZURE_AMD}: RCCL all-reduce bus bandwidth at 8 GB, 8 GPUs",
                  "RCCL 317 GB/s"),
    ),
    "mi325x": (
        Published("gemm", 784.9, 1300.0, "TF", f"{MAMF}: AMD MI325X, torch 2.6.0+rocm6.2.4, 1000 W",
                  "MAMF 785 of 1300 TF"),
    ),
    # the MAMF table divides MI355X by 2300 TF; the preset's datasheet dense bf16 is 2516.6, which
    # the roofline prices at, so the fraction here is 1565 / 2516.6 = 0.622 (0.680 of 2300)
    "mi355x": (
        Published("gemm", 1565.0, 2300.0, "TF", f"{MAMF}: AMD MI355X, torch 2.8.0+rocm7.0.2", "MAMF 1565 TF"),
    ),
    # an Ascend 910B2 through torch_npu: 301.2 TF at 8192^3 (315.4 at 4096^3), at or above the
    # preset's 313 TF peak -- the reference's 0.803 is exceeded, so the priors stay as fitted
    "ascend-910b": (
        Published("gemm", 301.23, 313.0, "TF", "zzc0721/torch-performance-test-data issue #109 'Ascend910B2' "
                  "(torch 2.5.1 bf16 matmul, 8192x8192)", "torch matmul 301 TF"),
    ),
    # PCIe Gen5 boards without NVLink: nccl-tests all_reduce_perf on 8 RTX PRO 6000 Blackwell, six
    # systems' 8-GPU rows (22.2 GB/s with NCCL's defaults on a dual-socket host, 37.6-41.7 with
    # switches or tuned channels): their median 39.75 of the preset's 64 GB/s link (0.62 < 0.70)
    "rtx-pro-6000": (
        Published("comm", 39.75, 64.0, "GB/s", "voipmonitor/rtx6kpro hardware/pcie-bandwidth.md, 'NCCL AllReduce "
                  "Bus Bandwidth', 8-GPU results (median of 22.2, 37.6, 39.4, 40.1, 41.1, 41.5)",
                  "nccl-tests 39.8 GB/s over PCIe Gen5"),
    ),
    # a GeForce RTX 4090 with cuBLASLt at 8192^3: 175.1 TF bf16, above the preset's 165.2 (fp32
    # accumulate at its datasheet boost clock); D2D memcpy 918.8 of 1008 GB/s (0.91, the H100's triad
    # in Azure's suite 0.89): both at or above the reference, the priors stay as fitted
    "rtx4090": (
        Published("gemm", 175.1, 165.2, "TF", "binbinsh/gpu-bench README.md (cuBLASLt, matrix 8192)",
                  "gpu-bench 175 TF"),
        Published("hbm", 918.8, 1008.0, "GB/s", "binbinsh/gpu-bench README.md (device-to-device memcpy)",
                  "gpu-bench 919 GB/s"),
    ),
}

# Kinds of the priors (``calibrate.priors.KINDS``) and the resource that bounds each: the rollout's
# decode streams weights and KV cache (a decode batch of at most a few hundred tokens per GPU is
# under every preset's ridge point, MI300X's 1307 / 5.3 = 247 FLOP per byte); the trainer's passes
# are GEMMs; the optimizer is priced at the HBM peak. Host work (launches, schedulers) runs on the
# CPU and offload on PCIe: no device figure applies, they keep the priors.
KIND_RESOURCE = {"rollout.eager": "hbm", "rollout.cuda_graphs": "hbm", "forward": "gemm",
                 "train.no_checkpointing": "gemm", "train.checkpointing": "gemm", "collectives": "comm",
                 "optimizer": "hbm"}

# NVIDIA data-centre parts of the corpus's generations (Ampere GA100, Hopper GH100, Blackwell): the
# priors as fitted, no note. Every other preset is off the corpus.
CORPUS_FAMILY = ("a100-80g", "a100-40g", "a800", "a800-40g", "h100-sxm", "h100-pcie", "h100-nvl", "h800", "h20",
                 "h200", "gh200", "gh200-96g", "b200", "gb200")


def ratios(gpu: GPU) -> dict[str, float]:
    """Resource -> the factor the priors' efficiencies of that resource take on ``gpu`` (module
    docstring); a resource with no published figure is absent (factor 1)."""
    out = {}
    for p in PUBLISHED.get(gpu.slug, ()):
        ref = COMM_REFERENCE if p.resource == "comm" else REFERENCE[p.resource].fraction()
        out[p.resource] = min(1.0, p.fraction(gpu) / ref)
    return out


def kind_ratio(gpu: GPU, kind: str) -> float:
    """The factor on the efficiency of one kind of the priors on ``gpu`` (1 where none applies)."""
    res = KIND_RESOURCE.get(kind)
    return ratios(gpu).get(res, 1.0) if res else 1.0


def scale_priors(doc: dict, gpu: GPU | None) -> dict:
    """The priors document as priced on ``gpu``: each kind's slowdown divided by its ``kind_ratio``
    (never below its fit, since a ratio is at most 1), and ``device`` saying what was applied.
    The same document where no published figure moves any kind."""
    if gpu is None:
        return doc
    r = ratios(gpu)
    if not any(v != 1.0 for v in r.values()):
        return doc
    out = copy.deepcopy(doc)
    for kind, entry in out["kinds"].items():
        f = kind_ratio(gpu, kind)
        if f != 1.0:
            entry["slowdown"] = float(entry["slowdown"]) / f
    out["device"] = {"gpu": gpu.slug, "ratios": r, "note": note(gpu)}
    return out


def off_corpus(gpu: GPU) -> bool:
    return gpu.slug not in CORPUS_FAMILY


def note(gpu: GPU) -> str | None:
    """The one-line note an estimate or validation on ``gpu`` carries; None on the corpus's parts."""
    if not off_corpus(gpu):
        return None
    pubs = PUBLISHED.get(gpu.slug, ())
    if not pubs:
        return f"{gpu.slug}: no published figure; NVIDIA priors assumed (fitted on A100/A800/H100 logs)"
    r = ratios(gpu)
    order = ("gemm", "hbm", "comm")
    moved = [f"{res} x{r[res]:.2f}" for res in order if r.get(res, 1.0) < 1.0]
    kept = [res for res in order if r.get(res) == 1.0]
    missing = [res for res in order if res not in r]
    clauses = ([f"{' and '.join(moved)} of the priors' efficiency"] if moved else []) + \
              ([f"{', '.join(kept)} kept (measured at or above the corpus reference)"] if kept else []) + \
              ([f"no figure for {', '.join(missing)} (NVIDIA priors)"] if missing else [])
    return (f"{gpu.slug}: efficiency priors from published benchmarks ({'; '.join(p.short for p in pubs)}: "
            f"{'; '.join(clauses)}), not fitted on any log")


def gpu_block(gpu: GPU) -> dict:
    """The ``gpu`` object of an estimate's JSON: the preset, its source and ``efficiency_priors``
    (the note, or how the corpus's parts are priced)."""
    return {"slug": gpu.slug, "name": gpu.name, "source": gpu.source,
            "efficiency_priors": note(gpu) or "fitted on the corpus's logs (polytrace/data/priors.json)"}
