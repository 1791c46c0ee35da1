"""Sequence-packing planner: split a long-tailed batch across data-parallel ranks, then into
micro-batches under a token budget. Pure numpy; runs on the CPU of the trainer's driver.

Two entry points:

- ``balance_partitions(seqlens, k, cost=..., max_tokens=None, equal_size=False)`` -> ``k`` lists
  of sequence indices (the min-max k-way number-partitioning problem, "multiway partitioning").
- ``plan_microbatches(seqlens, dp_ranks, max_tokens_per_microbatch, cost=...)`` -> ``Plan``: ranks,
  then micro-batches inside each rank, with the same number of micro-batches on every rank.

Cost of a sequence of ``L`` tokens:

- ``"tokens"``: ``L`` (what the token budget bounds; memory and linear layers scale with it).
- ``"attention"``: ``ATTENTION_COEF * L + L**2`` with ``ATTENTION_COEF = 24576``: the FLOPs of a
  dense transformer block, ``12 h^2 L + 2 h L^2``, divided by ``2h`` for ``h = 4096`` (a 7B model).
  It is the workload model verl balances with (``verl.utils.seqlen_balancing.calculate_workload``);
  ``attention_cost(a)`` builds the same model for another hidden size (``a = 6 h``).
- a callable ``f(lengths: np.ndarray[int64]) -> np.ndarray`` of non-negative costs.

Algorithms (``algorithm=``):

- ``"greedy"``: longest-processing-time first (LPT): sequences by decreasing cost, each to the
  partition with the least cost so far. Worst case 4/3 of optimal.
- ``"kk"``: Karmarkar-Karp largest differencing method for k-way partitioning (the algorithm
  verl uses): repeatedly merge the two partial solutions with the largest spread, pairing the
  heaviest set of one with the lightest of the other.
- ``"kk+ls"`` (the default, ``DEFAULT_ALGORITHM``): KK (and LPT, on batches of up to
  ``LPT_CANDIDATE_MAX`` sequences; the better of the two), then bounded local search: move one
  sequence, or swap two, between the heaviest partition and a lighter one, picking the exchange
  that brings the pair closest to even; repeat while the heaviest partition gets lighter (at most
  ``LOCAL_SEARCH_ROUNDS`` rounds). It never returns a worse partition than KK's.

Reports: ``plan_stats`` gives imbalance = max partition cost / mean partition cost, the lower
bound ``max(largest sequence cost, total / k)`` on the max partition cost and the gap to it.

Bad input raises ``ValueError`` naming the argument. A request that cannot meet ``max_tokens``
raises ``ValueError`` too (a sequence longer than the bound, or more tokens than ``k * max_tokens``;
bin packing is NP-hard, so a request that might be feasible but that the heuristics could not fit
says so).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

ATTENTION_COEF = 24576  # 6 * hidden_size for hidden_size = 4096 (verl's calculate_workload)
ALGORITHMS = ("greedy", "kk", "kk+ls")
DEFAULT_ALGORITHM = "kk+ls"
# kk+ls also tries LPT as a start up to this many sequences: on large batches KK is always the
# better start and LPT would cost ~3 ms of the 20 ms budget for 8192 sequences.
LPT_CANDIDATE_MAX = 2048
LOCAL_SEARCH_ROUNDS = 256
# Inside a rank, micro-batch balance only shapes the lock-step time; fewer rounds keep planning
# 8192 sequences into 8 ranks x ~100 micro-batches near 20 ms.
MICROBATCH_LS_ROUNDS = 32
LOCAL_SEARCH_PARTNERS = 8  # lightest partitions tried per round: bounds a round at ~8 numpy passes
MICROBATCH_ORDERS = ("bubble", "descending", "ascending")

CostArg = str | Callable[[np.ndarray], np.ndarray]


# --------------------------------------------------------------------------------------------
# validation and costs
# --------------------------------------------------------------------------------------------


def _as_lengths(seqlens, name: str = "seqlens") -> np.ndarray:
    if isinstance(seqlens, np.ndarray):
        arr = seqlens
    else:
        try:
            arr = np.asarray(list(seqlens) if not isinstance(seqlens, Sequence) else seqlens)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a 1-D sequence of integers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            bad = arr[~np.isfinite(arr) | (arr != np.floor(arr))][0]
            raise ValueError(f"{name} must hold integers, got {bad!r}")
    # a length past 2**62 would wrap around in int64 (and no batch holds one): say so, not "negative"
    if arr.dtype.kind in "uf" and np.any(arr >= 2**62):
        raise ValueError(f"{name} holds a length too large to be a sequence length: {arr.max()!r}")
    out = arr.astype(np.int64)
    if np.any(out < 0):
        raise ValueError(f"{name} must be non-negative, got {int(out.min())}")
    return out


def _as_count(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def attention_cost(coef: float = ATTENTION_COEF) -> Callable[[np.ndarray], np.ndarray]:
    """The cost model ``coef * L + L**2`` (``coef = 6 * hidden_size``), as a callable ``cost=``."""
    if not (isinstance(coef, (int, float, np.integer, np.floating)) and coef >= 0):
        raise ValueError(f"coef must be a non-negative number, got {coef!r}")

    def cost(lengths: np.ndarray) -> np.ndarray:
        lengths = np.asarray(lengths, dtype=np.int64)
        if float(coef).is_integer():
            return int(coef) * lengths + lengths * lengths
        return coef * lengths.astype(np.float64) + lengths.astype(np.float64) ** 2

    cost.__name__ = f"attention(a={coef:g})"
    return cost


def cost_name(cost: CostArg) -> str:
    if isinstance(cost, str):
        return cost
    return getattr(cost, "__name__", "callable")


def sequence_costs(seqlens, cost: CostArg = "tokens") -> np.ndarray:
    """Per-sequence cost (int64 for the built-in models, float64 for a callable's floats)."""
    lengths = _as_lengths(seqlens)
    if cost == "tokens":
        return lengths.copy()
    if cost == "attention":
        return ATTENTION_COEF * lengths + lengths * lengths
    if isinstance(cost, str):
        raise ValueError(f"cost must be 'tokens', 'attention' or a callable, got {cost!r}")
    if not callable(cost):
        raise ValueError(f"cost must be 'tokens', 'attention' or a callable, got {cost!r}")
    values = np.asarray(cost(lengths))
    if values.shape != lengths.shape:
        raise ValueError(f"cost callable returned shape {values.shape}, expected {lengths.shape}")
    if values.dtype.kind not in "iuf" or values.dtype == bool:
        raise ValueError(f"cost callable must return numbers, got dtype {values.dtype}")
    if values.size and (not np.all(np.isfinite(values)) or np.any(values < 0)):
        raise ValueError("cost callable must return finite non-negative costs")
    return values.astype(np.int64) if values.dtype.kind in "iu" else values.astype(np.float64)


# --------------------------------------------------------------------------------------------
# core: assignment arrays (item -> partition). Items are in any order; costs >= 0.
# --------------------------------------------------------------------------------------------


def _size_caps(n: int, k: int) -> tuple[int, int]:
    """equal_size: sizes differ by at most one; ``n % k`` partitions get the larger size."""
    return n // k, n % k


def _greedy(costs: np.ndarray, tokens: np.ndarray, k: int, max_tokens: int | None, equal_size: bool,
            order: np.ndarray | None = None, assign: np.ndarray | None = None,
            loads: list | None = None, toks: list | None = None) -> np.ndarray | None:
    """LPT: items by decreasing cost to the least-loaded partition that can take them. Continues
    from a partial ``assign``/``loads``/``toks`` when given (used to add the tail after KK).
    Returns None when an item fits nowhere under ``max_tokens``."""
    n = costs.shape[0]
    if order is None:
        order = np.argsort(-costs, kind="stable")
    if assign is None:
        assign = np.full(n, -1, dtype=np.int64)
        loads = [0] * k
        toks = [0] * k
    counts = [0] * k
    if equal_size:
        for j in assign[assign >= 0].tolist():
            counts[j] += 1
    base, extra = _size_caps(n, k)
    n_big = sum(1 for c in counts if c > base)
    cost_list = costs.tolist()
    tok_list = tokens.tolist()
    out = assign.tolist()
    bounded = max_tokens is not None
    same = costs is tokens  # cost == tokens: the least-loaded partition fits if any does
    if not equal_size and (not bounded or same):
        heap = [(loads[j], j) for j in range(k)]
        heapq.heapify(heap)
        for i in order.tolist():
            load, j = heap[0]
            c = cost_list[i]
            if bounded and toks[j] + tok_list[i] > max_tokens:
                return None
            out[i] = j
            toks[j] += tok_list[i]
            heapq.heapreplace(heap, (load + c, j))
        for load, j in heap:
            loads[j] = load
        return np.asarray(out, dtype=np.int64)
    if not equal_size:
        # cost != tokens under a token bound: least-cost partition that fits; partitions that do
        # not fit are set aside and pushed back (a full partition is skipped in O(log k))
        heap = [(loads[j], j) for j in range(k)]
        heapq.heapify(heap)
        for i in order.tolist():
            c, t = cost_list[i], tok_list[i]
            skipped = []
            while heap and toks[heap[0][1]] + t > max_tokens:
                skipped.append(heapq.heappop(heap))
            if not heap:
                return None
            load, j = heap[0]
            out[i] = j
            toks[j] += t
            heapq.heapreplace(heap, (load + c, j))
            for entry in skipped:
                heapq.heappush(heap, entry)
        for load, j in heap:
            loads[j] = load
        return np.asarray(out, dtype=np.int64)
    # equal sizes: scan the k partitions (k is the number of ranks where this path runs)
    for i in order.tolist():
        c, t = cost_list[i], tok_list[i]
        best = -1
        for j in range(k):
            if bounded and toks[j] + t > max_tokens:
                continue
            if equal_size and not (counts[j] < base or (counts[j] == base and n_big < extra)):
                continue  # full: sizes may differ by one, and only n % k partitions get the +1
            if best < 0 or loads[j] < loads[best]:
                best = j
        if best < 0:
            return None
        out[i] = best
        loads[best] += c
        toks[best] += t
        if equal_size:
            counts[best] += 1
            if counts[best] == base + 1:
                n_big += 1
    return np.asarray(out, dtype=np.int64)


def _kk(costs: np.ndarray, k: int, equal_size: bool) -> np.ndarray:
    """Karmarkar-Karp largest differencing method: item -> partition.

    A partial solution is k set sums kept in decreasing order, each set named by one item (its
    label). Merging two solutions pairs the i-th heaviest set of one with the i-th lightest of the
    other and links the labels in a parent array, so a merge costs O(k), not O(items); the final
    sets are resolved at the end by pointer jumping."""
    n = costs.shape[0]
    parent = list(range(n))
    if equal_size:
        labels = _kk_equal(costs, k, parent)
    else:
        labels = _kk_free(costs, k, parent)
    par = np.asarray(parent, dtype=np.int64)
    while True:  # log-depth passes: every item ends pointing at its set's label
        nxt = par[par]
        if np.array_equal(nxt, par):
            break
        par = nxt
    label_to_part = np.full(n, -1, dtype=np.int64)
    for j, lab in enumerate(labels):
        if lab >= 0:
            label_to_part[lab] = j
    return label_to_part[par]


def _kk_free(costs: np.ndarray, k: int, parent: list) -> list:
    """KK without a size constraint. Singletons (one item, spread = its cost) are not pushed on
    the heap: they wait in a list sorted by decreasing cost, and a merge with a singleton only
    adds its cost to the lightest set (an O(k) insertion). This keeps LDM's exact merge order and
    is about 3x faster than a heap of n states (8192 items: ~12 ms instead of ~36 ms, measured on
    this project's 2-core CPU runner)."""
    order = np.argsort(-costs, kind="stable")
    sv = costs[order].tolist()
    si = order.tolist()
    m = len(sv)
    heap: list = []  # merged states: (-spread, -heaviest, counter, sums desc, labels)
    p = 0
    counter = 0
    pad_s = [0] * (k - 2)
    pad_l = [-1] * (k - 2)
    for _ in range(m - 1):
        # pop the state with the largest spread (ties: the larger heaviest set), twice
        if p < m and (not heap or sv[p] > -heap[0][0] or (sv[p] == -heap[0][0] and sv[p] >= -heap[0][1])):
            s0, v0, i0 = None, sv[p], si[p]
            p += 1
        else:
            _, _, _, s0, l0 = heapq.heappop(heap)
        if p < m and (not heap or sv[p] > -heap[0][0] or (sv[p] == -heap[0][0] and sv[p] >= -heap[0][1])):
            s1, v1, i1 = None, sv[p], si[p]
            p += 1
        else:
            _, _, _, s1, l1 = heapq.heappop(heap)
        if s0 is None and s1 is None:  # two singletons, v0 >= v1
            if k == 1:
                parent[i1] = i0
                sums, labels = [v0 + v1], [i0]
            else:
                sums, labels = [v0, v1] + pad_s, [i0, i1] + pad_l
        elif s0 is None or s1 is None:  # a state and a singleton: the singleton joins the lightest set
            if s0 is None:
                sums, labels, v, i = s1, l1, v0, i0
            else:
                sums, labels, v, i = s0, l0, v1, i1
            nv = sums.pop() + v
            lab = labels.pop()
            if lab >= 0:
                parent[i] = lab
            else:
                lab = i
            q = k - 1
            while q > 0 and sums[q - 1] < nv:
                q -= 1
            sums.insert(q, nv)
            labels.insert(q, lab)
        else:
            sums = [x + y for x, y in zip(s0, reversed(s1))]
            labels = []
            for x, y in zip(l0, reversed(l1)):
                if x < 0:
                    labels.append(y)
                else:
                    if y >= 0:
                        parent[y] = x
                    labels.append(x)
            pairs = sorted(zip(sums, labels), reverse=True)
            sums = [q[0] for q in pairs]
            labels = [q[1] for q in pairs]
        heapq.heappush(heap, (sums[-1] - sums[0], -sums[0], counter, sums, labels))
        counter += 1
    if heap:
        return heap[0][4]
    return ([si[0]] if m else [-1]) + [-1] * (k - 1)


def _kk_equal(costs: np.ndarray, k: int, parent: list) -> list:
    """KK with partition sizes that differ by at most one: the initial states are k consecutive
    items of the sorted order (zero-cost dummies, label -1, pad the count to a multiple of k);
    merging pairs sets of equal sizes, so sizes stay equal."""
    m = costs.shape[0]
    order = np.argsort(costs, kind="stable")  # ascending
    pad = (-m) % k
    sorted_vals = [0] * pad + costs[order].tolist()
    sorted_items = [-1] * pad + order.tolist()
    heap = []
    counter = 0
    for off in range(0, len(sorted_vals), k):
        sums = sorted_vals[off:off + k][::-1]
        labels = sorted_items[off:off + k][::-1]
        heap.append((sums[-1] - sums[0], -sums[0], counter, sums, labels))
        counter += 1
    heapq.heapify(heap)
    while len(heap) > 1:
        s0, l0 = heapq.heappop(heap)[3:]
        s1, l1 = heapq.heappop(heap)[3:]
        sums = [x + y for x, y in zip(s0, reversed(s1))]
        labels = []
        for x, y in zip(l0, reversed(l1)):
            if x < 0:
                labels.append(y)
            else:
                if y >= 0:
                    parent[y] = x
                labels.append(x)
        pairs = sorted(zip(sums, labels), reverse=True)
        sums = [q[0] for q in pairs]
        labels = [q[1] for q in pairs]
        heapq.heappush(heap, (sums[-1] - sums[0], -sums[0], counter, sums, labels))
        counter += 1
    return heap[0][4] if heap else [-1] * k


def _loads(assign: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    if values.dtype.kind in "iu":
        out = np.zeros(k, dtype=np.int64)
        np.add.at(out, assign, values)
        return out
    return np.bincount(assign, weights=values, minlength=k)


def _local_search(costs: np.ndarray, tokens: np.ndarray, assign: np.ndarray, k: int,
                  max_tokens: int | None, equal_size: bool, lower_bound: float,
                  rounds: int = LOCAL_SEARCH_ROUNDS) -> np.ndarray:
    """Move one item or swap two between the heaviest partition and a lighter one (lightest
    first), choosing the exchange whose cost difference is closest to half the pair's gap, as
    long as the pair's heavier side ends lighter than the heaviest partition was. Never makes the
    maximum worse; stops at the lower bound, at a local optimum or after ``rounds`` rounds."""
    if k < 2 or costs.shape[0] == 0:
        return assign
    assign = assign.copy()
    loads = _loads(assign, costs, k).astype(np.float64)
    toks = _loads(assign, tokens, k) if max_tokens is not None else None
    check_tokens = max_tokens is not None and costs is not tokens
    is_int = costs.dtype.kind in "iu"
    target = math.ceil(lower_bound) if is_int else lower_bound * (1 + 1e-12)
    by_part = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[by_part], np.arange(k + 1))
    members = [by_part[bounds[j]:bounds[j + 1]] for j in range(k)]
    for _ in range(rounds):
        i = int(np.argmax(loads))
        if loads[i] <= target:
            break
        xi = members[i]
        if xi.size == 0:
            break
        cx = costs[xi].astype(np.float64)
        improved = False
        for j in np.argsort(loads, kind="stable")[:LOCAL_SEARCH_PARTNERS + 1].tolist():
            if j == i:
                continue
            diff = loads[i] - loads[j]
            if diff <= 0:
                break
            half = diff / 2.0
            yj = members[j]
            best_score = math.inf
            best = None  # (x position, y position or -1 for a move)
            if not equal_size:
                ok = (cx > 0) & (cx < diff)
                if check_tokens:
                    ok &= toks[j] + tokens[xi] <= max_tokens
                if ok.any():
                    score = np.where(ok, np.abs(cx - half), np.inf)
                    p = int(np.argmin(score))
                    best_score, best = float(score[p]), (p, -1)
            if yj.size:
                cy = costs[yj].astype(np.float64)
                ysort = np.argsort(cy, kind="stable")
                ys = cy[ysort]
                pos = np.searchsorted(ys, cx - half)
                for cand in (np.clip(pos - 1, 0, ys.size - 1), np.clip(pos, 0, ys.size - 1)):
                    delta = cx - ys[cand]
                    ok = (delta > 0) & (delta < diff)
                    if check_tokens:
                        dt = tokens[xi] - tokens[yj[ysort[cand]]]
                        ok &= (toks[j] + dt <= max_tokens) & (toks[i] - dt <= max_tokens)
                    if ok.any():
                        score = np.where(ok, np.abs(delta - half), np.inf)
                        p = int(np.argmin(score))
                        if score[p] < best_score:
                            best_score, best = float(score[p]), (p, int(ysort[cand[p]]))
            if best is None:
                continue
            p, q = best
            x = int(xi[p])
            delta = float(cx[p])
            moved_back = None
            if q >= 0:
                y = int(yj[q])
                delta -= float(costs[y])
                moved_back = y
            assign[x] = j
            loads[i] -= delta
            loads[j] += delta
            if toks is not None:
                dt = int(tokens[x]) - (int(tokens[moved_back]) if moved_back is not None else 0)
                toks[i] -= dt
                toks[j] += dt
            keep_i = np.ones(xi.size, dtype=bool)
            keep_i[p] = False
            new_i = xi[keep_i]
            new_j = np.append(yj, x)
            if moved_back is not None:
                assign[moved_back] = i
                new_i = np.append(new_i, moved_back)
                new_j = new_j[new_j != moved_back]
            members[i], members[j] = new_i, new_j
            improved = True
            break
        if not improved:
            break
    return assign


def _best_fit_decreasing(tokens: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """Bin packing by best-fit decreasing: each item, longest first, into the fullest bin that
    still has room (bisect over sorted free space, O(n log bins)). Returns (item -> bin, bins)."""
    order = np.argsort(-tokens, kind="stable").tolist()
    tok = tokens.tolist()
    free: list[tuple[int, int]] = []  # (free tokens, bin), ascending
    assign = [0] * len(tok)
    bins = 0
    for i in order:
        need = tok[i]
        q = bisect.bisect_left(free, (need, -1))
        if q == len(free):
            b, room = bins, capacity - need
            bins += 1
        else:
            room, b = free.pop(q)
            room -= need
        assign[i] = b
        bisect.insort(free, (room, b))
    return np.asarray(assign, dtype=np.int64), bins


def _max_load(assign: np.ndarray, costs: np.ndarray, k: int) -> float:
    return float(_loads(assign, costs, k).max()) if costs.shape[0] else 0.0


def _fits(assign: np.ndarray | None, tokens: np.ndarray, k: int, max_tokens: int | None) -> bool:
    if assign is None:
        return False
    return max_tokens is None or tokens.shape[0] == 0 or int(_loads(assign, tokens, k).max()) <= max_tokens


def _assign(costs: np.ndarray, tokens: np.ndarray, k: int, max_tokens: int | None, equal_size: bool,
            algorithm: str, rounds: int = LOCAL_SEARCH_ROUNDS) -> np.ndarray | None:
    """item -> partition, or None when the heuristics found no assignment within max_tokens."""
    n = costs.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if algorithm == "greedy":
        return _greedy(costs, tokens, k, max_tokens, equal_size)
    if k == 1:
        out = np.zeros(n, dtype=np.int64)
        return out if _fits(out, tokens, k, max_tokens) else None
    if algorithm == "kk":
        out = _kk(costs, k, equal_size)
        return out if _fits(out, tokens, k, max_tokens) else None
    # kk+ls: exact KK, and LPT where it is cheap next to KK; the better one, then local search
    candidates = []
    kk = _kk(costs, k, equal_size)
    if _fits(kk, tokens, k, max_tokens):
        candidates.append(kk)
    if n <= LPT_CANDIDATE_MAX or not candidates:
        lpt = _greedy(costs, tokens, k, max_tokens, equal_size)
        if _fits(lpt, tokens, k, max_tokens):
            candidates.append(lpt)
    if not candidates:
        return None
    start = min(candidates, key=lambda a: _max_load(a, costs, k))
    lb = max(float(costs.max()), float(costs.sum()) / k)
    return _local_search(costs, tokens, start, k, max_tokens, equal_size, lb, rounds=rounds)


def _check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    return algorithm


def _groups(assign: np.ndarray, k: int) -> list[list[int]]:
    order = np.argsort(assign, kind="stable")  # indices ascending inside each partition
    bounds = np.searchsorted(assign[order], np.arange(k + 1))
    return [order[bounds[j]:bounds[j + 1]].tolist() for j in range(k)]


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def balance_partitions(seqlens, k: int, cost: CostArg = "tokens", max_tokens: int | None = None,
                       equal_size: bool = False, algorithm: str = DEFAULT_ALGORITHM) -> list[list[int]]:
    """Split sequence indices into ``k`` partitions of near-equal total cost.

    Returns ``k`` lists of indices into ``seqlens`` (ascending inside each list; some lists are
    empty when ``k > len(seqlens)``). ``max_tokens`` is a hard bound on each partition's tokens;
    ``equal_size`` makes partition sizes differ by at most one. ``algorithm`` is one of
    ``ALGORITHMS`` (default ``DEFAULT_ALGORITHM``; see the module docstring)."""
    lengths = _as_lengths(seqlens)
    k = _as_count(k, "k")
    equal_size = _check_flag(equal_size, "equal_size")
    _check_algorithm(algorithm)
    costs = sequence_costs(lengths, cost)
    if cost == "tokens":
        costs = lengths  # identity: lets the partitioner know cost and bound coincide
    if max_tokens is not None:
        max_tokens = _as_count(max_tokens, "max_tokens")
        _check_bound(lengths, k, max_tokens, "max_tokens")
    assign = _assign(costs, lengths, k, max_tokens, bool(equal_size), algorithm)
    if assign is None:
        raise ValueError(f"max_tokens={max_tokens}: could not fit {lengths.size} sequences "
                         f"({int(lengths.sum())} tokens) into k={k} partitions with algorithm {algorithm!r}; "
                         "raise max_tokens or k")
    return _groups(assign, k)


def _check_bound(lengths: np.ndarray, k: int, max_tokens: int, name: str) -> None:
    if lengths.size and int(lengths.max()) > max_tokens:
        i = int(np.argmax(lengths))
        raise ValueError(f"{name}={max_tokens} is smaller than sequence {i} ({int(lengths[i])} tokens)")
    if int(lengths.sum()) > k * max_tokens:
        raise ValueError(f"{name}={max_tokens}: {int(lengths.sum())} tokens cannot fit into {k} partitions "
                         f"(at most {k * max_tokens})")


@dataclass
class PartitionReport:
    """Balance of one partitioning. ``imbalance`` = max cost / mean cost (1.0 = perfect);
    ``lower_bound`` = max(largest sequence cost, total / k), a bound no partitioning can beat on
    the max partition cost; ``gap`` = max cost / lower bound - 1."""

    n_partitions: int
    costs: list[float]
    tokens: list[int]
    sizes: list[int]
    max_cost: float
    mean_cost: float
    imbalance: float
    lower_bound: float
    gap: float
    cost: str = "tokens"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def plan_stats(seqlens, partitions: Sequence[Sequence[int]], cost: CostArg = "tokens") -> PartitionReport:
    """Imbalance, lower bound and gap of ``partitions`` (lists of indices into ``seqlens``)."""
    lengths = _as_lengths(seqlens)
    costs = sequence_costs(lengths, cost)
    k = len(partitions)
    if k < 1:
        raise ValueError("partitions must hold at least one partition")
    part_costs, part_tokens, sizes = [], [], []
    for p in partitions:
        idx = np.asarray(list(p), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= lengths.size):
            raise ValueError(f"partitions: index out of range for {lengths.size} sequences")
        part_costs.append(float(costs[idx].sum()) if idx.size else 0.0)
        part_tokens.append(int(lengths[idx].sum()) if idx.size else 0)
        sizes.append(int(idx.size))
    total = float(costs.sum())
    mean = total / k
    max_cost = max(part_costs)
    lb = max(float(costs.max()) if costs.size else 0.0, mean)
    if costs.dtype.kind in "iu":
        lb = float(max(int(costs.max()) if costs.size else 0, -(-int(costs.sum()) // k)))
    return PartitionReport(
        n_partitions=k, costs=part_costs, tokens=part_tokens, sizes=sizes, max_cost=max_cost,
        mean_cost=mean, imbalance=max_cost / mean if mean > 0 else 1.0, lower_bound=lb,
        gap=max_cost / lb - 1.0 if lb > 0 else 0.0, cost=cost_name(cost))


@dataclass
class Plan:
    """A micro-batch plan: ``ranks[r][m]`` = sequence indices of micro-batch ``m`` on rank ``r``.
    Every rank has ``n_microbatches`` micro-batches (ranks step in lock-step), in execution order.

    ``costs[r][m]`` / ``tokens[r][m]``: cost and tokens of each micro-batch. Rank-level balance:
    ``imbalance`` (max rank cost / mean), ``lower_bound`` (max(largest sequence cost,
    total / dp_ranks)) and ``gap``. Lock-step balance: ``lockstep_cost`` = sum over micro-batch
    steps of the slowest rank's cost at that step, what a synchronising trainer (FSDP collectives
    per micro-batch) waits for; ``lockstep_imbalance`` = that / (total / dp_ranks)."""

    ranks: list[list[list[int]]]
    costs: list[list[float]]
    tokens: list[list[int]]
    n_microbatches: int
    imbalance: float
    lower_bound: float
    gap: float
    lockstep_cost: float
    lockstep_imbalance: float
    max_microbatch_tokens: int
    max_tokens_per_microbatch: int
    min_microbatches: int  # ceil(max rank tokens / budget): no plan of these ranks needs fewer
    cost: str = "tokens"
    algorithm: str = DEFAULT_ALGORITHM
    order: str = "bubble"
    rank_report: PartitionReport | None = field(default=None, repr=False)

    @property
    def dp_ranks(self) -> int:
        return len(self.ranks)

    def microbatches(self, rank: int) -> list[list[int]]:
        return self.ranks[rank]

    def summary(self) -> dict:
        return {
            "dp_ranks": self.dp_ranks, "n_microbatches": self.n_microbatches,
            "min_microbatches": self.min_microbatches, "imbalance": self.imbalance,
            "lower_bound": self.lower_bound, "gap": self.gap, "lockstep_cost": self.lockstep_cost,
            "lockstep_imbalance": self.lockstep_imbalance,
            "max_microbatch_tokens": self.max_microbatch_tokens,
            "max_tokens_per_microbatch": self.max_tokens_per_microbatch, "cost": self.cost,
            "algorithm": self.algorithm, "order": self.order,
        }


def bubble_order(m: int) -> list[int]:
    """Positions for micro-batches sorted by decreasing cost so the light ones sit at both ends
    and the heavy ones in the middle: pipeline warm-up and cool-down then expose the light ones.
    For m = 5: [4, 2, 0, 1, 3] (the 0th = heaviest runs third)."""
    ranked = list(range(m))
    return ranked[::2][::-1] + ranked[1::2]


def plan_microbatches(seqlens, dp_ranks: int, max_tokens_per_microbatch: int, cost: CostArg = "tokens",
                      algorithm: str = DEFAULT_ALGORITHM, equal_size: bool = False,
                      order: str = "bubble") -> Plan:
    """Split sequences across ``dp_ranks`` ranks (balanced by ``cost``), then each rank's share
    into micro-batches of at most ``max_tokens_per_microbatch`` tokens (a hard bound), with the
    same number of micro-batches on every rank.

    The number of micro-batches starts at ``ceil(max rank tokens / budget)`` and grows only when
    the heuristics cannot fit a rank into that many. Inside each rank the micro-batches are
    balanced by ``cost``; then each rank's micro-batches are ranked by cost, so step ``m`` pairs
    micro-batches of similar cost across ranks (this minimises the lock-step time for the given
    micro-batches), and laid out by ``order``: ``"bubble"`` (default: light ones first and last,
    which shrinks pipeline warm-up/cool-down bubbles; verl's dynamic-bsz ordering), ``"descending"``
    or ``"ascending"``.

    A sequence longer than ``max_tokens_per_microbatch`` is an error (ValueError): no plan can
    honour the bound, and silently giving it a micro-batch of its own would hide an OOM.
    ``equal_size`` gives every rank the same number of sequences (up to one), as verl's
    ``balance_batch`` does."""
    lengths = _as_lengths(seqlens)
    dp_ranks = _as_count(dp_ranks, "dp_ranks")
    budget = _as_count(max_tokens_per_microbatch, "max_tokens_per_microbatch")
    equal_size = _check_flag(equal_size, "equal_size")
    _check_algorithm(algorithm)
    if order not in MICROBATCH_ORDERS:
        raise ValueError(f"order must be one of {', '.join(MICROBATCH_ORDERS)}, got {order!r}")
    if lengths.size and int(lengths.max()) > budget:
        i = int(np.argmax(lengths))
        raise ValueError(f"max_tokens_per_microbatch={budget} is smaller than sequence {i} "
                         f"({int(lengths[i])} tokens)")
    costs = lengths if cost == "tokens" else sequence_costs(lengths, cost)
    rank_assign = _assign(costs, lengths, dp_ranks, None, bool(equal_size), algorithm)
    rank_members = [np.asarray(g, dtype=np.int64) for g in _groups(rank_assign, dp_ranks)]
    rank_tokens = [int(lengths[g].sum()) for g in rank_members]
    min_mb = max([-(-t // budget) for t in rank_tokens] + [1]) if lengths.size else 0
    def split(g: np.ndarray, m: int) -> tuple[list[np.ndarray] | None, int]:
        """Balanced split of one rank into m micro-batches, or (None, a count known to fit)."""
        if not g.size:
            return [g[:0]] * m, m
        t = lengths[g]
        c = t if cost == "tokens" else costs[g]
        sub = _assign(c, t, m, budget, False, algorithm, rounds=MICROBATCH_LS_ROUNDS)
        if sub is None:
            # the balancing heuristics overfilled a micro-batch (tight budget, few sequences per
            # micro-batch): best-fit decreasing is the stronger bin packer; balance its packing
            packed, bins = _best_fit_decreasing(t, budget)
            if bins > m:
                return None, bins
            lb = max(float(c.max()), float(c.sum()) / m)
            sub = _local_search(c, t, packed, m, budget, False, lb, rounds=MICROBATCH_LS_ROUNDS)
        return [g[np.asarray(ix, dtype=np.int64)] for ix in _groups(sub, m)], m

    # every rank is split into the current count m; a rank that needs more raises m for all,
    # and the ranks already split into fewer are split again. Terminates: best-fit decreasing
    # always fits within the count it reports.
    m = min_mb
    splits: list = [[] for _ in range(dp_ranks)]  # stays empty when there are no sequences (m = 0)
    done_at = [0] * dp_ranks
    while True:
        for r, g in enumerate(rank_members):
            if done_at[r] == m:
                continue
            groups, need = split(g, m)
            while groups is None:
                m = need
                groups, need = split(g, m)
            splits[r], done_at[r] = groups, m
        if all(d == m for d in done_at):
            break
    per_rank: list[list[np.ndarray]] = splits
    # rank micro-batches by cost, align across ranks, then lay out by `order`
    positions = {"bubble": bubble_order(m), "descending": list(range(m)),
                 "ascending": list(range(m))[::-1]}[order]
    ranks, mb_costs, mb_tokens = [], [], []
    for mbs in per_rank:
        mcost = [float(costs[ix].sum()) for ix in mbs]
        ranked = sorted(range(m), key=lambda q: (-mcost[q], mbs[q][0] if mbs[q].size else 1 << 62))
        laid = [ranked[p] for p in positions]
        ranks.append([sorted(mbs[q].tolist()) for q in laid])
        mb_costs.append([mcost[q] for q in laid])
        mb_tokens.append([int(lengths[mbs[q]].sum()) for q in laid])
    report = plan_stats(lengths, [g.tolist() for g in rank_members], cost)
    total = float(costs.sum())
    mean = total / dp_ranks
    lockstep = float(np.max(np.asarray(mb_costs), axis=0).sum()) if m else 0.0
    return Plan(
        ranks=ranks, costs=mb_costs, tokens=mb_tokens, n_microbatches=m, imbalance=report.imbalance,
        lower_bound=report.lower_bound, gap=report.gap, lockstep_cost=lockstep,
        lockstep_imbalance=lockstep / mean if mean > 0 else 1.0,
        max_microbatch_tokens=max((max(t) for t in mb_tokens if t), default=0),
        max_tokens_per_microbatch=budget, min_microbatches=min_mb, cost=cost_name(cost),
        algorithm=algorithm, order=order, rank_report=report)
