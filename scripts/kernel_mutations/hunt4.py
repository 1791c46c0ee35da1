"""The planted bugs of a fourth list, one module for all three families
(``mutation_check.FAMILY_TESTS`` runs each bug with its own family's tests). Written with the first
three lists in sight and aimed at what they cover thinly: packing (a trusted length past the padded
width, the planner's exact-fit bounds, its reports, a fractional attention cost, the budget under a
cost that is not the token count), log-prob (single-output gradients of the fused head, the chunked
d(hidden) with a strided weight, the fused combine's token range, int64 rows in the logits backward,
rows whose logits all underflow exp, ignored rows, the vocabulary-parallel reductions, a shard
masked whole) and attention (paged decode with K and V pages in different layouts, multi-token
decode with a left-only window, an unbounded left window with fewer queries than keys, the plan
cache's max_seqlen_q key, the single-launch boundary, more than 16 decode splits, GQA and offsets in
dQ and dK/dV). Of its 48 bugs the tests then in place killed 28; the 19 real gaps among the
survivors got tests and stay here, with one more: the vocabulary-parallel entropy of a row whose
logits one rank's shard holds only as -inf was NaN (a real bug the hunt found by reading the code,
fixed in ``parallel.py``).

Left out: KK's first pop taking a merged state before a singleton of equal spread and equal
heaviest set (``>=`` to ``>`` in ``partition._kk_free``'s first tie test): a tie order only. In
200,000 random integer instances (k = 2..6, ties everywhere) no partition's sum changed, only which
equal-sum sets form (0.4%); the tests' reference LDM itself forms other equal-sum sets than the
implementation on 6.5% of 30,000 such instances, so the sets under a tie are not a defined result."""

from __future__ import annotations

from .mutation import Mutation

PACK = "kernels/packing/kernel.py"
PARTITION = "kernels/packing/partition.py"
PLANNER = "kernels/packing/planner.py"
LOGPROB = "kernels/logprob/kernel.py"
LOGPROB_BWD = "kernels/logprob/kernel_bwd.py"
LOGPROB_API = "kernels/logprob/api.py"
PARALLEL = "kernels/logprob/parallel.py"
ATTN = "kernels/attention/kernel.py"
ATTN_API = "kernels/attention/api.py"
ATTN_DECODE = "kernels/attention/kernel_decode.py"
ATTN_SCHEDULE = "kernels/attention/schedule.py"


MUTATIONS = [
    # ======== the fourth list
    # ---------------- packing: kernels
    Mutation("pack-length-unclamped", "packing", PACK, "    length = tl.minimum(length, S)\n", "",
             "pack trusts a device length past S: reads the next sequence's padded rows (past the buffer for the last)"),
    Mutation("unpack-store-valid-only", "packing", PACK, "    tl.store(dst, vals, mask=in_bounds)",
             "    tl.store(dst, vals, mask=valid)",
             "unpack leaves the padding rows unwritten (relies on a memset that new_empty does not do)"),
    Mutation("unpack-fill-one", "packing", PACK, "vals = tl.load(src, mask=valid, other=0)",
             "vals = tl.load(src, mask=valid, other=1)", "unpack pads with ones instead of zeros"),
    # ---------------- packing: planner
    Mutation("plan-bound-exact-total", "packing", PLANNER, "    if int(lengths.sum()) > k * max_tokens:",
             "    if int(lengths.sum()) >= k * max_tokens:",
             "a batch that fills k partitions of max_tokens exactly is refused as infeasible"),
    Mutation("greedy-bounded-exact-fit", "packing", PARTITION,
             "            while heap and toks[heap[0][1]] + t > max_tokens:",
             "            while heap and toks[heap[0][1]] + t >= max_tokens:",
             "bounded LPT (cost != tokens) never fills a partition exactly"),
    Mutation("greedy-lpt-exact-fit", "packing", PARTITION,
             "            if bounded and toks[j] + tok_list[i] > max_tokens:",
             "            if bounded and toks[j] + tok_list[i] >= max_tokens:",
             "bounded LPT (cost == tokens) gives up on an item that fills the lightest partition exactly"),
    Mutation("fits-strict", "packing", PARTITION, "int(_loads(assign, tokens, k).max()) <= max_tokens",
             "int(_loads(assign, tokens, k).max()) < max_tokens",
             "an assignment whose fullest partition holds exactly max_tokens is rejected"),
    Mutation("plan-max-mb-tokens-min", "packing", PLANNER,
             "max_microbatch_tokens=max((max(t) for t in mb_tokens if t), default=0)",
             "max_microbatch_tokens=max((min(t) for t in mb_tokens if t), default=0)",
             "the plan reports the largest of each rank's lightest micro-batch as the largest micro-batch"),
    Mutation("plan-lockstep-imbalance-total", "packing", PLANNER,
             "lockstep_imbalance=lockstep / mean if mean > 0 else 1.0",
             "lockstep_imbalance=lockstep / total if total > 0 else 1.0",
             "lock-step imbalance divided by the total cost instead of the per-rank mean"),
    Mutation("attention-cost-float-linear", "packing", PLANNER,
             "return coef * lengths.astype(np.float64) + lengths.astype(np.float64) ** 2",
             "return coef * lengths.astype(np.float64) + lengths.astype(np.float64) * 2",
             "attention_cost with a fractional coefficient adds 2 L instead of L^2"),
    Mutation("plan-split-ls-unbounded", "packing", PLANNER,
             "            sub = _local_search(c, t, packed, m, budget, False, lb, rounds=MICROBATCH_LS_ROUNDS)",
             "            sub = _local_search(c, t, packed, m, None, False, lb, rounds=MICROBATCH_LS_ROUNDS)",
             "the micro-batch fallback's local search ignores the token budget (cost != tokens)"),
    Mutation("groups-unstable-sort", "packing", PARTITION,
             "    order = np.argsort(assign, kind=\"stable\")  # indices ascending inside each partition",
             "    order = np.argsort(assign)  # indices ascending inside each partition",
             "partitions' index lists not ascending (unstable sort)"),
    Mutation("ls-swap-stale-member", "packing", PARTITION, "                new_j = new_j[new_j != moved_back]\n",
             "", "local search's swap leaves the swapped-back item listed in both partitions"),
    # ---------------- logprob: fused LM head
    Mutation("fused-dlogits-entropy-p0-nan", "logprob", LOGPROB_BWD,
             "        dz -= g_ent[:, None] * p * tl.where(p > 0, logp + entropy[:, None], 0.0)\n",
             "        dz -= g_ent[:, None] * p * (logp + entropy[:, None])\n",
             "fused backward's entropy term: p = 0 (underflow) times log p = -inf gives NaN"),
    Mutation("fused-acc-weight-stride", "logprob", LOGPROB_API,
             "d.stride(0), 1, w_chunk.stride(0), 1, acc_hidden.stride(0),",
             "d.stride(0), 1, hidden_size, 1, acc_hidden.stride(0),",
             "chunked d(hidden) reads the weight chunk as dense (wrong for a strided weight view)"),
    Mutation("fused-combine-in-range-upper", "logprob", LOGPROB,
             "    in_range = (tok >= 0) & (tok < vocab_size)\n    live = row_mask & ~ignored",
             "    in_range = (tok >= 0) & (tok <= vocab_size)\n    live = row_mask & ~ignored",
             "fused combine: an unchecked token == V gets a plausible log-prob instead of NaN"),
    Mutation("fused-bwd-has-ent-always", "logprob", LOGPROB_API, "HAS_GRAD_ENT=has_ent, EVEN_K=hidden_size % bk == 0,",
             "HAS_GRAD_ENT=True, EVEN_K=hidden_size % bk == 0,",
             "fused backward with only a log-prob gradient runs the entropy term on placeholders"),
    Mutation("fused-missing-glp-empty", "logprob", LOGPROB_API,
             "        return torch.zeros(n, dtype=torch.float32, device=device)",
             "        return torch.empty(n, dtype=torch.float32, device=device)",
             "fused backward with only an entropy gradient reads an uninitialised log-prob gradient"),
    Mutation("fused-mask-before-softcap", "logprob", LOGPROB,
             "        if SOFTCAP:  # Gemma 2's final-logit cap, before the temperature (as HF, verl and Liger apply it)\n"
             "            z = softcap * _tanh(z * (1.0 / softcap))[0]\n"
             "        if not EVEN_V:  # after the cap, which maps a masked column's 0 to 0, not -inf\n"
             "            z = tl.where(col_mask[None, :], z, float(\"-inf\"))\n",
             "        if not EVEN_V:\n"
             "            z = tl.where(col_mask[None, :], z, float(\"-inf\"))\n"
             "        if SOFTCAP:  # Gemma 2's final-logit cap, before the temperature (as HF, verl and Liger apply it)\n"
             "            z = softcap * _tanh(z * (1.0 / softcap))[0]\n",
             "fused forward masks the tail tile before the softcap: masked columns become -softcap and join the sums"),
    Mutation("fused-fwd-entropy-masked-nan", "logprob", LOGPROB,
             "                d = tl.maximum(d, -3.0e38)  # a masked column", "                d = d  # a masked column",
             "fused forward's entropy sum: a masked column's e = 0 times d = -inf gives NaN"),
    Mutation("fused-bwd-entropy-no-temperature", "logprob", LOGPROB_BWD,
             "    if HAS_GRAD_ENT:\n        g_ent = tl.load(grad_ent_ptr + rows, mask=row_mask, other=0.0)\n"
             "        entropy = tl.load(entropy_ptr + rows, mask=row_mask, other=0.0)\n"
             "        dz -= g_ent[:, None] * p * tl.where(p > 0, logp + entropy[:, None], 0.0)\n"
             "    if SCALE:\n        dz = dz * inv_temperature\n",
             "    if SCALE:\n        dz = dz * inv_temperature\n"
             "    if HAS_GRAD_ENT:\n        g_ent = tl.load(grad_ent_ptr + rows, mask=row_mask, other=0.0)\n"
             "        entropy = tl.load(entropy_ptr + rows, mask=row_mask, other=0.0)\n"
             "        dz -= g_ent[:, None] * p * tl.where(p > 0, logp + entropy[:, None], 0.0)\n",
             "fused backward: the entropy gradient misses 1/T"),
    Mutation("fused-ignored-max-not-inf", "logprob", LOGPROB,
             "    tl.store(max_ptr + rows, tl.where(ignored, float(\"inf\"), m_all), mask=row_mask)",
             "    tl.store(max_ptr + rows, m_all, mask=row_mask)",
             "fused combine stores max 0 for ignored rows: the backward's exp(z - max) overflows there"),
    # ---------------- logprob: logits kernels and vocabulary parallel
    Mutation("logits-bwd-glp-flag-always", "logprob", LOGPROB_API, "        HAS_GRAD_LP=has_lp,\n",
             "        HAS_GRAD_LP=True,\n",
             "logits backward with only an entropy gradient reads the saved maxima as the log-prob gradient"),
    Mutation("logits-fwd-tail-fill-zero", "logprob", LOGPROB,
             "x = tl.load(row_ptr + cols, mask=cols < v_end, other=float(\"-inf\")).to(tl.float32)",
             "x = tl.load(row_ptr + cols, mask=cols < v_end, other=0.0).to(tl.float32)",
             "the tail block's padding loads as logit 0 and joins the sums"),
    Mutation("vp-max-allreduce-in-place", "logprob", PARALLEL, "big_m = _all_reduce(m_r.clone(), \"max\", group)",
             "big_m = _all_reduce(m_r, \"max\", group)",
             "vocab-parallel: the MAX all-reduce overwrites the rank's own maximum (every shift becomes 0)"),
    Mutation("vp-owned-upper-inclusive", "logprob", PARALLEL,
             "owned = (local >= 0) & (local < local_vocab) & ~ignored",
             "owned = (local >= 0) & (local <= local_vocab) & ~ignored",
             "vocab-parallel: the next shard's first column is also owned by this rank"),
    Mutation("vp-sum-not-rebased", "logprob", PARALLEL,
             "scaled = torch.where(held, torch.exp(log_s_r + shift), zero)",
             "scaled = torch.where(held, torch.exp(log_s_r), zero)",
             "vocab-parallel: each rank's sum not re-based on the global maximum"),
    Mutation("vp-masked-shard-adds-nan", "logprob", PARALLEL, "held = live & (m_r != float(\"-inf\"))",
             "held = live",
             "vocab-parallel: a shard whose logits of a row are all -inf adds 0 x NaN to the entropy's sum"),
    Mutation("logits-fwd-max-init-zero", "logprob", LOGPROB, "    m = tl.zeros([], dtype=tl.float32) + float(\"-inf\")\n",
             "    m = tl.zeros([], dtype=tl.float32)\n",
             "logits forward's running maximum starts at 0, not -inf (rows of negative logits sum exp(x), not exp(x - m))"),
    Mutation("logits-bwd-row-int32", "logprob", LOGPROB_BWD, "    row = tl.program_id(0).to(tl.int64)\n",
             "    row = tl.program_id(0)\n",
             "logits backward's row offsets in int32: wraps past 2^31 elements"),
    # ---------------- attention: decode
    Mutation("decode-paged-v-k-strides", "attention", ATTN_DECODE,
             "                v_rows = page * stride_vb + (cols % PAGE_SIZE) * stride_vt",
             "                v_rows = page * stride_kb + (cols % PAGE_SIZE) * stride_kt",
             "paged decode reads V pages with K's page and token strides (K and V in different layouts)"),
    Mutation("decode-split-empty-lse-zero", "attention", ATTN_DECODE,
             "        lse2 = tl.where(empty, float(\"-inf\"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))",
             "        lse2 = tl.where(empty, 0.0, m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))",
             "an empty split partial (left of a window) gets log-sum-exp 0: the combine weights its zero output"),
    Mutation("decode-gqa-interleaved-heads", "attention", ATTN_DECODE, "        heads = kv_head * group + offs_g\n",
             "        heads = offs_g * n_heads_kv + kv_head\n",
             "decode maps a KV head to interleaved query heads (h % Hkv) instead of consecutive ones"),
    Mutation("decode-multi-right-unbounded-zero", "attention", ATTN_API,
             "min(right, unbounded) if right >= 0 else unbounded, sq)", "min(right, unbounded) if right >= 0 else 0, sq)",
             "decode: an unbounded right window side becomes 0 (non-causal multi-token with a left window turns causal)"),
    Mutation("decode-combine-denom-reset", "attention", ATTN_DECODE, "        denom += w\n", "        denom = w\n",
             "combine's weight sum restarts each block of 16 splits (more than 16 splits)"),
    Mutation("decode-single-launch-max-len-exclusive", "attention", ATTN_API,
             "if rows >= SINGLE_LAUNCH_WAVES * num_sms and max_len <= SINGLE_LAUNCH_MAX_LEN:",
             "if rows >= SINGLE_LAUNCH_WAVES * num_sms and max_len < SINGLE_LAUNCH_MAX_LEN:",
             "a cache of exactly SINGLE_LAUNCH_MAX_LEN tokens is split (launch choice only)"),
    Mutation("decode-paged-page-int32", "attention", ATTN_DECODE, "            pages = pages.to(tl.int64)\n", "",
             "paged decode's page offsets in int32: wrap past 2^31 elements"),
    # ---------------- attention: varlen
    Mutation("attn-window-right-exclusive", "attention", ATTN, "& (cols <= rows + diag + win_right)",
             "& (cols < rows + diag + win_right)", "sliding window's right edge exclusive (window + causal drops the diagonal)"),
    Mutation("bwd-preprocess-head-dim-mask", "attention", ATTN,
             "    mask = (offs_t[:, None] < n_tokens) & (offs_d[None, :] < HEAD_DIM)\n",
             "    mask = offs_t[:, None] < n_tokens\n",
             "delta = rowsum(O * dO) sums the padded head-dim columns (the next head's; D not a power of two)"),
    Mutation("dq-gqa-kv-head-interleaved", "attention", ATTN, "    kv_head = head // group\n    diag = k_len - q_len\n",
             "    kv_head = head % (n_heads_q // group)\n    diag = k_len - q_len\n",
             "dQ reads the KV head h % Hkv instead of h // group (GQA)"),
    Mutation("dq-delta-kstart", "attention", ATTN,
             "    delta = tl.load(DELTA + head.to(tl.int64) * stride_lh + q_start + offs_m, mask=row_mask, other=0.0)",
             "    delta = tl.load(DELTA + head.to(tl.int64) * stride_lh + k_start + offs_m, mask=row_mask, other=0.0)",
             "dQ reads delta at the key offset (cu_seqlens_k) instead of the query offset"),
    Mutation("dkdv-lse-kstart", "attention", ATTN, "        LSE_base = LSE + head.to(tl.int64) * stride_lh + q_start\n",
             "        LSE_base = LSE + head.to(tl.int64) * stride_lh + k_start\n",
             "dK/dV reads the log-sum-exp at the key offset instead of the query offset"),
    Mutation("attn-window-unbounded-left-total-q", "attention", ATTN_API,
             "unbounded_left, unbounded_right = max(total_k, 1), max(total_q, 1)",
             "unbounded_left, unbounded_right = max(total_q, 1), max(total_q, 1)",
             "an unbounded left window side clamped at the query count: fewer queries than keys lose the first keys"),
    Mutation("plan-cache-key-no-max-seqlen-q", "attention", ATTN_SCHEDULE,
             "key = (id(cu_q), id(cu_k), total_q, total_k, block_m, causal, schedule, max_seqlen_q, max_seqlen_k)",
             "key = (id(cu_q), id(cu_k), total_q, total_k, block_m, causal, schedule, max_seqlen_k)",
             "plan cache ignores max_seqlen_q: a too-small max_seqlen_q on cached cu_seqlens is never checked"),
    Mutation("attn-fwd-store-padded-d", "attention", ATTN,
             "        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None] & (offs_d[None, :] < HEAD_DIM))",
             "        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_mask[:, None])",
             "forward stores the padded head-dim columns (zeros into the next head; D not a power of two)"),
    Mutation("attn-fwd-q-start-int32", "attention", ATTN,
             "    Q_base = Q + q_start.to(tl.int64) * stride_qt + head * stride_qh\n    K_base",
             "    Q_base = Q + q_start * stride_qt + head * stride_qh\n    K_base",
             "forward's query base offset in int32: wraps past 2^31 elements"),
    Mutation("attn-lse-buffer-16bit", "attention", ATTN_API,
             "    lse = torch.empty((hq, total_q), device=q.device, dtype=torch.float32)",
             "    lse = torch.empty((hq, total_q), device=q.device, dtype=q.dtype)",
             "forward's log-sum-exp kept in the input dtype (16 bits), for the caller and the backward"),
    Mutation("attn-fwd-max-init-zero", "attention", ATTN,
             "    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30\n    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)\n"
             "    acc = tl.zeros([BLOCK_M, BLOCK_D]",
             "    m_i = tl.zeros([BLOCK_M], dtype=tl.float32)\n    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)\n"
             "    acc = tl.zeros([BLOCK_M, BLOCK_D]",
             "forward's running maximum starts at 0: rows whose scores are all far below 0 underflow to empty"),
]
