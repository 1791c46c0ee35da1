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

The algorithms live in ``partition.py``; this module validates the input, costs the sequences
and plans.

Reports: ``plan_stats`` gives imbalance = max partition cost / mean partition cost, the lower
bound ``max(largest sequence cost, total / k)`` on the max partition cost and the gap to it.

Bad input raises ``ValueError`` naming the argument. A request that cannot meet ``max_tokens``
raises ``ValueError`` too (a sequence longer than the bound, or more tokens than ``k * max_tokens``;
bin packing is NP-hard, so a request that might be feasible but that the heuristics could not fit
says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .partition import LOCAL_SEARCH_PARTNERS as LOCAL_SEARCH_PARTNERS
from .partition import LOCAL_SEARCH_ROUNDS as LOCAL_SEARCH_ROUNDS
from .partition import LPT_CANDIDATE_MAX as LPT_CANDIDATE_MAX
from .partition import _assign, _best_fit_decreasing, _groups, _local_search

ATTENTION_COEF = 24576  # 6 * hidden_size for hidden_size = 4096 (verl's calculate_workload)
ALGORITHMS = ("greedy", "kk", "kk+ls")
DEFAULT_ALGORITHM = "kk+ls"
# Inside a rank, micro-batch balance only shapes the lock-step time; fewer rounds keep planning
# 8192 sequences into 8 ranks x ~100 micro-batches near 20 ms.
MICROBATCH_LS_ROUNDS = 32
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


def _check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    return algorithm


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
