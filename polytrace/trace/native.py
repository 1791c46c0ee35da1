"""polytrace's native trace format: JSON lines, lossless for the whole data model.

Line 1 is a header; every further line is one prompt group::

    {"format": "polytrace.trace", "version": 1, "kind": "single", "name": "dapo",
     "max_response_len": 32768, "max_prompt_len": 2048}
    {"step": 0, "prompt_len": 112, "responses": [450, 453, 32768], "capped": [2]}

``responses`` lists response lengths; ``capped`` lists the indices (within the group) of the
responses that stopped at the cap. Multi-turn traces store each response as an object::

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

from ..errors import TraceFormatError
from .model import PromptGroup, Response, Step, ToolCall, Trace, Turn

FORMAT = "polytrace.trace"
VERSION = 1


def dumps(trace: Trace) -> str:
    header = {"format": FORMAT, "version": VERSION, "kind": trace.kind, "name": trace.name,
              "max_response_len": int(trace.max_response_len), "max_prompt_len": trace.max_prompt_len}
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
    from ..atomic_write import atomic_write_text

    atomic_write_text(path, dumps(trace))


def read(path: Path, text: str) -> Trace:
    lines = text.splitlines()
    try:
        header = json.loads(lines[0])
    except (ValueError, IndexError):
        raise TraceFormatError(path, "invalid native header", line=1) from None
    if not isinstance(header, dict) or not isinstance(header.get("max_response_len"), int):
        raise TraceFormatError(path, "invalid native header: needs an integer 'max_response_len'", line=1)
    if header.get("version") != VERSION:
        raise TraceFormatError(path, f"unsupported native format version {header.get('version')!r}", line=1)
    kind = header.get("kind", "single")
    steps: dict[int, Step] = {}
    order: list[int] = []
    for lineno, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            step = int(rec["step"])
            prompt = int(rec["prompt_len"])
            if kind == "single":
                capped = set(rec.get("capped", []))
                responses = [Response(int(v), i in capped) for i, v in enumerate(rec["responses"])]
            else:
                responses = [_response_from(o) for o in rec["responses"]]
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise TraceFormatError(path, f"malformed record: {exc!r}", line=lineno) from None
        if prompt <= 0 or not responses or any(r.length <= 0 for r in responses):
            raise TraceFormatError(path, "lengths must be positive and groups non-empty", line=lineno)
        if step not in steps:
            steps[step] = Step(step, [])
            order.append(step)
        steps[step].groups.append(PromptGroup(prompt, responses))
    return Trace(steps=[steps[s] for s in order], max_response_len=int(header["max_response_len"]),
                 kind=kind, name=header.get("name", ""), source=str(path),
                 max_prompt_len=header.get("max_prompt_len"))


def _response_from(o: dict) -> Response:
    turns = None
    if "turns" in o:
        turns = [Turn(prompt_tokens=int(t["prompt"]), cached_tokens=int(t["cached"]),
                      completion_tokens=int(t["completion"]), loss_tokens=int(t["loss"]),
                      engine_latency_s=t.get("engine_s"),
                      tool_calls=[ToolCall(float(a), int(b)) for a, b in t.get("tools", [])])
                 for t in o["turns"]]
    return Response(int(o["len"]), bool(o["capped"]), o.get("loss"), turns)
