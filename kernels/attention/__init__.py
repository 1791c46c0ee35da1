"""Attention over packed variable-length sequences (log-prob / update stages) and split-KV decode
(rollout), with a longest-first work list for long-tailed RL batches. See ``api.py``."""

from __future__ import annotations

from .._lazy import lazy_exports

# The public names, imported on first use (PEP 562): ``from polytrace_kernels.attention import spec``
# (FLOPs and bytes, pure Python) must not pull in torch and triton, which ``api`` and ``reference`` do.
_LAZY = {
    "SCHEDULES": "api",
    "TUNING_SPACE": "api",
    "VarlenPlan": "api",
    "build_work_list": "api",
    "choose_split_tokens": "api",
    "clear_plan_cache": "api",
    "decode_attention": "api",
    "decode_attention_reference": "reference",
    "default_bwd_config": "api",
    "default_decode_config": "api",
    "default_fwd_config": "api",
    "short_fwd_config": "api",
    "tuning_bucket": "api",
    "varlen_attention": "api",
    "varlen_attention_reference": "reference",
    "varlen_plan": "api",
}

__all__ = [
    "SCHEDULES",
    "TUNING_SPACE",
    "VarlenPlan",
    "build_work_list",
    "choose_split_tokens",
    "clear_plan_cache",
    "decode_attention",
    "decode_attention_reference",
    "default_bwd_config",
    "default_decode_config",
    "default_fwd_config",
    "short_fwd_config",
    "tuning_bucket",
    "varlen_attention",
    "varlen_attention_reference",
    "varlen_plan",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
