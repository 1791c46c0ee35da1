"""Execution modes: how rollout and training share a cluster, and what each mode's step costs.

- ``sync`` (verl's colocated hybrid engine, the default): every GPU generates, then every GPU
  trains; the step is the sum of the stages (``estimate``, unchanged).
- ``one-step-off`` (verl's ``recipe/one_step_off_policy``): the rollout has ``R`` GPUs of its
  own and generates batch k+1 while the trainer's ``T`` GPUs train on batch k. Each step the
  weights go from trainer to rollout (both wait), then the trainer waits for the previous
  generation only for what training did not cover: step = sync + max(generation, training).
  With ``in_flight_updates`` (NeMo RL's ``grpo.async_grpo.in_flight_weight_updates`` on a vLLM
  V1 async engine, set by every NeMo RL async-1off performance recipe) the rollout does not stop
  for the sync: new generations wait for the new weights while the sequences already running
  keep decoding on their KV caches (``nemo_rl/algorithms/async_utils.py``,
  ``prepare_for_refit``), so only the trainer pays it: step = max(generation, training + sync).
  ``pipelined_sync`` prices the sync as NeMo RL moves it: each pack of tensors gathered while the
  previous one is broadcast (``streaming.weight_sync_seconds``).
- ``fully-async`` (``recipe/fully_async_policy``): the rollout streams samples one at a time into
  a queue; the trainer takes a batch in ``updates_per_sync`` local updates as the samples arrive,
  then syncs the weights. ``staleness`` (verl's ``staleness_threshold``) lets the rollout run up
  to ``staleness x batch`` samples ahead on old weights: with 0 it makes exactly one batch per
  weight version, long tail included, and a sample (a prompt's group of responses: GRPO's
  advantage needs all of them) reaches the trainer when its longest response is done; above 0
  its engines stay full, but a version still lasts until the ``(1 - staleness)``-quantile group
  of a batch started at once would be done: the bound lets at most ``staleness x batch`` samples
  span a sync (``streaming.version_floor_s``).
  ``partial_rollout`` interrupts the sequences in flight at a sync and resumes them after
  (re-prefilling their context) instead of waiting for them to finish. The trainer skips the
  old-policy log-prob pass (verl uses the rollout's log-probs in this mode). NeMo RL's async
  GRPO with ``max_trajectory_age_steps`` K >= 2 is this mode at staleness K - 1
  (``frameworks.py``): its in-flight weight updates keep the stream decoding through the sync
  (``in_flight_updates``: the rollout never stops for it) and its trainer recomputes the old
  policy's log-probs (``trainer_logprobs``).

The steady-state time per batch, each side's busy share and the GPU time idle by cause are
estimates. A calibration (``estimate(calibration=...)``) scales both sides' work as in ``sync``;
the weight sync is priced from the model's bytes and the links (``streaming.weight_sync_seconds``)
and not calibrated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import PolytraceError
from ..run.spec import RunSpec, default
from .devices import gpu_block
from .dynamic_sampling import samples_apart
from .efficiency import DEFAULT
from .estimate import (
    PriceOptions,
    build_config,
    calibrated_kernels,
    default_rollout_tp,
    estimate_run,
    load_timings,
    run_and_options,
    sample_batches,
    with_group_size,
)
from .memory import GB, check_micro_batches, memory_plan, smallest_rollout_tp
from .mode_args import MODES, check_mode_args
from .pricing import Pricer
from .result import EstimateResult, ModeComparison
from .rollout import simulate_rollout
from .scalars import as_scalars
from .stages import STAGES, TRAIN_STAGES, Part, stage_costs
from .streaming import (
    SyncTransport,
    VersionPolicy,
    stream_rollout,
    trainer_pipeline,
    version_floor_s,
    weight_sync_seconds,
)

DEFAULT_STALENESS = 0.1  # verl's fully_async_ppo_trainer.yaml ``staleness_threshold``
DEFAULT_UPDATES_PER_SYNC = 4  # verl's ``trigger_parameter_sync_step``
# Rollout shares of the GPUs tried when the split is not given: eighths of the cluster.
SPLIT_FRACTIONS = tuple(k / 8 for k in range(1, 8))


@dataclass(frozen=True)
class Separated:
    """A separated mode's settings as priced: the run's ``Mode`` section with the mode's defaults
    applied (``estimate_mode``), where the section keeps None for "the mode's default"."""

    mode: str  # "one-step-off" or "fully-async"
    policy: VersionPolicy  # how the trainer takes each weight version's batch
    transport: SyncTransport  # how the weights travel at a sync
    trainer_logprobs: bool = False  # fully-async: the trainer runs the old-policy log-prob pass (NeMo RL)


@dataclass(frozen=True)
class Split:
    """A separated cluster's rollout:trainer GPU split, and which of the two the user gave
    (``given``: (rollout_gpus, train_gpus); an infeasible side's error names that flag)."""

    rollout_gpus: int
    train_gpus: int
    given: tuple[bool, bool] = (False, False)


def _split_candidates(gpus: int, unit: int, rollout_gpus, train_gpus) -> list[tuple[int, int]]:
    if rollout_gpus is not None:
        return [(int(rollout_gpus), gpus - int(rollout_gpus))]
    if train_gpus is not None:
        return [(gpus - int(train_gpus), int(train_gpus))]
    out = []
    for f in SPLIT_FRACTIONS:
        r = max(unit, int(round(f * gpus / unit)) * unit)
        if r < gpus and (r, gpus - r) not in out:
            out.append((r, gpus - r))
    return out


class _Sides:
    """The two configurations of a separated cluster and their feasibility checks."""

    def __init__(self, prof, model, gpu, split: Split, config_kw: dict, longest: int, seq_lens):
        rollout_gpus, train_gpus, given = split.rollout_gpus, split.train_gpus, split.given
        self.split = split
        kw = dict(config_kw)
        rollout_tp = kw.pop("rollout_tp", None)
        mem = float(kw.get("mem_fraction", default("mem_fraction")))
        self.trainer = build_config(prof, model, gpu, train_gpus, rollout_tp=1,
                                    **{k: v for k, v in kw.items() if k != "rollout_ep"})
        self.trainer.colocated = False
        need = max(longest, self.trainer.max_prompt_len + self.trainer.max_response_len)
        m, g = self.trainer.engine_model, self.trainer.gpu  # the rollout's weights as its engines hold them
        what = "--rollout-gpus" if given[0] or not given[1] else "--train-gpus"
        if smallest_rollout_tp(m, g, rollout_gpus, mem, need) is None:
            raise PolytraceError(
                f"{what}: {rollout_gpus} rollout GPU(s) cannot hold {m.name} serving a {need}-token sequence "
                f"({m.weight_bytes() / rollout_gpus / GB:.1f} GB of weights per GPU at --mem-fraction {mem:g} of "
                f"{g.memory_gb:g} GB); give the rollout more GPUs")
        if rollout_tp is not None and rollout_gpus % rollout_tp:
            raise PolytraceError(f"--rollout-tp {rollout_tp} does not divide {rollout_gpus} rollout GPUs "
                                 f"({what}): every inference engine needs whole GPUs")
        tp = rollout_tp or default_rollout_tp(m, g, rollout_gpus, mem, need_tokens=need)
        roll_kw = {k: v for k, v in kw.items()
                   if k not in ("strategy", "train_tp", "train_pp", "train_ep", "train_cp", "train_vpp")}
        self.rollout = build_config(prof, model, gpu, rollout_gpus, rollout_tp=tp, **roll_kw)
        self.rollout.colocated = False
        check_micro_batches(self.trainer, longest)
        plan = memory_plan(self.trainer, longest, DEFAULT, seq_lens)
        what = "--train-gpus" if given[1] or not given[0] else "--rollout-gpus"
        if plan.training_state_total > plan.gpu_bytes:
            raise PolytraceError(
                f"{what}: {train_gpus} trainer GPU(s) cannot hold {m.name}'s training state "
                f"({plan.training_state_total / GB:.0f} GB per GPU of {g.memory_gb:g} GB); give the trainer more GPUs")
        self.warnings = []
        if plan.train_peak > plan.gpu_bytes:
            self.warnings.append(
                f"training on {train_gpus} GPU(s) needs {plan.train_peak / GB:.0f} GB per GPU (state "
                f"{plan.training_state_total / GB:.0f} GB + activations {plan.activations / GB:.0f} GB) on a "
                f"{g.memory_gb:g} GB {g.slug}: lower --micro-batch-tokens or give the trainer more GPUs")
        self.memory = {"trainer": plan.to_dict(),
                       "rollout": memory_plan(self.rollout, longest, DEFAULT, seq_lens).to_dict()}


def _separated(calibration: dict | None) -> dict | None:
    """A calibration as it applies to a rollout on GPUs of its own: without ``gen``'s fixed
    seconds. In a colocated run they hold the switch between trainer and engine (waking the
    engine, resharding the weights into it, putting it back to sleep), which separate rollout
    GPUs never do; verl's one-step-off table shows it: colocated ``gen`` 321 s against 247 s of
    ``generate_sequences`` (16 H20, Qwen2.5-Math-7B). The separated modes price the weight sync
    on its own (``streaming.weight_sync_seconds``)."""
    if not calibration:
        return calibration
    return {k: v for k, v in calibration.items() if k != "gen_overhead_s"}


def _side_seconds(parts, calibration) -> dict[str, float]:
    kernels = calibrated_kernels(parts, calibration)
    return {s: float(sum(kernels[s].values())) for s in STAGES}


def group_ready_s(finish_s, group_ids) -> np.ndarray:
    """When each prompt's group of responses is complete: the latest finish of its members
    (``finish_s`` and ``group_ids`` in batch order)."""
    finish = np.asarray(finish_s, dtype=np.float64)
    groups = np.asarray(group_ids, dtype=np.int64)
    if not len(finish):
        return finish
    out = np.zeros(int(groups.max()) + 1)
    np.maximum.at(out, groups, finish)
    return out


def _priced_rollout(rc, p, r, pricer: Pricer, calibration: dict | None):
    """The rollout side generating this batch whole, started at once: (the simulated rollout, its
    generation seconds at the calibration's price, those over the roofline's). Every family at its
    own slowdown (the rollout's host work per iteration and per sequence included, 6.7x and 14.7x
    in the priors), as the colocated estimate prices its gen. Scaling a stream by
    ``rollout_slowdown`` alone priced its host work at the roofline: the README's 16-GPU example
    generated on 6 GPUs in 7.1 s against 34.8 s on all 16."""
    whole = simulate_rollout(rc.engine_model, rc.gpu, p, r, n_gpus=rc.n_gpus, engine=rc.rollout_settings,
                             eff=rc.engine_efficiency(), pricer=pricer)
    parts = [Part("gen", fam, "rollout", v) for fam, v in whole.kernels.items()]
    priced = _side_seconds(parts, _separated(calibration))["gen"]
    return whole, priced, (priced / whole.time_s if whole.time_s > 0 else 1.0)


def _async_step(sep: Separated, sides: _Sides, batch, pricer: Pricer, calibration: dict | None) -> dict:
    """One sampled batch's steady-state step in a separated mode."""
    mode, trainer_logprobs, policy = sep.mode, sep.trainer_logprobs, sep.policy
    staleness, in_flight = policy.staleness, policy.in_flight
    rc, tc = sides.rollout, sides.trainer
    cal = calibration or {}
    p = np.asarray(batch.prompt_lens, dtype=np.int64)
    r = np.maximum(np.minimum(np.asarray(batch.response_lens, dtype=np.int64), tc.max_response_len), 1)
    trainer = stage_costs(tc, p, r, eff=DEFAULT, pricer=pricer, rollout=False)
    # verl's fully-async trainer takes the old policy's log-probs from the rollout; NeMo RL's
    # recomputes them (``trainer_logprobs``)
    parts = [x for x in trainer.parts
             if not (mode == "fully-async" and not trainer_logprobs and x.stage == "old_log_prob")]
    stages = _side_seconds(parts, calibration)
    other = trainer.other_s + float(cal.get("other_overhead_s", 0.0))
    train_s = sum(stages[s] for s in TRAIN_STAGES) + other
    sync = weight_sync_seconds(tc.model, tc.gpu, tc.n_gpus, rc.n_gpus, rc.rollout_tp, tc.lora_rank,
                               transport=sep.transport)
    w = sync["total"]
    n_seq = len(r)
    roll = None
    if mode == "one-step-off" or staleness == 0:
        roll, gen, scale = _priced_rollout(rc, p, r, pricer, calibration)
    if mode == "one-step-off" and in_flight:  # the rollout decodes on through the sync
        step = max(gen, train_s + w)
        trainer_wait = max(0.0, gen - train_s - w)
        rollout_busy = gen
        detail = {"wait_prev_gen_s": trainer_wait, "in_flight_updates": True}
    elif mode == "one-step-off":
        step = w + max(gen, train_s)
        trainer_wait = max(0.0, gen - train_s)
        rollout_busy = gen
        detail = {"wait_prev_gen_s": trainer_wait}
    else:
        if staleness == 0:
            # a sample reaches the trainer as a whole group (GRPO's advantage needs all n responses
            # of a prompt): ready when its longest response is, and local updates count groups
            ready = group_ready_s(roll.finish_s * scale, batch.group_ids)
            pipe = trainer_pipeline(len(ready), train_s, w, policy, ready_s=ready)
            detail = {"rollout": "one batch per weight version, long tail included (staleness 0)"}
        else:
            # the stream prices its engines without vLLM's expert parallelism, as it always has
            # (rollout_ep 1; the batch rollout above prices it): kept so this signature change moves no number
            engine = dataclasses.replace(rc.rollout_settings, rollout_ep=1)
            stream_pricer = (pricer or Pricer(rc.gpu, DEFAULT)).with_efficiency(rc.engine_efficiency())
            stream = stream_rollout(rc.engine_model, rc.gpu, p, r, n_gpus=rc.n_gpus, engine=engine,
                                    in_flight_cap=(1.0 + staleness) * n_seq, pricer=stream_pricer)
            whole, _, ratio = _priced_rollout(rc, p, r, pricer, calibration)
            stream = stream.scaled(ratio)
            stream.floor_s = version_floor_s(group_ready_s(whole.finish_s * ratio, batch.group_ids), staleness)
            pipe = trainer_pipeline(n_seq, train_s, w, policy, rate=n_seq / stream.batch_s, stream=stream)
            # the rollout's seconds per batch: a full engine's pace plus the re-prefill, never below the floor
            gen = max(stream.batch_s + pipe.resume_s, stream.floor_s)
            detail = {"stream": stream.to_dict(), "carry_samples": pipe.carry, "resume_paid_s": pipe.resume_s}
        step = pipe.step_s
        trainer_wait = pipe.trainer_wait_s + pipe.sync_wait_s
        rollout_busy = min(pipe.rollout_busy_s, step if in_flight else step - w)
        detail.update(trainer_wait_for_samples_s=pipe.trainer_wait_s, trainer_wait_for_drain_s=pipe.sync_wait_s)
    stages["gen"] = gen
    R, T = rc.n_gpus, tc.n_gpus
    rollout_stops = not in_flight  # for the sync (in flight: only the trainer)
    rollout_idle = max(0.0, step - (w if rollout_stops else 0.0) - rollout_busy)
    idle = {
        "weight_sync_gpu_s": w * (R + T if rollout_stops else T),
        "rollout_waiting_for_trainer_gpu_s": rollout_idle * R,
        "trainer_waiting_for_rollout_gpu_s": trainer_wait * T,
        "trainer_ranks_waiting_for_slowest_gpu_s": trainer.train_imbalance_gpu_s,
    }
    if roll is not None:
        idle["rollout_engines_waiting_for_slowest_gpu_s"] = roll.imbalance_gpu_s * scale
        idle["rollout_tail_gpu_s"] = roll.tail_gpu_s * scale
    tokens = int((p + r).sum())
    return {"step": int(batch.step), "stages_s": stages, "step_s": step, "other_s": other, "tokens": tokens,
            "sequences": n_seq, "tokens_per_s_per_gpu": tokens / step / (R + T) if step > 0 else 0.0,
            "train_s": train_s, "weight_sync_s": w, "weight_sync": sync,
            "busy": {"rollout": rollout_busy / step if step else 0.0, "trainer": train_s / step if step else 0.0},
            "idle": idle, "detail": detail}


def _sync_mode_block(res: EstimateResult) -> dict:
    """Utilisation and idle causes of the colocated estimate (numbers unchanged)."""
    rows = res.rows
    n = res.config["n_gpus"]
    step = res.summary["mean_step_s"]
    gen = res.summary["mean_stages_s"]["gen"]
    idle = {"rollout_tail_gpu_s": float(np.mean([r["idle"]["rollout_tail_gpu_s"] for r in rows])),
            "rollout_engines_waiting_for_slowest_gpu_s": float(np.mean([r["idle"]["rollout_imbalance_gpu_s"]
                                                                          for r in rows])),
            "trainer_ranks_waiting_for_slowest_gpu_s": float(np.mean([r["idle"]["train_imbalance_gpu_s"]
                                                                        for r in rows])),
            "reward_scoring_gpu_s": float(np.mean([sum(r["kernels"]["other"].values()) for r in rows])) * n,
            "weight_sync_gpu_s": float(np.mean([r.get("refit_s", 0.0) for r in rows])) * n}
    refit = float(np.mean([r.get("refit_s", 0.0) for r in rows]))
    return {"mode": "sync", "rollout_gpus": n, "train_gpus": n, "step_s": step, "weight_sync_s": refit,
            "busy": {"rollout": gen / step if step else 0.0, "trainer": (step - gen) / step if step else 0.0},
            "idle_gpu_s": idle,
            "note": "colocated: every GPU generates, then trains; the refit into the engine is priced from its "
                    "bytes and links in gen (stepmodel/refit.py), its host work held by gen's fixed seconds"}


def mode_estimate(profile, model, gpu, gpus: int, **kw) -> EstimateResult:
    """The steady-state step of the run the keyword settings make (``polytrace.run.spec`` names,
    ``mode`` among them) priced as the ``estimate.PriceOptions`` keywords say: ``estimate_mode``."""
    return estimate_mode(profile, *run_and_options(model, gpu, gpus, kw))


def estimate_mode(profile, spec: RunSpec, options: PriceOptions | None = None) -> EstimateResult:
    """The steady-state step of ``spec.mode.mode`` (``MODES``) on ``spec.cluster.gpus`` GPUs:
    ``estimate``'s keys (``summary.mean_step_s``, ``summary.mean_stages_s``, ``rows``, ``config``)
    plus ``summary.mode``: the split, the weight sync, each side's busy share and the GPU time idle
    by cause. Without ``rollout_gpus`` / ``train_gpus`` the split is the best of ``SPLIT_FRACTIONS``.
    ``in_flight_updates`` (one-step-off, and fully-async's stream): the rollout keeps decoding
    through the weight sync (module docstring); default off, as verl's recipes stop it. ``pipelined_sync``
    (separated modes): the sync's gather and broadcast overlap (NeMo RL); default off (verl).
    ``checkpoint_engine`` (separated modes): verl's checkpoint engine buckets the sync's tensors;
    default on in fully-async (verl's ``async_training.checkpoint_engine.enable`` default), off in
    one-step-off. ``trainer_logprobs`` (fully-async): the trainer runs the old-policy log-prob pass
    (NeMo RL's async GRPO); default off, as verl's fully-async trainer uses the rollout's."""
    from ..workload.profiles import get_profile

    options = options or PriceOptions()
    m, gpus = spec.mode, spec.cluster.gpus
    mode, rollout_gpus, train_gpus = m.mode, m.rollout_gpus, m.train_gpus
    steps, seed, calibration, amdahl = options.steps, options.seed, options.calibration, options.amdahl
    check_mode_args(m, gpus)
    if m.trainer_logprobs is not None and mode != "fully-async":
        raise PolytraceError(f"trainer_logprobs applies to --mode fully-async (the other modes' trainers always run "
                             f"the old-policy log-prob pass), not --mode {mode}")
    in_flight, pipelined = bool(m.in_flight_updates), bool(m.pipelined_sync)
    own_logprobs = bool(m.trainer_logprobs)
    bucketed = mode == "fully-async" if m.checkpoint_engine is None else bool(m.checkpoint_engine)
    if mode == "sync":
        res = estimate_run(profile, spec, options)
        res.summary["mode"] = _sync_mode_block(res)
        return res
    if amdahl is not None:
        raise PolytraceError(f"--kernels breaks down the colocated step; drop it or use --mode sync (not {mode})")
    staleness, partial_rollout, updates_per_sync = m.staleness, m.partial_rollout, m.updates_per_sync
    model, gpu = spec.cluster.model, spec.cluster.gpu
    # each side's configuration keywords (``_Sides``): the run's settings and the --set fields
    config_kw = dict(spec.run_settings(), run_fields=options.run_fields)
    results, results_root = options.results, options.results_root
    providers, speedups = options.providers, options.speedups
    staleness = DEFAULT_STALENESS if staleness is None else float(staleness)
    partial = True if partial_rollout is None else bool(partial_rollout)
    chunks = DEFAULT_UPDATES_PER_SYNC if updates_per_sync is None else int(updates_per_sync)
    if mode == "one-step-off":
        staleness, partial, chunks = 1.0, False, 1
    # in flight, the rollout decodes on through the sync; at staleness 0 (one batch per weight
    # version) the next batch waits for the new weights whatever the setting
    in_flight = in_flight and staleness > 0
    prof = get_profile(profile)
    base = build_config(prof, model, gpu, gpus, rollout_tp=1,
                        **{k: v for k, v in config_kw.items() if k not in ("rollout_tp", "rollout_ep")})
    if samples_apart(base.gen_batch_prompts, base.gen_batches):
        raise PolytraceError(f"--gen-batch / --gen-batches (DAPO's dynamic sampling) are priced in --mode sync only, "
                             f"not --mode {mode}")
    prof = with_group_size(prof, base.n)
    scalars = as_scalars(calibration)
    if scalars is not None:
        # a calibration's numbers as fitted; the shared priors under this run's engine and
        # recompute settings, as the sync estimate applies them: recompute on prices the update's
        # extra forward at the recompute kind's slowdown (Qwen2.5-7B, 16 H100, 8:8 one-step-off:
        # update 6.61 s with recompute's forward at the no-recompute slowdown, 10.45 s in sync)
        calibration = scalars.for_run(base.eager, base.gradient_checkpointing, base.gpu)
    timings, explicit = load_timings(base.gpu.slug, results, results_root)
    pricer = Pricer(base.gpu, DEFAULT, timings, providers, speedups, strict_model=explicit)
    batches, longest, biggest = sample_batches(prof, base, steps, seed)
    if chunks > base.prompts_per_step * base.n:
        raise PolytraceError(f"--updates-per-sync {chunks} exceeds the batch's {base.prompts_per_step * base.n} "
                             f"samples: each local update needs at least one")
    unit = config_kw.get("rollout_tp") or default_rollout_tp(base.engine_model, base.gpu, gpus, base.mem_fraction,
                                                             need_tokens=base.max_prompt_len + base.max_response_len)
    given = (rollout_gpus is not None, train_gpus is not None)
    candidates = _split_candidates(int(gpus), int(unit), rollout_gpus, train_gpus)
    sep = Separated(mode, VersionPolicy(chunks, staleness, partial, in_flight), SyncTransport(pipelined, bucketed),
                    own_logprobs)
    tried, best, errors = [], None, []
    for r_gpus, t_gpus in candidates:
        try:
            sides = _Sides(prof, base.model, base.gpu, Split(r_gpus, t_gpus, given), config_kw, longest, biggest)
        except PolytraceError as exc:
            if len(candidates) == 1:
                raise
            errors.append(str(exc))
            continue
        probe = _async_step(sep, sides, batches[0], pricer, calibration)
        tried.append({"rollout_gpus": r_gpus, "train_gpus": t_gpus, "step_s": probe["step_s"]})
        if best is None or probe["step_s"] < best[1]["step_s"]:
            best = (sides, probe)
    if best is None:
        raise PolytraceError(f"--gpus {gpus}: no rollout:trainer split of the GPUs is feasible for --mode {mode} "
                             f"({errors[0] if errors else 'no split tried'})")
    sides = best[0]
    # the best split's first step is its probe, priced already
    rows = [best[1]] + [_async_step(sep, sides, b, pricer, calibration) for b in batches[1:]]
    res = _summarise(sep, prof, sides, rows, tried, calibration, pricer, seed)
    res.summary["mode"]["in_flight_updates"] = in_flight
    return res


def _summarise(sep: Separated, prof, sides: _Sides, rows, tried, calibration, pricer: Pricer, seed) -> EstimateResult:
    mode, policy, given = sep.mode, sep.policy, sides.split.given
    rc, tc = sides.rollout, sides.trainer
    step = float(np.mean([r["step_s"] for r in rows]))
    mean_stages = {s: float(np.mean([r["stages_s"][s] for r in rows])) for s in STAGES}
    idle_keys = sorted({k for r in rows for k in r["idle"]})
    idle = {k: float(np.mean([r["idle"].get(k, 0.0) for r in rows])) for k in idle_keys}
    n = rc.n_gpus + tc.n_gpus
    gpu_s = step * n
    block = {
        "mode": mode, "rollout_gpus": rc.n_gpus, "train_gpus": tc.n_gpus, "rollout_tp": rc.rollout_tp,
        "split": "given" if any(given) else "best of the splits tried", "splits_tried": tried,
        "staleness": policy.staleness, "partial_rollout": policy.partial, "updates_per_sync": policy.chunks,
        "step_s": step,
        "train_s": float(np.mean([r["train_s"] for r in rows])),
        "weight_sync_s": float(np.mean([r["weight_sync_s"] for r in rows])), "weight_sync": rows[0]["weight_sync"],
        "busy": {side: float(np.mean([r["busy"][side] for r in rows])) for side in ("rollout", "trainer")},
        "idle_gpu_s": idle, "details": [r["detail"] for r in rows],
    }
    total_tokens = sum(r["tokens"] for r in rows)
    summary = {
        "steps": len(rows), "mean_step_s": step, "mean_stages_s": mean_stages,
        "stage_share": {s: v / step if step else 0.0 for s, v in mean_stages.items()},
        "tokens_per_s_per_gpu": total_tokens / sum(r["step_s"] for r in rows) / n,
        "rollout_tail_share": idle.get("rollout_tail_gpu_s", 0.0) / gpu_s if gpu_s else 0.0,
        "rank_imbalance_share": (idle.get("rollout_engines_waiting_for_slowest_gpu_s", 0.0)
                                 + idle["trainer_ranks_waiting_for_slowest_gpu_s"]) / gpu_s if gpu_s else 0.0,
        "mode": block,
    }
    source = ("estimated: roofline at assumed efficiencies (polytrace/stepmodel/efficiency.py), "
              f"{mode} steady state (polytrace/stepmodel/modes.py)" + (", calibrated scalars applied" if calibration
                                                                     else ""))
    config = tc.to_dict()
    config.update(n_gpus=n, rollout_tp=rc.rollout_tp, mode=mode, rollout_gpus=rc.n_gpus, train_gpus=tc.n_gpus)
    return EstimateResult(profile=prof.name, config=config, model=tc.model.to_dict(),
                          gpu=gpu_block(tc.gpu), seed=seed,
                          source=source, rows=rows, summary=summary, memory=sides.memory["trainer"],
                          memory_sides=sides.memory, timings_used=sorted("/".join(k) for k in pricer.used),
                          warnings=list(sides.warnings))


def compare_modes(profile, model, gpu, gpus: int, **kw) -> ModeComparison:
    """The three modes side by side on the same sampled steps ("what would async give me"):
    the separated modes take the given split or their best one (keywords as ``mode_estimate``'s)."""
    spec, options = run_and_options(model, gpu, gpus, kw)
    m = spec.mode
    split = dict(rollout_gpus=m.rollout_gpus, train_gpus=m.train_gpus, in_flight_updates=m.in_flight_updates,
                 pipelined_sync=m.pipelined_sync, checkpoint_engine=m.checkpoint_engine)
    out = {"sync": estimate_mode(profile, spec.with_mode("sync"), options)}
    out["one-step-off"] = estimate_mode(profile, spec.with_mode("one-step-off", **split), options)
    out["fully-async"] = estimate_mode(profile, spec.with_mode(
        "fully-async", staleness=m.staleness, partial_rollout=m.partial_rollout, updates_per_sync=m.updates_per_sync,
        trainer_logprobs=m.trainer_logprobs, **split), options)
    sync_step = out["sync"].summary["mean_step_s"]
    rows = []
    for name, res in out.items():
        s, m = res.summary, res.summary["mode"]
        rows.append({"mode": name, "split": f"{m['rollout_gpus']}:{m['train_gpus']}" if name != "sync"
                     else f"{m['rollout_gpus']} colocated", "step_s": s["mean_step_s"],
                     "speedup": sync_step / s["mean_step_s"] if s["mean_step_s"] else 0.0,
                     "gen_s": s["mean_stages_s"]["gen"],
                     "train_s": (m.get("train_s") if name != "sync" else s["mean_step_s"] - s["mean_stages_s"]["gen"]),
                     "weight_sync_s": m["weight_sync_s"], "rollout_busy": m["busy"]["rollout"],
                     "trainer_busy": m["busy"]["trainer"]})
    return ModeComparison(rows, out)


__all__ = ["DEFAULT_STALENESS", "DEFAULT_UPDATES_PER_SYNC", "MODES", "check_mode_args", "compare_modes",
           "mode_estimate"]
