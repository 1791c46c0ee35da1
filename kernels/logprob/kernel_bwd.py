"""Backward Triton kernels for token log-probabilities and entropies (the forward kernels, the
online statistics they save and the notation are in ``kernel.py``).

- ``token_logprobs_bwd_kernel``: one program per token row, one read of the logits and one write
  of their gradient, from the row's saved maximum, log-sum and entropy.
- ``linear_dlogits_kernel`` + ``matmul_accumulate_kernel``: the fused LM head's backward, which
  recomputes logit tiles, writes d(logits) for one vocabulary chunk at a time and accumulates
  d(hidden) in fp32.
"""

import triton
import triton.language as tl

from .kernel import LOG2E, _logit_tile, _scale
from .softcap import _tanh


@triton.jit
def _round_bf16(x):
    """fp32 -> bf16 with round-to-nearest-even done in integer ops. Only used under the Triton
    interpreter, whose fp32 -> bf16 cast truncates (triton 3.9); compiled code uses the hardware
    conversion (already round-to-nearest-even)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _token_logprobs_bwd_grad(x, m, log_s, entropy, a, b, temperature, softcap, SCALE: tl.constexpr,
                             EXACT_DIV: tl.constexpr, SOFTCAP: tl.constexpr, HAS_GRAD_ENT: tl.constexpr):
    """-(d logprob_t / d x_i) without the one-hot term, for every column i:
    ``a * p_i`` (+ ``b * p_i * (log p_i + entropy)``), a = g_lp and b = g_ent, already divided by
    the temperature for 16-bit inputs (fp32: the division is exact, per element, as before).
    With SOFTCAP, also the cap's derivative 1 - tanh^2 (returned; 1 without the cap)."""
    if SOFTCAP:
        t, dcap = _tanh(x * (1.0 / softcap))
        x = softcap * t
    else:
        dcap = 1.0
    x = _scale(x, temperature, SCALE, EXACT_DIV)
    logp = (x - m) - log_s
    p = tl.math.exp2(logp * LOG2E)
    g = a * p
    if HAS_GRAD_ENT:
        # d entropy / d x_i = -p_i (log p_i + entropy). A masked column (x = -inf) has p = 0 and
        # log p = -inf: clamping log p (one FMNMX) gives 0 exactly where a compare-and-select did,
        # and changes nothing where p > 0 (log p > -104 there)
        g += b * p * (tl.maximum(logp, -3.0e38) + entropy)
    if EXACT_DIV:
        g = _scale(g, temperature, SCALE, EXACT_DIV)
    if SOFTCAP:
        g = g * dcap
    return g, dcap


@triton.jit
def _store_grad(ptr, dz, mask, ROUND_BF16: tl.constexpr):
    if ROUND_BF16:
        out = _round_bf16(dz)
    else:
        out = dz.to(ptr.dtype.element_ty)
    tl.store(ptr, out, mask=mask)


@triton.jit
def token_logprobs_bwd_kernel(logits_ptr, tokens_ptr, max_ptr, logsum_ptr, entropy_ptr, grad_lp_ptr,
                              grad_ent_ptr, grad_logits_ptr, stride_row, stride_grad_row, vocab_size,
                              temperature, softcap, ignore_index, SCALE: tl.constexpr, EXACT_DIV: tl.constexpr,
                              SOFTCAP: tl.constexpr, HAS_GRAD_LP: tl.constexpr, HAS_GRAD_ENT: tl.constexpr,
                              BLOCK_V: tl.constexpr, ROUND_BF16: tl.constexpr):
    """One read of the logits and one write of the gradient per row; no reductions. The loop writes
    -(a p_i + ...) everywhere; the target column's one-hot term is added by one store after a
    barrier (no per-logit token compare). An ignored row reads nothing and stores zeros."""
    row = tl.program_id(0).to(tl.int64)
    tok = tl.load(tokens_ptr + row).to(tl.int64)
    ignored = tok == ignore_index
    grad_row = grad_logits_ptr + row * stride_grad_row
    offs = tl.arange(0, BLOCK_V)
    n_full = (vocab_size // BLOCK_V) * BLOCK_V
    if ignored:
        zero = tl.zeros([BLOCK_V], dtype=tl.float32)
        for start in range(0, n_full, BLOCK_V):
            _store_grad(grad_row + start + offs, zero, None, ROUND_BF16)
        if n_full < vocab_size:
            _store_grad(grad_row + n_full + offs, zero, n_full + offs < vocab_size, ROUND_BF16)
    else:
        m = tl.load(max_ptr + row)
        log_s = tl.load(logsum_ptr + row)
        if HAS_GRAD_LP:
            g_lp = tl.load(grad_lp_ptr + row).to(tl.float32)
        else:
            g_lp = tl.zeros([], dtype=tl.float32)
        if HAS_GRAD_ENT:
            g_ent = tl.load(grad_ent_ptr + row).to(tl.float32)
            entropy = tl.load(entropy_ptr + row)
        else:
            g_ent = tl.zeros([], dtype=tl.float32)
            entropy = tl.zeros([], dtype=tl.float32)
        a = g_lp
        b = g_ent
        if SCALE:
            if not EXACT_DIV:  # 16-bit inputs: 1/T folded into the two per-row factors
                a = g_lp * (1.0 / temperature)
                b = g_ent * (1.0 / temperature)
        logits_row = logits_ptr + row * stride_row
        for start in range(0, n_full, BLOCK_V):
            x = tl.load(logits_row + start + offs).to(tl.float32)
            g, _ = _token_logprobs_bwd_grad(x, m, log_s, entropy, a, b, temperature, softcap, SCALE, EXACT_DIV,
                                           SOFTCAP, HAS_GRAD_ENT)
            _store_grad(grad_row + start + offs, -g, None, ROUND_BF16)
        if n_full < vocab_size:
            cols = n_full + offs
            x = tl.load(logits_row + cols, mask=cols < vocab_size, other=float("-inf")).to(tl.float32)
            g, _ = _token_logprobs_bwd_grad(x, m, log_s, entropy, a, b, temperature, softcap, SCALE, EXACT_DIV,
                                           SOFTCAP, HAS_GRAD_ENT)
            _store_grad(grad_row + cols, -g, cols < vocab_size, ROUND_BF16)
        # the target column: a - (a p_t + ...) (the same arithmetic as a one-hot select in the loop
        # would give), stored after every thread's loop stores (an out-of-range token stores nothing)
        in_range = (tok >= 0) & (tok < vocab_size)
        t = tl.where(in_range, tok, 0)
        x_t = tl.load(logits_row + t).to(tl.float32)
        g_t, dcap_t = _token_logprobs_bwd_grad(x_t, m, log_s, entropy, a, b, temperature, softcap, SCALE, EXACT_DIV,
                                               SOFTCAP, HAS_GRAD_ENT)
        if EXACT_DIV:
            if SCALE:
                one_hot = g_lp / temperature
            else:
                one_hot = g_lp
        else:
            one_hot = a
        tl.debug_barrier()
        if SOFTCAP:
            one_hot = one_hot * dcap_t
        _store_grad(grad_row + t, one_hot - g_t, in_range, ROUND_BF16)


@triton.jit
def _grouped_tile(n_a, n_b, GROUP: tl.constexpr):
    """(block along a, block along b) of this program in grouped order: GROUP consecutive a-blocks
    run over each b-block in turn, so the GROUP programs resident together share one b tile in L2."""
    pid = tl.program_id(0)
    first = pid // (GROUP * n_b) * GROUP
    group_size = tl.minimum(n_a - first, GROUP)
    return first + (pid % (GROUP * n_b)) % group_size, (pid % (GROUP * n_b)) // group_size


@triton.jit
def linear_dlogits_kernel(hidden_ptr, weight_ptr, tokens_ptr, max_ptr, logsum_ptr, entropy_ptr, grad_lp_ptr,
                          grad_ent_ptr, dlogits_ptr, n_rows, vocab_size, hidden_size, v_start, chunk_cols,
                          stride_h, stride_w, stride_d, inv_temperature, softcap,
                          SCALE: tl.constexpr, SOFTCAP: tl.constexpr, HAS_GRAD_ENT: tl.constexpr,
                          EVEN_K: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_T: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """d(loss)/d(hidden @ weight.T) for vocabulary columns [v_start, v_start + chunk_cols), written
    to ``dlogits[T, chunk_cols]`` in the input dtype. The upstream gradients arrive already zeroed
    on ignored rows. Grouped tile order (GROUP_T token blocks share a weight tile in L2)."""
    pid_t, pid_v = _grouped_tile(tl.cdiv(n_rows, BLOCK_T), tl.cdiv(chunk_cols, BLOCK_V), GROUP_T)

    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    row_mask = rows < n_rows
    local = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    cols = v_start + local
    col_mask = local < chunk_cols
    z = _logit_tile(hidden_ptr, weight_ptr, rows, row_mask, cols, col_mask, hidden_size, stride_h, stride_w,
                    BLOCK_T, BLOCK_V, BLOCK_K, EVEN_K, True, True, DOT_PRECISION)
    if SOFTCAP:  # z -> softcap * tanh(z / softcap): its derivative 1 - tanh^2 multiplies d(logits) below
        t, dcap = _tanh(z * (1.0 / softcap))
        z = softcap * t
    if SCALE:
        z = z * inv_temperature
    m = tl.load(max_ptr + rows, mask=row_mask, other=0.0)
    log_s = tl.load(logsum_ptr + rows, mask=row_mask, other=0.0)
    g_lp = tl.load(grad_lp_ptr + rows, mask=row_mask, other=0.0)
    tok = tl.load(tokens_ptr + rows, mask=row_mask, other=-1).to(tl.int64)
    logp = (z - m[:, None]) - log_s[:, None]
    p = tl.math.exp2(logp * LOG2E)
    dz = tl.where(cols[None, :] == tok[:, None], g_lp[:, None], 0.0) - g_lp[:, None] * p
    if HAS_GRAD_ENT:
        g_ent = tl.load(grad_ent_ptr + rows, mask=row_mask, other=0.0)
        entropy = tl.load(entropy_ptr + rows, mask=row_mask, other=0.0)
        dz -= g_ent[:, None] * p * tl.where(p > 0, logp + entropy[:, None], 0.0)
    if SCALE:
        dz = dz * inv_temperature
    if SOFTCAP:
        dz = dz * dcap
    out_ptrs = dlogits_ptr + rows.to(tl.int64)[:, None] * stride_d + local[None, :]
    tl.store(out_ptrs, dz.to(dlogits_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


@triton.jit
def matmul_accumulate_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                             stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """C[M, N] (fp32) += A[M, K] @ B[K, N]: d(hidden) summed over vocabulary chunks without
    rounding each chunk's share to bf16."""
    pid_m, pid_n = _grouped_tile(tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    a_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k.to(tl.int64)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    c_mask = m_mask[:, None] & n_mask[None, :]
    tl.store(c_ptrs, tl.load(c_ptrs, mask=c_mask, other=0.0) + acc, mask=c_mask)
