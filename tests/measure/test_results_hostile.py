"""Hostile result files (issue 17): one-line errors, no traceback, no hang, no non-finite number in
a report, and never a pass for a regression hidden behind unusable rounds.

Property tests (hypothesis, few examples to keep CI fast): arbitrary JSON values in every field the
reader knows, and arbitrary floats in rounds; the property is "a clean one-line PolytraceError or
a valid report whose numbers are all finite"."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from _results_synth import SHAPES, cli_main, make_result, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytrace.errors import PolytraceError
from polytrace.measure.results import (
    GatePolicy,
    compare,
    format_markdown,
    format_text,
    load_result,
    parse_result,
    validation,
)
from polytrace.measure.results.stats import bootstrap_log_medians, median_of

TAIL = SHAPES[4][0]
TAIL_NAME = f"test_token_logprobs[triton-{TAIL}]"
TAIL_ID = f"logprob/token_logprobs/triton/fwd/{TAIL}"


def _tail(obj: dict) -> dict:
    return next(b for b in obj["benchmarks"] if b["name"] == TAIL_NAME)


def _run(capsys, argv):
    try:
        code = cli_main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


BAD_ROUNDS = {"nan": [float("nan")], "zero": [0.0], "negative": [-0.03], "inf": [float("inf")],
              "tiny": [1e-300], "huge": [1e308], "string": ["0.03"], "bool": [True], "null": [None],
              "one-nan-among-good": "one-nan"}


@pytest.mark.parametrize("where", ["candidate", "baseline"])
@pytest.mark.parametrize("kind", list(BAD_ROUNDS))
def test_a_2x_regression_behind_unusable_rounds_never_passes(tmp_path, capsys, where, kind):
    base = make_result(seed=1)
    cand = make_result(seed=2, slowdown={TAIL: 2.0})
    target = _tail(cand if where == "candidate" else base)
    good = target["stats"]["data"]
    target["stats"]["data"] = good[:-1] + [float("nan")] if kind == "one-nan-among-good" else BAD_ROUNDS[kind] * 30
    b, c = write(tmp_path / "base.json", base), write(tmp_path / "cand.json", cand)
    code, out, err = _run(capsys, ["gate", str(b), str(c)])
    assert code == 2 and "PASS" not in out, out + err
    assert err.startswith("polytrace: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert f"{where[:4]}.json: benchmark {TAIL_NAME!r}: 'stats.data': round" in err


@pytest.mark.parametrize("where", ["candidate", "baseline"])
@pytest.mark.parametrize("kind", ["absent", "empty", "null"])
def test_a_2x_regression_without_rounds_is_an_error_naming_it(tmp_path, capsys, where, kind):
    base = make_result(seed=1)
    cand = make_result(seed=2, slowdown={TAIL: 2.0})
    stats = _tail(cand if where == "candidate" else base)["stats"]
    if kind == "absent":
        del stats["data"]
    else:
        stats["data"] = [] if kind == "empty" else None
    b, c = write(tmp_path / "base.json", base), write(tmp_path / "cand.json", cand)
    code, out, _ = _run(capsys, ["gate", str(b), str(c), "--force"])  # --force does not make it a pass
    assert code == 2 and out.startswith("polytrace gate: REFUSED (1 error)")
    assert f"ERROR: 1 gated benchmark(s) have no raw rounds in the {where}" in out and TAIL_ID in out
    # a control without rounds cannot hide one of ours: it is listed, the gate still decides on ours
    base2, cand2 = make_result(seed=1), make_result(seed=2, slowdown={TAIL: 2.0})
    del next(x for x in cand2["benchmarks"] if x["extra_info"]["provider"] == "torch")["stats"]["data"]
    report = compare(parse_result(base2), parse_result(cand2))
    assert report.exit_code == 1 and len(report.of("no-data")) == 1


def _bench_in_memory(rounds: list[float]):
    r = parse_result(make_result(seed=1, shapes=SHAPES[:1], providers=[("triton", "ours")]))
    b = r.benchmarks[0]
    b.rounds = np.asarray(rounds, dtype=np.float64)
    return r


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), 1e-300, 1e308])
def test_gate_arithmetic_is_safe_for_results_built_in_memory(value):
    # ``polytrace ab`` hands results to the gate without a file: the gate checks rounds itself
    good = _bench_in_memory([2e-3] * 10)
    bad = _bench_in_memory([value] * 5 + [4e-3] * 5)
    for report in (compare(good, bad), compare(bad, good)):
        assert report.exit_code == 2 and "unusable rounds" in report.errors[0]
        _assert_all_finite(report.to_dict())
        format_text(report), format_markdown(report)


def test_extreme_but_valid_rounds_give_finite_numbers():
    lo, hi = validation.MIN_ROUND_S, validation.MAX_ROUND_S
    report = compare(_bench_in_memory([lo] * 9), _bench_in_memory([hi] * 9))
    assert report.exit_code == 1 and report.comparisons[0].change == pytest.approx(hi / lo - 1)
    _assert_all_finite(report.to_dict())
    assert median_of(np.array([1.7e308, 1.7e308])) == 1.7e308  # numpy's median overflows to inf here
    assert np.isfinite(bootstrap_log_medians(np.array([1e-300, 1e308, 1.0]), 100, np.random.default_rng(0))).all()


def _nested(depth: int) -> str:
    return '{"benchmarks": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [100_000, 40])
def test_deeply_nested_json_is_refused_in_one_line(tmp_path, capsys, depth):
    p = tmp_path / "deep.json"
    p.write_text(_nested(depth))
    for argv in (["results", "show", str(p)], ["gate", str(p), str(p)]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and "deep.json: JSON nested" in err and err.count("\n") == 1, err


def _mutated(path: list, value) -> dict:
    obj = make_result(seed=1)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


WRONG = [  # (path into the file, bad value, what the one-line error must say)
    (["polytrace_sources"], {"a": 1}, "'polytrace_sources' must be a list of at most 10,000 strings"),
    (["polytrace_sources"], "x.json", "'polytrace_sources' must be a list"),
    (["datetime"], 20261102, "'datetime' must be a string, got 20261102"),
    (["machine_info"], [], "'machine_info' must be an object"),
    (["machine_info", "polytrace"], "h200", "'machine_info.polytrace' must be an object"),
    (["machine_info", "polytrace", "kernel_hashes"], ["aaaa"], "'machine_info.polytrace.kernel_hashes' must be"),
    (["machine_info", "polytrace", "kernel_hashes"], {"logprob": 7}, "kernel_hashes.logprob' must be a string"),
    (["machine_info", "polytrace", "measured_on"], "tpu", "'machine_info.polytrace.measured_on' must be one of"),
    (["machine_info", "polytrace", "gpu_name"], None, None),  # null: allowed, means unknown
    (["benchmarks", 0], 5, "benchmarks[0] must be an object, got 5"),
    (["benchmarks", 1, "name"], "", "benchmarks[1] has no 'name'"),
    (["benchmarks", 0, "extra_info"], [1, 2], "'extra_info' must be an object, got a list of 2 item(s)"),
    (["benchmarks", 0, "stats"], "fast", "'stats' must be an object"),
    (["benchmarks", 0, "stats", "median"], -0.5, "'stats.median' must be a number in [1e-09, 1e+06]"),
    (["benchmarks", 0, "extra_info", "weight"], "abc", "'extra_info.weight' must be a number"),
    (["benchmarks", 0, "extra_info", "weight"], float("nan"), "'extra_info.weight' must be a number"),
    (["benchmarks", 0, "extra_info", "seed"], 2**70, "'extra_info.seed' must be an integer"),
    (["benchmarks", 0, "extra_info", "step"], 1.5, "'extra_info.step' must be an integer"),
    (["benchmarks", 0, "extra_info", "flops"], 10**400, "'extra_info.flops' must be a number"),
    (["benchmarks", 0, "extra_info", "provider_kind"], "mine", "'extra_info.provider_kind' must be one of"),
    (["benchmarks", 0, "extra_info", "family"], {"x": 1}, "'extra_info.family' must be a string"),
    (["benchmarks", 0, "extra_info", "shape"], "4096", "'extra_info.shape' must be an object"),
    (["benchmarks", 0, "extra_info", "pct_peak_hbm"], float("inf"), "'extra_info.pct_peak_hbm' must be"),
]


@pytest.mark.parametrize("path,value,needle", WRONG, ids=[".".join(map(str, p)) for p, _, _ in WRONG])
def test_wrong_types_are_one_line_errors_naming_file_and_benchmark(tmp_path, capsys, path, value, needle):
    f = write(tmp_path / "odd.json", _mutated(path, value))
    code, out, err = _run(capsys, ["results", "show", str(f)])
    if needle is None:
        assert code == 0, err
        return
    assert code == 2 and err.startswith(f"polytrace: error: {f}: ") and err.count("\n") == 1, err
    assert needle in err, err
    if path[0] == "benchmarks" and path[2:] and path[2] != "name":
        assert "benchmark 'test_token_logprobs[" in err


def test_only_regular_files_are_read(tmp_path, capsys):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    code, _, err = _run(capsys, ["results", "show", str(fifo)])  # would block forever on open()
    assert code == 2 and "run.json: not a regular file" in err
    folder = tmp_path / "run"
    folder.mkdir()
    os.mkfifo(folder / "a.json")
    write(folder / "b.json", make_result())
    assert len(load_result(folder).benchmarks) == 10  # the FIFO is not a result file of the folder


def test_ls_skips_what_it_cannot_read(tmp_path, capsys):
    from polytrace.measure.results import store_result

    root = tmp_path / "results"
    store_result(write(tmp_path / "r.json", make_result()), root)
    tuning = root / "tuning" / "h200"
    tuning.mkdir(parents=True)
    (tuning / "deep.json").write_text(_nested(100_000))
    (tuning / "list.json").write_text("[1, 2]")
    (tuning / "odd.json").write_text('{"configs": 5}')
    os.mkfifo(tuning / "fifo.json")
    code, out, err = _run(capsys, ["results", "ls", "--root", str(root)])
    assert code == 0 and err == "" and "2026-11-02_abc123_logprob.json" in out and "tuning" not in out


def test_oversized_files_are_refused_before_reading(tmp_path, monkeypatch):
    f = write(tmp_path / "big.json", make_result())
    monkeypatch.setattr(validation, "MAX_RESULT_BYTES", 1000)
    with pytest.raises(PolytraceError, match="big.json: .* bytes is too large"):
        load_result(f)


def test_the_cli_never_prints_a_traceback_for_a_deep_file(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text(_nested(100_000))
    proc = subprocess.run([sys.executable, "-m", "polytrace", "gate", str(p), str(p)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# ---- properties ------------------------------------------------------------------------------

def _assert_all_finite(node, where="report"):
    if isinstance(node, float):
        assert math.isfinite(node), where
    elif isinstance(node, dict):
        for k, v in node.items():
            _assert_all_finite(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _assert_all_finite(v, f"{where}[{i}]")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8)
SMALL = dict(seed=1, shapes=SHAPES[:2], n_rounds=8)
FIELD_PATHS = [["benchmarks"], ["machine_info"], ["datetime"], ["polytrace_sources"],
               *[["machine_info", "polytrace", k] for k in
                 ("gpu_name", "gpu_slug", "measured_on", "commit", "kernel_hashes", "torch_version", "suite_hash")],
               *[["benchmarks", 0, k] for k in ("name", "fullname", "extra_info", "stats")],
               ["benchmarks", 0, "stats", "data"], ["benchmarks", 0, "stats", "median"],
               *[["benchmarks", 0, "extra_info", k] for k in
                 ("family", "kernel", "provider", "provider_kind", "mode", "shape", "shape_id", "profile", "seed",
                  "step", "weight", "flops", "bytes_moved", "roofline", "kernel_hash", "measured_on",
                  "pct_peak_hbm")]]


def _clean_error_or_valid_report(text: str, base_obj: dict):
    try:
        cand = parse_result(validation.parse_json_text(text, "cand.json"), "cand.json")
    except PolytraceError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("cand.json")
        return
    report = compare(parse_result(base_obj, "base.json"), cand, policy=GatePolicy(force=True))
    assert report.exit_code in (0, 1, 2, 3)
    _assert_all_finite(report.to_dict())
    format_text(report, show_all=True), format_markdown(report)  # renders without an exception


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(FIELD_PATHS), value=JSON_VALUES)
def test_property_any_json_value_in_any_field(path, value):
    base_obj = make_result(**SMALL)
    obj = copy.deepcopy(base_obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    _clean_error_or_valid_report(json.dumps(obj), base_obj)


ROUND_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.floats(min_value=1e-9, max_value=1e6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base_rounds=st.lists(ROUND_FLOATS, max_size=12), cand_rounds=st.lists(ROUND_FLOATS, max_size=12))
def test_property_any_floats_in_rounds(base_rounds, cand_rounds):
    base_obj, cand_obj = make_result(**SMALL), make_result(**{**SMALL, "seed": 2})
    base_obj["benchmarks"][0]["stats"]["data"] = base_rounds
    cand_obj["benchmarks"][0]["stats"]["data"] = cand_rounds
    try:
        base = parse_result(validation.parse_json_text(json.dumps(base_obj), "base.json"), "base.json")
    except PolytraceError as exc:
        assert "\n" not in str(exc) and "'stats.data'" in str(exc)
        return
    _clean_error_or_valid_report(json.dumps(cand_obj), base_obj)
    report = compare(base, base)
    _assert_all_finite(report.to_dict())
