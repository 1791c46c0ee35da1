"""Trace readers: every format, detection, the native round trip, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polytrace import load_trace, save_trace
from polytrace.errors import PolytraceError, TraceFormatError
from polytrace.workload.trace import dumps_trace


def _step_line(step, prompt, outputs, n=None, **extra):
    rec = {"step": step, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": prompt,
           "output": outputs, "n_sampling": len(outputs) if n is None else n, "validate": False}
    rec.update(extra)
    return json.dumps(rec)


@pytest.fixture
def step_folder(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    # steps 0, 1 and 10: natural order must put 10 last
    (d / "packed_lengths_step_0.jsonl").write_text(
        "\n".join([_step_line(0, 100, [10, 20, 4096, 4096]), _step_line(0, 50, [5, 6, 7, 8])]) + "\n")
    (d / "packed_lengths_step_1.jsonl").write_text(_step_line(1, 60, [30, 40, 50, 4096]) + "\n"
                                                   + _step_line(1, 70, [1, 2, 3, 4], validate=True) + "\n")
    (d / "packed_lengths_step_10.jsonl").write_text(_step_line(10, 80, [9, 9, 9, 9]) + "\n")
    return d


def test_step_jsonl_folder_groups_steps_and_cap(step_folder):
    trace = load_trace(step_folder)
    assert trace.kind == "single"
    assert [s.step for s in trace.steps] == [0, 1, 10]
    assert [len(s.groups) for s in trace.steps] == [2, 1, 1]  # the validate line is skipped
    assert trace.steps[0].groups[0].prompt_len == 100
    # 4096 is reached three times: a pile-up at the maximum is taken as the cap
    assert trace.max_response_len == 4096
    b = trace.pooled()
    assert b.capped.sum() == 3
    assert np.array_equal(np.bincount(b.group_ids), [4, 4, 4, 4])
    assert b.n_groups == 4


def test_stated_cap_overrides_inference(step_folder):
    trace = load_trace(step_folder, max_response_len=8192)
    assert trace.max_response_len == 8192
    assert trace.pooled().capped.sum() == 0
    with pytest.raises(TraceFormatError, match="exceeds the stated max_response_len"):
        load_trace(step_folder, max_response_len=100)


def test_single_maximum_is_not_a_cap(tmp_path):
    f = tmp_path / "packed_lengths_step_0.jsonl"
    f.write_text(_step_line(0, 10, [5, 6, 7, 900]) + "\n")
    trace = load_trace(f)
    assert trace.max_response_len == 900
    assert not trace.pooled().capped.any()


def _mt_record(step, gid, sid, final_len, turns, calls, cap=3000, finish="stop"):
    return json.dumps({
        "step": step, "prompt_len": turns[0][0], "max_response_len": cap, "max_model_len": cap + 4096,
        "turns": [{"turn": i, "prompt_tokens": p, "cached_tokens": c, "completion_tokens": o,
                   "assistant_loss_len": o, "engine_latency_s": 1.5} for i, (p, c, o) in enumerate(turns)],
        "tool_calls": [{"turn": t, "latency_s": lat, "append_len": tok} for t, lat, tok in calls],
        "final_response_len": final_len, "final_response_loss_len": sum(o for _, _, o in turns),
        "finish_reason": finish, "prompt_group_id": gid, "sample_id": sid, "validate": False})


def test_multiturn_jsonl(tmp_path):
    f = tmp_path / "multiturn_workload_step_0.jsonl"
    f.write_text("\n".join([
        _mt_record(0, 0, 0, 1216, [(317, 0, 40), (1401, 356, 131)], [(0, 0.07, 1041)]),
        _mt_record(0, 0, 1, 3000, [(317, 0, 3000)], [], finish="length"),
        _mt_record(0, 1, 0, 50, [(200, 0, 50)], []),
    ]) + "\n")
    trace = load_trace(f)
    assert trace.kind == "multiturn"
    assert trace.max_response_len == 3000 and trace.max_prompt_len == 4096
    assert [g.n for g in trace.steps[0].groups] == [2, 1]
    b = trace.pooled()
    assert b.capped.tolist() == [False, True, False]
    assert b.loss_lens.tolist() == [171, 3000, 50]
    t = b.turns
    assert t.seq.tolist() == [0, 0, 1, 2]
    assert t.cached_tokens.tolist() == [0, 356, 0, 0]
    assert t.tool_tokens.tolist() == [1041, 0, 0, 0]
    assert t.tool_calls_per_sequence(3).tolist() == [1, 0, 0]
    assert np.allclose(t.tool_latency_s, [0.07, 0, 0, 0])


def test_paper_era_json_single_and_multiturn(tmp_path):
    single = tmp_path / "paper.json"
    single.write_text(json.dumps({"0": {"input": [10, 20], "output": [1, 2, 3, 4]},
                                  "1": {"input": [30], "output": [5, 6]}}, indent=2))
    t = load_trace(single)
    assert [len(s.groups) for s in t.steps] == [2, 1]
    assert [g.prompt_len for g in t.steps[0].groups] == [10, 20]
    assert [r.length for r in t.steps[0].groups[1].responses] == [3, 4]

    multi = tmp_path / "paper_mt.json"
    multi.write_text(json.dumps({"0": [{"input": [100, 300], "output": [50, 20]},
                                       {"input": [80], "output": [7]}]}))
    t = load_trace(multi)
    assert t.kind == "multiturn"
    r = t.steps[0].groups[0].responses[0]
    # context grew 100 -> 300 with 50 generated: 150 tokens of tool output, then 20 generated
    assert r.length == 300 + 20 - 100
    assert r.turns[0].tool_calls[0].tokens == 150
    assert r.loss_tokens == 70


@pytest.mark.parametrize("kind", ["single", "multiturn"])
def test_native_round_trip_is_lossless(tmp_path, step_folder, kind):
    if kind == "single":
        trace = load_trace(step_folder)
    else:
        f = tmp_path / "multiturn_workload_step_3.jsonl"
        f.write_text(_mt_record(3, 5, 0, 1216, [(317, 0, 40), (1401, 356, 131)],
                                [(0, 0.0740587711, 1000), (0, 0.5, 41)]) + "\n")
        trace = load_trace(f)
    out = tmp_path / "native.jsonl"
    save_trace(trace, out)
    again = load_trace(out)
    assert again == trace
    assert dumps_trace(again) == out.read_text()


@pytest.mark.parametrize("content,match", [
    ('{"step": 0, "input": 10, "output": [1, 2], "n_sampling": 3}\n', r":1: n mismatch"),
    ('{"step": 0, "input": 10, "output": [1, -2], "n_sampling": 2}\n', r":1: response length must be positive"),
    ('{"step": 0, "input": 10, "output": [1, 0], "n_sampling": 2}\n', r":1: response length must be positive"),
    ('{"step": 0, "input": 0, "output": [1, 2], "n_sampling": 2}\n', r":1: 'input' \(prompt length\) must be"),
    ('{"step": 0, "input": 10, "output": [1, 2.5]}\n', r":1: response length must be an integer"),
    ('{"step": 0, "input": 10, "output": [1, 2]}\n{"step": 0, "input": 10, "output": [1, 2\n', r":2: invalid JSON"),
    ('{"step": 0, "output": [1, 2]}\n', r":1: unrecognised trace format"),
    ('{"step": 0, "input": 5, "output": [1], "validate": true}\n', r"trace is empty"),
    ('', r"file is empty"),
    ('[1, 2, 3]', r"unrecognised trace format"),
])
def test_bad_traces_name_file_and_line(tmp_path, content, match):
    f = tmp_path / "packed_lengths_step_0.jsonl"
    f.write_text(content)
    with pytest.raises(TraceFormatError, match=match) as info:
        load_trace(f)
    assert str(f) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(PolytraceError, match="no such file"):
        load_trace(tmp_path / "nope")
    with pytest.raises(PolytraceError, match="folder holds no"):
        load_trace(tmp_path)


def test_shared_traces_load(polytrace_data):
    """The public PolyTrace release: the structure its README states."""
    verl = load_trace(polytrace_data / "verl/profile/packed_length_log/20260610_092349", max_response_len=32768)
    assert len(verl.steps) == 6 and all(len(s.groups) == 96 for s in verl.steps)
    assert all(g.n == 8 for s in verl.steps for g in s.groups)
    coder = load_trace(polytrace_data / "rllm/profile/packed_length_log")
    assert coder.max_response_len == 16000 and coder.pooled().capped.mean() > 0.1
    video = load_trace(polytrace_data / "verl-video/profile/packed_length_log")
    assert [s.step for s in video.steps] == list(range(1, 22))
    search = load_trace(polytrace_data / "search_r1/profile/multiturn_workload_log")
    assert search.kind == "multiturn" and search.max_response_len == 3000
    b = search.pooled()
    assert b.turns is not None and len(b.turns) > len(b)
    assert (b.loss_lens <= b.response_lens).all()


# --------------------------------------------------------------------------- issue 17: hostile input


def _write(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return f


def _mt_dict(**change):
    rec = json.loads(_mt_record(0, 0, 0, 1216, [(317, 0, 40), (1401, 356, 131)], [(0, 0.07, 1041)]))
    for key, value in change.items():
        if value is _DELETE:
            del rec[key]
        else:
            rec[key] = value
    return rec


_DELETE = object()


@pytest.mark.parametrize("value,match", [
    (2 ** 63, "above the limit"), (10 ** 12, "above the limit"), (2 ** 31, "above the limit"),
    (1e308, "above the limit"), (float("nan"), "must be an integer"), ("12", "must be an integer"),
])
def test_step_jsonl_lengths_are_bounded(tmp_path, value, match):
    """Before: 2**63 was an OverflowError deep in numpy; 10**12 was accepted as a length."""
    f = _write(tmp_path, "packed_lengths_step_0.jsonl",
               _step_line(0, 10, [5, 6]) + "\n" + json.dumps({"step": 0, "input": 10, "output": [5, value]}) + "\n")
    with pytest.raises(TraceFormatError, match=f":2: response length.*{match}"):
        load_trace(f)
    g = _write(tmp_path, "p2.jsonl", json.dumps({"step": 0, "input": value, "output": [5]}) + "\n")
    with pytest.raises(TraceFormatError, match=f":1: 'input' \\(prompt length\\).*{match}"):
        load_trace(g)


@pytest.mark.parametrize("line,match", [
    ({"step": -1, "input": 10, "output": [5]}, r":1: 'step' must be non-negative, got -1"),
    ({"step": "3", "input": 10, "output": [5]}, r":1: 'step' must be an integer"),
    ({"step": 0, "input": 10, "output": [5], "validate": "no"}, r":1: 'validate' must be true or false"),
    ({"step": 0, "input": 10, "output": [5], "n_sampling": [1]}, r":1: 'n_sampling' must be an integer"),
])
def test_step_jsonl_fields_are_typed(tmp_path, line, match):
    f = _write(tmp_path, "packed_lengths_step_0.jsonl", json.dumps(line) + "\n")
    with pytest.raises(TraceFormatError, match=match):
        load_trace(f)


@pytest.mark.parametrize("change,match", [
    # every unguarded conversion of the multi-turn reader, fed a string, null, NaN, a list, an object
    ({"step": "one"}, "'step' must be an integer"), ({"step": None}, "'step' must be an integer"),
    ({"step": -2}, "'step' must be non-negative"), ({"step": [0]}, "'step' must be an integer"),
    ({"max_response_len": "3000"}, "'max_response_len' must be an integer"),
    ({"max_response_len": -1}, "'max_response_len' must be positive"),
    ({"max_response_len": float("nan")}, "'max_response_len' must be an integer"),
    ({"max_response_len": {}}, "'max_response_len' must be an integer"),
    ({"max_model_len": "7096"}, "'max_model_len' must be an integer"),
    ({"max_model_len": 3000}, "'max_model_len' \\(3000\\) must exceed the response cap"),
    ({"turns": "many"}, "'turns' must be a list"), ({"turns": None}, "'turns' must be a list"),
    ({"turns": []}, "'turns' must not be empty"), ({"turns": [7]}, "turn 0 must be an object"),
    ({"turns": {"a": 1}}, "'turns' must be a list"),
    ({"tool_calls": "x"}, "'tool_calls' must be a list"), ({"tool_calls": [None]}, "a tool call must be an object"),
    ({"tool_calls": 1e9}, "'tool_calls' must be a list"),
    ({"tool_calls": [{"turn": 0, "latency_s": "slow", "append_len": 3}]}, "'latency_s' must be a number"),
    ({"tool_calls": [{"turn": 0, "latency_s": float("nan"), "append_len": 3}]}, "'latency_s' must be finite"),
    ({"tool_calls": [{"turn": 0, "latency_s": -0.5, "append_len": 3}]}, "'latency_s' must be finite"),
    ({"tool_calls": [{"turn": 0, "latency_s": [1], "append_len": 3}]}, "'latency_s' must be a number"),
    ({"tool_calls": [{"turn": "0", "latency_s": 1, "append_len": 3}]}, "tool call 'turn' must be an integer"),
    ({"tool_calls": [{"turn": 9, "latency_s": 1, "append_len": 3}]}, "after turn 9, but the trajectory has 2"),
    ({"tool_calls": [{"turn": 0, "latency_s": 1, "append_len": 2 ** 64}]}, "'append_len' of .* above the limit"),
    ({"final_response_len": 2 ** 63}, "'final_response_len' of .* above the limit"),
    ({"final_response_len": 3001}, "'final_response_len' of 3001 is above the response cap \\(3000\\)"),
    ({"final_response_loss_len": 1217}, "'final_response_loss_len' \\(1217\\) exceeds 'final_response_len'"),
    ({"final_response_loss_len": "171"}, "'final_response_loss_len' must be an integer"),
    ({"prompt_len": None}, "'prompt_len' must be an integer"),
    ({"prompt_group_id": "g"}, "'prompt_group_id' must be an integer"),
    ({"finish_reason": 3}, "'finish_reason' must be a string"),
    ({"validate": "false"}, "'validate' must be true or false"),
])
def test_multiturn_reader_refuses_each_bad_field_with_its_line(tmp_path, change, match):
    good = json.dumps(_mt_dict())
    f = _write(tmp_path, "multiturn_workload_step_0.jsonl", good + "\n" + json.dumps(_mt_dict(**change)) + "\n")
    with pytest.raises(TraceFormatError, match=":2: .*" + match) as info:
        load_trace(f)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("turn_change,match", [
    ({"cached_tokens": 400}, "turn 0: 'cached_tokens' \\(400\\) exceeds 'prompt_tokens' \\(317\\)"),
    ({"engine_latency_s": "fast"}, "turn 0 'engine_latency_s' must be a number"),
    ({"engine_latency_s": float("inf")}, "turn 0 'engine_latency_s' must be finite"),
    ({"completion_tokens": -1}, "turn 0 'completion_tokens' must be non-negative"),
    ({"prompt_tokens": 0}, "turn 0 'prompt_tokens' must be positive"),
])
def test_multiturn_turn_fields(tmp_path, turn_change, match):
    rec = _mt_dict()
    rec["turns"][0].update(turn_change)
    f = _write(tmp_path, "multiturn_workload_step_0.jsonl", json.dumps(rec) + "\n")
    with pytest.raises(TraceFormatError, match=":1: " + match):
        load_trace(f)


def test_multiturn_conflicting_prompt_in_a_group(tmp_path):
    a, b = _mt_dict(), _mt_dict(prompt_len=318)
    f = _write(tmp_path, "multiturn_workload_step_0.jsonl", json.dumps(a) + "\n" + json.dumps(b) + "\n")
    with pytest.raises(TraceFormatError, match=":2: 'prompt_len' 318 differs from 317"):
        load_trace(f)


_NATIVE_HEAD = {"format": "polytrace.workload.trace", "version": 1, "kind": "single", "name": "t",
                "max_response_len": 100, "max_prompt_len": 64}


@pytest.mark.parametrize("head,match", [
    ({"kind": 0}, "'kind' must be 'single' or 'multiturn', got '0'"),  # before: a ValueError traceback
    ({"kind": "pairs"}, "'kind' must be 'single' or 'multiturn'"),
    ({"version": True}, "unsupported native format version"),
    ({"max_response_len": -1}, "'max_response_len' must be positive"),
    ({"max_response_len": 2 ** 63}, "'max_response_len' of .* above the limit"),
    ({"max_prompt_len": "64"}, "'max_prompt_len' must be an integer"),
    ({"name": ["t"]}, "'name' must be a string"),
    ({"cap_source": "guess"}, "'cap_source' must be one of"),
])
def test_native_header_is_checked(tmp_path, head, match):
    f = _write(tmp_path, "t.jsonl", json.dumps({**_NATIVE_HEAD, **head}) + "\n"
               + json.dumps({"step": 0, "prompt_len": 5, "responses": [3, 4]}) + "\n")
    with pytest.raises(TraceFormatError, match=":1: .*" + match):
        load_trace(f)


@pytest.mark.parametrize("rec,match", [
    # issue 15 item 6: a capped index outside its group, a response above the header's cap
    ({"capped": [2]}, "'capped' index 2 is outside its group of 2 responses"),
    ({"capped": [-1]}, "a 'capped' index must be non-negative"),
    ({"capped": [1, 1]}, "'capped' lists an index twice"),
    ({"capped": "1"}, "'capped' must be a list"),
    ({"responses": [3, 101]}, "response 1: length 101 is above the header's max_response_len \\(100\\)"),
    ({"prompt_len": 65}, "'prompt_len' of 65 is above the header's max_prompt_len \\(64\\)"),
    ({"step": -3}, "'step' must be non-negative"),
    ({"responses": []}, "'responses' must not be empty"),
])
def test_native_records_are_checked_with_the_line(tmp_path, rec, match):
    good = {"step": 0, "prompt_len": 5, "responses": [3, 4], "capped": []}
    f = _write(tmp_path, "t.jsonl", "\n".join([json.dumps(_NATIVE_HEAD), json.dumps(good),
                                                json.dumps({**good, **rec})]) + "\n")
    with pytest.raises(TraceFormatError, match=":3: malformed record: " + match):
        load_trace(f)


@pytest.mark.parametrize("resp_change,match", [
    ({"loss": 1300}, "'loss' \\(1300\\) exceeds its length \\(1216\\)"),
    ({"capped": "no"}, "'capped' must be true or false"),
    ({"turns": []}, "'turns' must not be empty"),
    ({"len": 3001}, "length 3001 is above the header's max_response_len"),
])
def test_native_multiturn_responses_are_checked(tmp_path, resp_change, match):
    f = _write(tmp_path, "multiturn_workload_step_0.jsonl", _mt_record(0, 0, 0, 1216, [(317, 0, 40)], []) + "\n")
    out = tmp_path / "native.jsonl"
    save_trace(load_trace(f), out)
    head, rec = out.read_text().splitlines()
    rec = json.loads(rec)
    rec["responses"][0].update(resp_change)
    out.write_text(head + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(TraceFormatError, match=":2: malformed record: response 0.*" + match):
        load_trace(out)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name,text,where", [
    ("packed_lengths_step_0.jsonl", _step_line(0, 10, [5, 6]) + "\n" + DEEP + "\n", ":2: JSON nested too deeply"),
    ("paper.json", '{"0": ' + DEEP + "}", ": JSON nested too deeply"),
    ("t.jsonl", json.dumps(_NATIVE_HEAD) + "\n" + DEEP + "\n", ":2: malformed record: JSON nested too deeply"),
    ("u.jsonl", '{"turns": ' + DEEP + "}\n", ": JSON nested too deeply"),
])
def test_deep_nesting_is_a_clean_error(tmp_path, name, text, where):
    """Before: RecursionError out of json.loads."""
    f = _write(tmp_path, name, text)
    with pytest.raises(TraceFormatError, match=where):
        load_trace(f)


def test_paper_json_refuses_negative_steps_and_shrinking_contexts(tmp_path):
    f = _write(tmp_path, "p.json", json.dumps({"-1": {"input": [5], "output": [3]}}))
    with pytest.raises(TraceFormatError, match="top-level key '-1' is not a step number"):
        load_trace(f)
    g = _write(tmp_path, "q.json", json.dumps({"0": [{"input": [100, 90], "output": [50, 5]}]}))
    with pytest.raises(TraceFormatError, match="item 0 response length .* must be positive, got -5"):
        load_trace(g)
    h = _write(tmp_path, "r.json", json.dumps({"0": [{"input": [100, 120], "output": [50, 10]}]}))
    with pytest.raises(TraceFormatError, match="outputs add up to 60 tokens, more than the 30"):
        load_trace(h)  # before: loss tokens (60) above the response (30) were accepted


def _blocks_forever_check(fn, fifo):
    """Run ``fn`` in a thread; if it is still blocked on the FIFO after 10 s, open the FIFO's write
    end to release it and fail."""
    import os
    import threading

    box = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - hand it to the test thread
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail("the reader blocked on a FIFO")
    return box.get("exc")


def test_a_fifo_named_like_a_step_file_is_refused_not_read(step_folder):
    """Before: ``describe`` of this folder waited forever for a writer."""
    import os

    fifo = step_folder / "packed_lengths_step_11.jsonl"
    os.mkfifo(fifo)
    exc = _blocks_forever_check(lambda: load_trace(step_folder), fifo)
    assert isinstance(exc, TraceFormatError) and "packed_lengths_step_11.jsonl: not a regular file" in str(exc)
    exc = _blocks_forever_check(lambda: load_trace(fifo), fifo)
    assert isinstance(exc, TraceFormatError) and "not a regular file" in str(exc)


def test_a_folder_named_like_a_step_file_is_refused(step_folder):
    (step_folder / "packed_lengths_step_12.jsonl").mkdir()
    with pytest.raises(TraceFormatError, match="packed_lengths_step_12.jsonl: is a folder"):
        load_trace(step_folder)


def test_cap_source_says_where_the_cap_came_from(step_folder, tmp_path):
    assert load_trace(step_folder).cap_source == "pile-up"
    assert load_trace(step_folder, max_response_len=8192).cap_source == "stated"
    single = _write(tmp_path, "packed_lengths_step_0.jsonl", _step_line(0, 10, [5, 6, 7, 900]) + "\n")
    assert load_trace(single).cap_source == "longest"
    mt = _write(tmp_path, "multiturn_workload_step_0.jsonl", _mt_record(0, 0, 0, 50, [(200, 0, 50)], []) + "\n")
    assert load_trace(mt).cap_source == "recorded"
    out = tmp_path / "native.jsonl"
    save_trace(load_trace(single), out)
    assert load_trace(out).cap_source == "longest"  # kept by the native format
    with pytest.raises(PolytraceError, match="the stated cap must be positive"):
        load_trace(single, max_response_len=-1)


def test_partial_steps_are_flagged(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for step, groups in ((0, 4), (1, 4), (2, 1)):
        (d / f"packed_lengths_step_{step}.jsonl").write_text(
            "\n".join(_step_line(step, 10, [5, 6, 7, 8]) for _ in range(groups)) + "\n")
    trace = load_trace(d)
    assert trace.partial_flags() == [False, False, True] and trace.typical_step_size() == 16
    assert [s.step for s in trace.without_partial_steps().steps] == [0, 1]
    assert load_trace(d / "packed_lengths_step_0.jsonl").partial_flags() == [False]


def test_shared_search_r1_last_step_is_partial(polytrace_data):
    search = load_trace(polytrace_data / "search_r1/profile/multiturn_workload_log")
    assert search.partial_flags() == [False] * 5 + [True]
    assert search.steps[5].n_responses == 47 and search.typical_step_size() == 2048
    verl = load_trace(polytrace_data / "verl/profile/packed_length_log/20260610_092349")
    assert not any(verl.partial_flags()) and verl.cap_source == "longest" and verl.max_response_len == 10112


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


def test_a_missing_key_is_named_with_its_line_in_every_format(tmp_path):
    step = _write(tmp_path, "packed_lengths_step_0.jsonl",
                  _step_line(0, 10, [5, 6]) + "\n" + json.dumps({"step": 0, "input": 10}) + "\n")
    with pytest.raises(TraceFormatError, match=r":2: missing key 'output'$"):
        load_trace(step)
    mt = _write(tmp_path, "multiturn_workload_step_0.jsonl",
                json.dumps(_mt_dict()) + "\n" + json.dumps(_mt_dict(final_response_len=_DELETE)) + "\n")
    with pytest.raises(TraceFormatError, match=r":2: missing key 'final_response_len'$"):
        load_trace(mt)
    good = {"step": 0, "prompt_len": 5, "responses": [3, 4]}
    native = _write(tmp_path, "t.jsonl", json.dumps(_NATIVE_HEAD) + "\n" + json.dumps(_without(good, "responses")))
    with pytest.raises(TraceFormatError, match=r":2: malformed record: missing key 'responses'$"):
        load_trace(native)
    out = tmp_path / "native_mt.jsonl"
    save_trace(load_trace(_write(tmp_path, "mt.jsonl", _mt_record(0, 0, 0, 1216, [(317, 0, 40)], []) + "\n")), out)
    head, rec = out.read_text().splitlines()
    for drop, match in ((lambda r: r["responses"][0].pop("turns"), "response 0: missing key 'turns'"),
                        (lambda r: r["responses"][0]["turns"][0].pop("cached"),
                         "response 0 turn 0: missing key 'cached'")):
        changed = json.loads(rec)
        drop(changed)
        out.write_text(head + "\n" + json.dumps(changed) + "\n")
        with pytest.raises(TraceFormatError, match=f":2: malformed record: {match}$"):
            load_trace(out)
