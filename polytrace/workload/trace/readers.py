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
- polytrace's native JSONL (``polytrace.workload.trace.native``).

Validation rollouts (``"validate": true``) are not training steps and are skipped.
Every field goes through ``fields`` (typed and range-checked: lengths below 2**31 and the stated
cap, steps non-negative, seconds finite); every error names the file and, where it applies, the
line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ...errors import TraceFormatError
from . import native
from .fields import (
    MAX_STEP,
    Where,
    array,
    count,
    flag,
    loads,
    obj,
    read_regular_file,
    require_keys,
    seconds,
    step_number,
    text,
)
from .model import PromptGroup, Response, Step, ToolCall, Trace, Turn

_STEP_FILE = re.compile(r"(packed_lengths|multiturn_workload)_step_(\d+)\.jsonl$")


def load_trace(path, max_response_len: int | None = None, name: str | None = None) -> Trace:
    """Read a trace file or folder in any supported format.

    ``max_response_len`` states the response-length cap when the source does not; otherwise it
    is taken from the records (multi-turn, native) or inferred: a maximum length reached by two
    or more responses is taken to be the cap (truncation piles responses up there); with no such
    pile-up the cap is at least the longest response and no response is marked capped.
    ``Trace.cap_source`` says which of these it was.
    """
    if max_response_len is not None:
        max_response_len = count(Where("max_response_len"), max_response_len, "the stated cap")
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(p, "no such file or folder")
    if p.is_dir():
        files = _trace_files(p)
        if not files:
            raise TraceFormatError(p, "folder holds no packed_lengths_step_*.jsonl, "
                                      "multiturn_workload_step_*.jsonl or *.jsonl/*.json trace files")
        parts = [_read_file(f, max_response_len) for f in files]
        kinds = {t.kind for t, _ in parts}
        if len(kinds) > 1:
            raise TraceFormatError(p, "folder mixes single-turn and multi-turn traces")
        unmarked = [t for t, needs_marking in parts if needs_marking]
        if unmarked and len(unmarked) < len(parts):  # mixed formats: each part's caps on its own
            for t in unmarked:
                _mark_caps(t, max_response_len)
        traces = [t for t, _ in parts]
        trace = Trace(steps=[s for t in traces for s in t.steps],
                      max_response_len=max(t.max_response_len for t in traces), kind=traces[0].kind,
                      name=name or p.name, source=str(p),
                      max_prompt_len=_max_or_none([t.max_prompt_len for t in traces]),
                      cap_source=traces[0].cap_source)
        if len(unmarked) == len(parts):
            _mark_caps(trace, max_response_len)
    else:
        trace, needs_marking = _read_file(p, max_response_len)
        if needs_marking:
            _mark_caps(trace, max_response_len)
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
    """Step files (whatever their type: a FIFO or folder named like one is refused when read, not
    skipped), else every regular *.jsonl / *.json file."""
    step_files = sorted((f for f in folder.rglob("*.jsonl") if _STEP_FILE.search(f.name)), key=_natural_key)
    if step_files:
        return step_files
    others = sorted(f for f in folder.rglob("*") if f.suffix in (".jsonl", ".json") and f.is_file())
    return others


def _read_file(path: Path, max_response_len: int | None) -> tuple[Trace, bool]:
    """(trace, whether its caps still need marking: the format does not record truncation)."""
    text_ = read_regular_file(path)
    stripped = text_.lstrip()
    if not stripped:
        raise TraceFormatError(path, "file is empty")
    try:
        first = loads(Where(path, 1), stripped.split("\n", 1)[0])
    except TraceFormatError:
        first = None  # not JSON lines: maybe one JSON document over several lines
    if isinstance(first, dict):
        if first.get("format") == native.FORMAT:
            return native.read(path, text_), False
        if "turns" in first:
            return _read_multiturn_jsonl(path, text_, max_response_len), False
        if "input" in first and "output" in first:
            return _read_step_jsonl(path, text_), True
        # A one-line paper-era JSON document also parses here.
        if first and all(re.fullmatch(r"-?\d+", str(k)) for k in first):  # bad step numbers refused there
            return _read_paper_json(path, first), True
        raise TraceFormatError(path, "unrecognised trace format: first record has none of "
                                     "'input'/'output', 'turns' or a 'format' header", line=1)
    doc = loads(Where(path), text_)
    if isinstance(doc, dict):
        return _read_paper_json(path, doc), True
    raise TraceFormatError(path, "unrecognised trace format: expected JSON lines or a JSON object "
                                 "keyed by step")


# --------------------------------------------------------------------------- shared helpers


def _json_lines(path, text_):
    """(line number, record) for each non-blank line; lines are split on "\\n" only, so a line
    number is the one an editor shows."""
    for lineno, raw in enumerate(text_.split("\n"), start=1):
        if not raw.strip():
            continue
        rec = loads(Where(path, lineno), raw)
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
    """Set the cap, its source and the capped flags of a trace whose format does not record
    truncation."""
    responses = [r for s in trace.steps for g in s.groups for r in g.responses]
    lens = np.fromiter((r.length for r in responses), dtype=np.int64, count=len(responses))
    cap, piled = _infer_cap(lens)
    if stated is not None:
        if lens.size and cap > stated:
            raise TraceFormatError(trace.source, f"a response of {cap} tokens exceeds the stated "
                                                 f"max_response_len={stated}")
        cap, piled, source = int(stated), True, "stated"
    else:
        source = "pile-up" if piled else "longest"
    trace.max_response_len = max(cap, 1)
    trace.cap_source = source
    for r in responses:
        r.capped = piled and r.length >= cap


# --------------------------------------------------------------------------- PolyTrace per-step JSONL


def _read_step_jsonl(path, text_) -> Trace:
    by_step: dict[int, list[PromptGroup]] = defaultdict(list)
    for lineno, rec in _json_lines(path, text_):
        w = Where(path, lineno)
        if flag(w, rec.get("validate"), "'validate'"):
            continue
        require_keys(w, rec, ("input", "output"))
        outputs = rec["output"]
        if not isinstance(outputs, list) or not outputs:
            raise w.error("'output' must be a non-empty list of response lengths")
        n = rec.get("n_sampling")
        if n is not None and count(w, n, "'n_sampling'") != len(outputs):
            raise w.error(f"n mismatch in prompt group: n_sampling={n} but {len(outputs)} response lengths")
        prompt = count(w, rec["input"], "'input' (prompt length)")
        lens = [count(w, o, "response length") for o in outputs]
        step = step_number(w, rec.get("step", 0))
        by_step[step].append(PromptGroup(prompt, [Response(v, False) for v in lens]))
    steps = [Step(s, by_step[s]) for s in sorted(by_step)]
    cap = max((r.length for s in steps for g in s.groups for r in g.responses), default=1)
    return Trace(steps=steps, max_response_len=cap, kind="single", name=path.stem, source=str(path))


# --------------------------------------------------------------------------- PolyTrace multi-turn JSONL


def _read_multiturn_jsonl(path, text_, max_response_len) -> Trace:
    groups: dict[tuple[int, int], PromptGroup] = {}
    order: dict[int, list[tuple[int, int]]] = defaultdict(list)
    cap_seen = 0
    model_len = None
    for lineno, rec in _json_lines(path, text_):
        w = Where(path, lineno)
        if flag(w, rec.get("validate"), "'validate'"):
            continue
        require_keys(w, rec, ("turns", "final_response_len", "prompt_len"))
        if max_response_len is not None:
            cap = max_response_len
        elif rec.get("max_response_len") is None:
            raise w.error("record states no max_response_len; pass max_response_len")
        else:
            cap = count(w, rec["max_response_len"], "'max_response_len'")
        cap_seen = max(cap_seen, cap)
        if rec.get("max_model_len") is not None:
            ml = count(w, rec["max_model_len"], "'max_model_len'")
            if ml <= cap:
                raise w.error(f"'max_model_len' ({ml}) must exceed the response cap ({cap})")
            model_len = max(model_len or 0, ml)
        length = count(w, rec["final_response_len"], "'final_response_len'")
        if length > cap:
            raise w.error(f"'final_response_len' of {length} is above the response cap ({cap})")
        loss = rec.get("final_response_loss_len")
        if loss is not None:
            loss = count(w, loss, "'final_response_loss_len'", minimum=0)
            if loss > length:
                raise w.error(f"'final_response_loss_len' ({loss}) exceeds 'final_response_len' ({length})")
        turns_raw = array(w, rec["turns"], "'turns'", non_empty=True)
        turns = _mt_turns(w, turns_raw, _mt_tool_calls(w, rec.get("tool_calls"), len(turns_raw)))
        finish = text(w, rec.get("finish_reason"), "'finish_reason'")
        capped = length >= cap or finish == "length"
        step = step_number(w, rec.get("step", 0))
        gid = count(w, rec.get("prompt_group_id", len(order[step])), "'prompt_group_id'", minimum=0,
                    maximum=MAX_STEP)
        prompt = count(w, rec["prompt_len"], "'prompt_len'")
        key = (step, gid)
        if key not in groups:
            groups[key] = PromptGroup(prompt, [])
            order[step].append(key)
        elif groups[key].prompt_len != prompt:
            raise w.error(f"'prompt_len' {prompt} differs from {groups[key].prompt_len} earlier in prompt group "
                          f"{gid} of step {step}")
        groups[key].responses.append(Response(length, capped, loss, turns))
    steps = [Step(s, [groups[k] for k in order[s]]) for s in sorted(order)]
    return Trace(steps=steps, max_response_len=max(cap_seen, 1), kind="multiturn", name=path.stem,
                 source=str(path), cap_source="stated" if max_response_len is not None else "recorded",
                 max_prompt_len=(model_len - cap_seen) if model_len and model_len > cap_seen else None)


def _mt_tool_calls(w: Where, raw, n_turns: int) -> dict[int, list[ToolCall]]:
    by_turn: dict[int, list[ToolCall]] = defaultdict(list)
    for call in array(w, raw if raw is not None else [], "'tool_calls'"):
        call = obj(w, call, "a tool call")
        turn = count(w, call.get("turn", 0), "tool call 'turn'", minimum=0)
        if turn >= n_turns:
            raise w.error(f"a tool call after turn {turn}, but the trajectory has {n_turns} turns")
        latency = call.get("latency_s")
        tokens = call.get("append_len", call.get("response_token_len", 0))
        by_turn[turn].append(ToolCall(0.0 if latency is None else seconds(w, latency, "tool call 'latency_s'"),
                                      count(w, tokens, "tool call 'append_len'", minimum=0)))
    return by_turn


def _mt_turns(w: Where, raw: list, tools_by_turn: dict[int, list[ToolCall]]) -> list[Turn]:
    turns = []
    for i, t in enumerate(raw):
        t = obj(w, t, f"turn {i}")
        idx = count(w, t.get("turn", i), f"turn {i} 'turn'", minimum=0, maximum=MAX_STEP)
        prompt = count(w, t.get("prompt_tokens", t.get("generation_prompt_len")), f"turn {i} 'prompt_tokens'")
        cached = count(w, t.get("cached_tokens", 0), f"turn {i} 'cached_tokens'", minimum=0)
        if cached > prompt:
            raise w.error(f"turn {i}: 'cached_tokens' ({cached}) exceeds 'prompt_tokens' ({prompt})")
        completion = count(w, t.get("completion_tokens", 0), f"turn {i} 'completion_tokens'", minimum=0)
        engine = t.get("engine_latency_s")
        turns.append(Turn(
            prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion,
            loss_tokens=count(w, t.get("assistant_loss_len", completion), f"turn {i} 'assistant_loss_len'",
                              minimum=0),
            engine_latency_s=None if engine is None else seconds(w, engine, f"turn {i} 'engine_latency_s'"),
            tool_calls=tools_by_turn.get(idx, []),
        ))
    return turns


# --------------------------------------------------------------------------- paper-era JSON

_STEP_KEY = re.compile(r"\d{1,10}")


def _read_paper_json(path, doc: dict) -> Trace:
    steps: list[Step] = []
    multiturn = None
    for key in doc:
        if not _STEP_KEY.fullmatch(str(key)):
            raise TraceFormatError(path, f"top-level key {str(key)[:40]!r} is not a step number "
                                         f"(a non-negative integer)")
    for key in sorted(doc, key=int):
        step = step_number(Where(path), int(key), f"step {key}")
        value = doc[key]
        if isinstance(value, dict):
            if multiturn is True:
                raise TraceFormatError(path, f"step {key}: mixes single- and multi-turn records")
            multiturn = False
            steps.append(_paper_single(path, step, value))
        elif isinstance(value, list):
            if multiturn is False:
                raise TraceFormatError(path, f"step {key}: mixes single- and multi-turn records")
            multiturn = True
            steps.append(_paper_multi(path, step, value))
        else:
            raise TraceFormatError(path, f"step {key}: expected an object with 'input' and 'output' "
                                         f"or a list of them")
    cap = max((r.length for s in steps for g in s.groups for r in g.responses), default=1)
    return Trace(steps=steps, max_response_len=cap, kind="multiturn" if multiturn else "single",
                 name=path.stem, source=str(path))


def _int_list(path, step, o, key) -> list[int]:
    if key not in o or not isinstance(o[key], list):
        raise TraceFormatError(path, f"step {step}: missing list {key!r}")
    w = Where(path)
    return [count(w, v, f"step {step}: {key!r} length") for v in o[key]]


def _paper_single(path, step: int, o: dict) -> Step:
    """``input`` holds one length per prompt, ``output`` one per response. When ``output`` is a
    whole multiple n of ``input``, responses are grouped n at a time in order (verl's layout);
    otherwise (the release notes that some inputs and outputs do not correspond one to one) they
    are grouped in order with n = round(len(output) / len(input)), the last group taking the rest."""
    inputs = _int_list(path, step, o, "input")
    outputs = _int_list(path, step, o, "output")
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
    w = Where(path)
    for j, o in enumerate(items):
        if not isinstance(o, dict):
            raise TraceFormatError(path, f"step {step}: item {j} is not an object")
        ins = _int_list(path, step, o, "input")
        outs = _int_list(path, step, o, "output")
        if len(ins) != len(outs) or not ins:
            raise TraceFormatError(path, f"step {step}: item {j} has {len(ins)} inputs and {len(outs)} outputs")
        turns = []
        for i, (p, c) in enumerate(zip(ins, outs)):
            tool = ins[i + 1] - (p + c) if i + 1 < len(ins) else 0
            calls = [ToolCall(0.0, tool)] if tool > 0 else []
            turns.append(Turn(prompt_tokens=p, cached_tokens=0, completion_tokens=c, loss_tokens=c,
                              tool_calls=calls))
        # everything after the first prompt: the last context plus the last output
        length = count(w, ins[-1] + outs[-1] - ins[0], f"step {step}: item {j} response length (last input "
                                                       f"+ last output - first input)")
        if sum(outs) > length:
            raise TraceFormatError(path, f"step {step}: item {j}: its outputs add up to {sum(outs)} tokens, more than "
                                         f"the {length} its context grew by (each input must include the earlier "
                                         f"outputs)")
        groups.append(PromptGroup(ins[0], [Response(length, False, sum(outs), turns)]))
    return Step(step, groups)
