"""Sequence packing: the micro-batch planner (numpy only) and Triton pack/unpack kernels.

``from polytrace_kernels.packing import plan_microbatches`` imports numpy only; ``pack``/``unpack`` (torch and
Triton) are imported on first use.
"""

from __future__ import annotations

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


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
