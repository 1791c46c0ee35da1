"""FLOPs and bytes moved by the attention kernels: pure Python, no torch or triton.

Conventions (the ones flash-attention's benchmarks and tritonbench use, so TFLOP/s compare):

- Forward: two matmuls (QK^T and PV) of 2 FLOPs per multiply-add, so ``4 * D * Lq * Lk`` per head
  and sequence; a causal mask halves it (the exact causal count, ``Lq * Lk - Lq * (Lq - 1) / 2``
  for Lq == Lk, differs from the half by under 1/L and is not used). Softmax FLOPs are not counted.
- Backward: five matmuls (QK^T recomputed, dV, dP, dQ, dK) = 2.5x the forward.
- Bytes: the minimum traffic of an ideal kernel that reads each input once and writes each output
  once (Q, K, V, O, plus dO, dQ, dK, dV for the backward; the fp32 log-sum-exp is included).
- Decode: one query token per sequence; bytes are dominated by reading K and V of every cached
  token once per KV head (a GQA group shares it), which is what %-of-HBM-bandwidth refers to.

``schedule_makespan`` is a list-scheduling model of the forward's tail effect (how long the last
SMs run after the others went idle), used to label the naive-vs-longest-first comparison with an
estimate beside the measured times.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "bfloat16": 2, "float16": 2, "float32": 4}


def _elem_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}") from None


def _pairs(seqlens_q: Sequence[int], seqlens_k: Sequence[int] | None, causal: bool) -> float:
    """Sum over sequences of the (query, key) pairs computed: Lq * Lk, halved when causal."""
    ks = seqlens_q if seqlens_k is None else seqlens_k
    if len(ks) != len(seqlens_q):
        raise ValueError(f"seqlens_k has {len(ks)} entries, seqlens_q {len(seqlens_q)}")
    total = 0.0
    for lq, lk in zip(seqlens_q, ks):
        total += float(lq) * float(lk)
    return total / 2.0 if causal else total


def varlen_attention_flops(seqlens_q: Iterable[int], heads_q: int, head_dim: int, *, causal: bool = True,
                           seqlens_k: Iterable[int] | None = None, mode: str = "fwd") -> float:
    """FLOPs of attention over packed sequences. ``mode``: "fwd", "bwd" (2.5x fwd) or "fwd+bwd"."""
    lq = [int(x) for x in seqlens_q]
    lk = None if seqlens_k is None else [int(x) for x in seqlens_k]
    return attention_flops_from_pairs(_pairs(lq, lk, causal), heads_q, head_dim, mode=mode)


def attention_flops_from_pairs(pairs, heads_q: int, head_dim: int, *, mode: str = "fwd"):
    """``varlen_attention_flops`` from the (query, key) pairs computed, summed over sequences
    (``Lq * Lk``, halved when causal: sum(L^2) / 2 for a causal batch). ``pairs`` may be an array
    (the step model's ranks at once)."""
    factor = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}.get(mode)
    if factor is None:
        raise ValueError(f"mode must be 'fwd', 'bwd' or 'fwd+bwd', got {mode!r}")
    return 4.0 * head_dim * heads_q * pairs * factor


def varlen_attention_bytes(total_q: int, total_k: int, heads_q: int, heads_kv: int, head_dim: int, *,
                           dtype: str = "bf16", mode: str = "fwd") -> float:
    """Minimum bytes moved: inputs read once, outputs written once (lse in fp32)."""
    e = _elem_bytes(dtype)
    q = total_q * heads_q * head_dim * e
    kv = 2 * total_k * heads_kv * head_dim * e
    lse = total_q * heads_q * 4
    fwd = q + kv + q + lse  # read Q, K, V; write O and lse
    bwd = (q + kv + q + lse) + q + (q + kv)  # read Q, K, V, O, lse, dO; write dQ, dK, dV
    if mode == "fwd":
        return float(fwd)
    if mode == "bwd":
        return float(bwd)
    if mode == "fwd+bwd":
        return float(fwd + bwd)
    raise ValueError(f"mode must be 'fwd', 'bwd' or 'fwd+bwd', got {mode!r}")


def decode_attention_flops(kv_lens: Iterable[int], heads_q: int, head_dim: int) -> float:
    """FLOPs of one decode step: 4 * D per (query head, cached token)."""
    return 4.0 * head_dim * heads_q * float(sum(int(x) for x in kv_lens))


def decode_attention_bytes(kv_lens: Iterable[int], heads_q: int, heads_kv: int, head_dim: int, *,
                           dtype: str = "bf16") -> float:
    """Bytes of one decode step: K and V of every cached token once per KV head, plus q and out."""
    lens = [int(x) for x in kv_lens]
    return decode_attention_bytes_from_totals(len(lens), sum(lens), heads_q, heads_kv, head_dim, dtype=dtype)


def decode_attention_bytes_from_totals(sequences, kv_tokens, heads_q, heads_kv, head_dim: int, *,
                                       dtype: str = "bf16"):
    """``decode_attention_bytes`` of ``sequences`` sequences holding ``kv_tokens`` cached tokens in
    all (numbers, or arrays: the step model's decode iterations at once)."""
    e = _elem_bytes(dtype)
    kv = 2.0 * kv_tokens * heads_kv * head_dim * e
    qo = 2.0 * sequences * heads_q * head_dim * e
    return kv + qo + 4.0 * sequences  # + the int32 cache_seqlens


def tile_costs(seqlens_q: Sequence[int], block_m: int, *, seqlens_k: Sequence[int] | None = None,
               causal: bool = True, overhead: int = 64) -> list[int]:
    """Work of each forward tile (one per ``block_m`` query rows of a sequence): the keys its last
    row sees (bottom-right causal), plus ``overhead`` key-equivalents of fixed cost per tile."""
    ks = seqlens_q if seqlens_k is None else seqlens_k
    out = []
    for lq, lk in zip(seqlens_q, ks):
        for m in range((int(lq) + block_m - 1) // block_m):
            keys = min(int(lk), (m + 1) * block_m + int(lk) - int(lq)) if causal else int(lk)
            out.append(max(keys, 0) + overhead)
    return out


def schedule_makespan(seqlens_q: Sequence[int], heads_q: int, block_m: int, *, schedule: str = "longest_first",
                      n_slots: int = 132, causal: bool = True, seqlens_k: Sequence[int] | None = None) -> float:
    """Estimated makespan of a forward launch over perfect balance (1.0 = no idle SM at the end).

    A model, not a measurement: programs start in launch order on the first of ``n_slots`` free
    slots (SMs x resident programs per SM) and run for their tile's cost. ``naive`` launches
    heads outermost with tiles in sequence order (a (blocks, batch, heads) grid); ``longest_first``
    launches tiles by decreasing cost with the heads of a tile adjacent (our work list)."""
    import heapq

    costs = tile_costs(seqlens_q, block_m, seqlens_k=seqlens_k, causal=causal)
    if not costs:
        return 1.0
    if schedule == "naive":
        order = [c for _ in range(heads_q) for c in costs]
    elif schedule == "longest_first":
        order = [c for c in sorted(costs, reverse=True) for _ in range(heads_q)]
    else:
        raise ValueError(f"schedule must be 'naive' or 'longest_first', got {schedule!r}")
    finish = [0.0] * n_slots
    for c in order:
        t = heapq.heappop(finish)
        heapq.heappush(finish, t + c)
    return max(finish) / (sum(order) / n_slots)
