"""Trace readers: every format, detection, the native round trip, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polytrace import load_trace, save_trace
from polytrace.errors import PolytraceError, TraceFormatError
from polytrace.trace import dumps_trace


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
