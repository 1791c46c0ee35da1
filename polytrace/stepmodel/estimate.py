"""``estimate``: per-stage times of RL training steps for a workload profile, a model and a cluster.

Every figure is an estimate: each stage is a sum of kernel families (``pricing.py``), priced from
measured kernel timings (``results/<gpu>/`` or files given) where present, else at the roofline of
``efficiency.py``, optionally scaled by scalars calibrated on a real log (``polytrace calibrate``
-> ``estimate --calibration``, ``polytrace.calibrate.files``). The summary breaks the step down by stage
and kernel family (``breakdown.py``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import PolytraceError
from ..run.hardware import GPU, get_gpu
from ..run.models import ModelSpec, get_model
from ..run.spec import RunSpec, verl_default
from .breakdown import amdahl_table, family_summary, kernel_summary, what_if_summary
from .checks import check_ranks_have_sequences, check_rollout_tp, tp_splits_heads, valid_rollout_tps
from .devices import gpu_block
from .dynamic_sampling import generation_batches, generation_parts, samples_apart
from .efficiency import DEFAULT, part_slowdown
from .memory import check_feasibility, smallest_rollout_tp
from .pricing import MEASURED, NOT_KERNELS, Pricer, check_speedups
from .result import EstimateResult
from .rollout import tool_prefill_seconds
from .scalars import as_scalars
from .stages import STAGES, Part, RunConfig, stage_costs
from .timings import load_timings


def default_rollout_tp(model: ModelSpec, gpu: GPU, n_gpus: int, mem_fraction: float,
                       need_tokens: int = 0) -> int:
    """The smallest power-of-two TP that leaves at least half of the engine's memory share for
    the KV cache, raised (over the divisors of ``n_gpus``) until the cache holds one
    ``need_tokens`` sequence where a larger TP allows it. Only TPs that split the model's heads
    (``checks.tp_splits_heads``, vLLM's rule) are chosen: 3 GPUs never give TP 3 for a 40-head model."""
    tp = 1
    while tp < n_gpus and model.weight_bytes() / tp > 0.5 * mem_fraction * gpu.memory_gb * 1e9:
        tp *= 2
    while tp > 1 and (n_gpus % tp or not tp_splits_heads(model, tp)):
        tp //= 2
    tp = max(1, tp)
    if need_tokens:
        fit = smallest_rollout_tp(model, gpu, n_gpus, mem_fraction, need_tokens)
        if fit is not None and fit > tp:
            tp = fit
    return tp


# verl's default ``ppo_max_token_len_per_gpu``; raised to the configured maximum sequence length
# when that is longer, as verl requires (``max_token_len >= the longest sequence``).
DEFAULT_MICRO_BATCH_TOKENS = verl_default("micro_batch_tokens")


def auto_micro_batch_tokens(max_prompt_len: int, max_response_len: int) -> int:
    """The default token budget: 16384, or the configured max prompt + max response rounded up to
    1024 when longer (the smallest budget verl accepts for every sequence the config allows, as
    ``polytrace pack-compare`` defaults)."""
    longest = int(max_prompt_len) + int(max_response_len)
    return max(DEFAULT_MICRO_BATCH_TOKENS, int(math.ceil(longest / 1024) * 1024))


# The step's GPU time that does no full-speed work, as shares of (step time x GPUs). The tail is
# busy but mostly streaming weights for a few sequences; the two waits are idle. What used to be
# called "idle from rank imbalance" is their sum, kept as ``rank_imbalance_share``: mostly
# rollout engines done early and waiting for the slowest engine (its longest responses).
IDLE_FIGURES = {
    "rollout_tail_share": "rollout tail: decoding with under half the engine's peak batch still running",
    "rollout_engine_wait_share": "rollout engines idle, waiting for the slowest engine to finish its responses",
    "trainer_rank_wait_share": "trainer ranks idle, waiting for the slowest rank at each optimizer step",
    "rank_imbalance_share": "both waits together (engines + ranks)",
}

# How the workload's tail figure and the estimate's differ (printed by ``estimate`` and the report).
TAIL_FIGURES_NOTE = (
    "Two tail figures answer two questions. The workload's rollout tail (polytrace describe, the shape "
    "table) is the share of decode iterations in which fewer than 10% of the batch's sequences are still "
    "generating, as if all started together: a property of the lengths alone, on any hardware. The "
    "estimate's rollout tail is the share of this step's GPU time spent decoding with under half of an "
    "engine's peak batch still running: the GPUs are busy but mostly stream weights for a few long "
    "responses. Engines that have finished and wait for the slowest one are idle and counted apart "
    "(engines wait), as are trainer ranks waiting for the slowest rank (ranks wait).")

# verl's default ``actor_rollout_ref.actor.ppo_mini_batch_size``: prompts per optimizer step.
DEFAULT_PPO_MINI_BATCH = verl_default("ppo_mini_batch")


def _count(value, flag: str, lowest: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lowest:
        kind = "positive" if lowest == 1 else "non-negative"
        raise PolytraceError(f"{flag} must be a {kind} integer, got {value!r}")
    return int(value)


def build_config(profile, model, gpu, gpus: int, *, run_fields: dict | None = None, origins: dict | None = None,
                 **settings) -> RunConfig:
    """The ``RunConfig`` of an estimate from keyword settings (``polytrace.run.spec``'s names):
    the ``RunSpec`` they make, checked once (``origins``: setting -> how the user gave it, where
    not by its flag), priced by ``configure``."""
    spec = RunSpec.build(dict(model=model, gpu=gpu, gpus=gpus, **settings), origin=_origin(origins))
    return configure(profile, spec, run_fields)


def _origin(origins: dict | None):
    """A RunSpec origin function: the given spelling (a ``--set`` key), else the setting's flag."""
    from ..run.spec import declarations

    decls = declarations()
    return lambda name: (origins or {}).get(name) or decls[name].flag or name


def configure(profile, spec: RunSpec, run_fields: dict | None = None) -> RunConfig:
    """The ``RunConfig`` of a ``RunSpec`` (its settings already checked one by one, and those
    between them that need no model, when it was built) for ``profile``'s workload: the checks
    that need the model, the GPU or the profile, the profile's values for the settings left
    unset, the automatic micro-batch budget and rollout TP. ``run_fields``: ``RunConfig`` fields
    verl settings set that the RunSpec does not declare (``--set``,
    ``polytrace.calibrate.settings.estimate_arguments``).

    The batch as frameworks state it, in responses: ``responses_per_step`` (the generation batch,
    NeMo RL's ``num_prompts_per_step x num_generations_per_prompt``; prompts = it / n) and
    ``train_batch`` (responses per optimizer step, NeMo RL's ``train_global_batch_size``; verl's
    mini-batch = it / n prompts)."""
    from .parallel import check_layout

    c, b, ln, ro, t = spec.cluster, spec.batch, spec.lengths, spec.rollout, spec.trainer
    model = c.model if isinstance(c.model, ModelSpec) else get_model(str(c.model))
    gpu = c.gpu if isinstance(c.gpu, GPU) else get_gpu(str(c.gpu))
    if c.gpus is None:
        raise PolytraceError("--gpus must be a positive integer, got None")
    gpus = c.gpus
    if t.lora_rank > model.hidden:
        raise PolytraceError(f"--lora-rank {t.lora_rank} exceeds {model.name}'s hidden size {model.hidden}: an "
                             f"adapter of that rank is no low-rank adapter")
    pc = profile.config
    n = int(b.n or pc.n)
    prompts, ppo_mini_batch = responses_as_prompts(b.prompts, b.ppo_mini_batch, b.responses_per_step,
                                                   b.train_batch, n)
    prompts = int(prompts or pc.prompts_per_step)
    megatron = t.strategy == "megatron"
    # before anything that grows with the GPU count: --gpus 1000000 is refused at once
    check_ranks_have_sequences(gpus, t.train_tp * t.train_pp if megatron else 1, prompts, n)
    max_prompt_len = int(ln.max_prompt_len or pc.max_prompt_len)
    max_response_len = int(ln.max_response_len or pc.max_response_len)
    micro_batch_tokens = b.micro_batch_tokens
    if micro_batch_tokens == "auto":
        micro_batch_tokens = auto_micro_batch_tokens(max_prompt_len, max_response_len)
    if ro.rollout_tp is not None:
        check_rollout_tp(model, gpus, ro.rollout_tp)
    elif not valid_rollout_tps(model, gpus):  # cannot happen (TP 1 always splits), kept as a guard
        raise PolytraceError(f"--gpus {gpus}: no rollout TP splits {model.name}'s heads")
    if t.train_precision == "fp8" and not gpu.has_fp8:
        raise PolytraceError(f"--train-precision fp8: {gpu.slug} has no FP8 tensor cores (Transformer Engine's FP8 "
                             f"training needs Hopper or later); an FP8 rollout runs there weight-only")
    engine = dataclasses.replace(model, weight_dtype=ro.rollout_precision)  # as the engine holds it
    tp = ro.rollout_tp or default_rollout_tp(engine, gpu, gpus, ro.mem_fraction,
                                             need_tokens=max_prompt_len + max_response_len)
    if ppo_mini_batch is not None and prompts % ppo_mini_batch:
        # named as the user stated it: --train-batch in responses, else --ppo-mini-batch in prompts
        given = (f"--train-batch {b.train_batch} ({ppo_mini_batch} prompts of --n {n})" if b.train_batch is not None
                 else f"--ppo-mini-batch {ppo_mini_batch}")
        divisor = f"{prompts * n} responses" if b.train_batch is not None else f"{prompts}"
        raise PolytraceError(f"{given} does not divide the batch of {prompts} prompts "
                             f"(verl requires it); pass a divisor of {divisor}")
    mini_batches = max(1, prompts // ppo_mini_batch) if ppo_mini_batch else max(
        1, -(-prompts // DEFAULT_PPO_MINI_BATCH))
    if b.gen_batch is not None and b.gen_batch < prompts:
        raise PolytraceError(f"--gen-batch {b.gen_batch} is below the {prompts} prompts trained on: DAPO's dynamic "
                             "sampling generates at least the prompts it trains on")
    fields = dict(
        model=model, gpu=gpu, n_gpus=gpus, prompts_per_step=prompts, n=n,
        max_prompt_len=max_prompt_len, max_response_len=max_response_len, rollout_tp=int(tp),
        strategy=t.strategy, train_tp=t.train_tp, train_pp=t.train_pp, algorithm=t.algorithm,
        use_ref=t.use_ref, micro_batch_tokens=micro_batch_tokens, remove_padding=t.remove_padding,
        mem_fraction=ro.mem_fraction, gradient_checkpointing=t.gradient_checkpointing,
        max_num_seqs=ro.max_num_seqs, eager=ro.eager, engine=ro.engine,
        async_scheduling=ro.async_scheduling, lora_rank=t.lora_rank, param_offload=t.param_offload,
        optimizer_offload=t.optimizer_offload, mini_batches=mini_batches,
        rollout_precision=ro.rollout_precision, train_precision=t.train_precision,
        cpu_optimizer=t.cpu_optimizer, cpu_optimizer_overlap=t.cpu_optimizer_overlap,
        micro_batch_seqs=b.micro_batch_seqs, ref_offload=t.ref_offload,
        critic_remove_padding=t.critic_remove_padding,
        generated_share=_generated_share(ln.generated_share, profile),
        gen_batch_prompts=b.gen_batch if b.gen_batch not in (None, prompts) else None, gen_batches=b.gen_batches,
        **check_layout(model, gpus, int(tp), t, ro.rollout_ep))
    fields.update(run_fields or {})
    return RunConfig(**fields)


def _generated_share(share, profile) -> float | None:
    """``--generated-share``: a share in (0, 1] for a multi-turn profile (one-line errors)."""
    if share is None:
        return None
    if profile.kind != "multiturn":
        raise PolytraceError(f"--generated-share applies to a multi-turn profile (tool output between turns); "
                             f"{profile.name} is single-turn: every response token is generated")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < float(share) <= 1.0:
        raise PolytraceError(f"--generated-share must be a share in (0, 1], got {share!r}")
    return float(share)


def responses_as_prompts(prompts, ppo_mini_batch, responses_per_step, train_batch, n: int):
    """(prompts per step, prompts per optimizer step) from a batch stated in responses; one-line
    errors where a count of responses is no whole number of groups or contradicts ``--prompts``."""
    responses_per_step = _count(responses_per_step, "--responses-per-step")
    train_batch = _count(train_batch, "--train-batch")
    if responses_per_step is not None:
        if responses_per_step % n:
            raise PolytraceError(f"--responses-per-step {responses_per_step} is no whole number of groups of "
                                 f"--n {n} responses")
        if prompts is not None and int(prompts) * n != responses_per_step:
            raise PolytraceError(f"--prompts {prompts} x --n {n} = {int(prompts) * n} responses, not "
                                 f"--responses-per-step {responses_per_step}; give one of them")
        prompts = responses_per_step // n
    if train_batch is not None:
        if train_batch % n:
            raise PolytraceError(f"--train-batch {train_batch} is no whole number of groups of --n {n} responses")
        if ppo_mini_batch is not None and int(ppo_mini_batch) * n != train_batch:
            raise PolytraceError(f"--ppo-mini-batch {ppo_mini_batch} x --n {n} is not --train-batch {train_batch}; "
                                 f"give one of them")
        ppo_mini_batch = train_batch // n
    return prompts, ppo_mini_batch


def with_group_size(prof, n: int):
    """The profile drawing groups of ``n`` responses per prompt (``--n``)."""
    if n == prof.config.n:
        return prof
    import dataclasses

    return dataclasses.replace(prof, config=dataclasses.replace(prof.config, n=int(n)))


def calibrated_kernels(parts, calibration: dict | None, calls: dict | None = None) -> dict[str, dict[str, float]]:
    """Stage -> kernel family -> seconds, each part multiplied by the calibrated slowdown of its
    kind of work (or of its family, where the scalars price it apart: ``efficiency.part_slowdown``),
    plus the calibration's fixed seconds per stage (family ``calibration``), paid once per call:
    ``calls`` (stage -> calls a step, default 1; DAPO's generation batches)."""
    cal = calibration or {}
    raw = {s: 0.0 for s in STAGES}
    for p in parts:
        raw[p.stage] += p.seconds
    out: dict[str, dict[str, float]] = {s: {} for s in STAGES}
    for p in parts:
        if raw[p.stage] <= 0:
            continue
        out[p.stage][p.family] = out[p.stage].get(p.family, 0.0) + part_slowdown(cal, p.group, p.family) * p.seconds
    for s in STAGES:
        if raw[s] > 0 and cal.get(f"{s}_overhead_s"):
            out[s]["calibration"] = float(cal[f"{s}_overhead_s"]) * (calls or {}).get(s, 1.0)
    return out


def _sources(parts) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, list[str]]]]:
    """Stage -> family -> its parts' sources joined, and -> their prices (``result.Price``)."""
    out: dict[str, dict[str, list[str]]] = {s: {} for s in STAGES}
    prices: dict[str, dict[str, list[str]]] = {s: {} for s in STAGES}
    for p in parts:
        seen = out[p.stage].setdefault(p.family, [])
        if p.source not in seen:
            seen.append(p.source)
        priced = prices[p.stage].setdefault(p.family, [])
        if p.priced.value not in priced:
            priced.append(p.priced.value)
    return {s: {f: " + ".join(v) for f, v in fams.items()} for s, fams in out.items()}, prices


def estimate_step(cfg: RunConfig, batch, *, pricer: Pricer | None = None, calibration: dict | None = None,
                  generation=None) -> dict:
    """One step's estimate for a sampled or recorded ``Batch``: stage seconds, and per stage the
    seconds of each kernel family (``kernels``) with where they came from (``kernel_sources``).
    ``generation``: the step's generation batch where it differs from ``batch`` (DAPO's dynamic
    sampling, ``generation_batches``), generated ``cfg.gen_batches`` times."""
    pricer = pricer or Pricer(cfg.gpu, DEFAULT)
    p = np.asarray(batch.prompt_lens, dtype=np.int64)
    r = np.minimum(np.asarray(batch.response_lens, dtype=np.int64), cfg.max_response_len)
    decode = r
    extra_rollout = 0.0
    notes = []
    if batch.turns is not None and len(batch.turns):
        # Generated tokens decode; tool output is prefilled. Tool calls of a trajectory run one
        # after another, so the slowest trajectory's tool time adds to the rollout.
        if cfg.generated_share is not None:  # stated (--generated-share): the trace's split replaced
            decode = np.maximum(np.round(r * cfg.generated_share).astype(np.int64), 1)
        elif batch.loss_lens is not None:
            decode = np.minimum(np.asarray(batch.loss_lens, dtype=np.int64), r)
        tool = np.bincount(batch.turns.seq, weights=batch.turns.tool_latency_s, minlength=len(r))
        extra_rollout = float(tool.max()) if len(tool) else 0.0
        notes.append("multi-turn: slowest trajectory's tool latency added to the rollout, tool output prefilled "
                     "between turns")
    # a generation batch of its own (DAPO) is priced apart: the trainer's batch simulates no rollout
    costs = stage_costs(cfg, p, np.maximum(decode, 1), eff=DEFAULT, pricer=pricer, rollout=generation is None)
    parts, train = list(costs.parts), costs
    gen_costs, gen_times = costs, 1.0
    if samples_apart(cfg.gen_batch_prompts, cfg.gen_batches):  # DAPO: generation apart from the batch trained on
        gen_parts, gen_costs, gen_times, note = generation_parts(cfg, batch, generation, costs, pricer)
        parts = gen_parts + [x for x in parts if x.stage != "gen"]
        notes.append(note)
    if batch.turns is not None:
        # training sees the whole trajectory (tool output included)
        train = stage_costs(cfg, p, np.maximum(r, 1), eff=DEFAULT, pricer=pricer)
        parts = [x for x in costs.parts if x.stage == "gen"] + [x for x in train.parts if x.stage != "gen"]
        # tool time is not GPU or host work of ours: no calibrated slowdown applies to it
        parts.append(Part("gen", "tool", "tool", extra_rollout, "trace (tool latency)"))
        # the tool output appended between turns is prefilled, not decoded
        parts.append(Part("gen", "prefill", "rollout", tool_prefill_seconds(
            cfg.engine_model, cfg.gpu, cfg.rollout_tp, p, r, np.maximum(r - decode, 0), cfg.n_gpus)
            * pricer.scale("prefill")))
    kernels = calibrated_kernels(parts, calibration, {"gen": gen_times})
    seconds = {s: float(sum(kernels[s].values())) for s in STAGES}
    other = {"reward": gen_costs.other_s * gen_times}  # rule-based scoring of every generated response
    if (calibration or {}).get("other_overhead_s"):
        other["calibration"] = float(calibration["other_overhead_s"])
    step_s = float(sum(seconds.values())) + sum(other.values())
    raw_gen = sum(x.seconds for x in parts if x.stage == "gen")
    tokens = int((p + r).sum())
    gpu_s = step_s * cfg.n_gpus
    roll = gen_costs.rollout
    scale_gen = seconds["gen"] / raw_gen if raw_gen > 0 else 1.0
    tail = roll.tail_gpu_s * scale_gen * gen_times
    r_imb = roll.imbalance_gpu_s * scale_gen * gen_times
    t_imb = train.train_imbalance_gpu_s
    sources, prices = _sources(parts)
    for s in STAGES:  # the per-call constant seconds come from the calibration (or the priors), no kernel
        if "calibration" in kernels[s]:
            sources[s]["calibration"] = "calibration"
    sources["other"] = {"reward": "roofline", **({"calibration": "calibration"} if "calibration" in other else {})}
    return {
        "step": int(batch.step), "stages_s": seconds, "other_s": other["reward"], "step_s": step_s, "tokens": tokens,
        "response_tokens": int(r.sum()), "sequences": int(len(r)),
        "tokens_per_s_per_gpu": tokens / step_s / cfg.n_gpus if step_s > 0 else 0.0,
        "rollout_iterations": roll.iterations, "max_response_len": int(r.max(initial=0)),
        # the colocated refit (``refit.colocated_refit_seconds``, in ``gen``'s comm at the roofline)
        "refit_s": float(costs.details.get("refit", {}).get("total", 0.0)),
        # where GPU time goes besides useful work (module ``IDLE_FIGURES``)
        "idle": {"rollout_tail_gpu_s": tail, "rollout_imbalance_gpu_s": r_imb, "train_imbalance_gpu_s": t_imb,
                 "rollout_tail_share": tail / gpu_s if gpu_s else 0.0,
                 "rollout_engine_wait_share": r_imb / gpu_s if gpu_s else 0.0,
                 "trainer_rank_wait_share": t_imb / gpu_s if gpu_s else 0.0,
                 "rank_imbalance_share": (r_imb + t_imb) / gpu_s if gpu_s else 0.0},
        "kernels": {**{s: kernels[s] for s in STAGES if kernels[s]}, "other": other},
        "kernel_sources": {s: v for s, v in sources.items() if v},
        "kernel_prices": {s: v for s, v in prices.items() if v},
        "notes": notes,
    }


def sample_batches(prof, cfg: RunConfig, steps, seed: int) -> tuple[list, int, np.ndarray]:
    """The profile's batches at ``steps`` (``cfg``'s prompts per step), the longest sequence the
    trainer sees in them (responses cut at the configured maximum, as ``estimate_step`` cuts
    them) and the sequence lengths of the batch with the most tokens (the memory checks')."""
    steps = list(steps)
    if not steps:
        raise PolytraceError("steps must not be empty")
    batches = [prof.sample(step=int(st), seed=seed, prompts=cfg.prompts_per_step) for st in steps]
    seq_lens = [np.asarray(b.prompt_lens, dtype=np.int64)
                + np.minimum(np.asarray(b.response_lens, dtype=np.int64), cfg.max_response_len) for b in batches]
    longest = max(int(s.max(initial=1)) for s in seq_lens)
    biggest = max(seq_lens, key=lambda s: int(s.sum()))
    return batches, longest, biggest


@dataclasses.dataclass(frozen=True)
class PriceOptions:
    """How a run is priced, apart from the run itself (its ``RunSpec``): the sampled ``steps`` and
    ``seed``; ``calibration`` (a ``scalars.Scalars``: the shared priors or a calibration, with
    their provenance; None: the base roofline; the name ``efficiency.PRIORS`` reads as the priors,
    ``scalars.as_scalars``; a plain dict is refused); the
    measured kernel timings (``results`` / ``results_root``, see ``load_timings``); the what-ifs
    ``providers`` ({family: provider}) and ``speedups`` ({family: factor}), which the summary then
    compares with the estimate without them; ``amdahl`` (a factor): the table of step time with
    each family that much faster; ``run_fields``: ``RunConfig`` fields ``--set`` gives that the
    RunSpec does not declare."""

    steps: tuple = (0,)
    seed: int = 0
    calibration: object = None
    results_root: object = None
    results: object = None
    providers: dict | None = None
    speedups: dict | None = None
    amdahl: float | None = None
    run_fields: dict | None = None
    origins: dict | None = None  # setting -> how the user gave it, where not by its flag (a --set key)


def run_and_options(model, gpu, gpus, kw: dict) -> tuple[RunSpec, PriceOptions]:
    """Keyword arguments as (the RunSpec of the settings among them, the PriceOptions of the rest)."""
    names = {f.name for f in dataclasses.fields(PriceOptions)}
    options = PriceOptions(**{k: v for k, v in kw.items() if k in names})
    spec = RunSpec.build(dict(model=model, gpu=gpu, gpus=gpus, **{k: v for k, v in kw.items() if k not in names}),
                         origin=_origin(options.origins))
    return spec, options


def estimate(profile, model, gpu, gpus: int, **kw) -> EstimateResult:
    """Per-step stage estimates and their summary (``estimate_run``) of the run the keyword
    settings make (``polytrace.run.spec`` names), priced as the ``PriceOptions`` keywords say.
    ``profile`` is a name, path or ``Profile``."""
    return estimate_run(profile, *run_and_options(model, gpu, gpus, kw))


def estimate_run(profile, spec: RunSpec, options: PriceOptions | None = None) -> EstimateResult:
    """Per-step stage estimates of ``spec`` on ``profile``'s sampled steps, and their summary."""
    from ..workload.profiles import get_profile

    options = options or PriceOptions()
    steps, seed, calibration = options.steps, options.seed, options.calibration
    providers, speedups, amdahl = options.providers, options.speedups, options.amdahl
    prof = get_profile(profile)
    cfg = configure(prof, spec, options.run_fields)
    prof = with_group_size(prof, cfg.n)
    timings, explicit = load_timings(cfg.gpu.slug, options.results, options.results_root)
    if amdahl is not None and (not np.isfinite(amdahl) or amdahl <= 1.0):
        raise PolytraceError(f"--amdahl {amdahl}: the speedup factor must be a finite number above 1")
    speedups = check_speedups(speedups or {})  # factors as numbers (the CLI passes "1.5"): the table multiplies them

    def pricer_for(extra_speedups: dict | None = None, what_ifs: bool = True) -> Pricer:
        sp = dict(speedups or {}) if what_ifs else {}
        for fam, x in (extra_speedups or {}).items():
            sp[fam] = sp.get(fam, 1.0) * x
        return Pricer(cfg.gpu, DEFAULT, timings, providers if what_ifs else None, sp, strict_model=explicit)

    pricer = pricer_for()
    scalars = as_scalars(calibration)
    with_priors = scalars is not None and scalars.is_priors
    # the numbers: a calibration's as fitted, the shared priors' under this run's engine settings
    calibration = scalars.for_run(cfg.eager, cfg.gradient_checkpointing, cfg.gpu) if scalars is not None else None
    batches, longest, biggest = sample_batches(prof, cfg, steps, seed)
    plan, warnings = check_feasibility(cfg, longest, rollout_tp_given=spec.rollout.rollout_tp is not None,
                                       seq_lens=biggest)

    generations = generation_batches(prof, cfg, steps, seed)

    def mean_step(p: Pricer) -> float:
        return float(np.mean([estimate_step(cfg, b, pricer=p, calibration=calibration, generation=g)["step_s"]
                              for b, g in zip(batches, generations)]))

    rows = [estimate_step(cfg, batch, pricer=pricer, calibration=calibration, generation=g)
            for batch, g in zip(batches, generations)]
    mean_stages = {s: float(np.mean([r["stages_s"][s] for r in rows])) for s in STAGES}
    step_mean = float(np.mean([r["step_s"] for r in rows]))
    summary = {
        "steps": len(rows), "mean_step_s": step_mean, "mean_stages_s": mean_stages,
        "stage_share": {s: v / step_mean if step_mean else 0.0 for s, v in mean_stages.items()},
        # total tokens over total time (a mean of per-step ratios over-weights the short steps)
        "tokens_per_s_per_gpu": (sum(r["tokens"] for r in rows) / sum(r["step_s"] for r in rows) / cfg.n_gpus
                                 if sum(r["step_s"] for r in rows) > 0 else 0.0),
        **{key: float(np.mean([r["idle"][key] for r in rows])) for key in IDLE_FIGURES},
        "kernels": kernel_summary(rows),
    }
    if with_priors:  # the constant seconds per call are the shared priors', not a calibration of this run
        for fams in summary["kernels"].values():
            if "calibration" in fams:
                fams["calibration"]["source"] = "priors"
    summary["families"] = family_summary(summary["kernels"], step_mean)
    if with_priors and "calibration" in summary["families"]:
        summary["families"]["calibration"]["status"] = "priors"
    if providers or speedups:
        reference = [estimate_step(cfg, b, pricer=pricer_for(what_ifs=False), calibration=calibration, generation=g)
                     for b, g in zip(batches, generations)]
        summary["what_if"] = what_if_summary(rows, reference, providers or {}, pricer.speedups)
    if amdahl is not None:
        summary["amdahl"] = amdahl_table(summary["families"], step_mean, amdahl,
                                         lambda fam: mean_step(pricer_for({fam: amdahl})))
    measured = sorted(f for f, v in summary["families"].items() if v["status"] != "roofline"
                      and f not in NOT_KERNELS)
    source = ("estimated: roofline at assumed efficiencies (polytrace/stepmodel/efficiency.py)"
              + (f", measured kernel timings for {', '.join(measured)} ({timings.origin})" if measured else "")
              + (", shared priors applied (polytrace/data/priors.json)" if with_priors
                 else ", calibrated scalars applied" if calibration else ""))
    if with_priors and measured:
        warnings = warnings + [f"the shared priors were fitted on roofline prices; measured timings price "
                               f"{', '.join(measured)}, which the priors' slowdowns also scale"]
    lengths = None
    if hasattr(prof, "stated"):  # lengths stated by their mean and cap (workload/profiles/stated.py)
        from ..workload.profiles.stated import describe

        lengths = {**prof.summary(), "line": describe(prof)}
    return EstimateResult(
        profile=prof.name, config=cfg.to_dict(), model=cfg.model.to_dict(),
        gpu=gpu_block(cfg.gpu),
        seed=seed, source=source, rows=rows, summary=summary,
        providers={f: pricer.provider(f) for f in MEASURED},
        timings_used=sorted("/".join(k) for k in pricer.used),
        memory={**plan.to_dict(), "longest_sequence": longest,
                "source": "estimated: polytrace/stepmodel/memory.py (bf16 weights, fp32 master weights, "
                          "gradients and Adam moments, activations, KV cache)"},
        warnings=warnings, lengths=lengths)
