"""Typed results across layers (issue 35 item 2): ``estimate`` and its modes return an
``EstimateResult``; the CLI renders its typed views and never indexes it by string (an AST scan
of ``polytrace/cli``), and its ``to_json()`` is the ``--json`` document, which reads back into the
same result."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from polytrace.stepmodel import estimate, mode_estimate
from polytrace.stepmodel.result import EstimateResult, FamilyCost, Price, StageTime, StepRow

CLI = Path(__file__).resolve().parents[2] / "polytrace" / "cli"
# what returns a typed result (estimate's, validate's, impact's); a name bound to their call, or a
# parameter annotated with one of TYPES, is one
PRODUCERS = {"estimate", "estimate_run", "mode_estimate", "estimate_mode", "estimate_calibrated", "validate", "impact"}
TYPES = ("EstimateResult", "ValidationResult", "ImpactResult")
SMALL = dict(steps=[0], prompts=16, results_root="/nonexistent")


def _called(node) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _root(node):
    """The name an attribute chain (``res.summary.x``) or a call on it starts from."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _own_nodes(scope):
    """The nodes of a function (nested ones included), or of a module outside its functions:
    a name means one thing per function."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        yield n
        if not (isinstance(scope, ast.Module) and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            todo.extend(ast.iter_child_nodes(n))


def string_indexing(source: str) -> list[str]:
    """``line: text`` of each string subscript (``res["summary"]``, ``res.summary["x"]``) or
    ``.get("...")`` on an estimate result in ``source``."""
    tree = ast.parse(source)
    found = []
    for fn in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        results = set()
        if not isinstance(fn, ast.Module):
            results |= {a.arg for a in fn.args.args + fn.args.kwonlyargs
                        if a.annotation is not None and any(t in ast.unparse(a.annotation) for t in TYPES)}
        for n in _own_nodes(fn):
            if isinstance(n, ast.Assign) and _called(n.value) in PRODUCERS:
                results |= {t.id for t in n.targets if isinstance(t, ast.Name)}

        def is_result(node, results=frozenset(results)) -> bool:
            node = _root(node)
            return (isinstance(node, ast.Name) and node.id in results) or _called(node) in PRODUCERS

        for n in _own_nodes(fn):
            keyed = (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
                     and isinstance(n.slice.value, str) and is_result(n.value))
            got = (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                   and n.args and isinstance(n.args[0], ast.Constant) and is_result(n.func.value))
            if keyed or got:
                found.append(f"{n.lineno}: {ast.unparse(n)}")
    return sorted(set(found))


def test_the_scan_finds_a_planted_string_index():
    planted = ("def f(args):\n    res = mode_estimate(*args)\n    return res['summary'], res.summary['mean_step_s']\n"
               "def g(result: EstimateResult):\n    return result.get('range'), estimate(1)['rows']\n")
    assert string_indexing(planted) == ["3: res.summary['mean_step_s']", "3: res['summary']",
                                        "5: estimate(1)['rows']", "5: result.get('range')"]
    assert string_indexing("def f(doc):\n    return doc['summary']\n") == []  # a plain dict is no result
    # a name is a result only in the function that bound it
    assert string_indexing("def f(a):\n    res = validate(a)\ndef g(res):\n    return res['x']\n") == []
    assert string_indexing("def f(a):\n    return validate(a)['accuracy'], impact(a).get('line')\n") == [
        "2: impact(a).get('line')", "2: validate(a)['accuracy']"]


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_the_cli_never_indexes_a_typed_result_by_string(path):
    assert string_indexing(path.read_text(encoding="utf-8")) == []


def test_the_cli_renders_through_annotated_results():
    """The scan sees the CLI's renderers: each takes an annotated ``EstimateResult``."""
    tree = ast.parse((CLI / "compose_cmds.py").read_text(encoding="utf-8"))
    annotated = {fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                 for a in fn.args.args if a.annotation is not None and "EstimateResult" in ast.unparse(a.annotation)}
    assert {"_run_line", "_print_sync"} <= annotated


@pytest.fixture(scope="module")
def sync():
    return estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, **SMALL)


def test_estimate_returns_the_type_and_its_json_reads_back(sync):
    assert isinstance(sync, EstimateResult) and sync.mode == "sync"
    doc = sync.to_json()
    assert EstimateResult.from_json(doc).to_json() == doc
    assert doc["schema_version"] == 1 and "range" not in doc and "guarded" not in doc  # None: absent
    assert doc["summary"] is sync.summary and doc["rows"] is sync.rows  # the document is the fields


def test_the_typed_views_say_what_the_document_says(sync):
    doc = sync.to_json()
    stages = {st.name: st for st in sync.stages}
    used = {s for s, v in doc["rows"][0]["stages_s"].items() if v > 0}
    assert set(stages) == used and all(isinstance(st, StageTime) for st in stages.values())
    for name, st in stages.items():
        assert st.mean_s == doc["summary"]["mean_stages_s"][name] and st.share == doc["summary"]["stage_share"][name]
    fams = sync.families
    assert set(fams) == set(doc["summary"]["families"]) and all(isinstance(f, FamilyCost) for f in fams.values())
    assert all(f.price is Price(doc["summary"]["families"][k]["status"]) for k, f in fams.items())
    assert fams["gemm"].s == doc["summary"]["families"]["gemm"]["s"]
    (row,) = sync.steps
    assert isinstance(row, StepRow) and row.step == 0 and row.step_s == doc["rows"][0]["step_s"]
    assert row.trainer_rank_wait_share == doc["rows"][0]["idle"]["trainer_rank_wait_share"]
    assert sync.mean_step_s == doc["summary"]["mean_step_s"] and sync.setting("n_gpus") == 8
    assert sync.setting("no such setting", "x") == "x"


def test_a_separated_mode_is_the_same_type_and_round_trips():
    res = mode_estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, mode="one-step-off", rollout_gpus=4, **SMALL)
    assert isinstance(res, EstimateResult) and res.mode == "one-step-off" and res.families == {}
    doc = res.to_json()
    assert doc["memory_sides"]["trainer"] == doc["memory"] and "providers" not in doc
    assert EstimateResult.from_json(doc).to_json() == doc
    assert res.mode_block["rollout_gpus"] == 4


def test_a_key_a_later_version_adds_is_kept():
    doc = {"schema_version": 1, "profile": "p", "config": {}, "model": {}, "gpu": {}, "seed": 0, "source": "s",
           "rows": [], "summary": {}, "memory": {}, "warnings": [], "later": {"x": 1}}
    res = EstimateResult.from_json(doc)
    assert res.extra == {"later": {"x": 1}} and res.to_json() == doc
