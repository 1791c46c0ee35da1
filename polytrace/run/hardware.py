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

from ..errors import unknown_name


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
    # GPUs of one host (one operating system: what CUDA IPC and vLLM's custom all-reduce reach),
    # where it is fewer than the NVLink domain's ``gpus_per_node``: a GB200 NVL72 compute tray
    # holds two superchips, 4 GPUs, of the rack's 72 on NVLink. None: the node is the host.
    gpus_per_host: int | None = None
    # CPU-GPU link per GPU, GB/s one direction, where it is no PCIe slot (Grace's NVLink-C2C);
    # None: a PCIe slot, which offload copies cross at ``Efficiency.pcie_gbps`` in practice
    host_link_gbps: float | None = None
    # Host DRAM bandwidth per GPU, GB/s (the node's memory channels shared by its GPUs' ranks): what
    # an optimizer stepping in CPU memory runs at (``Efficiency.cpu_adam_bytes_per_param``).
    # ``HOST_MEMORY_SOURCE``: 76.8 on the HGX/DGX 8-GPU servers' two Xeon sockets, 256 on Grace.
    host_memory_gbps: float = 76.8
    # FP8 tensor cores (Hopper, Ada, Blackwell; AMD CDNA 3 and later). Ampere, CDNA 2 and Ascend
    # have none: vLLM serves an FP8 checkpoint there weight-only (its Marlin kernels widen each
    # weight to 16 bits in registers), so the weights' bytes halve and the math stays bf16.
    has_fp8: bool = True

    @property
    def host_gpus(self) -> int:
        """GPUs of one host (``gpus_per_host``, else the node's)."""
        return self.gpus_per_host or self.gpus_per_node

    def link_gbps(self, group_gpus: int) -> float:
        """Per-GPU bandwidth of a collective over ``group_gpus`` GPUs (GB/s): NVLink within one
        node, the scale-out NIC once the group spans nodes."""
        return self.interconnect_gbps if group_gpus <= self.gpus_per_node else min(self.interconnect_gbps,
                                                                                   self.scaleout_gbps)

    def collective_gbps(self, group_gpus: int) -> float:
        """Per-GPU bus bandwidth of a ring collective (all-gather, reduce-scatter, all-reduce) over
        ``group_gpus`` GPUs (GB/s). Within one node NVLink's. Across nodes NCCL runs one ring
        channel per NIC: each channel's inter-node hop takes a different GPU's NIC, so the ring
        moves at the node's ``gpus_per_node`` NICs together (8 x 50 GB/s on HGX H100), capped by
        NVLink, not at one NIC's rate. nccl-tests all_reduce bus bandwidth across nodes at large
        messages: 400-450 GB/s on H100 SXM with NDR InfiniBand, 250-300 GB/s on A100 SXM with
        HDR (saturncloud.io/blog/crusoe-nccl-cluster-validation). Point-to-point traffic
        (all-to-all, a ring of KV blocks) crosses each GPU's own NIC: ``link_gbps``."""
        if group_gpus <= self.gpus_per_node:
            return self.interconnect_gbps
        return min(self.interconnect_gbps, self.scaleout_gbps * self.gpus_per_node)

    def ceiling(self, kind: str) -> float:
        """Peak in base units: 'bf16' / 'fp8' -> FLOP/s, 'hbm' -> bytes/s. Datasheet figures (the
        conventional denominator for %-of-peak, as in nvFuser and tritonbench). FP8 tensor cores
        (Hopper, Ada, Blackwell, CDNA 3 and later) run at twice the dense bf16 rate on every
        datasheet here (H100 SXM 1,979 against 989 TF, MI300X 2,615 against 1,307); a GPU without
        them has no 'fp8' peak (``has_fp8``)."""
        if kind == "bf16":
            return self.bf16_tflops * 1e12
        if kind == "fp8":
            if not self.has_fp8:
                raise ValueError(f"{self.slug} has no FP8 tensor cores")
            return 2.0 * self.bf16_tflops * 1e12
        if kind == "hbm":
            return self.hbm_tbps * 1e12
        if kind == "fp32":
            return self.fp32_tflops * 1e12
        raise ValueError(f"kind must be 'bf16', 'fp8', 'hbm' or 'fp32', got {kind!r}")


SCALEOUT_SOURCE = (
    "reference system designs, one NIC per GPU: DGX A100 (8 x 200 Gb/s HDR ConnectX-6: 25 GB/s per GPU); "
    "DGX/HGX H100, H200, H20, H800, GH200 and DGX B200 (8 x 400 Gb/s NDR ConnectX-7: 50 GB/s per GPU); "
    "AMD MI300X and MI325X platforms (8 x 400 Gb/s NICs: 50 GB/s per GPU); A800 and L40S servers taken as "
    "DGX A100 (25 GB/s per GPU). Clusters built with fewer NICs are slower.")

HOST_MEMORY_SOURCE = (
    "host DRAM peak shared by a node's GPUs: DGX H100 / HGX H100, H200, H20 and B200 servers carry two 4th or 5th "
    "generation Xeon sockets of 8 DDR5-4800 channels each (Intel ark: 307 GB/s a socket), 614 GB/s for 8 GPUs = "
    "76.8 GB/s a GPU, taken for every 8-GPU server here; a GB200 superchip's Grace CPU has up to 512 GB/s of "
    "LPDDR5X (NVIDIA Grace datasheet) for its two GPUs = 256 GB/s a GPU")

_GPUS = [
    GPU("a100-80g", "NVIDIA A100 80GB SXM", 312.0, 2.039, 80, 300, 19.5,
        "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 2,039 GB/s HBM2e, NVLink 600 GB/s bidirectional",
        name_patterns=(r"\ba100\b.*\b80\s?gb\b",), scaleout_gbps=25.0, has_fp8=False),
    GPU("a100-40g", "NVIDIA A100 40GB SXM", 312.0, 1.555, 40, 300, 19.5,
        "NVIDIA A100 datasheet (2021): 312 TF bf16 dense, 1,555 GB/s HBM2, NVLink 600 GB/s bidirectional",
        name_patterns=(r"\ba100\b.*\b40\s?gb\b",), scaleout_gbps=25.0, has_fp8=False),
    GPU("a800", "NVIDIA A800 SXM4 80GB", 312.0, 2.039, 80, 200, 19.5,
        "NVIDIA A800 product brief: A100 80GB compute and memory, NVLink limited to 400 GB/s bidirectional",
        name_patterns=(r"\ba800\b(?!.*\b(?:pcie|40\s?gb)\b)",), scaleout_gbps=25.0, has_fp8=False),
    GPU("a800-40g", "NVIDIA A800 SXM4 40GB", 312.0, 1.555, 40, 200, 19.5,
        "NVIDIA A800 product brief: A100 40GB compute and memory (312 TF bf16 dense, 1,555 GB/s HBM2), NVLink "
        "limited to 400 GB/s bidirectional",
        name_patterns=(r"\ba800\b(?!.*\bpcie\b).*\b40\s?gb\b",), scaleout_gbps=25.0, has_fp8=False),
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
    GPU("gb200", "NVIDIA GB200 (one Blackwell GPU of a Grace Blackwell superchip)", 2500.0, 8.0, 186, 900, 80.0,
        "NVIDIA GB200 NVL72 datasheet (2024): 180 PF bf16 dense per 72 GPUs = 2.5 PF per GPU, 13.4 TB HBM3e "
        "per 72 GPUs (186 GB each) at 8 TB/s, NVLink 5 1.8 TB/s bidirectional; NVLink-C2C 900 GB/s "
        "bidirectional between a superchip's Grace CPU and its two GPUs (taken as 225 GB/s a GPU each way)",
        name_patterns=(r"\bgb200\b",), gpus_per_node=72, gpus_per_host=4, host_link_gbps=225.0,
        host_memory_gbps=256.0),
    # --- PCIe boards: no NVLink; collectives cross PCIe Gen4 x16 (32 GB/s) or Gen5 x16 (64 GB/s)
    GPU("rtx4090", "NVIDIA GeForce RTX 4090 24GB", 165.2, 1.008, 24, 32, 82.6,
        "NVIDIA Ada GPU architecture whitepaper (2023), RTX 4090: 165.2 TF bf16 dense with FP32 accumulate "
        "(GeForce runs it at half the FP16-accumulate rate of 330.3), 1,008 GB/s GDDR6X, PCIe Gen4",
        name_patterns=(r"\brtx\s?4090\b",), scaleout_gbps=12.5),
    GPU("rtx5090", "NVIDIA GeForce RTX 5090 32GB", 209.5, 1.792, 32, 64, 104.8,
        "NVIDIA RTX Blackwell GPU architecture whitepaper (2025), RTX 5090: 209.5 TF bf16 dense with FP32 "
        "accumulate (419 with FP16 accumulate), 1,792 GB/s GDDR7, PCIe Gen5",
        name_patterns=(r"\brtx\s?5090\b",), scaleout_gbps=12.5),
    GPU("l20", "NVIDIA L20 48GB", 119.5, 0.864, 48, 32, 59.8,
        "NVIDIA L20 product brief (2023): 239 TF FP16/bf16 tensor with sparsity, halved here to 119.5 dense; "
        "864 GB/s GDDR6, PCIe Gen4",
        name_patterns=(r"\bl20\b",), scaleout_gbps=25.0),
    GPU("l40", "NVIDIA L40 48GB", 181.0, 0.864, 48, 32, 90.5,
        "NVIDIA L40 datasheet (2022): 181.05 TF bf16 dense (362.1 with sparsity), 864 GB/s GDDR6, PCIe Gen4",
        name_patterns=(r"\bl40\b",), scaleout_gbps=25.0),
    GPU("a40", "NVIDIA A40 48GB", 149.7, 0.696, 48, 56, 37.4,
        "NVIDIA A40 datasheet (2020): 149.7 TF bf16 dense (299.4 with sparsity), 696 GB/s GDDR6, NVLink bridge "
        "112.5 GB/s bidirectional (pairs of boards), PCIe Gen4",
        name_patterns=(r"\ba40\b",), scaleout_gbps=12.5, has_fp8=False),
    GPU("a10", "NVIDIA A10 24GB", 125.0, 0.6, 24, 32, 31.2,
        "NVIDIA A10 datasheet (2021): 125 TF bf16 dense (250 with sparsity), 600 GB/s GDDR6, PCIe Gen4",
        name_patterns=(r"\ba10\b",), scaleout_gbps=12.5, has_fp8=False),
    GPU("a10g", "NVIDIA A10G 24GB (AWS G5)", 70.0, 0.6, 24, 32, 31.2,
        "AWS EC2 G5 documentation: A10G, 24 GB GDDR6 at 600 GB/s, PCIe Gen4; NVIDIA publishes no A10G "
        "datasheet, so its bf16 tensor rate is an estimate: 70 TF dense (spec databases), not a vendor figure",
        name_patterns=(r"\ba10g\b",), scaleout_gbps=12.5, has_fp8=False),
    GPU("rtx-a6000", "NVIDIA RTX A6000 48GB", 154.8, 0.768, 48, 56, 38.7,
        "NVIDIA RTX A6000 datasheet (2020): 309.7 TF tensor with sparsity, halved here to 154.8 dense; 768 GB/s "
        "GDDR6, NVLink bridge 112.5 GB/s bidirectional (pairs of boards)",
        name_patterns=(r"\brtx\s?a6000\b",), scaleout_gbps=12.5, has_fp8=False),
    GPU("rtx6000-ada", "NVIDIA RTX 6000 Ada Generation 48GB", 364.2, 0.96, 48, 32, 91.1,
        "NVIDIA RTX 6000 Ada datasheet (2022): 1,457 TF FP8 with sparsity; Ada whitepaper: 728.5 TF FP16/bf16 "
        "with sparsity, halved here to 364.2 dense; 960 GB/s GDDR6, PCIe Gen4, no NVLink",
        name_patterns=(r"\brtx\s?6000\s?ada\b",), scaleout_gbps=12.5),
    GPU("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell 96GB", 503.8, 1.792, 96, 64, 125.0,
        "NVIDIA RTX PRO 6000 Blackwell datasheet (2025): 4,000 AI TOPS (FP4 with sparsity), 125 TF FP32, "
        "1,792 GB/s GDDR7, PCIe Gen5; bf16 dense taken as FP4-sparse / 8 = 500, the RTX Blackwell whitepaper's "
        "503.8 TF FP16 dense with FP32 accumulate",
        name_patterns=(r"\brtx\s?pro\s?6000\b",), scaleout_gbps=50.0),
    # --- AMD
    GPU("mi250x", "AMD Instinct MI250X (one GCD, 64GB)", 191.5, 1.6, 64, 200, 47.9,
        "AMD Instinct MI250X datasheet (2021): 383 TF bf16 dense, 3.2 TB/s HBM2e, 128 GB per OAM module; the "
        "module is two graphics compute dies that ROCm and torch report as two devices, so a device here is "
        "half: 191.5 TF, 1.6 TB/s, 64 GB; Infinity Fabric 400 GB/s per GCD bidirectional",
        name_patterns=(r"\bmi250x?\b",), scaleout_gbps=25.0, has_fp8=False),
    GPU("mi355x", "AMD Instinct MI355X 288GB", 2516.6, 8.0, 288, 538, 157.3,
        "AMD Instinct MI355X datasheet (2025): 2.5 PF bf16 dense (5.0 with sparsity), 8 TB/s HBM3E, "
        "Infinity Fabric 1,075 GB/s bidirectional",
        name_patterns=(r"\bmi355x?\b",)),
    # --- Huawei Ascend (torch_npu reports "Ascend910B2", "Ascend910B3", ...; Atlas A3 dies "Ascend910_93xx")
    GPU("ascend-910b", "Huawei Ascend 910B 64GB", 313.0, 1.6, 64, 196, 78.0,
        "Huawei Atlas 800T A2 material (no public per-chip datasheet): Ascend 910B 313 TF FP16/bf16 dense "
        "(910B2-class SKU; 910B3 ~280, 910B4 ~256), 64 GB HBM2e at 1.6 TB/s, HCCS 392 GB/s bidirectional "
        "within an 8-NPU node; vendor figures as reported, not measured",
        name_patterns=(r"\bascend\s?910b\d?\b",), scaleout_gbps=25.0, has_fp8=False),
    GPU("ascend-910c", "Huawei Ascend 910C die 64GB", 376.0, 1.6, 64, 196, 94.0,
        "Huawei Atlas 800T A3 / CloudMatrix 384 material (no public per-chip datasheet): an Ascend 910C is "
        "two dies, ~752 TF FP16/bf16 dense, 128 GB HBM at 3.2 TB/s; torch_npu reports each die as a device, "
        "so a device here is half (376 TF, 64 GB at 1.6 TB/s); vendor figures as reported, not measured",
        name_patterns=(r"\bascend\s?910c\b", r"\bascend\s?910_93\d\d\b"), scaleout_gbps=25.0,
        gpus_per_node=16, has_fp8=False),
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
_ALIASES = {"a100": "a100-80g", "h100": "h100-sxm", "h100-80g": "h100-sxm", "4090": "rtx4090",
            "rtx-4090": "rtx4090", "5090": "rtx5090", "rtx-5090": "rtx5090", "a6000": "rtx-a6000",
            "rtx6000ada": "rtx6000-ada", "6000-ada": "rtx6000-ada", "rtx-6000-ada": "rtx6000-ada",
            "rtxpro6000": "rtx-pro-6000", "910b": "ascend-910b", "910c": "ascend-910c",
            "ascend910b": "ascend-910b", "ascend910c": "ascend-910c"}


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


def nearest_presets(name: str, k: int = 3) -> list[str]:
    """The ``k`` preset slugs closest to a device name (same vendor family first, then spelling)."""
    import difflib

    low = re.sub(r"^(nvidia|amd|huawei)\s+(geforce\s+|instinct\s+)?", "", name.strip().lower())
    low = re.sub(r"[^a-z0-9]+", "-", low).strip("-")
    scored = sorted(GPUS, key=lambda slug: -max(difflib.SequenceMatcher(None, low, slug).ratio(),
                                                 difflib.SequenceMatcher(None, low, GPUS[slug].name.lower()).ratio()))
    return scored[:k]


def detect(device_name: str) -> GPU | None:
    """The preset whose pattern matches a device name as ``torch.cuda.get_device_name`` reports it
    ("NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"), or None. Patterns match whole words, so
    "gh200" is not "h200" and "h20" is not "h200"; PCIe and NVL boards of the SXM parts are not
    matched (lower clocks and bandwidth: an SXM ceiling would understate their % of peak). Each
    name matches at most one preset (``tests/run/test_hardware.py`` checks every preset)."""
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
