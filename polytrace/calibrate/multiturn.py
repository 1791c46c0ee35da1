"""Multi-turn (agent loop) steps of a log, priced: generation decodes only what the model wrote,
prefills the tool output between turns and waits for the slowest trajectory's tools.

A step whose metrics hold verl's agent-loop figures (``polytrace.logs.agent``) gets its ``gen``
re-priced by ``compose.rollout.multiturn_rollout``: the engine work stays the ``rollout`` kind of
work the calibration scales, the tool wait is a ``tool`` part taken as logged (no slowdown
applies: it is the tools' time, not ours). The share of response tokens the model generated is
not in verl's metrics: measured on the validation trajectories the run's wandb folder keeps where
it has them (``logs.generations``, ``RunConfig.generated_share``), else ``GENERATED_SHARE_PRIOR``
(the Search-R1 trace) stands in; a note says which.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..logs.agent import agent_step
from ..stepmodel.rollout import GENERATED_SHARE_PRIOR, generated_share_floor, multiturn_rollout, tool_tokens_max


def slowest_generated(step) -> int:
    """Response tokens the step's slowest trajectory generated itself, where the log says: verl logs
    the trajectory the step waited for last (``agent_loop/slowest/*``); with no tool seconds it made
    no tool call (a sandbox call takes wall time), so nothing in its response is tool output. 0: not
    known."""
    if (step.slowest_response and step.tool_wait_source == "agent_loop/slowest/tool_calls"
            and step.tool_wait_s == 0.0):
        return int(step.slowest_response)
    return 0


def price_multiturn(run, row, prompt_lens, response_lens) -> bool:
    """Re-price ``row``'s generation when its step is multi-turn; whether it was."""
    step = agent_step(row.stats)
    if step is None or not step.multiturn:
        return False
    share = GENERATED_SHARE_PRIOR if run.generated_share is None else run.generated_share
    if run.generated_share is None and step.tool_calls is not None:
        # the prior, but never below what the logged tool calls leave (a Search-R1 share of 16% on
        # a code sandbox's 2.4 calls of <= 293 tokens in 1,083-token responses would need 5.6x the
        # tool output verl lets through)
        share = max(share, generated_share_floor(step.tool_calls, float(np.mean(response_lens)),
                                                 run.max_tool_response_chars))
    # without vLLM's expert parallelism, as this re-pricing always has (rollout_ep 1): kept so the
    # signature change (issue 35) moves no number
    engine = dataclasses.replace(run.rollout_settings, rollout_ep=1)
    roll, prefill = multiturn_rollout(run.engine_model, run.gpu, prompt_lens, response_lens,
                                      generated_share=share, n_gpus=run.n_gpus, engine=engine,
                                      slowest_generated=slowest_generated(step))
    gen = dict(row.x.get("gen", {}))
    before = gen.get("rollout", 0.0)
    gen["rollout"] = roll.time_s + prefill
    gen["tool"] = float(step.tool_wait_s or 0.0)
    row.x["gen"] = gen
    # the per-family split and the roofline bound follow the re-priced rollout at the same
    # efficiency (the same kind of work, fewer decoded tokens plus the tool output's prefill); the
    # tool wait is a family of its own that no slowdown scales
    scale = gen["rollout"] / before if before > 0 else 1.0
    fams = getattr(row, "families", None)
    if fams is not None and fams.get("gen"):
        fams["gen"] = {k: (v * scale if k[0] == "rollout" else v) for k, v in fams["gen"].items()}
        fams["gen"][("tool", "tool")] = gen["tool"]
    bound = getattr(row, "bound", None)
    if bound is not None and "rollout" in bound.get("gen", {}):
        bound["gen"] = {**bound["gen"], "rollout": bound["gen"]["rollout"] * scale}
    return True


def multiturn_notes(rows, measured=None) -> list[str]:
    """What the multi-turn pricing assumed, once per log (``measured``: the log's
    ``GeneratedShare``, which ``RunConfig.generated_share`` carries into the pricing)."""
    steps = [agent_step(r.stats) for r in rows]
    multi = [s for s in steps if s is not None and s.multiturn]
    if not multi:
        return []
    waits = {s.tool_wait_source for s in multi if s.tool_wait_s is not None}
    wait = (f"the tool wait of the slowest trajectory from {', '.join(sorted(waits))}" if waits
            else "no tool seconds logged (timing_s/agent_loop/tool_calls/*): tool waits priced as 0")
    if measured is not None:
        share = (f"{100 * measured.share:.1f}% of each response (the generated share measured on "
                 f"{measured.trajectories} validation trajectories with {measured.tool_turns} tool turns in "
                 f"{measured.source}")
    else:
        share = (f"{100 * GENERATED_SHARE_PRIOR:.1f}% of each response (the Search-R1 trace's generated share, "
                 f"raised where the logged tool calls per trajectory, at most {tool_tokens_max()} tokens each "
                 "at verl's default cut of a tool's text, leave more")
    return [f"multi-turn: {len(multi)} step(s) with agent-loop metrics; generation decodes {share}; the rest is tool "
            f"output, prefilled between turns) and adds {wait}"]
