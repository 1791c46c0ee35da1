"""``estimate``: per-stage times of RL training steps for a workload profile, a model and a cluster.

Every figure is an estimate: the roofline of ``stages.py`` at the efficiencies of
``efficiency.py`` (or measured kernel rates from ``results/<gpu>/`` where present), optionally
scaled by scalars calibrated on a real log (``polytrace validate --json`` -> ``calibration``).
"""

from __future__ import annotations

import numpy as np

from ..errors import PolytraceError
from ..hardware import GPU, get_gpu
from ..models import ModelSpec, get_model
from .efficiency import DEFAULT
from .measured import MeasuredRates
from .stages import STAGES, RunConfig, stage_costs


def default_rollout_tp(model: ModelSpec, gpu: GPU, n_gpus: int, mem_fraction: float) -> int:
    """The smallest power-of-two TP that leaves at least half of the engine's memory share for
    the KV cache."""
    tp = 1
    while tp < n_gpus and model.weight_bytes() / tp > 0.5 * mem_fraction * gpu.memory_gb * 1e9:
        tp *= 2
    while n_gpus % tp:
        tp //= 2
    return max(1, tp)


def build_config(profile, model, gpu, gpus: int, *, rollout_tp: int | None = None, strategy: str = "fsdp",
                 train_tp: int = 1, train_pp: int = 1, algorithm: str = "grpo", use_ref: bool = True,
                 prompts: int | None = None, micro_batch_tokens: int | None = 16384,
                 max_prompt_len: int | None = None, max_response_len: int | None = None,
                 mem_fraction: float = 0.5, gradient_checkpointing: bool = True) -> RunConfig:
    model = model if isinstance(model, ModelSpec) else get_model(str(model))
    gpu = gpu if isinstance(gpu, GPU) else get_gpu(str(gpu))
    if isinstance(gpus, bool) or not isinstance(gpus, (int, np.integer)) or gpus < 1:
        raise PolytraceError(f"--gpus must be a positive integer, got {gpus!r}")
    if micro_batch_tokens is not None and micro_batch_tokens < 1:
        raise PolytraceError(f"--micro-batch-tokens must be positive, got {micro_batch_tokens}")
    pc = profile.config
    tp = rollout_tp or default_rollout_tp(model, gpu, int(gpus), mem_fraction)
    return RunConfig(
        model=model, gpu=gpu, n_gpus=int(gpus), prompts_per_step=int(prompts or pc.prompts_per_step), n=int(pc.n),
        max_prompt_len=int(max_prompt_len or pc.max_prompt_len),
        max_response_len=int(max_response_len or pc.max_response_len), rollout_tp=int(tp),
        strategy=strategy, train_tp=int(train_tp), train_pp=int(train_pp), algorithm=algorithm,
        use_ref=bool(use_ref), micro_batch_tokens=micro_batch_tokens, remove_padding=True,
        mem_fraction=float(mem_fraction), gradient_checkpointing=gradient_checkpointing,
        max_num_seqs=1024, eager=False)


def _apply_calibration(costs, calibration: dict | None) -> dict:
    if not calibration:
        return dict(costs.seconds)
    out = {}
    for s, parts in costs.components.items():
        if not parts or costs.seconds[s] <= 0:
            out[s] = 0.0
            continue
        work = sum(calibration.get(f"{g}_slowdown", 1.0) * v for g, v in parts.items())
        out[s] = work + calibration.get(f"{s}_overhead_s", 0.0)
    return out


def estimate_step(cfg: RunConfig, batch, *, measured: MeasuredRates | None = None,
                  calibration: dict | None = None) -> dict:
    """One step's estimate for a sampled or recorded ``Batch``."""
    p = np.asarray(batch.prompt_lens, dtype=np.int64)
    r = np.minimum(np.asarray(batch.response_lens, dtype=np.int64), cfg.max_response_len)
    decode = r
    extra_rollout = 0.0
    notes = []
    if batch.turns is not None and len(batch.turns):
        # Generated tokens decode; tool output is prefilled. Tool calls of a trajectory run one
        # after another, so the slowest trajectory's tool time adds to the rollout.
        if batch.loss_lens is not None:
            decode = np.minimum(np.asarray(batch.loss_lens, dtype=np.int64), r)
        tool = np.bincount(batch.turns.seq, weights=batch.turns.tool_latency_s, minlength=len(r))
        extra_rollout = float(tool.max()) if len(tool) else 0.0
        notes.append("multi-turn: slowest trajectory's tool latency added to the rollout")
    costs = stage_costs(cfg, p, np.maximum(decode, 1), eff=DEFAULT, measured=measured)
    if batch.turns is not None:
        # training sees the whole trajectory (tool output included)
        costs_train = stage_costs(cfg, p, np.maximum(r, 1), eff=DEFAULT, measured=measured)
        for s in STAGES:
            if s != "gen":
                costs.seconds[s] = costs_train.seconds[s]
                costs.components[s] = costs_train.components[s]
        costs.seconds["gen"] += extra_rollout
        # tool time is not GPU or host work of ours: no calibrated slowdown applies to it
        costs.components["gen"]["tool"] = costs.components["gen"].get("tool", 0.0) + extra_rollout
    seconds = _apply_calibration(costs, calibration)
    step_s = float(sum(seconds.values())) + costs.other_s + (calibration or {}).get("other_overhead_s", 0.0)
    tokens = int((p + r).sum())
    gpu_s = step_s * cfg.n_gpus
    roll = costs.rollout
    scale_gen = seconds["gen"] / costs.seconds["gen"] if costs.seconds["gen"] > 0 else 1.0
    tail = roll.tail_gpu_s * scale_gen
    r_imb = roll.imbalance_gpu_s * scale_gen
    t_imb = costs.train_imbalance_gpu_s
    return {
        "step": int(batch.step), "stages_s": seconds, "other_s": costs.other_s, "step_s": step_s, "tokens": tokens,
        "response_tokens": int(r.sum()), "sequences": int(len(r)),
        "tokens_per_s_per_gpu": tokens / step_s / cfg.n_gpus if step_s > 0 else 0.0,
        "rollout_iterations": roll.iterations, "max_response_len": int(r.max(initial=0)),
        "idle": {"rollout_tail_gpu_s": tail, "rollout_imbalance_gpu_s": r_imb, "train_imbalance_gpu_s": t_imb,
                 "rollout_tail_share": tail / gpu_s if gpu_s else 0.0,
                 "rank_imbalance_share": (r_imb + t_imb) / gpu_s if gpu_s else 0.0},
        "notes": notes,
    }


def estimate(profile, model, gpu, gpus: int, *, steps=(0,), seed: int = 0, calibration: dict | None = None,
             results_root: str = "results", **config_kw) -> dict:
    """Per-step stage estimates and their summary. ``profile`` is a name, path or ``Profile``."""
    from ..profiles import get_profile

    prof = get_profile(profile)
    cfg = build_config(prof, model, gpu, gpus, **config_kw)
    measured = MeasuredRates.load(cfg.gpu.slug, results_root)
    steps = list(steps)
    if not steps:
        raise PolytraceError("steps must not be empty")
    rows = []
    for st in steps:
        batch = prof.sample(step=int(st), seed=seed, prompts=cfg.prompts_per_step)
        rows.append(estimate_step(cfg, batch, measured=measured or None, calibration=calibration))
    mean_stages = {s: float(np.mean([r["stages_s"][s] for r in rows])) for s in STAGES}
    step_mean = float(np.mean([r["step_s"] for r in rows]))
    summary = {
        "steps": len(rows), "mean_step_s": step_mean, "mean_stages_s": mean_stages,
        "stage_share": {s: v / step_mean if step_mean else 0.0 for s, v in mean_stages.items()},
        "tokens_per_s_per_gpu": float(np.mean([r["tokens_per_s_per_gpu"] for r in rows])),
        "rollout_tail_share": float(np.mean([r["idle"]["rollout_tail_share"] for r in rows])),
        "rank_imbalance_share": float(np.mean([r["idle"]["rank_imbalance_share"] for r in rows])),
    }
    source = ("estimated: roofline at assumed efficiencies (polytrace/compose/efficiency.py)"
              + (f", measured kernel rates from {', '.join(measured.files)}" if measured else "")
              + (", calibrated scalars applied" if calibration else ""))
    return {"profile": prof.name, "config": cfg.to_dict(), "model": cfg.model.to_dict(),
            "gpu": {"slug": cfg.gpu.slug, "name": cfg.gpu.name, "source": cfg.gpu.source},
            "seed": seed, "source": source, "rows": rows, "summary": summary}
