"""Triton kernels for attention over packed variable-length sequences (the split-KV decode kernels
live in ``kernel_decode.py`` and are re-exported here; the shared tile helpers in ``tiles.py``).

Layout: packed ``[T, H, D]`` tensors (flash-attn's varlen layout), int32 prefix sums
``cu_seqlens`` starting at 0. Scores are computed in the log2 domain (``qk_scale_log2`` =
softmax_scale * log2(e), so ``exp2`` replaces ``exp``); the log-sum-exp is stored in natural log
(flash-attn's convention) as ``[H, T]`` fp32, ``+inf`` for a row that sees no key (its output is 0).

Causal alignment is bottom-right (flash-attn >= 2.1): query row ``i`` of a sequence sees key ``j``
iff ``j <= i + (len_k - len_q)``.

Work lists: the forward and dQ kernels take one program per (work slot, query head); a slot is a
(sequence, query block) pair read from ``work_seq``/``work_block`` (built on the device by
``api.py``, longest tile first). Slots past the real number of tiles hold ``-1`` and exit at once.
The dK/dV kernel does the same over key blocks. Every tile's arithmetic depends only on its own
sequence, so a sequence's output is bitwise the same alone or packed with others.
"""

import triton
import triton.language as tl

from .kernel_decode import decode_combine_kernel as decode_combine_kernel
from .kernel_decode import decode_split_kernel as decode_split_kernel
from .tiles import _load_tile, _tanh

LOG2E = 1.4426950408889634  # softcap c: scores c tanh(s / c), in log2 units (api.py passes scale / c, c log2 e)
# Offsets: a position inside a sequence (query row, key column) times a token stride is widened
# to int64 before the product: max_seqlen x heads x head_dim reaches 2^31 at 128k tokens x 128
# heads x 128 (and 1M tokens x 16 x 128). Head and tile indices stay int32 (heads x D < 2^31).
LN2 = 0.6931471805599453


@triton.jit
def _in_window(rows, cols, diag, win_left, win_right):  # flash-attn's window_size=(left, right), bottom-right
    return (cols >= rows + diag - win_left) & (cols <= rows + diag + win_right)


@triton.jit
def _key_range(m0, k_len, diag, win_left, win_right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """Key blocks of query block m0: (first, one past the last, end of the unmasked run)."""
    if WINDOW:  # every block masked: [first key row m0 sees, one past the last key row m0 + BLOCK_M - 1 sees)
        lo = (tl.maximum(m0 + diag - win_left, 0) // BLOCK_N) * BLOCK_N
        return lo, tl.maximum(tl.minimum(k_len, m0 + BLOCK_M + diag + win_right), 0), lo
    end_n, full_end = k_len, k_len
    if CAUSAL:
        end_n = tl.minimum(k_len, m0 + BLOCK_M + diag)  # one past the last key the block's last row sees
        full_end = tl.minimum(k_len, m0 + diag + 1)  # every row of the block sees keys below this
    return 0, tl.maximum(end_n, 0), (tl.maximum(full_end, 0) // BLOCK_N) * BLOCK_N


@triton.jit
def _fwd_step(acc, m_i, l_i, q, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
              stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
              HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    cols = start_n + offs_n
    col_mask = cols < k_len
    k = _load_tile(K_base + cols[:, None].to(tl.int64) * stride_kt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)
    qk = tl.dot(q, tl.trans(k))
    if SOFTCAP:
        qk = _tanh(qk * softcap_in) * softcap_out
    if MASKED:
        allowed = col_mask[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + diag)
        if WINDOW:
            allowed = allowed & _in_window(offs_m[:, None], cols[None, :], diag, win_left, win_right)
        qk = tl.where(allowed, qk, float("-inf"))
    if SOFTCAP:
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale_log2)
        p = tl.math.exp2(qk * qk_scale_log2 - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load_tile(V_base + cols[:, None].to(tl.int64) * stride_vt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def varlen_fwd_kernel(
    Q, K, V, O, LSE,
    cu_seqlens_q, cu_seqlens_k, work_seq, work_block,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh,
    qk_scale_log2, n_slots, n_heads_q, group,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HEADS_INNER: tl.constexpr, EVEN_D: tl.constexpr,
):
    # the default launch: softcap and window compiled out (kernel_ext.py launches them)
    _varlen_fwd(Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh, stride_kt,
                stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh, qk_scale_log2, n_slots, n_heads_q,
                group, 0.0, 0.0, 0, 0, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL, HEADS_INNER, EVEN_D, False, False)


@triton.jit
def _varlen_fwd(Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh, stride_kt,
                stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh, qk_scale_log2, n_slots, n_heads_q,
                group, softcap_in, softcap_out, win_left, win_right, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HEADS_INNER: tl.constexpr,
                EVEN_D: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    pid = tl.program_id(0)
    if HEADS_INNER:
        # consecutive programs = the query heads of one tile: a GQA group's K/V blocks stay in L2
        slot = pid // n_heads_q
        head = pid % n_heads_q
    else:
        head = pid // n_slots
        slot = pid % n_slots
    seq = tl.load(work_seq + slot)
    if seq < 0:
        return
    m_block = tl.load(work_block + slot)
    q_start = tl.load(cu_seqlens_q + seq)
    q_len = tl.load(cu_seqlens_q + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k + seq)
    k_len = tl.load(cu_seqlens_k + seq + 1) - k_start
    kv_head = head // group
    diag = k_len - q_len  # bottom-right causal alignment

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = offs_m < q_len

    Q_base = Q + q_start.to(tl.int64) * stride_qt + head * stride_qh
    K_base = K + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    V_base = V + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    q = _load_tile(Q_base + offs_m[:, None].to(tl.int64) * stride_qt + offs_d[None, :], row_mask, offs_d, HEAD_DIM, EVEN_D, True)

    # Finite start for the running max: a row that has seen only masked keys keeps exp2(-inf - m) = 0
    # instead of exp2(-inf + inf) = nan.
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    m0 = m_block * BLOCK_M
    lo, end_n, full_end = _key_range(m0, k_len, diag, win_left, win_right, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    # Main loop at D=128, 128x128 / 8 warps / 2 stages, sm_90a: 539 / 515 SASS a step (triton 3.9 /
    # 3.6), 8.42 / 8.05 a score element a thread holds. Tried and not kept, by the compiled code:
    # - a scalar K/V block pointer advanced by BLOCK_N rows a step plus a loop-invariant int32 tile
    #   offset: 538-543 / 512-513 a step, up to 8 more registers; ptxas already strength-reduces the
    #   int64 products below, and the 32 IADD3 left are the 64-bit adds of 16 cp.async addresses.
    # - tl.range(..., warp_specialize=True): the same SASS on 3.6 and 3.9 (Hopper's automatic warp
    #   specialisation wants TMA descriptor loads); FA3's ping-pong of two warpgroups over named
    #   barriers (softmax of one under the other's GEMMs) has no Triton spelling.
    # - the next tile's QK^T issued before this tile's softmax (FA3's intra-warpgroup overlap): Triton
    #   marks it async and waits it with pendings=0 at once (TTGIR warp_group_dot_wait), which also
    #   waits the P.V wgmma left in flight; the second S tile takes 64 fp32 registers a thread and
    #   spilled 40 / 48 B. Only an accumulator's wgmma stays in flight across an iteration.
    for start_n in range(lo, full_end, BLOCK_N):
        acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
                                  stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
                                  HEAD_DIM, EVEN_D, False, CAUSAL, SOFTCAP, WINDOW)
    for start_n in range(full_end, end_n, BLOCK_N):
        acc, m_i, l_i = _fwd_step(acc, m_i, l_i, q, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
                                  stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
                                  HEAD_DIM, EVEN_D, True, CAUSAL, SOFTCAP, WINDOW)

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    O_base = O + q_start.to(tl.int64) * stride_ot + head * stride_oh
    o_ptrs = O_base + offs_m[:, None].to(tl.int64) * stride_ot + offs_d[None, :]
    if EVEN_D:
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None])
    else:
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None] & (offs_d[None, :] < HEAD_DIM))
    tl.store(LSE + head.to(tl.int64) * stride_lh + q_start + offs_m, lse, mask=row_mask)


@triton.jit
def bwd_preprocess_kernel(O, DO, DELTA, n_tokens, n_heads, stride_ot, stride_oh, stride_dot, stride_doh, stride_dh,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr):
    """delta[h, t] = sum_d dO[t, h, d] * O[t, h, d] in fp32 (the softmax-backward row term)."""
    pid_t = tl.program_id(0)
    head = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_t[:, None] < n_tokens) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(O + offs_t[:, None].to(tl.int64) * stride_ot + head * stride_oh + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(DO + offs_t[:, None].to(tl.int64) * stride_dot + head * stride_doh + offs_d[None, :], mask=mask,
                 other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + head.to(tl.int64) * stride_dh + offs_t, delta, mask=offs_t < n_tokens)


@triton.jit
def _dkdv_step(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, start_m, offs_m, offs_n_abs, offs_d, q_len, diag,
               stride_qt, stride_dot, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
               HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, MASK_ROWS: tl.constexpr, MASK_CAUSAL: tl.constexpr,
               SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    rows = start_m + offs_m
    row_mask = rows < q_len
    q = _load_tile(Q_base + rows[:, None].to(tl.int64) * stride_qt + offs_d[None, :], row_mask, offs_d, HEAD_DIM, EVEN_D, MASK_ROWS)
    do = _load_tile(DO_base + rows[:, None].to(tl.int64) * stride_dot + offs_d[None, :], row_mask, offs_d, HEAD_DIM, EVEN_D,
                    MASK_ROWS)
    # Rows past q_len load lse = +inf and delta = 0, so their p is exactly 0: no extra select needed.
    if MASK_ROWS:
        lse2 = tl.load(LSE_base + rows, mask=row_mask, other=float("inf")) * 1.4426950408889634
        delta = tl.load(DELTA_base + rows, mask=row_mask, other=0.0)
    else:
        lse2 = tl.load(LSE_base + rows) * 1.4426950408889634
        delta = tl.load(DELTA_base + rows)
    qkT = tl.dot(k, tl.trans(q))  # [BLOCK_N, BLOCK_M]
    if SOFTCAP:
        tT = _tanh(qkT * softcap_in)
        pT = tl.math.exp2(tT * softcap_out - lse2[None, :])
    else:
        pT = tl.math.exp2(qkT * qk_scale_log2 - lse2[None, :])
    if MASK_CAUSAL:
        pT = tl.where(offs_n_abs[:, None] <= rows[None, :] + diag, pT, 0.0)
    if WINDOW:
        pT = tl.where(_in_window(rows[None, :], offs_n_abs[:, None], diag, win_left, win_right), pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv)
    dpT = tl.dot(v, tl.trans(do))
    dsT = pT * (dpT - delta[None, :])
    if SOFTCAP:  # d(c tanh(s / c)) / ds = 1 - tanh^2
        dsT = dsT * (1.0 - tT * tT)
    dk = tl.dot(dsT.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def varlen_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    cu_seqlens_q, cu_seqlens_k, work_seq, work_block,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh,
    stride_dkt, stride_dkh, stride_dvt, stride_dvh, stride_lh,
    softmax_scale, qk_scale_log2, n_heads_kv, group,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
):
    """One program per (key block, KV head): dK and dV accumulate in registers over every query
    head of the GQA group and every query block that sees the keys (no atomics: deterministic)."""
    _varlen_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt,
                 stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dkt, stride_dkh,
                 stride_dvt, stride_dvh, stride_lh, softmax_scale, qk_scale_log2, n_heads_kv, group, 0.0, 0.0, 0, 0,
                 HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL, EVEN_D, False, False)


@triton.jit
def _varlen_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt,
                 stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dkt, stride_dkh,
                 stride_dvt, stride_dvh, stride_lh, softmax_scale, qk_scale_log2, n_heads_kv, group, softcap_in,
                 softcap_out, win_left, win_right, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, SOFTCAP: tl.constexpr,
                 WINDOW: tl.constexpr):
    pid = tl.program_id(0)
    slot = pid // n_heads_kv
    kv_head = pid % n_heads_kv
    seq = tl.load(work_seq + slot)
    if seq < 0:
        return
    n_block = tl.load(work_block + slot)
    q_start = tl.load(cu_seqlens_q + seq)
    q_len = tl.load(cu_seqlens_q + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k + seq)
    k_len = tl.load(cu_seqlens_k + seq + 1) - k_start
    diag = k_len - q_len

    n0 = n_block * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    # Keys past k_len load as 0 and may reach inf/NaN in their own rows of dk/dv (p = exp2(-lse2)),
    # but a row of dk/dv reads only its own key's row of pT/dsT and is never stored: no select.
    col_mask = offs_n < k_len
    K_base = K + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    V_base = V + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    k = _load_tile(K_base + offs_n[:, None].to(tl.int64) * stride_kt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, True)
    v = _load_tile(V_base + offs_n[:, None].to(tl.int64) * stride_vt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    q_len_ceil = ((q_len + BLOCK_M - 1) // BLOCK_M) * BLOCK_M
    end_m = q_len_ceil
    if WINDOW:
        # rows n0 - diag - right .. n0 + BLOCK_N - 1 - diag + left see some of these keys
        start_m = tl.minimum((tl.maximum(n0 - diag - win_right, 0) // BLOCK_M) * BLOCK_M, q_len_ceil)
        end_m = tl.minimum(tl.maximum(n0 + BLOCK_N - diag + win_left, 0), q_len_ceil)
    elif CAUSAL:
        # rows below n0 - diag see none of these keys
        start_m = tl.minimum((tl.maximum(n0 - diag, 0) // BLOCK_M) * BLOCK_M, q_len_ceil)
    else:
        start_m = 0

    # One loop with row and causal masks on every step. Splitting off an unmasked middle loop (as
    # the forward does) made ptxas spill 190-930 bytes per thread at D=128 (sm_90a, triton 3.9,
    # six tiles tried: each pipelined loop keeps its own buffers live), against 12-20 bytes for one
    # loop at 32x64/32x128 tiles; the selects it saves are ~1% of a step (5 tl.dot of BN x BM x D).
    for g in range(0, group):
        head = kv_head * group + g
        Q_base = Q + q_start.to(tl.int64) * stride_qt + head * stride_qh
        DO_base = DO + q_start.to(tl.int64) * stride_dot + head * stride_doh
        LSE_base = LSE + head.to(tl.int64) * stride_lh + q_start
        DELTA_base = DELTA + head.to(tl.int64) * stride_lh + q_start
        for start in range(start_m, end_m, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, start, offs_m, offs_n, offs_d,
                                q_len, diag, stride_qt, stride_dot, qk_scale_log2, softcap_in, softcap_out, win_left,
                                win_right, HEAD_DIM, EVEN_D, True, CAUSAL, SOFTCAP, WINDOW)

    dk = dk * softmax_scale
    d_mask = col_mask[:, None]
    if not EVEN_D:
        d_mask = d_mask & (offs_d[None, :] < HEAD_DIM)
    DK_base = DK + k_start.to(tl.int64) * stride_dkt + kv_head * stride_dkh
    DV_base = DV + k_start.to(tl.int64) * stride_dvt + kv_head * stride_dvh
    tl.store(DK_base + offs_n[:, None].to(tl.int64) * stride_dkt + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=d_mask)
    tl.store(DV_base + offs_n[:, None].to(tl.int64) * stride_dvt + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=d_mask)


@triton.jit
def _dq_step(dq, q, do, lse2, delta, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
             stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
             HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
             SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    cols = start_n + offs_n
    col_mask = cols < k_len
    k = _load_tile(K_base + cols[:, None].to(tl.int64) * stride_kt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)
    v = _load_tile(V_base + cols[:, None].to(tl.int64) * stride_vt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)
    qk = tl.dot(q, tl.trans(k))
    if SOFTCAP:
        t = _tanh(qk * softcap_in)
        p = tl.math.exp2(t * softcap_out - lse2[:, None])
    else:
        p = tl.math.exp2(qk * qk_scale_log2 - lse2[:, None])
    if MASKED:
        # A key past k_len loads as 0, so its p is exp2(-lse2): up to +inf in fp32 for a row whose
        # scores are all below -89, and dS = -p * delta overflows fp16 (65504) long before. Zero p
        # itself: a zero key does not cancel an infinite dS (inf * 0 = NaN, flash-attn's varlen
        # overflow test: 3,088 NaN in dQ at d=16).
        allowed = col_mask[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + diag)
        if WINDOW:
            allowed = allowed & _in_window(offs_m[:, None], cols[None, :], diag, win_left, win_right)
        p = tl.where(allowed, p, 0.0)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - delta[:, None])
    if SOFTCAP:
        ds = ds * (1.0 - t * t)
    dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def varlen_bwd_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    cu_seqlens_q, cu_seqlens_k, work_seq, work_block,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh,
    stride_dqt, stride_dqh, stride_lh,
    softmax_scale, qk_scale_log2, n_heads_q, group,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
):
    """One program per (query block, query head), on the forward's work list: a separate pass for
    dQ instead of atomics, so the backward is deterministic."""
    _varlen_dq(Q, K, V, DO, LSE, DELTA, DQ, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh,
               stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dqt, stride_dqh, stride_lh,
               softmax_scale, qk_scale_log2, n_heads_q, group, 0.0, 0.0, 0, 0, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N,
               CAUSAL, EVEN_D, False, False)


@triton.jit
def _varlen_dq(Q, K, V, DO, LSE, DELTA, DQ, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh,
               stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dqt, stride_dqh, stride_lh,
               softmax_scale, qk_scale_log2, n_heads_q, group, softcap_in, softcap_out, win_left, win_right,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    pid = tl.program_id(0)
    slot = pid // n_heads_q
    head = pid % n_heads_q
    seq = tl.load(work_seq + slot)
    if seq < 0:
        return
    m_block = tl.load(work_block + slot)
    q_start = tl.load(cu_seqlens_q + seq)
    q_len = tl.load(cu_seqlens_q + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k + seq)
    k_len = tl.load(cu_seqlens_k + seq + 1) - k_start
    kv_head = head // group
    diag = k_len - q_len

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = offs_m < q_len
    Q_base = Q + q_start.to(tl.int64) * stride_qt + head * stride_qh
    DO_base = DO + q_start.to(tl.int64) * stride_dot + head * stride_doh
    K_base = K + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    V_base = V + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    q = _load_tile(Q_base + offs_m[:, None].to(tl.int64) * stride_qt + offs_d[None, :], row_mask, offs_d, HEAD_DIM, EVEN_D, True)
    do = _load_tile(DO_base + offs_m[:, None].to(tl.int64) * stride_dot + offs_d[None, :], row_mask, offs_d, HEAD_DIM, EVEN_D, True)
    lse2 = tl.load(LSE + head.to(tl.int64) * stride_lh + q_start + offs_m, mask=row_mask, other=float("inf"))
    lse2 = lse2 * 1.4426950408889634
    delta = tl.load(DELTA + head.to(tl.int64) * stride_lh + q_start + offs_m, mask=row_mask, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    m0 = m_block * BLOCK_M
    lo, end_n, full_end = _key_range(m0, k_len, diag, win_left, win_right, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    for start_n in range(lo, full_end, BLOCK_N):
        dq = _dq_step(dq, q, do, lse2, delta, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
                      stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
                      HEAD_DIM, EVEN_D, False, CAUSAL, SOFTCAP, WINDOW)
    for start_n in range(full_end, end_n, BLOCK_N):
        dq = _dq_step(dq, q, do, lse2, delta, K_base, V_base, start_n, offs_m, offs_n, offs_d, k_len, diag,
                      stride_kt, stride_vt, qk_scale_log2, softcap_in, softcap_out, win_left, win_right,
                      HEAD_DIM, EVEN_D, True, CAUSAL, SOFTCAP, WINDOW)

    dq = dq * softmax_scale
    d_mask = row_mask[:, None]
    if not EVEN_D:
        d_mask = d_mask & (offs_d[None, :] < HEAD_DIM)
    DQ_base = DQ + q_start.to(tl.int64) * stride_dqt + head * stride_dqh
    tl.store(DQ_base + offs_m[:, None].to(tl.int64) * stride_dqt + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=d_mask)
