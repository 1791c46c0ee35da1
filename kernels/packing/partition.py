"""Partitioning algorithms of the packing planner, on assignment arrays (item -> partition):
LPT greedy, Karmarkar-Karp, bounded local search and best-fit decreasing. Apart from ``planner.py``
(validation, cost models, the public API) so each reads on its own; numpy only, like it.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

# kk+ls also tries LPT as a start up to this many sequences: on large batches KK is always the
# better start and LPT would cost ~3 ms of the 20 ms budget for 8192 sequences.
LPT_CANDIDATE_MAX = 2048
LOCAL_SEARCH_ROUNDS = 256
LOCAL_SEARCH_PARTNERS = 8  # lightest partitions tried per round: bounds a round at ~8 numpy passes


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
            sums, labels = _merge_states(s0, l0, s1, l1, parent)
        heapq.heappush(heap, (sums[-1] - sums[0], -sums[0], counter, sums, labels))
        counter += 1
    if heap:
        return heap[0][4]
    return ([si[0]] if m else [-1]) + [-1] * (k - 1)


def _merge_states(s0: list, l0: list, s1: list, l1: list, parent: list) -> tuple[list, list]:
    """Differencing step: the heaviest set of one state joins the lightest of the other, and so on.
    A merged set keeps one item as its label; the other's label points at it (``parent``). Returns
    the sums, heaviest first, and their labels (-1: still empty)."""
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
    return [q[0] for q in pairs], [q[1] for q in pairs]


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
        sums, labels = _merge_states(s0, l0, s1, l1, parent)
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


def _groups(assign: np.ndarray, k: int) -> list[list[int]]:
    order = np.argsort(assign, kind="stable")  # indices ascending inside each partition
    bounds = np.searchsorted(assign[order], np.arange(k + 1))
    return [order[bounds[j]:bounds[j + 1]].tolist() for j in range(k)]
