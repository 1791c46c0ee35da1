"""Attention over packed variable-length sequences (log-prob / update stages) and split-KV decode
(rollout), with a longest-first work list for long-tailed RL batches. See ``api.py``."""

from .api import (
    SCHEDULES,
    TUNING_SPACE,
    VarlenPlan,
    build_work_list,
    choose_split_tokens,
    clear_plan_cache,
    decode_attention,
    default_bwd_config,
    default_decode_config,
    default_fwd_config,
    short_fwd_config,
    tuning_bucket,
    varlen_attention,
    varlen_plan,
)
from .reference import decode_attention_reference, varlen_attention_reference

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
