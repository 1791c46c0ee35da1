"""Configurations no framework would start, refused before any work, each as one line naming the
nearest choice that does run.

- Rollout tensor parallelism must split the attention heads: vLLM asserts
  ``num_attention_heads % tensor_parallel_size == 0`` and, for the KV heads,
  ``num_kv_heads % tp == 0`` or ``tp % num_kv_heads == 0`` (it replicates KV heads past that point)
  (vllm/model_executor/models/*: ``assert self.total_num_heads % tp_size == 0``;
  ``vllm/config.py`` ``verify_with_parallel_config``). A 40-head model does not run at TP 3.
- More data-parallel ranks than sequences in a step leave ranks without work (verl's
  ``balance_batch`` and its dispatch chunk the batch evenly over the ranks): ``--gpus 1000000`` on a
  768-sequence step is refused at once instead of pricing a million empty ranks.
- A training state (weights, fp32 master, gradients, Adam moments, the reference weights) larger
  than a GPU's memory cannot train however small the micro-batches: an error naming the GPU count
  where it fits.

Standard library and ``polytrace.errors`` only, so ``memory`` and ``estimate`` both use it.
"""

from __future__ import annotations

from ..errors import PolytraceError


def tp_splits_heads(model, tp: int) -> bool:
    """vLLM's rule: heads divisible by TP; KV heads divisible by TP or TP by KV heads."""
    heads, kv = int(model.heads), int(model.kv_heads)
    return tp >= 1 and heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)


def valid_rollout_tps(model, n_gpus: int) -> list[int]:
    """The rollout TPs vLLM accepts for ``model`` that also divide ``n_gpus`` (whole engines)."""
    return [tp for tp in range(1, n_gpus + 1) if n_gpus % tp == 0 and tp_splits_heads(model, tp)]


def _nearest(values, target: int) -> int:
    return min(values, key=lambda v: (abs(v - target), v))


def check_rollout_tp(model, n_gpus: int, tp: int, flag: str = "--rollout-tp") -> None:
    """Refuse a rollout TP that does not split ``model``'s heads (nearest valid TP named)."""
    if tp_splits_heads(model, tp):
        return
    valid = valid_rollout_tps(model, n_gpus)
    near = f"use {flag} {_nearest(valid, tp)}" if valid else f"no TP splits them on {n_gpus} GPUs"
    raise PolytraceError(
        f"{flag} {tp}: {model.name}'s {model.heads} attention heads and {model.kv_heads} KV heads do not split "
        f"over {tp} GPUs (vLLM needs heads % TP == 0 and KV heads % TP == 0 or TP % KV heads == 0); {near} "
        f"(valid on {n_gpus} GPUs: {', '.join(map(str, valid)) or 'none'})")


def check_ranks_have_sequences(n_gpus: int, ranks_per_replica: int, prompts: int, n: int) -> None:
    """Refuse more data-parallel ranks than sequences in a step, naming the largest GPU count that
    gives every rank one (``ranks_per_replica``: GPUs per data-parallel rank, Megatron's TP x PP)."""
    sequences = int(prompts) * int(n)
    ranks = n_gpus // max(1, ranks_per_replica)
    if ranks <= sequences:
        return
    most = sequences * max(1, ranks_per_replica)
    raise PolytraceError(
        f"--gpus {n_gpus}: {ranks:,} data-parallel ranks for the {sequences:,} sequences of a step ({prompts} "
        f"prompts x {n}): ranks without a sequence do no work; use --gpus {most:,} or fewer (or more --prompts)")


def gpus_where_state_fits(cfg, state_of, limit: int = 64) -> int | None:
    """The smallest GPU count above ``cfg.n_gpus`` (keeping the rollout TP and Megatron's TP x PP
    whole) whose per-GPU training state ``state_of(n)`` fits the GPU; None if not within ``limit``
    tries past the first guess (the state shards about as 1/n under FSDP)."""
    gpu_bytes = cfg.gpu.memory_gb * 1e9
    unit = max(int(cfg.rollout_tp), int(cfg.train_tp * cfg.train_pp) if cfg.strategy == "megatron" else 1)
    state = state_of(cfg.n_gpus)
    guess = max(cfg.n_gpus + 1, int(cfg.n_gpus * state / gpu_bytes))
    k = -(-guess // unit) * unit
    for _ in range(limit):
        if state_of(k) <= gpu_bytes:
            return k
        k += unit
    return None
