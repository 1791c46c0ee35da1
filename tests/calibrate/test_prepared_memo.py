"""``tests/_prepared.py``: the memo of ``validate.prepare`` that the golden and ladder tests use
must answer exactly what a fresh call does, and nothing a different call would."""

from __future__ import annotations

import os
import pickle

from _prepared import memoize


def _counting():
    calls = []

    def prepare(path, overrides=None, window: int = 10):
        calls.append((str(path), overrides, window))
        return {"path": str(path), "text": open(path).read(), "window": window, "notes": [f"call {len(calls)}"]}

    return prepare, calls


def test_a_repeated_call_is_answered_from_the_memo_with_a_copy(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("step:1\n")
    prepare, calls = _counting()
    memo = memoize(prepare)
    first = memo(log)
    first["notes"].append("a caller's note")  # validate appends to the notes it is given
    again = memo(str(log), None, 10)  # the same call, spelled with the defaults
    assert len(calls) == 1
    assert again == {"path": str(log), "text": "step:1\n", "window": 10, "notes": ["call 1"]}
    assert again is not first and again["notes"] is not first["notes"]


def test_every_input_of_prepare_is_in_the_key(tmp_path, monkeypatch):
    log = tmp_path / "a.log"
    log.write_text("step:1\n")
    prepare, calls = _counting()
    memo = memoize(prepare)
    memo(log)
    memo(log, window=5)
    memo(log, "an override")
    assert len(calls) == 3
    (tmp_path / "a.config.yaml").write_text("x: 1\n")  # a companion file appears beside the log
    memo(log)
    assert len(calls) == 4
    log.write_text("step:1\nstep:2\n")  # the log itself changes
    assert memo(log)["text"] == "step:1\nstep:2\n"
    monkeypatch.setenv("POLYTRACE_RESULTS_DIR", str(tmp_path))
    memo(log)
    assert len(calls) == 6
    other, other_calls = _counting()  # another function never reads this one's answers
    memoize(other)(log)
    assert len(other_calls) == 1


def test_a_folder_is_not_memoized(tmp_path):
    calls = []
    memo = memoize(lambda path, overrides=None, window=10: calls.append(path) or len(calls))
    assert [memo(tmp_path), memo(tmp_path)] == [1, 2]


def test_prepare_is_a_pure_function_of_its_inputs(validation_logs):
    """What the memo relies on: two calls on one log (the smallest ladder rung, 0.4 CPU-s) give the
    same log, run, notes, rows and split, field for field and byte for byte, a call with
    ``Overrides()`` the same as one with none, and the memo's copy equals them."""
    from polytrace.calibrate.validate import prepare

    path = next((validation_logs / "ladder").glob("Qwen2.5-0.5B-*.log"))
    from polytrace.calibrate.logconfig import Overrides

    a, b = prepare(path), prepare(path)
    assert [x == y for x, y in zip(a, b)] == [True] * 5
    assert pickle.dumps(a) == pickle.dumps(b)
    # the memo keys no overrides as Overrides(): the two spellings must price alike
    assert pickle.dumps(prepare(path, Overrides())) == pickle.dumps(a)
    memo = memoize(prepare)
    memo(path)
    copy = memo(os.fspath(path))
    assert [x == y for x, y in zip(copy, a)] == [True] * 5
    # the memo keeps a pickle and hands out its unpickling, which may share objects (interned names)
    # where a fresh call built equal ones: byte for byte against a fresh call taken the same way
    assert pickle.dumps(copy) == pickle.dumps(pickle.loads(pickle.dumps(a)))
