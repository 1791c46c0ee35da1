"""The inference engine a log ran (``Rollout.engine``: vLLM's V1 engine or its V0 loop): what the log
states, else what verl of its era ran. The evidence is gathered with the device names
(``logs.devices``: the log's lines and its companion files); what it means is decided here.

In order, the first that applies:

1. a stated vLLM version from 0.11, which has no V0 (vLLM removed it in 0.11): V1;
2. the engine named by the log: a V1 class (``vllm.v1.worker.gpu_worker.Worker`` in a worker's
   warning), ``VLLM_USE_V1``, or vLLM's own fallback ("XFORMERS is not supported by the V1 Engine.
   Falling back to V0", and the XFORMERS backend a script exports, which vLLM 0.8 runs only on V0);
   a V1 class wins over a V0 hint (it proves the engine that ran);
3. a stated vLLM version before 0.11: V1 from 0.8 (vLLM 0.8.0 made V1 the default), V0 before;
4. verl's agent-loop timers (``timing_s/agent_loop/*``): verl serves its agent loop through
   vLLM's ``AsyncLLM``, a V1 engine (volcengine/verl ``verl/workers/rollout/vllm_rollout/
   vllm_async_server.py``: ``from vllm.v1.engine.async_llm import AsyncLLM``);
5. nothing stated: V0 (``LOG_DEFAULT``), the loop of the vLLM (<= 0.7) verl pinned before vLLM 0.8.

The corpus reads: V1 on its five 7B verl logs (the worker class) and on the agent-loop runs, V0 on
the ladder and the 0.5B logs (XFORMERS), V0 by default on the three that state nothing. The engine
changes no price in step (``stepmodel/engines.py``); asynchronous scheduling does, and a log states
it with verl's ``engine_kwargs.vllm.async_scheduling``. A rollout backend other than vLLM (verl's
``actor_rollout_ref.rollout.name``: SGLang, HuggingFace generate) is priced as vLLM's engine with a
note saying so: the model has no prices of its own for them (every corpus log ran vLLM).
"""

from __future__ import annotations

import re

from ..logs import TrainingLog

V1_DEFAULT_FROM = (0, 8)  # vLLM 0.8.0: V1 the default engine where it supports the configuration
V0_REMOVED_IN = (0, 11)  # vLLM 0.11: V1 the only engine
AGENT_LOOP_TIMERS = "timing_s/agent_loop/"
LOG_DEFAULT = "vllm-v0"


def vllm_version(text: str) -> tuple[int, int] | None:
    """``"0.8.3"`` -> ``(0, 8)``; None for what is not a version."""
    m = re.fullmatch(r"(\d{1,2})\.(\d{1,2})(?:\.\d{1,2})?", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _agent_loop(log: TrainingLog) -> bool:
    return any(k.startswith(AGENT_LOOP_TIMERS) for s in log.steps[:1] for k in (*s.metrics, *s.timings))


def read_engine(log: TrainingLog, async_scheduling: bool, notes: list[str]) -> str:
    """The engine ``log`` ran (module docstring's order); a note where its asynchronous scheduling
    overrules a V0 reading (only V1 schedules asynchronously)."""
    version = next((v for e in log.devices if e.kind == "vllm" for v in [vllm_version(e.value)] if v), None)
    named = {e.value for e in log.devices if e.kind == "engine"}
    if version is not None and version >= V0_REMOVED_IN:
        engine = "vllm-v1"
    elif named:
        engine = "vllm-v1" if "vllm-v1" in named else "vllm-v0"
    elif version is not None:
        engine = "vllm-v1" if version >= V1_DEFAULT_FROM else "vllm-v0"
    elif _agent_loop(log):
        engine = "vllm-v1"
    else:
        engine = LOG_DEFAULT
    if async_scheduling and engine != "vllm-v1":
        notes.append(f"engine_kwargs.vllm.async_scheduling is on: priced on vLLM's V1 engine (V0 has no "
                     f"asynchronous scheduler), not the {engine} the log otherwise reads as")
        engine = "vllm-v1"
    _other_rollout(log, engine, notes)
    return engine


# verl's rollout backends (``actor_rollout_ref.rollout.name``, default "vllm"; verl 0.4 also spelled
# the agent-loop ones "vllm_async" / "sglang_async") -> what they are. Only vLLM is priced: its
# engines' loops and launches are what ``stepmodel/engines.py`` prices.
ROLLOUT_NAME_KEY = "actor_rollout_ref.rollout.name"
OTHER_ROLLOUTS = {
    "sglang": "SGLang (its own scheduler, which overlaps its host work with the GPU's by default from 0.4, and "
              "CUDA graphs)",
    "hf": "HuggingFace generate (padded batches, no continuous batching: far slower than vLLM)",
}


def _other_rollout(log: TrainingLog, engine: str, notes: list[str]) -> None:
    """A note when the log's rollout is not vLLM: it is priced as vLLM's ``engine`` all the same
    (a rollout backend can change generation's cost 2x or more, so this is never left unsaid)."""
    name = log.config.get(ROLLOUT_NAME_KEY)
    if not isinstance(name, str) or not name.strip() or name.strip().lower().startswith("vllm"):
        return
    text = name.strip().lower()
    what = next((v for k, v in OTHER_ROLLOUTS.items() if text.startswith(k)), None)
    shown = name.strip()[:40]
    notes.append(f"rollout {ROLLOUT_NAME_KEY}={shown!r}: " + (what if what else "not a rollout backend this model "
                 "knows") + f"; priced as vLLM's {engine} engine, which this model has prices for: generation may be "
                 "far off")
