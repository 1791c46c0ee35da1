"""The planted bugs in sequence packing and its planner (``kernels/packing``).
The four lists (first to fourth) are described in ``__init__.py``.

Left out (fourth list): KK's first pop taking a merged state before a singleton of equal spread and
equal heaviest set (``>=`` to ``>`` in ``partition._kk_free``'s first tie test): a tie order only.
In 200,000 random integer instances (k = 2..6, ties everywhere) no partition's sum changed, only
which equal-sum sets form (0.4%); the tests' reference LDM itself forms other equal-sum sets than
the implementation on 6.5% of 30,000 such instances, so the sets under a tie are not a defined
result."""

from __future__ import annotations

from .mutation import Mutation

PACK = "kernels/packing/kernel.py"
PACK_API = "kernels/packing/api.py"
PARTITION = "kernels/packing/partition.py"
PLANNER = "kernels/packing/planner.py"


MUTATIONS = [
    # ======== the first list
    # ---- packing: masks and offsets
    Mutation("pack-row-mask", "packing", PACK, "mask = (rows[:, None] < length)", "mask = (rows[:, None] <= length)",
             "pack writes one row past each sequence (the next sequence's first row: a race)"),
    Mutation("unpack-read-mask", "packing", PACK, "valid = in_bounds & (rows[:, None] < length)",
             "valid = in_bounds & (rows[:, None] <= length)", "unpack copies the next sequence's first row"),
    Mutation("unpack-store-mask", "packing", PACK, "in_bounds = (rows[:, None] < S)", "in_bounds = (rows[:, None] <= S)",
             "unpack writes one row past the padded length"),
    Mutation("pack-dst-offset", "packing", PACK, "dst = packed_ptr + (start + rows[:, None]) * F",
             "dst = packed_ptr + (start + rows[:, None] + 1) * F", "pack stores every row one slot later"),
    # ======== the second list
    # ---- packing: launcher / planner
    Mutation("pack-grid-f-floor", "packing", PACK_API,
             "    grid = (B, triton.cdiv(S, cfg[\"BLOCK_T\"]), triton.cdiv(F, cfg[\"BLOCK_F\"]))\n    _pack_kernel",
             "    grid = (B, triton.cdiv(S, cfg[\"BLOCK_T\"]), max(1, F // cfg[\"BLOCK_F\"]))\n    _pack_kernel",
             "pack grid floors the feature blocks: features past the last full 256-block are never packed (F > 256)"),
    Mutation("unpack-grid-t-floor", "packing", PACK_API,
             "    grid = (B, triton.cdiv(max_len, cfg[\"BLOCK_T\"]), triton.cdiv(F, cfg[\"BLOCK_F\"]))",
             "    grid = (B, max(1, max_len // cfg[\"BLOCK_T\"]), triton.cdiv(F, cfg[\"BLOCK_F\"]))",
             "unpack grid floors the row blocks: padded rows past the last full BLOCK_T block stay uninitialised"),
    Mutation("pack-dst-upper-bound", "packing", PACK, "(dst_row[:, None] >= 0) & (dst_row[:, None] < T)",
             "(dst_row[:, None] >= 0) & (dst_row[:, None] <= T)",
             "pack's guard against a trusted too-small total_tokens lets one row past the output through"),
    Mutation("unpack-src-upper-bound", "packing", PACK, "(src_row[:, None] >= 0) & (src_row[:, None] < T)",
             "(src_row[:, None] >= 0) & (src_row[:, None] <= T)",
             "unpack's guard against trusted offsets past T reads one row past the packed input"),
    Mutation("partition-bfd-exact-fit", "packing", PARTITION, "q = bisect.bisect_left(free, (need, -1))",
             "q = bisect.bisect_left(free, (need + 1, -1))",
             "best-fit decreasing never puts an item into a bin it fills exactly (extra micro-batches)"),
    Mutation("partition-equal-size-extra", "packing", PARTITION,
             "(counts[j] == base and n_big < extra)", "(counts[j] == base and n_big <= extra)",
             "equal_size greedy lets one partition too many take base + 1 items (sizes differ by 2)"),
    # ======== the third list
    # ---------------- packing
    Mutation("pack-bwd-grad-noncontig", "packing", PACK_API,
             "return _launch_unpack(grad.contiguous(), cu, ctx.S, ctx.config)",
             "return _launch_unpack(grad, cu, ctx.S, ctx.config)",
             "pack's backward reads a non-contiguous (e.g. expanded) gradient as dense"),
    Mutation("unpack-bwd-grad-noncontig", "packing", PACK_API,
             "return _launch_pack(grad.contiguous(), cu, ctx.T, ctx.config)",
             "return _launch_pack(grad, cu, ctx.T, ctx.config)",
             "unpack's backward reads a non-contiguous (e.g. expanded) gradient as dense"),
    Mutation("pack-max-seqlen", "packing", PACK_API,
             "real_max = int(host.max()) if host.numel() else 0",
             "real_max = int(host[-1]) if host.numel() else 0",
             "max_seqlen reported as the last length, not the longest"),
    Mutation("bubble-order-mirror", "packing", PLANNER, "    return ranked[::2][::-1] + ranked[1::2]\n",
             "    return ranked[1::2][::-1] + ranked[::2]\n", "bubble order mirrored (heaviest off-centre)"),
    Mutation("plan-rank-ascending", "packing", PLANNER,
             "ranked = sorted(range(m), key=lambda q: (-mcost[q],", "ranked = sorted(range(m), key=lambda q: (mcost[q],",
             "micro-batches ranked lightest first (order flipped, lock-step pairing kept)"),
    Mutation("plan-min-mb-floor", "packing", PLANNER,
             "min_mb = max([-(-t // budget) for t in rank_tokens] + [1])",
             "min_mb = max([t // budget for t in rank_tokens] + [1])",
             "min_microbatches floors max rank tokens / budget"),
    Mutation("plan-lockstep-axis", "packing", PLANNER,
             "lockstep = float(np.max(np.asarray(mb_costs), axis=0).sum()) if m else 0.0",
             "lockstep = float(np.max(np.asarray(mb_costs), axis=1).sum()) if m else 0.0",
             "lock-step cost sums each rank's heaviest micro-batch instead of each step's slowest rank"),
    Mutation("plan-stats-lb-floor", "packing", PLANNER,
             "lb = float(max(int(costs.max()) if costs.size else 0, -(-int(costs.sum()) // k)))",
             "lb = float(max(int(costs.max()) if costs.size else 0, int(costs.sum()) // k))",
             "integer lower bound floors total / k"),
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
]
