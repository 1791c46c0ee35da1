"""Launch configs of the log-prob family: the tuning search spaces and buckets (vocabulary, hidden
size and dtype, never the number of tokens), the built-in defaults per device and dtype, and the
merge with a caller's or a tuned config. Apart from ``api.py`` so the launches read on their own.
"""

from __future__ import annotations

import functools

import torch

try:  # a family folder vendored alone has no tuning store: defaults then
    from .._tuning import lookup as _tuning_lookup
except ImportError:  # pragma: no cover - exercised only when vendored
    _tuning_lookup = None

try:  # the one reading of TRITON_INTERPRET (kernels/_interpreter.py); vendored alone: triton's own knob
    from .._interpreter import check_runnable as _check_runnable
    from .._interpreter import interpreting as _interpreting
except ImportError:  # pragma: no cover - exercised only when vendored
    def _interpreting() -> bool:
        from triton import knobs

        return bool(knobs.runtime.interpret)

    def _check_runnable(tensor, name: str) -> None:
        if tensor.device.type != "cuda" and not (tensor.device.type == "cpu" and _interpreting()):
            raise ValueError(f"{name} is on {tensor.device}: these Triton kernels need CUDA tensors, or CPU "
                             "tensors under the Triton interpreter (TRITON_INTERPRET=1)")

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

# ---------------------------------------------------------------------------------------------
# Launch configs and tuning
# ---------------------------------------------------------------------------------------------

TUNING_KERNEL = "token_logprobs"
#: Search space of the logits forward kernel for ``polytrace tune``. No num_stages axis: the kernel
#: has no tl.dot for Triton to pipeline, and stages 1-4 compile to identical SASS on sm_80 and sm_90
#: (checked by tests/kernels/test_static_report.py), so the axis would only repeat measurements.
TUNING_SPACE = {
    "BLOCK_V": (4096, 8192, 16384, 32768),
    "num_warps": (4, 8, 16),
}
_VOCAB_BUCKET = 16384  # 151936 and 152064 (Qwen2.5) share a bucket; 128256 (Llama 3) has its own


def tuning_bucket(vocab_size: int, dtype) -> str:
    """Bucket of the logits forward kernel: dtype and vocabulary size rounded up to 16384. The
    number of tokens is deliberately absent (batch invariance)."""
    name = _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    v = -(-int(vocab_size) // _VOCAB_BUCKET) * _VOCAB_BUCKET
    return f"{name}-V{v}"


LINEAR_TUNING_KERNEL = "linear_token_logprobs"
#: Search space of the fused forward (a matmul with an online log-sum-exp epilogue).
LINEAR_TUNING_SPACE = {
    "BLOCK_T": (64, 128),
    "BLOCK_V": (64, 128, 256),
    "BLOCK_K": (32, 64),
    "NSPLIT": (8, 16, 32),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4),
}


def linear_tuning_bucket(vocab_size: int, hidden_size: int, dtype) -> str:
    """Bucket of the fused forward: dtype, vocabulary bucket and hidden size; never T."""
    return f"{tuning_bucket(vocab_size, dtype)}-H{int(hidden_size)}"


@functools.lru_cache(maxsize=16)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def device_capability(device) -> tuple[int, int] | None:
    """Compute capability of a CUDA device (queried once per device), None for any other device:
    the key the GPU defaults below take, so CPU tests can run each GPU's default config."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability(index)


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))


# Defaults. ``capability`` None: the CPU interpreter's (few, large blocks keep numpy fast); a
# compute capability (sm_80 and sm_90 get the same tiles today): the GPU default, which a CUDA
# launch uses unless a tuned config exists. Tests pass each capability's default as ``config`` to
# run it in the interpreter.
def default_logits_fwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_V": 1024, "num_warps": 4, "num_stages": 1}
    # Budgeted from the compiled code (scripts/static_report.py, sm_90a, triton 3.9, with entropy):
    # each block costs three block-wide reductions, so SASS instructions per logit fall with the
    # block: 4096 -> 14.9, 8192 -> 12.7, 16384 -> 11.4 (the issue budget for 4.8 TB/s is 12.9).
    # 16384 x 8 warps: 64 logits (128 B) a thread per step, 127 registers, 2 CTAs per SM, 64 KB in
    # flight per SM (Little's law at ~0.8 us needs ~30 KB); 16 warps drop to 1 CTA per SM. fp32
    # (4 B a logit, budget 25.8) keeps 2048. num_stages changes nothing here (no tl.dot to pipeline:
    # identical SASS, tests/kernels/test_static_report.py), so it is 1 and not tuned.
    return {"BLOCK_V": 16384 if dtype != torch.float32 else 2048, "num_warps": 8, "num_stages": 1}


def default_logits_bwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_V": 1024, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_V": 4096 if dtype != torch.float32 else 2048, "num_warps": 8, "num_stages": 1}


def default_linear_fwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_T": 16, "BLOCK_V": 64, "BLOCK_K": 32, "NSPLIT": 4, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_T": 64, "BLOCK_V": 64, "BLOCK_K": 32, "NSPLIT": 16, "num_warps": 4, "num_stages": 2}
    # sm_90a, triton 3.9, chosen by the compiled code (epilogue = SASS of the vocabulary loop outside
    # the K-loop and outside the target-select branch, per logit of a thread; with entropy / without;
    # triton 3.6 alike: 128x128 170 / 210 registers, epilogue 9.8 / 7.3; 64x128 200 registers, 11.0):
    # - 64x128x64, 4 warps, 3 stages: 226 / 225 registers -> 2 CTAs per SM (not 3: ptxas no longer
    #   lands at 168 once the epilogue shrank), epilogue 11.3 / 8.3 (was 20.6 / 16.9). Each K-step
    #   moves 24 KB from L2 for 1.05 MFLOP: ~22.6 TB/s of L2 at the dense bf16 peak (issue 37), so
    #   L2-bound at an estimated 1.6-2.1x the bare matmul (H100/H200 L2 ~11-14 TB/s, the estimate).
    # - 128x128x64, 8 warps, 3 stages (this default): 220 / 221 registers, 96 KB shared -> 1 CTA per
    #   SM, epilogue 10.2 / 7.2 (was 19.5 / 16.0). 32 KB per 2.1 MFLOP: 2/3 of that, 15.1 TB/s, est.
    #   1.1-1.4x bound by L2; the exposed epilogue (8 warps x 652 instructions / 4 schedulers = 1.3k
    #   cycles against 28.7k of MMA per tile at H 3584) and the per-tile pipeline refill add ~5-7%
    #   (issue), HBM is far (the weight streams once per 128-token block, from L2 otherwise).
    # 128x256 (8 warps) spills 264 B and 64x256 (4 warps) 340 B: out.
    if tuple(capability) < (9, 0):
        # sm_80 (mma.sync, no warpgroup): 64x128 spilled 36 B under triton 3.6 (0 under 3.9, 255
        # registers); 64x64x64 on 4 warps, 3 stages: 0 B under both, 214 / 168 registers (3.9 /
        # 3.6), 32 KB shared memory, 2-3 CTAs per SM
        return {"BLOCK_T": 64, "BLOCK_V": 64, "BLOCK_K": 64, "NSPLIT": 16, "num_warps": 4, "num_stages": 3}
    return {"BLOCK_T": 128, "BLOCK_V": 128, "BLOCK_K": 64, "NSPLIT": 16, "num_warps": 8, "num_stages": 3}


def default_linear_bwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_T": 16, "BLOCK_V": 32, "BLOCK_K": 32, "GROUP": 4, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_T": 64, "BLOCK_V": 64, "BLOCK_K": 32, "GROUP": 8, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_T": 128, "BLOCK_V": 128, "BLOCK_K": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3}


def dot_precision(dtype, fp32_precision: str = "tf32") -> str | None:
    """tl.dot input precision of the fused kernels (``api._dot_precision``): tf32 for fp32 inputs
    unless "ieee" (exact) is asked; None (the default) for bf16/fp16."""
    return fp32_precision if dtype == torch.float32 else None


def _logits_fwd_default(dtype, device) -> dict:
    return default_logits_fwd_config(dtype, device_capability(device))


def _logits_bwd_default(dtype, device) -> dict:
    return default_logits_bwd_config(dtype, device_capability(device))


def _linear_fwd_default(dtype, device) -> dict:
    return default_linear_fwd_config(dtype, device_capability(device))


def _linear_bwd_default(dtype, device) -> dict:
    return default_linear_bwd_config(dtype, device_capability(device))


def _resolve_config(kernel_name: str, bucket: str, device, default: dict, config: dict | None,
                    argname: str = "config") -> dict:
    if config is not None:
        if not isinstance(config, dict):
            raise ValueError(f"{argname} must be a dict or None, got {type(config).__name__}")
        unknown = sorted(set(config) - set(default))
        if unknown:
            raise ValueError(f"{argname} has unknown key(s) {unknown}; valid keys: {sorted(default)}")
        for key, value in config.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{argname}[{key!r}] must be a positive int, got {value!r}")
        merged = dict(default)
        merged.update(config)
        return merged
    if device.type == "cuda" and _tuning_lookup is not None:
        return _tuning_lookup(kernel_name, bucket, _device_name(device.index or 0), default)
    return dict(default)


def _check_block(cfg: dict, key: str, argname: str, minimum: int = 16) -> None:
    v = cfg[key]
    if v < minimum or v & (v - 1):
        raise ValueError(f"{argname}[{key!r}] must be a power of two >= {minimum}, got {v}")
