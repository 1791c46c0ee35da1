"""The trainer's layout as a log states it, in each trainer's own keys (``logconfig`` calls these):
a Megatron actor's context, expert and virtual-pipeline parallelism, FSDP's Ulysses sequence
parallelism (a note: priced as data parallelism) and a Megatron recompute switch its workers do not
act on (a note). ``v`` is ``logconfig``'s typed view of the log's config."""

from __future__ import annotations

from types import SimpleNamespace

from ..errors import PolytraceError
from ..run.dialects import VERL_EXTRA
from ..run.spec import verl_key


def megatron_layout(log, v, strategy: str, model, n_gpus: int, rollout_tp: int, train_tp: int,
                    train_pp: int) -> dict:
    """The Megatron actor's context, expert and virtual-pipeline parallelism as verl's Megatron
    workers read them (``VERL_EXTRA``; absent or null: 1), checked as the flags are
    (``parallel.check_layout``, its errors naming the log's keys); {} for an FSDP run, whose
    workers read none of them. verl before 0.4 stated the virtual pipeline as
    ``num_layers_per_virtual_pipeline_stage``: layers / (PP x that) chunks per stage."""
    from ..stepmodel.parallel import check_layout

    if strategy != "megatron":
        return {}
    got = {name: v.count(VERL_EXTRA[name]) or 1 for name in ("train_cp", "train_ep", "train_vpp")}
    per_stage_key = "actor_rollout_ref.actor.megatron.num_layers_per_virtual_pipeline_stage"
    per_stage = v.count(per_stage_key)
    if per_stage and got["train_vpp"] == 1 and train_pp > 1:
        if model.layers % (train_pp * per_stage):
            raise PolytraceError(f"{log.path}: {per_stage_key} {per_stage} x pipeline_model_parallel_size "
                                 f"{train_pp} does not divide {model.name}'s {model.layers} layers")
        got["train_vpp"] = model.layers // (train_pp * per_stage)
    trainer = SimpleNamespace(strategy=strategy, train_tp=train_tp, train_pp=train_pp, **got)
    names = {name: key.rsplit(".", 1)[-1] for name, key in VERL_EXTRA.items()}
    names["gpus"] = "the GPU count"
    try:
        return check_layout(model, n_gpus, rollout_tp, trainer, 1, names=names)
    except PolytraceError as exc:
        raise PolytraceError(f"{log.path}: actor_rollout_ref.actor.megatron: {exc}") from None


def ulysses_note(v, strategy: str, n_gpus: int, notes: list[str]) -> None:
    """A note for verl's FSDP sequence parallelism (DeepSpeed-Ulysses), which the model prices as
    data parallelism over the same GPUs: each GPU computes the same FLOPs on the same tokens (a
    micro-batch's tokens split over the group for the linear layers, its heads for attention, with
    verl's token budget per micro-batch the per-GPU one times the group), so only the group's
    all-to-all of q, k, v and the attention output per layer goes unpriced."""
    key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    sp = v.count(key) or 1
    if sp > 1 and strategy != "megatron":
        if n_gpus % sp:
            raise PolytraceError(f"{v._where(key)} is {sp}, which does not divide the GPU count {n_gpus}")
        notes.append(f"{key.rsplit('.', 1)[-1]} {sp}: each sequence split over {sp} GPUs (Ulysses), priced as data "
                     f"parallelism over the same GPUs (the same FLOPs and tokens per GPU); its all-to-all of q, k, v "
                     "and the attention output per layer is not priced")


# verl's Megatron workers recompute activations only with a granularity: ``enable_gradient_checkpointing``
# sets Megatron's recompute_granularity to gradient_checkpointing_kwargs' activations_checkpoint_granularity,
# "full" where absent, and a printed null stays None: no recompute (volcengine/verl
# verl/workers/megatron_workers.py, add_optimization_config_to_tf_config; the log then prints "TF config:
# TransformerConfig(... recompute_granularity=None ...)")
_MEGATRON_GRANULARITY = "actor_rollout_ref.model.gradient_checkpointing_kwargs.activations_checkpoint_granularity"


def megatron_recompute_note(v, strategy: str, recompute: bool, notes: list[str]) -> None:
    """A note where a Megatron log's recompute switch is on but its granularity null (no recompute
    in Megatron): priced with recompute, as the shared priors were fitted on the corpus's one such
    log, and said so (docs/step-model.md gives what pricing it without does)."""
    if (strategy == "megatron" and recompute
            and _MEGATRON_GRANULARITY in v.cfg and v.cfg[_MEGATRON_GRANULARITY] is None):
        key = verl_key("gradient_checkpointing", strategy)
        notes.append(f"activation recompute: {key} is on but {_MEGATRON_GRANULARITY} is null, which verl's Megatron "
                     "workers pass on as recompute_granularity None (no recompute); priced with recompute, as the "
                     f"shared priors were fitted (pass --set {key}=false to price it without)")
