"""Property tests of every trace reader (issue 17, item 4): any JSON value in any field, and any
text line, gives either a clean ``TraceFormatError`` or a valid trace: integer lengths within
bounds, finite non-negative seconds, and statistics (``describe``) without a non-finite number.
Never another exception.

Examples are derandomized (the same ones on every CI run; ``HYPOTHESIS_PROFILE=explore`` draws
fresh ones); ``scripts/fuzz_inputs.py`` explores at random over the real files."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytrace import load_trace, save_trace
from polytrace.errors import TraceFormatError
from polytrace.workload.describe import describe
from polytrace.workload.trace.fields import MAX_SECONDS, MAX_STEP, MAX_TOKENS

# derandomized by conftest's "ci" hypothesis profile (HYPOTHESIS_PROFILE=explore draws at random)
SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_EDGE_INTS = st.sampled_from([0, 1, -1, 2, 2 ** 31 - 1, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 10 ** 12, -(2 ** 63)])
_SCALARS = (st.none() | st.booleans() | st.integers() | _EDGE_INTS
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=8)

STEP_RECORD = {"step": 0, "rank": 0, "input": 120, "output": [40, 300, 300, 55], "n_sampling": 4, "validate": False}
MT_RECORD = {
    "step": 0, "prompt_len": 317, "max_response_len": 3000, "max_model_len": 7096,
    "turns": [{"turn": 0, "prompt_tokens": 317, "cached_tokens": 0, "completion_tokens": 40, "assistant_loss_len": 40,
               "engine_latency_s": 93.7},
              {"turn": 1, "prompt_tokens": 1401, "cached_tokens": 356, "completion_tokens": 131,
               "assistant_loss_len": 131, "engine_latency_s": 191.0}],
    "tool_calls": [{"turn": 0, "latency_s": 0.074, "append_len": 1041}],
    "finish_reason": "stop", "final_response_len": 1216, "final_response_loss_len": 171, "validate": False,
    "prompt_group_id": 0, "sample_id": 0}
NATIVE_HEAD = {"format": "polytrace.workload.trace", "version": 1, "kind": "single", "name": "t",
               "max_response_len": 4096, "max_prompt_len": 512}
NATIVE_RECORD = {"step": 0, "prompt_len": 100, "responses": [30, 4096, 7], "capped": [1]}
NATIVE_MT_HEAD = {**NATIVE_HEAD, "kind": "multiturn", "max_response_len": 3000}
NATIVE_MT_RECORD = {"step": 0, "prompt_len": 317, "responses": [
    {"len": 1216, "capped": False, "loss": 171,
     "turns": [{"prompt": 317, "cached": 0, "completion": 40, "loss": 40, "engine_s": 93.7, "tools": [[0.07, 1041]]},
               {"prompt": 1401, "cached": 356, "completion": 131, "loss": 131, "engine_s": None, "tools": []}]}]}
PAPER = {"0": {"input": [10, 20], "output": [5, 6, 7, 8]}, "1": {"input": [30], "output": [9, 9]}}
PAPER_MT = {"0": [{"input": [100, 300], "output": [50, 20]}, {"input": [80], "output": [7]}]}


def _paths(node, prefix=()):
    """Every path to a value of ``node`` (keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _replace(node, path, value):
    node = json.loads(json.dumps(node))
    parent = node
    for k in path[:-1]:
        parent = parent[k]
    if value is _DELETE:
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return node


_DELETE = object()
# Boundary values drawn as often as arbitrary ones: they are where readers broke (2**63 overflowed
# int64, 10**12 passed as a length, NaN and strings reached float() and int()).
_EDGE_VALUES = _EDGE_INTS | st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, 0.5, "12", "", None,
                                             [], {}, True])
_VALUE_OR_DELETE = st.one_of(_EDGE_VALUES, JSON_VALUES, st.just(_DELETE))


def _check(trace) -> None:
    """What every reader guarantees to the code past it."""
    assert trace.kind in ("single", "multiturn")
    assert isinstance(trace.max_response_len, int) and 1 <= trace.max_response_len <= MAX_TOKENS
    assert trace.steps and trace.n_responses > 0
    for s in trace.steps:
        assert isinstance(s.step, int) and 0 <= s.step <= MAX_STEP and s.groups
        for g in s.groups:
            assert isinstance(g.prompt_len, int) and 1 <= g.prompt_len <= MAX_TOKENS and g.responses
            for r in g.responses:
                assert isinstance(r.length, int) and 1 <= r.length <= trace.max_response_len
                assert isinstance(r.capped, bool)
                if r.loss_tokens is not None:
                    assert isinstance(r.loss_tokens, int) and 0 <= r.loss_tokens <= r.length
                assert (r.turns is not None) == trace.is_multiturn
                for t in r.turns or ():
                    assert 1 <= t.prompt_tokens <= MAX_TOKENS and 0 <= t.cached_tokens <= t.prompt_tokens
                    assert 0 <= t.completion_tokens <= MAX_TOKENS and 0 <= t.loss_tokens <= MAX_TOKENS
                    assert t.engine_latency_s is None or 0 <= t.engine_latency_s <= MAX_SECONDS
                    for c in t.tool_calls:
                        assert 0 <= c.latency_s <= MAX_SECONDS and 0 <= c.tokens <= MAX_TOKENS
    stats = describe(trace)
    for row in [stats["summary"], *stats["per_step"]]:
        for k, v in row.items():
            assert not isinstance(v, float) or math.isfinite(v), (k, v)


def _load(name: str, text: str):
    """load_trace on ``text``: a valid trace, or None after a clean TraceFormatError."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / name
        f.write_text(text)
        try:
            trace = load_trace(f)
        except TraceFormatError as exc:
            msg = str(exc)
            assert "\n" not in msg and str(f) in msg
            return None
        _check(trace)
        out = Path(d) / "again.jsonl"
        save_trace(trace, out)  # the native writer's output always reads back to the same trace
        assert load_trace(out) == trace
        return trace


def _field_test(name, lines, data):
    """Replace one value (or delete it) in one line of ``lines`` and load the result."""
    i = data.draw(st.integers(0, len(lines) - 1))
    path = data.draw(st.sampled_from(_paths(lines[i])))
    value = data.draw(_VALUE_OR_DELETE)
    changed = list(lines)
    changed[i] = _replace(lines[i], path, value)
    _load(name, "\n".join(json.dumps(x) for x in changed) + "\n")


def _text_line_test(name, lines, data):
    """Insert an arbitrary text line (any characters, JSON-like or not) into a valid file."""
    text_lines = [json.dumps(x) for x in lines]
    junk = data.draw(st.text(max_size=40) | JSON_VALUES.map(json.dumps))
    at = data.draw(st.integers(0, len(text_lines)))
    text_lines.insert(at, junk.replace("\n", " ").replace("\r", " "))
    _load(name, "\n".join(text_lines) + "\n")


def test_the_unmutated_inputs_are_valid():
    assert _load("packed_lengths_step_0.jsonl", json.dumps(STEP_RECORD) + "\n").n_responses == 4
    assert _load("multiturn_workload_step_0.jsonl", json.dumps(MT_RECORD) + "\n").is_multiturn
    assert _load("n.jsonl", json.dumps(NATIVE_HEAD) + "\n" + json.dumps(NATIVE_RECORD) + "\n").n_responses == 3
    assert _load("m.jsonl", json.dumps(NATIVE_MT_HEAD) + "\n" + json.dumps(NATIVE_MT_RECORD) + "\n").is_multiturn
    assert _load("p.json", json.dumps(PAPER)).n_responses == 6
    assert _load("q.json", json.dumps(PAPER_MT)).is_multiturn


@SETTINGS
@given(st.data())
def test_step_jsonl_any_value_in_any_field(data):
    _field_test("packed_lengths_step_0.jsonl", [STEP_RECORD, {**STEP_RECORD, "input": 90}], data)


@SETTINGS
@given(st.data())
def test_multiturn_jsonl_any_value_in_any_field(data):
    _field_test("multiturn_workload_step_0.jsonl", [MT_RECORD, {**MT_RECORD, "sample_id": 1}], data)


@SETTINGS
@given(st.data())
def test_native_any_value_in_any_field(data):
    _field_test("single.jsonl", [NATIVE_HEAD, NATIVE_RECORD, {**NATIVE_RECORD, "step": 1}], data)


@SETTINGS
@given(st.data())
def test_native_multiturn_any_value_in_any_field(data):
    _field_test("multi.jsonl", [NATIVE_MT_HEAD, NATIVE_MT_RECORD], data)


@SETTINGS
@given(st.data())
def test_paper_json_any_value_in_any_field(data):
    doc = data.draw(st.sampled_from([PAPER, PAPER_MT]))
    path = data.draw(st.sampled_from(_paths(doc)))
    _load("paper.json", json.dumps(_replace(doc, path, data.draw(_VALUE_OR_DELETE))))


@SETTINGS
@given(st.data())
def test_any_text_line_in_any_format(data):
    name, lines = data.draw(st.sampled_from([
        ("packed_lengths_step_0.jsonl", [STEP_RECORD, STEP_RECORD]),
        ("multiturn_workload_step_0.jsonl", [MT_RECORD]),
        ("native.jsonl", [NATIVE_HEAD, NATIVE_RECORD]),
        ("native_mt.jsonl", [NATIVE_MT_HEAD, NATIVE_MT_RECORD]),
    ]))
    _text_line_test(name, lines, data)


@SETTINGS
@given(st.text(max_size=200))
def test_any_text_as_a_whole_file(text):
    _load("anything.json", text)
