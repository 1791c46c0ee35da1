"""The single-launch decode path's size boundary (``kernels/attention/api.py``): one split per row,
no combine, once the rows (sequences x KV heads) reach SINGLE_LAUNCH_WAVES x SMs and the cache is
at most SINGLE_LAUNCH_MAX_LEN tokens; one row fewer, or one token more, splits. At the boundary and
one past it, on the chooser and on the launches themselves (the interpreter's device has 8 SMs)."""

from __future__ import annotations

import pytest
import torch
from _footprint import watch_kernels
from test_attention import check_decode

from polytrace_kernels.attention.api import SINGLE_LAUNCH_MAX_LEN, SINGLE_LAUNCH_WAVES, choose_split_tokens

SMS, HKV, BLOCK_N = 132, 8, 64
AT = SINGLE_LAUNCH_WAVES * SMS // HKV  # sequences whose rows are exactly 4 waves: 66 on an H100


def test_the_boundary_constants_are_what_the_tests_assume():
    assert SINGLE_LAUNCH_WAVES == 4 and SINGLE_LAUNCH_MAX_LEN == 4096 and AT * HKV == SINGLE_LAUNCH_WAVES * SMS


@pytest.mark.parametrize("batch, max_len, single", [
    (AT, SINGLE_LAUNCH_MAX_LEN, True),  # both at the boundary: one split of the whole cache
    (AT - 1, SINGLE_LAUNCH_MAX_LEN, False),  # one sequence (8 rows) fewer
    (AT, SINGLE_LAUNCH_MAX_LEN + 1, False),  # one token more
    (AT, SINGLE_LAUNCH_MAX_LEN - BLOCK_N + 1, True),
])
def test_the_chooser_at_the_boundary_and_one_past(batch, max_len, single):
    split = choose_split_tokens(batch, HKV, max_len, BLOCK_N, SMS)
    whole = -(-max_len // BLOCK_N) * BLOCK_N
    assert (split == whole) == single, (split, whole)
    if not single:
        assert split <= 2048 < max_len  # split: at least two splits per row of the longest cache


def test_rows_one_short_of_the_boundary_split_by_one_row():
    """Rows counted as sequences x KV heads: 4 x 132 - 1 rows split, 4 x 132 do not."""
    assert choose_split_tokens(SINGLE_LAUNCH_WAVES * SMS, 1, 4096, BLOCK_N, SMS) == 4096
    assert choose_split_tokens(SINGLE_LAUNCH_WAVES * SMS - 1, 1, 4096, BLOCK_N, SMS) < 4096


@pytest.mark.parametrize("batch, splits", [(32, 1), (31, 3)])
def test_the_launches_at_the_boundary_and_one_row_short(batch, splits):
    """The interpreter reports 8 SMs: 32 rows (4 waves) run in one launch, 31 rows split a 513-token
    cache into 3 with the combine kernel; both match the reference. 513 is the shortest cache of 3
    splits (the smallest split is 256 tokens: the last split holds token 512 of the longest row)."""
    gen = torch.Generator().manual_seed(batch)
    hkv, hq, d, max_len = 1, 2, 16, 513
    q = torch.randn(batch, hq, d, generator=gen).half()
    kc = torch.randn(batch, max_len, hkv, d, generator=gen).half()
    vc = torch.randn(batch, max_len, hkv, d, generator=gen).half()
    lens = torch.randint(0, max_len + 1, (batch,), generator=gen, dtype=torch.int32)
    lens[0] = max_len
    with watch_kernels() as rec:
        check_decode(q, kc, vc, lens, config={"SPLIT_TOKENS": 0})
    assert rec.one("decode_split_kernel").grid == (splits, batch * hkv)
    assert len(rec.of("decode_combine_kernel")) == (0 if splits == 1 else 1)
