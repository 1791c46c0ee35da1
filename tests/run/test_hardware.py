"""GPU presets: every preset is found from the device names torch reports, and only from those."""

from __future__ import annotations

import re

import pytest

from polytrace.run.hardware import GPUS, detect, slug_for

# torch.cuda.get_device_name() (= nvidia-smi's name) of each preset's boards, as seen in public logs
REPORTED_NAMES = {
    "NVIDIA A100-SXM4-80GB": "a100-80g",
    "NVIDIA A100 80GB PCIe": "a100-80g",  # same chip and memory size; 1.94 vs 2.04 TB/s
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H800": "h800",
    "NVIDIA H20": "h20",
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "AMD Instinct MI300X": "mi300x",
    "NVIDIA GH200 480GB": "gh200-96g",  # 96 GB HBM3 beside 480 GB LPDDR5X
    "NVIDIA GH200 144G HBM3e": "gh200",
    "NVIDIA A100-SXM4-40GB": "a100-40g",
    "NVIDIA A100-PCIE-40GB": "a100-40g",
    "NVIDIA A800-SXM4-80GB": "a800",
    "NVIDIA A800-SXM4-40GB": "a800-40g",  # wandb-metadata.json of a public on-policy-distillation run
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA L40S": "l40s",
    "AMD Instinct MI325X": "mi325x",
    "NVIDIA GB200": "gb200",
    "NVIDIA GeForce RTX 4090": "rtx4090",
    "NVIDIA GeForce RTX 5090": "rtx5090",
    "NVIDIA L20": "l20",
    "NVIDIA L40": "l40",
    "NVIDIA A10": "a10",
    "NVIDIA A40": "a40",  # wandb-metadata.json of a public Logic-RL run
    "NVIDIA A10G": "a10g",
    "NVIDIA RTX A6000": "rtx-a6000",
    "NVIDIA RTX 6000 Ada Generation": "rtx6000-ada",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "rtx-pro-6000",
    "AMD Instinct MI250X/MI250": "mi250x",
    "AMD Instinct MI355X": "mi355x",
    "Ascend910B3": "ascend-910b",  # torch_npu.npu.get_device_name()
    "Ascend910B2": "ascend-910b",
    "Ascend910_9392": "ascend-910c",  # an Atlas A3 die
}
# boards with no preset of their own: a wrong preset would give a wrong % of peak
UNMATCHED = ["NVIDIA H200 NVL", "NVIDIA H800 PCIe", "NVIDIA A800 80GB PCIe", "NVIDIA A16", "NVIDIA T4",
             "NVIDIA GeForce RTX 3090", "NVIDIA RTX 5000 Ada Generation", "AMD Instinct MI300A", "Ascend910A", "cpu"]


@pytest.mark.parametrize("name, slug", sorted(REPORTED_NAMES.items()))
def test_detect_maps_reported_names(name, slug):
    assert detect(name).slug == slug
    assert slug_for(name) == slug
    matching = [g.slug for g in GPUS.values() if any(re.search(p, name.lower()) for p in g.name_patterns)]
    assert matching == [slug], f"{name!r} matches {matching}: patterns must not overlap"


def test_every_preset_is_detected_from_a_reported_name():
    assert set(REPORTED_NAMES.values()) == set(GPUS)


@pytest.mark.parametrize("name", UNMATCHED)
def test_other_boards_get_no_preset(name):
    assert detect(name) is None
    assert slug_for(name) not in GPUS


# presets whose datasheet gives another part's compute by name: the same figures as that part
SAME_COMPUTE_AS = {"a800": "a100-80g", "h800": "h100-sxm", "gh200": "h100-sxm", "gh200-96g": "h100-sxm"}


def _quoted(value: float, source: str) -> bool:
    numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", source.replace(",", ""))]
    return any(abs(n - value) <= max(0.05, 0.001 * value) for n in numbers)


@pytest.mark.parametrize("slug", sorted(GPUS))
def test_datasheet_figures_are_quoted_in_their_source(slug):
    """Each preset's dense bf16 rate and memory bandwidth are the figures its source names (a
    sparse-only figure halved is quoted as both): a figure edited away from its datasheet fails."""
    gpu = GPUS[slug]
    if slug in SAME_COMPUTE_AS:
        ref = GPUS[SAME_COMPUTE_AS[slug]]
        assert gpu.bf16_tflops == ref.bf16_tflops and gpu.fp32_tflops == ref.fp32_tflops
    else:
        src = gpu.source
        assert _quoted(gpu.bf16_tflops, src) or _quoted(gpu.bf16_tflops / 1000, src), (slug, gpu.bf16_tflops)
        if not _quoted(gpu.bf16_tflops, src):
            assert "PF" in src  # quoted in petaflops
    quoted = _quoted(gpu.hbm_tbps, gpu.source) or _quoted(gpu.hbm_tbps * 1000, gpu.source)
    assert quoted or gpu.hbm_tbps == GPUS[SAME_COMPUTE_AS[slug]].hbm_tbps, (slug, gpu.hbm_tbps)
    assert 0 < gpu.fp32_tflops < gpu.bf16_tflops
