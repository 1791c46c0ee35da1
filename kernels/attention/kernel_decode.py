"""Split-KV decode kernels: query tokens against their sequence's KV cache (contiguous
``[B, Lmax, Hkv, D]`` or paged ``[pages, page, Hkv, D]`` with a block table), then a combine of
the splits' partials. ``decode_split_kernel`` is the default launch (one query token per
sequence); ``decode_split_ext_kernel`` is the same body with flash-attn's ``softcap``, a window
and ``seqlen_q`` query tokens per sequence compiled in (``SOFTCAP`` / ``WINDOW`` / ``MULTI``), so
the default binary is the code it had before those features (sm_90a PTX: the same instructions,
only the early-exit branch's compare inverted).

Softcap scalars as the varlen kernels': ``softcap_in`` = softmax_scale / c, ``softcap_out`` =
c log2(e) (scores c tanh(s / c) in log2 units). Query t of seqlen_q sits at position
kv_len - seqlen_q + t (one token: kv_len - 1) and, when WINDOW, sees keys
[pos - win_left, pos + win_right] (flash-attn's ``window_size=(left, right)``; causal is
win_right = 0, an unbounded side is passed as the cache length). MULTI tiles rows
(token t, head g) = t * group + g of one KV head, the rows of q / out / lse viewed as
``[B * seqlen_q, Hq]``.
"""

import triton
import triton.language as tl

from .tiles import _load_tile, _tanh


@triton.jit
def _decode_step(acc, m_i, l_i, q, K_base, V_base, k_rows, v_rows, col_mask, score_mask, offs_d, qk_scale_log2,
                 softcap_in, softcap_out, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, SOFTCAP: tl.constexpr):
    """One tile of keys (rows ``k_rows`` / ``v_rows`` of the cache, ``col_mask`` valid) folded into
    the running softmax of the group's query rows; ``score_mask`` [rows, keys] the keys each row sees."""
    k = _load_tile(K_base + k_rows[:, None] + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, True)
    qk = tl.dot(q, tl.trans(k))
    qk = _tanh(qk * softcap_in) * softcap_out if SOFTCAP else qk * qk_scale_log2
    qk = tl.where(score_mask, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.math.exp2(qk - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load_tile(V_base + v_rows[:, None] + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, True)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _rows(row_b, stride, MULTI: tl.constexpr):
    """Offset of each tile row's token: a [rows, 1] column when MULTI, else the one sequence's scalar."""
    if MULTI:
        return (row_b * stride)[:, None]
    else:
        return row_b * stride


@triton.jit
def _seen(col_mask, cols, pos, win_left, win_right, WINDOW: tl.constexpr, MULTI: tl.constexpr):
    """[rows, keys]: the valid keys each row sees, keys pos - win_left .. pos + win_right when WINDOW
    (causal: win_right 0) for a query at position ``pos`` (a vector of rows when MULTI)."""
    seen = col_mask[None, :]
    if WINDOW:
        if MULTI:
            seen = seen & (cols[None, :] >= pos[:, None] - win_left) & (cols[None, :] <= pos[:, None] + win_right)
        else:
            seen = seen & (cols[None, :] >= pos - win_left) & (cols[None, :] <= pos + win_right)
    return seen


@triton.jit
def decode_split_kernel(
    Q, K, V, SEQLENS, BLOCK_TABLE, O, O_PART, LSE_PART,
    stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ob, stride_oh, stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_btb,
    qk_scale_log2, n_heads_kv, group, split_tokens, max_len,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr, SINGLE_SPLIT: tl.constexpr, EVEN_D: tl.constexpr,
    CHUNK_PAGES: tl.constexpr,
):
    """One program per (KV split, sequence, KV head). The query heads of a GQA group form the rows
    of one tile (padded to 16 for tl.dot), so each K/V byte is read once per group. A split covers
    ``split_tokens`` cached tokens; splits past a sequence's length exit at once, so a long
    sequence spreads over many programs while short ones cost a few idle launches."""
    _decode_split(Q, K, V, SEQLENS, BLOCK_TABLE, O, O_PART, LSE_PART, stride_qb, stride_qh, stride_kb, stride_kt,
                  stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_oh, stride_pb, stride_ph, stride_ps,
                  stride_lb, stride_lh, stride_btb, qk_scale_log2, n_heads_kv, group, split_tokens, max_len,
                  0.0, 0.0, 0, 0, 1, HEAD_DIM, BLOCK_D, BLOCK_G, BLOCK_N, PAGE_SIZE, PAGED, SINGLE_SPLIT, EVEN_D,
                  CHUNK_PAGES, False, False, False)


@triton.jit
def decode_split_ext_kernel(
    Q, K, V, SEQLENS, BLOCK_TABLE, O, O_PART, LSE_PART,
    stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ob, stride_oh, stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_btb,
    qk_scale_log2, n_heads_kv, group, split_tokens, max_len, softcap_in, softcap_out, win_left, win_right, seqlen_q,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr, SINGLE_SPLIT: tl.constexpr, EVEN_D: tl.constexpr,
    CHUNK_PAGES: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, MULTI: tl.constexpr,
):
    """decode_split_kernel with softcap, a window and ``seqlen_q`` query tokens per sequence (see
    the module docstring); a third grid axis over blocks of BLOCK_G (token, head) rows when MULTI."""
    _decode_split(Q, K, V, SEQLENS, BLOCK_TABLE, O, O_PART, LSE_PART, stride_qb, stride_qh, stride_kb, stride_kt,
                  stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_oh, stride_pb, stride_ph, stride_ps,
                  stride_lb, stride_lh, stride_btb, qk_scale_log2, n_heads_kv, group, split_tokens, max_len,
                  softcap_in, softcap_out, win_left, win_right, seqlen_q, HEAD_DIM, BLOCK_D, BLOCK_G, BLOCK_N,
                  PAGE_SIZE, PAGED, SINGLE_SPLIT, EVEN_D, CHUNK_PAGES, SOFTCAP, WINDOW, MULTI)


@triton.jit
def _decode_split(Q, K, V, SEQLENS, BLOCK_TABLE, O, O_PART, LSE_PART, stride_qb, stride_qh, stride_kb, stride_kt,
                  stride_kh, stride_vb, stride_vt, stride_vh, stride_ob, stride_oh, stride_pb, stride_ph, stride_ps,
                  stride_lb, stride_lh, stride_btb, qk_scale_log2, n_heads_kv, group, split_tokens, max_len,
                  softcap_in, softcap_out, win_left, win_right, seqlen_q, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, PAGED: tl.constexpr, SINGLE_SPLIT: tl.constexpr, EVEN_D: tl.constexpr,
                  CHUNK_PAGES: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, MULTI: tl.constexpr):
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads_kv
    kv_head = pid_bh % n_heads_kv
    kv_len = tl.load(SEQLENS + b)
    # A length outside [0, max_len] (not checked on the host: that would be a sync) reads nothing
    # and gives NaN, never a plausible number or a read past the cache.
    bad_len = (kv_len < 0) | (kv_len > max_len)
    kv_len = tl.where(bad_len, 0, kv_len)
    n_lo = split * split_tokens
    if (n_lo >= kv_len) & (split > 0):  # split 0 always runs: it writes the empty result of kv_len == 0
        return
    n_hi = tl.minimum(kv_len, n_lo + split_tokens)
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    if MULTI:  # rows (token t, head g) = t * group + g; query t sits at position kv_len - seqlen_q + t
        offs_g = tl.program_id(2) * BLOCK_G + offs_g
        tok = offs_g // group
        g_mask = offs_g < seqlen_q * group
        heads = kv_head * group + offs_g % group
        row_b = b.to(tl.int64) * seqlen_q + tok  # the row of q / out / lse viewed as [B * seqlen_q, Hq]
        pos = kv_len - seqlen_q + tok
        first = kv_len - seqlen_q + (tl.program_id(2) * BLOCK_G) // group  # the block's first row's position
    else:
        g_mask = offs_g < group
        heads = kv_head * group + offs_g
        row_b = b.to(tl.int64)
        pos = kv_len - 1
        first = pos
    lo = n_lo
    if WINDOW:
        # Splits wholly left of the window still run (an empty loop) and write the empty partial
        # the combine expects of every split below kv_len. The first tile starts on a BLOCK_N
        # boundary (aligned loads) with the keys left of each row's window masked.
        lo = tl.maximum(n_lo, (tl.maximum(first - win_left, 0) // BLOCK_N) * BLOCK_N)
    q_ptrs = Q + _rows(row_b, stride_qb, MULTI) + heads[:, None] * stride_qh + offs_d[None, :]
    q = _load_tile(q_ptrs, g_mask, offs_d, HEAD_DIM, EVEN_D, True)

    m_i = tl.zeros([BLOCK_G], dtype=tl.float32) - 1.0e30
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    if PAGED:
        # The split's block-table slice is loaded once per chunk of CHUNK_PAGES pages, before the
        # key loop, and each tile's pages are picked from it in registers (tl.gather): the K/V
        # addresses then depend on no load of the same step, so the pipeliner keeps num_stages - 1
        # tiles in flight (async_wait num=2 as the contiguous path) where a page read per step made
        # it wait for every copy (num=0) each step.
        K_base = K + kv_head * stride_kh
        V_base = V + kv_head * stride_vh
        n_pages = (max_len + PAGE_SIZE - 1) // PAGE_SIZE
        offs_p = tl.arange(0, CHUNK_PAGES)
        for c_lo in range((lo // (CHUNK_PAGES * PAGE_SIZE)) * (CHUNK_PAGES * PAGE_SIZE), n_hi, CHUNK_PAGES * PAGE_SIZE):
            p0 = c_lo // PAGE_SIZE
            pages = tl.load(BLOCK_TABLE + b.to(tl.int64) * stride_btb + p0 + offs_p, mask=p0 + offs_p < n_pages, other=0)
            pages = pages.to(tl.int64)
            c_hi = tl.minimum(n_hi, c_lo + CHUNK_PAGES * PAGE_SIZE)
            for start_n in range(tl.maximum(c_lo, lo), c_hi, BLOCK_N):
                cols = start_n + offs_n
                col_mask = cols < c_hi
                page = tl.gather(pages, tl.where(col_mask, cols // PAGE_SIZE - p0, 0), 0)
                k_rows = page * stride_kb + (cols % PAGE_SIZE) * stride_kt
                v_rows = page * stride_vb + (cols % PAGE_SIZE) * stride_vt
                acc, m_i, l_i = _decode_step(acc, m_i, l_i, q, K_base, V_base, k_rows, v_rows, col_mask,
                                             _seen(col_mask, cols, pos, win_left, win_right, WINDOW, MULTI), offs_d,
                                             qk_scale_log2, softcap_in, softcap_out, HEAD_DIM, EVEN_D, SOFTCAP)
    else:
        K_base = K + b.to(tl.int64) * stride_kb + kv_head * stride_kh
        V_base = V + b.to(tl.int64) * stride_vb + kv_head * stride_vh
        for start_n in range(lo, n_hi, BLOCK_N):
            cols = start_n + offs_n
            col_mask = cols < n_hi
            acc, m_i, l_i = _decode_step(acc, m_i, l_i, q, K_base, V_base, cols.to(tl.int64) * stride_kt,
                                         cols.to(tl.int64) * stride_vt, col_mask,
                                         _seen(col_mask, cols, pos, win_left, win_right, WINDOW, MULTI), offs_d,
                                         qk_scale_log2, softcap_in, softcap_out, HEAD_DIM, EVEN_D, SOFTCAP)

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    out = tl.where(bad_len, float("nan"), out)
    out_mask = g_mask[:, None]
    if not EVEN_D:
        out_mask = out_mask & (offs_d[None, :] < HEAD_DIM)
    if SINGLE_SPLIT:
        o_ptrs = O + _rows(row_b, stride_ob, MULTI) + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=out_mask)
        lse = tl.where(empty, float("inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
        lse = tl.where(bad_len, float("nan"), lse)
        tl.store(LSE_PART + row_b * stride_lb + heads * stride_lh, lse, mask=g_mask)
    else:
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
        p_ptrs = O_PART + _rows(row_b, stride_pb, MULTI) + heads[:, None] * stride_ph + split * stride_ps + offs_d[None, :]
        tl.store(p_ptrs, out, mask=out_mask)
        tl.store(LSE_PART + row_b * stride_lb + heads * stride_lh + split, lse2, mask=g_mask)


@triton.jit
def decode_combine_kernel(
    O_PART, LSE_PART, SEQLENS, O, LSE,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh, stride_fb,
    n_heads_q, split_tokens, max_len,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, N_SPLITS_POW2: tl.constexpr,
):
    """Merge the split partials of one (sequence, query head): weights exp2(lse_s - max)."""
    pid = tl.program_id(0)
    b = pid // n_heads_q
    head = pid % n_heads_q
    kv_len = tl.load(SEQLENS + b)
    bad_len = (kv_len < 0) | (kv_len > max_len)  # as in decode_split_kernel: NaN, no partial read
    kv_len = tl.where(bad_len, 0, kv_len)
    n_active = (kv_len + split_tokens - 1) // split_tokens
    offs_all = tl.arange(0, N_SPLITS_POW2)
    L_base = LSE_PART + b.to(tl.int64) * stride_lb + head * stride_lh
    lse_all = tl.load(L_base + offs_all, mask=offs_all < n_active, other=float("-inf"))
    m = tl.max(lse_all, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    denom = tl.zeros([BLOCK_S], dtype=tl.float32)
    P_base = O_PART + b.to(tl.int64) * stride_pb + head * stride_ph
    for s0 in range(0, n_active, BLOCK_S):
        s = s0 + offs_s
        s_mask = s < n_active
        lse = tl.load(L_base + s, mask=s_mask, other=float("-inf"))
        w = tl.math.exp2(lse - m)
        part = tl.load(P_base + s[:, None] * stride_ps + offs_d[None, :],
                       mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)
        acc += tl.sum(part * w[:, None], 0)
        denom += w
    total = tl.sum(denom, 0)
    empty = total == 0.0
    out = acc / tl.where(empty, 1.0, total)
    out = tl.where(bad_len, float("nan"), out)
    tl.store(O + b.to(tl.int64) * stride_ob + head * stride_oh + offs_d, out.to(O.dtype.element_ty),
             mask=offs_d < HEAD_DIM)
    lse_out = tl.where(empty, float("inf"), (m + tl.math.log2(tl.where(empty, 1.0, total))) * 0.6931471805599453)
    lse_out = tl.where(bad_len, float("nan"), lse_out)
    tl.store(LSE + b.to(tl.int64) * stride_fb + head, lse_out)
