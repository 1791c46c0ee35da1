"""How an RL framework moves its step through the cluster, where that changes the cost: one name
(``estimate --framework``) for the mechanics a user would otherwise have to know flag by flag.

- ``verl`` (the default, and what the shared priors were fitted on): the colocated engine keeps
  its weights on the GPU between generations (it frees only its KV cache); the one-step-off
  rollout stops for the weight sync, which gathers the weights and then broadcasts them.
- ``nemo-rl`` (NVIDIA-NeMo/RL, read at 7ea279ab): colocated, the vLLM worker sleeps at level 1
  (``nemo_rl/models/generation/vllm/vllm_worker.py``: its weights go to CPU memory and come back
  at wake) and the Megatron worker moves its optimizer state to CPU memory before the refit and
  its parameters after it (``offload_before_refit`` / ``offload_after_refit``), both back before
  training: ``RunConfig.engine_weights_offload`` and ``switch_offload``. Its async GRPO
  (one-step-off) recipes set ``in_flight_weight_updates`` (the rollout decodes on through the
  sync) and its packed broadcast gathers each pack of tensors while the previous one is
  broadcast (``nemo_rl/utils/packed_tensor.py``): ``modes.mode_estimate``'s
  ``in_flight_updates`` and ``pipelined_sync``. Its ``async_grpo.max_trajectory_age_steps`` K
  sets how far the rollout runs ahead (``nemo_rl/algorithms/async_utils.py`` at v0.6.0: at most
  K batches of prompts in flight, each generated for one of the next K weight versions, and
  collection pauses once all K are taken): K = 1 is ``--mode one-step-off`` (the next batch
  starts after the weight update, so each batch's long tail idles the engines); K >= 2 keeps the
  engines fed across updates, ``--mode fully-async --staleness K-1`` (up to K batches in flight).
  There the in-flight weight updates keep the stream decoding through the sync (nothing drained,
  nothing interrupted: ``in_flight_updates``, as in one-step-off); the trainer takes the step's
  whole batch of prompt groups before it trains (``ReplayBuffer.sample`` of the step's groups:
  one update per sync, where verl's trainer starts on each of 4 parts as they arrive) and
  recomputes the old policy's log-probs (``policy.get_logprobs`` in ``async_grpo_train``,
  ``nemo_rl/algorithms/grpo.py``), which verl's fully-async trainer takes from the rollout:
  ``trainer_logprobs``. Its default K is 1, so ``--mode fully-async`` under this framework needs
  ``--staleness`` (no verl default is assumed), and ``--compare-modes`` prices K = 2.

A flag given explicitly (``--in-flight-updates`` / ``--no-in-flight-updates``, likewise
``--pipelined-sync`` and ``--checkpoint-engine``) wins over the framework's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PolytraceError


@dataclass(frozen=True)
class Framework:
    name: str
    colocated_fields: dict = field(default_factory=dict)  # RunConfig fields of its colocated switch
    # ``mode_estimate``'s mode keywords (None: the mode's own default, which is verl's)
    in_flight_updates: bool | None = None  # one-step-off: the rollout decodes through the sync
    pipelined_sync: bool | None = None  # separated modes: gather and broadcast overlap
    # separated modes: the sync's tensors bucketed (verl's checkpoint engine; by default on in
    # fully-async, as verl's recipe, off in one-step-off)
    checkpoint_engine: bool | None = None
    # fully-async: the trainer runs the old-policy log-prob pass (NeMo RL) instead of taking the
    # rollout's log-probs (verl)
    trainer_logprobs: bool | None = None
    # fully-async: local updates per weight sync, as the trainer takes the samples (None: verl's
    # trigger_parameter_sync_step default, 4)
    updates_per_sync: int | None = None
    # fully-async's staleness where the framework states it in its own terms (NeMo RL: K-1 for
    # max_trajectory_age_steps K): None takes verl's default; otherwise --mode fully-async needs
    # --staleness, and --compare-modes prices the smallest stream, this value
    stream_staleness: float | None = None
    summary: str = ""


# mode keyword -> the modes it applies to ("compare" prices them all)
_SPLIT_MODES = {"in_flight_updates": ("one-step-off", "fully-async", "compare"),
                "pipelined_sync": ("one-step-off", "fully-async", "compare"),
                "checkpoint_engine": ("one-step-off", "fully-async", "compare"),
                "trainer_logprobs": ("fully-async", "compare"),
                "updates_per_sync": ("fully-async", "compare")}


FRAMEWORKS = {
    "verl": Framework("verl", summary="colocated engine keeps its weights on the GPU; one-step-off rollout stops for "
                                      "the sync, gathered then broadcast; fully-async syncs through its checkpoint "
                                      "engine"),
    # NeMo RL v0.6 hands the rollout every tensor through vLLM's load_weights (its NIXL checkpoint
    # engine came later, docs/guides/checkpoint-engine-refit.md)
    "nemo-rl": Framework("nemo-rl", {"engine_weights_offload": True, "switch_offload": True}, True, True, False,
                         True, 1, 1.0,
                         "colocated: engine weights to CPU memory at sleep (level 1), optimizer state and "
                         "parameters offloaded around the refit; one-step-off: in-flight weight updates, the "
                         "sync's gather and broadcast pipelined, each tensor loaded apart; fully-async "
                         "(max_trajectory_age_steps K >= 2 as --staleness K-1): the step's whole batch trained "
                         "between syncs, the old policy's log-probs recomputed by the trainer"),
}


def apply_framework(name: str, mode: str, kw: dict, split: dict) -> Framework:
    """Fill ``kw`` (``mode_estimate``'s configuration keywords) and ``split`` (its mode keywords)
    with framework ``name``'s mechanics for ``mode`` ("sync", "one-step-off", "fully-async", or
    "compare" for all three), leaving what was given explicitly. Returns the framework."""
    fw = FRAMEWORKS[name]
    if fw.stream_staleness is not None and split.get("staleness") is None:
        if mode == "fully-async":
            raise PolytraceError(f"--framework {name} --mode fully-async is its async GRPO at max_trajectory_age_steps "
                                 "K >= 2: give --staleness K-1 (K = 1, its default, is --mode one-step-off)")
        if mode == "compare":  # the smallest stream, printed with the comparison
            split["staleness"] = fw.stream_staleness
    if mode in ("sync", "compare") and fw.colocated_fields:
        # the switch applies only to a colocated run (RunConfig.colocated), so the separated
        # modes of --compare-modes are unaffected
        kw["run_fields"] = {**fw.colocated_fields, **(kw.get("run_fields") or {})}
    for key, modes in _SPLIT_MODES.items():
        value = getattr(fw, key)
        if value is not None and mode in modes and split.get(key) is None:
            split[key] = value
    return fw


__all__ = ["FRAMEWORKS", "Framework", "apply_framework"]
