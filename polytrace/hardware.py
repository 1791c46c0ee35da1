"""GPU presets: dense bf16 peak, HBM bandwidth, memory and interconnect.

One table, each row with its source. Figures are vendor datasheet numbers (dense, no sparsity),
used as the roofline ceilings for %-of-peak in the suites and by the composition layer. Where a
ceiling was measured on one of our machines it is given beside the datasheet figure, with where
and when, and ``ceiling()`` prefers it.

Nothing here queries CUDA: ``detect()`` takes a device name string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import unknown_name


@dataclass(frozen=True)
class GPU:
    slug: str  # short stable name used in results/<slug>/
    name: str
    bf16_tflops: float  # dense bf16 tensor-core peak, TFLOP/s
    hbm_tbps: float  # HBM bandwidth, TB/s (10^12 bytes/s)
    memory_gb: float  # device memory, GB
    interconnect_gbps: float  # per-GPU scale-up bandwidth (NVLink / Infinity Fabric), GB/s, one direction
    fp32_tflops: float
    source: str
    measured_bf16_tflops: float | None = None  # a measured large-GEMM rate on our machines
    measured_hbm_tbps: float | None = None  # a measured device-to-device copy rate (read + write)
    measured_note: str = ""
    name_patterns: tuple[str, ...] = ()
    # Scale-out (between nodes) bandwidth per GPU, GB/s one direction, and GPUs per node: the
    # reference HGX/DGX/OAM designs give every GPU its own NIC (``SCALEOUT_SOURCE``). Collectives
    # of a group spanning nodes run at the NIC's rate, not NVLink's.
    scaleout_gbps: float = 50.0
    gpus_per_node: int = 8

    def link_gbps(self, group_gpus: int) -> float:
        """Per-GPU bandwidth of a collective over ``group_gpus`` GPUs (GB/s): NVLink within one
        node, the scale-out NIC once the group spans nodes."""
        return self.interconnect_gbps if group_gpus <= self.gpus_per_node else min(self.interconnect_gbps,
                                                                                   self.scaleout_gbps)

    def ceiling(self, kind: str) -> float:
        """Peak in base units: 'bf16' -> FLOP/s, 'hbm' -> bytes/s. Datasheet figures (the
        conventional denominator for %-of-peak, as in nvFuser and tritonbench)."""
        if kind == "bf16":
            return self.bf16_tflops * 1e12
        if kind == "hbm":
            return self.hbm_tbps * 1e12
        if kind == "fp32":
            return self.fp32_tflops * 1e12
        raise ValueError(f"kind must be 'bf16', 'hbm' or 'fp32', got {kind!r}")


SCALEOUT_SOURCE = (
    "reference system designs, one NIC per GPU: DGX A100 (8 x 200 Gb/s HDR ConnectX-6: 25 GB/s per GPU); "
    "DGX/HGX H100, H200, H20, H800, GH200 and DGX B200 (8 x 400 Gb/s NDR ConnectX-7: 50 GB/s per GPU); "
    "AMD MI300X and MI325X platforms (8 x 400 Gb/s NICs: 50 GB/s per GPU); A800 and L40S servers taken as "
    "DGX A100 (25 GB/s per GPU). Clusters built with fewer NICs are slower.")

_GPUS = [
    GPU("a100-80g", "NVIDIA A100 80GB SXM", 312.0, 2.039, 80, 300, 19.5,
        "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 2,039 GB/s HBM2e, NVLink 600 GB/s bidirectional",
        name_patterns=(r"\ba100\b.*\b80\s?gb\b",), scaleout_gbps=25.0),
    GPU("a100-40g", "NVIDIA A100 40GB SXM", 312.0, 1.555, 40, 300, 19.5,
        "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 1,555 GB/s HBM2, NVLink 600 GB/s bidirectional",
        name_patterns=(r"\ba100\b.*\b40\s?gb\b",), scaleout_gbps=25.0),
    GPU("a800", "NVIDIA A800 SXM4 80GB", 312.0, 2.039, 80, 200, 19.5,
        "NVIDIA A800 product brief: A100 80GB compute and memory, NVLink limited to 400 GB/s bidirectional",
        name_patterns=(r"\ba800\b(?!.*\bpcie\b)",), scaleout_gbps=25.0),
    GPU("h100-sxm", "NVIDIA H100 SXM5 80GB", 989.4, 3.35, 80, 450, 67.0,
        "NVIDIA H100 datasheet (2023): 989 TF bf16 dense, 3.35 TB/s HBM3, NVLink 900 GB/s bidirectional",
        name_patterns=(r"\bh100\b(?!.*\b(?:pcie|nvl)\b)",)),
    GPU("h100-pcie", "NVIDIA H100 PCIe 80GB", 756.0, 2.0, 80, 300, 51.0,
        "NVIDIA H100 datasheet (2023), PCIe: 756 TF bf16 dense, 2.0 TB/s HBM2e, NVLink bridge 600 GB/s "
        "bidirectional (pairs of boards)",
        name_patterns=(r"\bh100\b.*\bpcie\b",)),
    GPU("h100-nvl", "NVIDIA H100 NVL 94GB", 835.0, 3.9, 94, 300, 60.0,
        "NVIDIA H100 datasheet (2023), NVL: 835 TF bf16 dense per GPU (1,671 with sparsity), 3.9 TB/s HBM3, "
        "NVLink bridge 600 GB/s bidirectional",
        name_patterns=(r"\bh100\b.*\bnvl\b",)),
    GPU("l40s", "NVIDIA L40S 48GB", 362.0, 0.864, 48, 32, 91.6,
        "NVIDIA L40S datasheet (2023): 362 TF bf16 dense (733 with sparsity), 864 GB/s GDDR6, no NVLink: "
        "PCIe Gen4 x16, 32 GB/s one direction",
        name_patterns=(r"\bl40s\b",), scaleout_gbps=25.0),
    GPU("h800", "NVIDIA H800 SXM5 80GB", 989.4, 3.35, 80, 200, 67.0,
        "NVIDIA H800 product brief: H100 compute, NVLink limited to 400 GB/s bidirectional",
        name_patterns=(r"\bh800\b(?!.*\bpcie\b)",)),
    GPU("h20", "NVIDIA H20 96GB", 148.0, 4.0, 96, 450, 44.0,
        "NVIDIA H20 product brief (2024): 148 TF bf16 dense, 4.0 TB/s HBM3, NVLink 900 GB/s",
        name_patterns=(r"\bh20\b",)),
    GPU("h200", "NVIDIA H200 SXM 141GB", 989.4, 4.8, 141, 450, 67.0,
        "NVIDIA H200 datasheet (2024): 989 TF bf16 dense, 4.8 TB/s HBM3e, NVLink 900 GB/s bidirectional",
        measured_bf16_tflops=788.0, measured_hbm_tbps=4.3,
        measured_note="8192^3 bf16 torch.matmul on random data and a torch device-to-device copy, "
        "one H200 of the lending workplace, 2026-10-28 (device tool notes)",
        name_patterns=(r"\bh200\b(?!.*\bnvl\b)",)),
    GPU("b200", "NVIDIA B200 180GB", 2250.0, 8.0, 180, 900, 80.0,
        "NVIDIA HGX B200 datasheet (2024): 2.25 PF bf16 dense per GPU, 8 TB/s HBM3e, NVLink 5 1.8 TB/s",
        name_patterns=(r"\bb200\b",)),
    GPU("mi300x", "AMD Instinct MI300X 192GB", 1307.4, 5.3, 192, 448, 163.4,
        "AMD MI300X datasheet (2023): 1307.4 TF bf16 dense, 5.3 TB/s HBM3, Infinity Fabric 896 GB/s",
        name_patterns=(r"\bmi300x\b",)),
    GPU("mi325x", "AMD Instinct MI325X 256GB", 1307.4, 6.0, 256, 448, 163.4,
        "AMD MI325X datasheet (2024): 1307.4 TF bf16 dense, 6.0 TB/s HBM3E, Infinity Fabric 896 GB/s",
        name_patterns=(r"\bmi325x\b",)),
    GPU("gh200", "NVIDIA GH200 Grace Hopper 144GB", 989.4, 4.9, 144, 450, 67.0,
        "NVIDIA GH200 datasheet (2024): H100 compute, 144 GB HBM3e at 4.9 TB/s, NVLink 900 GB/s",
        name_patterns=(r"\bgh200\b(?!.*\b480\s?gb\b)",)),
    # The first GH200 boards carry 96 GB of HBM3 beside 480 GB of LPDDR5X and report the latter:
    # "NVIDIA GH200 480GB".
    GPU("gh200-96g", "NVIDIA GH200 Grace Hopper 96GB", 989.4, 4.0, 96, 450, 67.0,
        "NVIDIA GH200 datasheet (2023): H100 compute, 96 GB HBM3 at 4.0 TB/s (480 GB LPDDR5X), NVLink 900 GB/s",
        name_patterns=(r"\bgh200\b.*\b480\s?gb\b",)),
]

GPUS: dict[str, GPU] = {g.slug: g for g in _GPUS}
_ALIASES = {"a100": "a100-80g", "h100": "h100-sxm", "h100-80g": "h100-sxm"}


def get_gpu(name: str) -> GPU:
    """A preset by slug (``h200``), alias (``h100``) or device name (``NVIDIA H200``)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    found = detect(name)
    if found is not None:
        return found
    raise unknown_name("GPU", name, list(GPUS))


def detect(device_name: str) -> GPU | None:
    """The preset whose pattern matches a device name as ``torch.cuda.get_device_name`` reports it
    ("NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"), or None. Patterns match whole words, so
    "gh200" is not "h200" and "h20" is not "h200"; PCIe and NVL boards of the SXM parts are not
    matched (lower clocks and bandwidth: an SXM ceiling would understate their % of peak). Each
    name matches at most one preset (``tests/test_hardware.py`` checks every preset)."""
    low = device_name.lower()
    for gpu in _GPUS:
        if any(re.search(p, low) for p in gpu.name_patterns):
            return gpu
    return None


def slug_for(device_name: str) -> str:
    """A stable folder name for a device: the preset slug, or a sanitised form of the name."""
    gpu = detect(device_name)
    if gpu is not None:
        return gpu.slug
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return s or "unknown"
