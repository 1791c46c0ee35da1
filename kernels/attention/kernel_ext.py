"""The varlen attention kernels with softcap and a sliding window (flash-attn's ``softcap`` and
``window_size=(left, right)``): the same tile bodies as ``kernel.py``'s default kernels, compiled
with ``SOFTCAP`` / ``WINDOW`` on. The default kernels pass both off, so their compiled code is the
code they had before these features (sm_90a PTX: the same instructions, only the early-exit
branch's compare inverted).

Scalars: ``softcap_in`` = softmax_scale / c and ``softcap_out`` = c log2(e) (scores c tanh(s / c)
in log2 units); ``win_left`` / ``win_right`` in keys, an unbounded left side given as the key count
and an unbounded right side as the query count (``api.py``), and ``win_right`` = 0 when causal.
"""

import triton
import triton.language as tl

from .kernel import _varlen_dkdv, _varlen_dq, _varlen_fwd


@triton.jit
def varlen_fwd_ext_kernel(Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh,
                          stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh, qk_scale_log2,
                          n_slots, n_heads_q, group, softcap_in, softcap_out, win_left, win_right,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          CAUSAL: tl.constexpr, HEADS_INNER: tl.constexpr, EVEN_D: tl.constexpr,
                          SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    _varlen_fwd(Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh, stride_kt,
                stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh, qk_scale_log2, n_slots, n_heads_q,
                group, softcap_in, softcap_out, win_left, win_right, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL,
                HEADS_INNER, EVEN_D, SOFTCAP, WINDOW)


@triton.jit
def varlen_bwd_dkdv_ext_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, cu_seqlens_q, cu_seqlens_k, work_seq, work_block,
                               stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh,
                               stride_dkt, stride_dkh, stride_dvt, stride_dvh, stride_lh, softmax_scale, qk_scale_log2,
                               n_heads_kv, group, softcap_in, softcap_out, win_left, win_right, HEAD_DIM: tl.constexpr,
                               BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    _varlen_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt,
                 stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dkt, stride_dkh,
                 stride_dvt, stride_dvh, stride_lh, softmax_scale, qk_scale_log2, n_heads_kv, group, softcap_in,
                 softcap_out, win_left, win_right, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL, EVEN_D, SOFTCAP,
                 WINDOW)


@triton.jit
def varlen_bwd_dq_ext_kernel(Q, K, V, DO, LSE, DELTA, DQ, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt,
                             stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dqt,
                             stride_dqh, stride_lh, softmax_scale, qk_scale_log2, n_heads_q, group, softcap_in,
                             softcap_out, win_left, win_right, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                             SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    _varlen_dq(Q, K, V, DO, LSE, DELTA, DQ, cu_seqlens_q, cu_seqlens_k, work_seq, work_block, stride_qt, stride_qh,
               stride_kt, stride_kh, stride_vt, stride_vh, stride_dot, stride_doh, stride_dqt, stride_dqh, stride_lh,
               softmax_scale, qk_scale_log2, n_heads_q, group, softcap_in, softcap_out, win_left, win_right,
               HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, CAUSAL, EVEN_D, SOFTCAP, WINDOW)
