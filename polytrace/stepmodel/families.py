"""The kernel families the suites measure and the step model prices: one registry line each.

A family is a folder of ``kernels/`` (``kernels/<family>/spec.py``: FLOPs and bytes in pure
Python, importable without torch or triton) plus one ``KernelFamily`` line in ``REGISTRY``
below. The line names:

- ``name``: the step model's family (a part of a stage, ``--speedup``/``--provider`` key);
- ``results_family`` and ``kernels``: ``extra_info.family`` / ``extra_info.kernel`` of the result
  files whose timings price it (what ``polytrace gate`` compares them by, too);
- ``sizes``: per kernel, the ``spec.py`` function giving its problem size on the axis the suite
  records (``flops`` or ``bytes_moved``), so a query lands where the measurements are;
- ``default_provider``: the provider priced unless ``--provider`` says otherwise;
- ``suite``: the suites registry id (``suites/registry.py`` ``SUITES``; ``polytrace bench --suite``);
- ``trainer_work`` (a new family): ``(work) -> (kernel, mode, size per micro-batch)`` for a
  trainer pass (``Work``), and ``roofline`` (``hbm`` or ``bf16``): the step model prices it with
  ``Pricer.family`` in every forward and update pass, from its timings or at the roofline. The
  built-in families have ``trainer_work=None``: ``Pricer`` has a method for each (their work
  spans the rollout and trainer and needs the model's layer shapes).

See docs/adding-a-kernel-family.md. ``registered`` adds a family for the length of a ``with``
(the toy-family test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from polytrace_kernels.attention import spec as attention_spec
from polytrace_kernels.logprob import spec as logprob_spec
from polytrace_kernels.packing import spec as packing_spec

from ..run.models import ModelSpec


@dataclass(frozen=True)
class Work:
    """One trainer pass's work on a GPU, per micro-batch (arrays over the ranks' optimizer steps)."""

    model: ModelSpec
    tokens: np.ndarray  # tokens of a micro-batch
    sequences: np.ndarray  # sequences of a micro-batch
    longest: np.ndarray  # longest sequence (the padded length of unpacked outputs)
    n_micro: np.ndarray  # micro-batches of the pass
    tp: int = 1
    backward: bool = False

    @property
    def mode(self) -> str:
        return "fwd+bwd" if self.backward else "fwd"


@dataclass(frozen=True)
class KernelFamily:
    name: str
    results_family: str
    sizes: Mapping[str, Callable | None]  # kernel -> spec function of its problem size (None: no spec)
    default_provider: str = "ours"
    suite: str | None = None
    trainer_work: Callable[[Work], tuple[str, str, object]] | None = None
    roofline: str = "hbm"  # a new family's unmeasured price: its size over hbm bandwidth or bf16 FLOP/s
    spec: object = field(default=None, repr=False)  # the family's spec module

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(self.sizes)


REGISTRY: dict[str, KernelFamily] = {f.name: f for f in (
    # a baseline: torch / cuBLAS, no kernel of ours; sizes from the model's layers (pricing.linear_layers)
    KernelFamily("gemm", "gemm", {"linear": None}, "torch", "gemm"),
    KernelFamily("attention", "attention", {"varlen_attention": attention_spec.attention_flops_from_pairs},
                 "ours", "attention", spec=attention_spec),
    KernelFamily("decode", "attention", {"decode_attention": attention_spec.decode_attention_bytes_from_totals},
                 "ours", "attention", spec=attention_spec),
    # a stock verl run: logits, then log-softmax and entropy in eager torch
    KernelFamily("logprob", "logprob", {"token_logprobs": logprob_spec.logits_bytes,
                                        "linear_token_logprobs": logprob_spec.matmul_flops},
                 "torch-eager", "logprob", spec=logprob_spec),
    KernelFamily("packing", "packing", {"pack": packing_spec.pack_bytes, "unpack": packing_spec.unpack_bytes,
                                        "plan_microbatches": None}, "ours", "packing", spec=packing_spec),
)}


def size_fn(family: str, kernel: str) -> Callable:
    """The spec function giving ``kernel``'s problem size (``REGISTRY[family].sizes``)."""
    fn = REGISTRY[family].sizes[kernel]
    if fn is None:
        raise KeyError(f"{family}/{kernel} has no spec size function")
    return fn


def trainer_families() -> list[KernelFamily]:
    """The registered families the step model prices generically in each trainer pass."""
    return [f for f in REGISTRY.values() if f.trainer_work is not None]


@contextmanager
def registered(family: KernelFamily) -> Iterator[KernelFamily]:
    """``family`` in the registry inside the ``with`` (a toy family in a test), removed after."""
    if family.name in REGISTRY:
        raise ValueError(f"kernel family {family.name!r} is registered already")
    REGISTRY[family.name] = family
    try:
        yield family
    finally:
        del REGISTRY[family.name]


__all__ = ["REGISTRY", "KernelFamily", "Work", "registered", "size_fn", "trainer_families"]
