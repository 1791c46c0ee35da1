"""Synthetic verl console logs in the shapes real ones take, for the reader and validate tests.

The stage times come from a ground truth written here, independent of polytrace's own step model
(so a test measures how the model and its calibration generalise, not the model against itself):
generation costs a per-iteration part over the longest response (the long tail), a per-token
part and a fixed part; forward passes and updates cost a fixed part per call, a part per
micro-batch and a part per token; the reference reloads offloaded weights. On top: the first
step's warm-up (1.25x on generation, more on the update), validation every ``test_freq`` steps
and checkpoints every ``save_freq`` (their own timers, plus a slower generation right after),
occasional stalls, multiplicative noise, and response lengths that drop over the first steps and
grow slowly after, as GRPO runs do. Every constant is plausible for the named model and GPU
class, not measured; the formats (metric names, ray prefixes, launch scripts) follow verl's
console logger and its example scripts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

ESC = "\x1b"


@dataclass
class Truth:
    """Seconds of each stage as a function of the step's lengths (module docstring)."""

    gen_fixed: float = 2.0
    gen_per_iter: float = 0.008  # per decode iteration (weights read, launches, scheduler)
    gen_per_token: float = 2.0e-5  # per generated token of one engine
    fwd_fixed: float = 0.5
    fwd_per_micro: float = 0.05
    fwd_per_token: float = 2.0e-6  # per token on one GPU
    ref_reload: float = 0.8  # parameter offload: weights back to the GPUs
    upd_fixed: float = 1.5
    upd_per_mini: float = 0.05  # per optimizer step: grad-norm all-reduce, AdamW launches
    upd_per_micro: float = 0.12
    upd_per_token: float = 7.0e-6
    other_fixed: float = 0.5
    other_per_seq: float = 2.0e-4
    warmup: dict = field(default_factory=lambda: {"gen": 1.25, "update_actor": 1.35, "old_log_prob": 1.15,
                                                  "ref": 1.15})
    noise: dict = field(default_factory=lambda: {"gen": 0.02, "update_actor": 0.02, "old_log_prob": 0.04,
                                                 "ref": 0.04, "values": 0.04, "update_critic": 0.02})
    after_validation_gen: float = 1.12  # the step after validation regenerates its caches


@dataclass
class Run:
    model_path: str = "Qwen/Qwen2.5-0.5B-Instruct"
    gpus_per_node: int = 8
    nnodes: int = 1
    prompts: int = 256
    n: int = 5
    max_prompt: int = 512
    max_response: int = 1024
    rollout_tp: int = 1
    algo: str = "grpo"  # "grpo" or "ppo"
    micro_per_gpu: int = 16
    mini_batch: int = 64
    steps: int = 120
    first_step: int = 1
    test_freq: int = 10
    save_freq: int = 50
    seed: int = 0
    stalls: dict = field(default_factory=dict)  # step -> (stage, factor)
    resp_start: float = 240.0  # mean response length at the start...
    resp_floor: float = 170.0  # ...falling to this over the first ~15 steps...
    resp_growth: float = 0.25  # ...then growing by this many tokens per step
    truth: Truth = field(default_factory=Truth)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nnodes

    def stages(self) -> list[str]:
        base = ["gen", "old_log_prob", "ref"]
        if self.algo == "ppo":
            base += ["values", "update_critic"]
        return base + ["update_actor"]


def lengths(run: Run, step: int, rng) -> dict:
    """One step's length statistics (verl's metric names)."""
    t = step - run.first_step
    mean = run.resp_floor + (run.resp_start - run.resp_floor) * math.exp(-t / 5.0) + run.resp_growth * t
    mean *= 1 + 0.03 * rng.standard_normal()
    mean = float(min(max(mean, 20.0), 0.8 * run.max_response))
    clip = float(max(0.0, min(0.05, (mean / run.max_response) ** 3 * 0.5 + 0.004 * rng.standard_normal())))
    mx = float(run.max_response) if clip > 0 else float(min(run.max_response, mean * (3.5 + 0.5 * rng.random())))
    pm = 105.0 + 2.0 * rng.standard_normal()
    return {"response_length/mean": mean, "response_length/max": mx,
            "response_length/min": 12.0 + 3 * rng.random(), "response_length/clip_ratio": clip,
            "prompt_length/mean": pm, "prompt_length/max": min(float(run.max_prompt), 310.0 + 20 * rng.random()),
            "prompt_length/min": 40.0, "prompt_length/clip_ratio": 0.0}


def stage_times(run: Run, stats: dict) -> dict:
    tr = run.truth
    seqs = run.prompts * run.n
    tokens = seqs * (stats["prompt_length/mean"] + stats["response_length/mean"])
    per_gpu = tokens / run.gpus
    engines = run.gpus // run.rollout_tp
    micro = math.ceil(seqs / run.gpus / run.micro_per_gpu)
    minis = max(1, run.prompts // run.mini_batch)
    gen = (tr.gen_fixed + tr.gen_per_iter * stats["response_length/max"]
           + tr.gen_per_token * seqs * stats["response_length/mean"] / engines)
    fwd = tr.fwd_fixed + tr.fwd_per_micro * micro + tr.fwd_per_token * per_gpu
    upd = tr.upd_fixed + tr.upd_per_mini * minis + tr.upd_per_micro * micro + tr.upd_per_token * per_gpu
    out = {"gen": gen, "old_log_prob": fwd, "ref": fwd + tr.ref_reload, "update_actor": upd}
    if run.algo == "ppo":
        out["values"] = 0.9 * fwd
        out["update_critic"] = 0.9 * upd
    out["_other"] = tr.other_fixed + tr.other_per_seq * seqs
    return out


def step_records(run: Run) -> list[dict]:
    """Per step: the metrics verl would log (timings, lengths, throughput)."""
    rng = np.random.default_rng(run.seed)
    tr = run.truth
    out = []
    prev_extra = False
    for step in range(run.first_step, run.first_step + run.steps):
        stats = lengths(run, step, rng)
        times = stage_times(run, stats)
        other = times.pop("_other")
        for s in list(times):
            f = math.exp(tr.noise.get(s, 0.03) * rng.standard_normal())
            if step == run.first_step:
                f *= tr.warmup.get(s, 1.0)
            if s == "gen" and prev_extra:
                f *= tr.after_validation_gen
            if run.stalls.get(step, ("", 1.0))[0] == s:
                f *= run.stalls[step][1]
            times[s] *= f
        timing = {f"timing_s/{s}": v for s, v in times.items()}
        timing["timing_s/reward"] = 0.6 * other
        timing["timing_s/adv"] = 0.1 * other
        total = sum(times.values()) + other
        extra = 0.0
        if run.test_freq and step % run.test_freq == 0:
            timing["timing_s/testing"] = 25.0 + 3 * rng.random()
            extra += timing["timing_s/testing"]
        if run.save_freq and step % run.save_freq == 0:
            timing["timing_s/save_checkpoint"] = 14.0 + 2 * rng.random()
            extra += timing["timing_s/save_checkpoint"]
        prev_extra = extra > 0
        timing["timing_s/step"] = total + extra
        seqs = run.prompts * run.n
        tokens = seqs * (stats["prompt_length/mean"] + stats["response_length/mean"])
        perf = {"perf/total_num_tokens": round(tokens), "perf/time_per_step": timing["timing_s/step"],
                "perf/throughput": tokens / (timing["timing_s/step"] * run.gpus)}
        metrics = {"actor/entropy": 0.4 + 0.01 * rng.standard_normal(), "actor/pg_loss": 0.01 * rng.standard_normal(),
                   "critic/score/mean": 0.5, **stats, **timing,
                   "timing_per_token_ms/gen": 1000 * times["gen"] / max(tokens, 1), **perf,
                   "global_seqlen/mean": tokens / run.gpus, "training/global_step": step}
        out.append({"step": step, "metrics": metrics})
    return out


def step_line(step: int, metrics: dict, prefix: str = "(TaskRunner pid=2131)", colour: bool = True) -> str:
    body = " - ".join(f"{k}:{v:.3f}" if isinstance(v, float) else f"{k}:{v}" for k, v in metrics.items())
    pre = f"{ESC}[36m{prefix}{ESC}[0m" if colour else prefix
    return f"{pre} step:{step} - {body}\n"


def script_markdown(run: Run) -> str:
    """A launch script as a run's page shows it: a markdown fence, comments, shell variables
    (``$NAME``, ``${NAME}``, ``${NAME:-default}``) and ``\\`` continuations."""
    critic = ""
    if run.algo == "ppo":
        critic = ("    critic.model.path=$MODEL_PATH \\\n"
                  f"    critic.ppo_micro_batch_size_per_gpu={run.micro_per_gpu} \\\n")
    adv = "gae" if run.algo == "ppo" else "grpo"
    return (
        "## Launch\n\n"
        "```bash\n"
        "#!/bin/bash\n"
        "# 8x MI300X, ROCm 6.3\n"
        "export HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\n"
        "export RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES=1\n"
        f"GPUS_PER_NODE={run.gpus_per_node}\n"
        f"MODEL_PATH={run.model_path}\n"
        f"export TRAIN_BS={run.prompts}\n"
        "ENGINE=vllm  # or sglang\n"
        "PROJECT=grpo-amd\n"
        "\n"
        "PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\\n"
        f"    algorithm.adv_estimator={adv} \\\n"
        "    data.train_files=$HOME/data/gsm8k/train.parquet \\\n"
        "    data.train_batch_size=${TRAIN_BS} \\\n"
        f"    data.max_prompt_length=${{MAX_PROMPT:-{run.max_prompt}}} \\\n"
        f"    data.max_response_length={run.max_response} \\\n"
        "    actor_rollout_ref.model.path=$MODEL_PATH \\\n"
        "    actor_rollout_ref.model.use_remove_padding=True \\\n"
        f"    actor_rollout_ref.actor.ppo_mini_batch_size={run.mini_batch} \\\n"
        f"    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={run.micro_per_gpu} \\\n"
        "#    actor_rollout_ref.actor.use_dynamic_bsz=True \\\n"
        f"    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={run.micro_per_gpu} \\\n"
        f"    actor_rollout_ref.rollout.tensor_model_parallel_size={run.rollout_tp} \\\n"
        "    actor_rollout_ref.rollout.name=$ENGINE \\\n"
        "    actor_rollout_ref.rollout.gpu_memory_utilization=0.8 \\\n"
        f"    actor_rollout_ref.rollout.n={run.n} \\\n"
        f"    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={run.micro_per_gpu} \\\n"
        "    actor_rollout_ref.ref.fsdp_config.param_offload=True \\\n"
        + critic +
        "    trainer.logger=console \\\n"
        "    trainer.project_name=$PROJECT \\\n"
        "    trainer.n_gpus_per_node=$GPUS_PER_NODE \\\n"
        f"    trainer.nnodes={run.nnodes} \\\n"
        f"    trainer.save_freq={run.save_freq} \\\n"
        f"    trainer.test_freq={run.test_freq} \\\n"
        "    trainer.total_epochs=15 $@ 2>&1 | tee verl_demo.log  # keep a copy\n"
        "```\n\n"
        "## Output\n\n"
    )


def write_log(path, run: Run, header: str | None = None, prefix: str = "(TaskRunner pid=2131)",
              records: list[dict] | None = None) -> str:
    """A console log: the header (a markdown script by default), some start-up noise, a
    validation-only step-0 line, then one line per step."""
    records = step_records(run) if records is None else records
    parts = [script_markdown(run) if header is None else header,
             "2025-07-02 10:11:12,345\tINFO worker.py:1843 -- Connected to Ray cluster.\n",
             f"{prefix} Training Progress:   0%|          | 0/{run.steps} [00:00<?, ?it/s]\n",
             f"{prefix} step:0 - val-core/openai/gsm8k/reward/mean@1:0.210\n"]
    parts += [step_line(r["step"], r["metrics"], prefix) for r in records]
    text = "".join(parts)
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


def priced_probe(path, launch: str, stats_lines: list[str]):
    """(run, rows, prior): the steps of a log holding only ``launch`` and length statistics (with
    placeholder stage times) read, configured and priced as ``validate`` does, and the shipped
    priors' scalars under its engine settings: the model's own prices, to build a synthetic run on."""
    from polytrace.calibrate.validate import _step_rows, config_from_log, price_steps
    from polytrace.logs import read_log
    from polytrace.stepmodel.efficiency import prior_scalars

    timers = "timing_s/gen:1 - timing_s/old_log_prob:1 - timing_s/update_actor:1"
    path.write_text(launch + "".join(f"(TaskRunner pid=1) step:{i} - {timers} - {s}\n"
                                     for i, s in enumerate(stats_lines, 1)))
    log = read_log(path)
    run, _ = config_from_log(log)
    rows = _step_rows(log)
    price_steps(run, rows)
    return run, rows, prior_scalars(eager=run.eager, gradient_checkpointing=run.gradient_checkpointing)
