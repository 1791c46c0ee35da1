"""What a multi-turn (agent loop, tool-calling) verl run logs per step, read into one record.

verl's agent loop (``verl/experimental/agent_loop``) times every trajectory and the trainer logs
the spread over the batch beside the stage timers: ``timing_s/agent_loop/generate_sequences/
{min,mean,max}`` (a trajectory's seconds in the engine), ``timing_s/agent_loop/tool_calls/
{min,mean,max}`` (its seconds waiting on tools) and ``timing_s/agent_loop/slowest/{generate_sequences,
tool_calls}`` (the trajectory that finished last, the one the step waits for). The data metrics
add ``num_turns/{min,mean,max}``: user turns + assistant turns + 1 per trajectory
(``ToolAgentLoop``), so a trajectory that ends on an answer after k tool rounds has 2k + 2 and
k + 1 generation requests: generation requests = num_turns / 2. Some versions also log
``tool_call_counts/{min,mean,max}``. Older logs write ``timing/`` for ``timing_s/``; a wandb export
may keep the bare names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_PREFIXES = ("timing_s/", "timing/", "")


def _get(metrics: dict, name: str):
    for p in _PREFIXES:
        v = metrics.get(p + name)
        if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
            return float(v)
    return None


@dataclass
class AgentStep:
    """One step's multi-turn figures (None: not logged)."""

    requests: float | None  # generation requests per trajectory (assistant turns), mean
    tool_calls: float | None  # tool calls per trajectory, mean
    tool_wait_s: float | None  # tool seconds the step waits for (the slowest trajectory's)
    tool_wait_source: str  # the metric it came from
    tool_mean_s: float | None  # a trajectory's tool seconds, mean over the batch
    # the slowest trajectory's response tokens (``agent_loop/slowest/response_length``)
    slowest_response: float | None = None

    @property
    def multiturn(self) -> bool:
        return (self.requests is not None and self.requests > 1.0) or bool(self.tool_wait_s) or bool(self.tool_calls)


def agent_step(metrics: dict) -> AgentStep | None:
    """The step's agent-loop figures, or None when the step logs none of them."""
    turns = metrics.get("num_turns/mean")
    turns = float(turns) if isinstance(turns, (int, float)) and math.isfinite(turns) and turns >= 1 else None
    calls = _get(metrics, "tool_call_counts/mean")
    wait, source = None, ""
    for name in ("agent_loop/slowest/tool_calls", "agent_loop/tool_calls/max"):
        wait = _get(metrics, name)
        if wait is not None:
            source = name
            break
    mean = _get(metrics, "agent_loop/tool_calls/mean")
    if turns is None and calls is None and wait is None and mean is None:
        return None
    requests = max(1.0, turns / 2.0) if turns is not None else None
    if calls is None and requests is not None:
        calls = requests - 1.0
    return AgentStep(requests, calls, wait, source, mean, _get(metrics, "agent_loop/slowest/response_length"))
