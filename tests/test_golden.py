"""Behaviour preserved: ``estimate --json``, ``validate --json`` and ``validate --zero-shot --json``
recomputed for every entry of ``tests/golden/step_model.json`` (``scripts/golden_outputs.py``
wrote it before the RunSpec refactor) must match it: every number identical (floats to a relative
1e-12, the last bits a reordered sum may move) and every string, list and key the same, except the
places ``INTENDED`` names, each a change made on purpose with its before and after.

Keys the output gained since are allowed (a schema that grows, e.g. ``schema_version``); keys it
lost are not. About 35 CPU-seconds (the whole file recomputed once per session).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "step_model.json"
REL = 1e-12

# Intended changes: "entry::json.path" patterns (fnmatch) whose values may differ from the golden
# file, each with why, and its before -> after. Empty at this file's regeneration (below).
#
# History: the file was written at babb722, before the RunSpec refactor, and held through every
# refactor commit of that branch (to a1a0651) with one intended change, the separated modes pricing
# the update under the run's own recompute setting (7B on 8 trainer H100s, one-step-off update
# 6.61 -> 10.45 s; fully-async best split 6:10 at 9.57 s -> 4:12 at 11.35 s). It was then regenerated
# on the merged main after the priors' refit on the 22-log corpus (issue 36: every zero-shot number
# moves) and the calibration guards (constants the bound leaves no room for are exactly 0; a given
# GPU the log contradicts is noted), so that the next refactor starts from today's answers.
INTENDED: dict[str, str] = {}


def _script():
    spec = importlib.util.spec_from_file_location("golden_outputs", REPO / "scripts" / "golden_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def differences(old, new, where: str = "", intended=()) -> list[str]:
    """Where ``new`` differs from ``old`` (``where``: the JSON path so far), skipping paths that
    match an ``intended`` pattern; keys only ``new`` has are allowed."""
    if any(fnmatch.fnmatchcase(where, pat) for pat in intended):
        return []
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{where}: was an object, now {type(new).__name__}"]
        out = []
        for k, v in old.items():
            if k not in new:
                out.append(f"{where}.{k}: missing")
            else:
                out.extend(differences(v, new[k], f"{where}.{k}", intended))
        return out
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{where}: list of {len(old)} became {new if not isinstance(new, list) else len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{where}[{i}]", intended)]
    if isinstance(old, float) and isinstance(new, (int, float)) and not isinstance(new, bool):
        if old == new or (math.isfinite(old) and abs(new - old) <= REL * max(abs(old), abs(new))):
            return []
        return [f"{where}: {old!r} -> {new!r}"]
    if type(old) is not type(new) and not (isinstance(old, int) and isinstance(new, float) and old == new
                                           and not isinstance(old, bool)):
        return [f"{where}: {old!r} -> {new!r}"]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def test_differences_catches_a_planted_change():
    old = {"a": {"b": [1.0, 2.0, "x"]}, "c": True, "d": 3}
    assert differences(old, json.loads(json.dumps(old))) == []
    assert differences(old, {**old, "new": 1}) == []  # a grown schema is allowed
    assert differences(old, {"a": {"b": [1.0, 2.0 * (1 + 1e-9), "x"]}, "c": True, "d": 3}) == [
        ".a.b[1]: 2.0 -> 2.000000002"]
    assert differences(old, {"a": {"b": [1.0, 2.0]}, "c": True, "d": 3}) == [".a.b: list of 3 became 2"]
    assert differences(old, {"a": {"b": [1.0, 2.0, "y"]}, "c": False, "d": 3}) == [
        ".a.b[2]: 'x' -> 'y'", ".c: True -> False"]
    assert differences(old, {"a": {"b": [1.0, 2.0, "x"]}, "c": True}) == [".d: missing"]
    assert differences(old, {"a": {"b": [1.0, 2.5, "x"]}, "c": True, "d": 3}, intended=[".a.b[[]1]"]) == []


@pytest.fixture(scope="module")
def recomputed(validation_logs):
    return _script().compute(validation_logs.parent)


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())["entries"]


def test_golden_covers_the_brief(golden):
    names = list(golden)
    assert sum(n.startswith("estimate/") for n in names) >= 30
    assert sum(n.startswith("validate/") for n in names) == 9
    assert sum(n.startswith("zero_shot/") for n in names) == 9


def test_every_number_as_before(golden, recomputed):
    assert set(recomputed) == set(golden)
    problems = []
    for name, old in golden.items():
        intended = [pat.partition("::")[2] for pat in INTENDED if fnmatch.fnmatchcase(name, pat.partition("::")[0])]
        problems += [f"{name}{d}" for d in differences(old, recomputed[name], "", intended)]
    assert not problems, f"{len(problems)} differences, e.g.:\n" + "\n".join(problems[:30])
