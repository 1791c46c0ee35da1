"""Bad and unusual input to the packing kernels' and the micro-batch planner's public APIs (tiny
shapes, CPU interpreter).

Every case either matches the pure-torch reference or raises a ValueError whose message names the
offending argument: never a silent wrong answer, never an IndexError or a Triton error for a user
mistake. Trusted packing sizes, which the host does not check (no device sync), must keep the
kernels inside the buffers. The other kernel families' cases are in the sibling
``test_kernel_bad_input_*.py`` files, the helpers they share in ``_bad_input.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _bad_input import _gen, _raises

from polytrace_kernels.packing import api as packing
from polytrace_kernels.packing.planner import balance_partitions, plan_microbatches
from polytrace_kernels.packing.reference import pack_reference, unpack_reference

# ---------------------------------------------------------------------------------------------
# packing
# ---------------------------------------------------------------------------------------------

PADDED = torch.randn(3, 6, 2, 4, generator=_gen(13))
LENGTHS = torch.tensor([2, 0, 6])
PACKED, CU_PACKED, _ = pack_reference(PADDED, LENGTHS)

PACK_ERRORS = {
    "negative-length": (lambda: packing.pack(PADDED, torch.tensor([2, -1, 6])), "lengths"),
    "length-above-S": (lambda: packing.pack(PADDED, torch.tensor([2, 7, 6])), "lengths"),
    "float-lengths": (lambda: packing.pack(PADDED, torch.tensor([2.0, 1.0, 6.0])), "lengths"),
    "list-lengths": (lambda: packing.pack(PADDED, [2, 0, 6]), "lengths"),
    "meta-lengths": (lambda: packing.pack(PADDED, LENGTHS.to("meta")), "lengths"),
    "total_tokens-float": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=8.5, max_seqlen=6), "total_tokens"),
    "total_tokens-wrong": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=3, max_seqlen=6), "total_tokens"),
    "max_seqlen-negative": (lambda: packing.pack(PADDED, LENGTHS, total_tokens=8, max_seqlen=-2), "max_seqlen"),
    "max_seqlen-too-small": (lambda: packing.pack(PADDED, LENGTHS, max_seqlen=4), "max_seqlen"),
    "unpack-max_len-negative": (lambda: packing.unpack(PACKED, CU_PACKED, -1), "max_len"),
    "unpack-cu-float": (lambda: packing.unpack(PACKED, CU_PACKED.float(), 6), "cu_seqlens"),
    "unpack-cu-negative-step": (lambda: packing.unpack(PACKED, torch.tensor([0, 2, 1, 8]), 6), "cu_seqlens"),
    "unpack-cu-not-ending-at-T": (lambda: packing.unpack(PACKED, torch.tensor([0, 2, 2, 12]), 6), "cu_seqlens"),
    "unpack-cu-not-starting-at-0": (lambda: packing.unpack(PACKED, torch.tensor([1, 2, 2, 8]), 6), "cu_seqlens"),
    "unpack-0d": (lambda: packing.unpack(torch.tensor(1.0), CU_PACKED, 6), "packed"),
}


@pytest.mark.parametrize("case", sorted(PACK_ERRORS))
def test_packing_bad_input_names_the_argument(case):
    _raises(*PACK_ERRORS[case])


@pytest.mark.parametrize("name", ["transposed", "expanded", "int32-lengths", "stride0-lengths", "strided-cu",
                                  "numpy-max_len", "zero-batch", "zero-features"])
def test_packing_views_match_reference(name):
    padded, lengths, cu, max_len = PADDED, LENGTHS, None, 6
    if name == "transposed":
        padded = torch.randn(6, 3, 5, generator=_gen(14)).transpose(0, 1)
    elif name == "expanded":
        padded = torch.randn(1, 6, 5, generator=_gen(15)).expand(3, -1, -1)
    elif name == "int32-lengths":
        lengths = LENGTHS.int()
    elif name == "stride0-lengths":
        lengths = torch.tensor([3]).expand(3)
    elif name == "strided-cu":
        cu = torch.stack([CU_PACKED, CU_PACKED], 1).reshape(-1)[::2]
    elif name == "numpy-max_len":
        max_len = np.int64(6)
    elif name == "zero-batch":
        padded, lengths = PADDED[:0], LENGTHS[:0]
    elif name == "zero-features":
        padded = PADDED[..., :0]
    packed, cu_out, m = packing.pack(padded, lengths)
    ref, ref_cu, ref_m = pack_reference(padded, lengths)
    assert torch.equal(packed, ref) and torch.equal(cu_out, ref_cu) and m == ref_m
    out = packing.unpack(packed, cu_out if cu is None else cu, max_len)
    assert torch.equal(out, unpack_reference(ref, ref_cu, int(max_len)))


def test_packing_kernels_stay_inside_the_buffers_with_unchecked_sizes():
    # Device-side sizes are trusted (no sync): a wrong total or cu_seqlens must neither write nor
    # read outside the tensors; the rows that do fit are still right.
    padded3 = PADDED.reshape(3, 6, 8)
    cu = packing.cu_seqlens_from_lengths(LENGTHS)
    short = packing._launch_pack(padded3, cu, 3, None)
    assert torch.equal(short, PACKED.reshape(8, 8)[:3])
    bad_cu = torch.tensor([0, 2, 2, 12], dtype=torch.int32)  # ends past T = 8
    out = packing._launch_unpack(PACKED.reshape(8, 8), bad_cu, 12, None)
    expected = torch.zeros(3, 12, 8)
    expected[0, :2] = PACKED.reshape(8, 8)[:2]
    expected[2, :6] = PACKED.reshape(8, 8)[2:8]
    assert torch.equal(out, expected)


# ---------------------------------------------------------------------------------------------
# planner
# ---------------------------------------------------------------------------------------------

PLANNER_ERRORS = {
    "negative-length": (lambda: balance_partitions([5, -1], 2), "seqlens"),
    "non-integer-length": (lambda: balance_partitions([1.5, 2], 2), "seqlens"),
    "nan-length": (lambda: balance_partitions([float("nan")], 2), "seqlens"),
    "huge-float-length": (lambda: balance_partitions([1e30], 2), "too large"),
    "uint64-overflow": (lambda: balance_partitions(np.array([2**63 + 5], dtype=np.uint64), 2), "too large"),
    "string-lengths": (lambda: balance_partitions(["a"], 2), "seqlens"),
    "2d-lengths": (lambda: balance_partitions([[1, 2], [3, 4]], 2), "seqlens"),
    "scalar-lengths": (lambda: balance_partitions(5, 2), "seqlens"),
    "k-0": (lambda: balance_partitions([1, 2], 0), "k"),
    "k-float": (lambda: balance_partitions([1, 2], 2.0), "k"),
    "k-bool": (lambda: balance_partitions([1, 2], True), "k"),
    "max_tokens-too-small": (lambda: balance_partitions([10, 2], 2, max_tokens=5), "max_tokens"),
    "equal_size-not-bool": (lambda: balance_partitions([1, 2, 3], 2, equal_size="yes"), "equal_size"),
    "cost-unknown": (lambda: balance_partitions([1, 2], 2, cost="flops"), "cost"),
    "dp_ranks-0": (lambda: plan_microbatches([1, 2], 0, 10), "dp_ranks"),
    "budget-0": (lambda: plan_microbatches([1, 2], 1, 0), "max_tokens_per_microbatch"),
    "budget-below-sequence": (lambda: plan_microbatches([1, 20], 1, 10), "max_tokens_per_microbatch"),
    "plan-non-integer-length": (lambda: plan_microbatches([1, 2.5], 1, 10), "seqlens"),
    "plan-equal_size-not-bool": (lambda: plan_microbatches([1, 2], 1, 10, equal_size=1), "equal_size"),
}


@pytest.mark.parametrize("case", sorted(PLANNER_ERRORS))
def test_planner_bad_input_names_the_argument(case):
    _raises(*PLANNER_ERRORS[case])


def test_planner_accepts_integral_floats_numpy_and_torch():
    for seqlens in ([5.0, 3.0, 8.0], np.array([5, 3, 8], dtype=np.uint16), torch.tensor([5, 3, 8])):
        parts = balance_partitions(seqlens, np.int64(2))
        assert sorted(i for p in parts for i in p) == [0, 1, 2]
    assert balance_partitions([], 3) == [[], [], []]
