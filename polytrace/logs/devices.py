"""What a log says about its accelerators: device names printed by torch, vLLM, Ray or nvidia-smi
(``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X``, ``Ascend910B3``), and the platform where no
name is printed (``vllm_ascend`` / ``torch_npu`` lines say Ascend NPUs, ``ROCm`` / ``gfx942`` say
AMD, vLLM's ``detected platform cuda`` says NVIDIA).

Only evidence is gathered here; ``polytrace.calibrate.identity`` decides what it means for
``--gpu``. Every item names its line (or file), so a decision can say where it was read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A device name as torch.cuda.get_device_name / nvidia-smi print it. Each alternative starts with
# a literal and is bounded, so a long line cannot make it slow.
_NVIDIA = re.compile(
    r"\bNVIDIA\s{1,3}("
    r"GeForce\s{1,3}RTX\s{1,3}\d{4}(?:\s{1,3}(?:Ti|SUPER|D))?"
    r"|RTX\s{1,3}PRO\s{1,3}\d{4}(?:\s{1,3}Blackwell(?:\s{1,3}(?:Server|Workstation|Max-Q)(?:\s{1,3}Edition)?)?)?"
    r"|RTX\s{1,3}A?\d{4}(?:\s{1,3}Ada(?:\s{1,3}Generation)?)?"
    r"|(?:GB|GH|[ABHLTV])\d{1,3}[A-Z]?(?:[-\s](?:SXM\d?|PCIE|PCIe|NVL|\d{2,3}GB|\d{2,3}G|HBM3e?|HBM2e?)){0,3}"
    r")(?!\w|\.\d)")
_AMD = re.compile(r"\b(?:AMD\s{1,3}(?:Instinct\s{1,3})?)?(MI[123]\d{2}[AXP]?)\b"
                  r"|\bAMD\s{1,3}(Radeon\s{1,3}[\w ]{1,30}?)\s*(?:$|[,;|(])")
_ASCEND = re.compile(r"\b(Ascend\s?910[A-Z]?\d?(?:_\d{4})?)\b")
# platform words: (pattern, platform)
_PLATFORM = (
    (re.compile(r"\bvllm_ascend\b|\btorch_npu\b|\bNPU_VISIBLE_DEVICES\b|\bASCEND_RT_VISIBLE_DEVICES\b|"
                r"\bnpu:\d\b|detected platform npu|Platform plugin ascend"), "npu"),
    (re.compile(r"\bROCm\b|\bHIP_VISIBLE_DEVICES\b|\bhipError|detected platform rocm|\btorch\.version\.hip\b"), "rocm"),
    (re.compile(r"detected platform cuda|\bCUDA_VISIBLE_DEVICES\b|\bNCCL version\b"), "cuda"),
)
# The inference engine's loop where a log names it (``calibrate/engine.py`` decides): vLLM's V1
# classes in a worker's warning or traceback, ``VLLM_USE_V1`` (vLLM 0.7-0.10's switch), an attention
# backend V1 did not run (vLLM 0.8's XFORMERS falls back to V0), and a stated vLLM version
# ("vllm==0.8.3", "vLLM version 0.11.0", "vLLM 0.8.5"; not "vllm<=0.6.3", a bound in a comment).
_ENGINE = (
    (re.compile(r"\bvllm\.v1\.(?:worker|engine|executor|core)\b"), "vllm-v1"),
    (re.compile(r"\bVLLM_USE_V1=[\"']?1\b"), "vllm-v1"),
    (re.compile(r"\bVLLM_USE_V1=[\"']?0\b"), "vllm-v0"),
    (re.compile(r"\bVLLM_ATTENTION_BACKEND=[\"']?XFORMERS\b|Falling back to V0\b"), "vllm-v0"),
)
_VLLM_VERSION = re.compile(r"\bvllm(?:==|\s{1,3}version\s{1,3}|\s{1,3}v?)(0\.\d{1,2}(?:\.\d{1,2})?)(?![\w.])", re.I)
# AMD architectures as ROCm prints them: one chip each, or a pair sharing one.
GFX_ARCH = {"gfx90a": ("mi250x",), "gfx942": ("mi300x", "mi325x"), "gfx950": ("mi355x",)}
_GFX = re.compile(r"\b(gfx9[0-9a-f]{2})\b")


@dataclass(frozen=True)
class Evidence:
    # "device" (a device name), "platform" ("npu", "rocm", "cuda"), "arch" (an AMD gfx target), "engine"
    # (the inference engine's loop: "vllm-v1" or "vllm-v0") or "vllm" (a stated vLLM version)
    kind: str
    value: str  # the device name as printed, or the platform
    where: str  # "line 12" or a companion file's path
    text: str = ""  # what matched

    def say(self) -> str:
        return f"{self.text or self.value!r} at {self.where}" if self.where.startswith("line") else \
            f"{self.text or self.value!r} in {self.where}"


def scan_lines(lines) -> list[Evidence]:
    """Evidence from ``(line number, text)`` pairs: the first sighting of each device name and of
    each platform, in order."""
    out: list[Evidence] = []
    seen: set[tuple[str, str]] = set()

    def add(kind, value, number, text):
        key = (kind, value.lower())
        if key not in seen:
            seen.add(key)
            out.append(Evidence(kind, value, f"line {number}", text))

    for number, text in lines:
        if len(text) > 20_000:
            continue
        if "NVIDIA" in text:
            for m in _NVIDIA.finditer(text):
                add("device", "NVIDIA " + " ".join(m.group(1).split()), number, m.group(0))
        if "AMD" in text or "MI" in text:
            for m in _AMD.finditer(text):
                name = m.group(1) or m.group(2)
                add("device", "AMD Instinct " + name if m.group(1) else "AMD " + name.strip(), number, m.group(0))
        if "scend" in text:
            for m in _ASCEND.finditer(text):
                add("device", m.group(1).replace(" ", ""), number, m.group(0))
        if "gfx9" in text:
            for m in _GFX.finditer(text):
                add("platform", "rocm", number, m.group(1))
                add("arch", m.group(1), number, m.group(1))
        for pattern, platform in _PLATFORM:
            m = pattern.search(text)
            if m:
                add("platform", platform, number, m.group(0))
        if ("vllm" in text or "VLLM" in text or "vLLM" in text) and not text.lstrip().startswith("#"):
            for pattern, engine in _ENGINE:
                m = pattern.search(text)
                if m:
                    add("engine", engine, number, m.group(0))
            m = _VLLM_VERSION.search(text)
            if m:
                add("vllm", m.group(1), number, m.group(0))
    return out
