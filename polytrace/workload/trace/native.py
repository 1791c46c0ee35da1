"""polytrace's native trace format: JSON lines, lossless for the whole data model.

Line 1 is a header; every further line is one prompt group::

    {"format": "polytrace.workload.trace", "version": 1, "kind": "single", "name": "dapo",
     "max_response_len": 32768, "max_prompt_len": 2048}
    {"step": 0, "prompt_len": 112, "responses": [450, 453, 32768], "capped": [2]}

``responses`` lists response lengths (none above the header's cap); ``capped`` lists the indices
(within the group) of the responses that stopped at the cap. The header's optional ``cap_source``
says where the cap came from (``polytrace.workload.trace.model.CAP_SOURCES``; default ``recorded``).
Multi-turn traces store each response as an object::

    {"step": 0, "prompt_len": 317, "responses": [
        {"len": 1216, "capped": false, "loss": 171,
         "turns": [{"prompt": 317, "cached": 0, "completion": 40, "loss": 40, "engine_s": 93.68,
                    "tools": [[0.074, 1041]]}, ...]}]}

where ``tools`` lists ``[latency_s, appended_tokens]`` per tool call made after the turn.
Groups appear in step order, then in their order within the step.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import TraceFormatError
from .fields import Where, array, count, loads, obj, require_keys, seconds, step_number
from .fields import text as text_field
from .model import CAP_SOURCES, PromptGroup, Response, Step, ToolCall, Trace, Turn

FORMAT = "polytrace.workload.trace"
VERSION = 1


def dumps(trace: Trace) -> str:
    header = {"format": FORMAT, "version": VERSION, "kind": trace.kind, "name": trace.name,
              "max_response_len": int(trace.max_response_len), "max_prompt_len": trace.max_prompt_len,
              "cap_source": trace.cap_source}
    lines = [json.dumps(header)]
    for step in trace.steps:
        for g in step.groups:
            rec = {"step": step.step, "prompt_len": g.prompt_len}
            if trace.kind == "single":
                rec["responses"] = [r.length for r in g.responses]
                rec["capped"] = [i for i, r in enumerate(g.responses) if r.capped]
            else:
                rec["responses"] = [_response_obj(r) for r in g.responses]
            lines.append(json.dumps(rec))
    return "\n".join(lines) + "\n"


def _response_obj(r: Response) -> dict:
    obj = {"len": r.length, "capped": r.capped, "loss": r.loss_tokens}
    if r.turns is not None:
        obj["turns"] = [
            {"prompt": t.prompt_tokens, "cached": t.cached_tokens, "completion": t.completion_tokens,
             "loss": t.loss_tokens, "engine_s": t.engine_latency_s,
             "tools": [[c.latency_s, c.tokens] for c in t.tool_calls]}
            for t in r.turns
        ]
    return obj


def save_trace(trace: Trace, path) -> None:
    """Write ``trace`` in the native format, atomically (a failure leaves no partial file)."""
    from ...atomic_write import atomic_write_text

    atomic_write_text(path, dumps(trace))


def read(path: Path, text: str) -> Trace:
    lines = text.split("\n")
    w = Where(path, 1, prefix="invalid native header: ")
    header = obj(w, loads(w, lines[0]), "the header")
    if header.get("format") != FORMAT:
        raise w.error(f"'format' must be {FORMAT!r}")
    version = header.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise TraceFormatError(path, f"unsupported native format version {str(version)[:40]!r} (this reader knows "
                                     f"{VERSION})", line=1)
    kind = header.get("kind", "single")
    if kind not in ("single", "multiturn"):
        raise w.error(f"'kind' must be 'single' or 'multiturn', got {str(kind)[:40]!r}")
    if "max_response_len" not in header:
        raise w.error("needs an integer 'max_response_len'")
    cap = count(w, header["max_response_len"], "'max_response_len'")
    max_prompt = header.get("max_prompt_len")
    if max_prompt is not None:
        max_prompt = count(w, max_prompt, "'max_prompt_len'")
    name = text_field(w, header.get("name", ""), "'name'", optional=False)
    cap_source = header.get("cap_source", "recorded")
    if cap_source not in CAP_SOURCES:
        raise w.error(f"'cap_source' must be one of {', '.join(CAP_SOURCES)}")
    steps: dict[int, Step] = {}
    order: list[int] = []
    for lineno, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        w = Where(path, lineno, prefix="malformed record: ")
        rec = obj(w, loads(w, raw), "a prompt group")
        require_keys(w, rec, ("step", "prompt_len", "responses"))
        step = step_number(w, rec["step"])
        prompt = count(w, rec["prompt_len"], "'prompt_len'")
        if max_prompt is not None and prompt > max_prompt:
            raise w.error(f"'prompt_len' of {prompt} is above the header's max_prompt_len ({max_prompt})")
        raw_responses = array(w, rec["responses"], "'responses'", non_empty=True)
        if kind == "single":
            responses = [Response(_length(w, v, cap, f"response {i}"), False) for i, v in enumerate(raw_responses)]
            for i in _capped_indices(w, rec.get("capped", []), len(responses)):
                responses[i].capped = True
        else:
            responses = [_response_from(w, o, cap, i) for i, o in enumerate(raw_responses)]
        if step not in steps:
            steps[step] = Step(step, [])
            order.append(step)
        steps[step].groups.append(PromptGroup(prompt, responses))
    return Trace(steps=[steps[s] for s in order], max_response_len=cap, kind=kind, name=name, source=str(path),
                 max_prompt_len=max_prompt, cap_source=cap_source)


def _length(w: Where, value, cap: int, what: str) -> int:
    v = count(w, value, f"{what} length")
    if v > cap:
        raise w.error(f"{what}: length {v} is above the header's max_response_len ({cap})")
    return v


def _capped_indices(w: Where, value, n: int) -> list[int]:
    indices = [count(w, i, "a 'capped' index", minimum=0) for i in array(w, value, "'capped'")]
    for i in indices:
        if i >= n:
            raise w.error(f"'capped' index {i} is outside its group of {n} responses")
    if len(set(indices)) != len(indices):
        raise w.error("'capped' lists an index twice")
    return indices


def _response_from(w: Where, o, cap: int, i: int) -> Response:
    o = obj(w, o, f"response {i}")
    require_keys(w, o, ("len", "capped", "turns"), f"response {i}")
    length = _length(w, o["len"], cap, f"response {i}")
    capped = o["capped"]
    if not isinstance(capped, bool):
        raise w.error(f"response {i}: 'capped' must be true or false, got {str(capped)[:40]!r}")
    loss = o.get("loss")
    if loss is not None:
        loss = count(w, loss, f"response {i} 'loss'", minimum=0)
        if loss > length:
            raise w.error(f"response {i}: 'loss' ({loss}) exceeds its length ({length})")
    # 'turns' is required: every multi-turn reader records them, and the turn model is fitted on them
    raw_turns = array(w, o["turns"], f"response {i} 'turns'", non_empty=True)
    turns = [_turn_from(w, t, f"response {i} turn {j}") for j, t in enumerate(raw_turns)]
    return Response(length, capped, loss, turns)


def _turn_from(w: Where, t, what: str) -> Turn:
    t = obj(w, t, what)
    require_keys(w, t, ("prompt", "cached", "completion", "loss"), what)
    prompt = count(w, t["prompt"], f"{what} 'prompt'")
    cached = count(w, t["cached"], f"{what} 'cached'", minimum=0)
    if cached > prompt:
        raise w.error(f"{what}: 'cached' ({cached}) exceeds 'prompt' ({prompt})")
    engine = t.get("engine_s")
    tools = []
    for call in array(w, t.get("tools", []), f"{what} 'tools'"):
        if not isinstance(call, list) or len(call) != 2:
            raise w.error(f"{what}: each tool call must be [latency_s, tokens], got {str(call)[:40]}")
        tools.append(ToolCall(seconds(w, call[0], f"{what} tool latency"),
                              count(w, call[1], f"{what} tool tokens", minimum=0)))
    return Turn(prompt_tokens=prompt, cached_tokens=cached,
                completion_tokens=count(w, t["completion"], f"{what} 'completion'", minimum=0),
                loss_tokens=count(w, t["loss"], f"{what} 'loss'", minimum=0),
                engine_latency_s=None if engine is None else seconds(w, engine, f"{what} 'engine_s'"),
                tool_calls=tools)
