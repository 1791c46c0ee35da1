"""Triton kernels: copy rows between a right-padded [B, S, F] tensor and a packed [T, F] one.

Row ``t`` of sequence ``b`` lives at ``padded[b, t]`` and at ``packed[cu_seqlens[b] + t]``. One
program handles BLOCK_T rows x BLOCK_F features of one sequence; rows past the sequence's length
are masked (pack) or written as zeros (unpack), so no memset of the output is needed.
"""

import triton
import triton.language as tl


@triton.jit
def _pack_kernel(padded_ptr, packed_ptr, cu_ptr, T, S, F, stride_pb, stride_ps,
                 BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr):
    b = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_f = tl.program_id(2)
    start = tl.load(cu_ptr + b).to(tl.int64)
    length = tl.load(cu_ptr + b + 1).to(tl.int64) - start
    length = tl.minimum(length, S)
    t0 = pid_t * BLOCK_T
    if t0 < length:
        rows = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
        cols = pid_f * BLOCK_F + tl.arange(0, BLOCK_F).to(tl.int64)
        # packed rows outside [0, T): a trusted total_tokens smaller than the lengths' sum must not
        # write past the output
        dst_row = start + rows
        mask = (rows[:, None] < length) & (cols[None, :] < F) & (dst_row[:, None] >= 0) & (dst_row[:, None] < T)
        src = padded_ptr + b.to(tl.int64) * stride_pb + rows[:, None] * stride_ps + cols[None, :]
        vals = tl.load(src, mask=mask)
        dst = packed_ptr + (start + rows[:, None]) * F + cols[None, :]
        tl.store(dst, vals, mask=mask)


@triton.jit
def _unpack_kernel(packed_ptr, padded_ptr, cu_ptr, T, S, F, stride_pb, stride_ps,
                   BLOCK_T: tl.constexpr, BLOCK_F: tl.constexpr):
    b = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_f = tl.program_id(2)
    start = tl.load(cu_ptr + b).to(tl.int64)
    length = tl.load(cu_ptr + b + 1).to(tl.int64) - start
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    cols = pid_f * BLOCK_F + tl.arange(0, BLOCK_F).to(tl.int64)
    in_bounds = (rows[:, None] < S) & (cols[None, :] < F)
    src_row = start + rows  # cu_seqlens from the device are not checked: never read outside [0, T)
    valid = in_bounds & (rows[:, None] < length) & (src_row[:, None] >= 0) & (src_row[:, None] < T)
    src = packed_ptr + (start + rows[:, None]) * F + cols[None, :]
    vals = tl.load(src, mask=valid, other=0)
    dst = padded_ptr + b.to(tl.int64) * stride_pb + rows[:, None] * stride_ps + cols[None, :]
    tl.store(dst, vals, mask=in_bounds)
