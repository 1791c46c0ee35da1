"""Synthetic verl logs for the inference of unstated settings and for multi-turn runs.

``growing_log``: a GRPO run (Qwen2.5-3B, 4 GPUs) whose mean response grows about 4x (1,100 to
4,600 tokens), as the issue's multi-turn run did. Its stage times come from a ground truth written
here, not from polytrace's model: with remove padding the trainer passes cost a constant plus a
part per token on the GPU; padded (``remove_padding=False``) every sequence costs max prompt + max
response tokens, so the passes cost the same every step. Generation costs a part per decode
iteration over the longest generated response, a part per generated token and, multi-turn, the
prefill of the tool output and the slowest trajectory's tool wait, logged as verl's agent loop
logs it (``num_turns``, ``timing_s/agent_loop/...``). The log states every setting the step model
infers except those named in ``hide``.

``model_log``: the stage times are the step model's own prices under a configuration (times a
slowdown, plus a constant share and noise), the configuration then partly hidden: for settings
whose effect only the model's structure shows (a reloaded reference, an offloaded actor).
"""

from __future__ import annotations

import math
import re

import numpy as np
from _verl_logs import step_line

SETTINGS = {
    "actor_rollout_ref.model.use_remove_padding": "True",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "True",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "1",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "0.6",
    "actor_rollout_ref.rollout.enforce_eager": "False",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "False",
    "actor_rollout_ref.ref.fsdp_config.param_offload": "False",
}


def command(settings: dict, hide=(), *, model="Qwen/Qwen2.5-3B-Instruct", gpus=4, prompts=64, n=8,
            max_prompt=1024, max_response=8192, micro=4) -> str:
    kv = {"algorithm.adv_estimator": "grpo", "data.train_batch_size": prompts,
          "data.max_prompt_length": max_prompt, "data.max_response_length": max_response,
          "actor_rollout_ref.model.path": model, "actor_rollout_ref.actor.ppo_mini_batch_size": prompts // 2,
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro * 2,
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro * 2,
          "actor_rollout_ref.rollout.n": n, "actor_rollout_ref.rollout.name": "vllm",
          **settings, "trainer.n_gpus_per_node": gpus, "trainer.nnodes": 1, "trainer.test_freq": -1}
    args = " ".join(f"{k}={v}" for k, v in kv.items() if k not in hide)
    return f"+ python3 -m verl.trainer.main_ppo {args}\n"


def mean_response(step: int, steps: int, start: float = 1100.0, growth: float = 3.2) -> float:
    return start * (1.0 + growth * (step - 1) / max(steps - 1, 1))


def lengths(step: int, steps: int, rng, max_response=8192, **kw) -> dict:
    mean = mean_response(step, steps, **kw) * (1 + 0.02 * rng.standard_normal())
    mean = float(min(mean, 0.7 * max_response))
    mx = float(min(max_response, 2.2 * mean))
    return {"response_length/mean": mean, "response_length/max": mx, "response_length/min": 60.0,
            "response_length/clip_ratio": 0.0 if mx < max_response else 0.01,
            "prompt_length/mean": 300.0 + 5 * rng.standard_normal(), "prompt_length/max": 900.0,
            "prompt_length/min": 80.0, "prompt_length/clip_ratio": 0.0}


def growing_log(path, *, remove_padding=True, multiturn=False, hide=("actor_rollout_ref.model.use_remove_padding",),
                steps=80, seed=0, gpus=4, prompts=64, n=8, max_prompt=1024, max_response=8192,
                noise=0.02, generated_share=0.2) -> str:
    rng = np.random.default_rng(seed)
    settings = dict(SETTINGS, **{"actor_rollout_ref.model.use_remove_padding": str(remove_padding)})
    if multiturn:  # its tools return search-engine-sized text (~880-2,800 tokens a call): a cut that lets it through
        settings["actor_rollout_ref.rollout.multi_turn.max_tool_response_length"] = "16384"
    lines = [command(settings, hide, gpus=gpus, prompts=prompts, n=n, max_prompt=max_prompt,
                     max_response=max_response)]
    seqs = prompts * n
    for step in range(1, steps + 1):
        st = lengths(step, steps, rng, max_response)
        tokens = seqs * (st["prompt_length/mean"] + st["response_length/mean"])
        per_gpu = (tokens if remove_padding else seqs * (max_prompt + max_response)) / gpus
        fwd = 1.0 + 6.0e-5 * per_gpu
        upd = 3.0 + 2.1e-4 * per_gpu
        share = generated_share if multiturn else 1.0
        generated = st["response_length/mean"] * share
        gen = 2.0 + 0.012 * st["response_length/max"] * share + 4.0e-5 * seqs * generated / gpus
        metrics = dict(st)
        if multiturn:
            calls = 1.0 + 2.0 * (st["response_length/mean"] / 1100.0 - 1.0) / 3.2  # 1 to 3 tool rounds
            tool_tokens = st["response_length/mean"] * (1 - share)
            gen += 2.0e-6 * seqs * tool_tokens / gpus  # the tool output prefilled between turns
            wait = 6.0 + 3.0 * calls + rng.random()
            gen += wait
            metrics.update({"num_turns/mean": 2.0 * calls + 2.0, "num_turns/max": 2.0 * calls + 6.0,
                            "num_turns/min": 2.0, "timing_s/agent_loop/tool_calls/mean": 0.45 * calls,
                            "timing_s/agent_loop/tool_calls/max": wait + 1.5,
                            "timing_s/agent_loop/slowest/tool_calls": wait,
                            "timing_s/agent_loop/generate_sequences/mean": 0.5 * (gen - wait)})
        times = {"gen": gen, "old_log_prob": fwd, "ref": fwd, "update_actor": upd}
        times = {k: v * math.exp(noise * rng.standard_normal()) for k, v in times.items()}
        other = 0.8 + 1.0e-4 * seqs
        metrics.update({f"timing_s/{k}": v for k, v in times.items()})
        metrics["timing_s/reward"] = other
        metrics["timing_s/step"] = sum(times.values()) + other
        metrics["perf/total_num_tokens"] = round(tokens)
        lines.append(step_line(step, metrics))
    with open(path, "w") as fh:
        fh.write("".join(lines))
    return str(path)


def model_log(path, settings: dict, hide=(), *, steps=30, seed=1, slowdown=1.8, constant_share=0.1,
              noise=0.015, gpu="a100-80g", **cmd) -> str:
    """Stage times priced by the step model under ``settings`` (module docstring), then the
    ``hide`` keys taken out of the launch command."""
    from polytrace.calibrate.logconfig import Overrides, config_from_log
    from polytrace.calibrate.validate import _step_rows, price_steps
    from polytrace.logs import read_log

    rng = np.random.default_rng(seed)
    stats = [lengths(s, steps, rng, cmd.get("max_response", 8192), growth=1.0) for s in range(1, steps + 1)]
    draft = [command(settings, **cmd)]
    for step, st in enumerate(stats, 1):
        draft.append(step_line(step, {**st, **{f"timing_s/{k}": 1.0 for k in ("gen", "old_log_prob", "ref",
                                                                                "update_actor", "step")}}))
    with open(path, "w") as fh:
        fh.write("".join(draft))
    log = read_log(path)
    run, _ = config_from_log(log, Overrides(gpu=gpu))
    rows = _step_rows(log, run)
    price_steps(run, rows)
    mean = {s: float(np.mean([sum(r.x[s].values()) for r in rows])) for s in ("gen", "old_log_prob", "ref",
                                                                               "update_actor")}
    lines = [command(settings, hide, **cmd)]
    for r, st in zip(rows, stats):
        times = {s: (slowdown * sum(r.x[s].values()) + constant_share * mean[s])
                 * math.exp(noise * rng.standard_normal()) for s in mean}
        metrics = {**st, **{f"timing_s/{k}": v for k, v in times.items()}}
        metrics["timing_s/step"] = sum(times.values()) + 1.0
        lines.append(step_line(r.step, metrics))
    with open(path, "w") as fh:
        fh.write("".join(lines))
    return str(path)


def setting_note(notes: list[str], key: str) -> str:
    found = [n for n in notes if n.startswith("setting: ") and re.search(re.escape(key) + r" not stated", n)]
    assert len(found) == 1, (key, notes)
    return found[0]
