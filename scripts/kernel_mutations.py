"""The planted kernel bugs that ``scripts/mutation_check.py`` checks the CPU kernel tests against:
one exact snippet of one file under ``kernels/`` replaced by a buggy one. ``old`` must occur exactly
once in its file (``tests/kernels/test_kernel_mutations.py`` keeps the list in step with the
kernels)."""

from __future__ import annotations

from dataclasses import dataclass

PACK = "kernels/packing/kernel.py"
LOGPROB = "kernels/logprob/kernel.py"
LOGPROB_BWD = "kernels/logprob/kernel_bwd.py"
ATTN = "kernels/attention/kernel.py"
ATTN_API = "kernels/attention/api.py"
ATTN_DECODE = "kernels/attention/kernel_decode.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    family: str
    path: str
    old: str
    new: str
    what: str


MUTATIONS = [
    # ---- packing: masks and offsets
    Mutation("pack-row-mask", "packing", PACK, "mask = (rows[:, None] < length)", "mask = (rows[:, None] <= length)",
             "pack writes one row past each sequence (the next sequence's first row: a race)"),
    Mutation("unpack-read-mask", "packing", PACK, "valid = in_bounds & (rows[:, None] < length)",
             "valid = in_bounds & (rows[:, None] <= length)", "unpack copies the next sequence's first row"),
    Mutation("unpack-store-mask", "packing", PACK, "in_bounds = (rows[:, None] < S)", "in_bounds = (rows[:, None] <= S)",
             "unpack writes one row past the padded length"),
    Mutation("pack-dst-offset", "packing", PACK, "dst = packed_ptr + (start + rows[:, None]) * F",
             "dst = packed_ptr + (start + rows[:, None] + 1) * F", "pack stores every row one slot later"),
    # ---- log-prob, logits kernels
    Mutation("fused-tile-int32-rows", "logprob", LOGPROB,
             "a_ptrs = hidden_ptr + rows.to(tl.int64)[:, None] * stride_h", "a_ptrs = hidden_ptr + rows[:, None] * stride_h",
             "the fused LM head's tile addresses hidden rows in int32: wraps past 2^31 elements (the backward's rows)"),
    Mutation("logits-16bit-temperature-scale", "logprob", LOGPROB, "x = x * (1.0 / temperature)",
             "x = x * (1.0003 / temperature)", "16-bit path divides by the temperature 3e-4 wrong"),
    Mutation("logits-lse-bias", "logprob", LOGPROB, "    log_s = tl.log(s)\n", "    log_s = tl.log(s) + 2e-4\n",
             "log-sum-exp (saved for the backward too) biased by 2e-4"),
    Mutation("logits-logprob-bias", "logprob", LOGPROB, "    logprob = (x_t - m) - log_s\n",
             "    logprob = (x_t - m) - log_s - 3e-4\n", "log-prob biased by 3e-4"),
    Mutation("logits-entropy-dropped-shift", "logprob", LOGPROB, "w = alpha * (w + s * shift) + tl.sum(e * tl.maximum(d, -3.0e38), 0)",
             "w = alpha * w + tl.sum(e * tl.maximum(d, -3.0e38), 0)", "entropy's running sum drops the max-shift term"),
    Mutation("logits-entropy-scale", "logprob", LOGPROB, "        entropy = log_s - w / s\n",
             "        entropy = log_s - w / s * 1.0003\n", "entropy's second term scaled by 1.0003"),
    Mutation("logits-tail-mask", "logprob", LOGPROB, "x = tl.load(row_ptr + cols, mask=cols < v_end,",
             "x = tl.load(row_ptr + cols, mask=cols <= v_end,", "the tail block reads one logit past the row"),
    # (the backward after the logprob merge: 1/T folded into the per-row factors for 16-bit inputs,
    # applied per element for fp32 (EXACT_DIV, the interpreter tests' dtype); one-hot stored apart)
    Mutation("logits-bwd-dropped-temperature", "logprob", LOGPROB_BWD,
             "        g = _scale(g, temperature, SCALE, EXACT_DIV)\n", "        g = g\n",
             "fp32 backward drops the 1/temperature scaling of the softmax term"),
    Mutation("logits-bwd-scale", "logprob", LOGPROB_BWD, "    return g, dcap\n", "    return g * 1.0003, dcap\n",
             "logits gradient's softmax term scaled by 1.0003 (every column, the target's too)"),
    Mutation("logits-bwd-store-mask", "logprob", LOGPROB_BWD,
             "_store_grad(grad_row + cols, -g, cols < vocab_size, ROUND_BF16)",
             "_store_grad(grad_row + cols, -g, cols <= vocab_size, ROUND_BF16)",
             "backward writes one gradient past each row (the next row's first: a race)"),
    # ---- log-prob, fused LM head
    Mutation("fused-combine-weight", "logprob", LOGPROB, "        s_all += s_i * a\n",
             "        s_all += s_i * a * (1.01 if i == 0 else 1.0)\n", "split combine weights the first split 1% high"),
    Mutation("fused-target-bias", "logprob", LOGPROB, "    logprob = (tgt - m_all) - log_s\n",
             "    logprob = (tgt - m_all) - log_s + 2e-4\n", "fused log-prob biased by 2e-4 (clamped at 0)"),
    Mutation("fused-entropy-scale", "logprob", LOGPROB, "        entropy = log_s - w_all / s_all\n",
             "        entropy = log_s - w_all / s_all * 1.0002\n", "fused entropy's second term scaled by 1.0002"),
    Mutation("fused-split-end", "logprob", LOGPROB, "    v_hi = tl.minimum(v_lo + vblocks_per_split * BLOCK_V, vocab_size)\n",
             "    v_hi = tl.minimum(v_lo + vblocks_per_split * BLOCK_V, vocab_size - 1)\n",
             "the last vocabulary split stops one column early"),
    Mutation("fused-dlogits-scale", "logprob", LOGPROB_BWD, "    if SCALE:\n        dz = dz * inv_temperature\n",
             "    if SCALE:\n        dz = dz * inv_temperature * 1.0003\n", "fused d(logits) scaled by 1.0003"),
    Mutation("fused-dlogits-store-mask", "logprob", LOGPROB_BWD, "    col_mask = local < chunk_cols\n",
             "    col_mask = local <= chunk_cols\n", "fused backward writes one column past its chunk"),
    Mutation("fused-dlogits-dropped-entropy", "logprob", LOGPROB_BWD,
             "        dz -= g_ent[:, None] * p * tl.where(p > 0, logp + entropy[:, None], 0.0)\n", "",
             "fused backward drops the entropy gradient"),
    Mutation("fused-accumulate-k-mask", "logprob", LOGPROB_BWD, "        k_mask = (k0 + offs_k) < K\n",
             "        k_mask = (k0 + offs_k) <= K\n", "d(hidden) matmul reads one vocabulary column past the chunk"),
    Mutation("fused-softcap-scale", "logprob", LOGPROB, "            z = softcap * _tanh(z * (1.0 / softcap))[0]\n",
             "            z = softcap * 1.0003 * _tanh(z * (1.0 / softcap))[0]\n",
             "fused forward's capped logits scaled by 1.0003"),
    Mutation("fused-dlogits-softcap-derivative", "logprob", LOGPROB_BWD, "        dz = dz * dcap\n",
             "        dz = dz * dcap * 1.0003\n", "fused backward's softcap derivative scaled by 1.0003"),
    Mutation("logits-exp2-base", "logprob", LOGPROB, "LOG2E = tl.constexpr(1.4426950408889634)",
             "LOG2E = tl.constexpr(1.4431)", "exp2's base constant 3e-4 off (every exp of the log-prob kernels)"),
    # ---- decode splits
    Mutation("decode-single-launch-rule", "attention", ATTN_API,
             "if rows >= SINGLE_LAUNCH_WAVES * num_sms and max_len <= SINGLE_LAUNCH_MAX_LEN:",
             "if rows >= SINGLE_LAUNCH_WAVES * num_sms or max_len <= SINGLE_LAUNCH_MAX_LEN:",
             "small batches with short caches lose their splits (one program per sequence and head)"),
    # ---- attention forward
    Mutation("attn-causal-off-by-one", "attention", ATTN,
             "(cols[None, :] <= offs_m[:, None] + diag)\n        if WINDOW:\n            allowed = allowed & _in_window("
             "offs_m[:, None], cols[None, :], diag, win_left, win_right)\n        qk = tl.where",
             "(cols[None, :] < offs_m[:, None] + diag)\n        if WINDOW:\n            allowed = allowed & _in_window("
             "offs_m[:, None], cols[None, :], diag, win_left, win_right)\n        qk = tl.where",
             "forward causal mask off by one"),
    Mutation("attn-row-mask", "attention", ATTN, "    row_mask = offs_m < q_len\n\n    Q_base",
             "    row_mask = offs_m <= q_len\n\n    Q_base", "forward writes one row past each sequence"),
    Mutation("attn-lse-bias", "attention", ATTN,
             "    lse = tl.where(empty, float(\"inf\"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)\n    O_base",
             "    lse = tl.where(empty, float(\"inf\"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453 + 2e-4)\n    O_base",
             "forward log-sum-exp biased by 2e-4"),
    Mutation("attn-dropped-scale", "attention", ATTN,
             "tl.max(qk, 1) * qk_scale_log2)\n        p = tl.math.exp2(qk * qk_scale_log2 - m_new[:, None])",
             "tl.max(qk, 1) * 1.4426950408889634)\n        p = tl.math.exp2(qk * 1.4426950408889634 - m_new[:, None])",
             "forward drops the softmax scale"),
    Mutation("attn-out-scale", "attention", ATTN, "    out = acc / tl.where(empty, 1.0, l_i)[:, None]\n    lse = tl.where(empty, float(\"inf\"), (m_i",
             "    out = acc / tl.where(empty, 1.0, l_i)[:, None] * 1.0003\n    lse = tl.where(empty, float(\"inf\"), (m_i",
             "fp16 forward output scaled by 1.0003 (below fp16 rounding)"),
    Mutation("attn-key-mask", "attention", ATTN, "    col_mask = cols < k_len\n    k = _load_tile(K_base + cols[:, None].to("
             "tl.int64) * stride_kt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)\n    qk = tl.dot",
             "    col_mask = cols <= k_len\n    k = _load_tile(K_base + cols[:, None].to("
             "tl.int64) * stride_kt + offs_d[None, :], col_mask, offs_d, HEAD_DIM, EVEN_D, MASKED)\n    qk = tl.dot",
             "forward attends to one key past the sequence"),
    Mutation("attn-full-blocks-off-by-one", "attention", ATTN,
             "        full_end = tl.minimum(k_len, m0 + diag + 1)  # every row of the block sees keys below this",
             "        full_end = tl.minimum(k_len, m0 + diag + 2)  # every row of the block sees keys below this",
             "forward runs one key too many through the unmasked loop"),
    # ---- attention backward
    Mutation("attn-dk-scale", "attention", ATTN, "    dk = dk * softmax_scale\n", "    dk = dk * softmax_scale * 1.0003\n",
             "dK scaled by 1.0003 (below fp16 rounding)"),
    Mutation("attn-dq-scale", "attention", ATTN, "    dq = dq * softmax_scale\n", "    dq = dq * softmax_scale * 0.9997\n",
             "dQ scaled by 0.9997 (below fp16 rounding)"),
    Mutation("attn-dkdv-key-mask", "attention", ATTN, "    col_mask = offs_n < k_len\n    K_base",
             "    col_mask = offs_n <= k_len\n    K_base", "dK/dV written one key past each sequence"),
    Mutation("attn-dkdv-first-row", "attention", ATTN,
             "start_m = tl.minimum((tl.maximum(n0 - diag, 0) // BLOCK_M) * BLOCK_M, q_len_ceil)",
             "start_m = tl.minimum((tl.maximum(n0 - diag + 1, 0) // BLOCK_M) * BLOCK_M, q_len_ceil)",
             "dK/dV skips the first query block that sees a key block"),
    Mutation("attn-dkdv-causal", "attention", ATTN, "pT = tl.where(offs_n_abs[:, None] <= rows[None, :] + diag, pT, 0.0)",
             "pT = tl.where(offs_n_abs[:, None] < rows[None, :] + diag, pT, 0.0)", "dK/dV causal mask off by one"),
    Mutation("attn-dq-causal", "attention", ATTN,
             "(cols[None, :] <= offs_m[:, None] + diag)\n        if WINDOW:\n            allowed = allowed & _in_window("
             "offs_m[:, None], cols[None, :], diag, win_left, win_right)\n        p = tl.where",
             "(cols[None, :] < offs_m[:, None] + diag)\n        if WINDOW:\n            allowed = allowed & _in_window("
             "offs_m[:, None], cols[None, :], diag, win_left, win_right)\n        p = tl.where", "dQ causal mask off by one"),
    Mutation("attn-dq-key-mask", "attention", ATTN, "        p = tl.where(allowed, p, 0.0)\n",
             "        p = tl.where(allowed | (cols[None, :] >= k_len), p, 0.0)\n",
             "dQ lets keys past k_len through (NaN in fp16 when not causal: flash-attn's varlen overflow test)"),
    Mutation("attn-window-left-off-by-one", "attention", ATTN, "    return (cols >= rows + diag - win_left)",
             "    return (cols > rows + diag - win_left)", "sliding window drops its leftmost key"),
    Mutation("attn-softcap-slope", "attention", ATTN, "        dsT = dsT * (1.0 - tT * tT)\n",
             "        dsT = dsT * (1.0 - 0.9 * tT * tT)\n", "dK's softcap slope 1 - 0.9 tanh^2"),
    Mutation("attn-dq-lse-bias", "attention", ATTN,
             "    lse2 = lse2 * 1.4426950408889634\n    delta = tl.load(DELTA",
             "    lse2 = (lse2 + 2e-4) * 1.4426950408889634\n    delta = tl.load(DELTA",
             "dQ reads the log-sum-exp 2e-4 high"),
    Mutation("attn-delta-scale", "attention", ATTN, "    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)\n",
             "    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1) * 1.0003\n",
             "backward's softmax row term delta scaled by 1.0003"),
    Mutation("decode-window-first-row", "attention", ATTN_DECODE,
             "first = kv_len - seqlen_q + (tl.program_id(2) * BLOCK_G) // group ",
             "first = kv_len - seqlen_q + (tl.program_id(2) * BLOCK_G) // group + 1 ",
             "a multi-token decode block's window starts one key late: skips a tile when it starts on its last key"),
    Mutation("attn-window-key-end", "attention", ATTN, "m0 + BLOCK_M + diag + win_right), 0), lo",
             "m0 + BLOCK_M + diag + win_right - 1), 0), lo",
             "a windowed query block's key range ends one key short: drops a tile when that key starts one"),
    Mutation("attn-window-dkdv-row-start", "attention", ATTN, "start_m = tl.minimum((tl.maximum(n0 - diag - win_right, 0)",
             "start_m = tl.minimum((tl.maximum(n0 - diag - win_right + 1, 0)",
             "dK/dV: a windowed key block's rows start one late: drops a row block when its last row is the first"),
    Mutation("attn-delta-mask", "attention", ATTN, "    tl.store(DELTA + head.to(tl.int64) * stride_dh + offs_t, delta, mask=offs_t < n_tokens)",
             "    tl.store(DELTA + head.to(tl.int64) * stride_dh + offs_t, delta, mask=offs_t <= n_tokens)",
             "backward preprocess writes one delta past the tokens (the next head's first)"),
    # ---- decode
    Mutation("decode-key-mask", "attention", ATTN_DECODE, "        col_mask = cols < n_hi\n", "        col_mask = cols <= n_hi\n",
             "a decode split reads one key of the next split"),
    Mutation("decode-lse-bias", "attention", ATTN_DECODE,
             "        lse = tl.where(empty, float(\"inf\"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)\n        lse = tl.where(bad_len",
             "        lse = tl.where(empty, float(\"inf\"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453 + 3e-4)\n        lse = tl.where(bad_len",
             "single-split decode log-sum-exp biased by 3e-4"),
    Mutation("decode-partial-lse-bias", "attention", ATTN_DECODE,
             "        lse2 = tl.where(empty, float(\"-inf\"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))",
             "        lse2 = tl.where(empty, float(\"-inf\"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)) + 3e-4)",
             "split partial log-sum-exps biased by 3e-4"),
    Mutation("decode-combine-weight", "attention", ATTN_DECODE, "        w = tl.math.exp2(lse - m)\n",
             "        w = tl.math.exp2(lse - m) * tl.where(s == 0, 1.01, 1.0)\n", "combine weights the first split 1% high"),
    Mutation("decode-out-scale", "attention", ATTN_DECODE,
             "    out = acc / tl.where(empty, 1.0, l_i)[:, None]\n    out = tl.where(bad_len",
             "    out = acc / tl.where(empty, 1.0, l_i)[:, None] * 1.0003\n    out = tl.where(bad_len",
             "decode split output scaled by 1.0003 (below fp16 rounding)"),
    Mutation("decode-combine-out-scale", "attention", ATTN_DECODE, "    out = acc / tl.where(empty, 1.0, total)\n",
             "    out = acc / tl.where(empty, 1.0, total) * 0.9997\n", "combined decode output scaled by 0.9997"),
    Mutation("decode-combine-lse-bias", "attention", ATTN_DECODE,
             "    lse_out = tl.where(empty, float(\"inf\"), (m + tl.math.log2(tl.where(empty, 1.0, total))) * 0.6931471805599453)",
             "    lse_out = tl.where(empty, float(\"inf\"), (m + tl.math.log2(tl.where(empty, 1.0, total))) * 0.6931471805599453 - 2e-4)",
             "combined log-sum-exp biased by 2e-4"),
    Mutation("decode-idle-split-writes", "attention", ATTN_DECODE, "    if (n_lo >= kv_len) & (split > 0):",
             "    if (n_lo > kv_len) & (split > 0):", "a split past the sequence's end still writes a partial"),
    Mutation("decode-group-mask", "attention", ATTN_DECODE, "    g_mask = offs_g < group\n", "    g_mask = offs_g <= group\n",
             "decode writes one query head of the next KV group"),
    Mutation("decode-page-index", "attention", ATTN_DECODE, "tl.where(col_mask, cols // PAGE_SIZE - p0, 0), 0)",
             "tl.where(col_mask, (cols + 1) // PAGE_SIZE - p0, 0), 0)", "paged decode reads the next page one key early"),
    Mutation("decode-combine-drops-last-split", "attention", ATTN_DECODE, "    n_active = (kv_len + split_tokens - 1) // split_tokens\n",
             "    n_active = kv_len // split_tokens\n", "combine ignores a partly filled last split"),
    Mutation("decode-dropped-scale", "attention", ATTN_DECODE,
             "if SOFTCAP else qk * qk_scale_log2\n", "if SOFTCAP else qk\n", "decode drops the softmax scale"),
    Mutation("decode-window-left-off-by-one", "attention", ATTN_DECODE, "(cols[None, :] >= pos - win_left)",
             "(cols[None, :] > pos - win_left)", "decode window drops its leftmost key"),
    Mutation("decode-multi-window-left", "attention", ATTN_DECODE, "(cols[None, :] >= pos[:, None] - win_left)",
             "(cols[None, :] > pos[:, None] - win_left)", "multi-token decode window drops its leftmost key"),
    Mutation("decode-multi-causal-off-by-one", "attention", ATTN_DECODE, "        pos = kv_len - seqlen_q + tok\n",
             "        pos = kv_len - seqlen_q + tok + 1\n", "multi-token decode: each query sees the next key"),
    Mutation("decode-multi-row-block", "attention", ATTN_DECODE,
             "        offs_g = tl.program_id(2) * BLOCK_G + offs_g\n", "        offs_g = offs_g\n",
             "multi-token decode: every row block computes the first"),
    Mutation("decode-softcap-slope", "attention", ATTN_DECODE, "_tanh(qk * softcap_in) * softcap_out if SOFTCAP",
             "_tanh(qk * softcap_in * 1.0003) * softcap_out if SOFTCAP", "decode softcap's inner slope 3e-4 high"),
]
