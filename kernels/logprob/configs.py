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
#: Search space of the logits forward kernel for ``polytrace tune``. num_stages only matters
#: where Triton pipelines the block loads; BLOCK_V 4096 bf16 = 8 KB per row and step.
TUNING_SPACE = {
    "BLOCK_V": (1024, 2048, 4096, 8192, 16384),
    "num_warps": (4, 8, 16),
    "num_stages": (1, 2, 3, 4),
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
    # 8 KB (bf16) or 8 KB (fp32, 2048) per row and step: 16 bytes per thread per load at 8 warps
    return {"BLOCK_V": 4096 if dtype != torch.float32 else 2048, "num_warps": 8, "num_stages": 2}


def default_logits_bwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_V": 1024, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_V": 4096 if dtype != torch.float32 else 2048, "num_warps": 8, "num_stages": 1}


def default_linear_fwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_T": 16, "BLOCK_V": 64, "BLOCK_K": 32, "NSPLIT": 4, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_T": 64, "BLOCK_V": 64, "BLOCK_K": 32, "NSPLIT": 16, "num_warps": 4, "num_stages": 2}
    # 128 x 128 x 64 bf16 tiles, 3 stages = 96 KB shared memory: two programs per H100/H200 SM
    return {"BLOCK_T": 128, "BLOCK_V": 128, "BLOCK_K": 64, "NSPLIT": 16, "num_warps": 8, "num_stages": 3}


def default_linear_bwd_config(dtype, capability: tuple[int, int] | None = None) -> dict:
    if capability is None:
        return {"BLOCK_T": 16, "BLOCK_V": 32, "BLOCK_K": 32, "GROUP": 4, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_T": 64, "BLOCK_V": 64, "BLOCK_K": 32, "GROUP": 8, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_T": 128, "BLOCK_V": 128, "BLOCK_K": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3}


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
