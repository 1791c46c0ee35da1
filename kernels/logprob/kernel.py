"""Triton kernels for token log-probabilities and entropies.

Two families:

- Logits kernels (``token_logprobs``): one program per token row, an online log-sum-exp over
  fixed-size vocabulary blocks. The forward reads each logit once and writes four fp32 numbers
  per row (log-prob, entropy, max, log-sum); the backward reads the logits once more and writes
  the gradient once, from those saved statistics.
- Fused LM-head kernels (``linear_token_logprobs``): the forward is a tiled matmul
  ``hidden @ weight.T`` whose epilogue folds each [BLOCK_T, BLOCK_V] tile of logits into running
  per-row statistics, so no [T, V] tensor exists. The vocabulary is cut into ``NSPLIT`` fixed
  splits (parallelism when T is small); a second tiny kernel merges the splits in a fixed order.
  The backward recomputes logit tiles, writes d(logits) for one vocabulary chunk at a time and
  accumulates d(hidden) in fp32.

The backward kernels of both families are in ``kernel_bwd.py``.

Online statistics per row, for logits x (already divided by the temperature) and a running
maximum m: ``s = sum exp(x - m)`` and ``w = sum exp(x - m) * (x - m)``. Then
``log-prob = (x_t - m) - log s`` (torch's own association: forming ``lse = m + log s`` first
would add a rounding of |lse|) and ``entropy = log s - w / s``. Keeping ``w`` relative to the
running maximum avoids the cancellation of ``lse - E[x]`` when logits are large (|x| ~ 1e4 loses
~1e-3 in fp32 the naive way).

Batch invariance: the arithmetic for a row depends only on that row's values and on the launch
config (block sizes, warps), never on the number of rows or the row's position; ``api.py`` picks
the config from the vocabulary size and dtype only. See ``kernels/logprob/__init__.py``.
"""

import triton
import triton.language as tl

from .softcap import _tanh

# exp(x) = exp2(x * LOG2E). ``tl.exp`` lowers to a non-flush-to-zero ``ex2.approx.f32`` wrapped in a
# denormal range check (3 extra SASS instructions per element on sm_90); ``tl.math.exp2`` lowers to
# ``ex2.approx.ftz.f32``. Flushing results below 2^-126 to zero changes no sum a row's maximum
# contributes 1 to (and no gradient a bf16/fp32 output can hold above 1e-38).
LOG2E = tl.constexpr(1.4426950408889634)

# ---------------------------------------------------------------------------------------------
# Logits kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _online_update(x, x_max, m, s, w, RETURN_ENTROPY: tl.constexpr):
    """Fold one block of logits ``x`` (its maximum ``x_max``) into the running (max, sum, weighted
    sum) of one row."""
    m_new = tl.maximum(m, x_max)
    # A block (or prefix) of only -inf logits (masked vocabulary) keeps m_new = -inf; shifting by 0
    # instead keeps exp() at 0 rather than exp(-inf - -inf) = NaN.
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    d = x - m_safe
    e = tl.math.exp2(d * LOG2E)
    alpha = tl.math.exp2((m - m_safe) * LOG2E)
    if RETURN_ENTROPY:
        # exp(x - m_new) * (x - m_new) = alpha * exp(x - m) * ((x - m) + (m - m_new))
        shift = tl.where(alpha > 0, m - m_safe, 0.0)  # 0 on the first block (m = -inf, s = 0)
        # e * d with d = -inf (masked logit, e = 0) must add 0, not NaN: clamping d (one FMNMX)
        # costs less than a compare and select per element
        w = alpha * (w + s * shift) + tl.sum(e * tl.maximum(d, -3.0e38), 0)
    s = s * alpha + tl.sum(e, 0)
    return m_new, s, w


@triton.jit
def _scale(x, temperature, SCALE: tl.constexpr, EXACT_DIV: tl.constexpr):
    if SCALE:
        if EXACT_DIV:
            x = x / temperature
        else:
            # 16-bit inputs: multiplying by the fp32 reciprocal costs at most 1 fp32 ulp, far below
            # the input's own rounding, and keeps the kernel off the FP32 pipe's critical path
            x = x * (1.0 / temperature)
    return x


@triton.jit
def _prep(x, temperature, softcap, SCALE: tl.constexpr, EXACT_DIV: tl.constexpr, SOFTCAP: tl.constexpr):
    """The logits the softmax sees: softcap * tanh(x / softcap) (Gemma 2's final-logit cap, as HF
    and verl apply it: before the temperature), then / temperature."""
    if SOFTCAP:
        x = softcap * _tanh(x * (1.0 / softcap))[0]  # 1 ulp of x / cap at most: no division a logit
    return _scale(x, temperature, SCALE, EXACT_DIV)


@triton.jit
def _token_logprobs_fwd_row(logits_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                            stride_row, vocab_size, temperature, softcap, ignore_index,
                            SCALE: tl.constexpr, EXACT_DIV: tl.constexpr, SOFTCAP: tl.constexpr,
                            RETURN_ENTROPY: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    tok = tl.load(tokens_ptr + row).to(tl.int64)
    ignored = tok == ignore_index
    in_range = (tok >= 0) & (tok < vocab_size)
    row_ptr = logits_ptr + row * stride_row
    offs = tl.arange(0, BLOCK_V)

    m = tl.zeros([], dtype=tl.float32) + float("-inf")
    s = tl.zeros([], dtype=tl.float32)
    w = tl.zeros([], dtype=tl.float32)
    # An ignored row reads nothing: prompt tokens are often most of a packed batch.
    v_end = tl.where(ignored, 0, vocab_size)
    n_full = (v_end // BLOCK_V) * BLOCK_V
    # Full blocks are loaded without a mask, so aligned rows vectorise to 16-byte accesses. The
    # next block's load is issued before the current block's reductions, so a warp has a block in
    # flight while it reduces (software prefetch; the compiler does not pipeline this loop itself).
    if n_full > 0:
        nxt = tl.load(row_ptr + offs)
        for start in range(BLOCK_V, n_full, BLOCK_V):
            x = _prep(nxt.to(tl.float32), temperature, softcap, SCALE, EXACT_DIV, SOFTCAP)
            x_max = tl.max(x, 0)
            # issued after the block maximum (the block's raw values are dead by then: triton 3.6
            # kept both blocks live when the load came first, 198 registers, 1 CTA per SM)
            nxt = tl.load(row_ptr + start + offs)
            m, s, w = _online_update(x, x_max, m, s, w, RETURN_ENTROPY)
        x = _prep(nxt.to(tl.float32), temperature, softcap, SCALE, EXACT_DIV, SOFTCAP)
        m, s, w = _online_update(x, tl.max(x, 0), m, s, w, RETURN_ENTROPY)
    if n_full < v_end:
        cols = n_full + offs
        x = tl.load(row_ptr + cols, mask=cols < v_end, other=float("-inf")).to(tl.float32)
        x = _prep(x, temperature, softcap, SCALE, EXACT_DIV, SOFTCAP)
        if SOFTCAP:  # the cap maps -inf to -softcap: a column past V stays out of the sums
            x = tl.where(cols < v_end, x, float("-inf"))
        m, s, w = _online_update(x, tl.max(x, 0), m, s, w, RETURN_ENTROPY)

    s = tl.where(ignored, 1.0, s)  # an ignored row summed nothing
    log_s = tl.log(s)
    x_t = _prep(tl.load(row_ptr + tl.where(in_range, tok, 0)).to(tl.float32), temperature, softcap, SCALE, EXACT_DIV,
                SOFTCAP)
    # (x_t - m) - log s, as torch's log_softmax: forming lse = m + log s first would add a rounding
    # of |lse| (1e-3 at |logits| ~ 1e4). x_t <= m and log s >= 0 (the maximum contributes exp(0)),
    # so the result is <= 0; the clamp only guards the sign.
    logprob = (x_t - m) - log_s
    # not tl.minimum: it returns 0 for a NaN operand, turning a NaN/+inf row into log-prob 0
    logprob = tl.where(logprob > 0.0, 0.0, logprob)
    logprob = tl.where(in_range, logprob, float("nan"))  # unchecked out-of-range token: NaN, no read
    logprob = tl.where(ignored, 0.0, logprob)
    tl.store(logprob_ptr + row, logprob)
    # Ignored rows store m = +inf: the backward's exp(x - m) is then 0, not exp(x) overflowing.
    tl.store(max_ptr + row, tl.where(ignored, float("inf"), m))
    tl.store(logsum_ptr + row, log_s)
    if RETURN_ENTROPY:
        entropy = log_s - w / s
        tl.store(entropy_ptr + row, tl.where(ignored, 0.0, entropy))


@triton.jit
def token_logprobs_fwd_kernel(logits_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                              stride_row, vocab_size, temperature, softcap, ignore_index,
                              SCALE: tl.constexpr, EXACT_DIV: tl.constexpr, SOFTCAP: tl.constexpr,
                              RETURN_ENTROPY: tl.constexpr, BLOCK_V: tl.constexpr):
    """Aligned variant: used when the vocabulary size is a multiple of 16 (rows 16-byte aligned)."""
    _token_logprobs_fwd_row(logits_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                            stride_row, vocab_size, temperature, softcap, ignore_index,
                            SCALE, EXACT_DIV, SOFTCAP, RETURN_ENTROPY, BLOCK_V)


@triton.jit(do_not_specialize=["stride_row"], do_not_specialize_on_alignment=["logits_ptr"])
def token_logprobs_fwd_kernel_generic(logits_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                                      stride_row, vocab_size, temperature, softcap, ignore_index,
                                      SCALE: tl.constexpr, EXACT_DIV: tl.constexpr, SOFTCAP: tl.constexpr,
                                      RETURN_ENTROPY: tl.constexpr, BLOCK_V: tl.constexpr):
    """Variant for other vocabulary sizes. Triton picks the register layout (and with it the
    order of the in-block sums) from the alignment it can prove for the pointer and stride; not
    specialising on them gives one layout for every row, wherever it lies in memory."""
    _token_logprobs_fwd_row(logits_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                            stride_row, vocab_size, temperature, softcap, ignore_index,
                            SCALE, EXACT_DIV, SOFTCAP, RETURN_ENTROPY, BLOCK_V)


# ---------------------------------------------------------------------------------------------
# Fused LM-head kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _logit_tile(hidden_ptr, weight_ptr, rows, row_mask, cols, col_mask, hidden_size, stride_h, stride_w,
                BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """fp32 [BLOCK_T, BLOCK_V] tile of hidden[rows] @ weight[cols].T, K-loop over the hidden size.
    ``MASK_ROWS`` / ``MASK_COLS`` False: every row / column is in bounds (no mask on the loads)."""
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = hidden_ptr + rows.to(tl.int64)[:, None] * stride_h + offs_k[None, :]
    b_ptrs = weight_ptr + cols.to(tl.int64)[None, :] * stride_w + offs_k[:, None]
    acc = tl.zeros([BLOCK_T, BLOCK_V], dtype=tl.float32)
    for k0 in range(0, hidden_size, BLOCK_K):
        if EVEN_K:
            a_mask = row_mask[:, None] if MASK_ROWS else None
            b_mask = col_mask[None, :] if MASK_COLS else None
        else:
            k_in = (k0 + offs_k) < hidden_size
            a_mask = (row_mask[:, None] & k_in[None, :]) if MASK_ROWS else k_in[None, :]
            b_mask = (col_mask[None, :] & k_in[:, None]) if MASK_COLS else k_in[:, None]
        if a_mask is None:
            a = tl.load(a_ptrs)
        else:
            a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        if b_mask is None:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    return acc


@triton.jit(do_not_specialize=["n_rows"])
def linear_logprobs_fwd_kernel(hidden_ptr, weight_ptr, tokens_ptr, order_ptr, n_active_ptr, part_ptr,
                               n_rows, vocab_size, hidden_size, stride_h, stride_w, inv_temperature, softcap,
                               vblocks_per_split,
                               NSPLIT: tl.constexpr, SCALE: tl.constexpr, SOFTCAP: tl.constexpr,
                               RETURN_ENTROPY: tl.constexpr,
                               EVEN_K: tl.constexpr, EVEN_V: tl.constexpr, BLOCK_T: tl.constexpr,
                               BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Partial statistics of one (token block, vocabulary split): running max, sum and weighted sum
    and the target logit, written to ``part[4, NSPLIT, n_rows]`` at each row's own index.

    Rows arrive through ``order`` (a permutation of the rows with the ``n_active`` rows that are
    not ``ignore_index`` first, ``api._linear_forward``): token blocks past ``n_active`` run no
    GEMM, so a packed batch's prompt tokens (often most of it) cost nothing. Each logit is still one
    fp32 dot product over H in fixed K-steps, whichever tile row it lands in (batch invariance).

    Program ids run split-fastest, so the programs resident together share a few hidden tiles
    and walk NSPLIT weight streams in step: both stay in L2 (16 x 0.9 MB each at BLOCK 128,
    H 3584) and the kernel is bound by the tensor cores, not HBM.
    """
    pid = tl.program_id(0)
    pid_t = pid // NSPLIT
    pid_s = pid % NSPLIT
    n_active = tl.load(n_active_ptr)
    slots = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    row_mask = slots < n_active
    # every slot holds a real row (slots past n_rows read row 0): the hidden loads need no row mask,
    # and the statistics of a slot past n_active are computed but never stored
    rows = tl.load(order_ptr + slots, mask=slots < n_rows, other=0)
    # int32 token compare (one ISETP a logit where int64 took two); a token outside this split
    # (or an unchecked one outside [0, V)) becomes NO_TOKEN and matches no column
    tok = tl.load(tokens_ptr + rows)
    v_lo = pid_s * vblocks_per_split * BLOCK_V
    v_hi = tl.minimum(v_lo + vblocks_per_split * BLOCK_V, vocab_size)
    v_hi = tl.where(pid_t * BLOCK_T < n_active, v_hi, v_lo)  # a block of ignored rows: no GEMM
    NO_TOKEN: tl.constexpr = 2147483647
    tok = tl.where(row_mask & (tok >= v_lo) & (tok < v_hi), tok, NO_TOKEN).to(tl.int32)
    next_tok = tl.min(tok, 0)  # the lowest target column still ahead in this split
    m = tl.zeros([BLOCK_T], dtype=tl.float32) + float("-inf")
    s = tl.zeros([BLOCK_T], dtype=tl.float32)
    w = tl.zeros([BLOCK_T], dtype=tl.float32)
    tgt = tl.zeros([BLOCK_T], dtype=tl.float32)
    if SCALE:
        inv_t = inv_temperature
    else:
        inv_t = 1.0
    c = inv_t * LOG2E  # exp((z - m) / T) = exp2(z * c - m * c): one FFMA and one MUFU a logit
    for v0 in range(v_lo, v_hi, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        if EVEN_V:  # V a multiple of BLOCK_V (152064 and 128256 at 128): no column mask anywhere
            z = _logit_tile(hidden_ptr, weight_ptr, rows, None, cols, None, hidden_size, stride_h,
                            stride_w, BLOCK_T, BLOCK_V, BLOCK_K, EVEN_K, False, False, DOT_PRECISION)
        else:
            col_mask = cols < vocab_size
            z = _logit_tile(hidden_ptr, weight_ptr, rows, None, cols, col_mask, hidden_size, stride_h,
                            stride_w, BLOCK_T, BLOCK_V, BLOCK_K, EVEN_K, False, True, DOT_PRECISION)
        if SOFTCAP:  # Gemma 2's final-logit cap, before the temperature (as HF, verl and Liger apply it)
            z = softcap * _tanh(z * (1.0 / softcap))[0]
        if not EVEN_V:  # after the cap, which maps a masked column's 0 to 0, not -inf
            z = tl.where(col_mask[None, :], z, float("-inf"))
        # The statistics run on the (capped) logits z before 1/T (the maximum commutes with 1/T > 0):
        # m is in those units.
        m_new = tl.maximum(m, tl.max(z, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row of only -inf so far: no NaN
        e = tl.math.exp2(z * c - (m_safe * c)[:, None])
        alpha = tl.math.exp2((m - m_safe) * c)
        if RETURN_ENTROPY:
            # w = sum e * d with d = (z - m) / T, the log-weight relative to the running maximum
            shift = tl.where(alpha > 0, (m - m_safe) * inv_t, 0.0)  # 0 on the first tile (m = -inf, s = 0)
            d = z * inv_t - (m_safe * inv_t)[:, None]
            if not EVEN_V:
                d = tl.maximum(d, -3.0e38)  # a masked column: e = 0 and d = -inf must add 0, not NaN
            w = alpha * (w + s * shift) + tl.sum(e * d, 1)
        s = s * alpha + tl.sum(e, 1)
        m = m_new
        # The target logit from the same fp32 tile as the sums (so log-prob <= 0 holds exactly),
        # selected only on the tiles that hold some row's token (~1 in 18 at T-block 64, V 152064,
        # 16 splits): a branch uniform over the CTA, no per-logit compare elsewhere.
        if next_tok < v0 + BLOCK_V:
            tgt += tl.sum(tl.where(tl.arange(0, BLOCK_V)[None, :] == (tok - v0)[:, None], z, 0.0), 1)
            next_tok = tl.min(tl.where(tok >= v0 + BLOCK_V, tok, NO_TOKEN), 0)
    if SCALE:
        m = m * inv_temperature  # the combine and the backward take the maximum in units of z / T
        tgt = tgt * inv_temperature
    stride_q = NSPLIT * n_rows
    base = part_ptr + pid_s * n_rows + rows
    tl.store(base, m, mask=row_mask)
    tl.store(base + stride_q, s, mask=row_mask)
    tl.store(base + 2 * stride_q, w, mask=row_mask)
    tl.store(base + 3 * stride_q, tgt, mask=row_mask)


@triton.jit(do_not_specialize=["n_rows"])
def linear_logprobs_combine_kernel(part_ptr, tokens_ptr, logprob_ptr, entropy_ptr, max_ptr, logsum_ptr,
                                   n_rows, vocab_size, ignore_index,
                                   NSPLIT: tl.constexpr, RETURN_ENTROPY: tl.constexpr, BLOCK_T: tl.constexpr):
    """Merge the NSPLIT partials of each row in split order (elementwise per row: the result does
    not depend on which rows share the block). An ignored row has no partials (the forward skipped
    it): log-prob and entropy 0, max +inf and log-sum 0, so the backward's exp(z - max) is 0."""
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    row_mask = rows < n_rows
    tok = tl.load(tokens_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    ignored = tok == ignore_index
    in_range = (tok >= 0) & (tok < vocab_size)
    live = row_mask & ~ignored
    stride_q = NSPLIT * n_rows
    m_all = tl.zeros([BLOCK_T], dtype=tl.float32) + float("-inf")
    for i in tl.static_range(NSPLIT):
        m_all = tl.maximum(m_all, tl.load(part_ptr + i * n_rows + rows, mask=live, other=0.0))
    s_all = tl.zeros([BLOCK_T], dtype=tl.float32)
    w_all = tl.zeros([BLOCK_T], dtype=tl.float32)
    tgt = tl.zeros([BLOCK_T], dtype=tl.float32)
    for i in tl.static_range(NSPLIT):
        base = part_ptr + i * n_rows + rows
        m_i = tl.load(base, mask=live, other=0.0)
        s_i = tl.load(base + stride_q, mask=live, other=1.0)  # rows with no partials: no log(0)
        a = tl.math.exp2((m_i - m_all) * LOG2E)  # 0 for an empty split (m_i = -inf, s_i = 0)
        s_all += s_i * a
        if RETURN_ENTROPY:
            w_i = tl.load(base + 2 * stride_q, mask=live, other=0.0)
            w_all += a * (w_i + s_i * tl.where(s_i > 0, m_i - m_all, 0.0))
        tgt += tl.load(base + 3 * stride_q, mask=live, other=0.0)
    log_s = tl.log(s_all)
    logprob = (tgt - m_all) - log_s
    logprob = tl.where(logprob > 0.0, 0.0, logprob)  # keeps NaN (tl.minimum would give 0)
    logprob = tl.where(in_range, logprob, float("nan"))
    logprob = tl.where(ignored, 0.0, logprob)
    tl.store(logprob_ptr + rows, logprob, mask=row_mask)
    tl.store(max_ptr + rows, tl.where(ignored, float("inf"), m_all), mask=row_mask)
    tl.store(logsum_ptr + rows, tl.where(ignored, 0.0, log_s), mask=row_mask)
    if RETURN_ENTROPY:
        entropy = log_s - w_all / s_all
        tl.store(entropy_ptr + rows, tl.where(ignored, 0.0, entropy), mask=row_mask)
