"""Typed results across layers (issue 35 item 2): ``estimate`` and its modes return an
``EstimateResult``, ``calibrate`` a ``CalibrationResult``, ``validate --zero-shot`` a
``ZeroShotResult``, ``--compare-modes`` a ``ModeComparison``; the CLI renders their typed views and
never indexes one by string (an AST scan of ``polytrace/cli``), and each ``to_json()`` is the
``--json`` document (the calibration file for ``calibrate``), which reads back into the same result."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from polytrace.calibrate.files import CalibrationResult, calibrate_from_stage_times
from polytrace.calibrate.zeroshot import ZeroShotResult, zero_shot
from polytrace.stepmodel import compare_modes, estimate, mode_estimate
from polytrace.stepmodel.result import EstimateResult, FamilyCost, ModeComparison, Price, StageTime, StepRow

CLI = Path(__file__).resolve().parents[2] / "polytrace" / "cli"
# what returns a typed result (estimate's, validate's, impact's, calibrate's, the zero-shot score's,
# the modes compared); a name bound to their call, or a parameter annotated with one of TYPES, is one
PRODUCERS = {"estimate", "estimate_run", "mode_estimate", "estimate_mode", "estimate_calibrated", "validate", "impact",
             "calibrate_log", "calibrate_from_log", "calibrate_from_stage_times", "zero_shot", "compare_modes",
             "compare_calibrated"}
TYPES = ("EstimateResult", "ValidationResult", "ImpactResult", "CalibrationResult", "ZeroShotResult",
         "ModeComparison")
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
    # the later types: a producer's name, a conditional bound to one, an annotated parameter
    later = ("def f(a):\n    res = zero_shot(a)\n    doc = calibrate_from_log(a)\n"
             "    return res['log'], doc['scalars']\n"
             "def g(cmp: ModeComparison, c: CalibrationResult):\n    return cmp['results'], c.source['kind']\n")
    assert string_indexing(later) == ["4: doc['scalars']", "4: res['log']", "6: c.source['kind']", "6: cmp['results']"]


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_the_cli_never_indexes_a_typed_result_by_string(path):
    assert string_indexing(path.read_text(encoding="utf-8")) == []


def test_the_cli_renders_through_annotated_results():
    """The scan sees the CLI's renderers: each takes an annotated ``EstimateResult``."""
    tree = ast.parse((CLI / "compose_cmds.py").read_text(encoding="utf-8"))
    annotated = {fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                 for a in fn.args.args if a.annotation is not None and "EstimateResult" in ast.unparse(a.annotation)}
    assert {"_run_line", "_print_sync"} <= annotated
    compared = {fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                for a in fn.args.args if a.annotation is not None and "ModeComparison" in ast.unparse(a.annotation)}
    assert compared == {"_print_comparison"}


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


# ---- the later types: calibrate, validate --zero-shot, estimate --compare-modes ----------------------

SCHEMA_DOC = (CLI.parents[1] / "docs" / "json-schema.md").read_text(encoding="utf-8")


def undocumented(doc: dict) -> list[str]:
    """The document's keys docs/json-schema.md does not name."""
    return [k for k in doc if f"`{k}`" not in SCHEMA_DOC]


# the calibration file's keys, in the order files.document wrote them before the type
CALIBRATION_KEYS = ["format", "version", "scalars", "model", "gpu", "mode", "overlapped", "config", "stages",
                    "fit_error_pct", "split", "deviation", "source", "notes", "created_by"]


def test_calibrate_returns_the_type_its_json_is_the_file_and_reads_back(tmp_path):
    out = tmp_path / "cal.json"
    res = calibrate_from_stage_times("gen=30,old_log_prob=3,ref=2,update_actor=10", out, model="qwen2.5-7b",
                                     gpu="h100", gpus=8)
    assert isinstance(res, CalibrationResult)
    doc = res.to_json()
    assert list(doc) == CALIBRATION_KEYS and json.loads(out.read_text()) == doc  # the file written
    assert undocumented(doc) == [] and "CalibrationResult" in SCHEMA_DOC
    back = CalibrationResult.from_json(doc)
    assert back.to_json() == doc and back == res and back.calibration is None  # the objects are not the document
    assert res.run.gpu.slug == doc["gpu"] == "h100-sxm" and res.source["kind"] == "stage-times"
    assert (res.model_name, res.model_family) == (doc["model"]["name"], doc["model"]["family"]) == ("qwen2.5-7b",
                                                                                                   "qwen2")
    assert res.calibration.fit_error_pct.keys() == doc["fit_error_pct"].keys()
    assert res.left_out == doc["source"]["left_out"] and res.stages == ["gen", "old_log_prob", "ref", "update_actor"]


def test_zero_shot_returns_the_type_and_its_json_reads_back(validation_logs):
    res = zero_shot(validation_logs / "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log")
    assert isinstance(res, ZeroShotResult) and res.mode == "sync" and res.steps > 100
    doc = res.to_json()
    assert list(doc) == ["log", "format", "mode", "steps", "stages", "config", "notes", "accuracy", "priors"]
    assert ZeroShotResult.from_json(doc).to_json() == doc
    assert undocumented(doc) == [] and undocumented(doc["priors"]) == [] and "ZeroShotResult" in SCHEMA_DOC
    assert set(doc["accuracy"]) == {*res.stages, "step"} and doc["priors"]["logs"] == res.priors.logs > 0
    assert doc["accuracy"] is res.accuracy  # the document is the fields


def test_compare_modes_returns_the_type_and_its_json_reads_back():
    cmp = compare_modes("dapo-math-32b", "qwen2.5-7b", "h100", 8, rollout_gpus=4, **SMALL)
    assert isinstance(cmp, ModeComparison) and [r["mode"] for r in cmp.rows] == ["sync", "one-step-off",
                                                                                "fully-async"]
    doc = cmp.to_json()
    assert list(doc) == ["schema_version", "modes", "results"] and doc["modes"] is cmp.rows
    assert undocumented(doc) == [] and undocumented(cmp.rows[0]) == [] and "ModeComparison" in SCHEMA_DOC
    assert doc["results"]["one-step-off"] == {"config": cmp.results["one-step-off"].config,
                                              "summary": cmp.results["one-step-off"].summary}
    back = ModeComparison.from_json(doc)
    assert back.to_json() == doc and all(isinstance(r, EstimateResult) for r in back.results.values())
    assert back.results["sync"].mean_step_s == cmp.rows[0]["step_s"] and cmp.rows[0]["speedup"] == 1.0
