"""The physics of a rollout on GPUs of its own: streaming generation, draining and resuming at a
weight sync, the weight sync itself, and the trainer consuming samples as they arrive.

Used by ``modes.py`` (one-step-off and fully async execution). Every figure is an estimate in
seconds, at the roofline and efficiencies of ``efficiency.py`` unless a ``Pricer`` holds measured
timings; a calibration scales them afterwards.

- ``stream_rollout``: with a queue that never runs dry (fully async with a staleness bound above
  0) every engine keeps its slots full, so a batch's responses take their tokens at the per-token
  cost of a full engine. The tail comes back in two ways. At a weight sync, without partial
  rollout, the engines stop admitting and wait for the sequences in flight (the drain). With
  partial rollout those are interrupted and resubmitted after the sync as prompt + the response
  so far, and verl resets vLLM's prefix cache at every pause (``FullyAsyncRollouter.pause`` ->
  ``clear_kv_cache`` -> ``engine.reset_prefix_cache()``; ``partial_single_turn_agent_loop.py``
  resubmits ``output.prompt_ids + output.response_ids``), so each resumed sequence prefills its
  whole prefix again (``resume_s``). And the staleness bound keeps most samples inside one weight
  version's window: ``version_floor_s``.
- ``version_floor_s``: verl's rollouter admits at most ``(1 + staleness) x`` a version's batch per
  version, counting what it carried in (``staleness_samples``, reset at each version to the
  samples in flight, interrupted and queued; ``_should_pause_generation`` stops admissions at
  ``max_required_samples``). In a steady state it admits one batch B a version, so it carries at
  most ``staleness x B`` across a sync, and at least ``(1 - staleness) x B`` of a version's new
  samples are generated within the version: its window lasts at least until the
  ``(1 - staleness)``-quantile sample (a prompt's whole group: verl's unit) of a batch started
  at once on the same engines is done (the batch is the most favourable case: every sample
  admitted at the window's start, none of the carried-in ones competing for the slots).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..run.hardware import GPU
from ..run.models import ModelSpec
from ..run.spec import Rollout
from .efficiency import DEFAULT, Efficiency
from .pricing import Pricer
from .rollout import engine_tp, iteration_costs, kv_slots, prefill_seconds, simulate_engine

# In-flight sequences drawn for the drain estimate: a fixed seed, so an estimate is
# the same on every machine.
IN_FLIGHT_SEED = 0


@dataclass(frozen=True)
class VersionPolicy:
    """How the trainer takes each weight version's batch and what the rollout does meanwhile
    (``modes.py`` resolves it from the run's mode settings; one-step-off is 1 chunk, staleness 1,
    no partial rollout)."""

    chunks: int = 1  # local updates per batch (verl's trigger_parameter_sync_step)
    staleness: float = 0.0  # share of a batch the rollout may make ahead on old weights
    partial: bool = True  # the sequences in flight at a sync are interrupted and resumed, not drained
    in_flight: bool = False  # the rollout decodes on through the sync (NeMo RL's in-flight weight updates)


@dataclass(frozen=True)
class SyncTransport:
    """How the weights travel at a sync (``weight_sync_seconds``); both off: verl's plain sync."""

    pipelined: bool = False  # a pack's gather overlaps the previous pack's broadcast (NeMo RL)
    checkpoint_engine: bool = False  # the expert tensors packed into buckets (verl's checkpoint engine)


@dataclass
class StreamRollout:
    batch_s: float  # seconds to produce the batch's responses with every engine's slots kept full
    drain_s: float  # seconds until the sequences in flight at a sync are done, none admitted meanwhile
    drain_lost_s: float  # of which the engines' output falls short of a full engine's (the drain's cost)
    concurrency: int  # sequences running per engine
    engines: int
    in_flight: int  # sequences in flight over all engines at a sync
    resume_s: float = 0.0  # partial rollout: re-prefilling the interrupted sequences' prefixes after a sync
    floor_s: float = 0.0  # a version's window at least (``version_floor_s``)

    def to_dict(self) -> dict:
        return {"batch_s": self.batch_s, "drain_s": self.drain_s, "drain_lost_s": self.drain_lost_s,
                "concurrency": self.concurrency, "engines": self.engines, "in_flight": self.in_flight,
                "resume_s": self.resume_s, "floor_s": self.floor_s}

    def scaled(self, factor: float) -> StreamRollout:
        """Every duration times ``factor`` (a calibration's price of the rollout's work)."""
        keys = ("batch_s", "drain_s", "drain_lost_s", "resume_s", "floor_s")
        return dataclasses.replace(self, **{k: getattr(self, k) * factor for k in keys})


def version_floor_s(group_ready_s, staleness: float) -> float:
    """The least a weight version's window lasts under a staleness bound (module docstring): when
    the ``ceil((1 - staleness) x G)``-th of the batch's ``G`` groups is done in ``group_ready_s``
    (a batch started at once on the stream's engines, each group done with its longest
    response). 0 at staleness >= 1 (every sample may span a sync, as one-step-off)."""
    ready = np.sort(np.asarray(group_ready_s, dtype=np.float64))
    k = int(np.ceil((1.0 - staleness) * len(ready) - 1e-9))
    return float(ready[k - 1]) if k > 0 and len(ready) else 0.0


def stream_rollout(model: ModelSpec, gpu: GPU, prompt_lens, response_lens, *, n_gpus: int, engine: Rollout,
                   in_flight_cap: float, pricer: Pricer | None = None) -> StreamRollout:
    """A batch generated by ``n_gpus // tp`` engines (``engine.rollout_tp``) fed from a queue that
    never runs dry, priced at ``pricer``'s efficiencies (default: the roofline at ``efficiency.DEFAULT``).

    An engine runs ``c`` sequences at once: its KV-cache slots (as ``simulate_engine`` counts
    them) or ``max_num_seqs``, at most its share of ``in_flight_cap`` (the staleness bound: the
    rollout never holds more than ``(1 + staleness)`` batches' worth of samples of one weight
    version). A running slot holds a sequence with probability proportional to its length
    (long responses occupy slots longer), at a uniformly random point of it, so the running
    batch's mean context is ``sum r (p + r / 2) / sum r``; every iteration produces ``c``
    tokens."""
    pricer = pricer or Pricer(gpu, DEFAULT)
    eff, tp = pricer.eff, engine_tp(engine)
    mem_fraction, max_num_seqs = engine.mem_fraction, engine.max_num_seqs
    p = np.asarray(prompt_lens, dtype=np.float64)
    r = np.maximum(np.asarray(response_lens, dtype=np.float64), 1.0)
    engines = max(1, n_gpus // max(1, tp))
    slots = kv_slots(model, gpu, tp, mem_fraction, float((p + r).mean()), max_num_seqs, eff)
    c = int(max(1, min(slots, np.ceil(in_flight_cap / engines))))
    ctx = float((r * (p + r / 2)).sum() / r.sum())
    per_iter = float(iteration_costs(model, gpu, engine, np.array([float(c)]), np.array([c * ctx]), eff,
                                     pricer)[0])
    tokens_per_engine = float(r.sum()) / engines
    prefill = prefill_seconds(model, gpu, tp, p, eff) * pricer.scale("prefill") / engines
    batch_s = tokens_per_engine / c * per_iter + prefill
    # the sequences in flight at a sync: drawn by length, each at a uniform point of its response
    rng = np.random.default_rng(IN_FLIGHT_SEED)
    k = c * engines
    pick = rng.choice(len(r), size=k, replace=True, p=r / r.sum())
    done = np.floor(rng.random(k) * r[pick])
    left = np.maximum(r[pick] - done, 1.0).astype(np.int64)
    context = (p[pick] + done).astype(np.int64)
    # partial rollout: the interrupted sequences come back as new requests of prompt + response so
    # far on an emptied prefix cache, each engine prefilling its share
    resume = prefill_seconds(model, gpu, tp, p[pick] + done, eff) * pricer.scale("prefill") / engines
    drain = lost = 0.0
    for e in range(engines):
        sl = slice(e * c, (e + 1) * c)
        res = simulate_engine(model, gpu, context[sl], left[sl], engine=engine, eff=eff, pricer=pricer, slots=c)
        t = res.decode_s  # their context is cached already: no prefill while draining
        full = float(left[sl].sum()) / c * per_iter  # the same tokens from a full engine
        if t > drain:
            drain, lost = t, max(0.0, t - full)
    return StreamRollout(batch_s, drain, lost, c, engines, k, resume_s=resume)


def weight_sync_seconds(model: ModelSpec, gpu: GPU, train_gpus: int, rollout_gpus: int, rollout_tp: int,
                        lora_rank: int = 0, eff: Efficiency = DEFAULT,
                        transport: SyncTransport = SyncTransport()) -> dict:
    """Seconds to move the trainer's weights into the engines of a separate rollout, by part:

    - ``gather``: every tensor's full bf16 value from its FSDP shards (an all-gather over the
      trainer's GPUs: ``(T - 1) / T`` of the bytes over each GPU's link);
    - ``broadcast``: from the trainer to every rollout GPU (a pipelined NCCL broadcast moves the
      bytes once over each link; NVLink when trainer and rollout share one node, else the NICs);
    - ``load``: each engine GPU copying its ``1 / tp`` shard into place (HBM, read and write);
    - ``tensors``: the routed experts handed over one tensor at a time, host work that neither
      overlaps nor shrinks with the links (``refit.expert_tensor_seconds``); ``transport.checkpoint_engine``
      (verl's, on by default in its fully-async recipe) packs them into buckets: a tenth of it.

    Under LoRA only the adapters move (bf16). Published for comparison (verl's fully-async
    recipe, H20, Megatron trainer, checkpoint engine on): Qwen2.5-Math-7B 4:4 GPUs 0.02 s,
    Qwen3-30B-A3B 16:16 4.38 s, Qwen3-235B-A22B 64:64 23.70 s (tests/stepmodel/test_compose_modes_published.py).

    ``transport.pipelined``: the gather of one pack of tensors overlaps the broadcast of the one before, as
    NeMo RL's ``packed_broadcast_producer`` does (``nemo_rl/utils/packed_tensor.py``: each pack
    is gathered and broadcast on its own CUDA stream, several buffers in flight), so the two take
    the longer of them, not their sum."""
    from .refit import expert_tensor_seconds
    from .training import synced_weight_bytes

    pipelined, checkpoint_engine = transport.pipelined, transport.checkpoint_engine
    nbytes = synced_weight_bytes(model, lora_rank)
    tensors = expert_tensor_seconds(model, lora_rank, eff, bucketed=checkpoint_engine)
    trainer_link = gpu.link_gbps(train_gpus) * 1e9 * eff.comm
    both_link = gpu.link_gbps(train_gpus + rollout_gpus) * 1e9 * eff.comm
    gather = nbytes * (train_gpus - 1) / train_gpus / trainer_link if train_gpus > 1 else 0.0
    broadcast = nbytes / both_link
    load = 2.0 * nbytes / max(1, rollout_tp) / gpu.ceiling("hbm")
    moved = max(gather, broadcast) if pipelined else gather + broadcast
    return {"gather": gather, "broadcast": broadcast, "load": load, "tensors": tensors,
            "total": moved + load + tensors, "bytes": nbytes, "pipelined": pipelined,
            "checkpoint_engine": checkpoint_engine}


@dataclass
class Pipeline:
    step_s: float  # one weight version: the trainer's last local update done, plus the sync
    train_end_s: float  # when the trainer's last local update of the version ends
    trainer_wait_s: float  # the trainer waiting for samples (verl's wait_prev_gen / fully-async "gen")
    sync_wait_s: float  # the trainer waiting for the rollout to drain before the sync
    rollout_busy_s: float  # the rollout generating (or resuming) during the version
    carry: float  # samples of this version left for the next one (stale samples)
    resume_s: float = 0.0  # partial rollout: the version's start re-prefilling what the last sync interrupted


def trainer_pipeline(batch: int, train_s: float, sync_s: float, policy: VersionPolicy = VersionPolicy(), *,
                     ready_s=None, rate: float | None = None, stream: StreamRollout | None = None,
                     versions: int = 8) -> Pipeline:
    """Steady state of the trainer consuming one batch of ``batch`` samples per weight version in
    ``policy.chunks`` local updates of ``train_s / chunks`` seconds, each starting when its samples have
    arrived and the previous update is done; then the weight sync (``sync_s``) stalls both sides.

    ``ready_s`` (staleness 0): when each sample of the version is done, counted from the
    version's start (the batch rollout with its tail): the rollout makes exactly one batch per
    version. Otherwise the rollout streams at ``rate`` samples per second, starts each version
    with the samples it carried over (at most ``staleness x batch``), stops at ``(1 + staleness)
    x batch`` samples, and at the sync either waits for the sequences in flight (``partial``
    False: ``stream.drain_s``) or interrupts them and re-prefills them at the next version's start
    (``stream.resume_s``, less the share the drain after the bound finished). The trainer's last
    update never ends before ``stream.floor_s`` (the staleness bound's window, ``version_floor_s``).
    ``in_flight`` (NeMo RL's in-flight weight updates): the rollout decodes on through the sync,
    its running sequences finishing on the new weights, so it produces for the whole step and
    nothing is drained; only the trainer stalls for the sync.
    ``staleness``, ``partial`` and ``in_flight`` are ``policy``'s.
    Returns the mean of the last versions (the first ones start from an empty buffer)."""
    chunks, staleness, partial, in_flight = policy.chunks, policy.staleness, policy.partial, policy.in_flight
    per_chunk = train_s / chunks
    if ready_s is not None:
        ready = np.sort(np.asarray(ready_s, dtype=np.float64))
        t = 0.0
        for j in range(1, chunks + 1):
            need = int(np.ceil(j * batch / chunks)) - 1
            t = max(t, float(ready[min(need, len(ready) - 1)])) + per_chunk
        wait = t - train_s
        return Pipeline(t + sync_s, t, wait, 0.0, float(ready[-1]) if len(ready) else 0.0, 0.0)
    if rate is None or not rate > 0 or stream is None:
        raise ValueError("trainer_pipeline: a streaming rollout needs a positive rate and its StreamRollout")
    cap = (1.0 + staleness) * batch
    # Without partial rollout every version loses the drain's shortfall: while the sequences in
    # flight finish, no new ones start, and the engines refill afterwards. With it, the version
    # starts by re-prefilling the interrupted sequences' prefixes (``stream.resume_s``).
    start = 0.0 if in_flight else stream.resume_s if partial else stream.drain_lost_s
    carry = 0.0
    rows = []
    for _ in range(versions):
        t = 0.0
        for j in range(1, chunks + 1):
            need = j * batch / chunks
            ready = start + (need - carry) / rate if carry < need else 0.0
            t = max(t, ready) + per_chunk
        # the staleness bound keeps most of a version's samples inside its window: the trainer's
        # last update cannot end before the window's floor (``version_floor_s``)
        t = max(t, stream.floor_s)
        full_at = start + max(0.0, cap - carry) / rate  # the staleness bound stops new admissions here
        sync_wait = 0.0
        if not partial and not in_flight:
            # the drain starts at the sync request, or earlier when the bound already stopped
            # admissions; the trainer waits for what is left of it
            sync_wait = max(0.0, min(t, full_at) + stream.drain_s - t)
        end = t + sync_wait
        producing_until = end + sync_s if in_flight else end  # in flight: it decodes through the sync
        produced = min(cap, carry + rate * max(0.0, producing_until - start))
        # busy re-prefilling, admitting, and past the bound while it decodes the window's long samples
        busy = min(producing_until, max(full_at, stream.floor_s)) - (0.0 if partial else start)
        carry = min(staleness * batch, max(0.0, produced - batch))
        rows.append(Pipeline(end + sync_s, t, t - train_s, sync_wait, max(0.0, busy), carry, start if partial else 0.0))
        if partial and not in_flight:
            # what the sync interrupts is re-prefilled: a full engine's in-flight set when it finds
            # the rollout admitting, less as the drain after the bound runs it down (linear over drain_s)
            drained = max(0.0, end - full_at) / stream.drain_s if stream.drain_s > 0 else 1.0
            start = stream.resume_s * max(0.0, 1.0 - drained)
    tail = rows[-3:]
    return Pipeline(*(float(np.mean([getattr(x, f) for x in tail])) for f in
                      ("step_s", "train_end_s", "trainer_wait_s", "sync_wait_s", "rollout_busy_s", "carry",
                       "resume_s")))


__all__ = ["Pipeline", "StreamRollout", "SyncTransport", "VersionPolicy", "stream_rollout",
           "trainer_pipeline", "version_floor_s", "weight_sync_seconds"]
