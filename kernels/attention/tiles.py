"""Tile helpers shared by the varlen kernels (``kernel.py``) and the decode kernels
(``kernel_decode.py``): a masked [rows, D] load and a tanh for the softcap."""

import triton
import triton.language as tl


@triton.jit
def _load_tile(ptrs, row_mask, offs_d, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, MASK_ROWS: tl.constexpr):
    # Masks only where needed: an unmasked load of full rows vectorises to 16-byte accesses.
    if MASK_ROWS:
        if EVEN_D:
            t = tl.load(ptrs, mask=row_mask[:, None], other=0.0)
        else:
            t = tl.load(ptrs, mask=row_mask[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)
    else:
        if EVEN_D:
            t = tl.load(ptrs)
        else:
            t = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return t


@triton.jit
def _tanh(x):
    # finite for every x (+-1 at the ends), abs. error ~1e-7; Triton 3.6-3.9 have no portable tl tanh
    return 1.0 - 2.0 / (tl.math.exp2(x * 2.8853900817779268) + 1.0)

