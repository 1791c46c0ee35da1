"""Sequence packing: the micro-batch planner (numpy only) and Triton pack/unpack kernels.

``from polytrace_kernels.packing import plan_microbatches`` imports numpy only; ``pack``/``unpack`` (torch and
Triton) are imported on first use.
"""

from __future__ import annotations

from .._lazy import lazy_exports
from .planner import (
    ALGORITHMS,
    ATTENTION_COEF,
    DEFAULT_ALGORITHM,
    PartitionReport,
    Plan,
    attention_cost,
    balance_partitions,
    bubble_order,
    plan_microbatches,
    plan_stats,
    sequence_costs,
)

_LAZY = {"pack": "api", "unpack": "api", "cu_seqlens_from_lengths": "api",
         "pack_reference": "reference", "unpack_reference": "reference"}

__all__ = [
    "ALGORITHMS", "ATTENTION_COEF", "DEFAULT_ALGORITHM", "PartitionReport", "Plan", "attention_cost",
    "balance_partitions", "bubble_order", "plan_microbatches", "plan_stats", "sequence_costs", *_LAZY,
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
