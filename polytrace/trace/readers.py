"""Readers for the trace formats, with format detection.

Accepted (``load_trace`` picks by content, not by file name):

- PolyTrace per-step JSONL (``packed_lengths_step_k.jsonl``): one prompt group per line,
  ``{"step", "input": prompt_len, "output": [n response lengths], "n_sampling", "validate", ...}``.
- PolyTrace multi-turn JSONL (``multiturn_workload_step_k.jsonl``): one trajectory per line with
  ``turns[]``, ``tool_calls[]``, ``final_response_len``, ``final_response_loss_len``,
  ``prompt_group_id``.
- A folder of either (searched recursively; files in natural order, so step 10 follows step 9).
- The paper-era JSON ``{"<step>": {"input": [...], "output": [...]}}`` and its multi-turn form
  ``{"<step>": [{"input": [per-turn prompt], "output": [per-turn completion]}, ...]}``.
- polytrace's native JSONL (``polytrace.trace.native``).

Validation rollouts (``"validate": true``) are not training steps and are skipped.
Every error names the file and, where it applies, the line.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..errors import TraceFormatError
from . import native
from .model import PromptGroup, Response, Step, ToolCall, Trace, Turn

_STEP_FILE = re.compile(r"(packed_lengths|multiturn_workload)_step_(\d+)\.jsonl$")


def load_trace(path, max_response_len: int | None = None, name: str | None = None) -> Trace:
    """Read a trace file or folder in any supported format.

    ``max_response_len`` states the response-length cap when the source does not; otherwise it
    is taken from the records (multi-turn) or inferred: a maximum length reached by two or more
    responses is taken to be the cap (truncation piles responses up there); with no such pile-up
    the cap is at least the longest response and no response is marked capped.
    """
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(p, "no such file or folder")
    if p.is_dir():
        files = _trace_files(p)
        if not files:
            raise TraceFormatError(p, "folder holds no packed_lengths_step_*.jsonl, "
                                      "multiturn_workload_step_*.jsonl or *.jsonl/*.json trace files")
        parts = [_load_file(f, max_response_len, mark_caps=False) for f in files]
        kinds = {t.kind for t in parts}
        if len(kinds) > 1:
            raise TraceFormatError(p, "folder mixes single-turn and multi-turn traces")
        steps = [s for t in parts for s in t.steps]
        trace = Trace(steps=steps, max_response_len=max(t.max_response_len for t in parts),
                      kind=parts[0].kind, name=name or p.name, source=str(p),
                      max_prompt_len=_max_or_none([t.max_prompt_len for t in parts]))
        if trace.kind == "single" or all(t.source.endswith(".json") for t in parts):
            _mark_caps(trace, max_response_len)
    else:
        trace = _load_file(p, max_response_len)
        if name:
            trace.name = name
    if not trace.steps or trace.n_responses == 0:
        raise TraceFormatError(p, "trace is empty: no training responses found")
    return trace


def _max_or_none(values):
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _natural_key(path: Path):
    m = _STEP_FILE.search(path.name)
    step = int(m.group(2)) if m else -1
    return (str(path.parent), step, path.name)


def _trace_files(folder: Path) -> list[Path]:
    step_files = sorted((f for f in folder.rglob("*.jsonl") if _STEP_FILE.search(f.name)), key=_natural_key)
    if step_files:
        return step_files
    others = sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix in (".jsonl", ".json"))
    return others


def _load_file(path: Path, max_response_len: int | None, mark_caps: bool = True) -> Trace:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"cannot read: {exc}") from None
    stripped = text.lstrip()
    if not stripped:
        raise TraceFormatError(path, "file is empty")
    first_line = stripped.splitlines()[0]
    try:
        first = json.loads(first_line)
    except ValueError:
        first = None
    if isinstance(first, dict):
        if first.get("format") == native.FORMAT:
            return native.read(path, text)
        if "turns" in first:
            return _read_multiturn_jsonl(path, text, max_response_len)
        if "input" in first and "output" in first:
            return _finish(_read_step_jsonl(path, text), max_response_len, mark_caps)
        # A one-line paper-era JSON document also parses here.
        if first and all(re.fullmatch(r"-?\d+", str(k)) for k in first):
            return _finish(_read_paper_json(path, first), max_response_len, mark_caps)
        raise TraceFormatError(path, "unrecognised trace format: first record has none of "
                                     "'input'/'output', 'turns' or a 'format' header", line=1)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise TraceFormatError(path, f"invalid JSON: {exc.msg if hasattr(exc, 'msg') else exc}",
                               line=line) from None
    if isinstance(doc, dict):
        return _finish(_read_paper_json(path, doc), max_response_len, mark_caps)
    raise TraceFormatError(path, "unrecognised trace format: expected JSON lines or a JSON object "
                                 "keyed by step")


# --------------------------------------------------------------------------- validation helpers


def _finish(trace: Trace, max_response_len, mark_caps: bool) -> Trace:
    if mark_caps:
        _mark_caps(trace, max_response_len)
    return trace


def _length(path, line, value, what, allow_zero=False) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value)) or value != int(value)):
        raise TraceFormatError(path, f"{what} must be an integer, got {value!r}", line=line)
    v = int(value)
    if v < 0 or (v == 0 and not allow_zero):
        raise TraceFormatError(path, f"{what} must be {'non-negative' if allow_zero else 'positive'}, "
                                     f"got {v}", line=line)
    return v


def _json_lines(path, text):
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            raise TraceFormatError(path, f"invalid JSON: {getattr(exc, 'msg', exc)}", line=lineno) from None
        if not isinstance(rec, dict):
            raise TraceFormatError(path, "each line must be a JSON object", line=lineno)
        yield lineno, rec


def _infer_cap(lengths: np.ndarray) -> tuple[int, bool]:
    """(cap, pile-up seen). A maximum reached by >= 2 responses is the cap."""
    if lengths.size == 0:
        return 0, False
    top = int(lengths.max())
    return top, int((lengths == top).sum()) >= 2


def _mark_caps(trace: Trace, stated: int | None) -> None:
    """Set the cap and the capped flags of a trace whose source does not record truncation."""
    responses = [r for s in trace.steps for g in s.groups for r in g.responses]
    lens = np.fromiter((r.length for r in responses), dtype=np.int64, count=len(responses))
    cap, piled = _infer_cap(lens)
    if stated is not None:
        if lens.size and cap > stated:
            raise TraceFormatError(trace.source, f"a response of {cap} tokens exceeds the stated "
                                                 f"max_response_len={stated}")
        cap, piled = int(stated), True
    trace.max_response_len = cap
    for r in responses:
        r.capped = piled and r.length >= cap


# --------------------------------------------------------------------------- PolyTrace per-step JSONL


def _read_step_jsonl(path, text) -> Trace:
    by_step: dict[int, list[PromptGroup]] = defaultdict(list)
    for lineno, rec in _json_lines(path, text):
        if rec.get("validate"):
            continue
        for key in ("input", "output"):
            if key not in rec:
                raise TraceFormatError(path, f"missing key {key!r}", line=lineno)
        outputs = rec["output"]
        if not isinstance(outputs, list) or not outputs:
            raise TraceFormatError(path, "'output' must be a non-empty list of response lengths", line=lineno)
        n = rec.get("n_sampling")
        if n is not None and n != len(outputs):
            raise TraceFormatError(path, f"n mismatch in prompt group: n_sampling={n} but "
                                         f"{len(outputs)} response lengths", line=lineno)
        prompt = _length(path, lineno, rec["input"], "'input' (prompt length)")
        lens = [_length(path, lineno, o, "response length") for o in outputs]
        step = rec.get("step", 0)
        if not isinstance(step, int):
            raise TraceFormatError(path, f"'step' must be an integer, got {step!r}", line=lineno)
        by_step[step].append(PromptGroup(prompt, [Response(v, False) for v in lens]))
    steps = [Step(s, by_step[s]) for s in sorted(by_step)]
    cap = max((r.length for s in steps for g in s.groups for r in g.responses), default=0)
    return Trace(steps=steps, max_response_len=cap, kind="single", name=path.stem, source=str(path))


# --------------------------------------------------------------------------- PolyTrace multi-turn JSONL


def _read_multiturn_jsonl(path, text, max_response_len) -> Trace:
    groups: dict[tuple[int, int], PromptGroup] = {}
    order: dict[int, list[tuple[int, int]]] = defaultdict(list)
    cap_seen = 0
    model_len = None
    for lineno, rec in _json_lines(path, text):
        if rec.get("validate"):
            continue
        for key in ("turns", "final_response_len", "prompt_len"):
            if key not in rec:
                raise TraceFormatError(path, f"missing key {key!r}", line=lineno)
        cap = max_response_len or rec.get("max_response_len")
        if cap is None:
            raise TraceFormatError(path, "record states no max_response_len; pass max_response_len",
                                   line=lineno)
        cap_seen = max(cap_seen, int(cap))
        if rec.get("max_model_len"):
            model_len = int(rec["max_model_len"])
        length = _length(path, lineno, rec["final_response_len"], "'final_response_len'")
        loss = rec.get("final_response_loss_len")
        loss = _length(path, lineno, loss, "'final_response_loss_len'", allow_zero=True) if loss is not None \
            else None
        tools_by_turn: dict[int, list[ToolCall]] = defaultdict(list)
        for call in rec.get("tool_calls") or []:
            tools_by_turn[int(call.get("turn", 0))].append(
                ToolCall(float(call.get("latency_s", 0.0)),
                         _length(path, lineno, call.get("append_len", call.get("response_token_len", 0)),
                                 "tool call 'append_len'", allow_zero=True)))
        turns = []
        for i, t in enumerate(rec["turns"]):
            idx = int(t.get("turn", i))
            turns.append(Turn(
                prompt_tokens=_length(path, lineno, t.get("prompt_tokens", t.get("generation_prompt_len", 0)),
                                      "turn 'prompt_tokens'"),
                cached_tokens=_length(path, lineno, t.get("cached_tokens", 0), "turn 'cached_tokens'",
                                      allow_zero=True),
                completion_tokens=_length(path, lineno, t.get("completion_tokens", 0),
                                          "turn 'completion_tokens'", allow_zero=True),
                loss_tokens=_length(path, lineno, t.get("assistant_loss_len", t.get("completion_tokens", 0)),
                                    "turn 'assistant_loss_len'", allow_zero=True),
                engine_latency_s=float(t["engine_latency_s"]) if t.get("engine_latency_s") is not None else None,
                tool_calls=tools_by_turn.get(idx, []),
            ))
        capped = length >= int(cap) or rec.get("finish_reason") == "length"
        step = int(rec.get("step", 0))
        gid = int(rec.get("prompt_group_id", len(order[step])))
        key = (step, gid)
        if key not in groups:
            groups[key] = PromptGroup(_length(path, lineno, rec["prompt_len"], "'prompt_len'"), [])
            order[step].append(key)
        groups[key].responses.append(Response(length, capped, loss, turns))
    steps = [Step(s, [groups[k] for k in order[s]]) for s in sorted(order)]
    return Trace(steps=steps, max_response_len=cap_seen, kind="multiturn", name=path.stem, source=str(path),
                 max_prompt_len=(model_len - cap_seen) if model_len else None)


# --------------------------------------------------------------------------- paper-era JSON


def _read_paper_json(path, doc: dict) -> Trace:
    steps: list[Step] = []
    multiturn = None
    for key in sorted(doc, key=lambda k: int(k) if re.fullmatch(r"-?\d+", str(k)) else 1 << 60):
        if not re.fullmatch(r"-?\d+", str(key)):
            raise TraceFormatError(path, f"top-level key {key!r} is not a step number")
        value = doc[key]
        if isinstance(value, dict):
            if multiturn is True:
                raise TraceFormatError(path, f"step {key}: mixes single- and multi-turn records")
            multiturn = False
            steps.append(_paper_single(path, int(key), value))
        elif isinstance(value, list):
            if multiturn is False:
                raise TraceFormatError(path, f"step {key}: mixes single- and multi-turn records")
            multiturn = True
            steps.append(_paper_multi(path, int(key), value))
        else:
            raise TraceFormatError(path, f"step {key}: expected an object with 'input' and 'output' "
                                         f"or a list of them")
    cap = max((r.length for s in steps for g in s.groups for r in g.responses), default=0)
    return Trace(steps=steps, max_response_len=cap, kind="multiturn" if multiturn else "single",
                 name=path.stem, source=str(path))


def _int_list(path, step, obj, key) -> list[int]:
    if key not in obj or not isinstance(obj[key], list):
        raise TraceFormatError(path, f"step {step}: missing list {key!r}")
    out = []
    for v in obj[key]:
        if (isinstance(v, bool) or not isinstance(v, (int, float))
                or (isinstance(v, float) and not math.isfinite(v)) or v != int(v) or v <= 0):
            raise TraceFormatError(path, f"step {step}: {key!r} holds {v!r}; lengths must be positive integers")
        out.append(int(v))
    return out


def _paper_single(path, step: int, obj: dict) -> Step:
    """``input`` holds one length per prompt, ``output`` one per response. When ``output`` is a
    whole multiple n of ``input``, responses are grouped n at a time in order (verl's layout);
    otherwise (the release notes that some inputs and outputs do not correspond one to one) they
    are grouped in order with n = round(len(output) / len(input)), the last group taking the rest."""
    inputs = _int_list(path, step, obj, "input")
    outputs = _int_list(path, step, obj, "output")
    if not inputs or not outputs:
        raise TraceFormatError(path, f"step {step}: 'input' and 'output' must be non-empty")
    n = max(1, round(len(outputs) / len(inputs)))
    groups = []
    for gi, start in enumerate(range(0, len(outputs), n)):
        chunk = outputs[start:start + n]
        groups.append(PromptGroup(inputs[min(gi, len(inputs) - 1)], [Response(v, False) for v in chunk]))
    return Step(step, groups)


def _paper_multi(path, step: int, items: list) -> Step:
    """Each object is one trajectory: ``input[i]`` is the context at turn i, ``output[i]`` the
    tokens generated. Tool output appended between turns is what the context grew by beyond the
    generated tokens. Group structure is not recorded: each trajectory is its own group."""
    groups = []
    for j, obj in enumerate(items):
        if not isinstance(obj, dict):
            raise TraceFormatError(path, f"step {step}: item {j} is not an object")
        ins = _int_list(path, step, obj, "input")
        outs = _int_list(path, step, obj, "output")
        if len(ins) != len(outs) or not ins:
            raise TraceFormatError(path, f"step {step}: item {j} has {len(ins)} inputs and {len(outs)} outputs")
        turns = []
        for i, (p, c) in enumerate(zip(ins, outs)):
            tool = ins[i + 1] - (p + c) if i + 1 < len(ins) else 0
            calls = [ToolCall(0.0, tool)] if tool > 0 else []
            turns.append(Turn(prompt_tokens=p, cached_tokens=0, completion_tokens=c, loss_tokens=c,
                              tool_calls=calls))
        length = ins[-1] + outs[-1] - ins[0]
        groups.append(PromptGroup(ins[0], [Response(length, False, sum(outs), turns)]))
    return Step(step, groups)
