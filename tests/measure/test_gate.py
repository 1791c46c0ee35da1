"""The regression gate on synthetic result files with known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _results_synth import SHAPES, make_result, write
from _results_synth import cli_main as main

from polytrace.measure.results import GatePolicy, Rule, compare, format_markdown, format_text, load_result
from polytrace.measure.results.gate import min_p_value

TAIL = SHAPES[4][0]  # weight 0.02


def _pair(tmp_path, base_kw=None, cand_kw=None):
    b = write(tmp_path / "base.json", make_result(seed=1, **(base_kw or {})))
    c = write(tmp_path / "cand.json", make_result(seed=2, **(cand_kw or {})))
    return b, c


def _status(report, shape_id, provider="triton"):
    return next(c for c in report.comparisons if c.provider == provider and c.shape_id == shape_id).status


def test_planted_10pct_slowdown_on_a_long_tail_shape_fails(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"slowdown": {TAIL: 1.10}})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 1
    assert [x.shape_id for x in report.gated_regressions] == [TAIL]
    reg = report.gated_regressions[0]
    assert reg.p_value < 0.002 and 0.05 < reg.change < 0.15
    assert all(_status(report, s) == "unchanged" for s, _, _ in SHAPES[:4])
    assert "FAIL" in report.verdict


def test_noise_only_passes(tmp_path):
    b, c = _pair(tmp_path)
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 0, format_text(report)
    assert not report.of("regression") and not report.of("improvement")
    assert report.verdict == "PASS"


def test_significant_but_small_shift_is_not_a_regression(tmp_path):
    # 2% slower everywhere with 0.5% noise: the U test is significant, the threshold is not reached
    b, c = _pair(tmp_path, {"noise": 0.005}, {"noise": 0.005, "slowdown": {s: 1.02 for s, _, _ in SHAPES}})
    report = compare(load_result(b), load_result(c))
    assert all(x.p_value < 0.002 for x in report.comparisons if x.provider == "triton")
    assert report.exit_code == 0
    # but a 1% threshold catches it
    assert compare(load_result(b), load_result(c), rule=Rule(threshold=0.01)).exit_code == 1


def test_large_noisy_shift_is_not_significant_with_few_rounds(tmp_path):
    # 8% shift, 30% noise, 8 rounds: the median moves past the threshold but the test cannot tell
    b, c = _pair(tmp_path, {"noise": 0.3, "n_rounds": 8}, {"noise": 0.3, "n_rounds": 8, "slowdown": {TAIL: 1.08}})
    report = compare(load_result(b), load_result(c))
    assert not report.gated_regressions


def test_improvement_is_reported_and_passes(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"slowdown": {SHAPES[0][0]: 0.8}})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 0
    assert [x.shape_id for x in report.of("improvement")] == [SHAPES[0][0]]


def test_trace_weighted_geomean_matches_hand_computation(tmp_path):
    # no noise on rounds other than a tiny jitter: medians are exact
    b, c = _pair(tmp_path, {"noise": 1e-6}, {"noise": 1e-6, "slowdown": {SHAPES[0][0]: 1.25, TAIL: 2.0}})
    report = compare(load_result(b), load_result(c))
    agg = next(a for a in report.aggregates if a.provider == "triton")
    weights = np.array([w for _, w, _ in SHAPES])
    weights = weights / weights.sum()
    expected = math.exp(weights[0] * -math.log(1.25) + weights[4] * -math.log(2.0))
    assert agg.speedup == pytest.approx(expected, rel=1e-4)
    assert agg.status == "regression" and agg.ci_high < 1
    torch_agg = next(a for a in report.aggregates if a.provider == "torch")
    assert torch_agg.speedup == pytest.approx(1.0, rel=1e-4) and not torch_agg.gated


def test_weights_are_normalised_over_matched_benchmarks(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"shapes": SHAPES[:2]})
    report = compare(load_result(b), load_result(c))
    ws = [x.weight for x in report.comparisons if x.provider == "triton" and x.status not in ("missing", "new")]
    assert sum(ws) == pytest.approx(1.0)
    assert ws[0] == pytest.approx(0.40 / 0.70)
    assert len(report.of("missing")) == 6 and report.exit_code == 0
    assert compare(load_result(b), load_result(c), policy=GatePolicy(fail_on_missing=True)).exit_code == 1


def test_new_benchmarks_are_listed(tmp_path):
    b, c = _pair(tmp_path, {"shapes": SHAPES[:3]})
    report = compare(load_result(b), load_result(c))
    assert sorted({x.shape_id for x in report.of("new")}) == sorted(s for s, _, _ in SHAPES[3:])


def test_control_provider_drift_warns_but_does_not_fail(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"provider_slowdown": {"torch": 1.2}})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 0
    assert any("control provider logprob/token_logprobs/fwd/torch" in w for w in report.warnings)
    assert [x.status for x in report.comparisons if x.provider == "torch"] == ["regression"] * len(SHAPES)
    assert compare(load_result(b), load_result(c), policy=GatePolicy(gate_all=True)).exit_code == 1


def test_refuses_different_gpus_unless_forced(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"gpu": "NVIDIA H100 80GB HBM3", "slowdown": {TAIL: 1.1}})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 2 and "different GPUs" in report.refusals[0]
    assert compare(load_result(b), load_result(c), policy=GatePolicy(force=True)).exit_code == 1


def test_refuses_cpu_interpreter_timings(tmp_path):
    b, c = _pair(tmp_path, {"measured_on": "cpu-interpreter", "gpu": "cpu"},
                 {"measured_on": "cpu-interpreter", "gpu": "cpu"})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 2 and "CPU-interpreter" in report.refusals[0]
    assert compare(load_result(b), load_result(c), policy=GatePolicy(force=True)).exit_code == 0


def test_refuses_a_changed_workload_definition(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"profile_seed": 7})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 2 and "different workload" in report.refusals[0]


def test_changed_kernel_hash_is_compared_and_noted(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"kernel_hash": "bbbb", "slowdown": {TAIL: 1.1}})
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 1 and not report.refusals
    assert any("kernel source changed in: logprob (aaaa -> bbbb)" in n for n in report.notes)
    # same hash + regression: the gate points at the environment
    b, c = _pair(tmp_path, cand_kw={"slowdown": {TAIL: 1.1}})
    assert any("did not change" in w for w in compare(load_result(b), load_result(c)).warnings)


def test_underpowered_comparisons_are_inconclusive_not_passed(tmp_path):
    assert min_p_value(3, 3) == pytest.approx(0.1)
    b, c = _pair(tmp_path, {"n_rounds": 3}, {"n_rounds": 3, "slowdown": {TAIL: 1.3}})
    report = compare(load_result(b), load_result(c))
    assert _status(report, TAIL) == "inconclusive" and report.exit_code == 3
    comp = next(x for x in report.comparisons if x.provider == "triton" and x.shape_id == TAIL)
    assert "3 vs 3 rounds cannot reach p < 0.002" in comp.note and comp.ci_low is None
    assert any("inconclusive" in w and "POLYTRACE_BENCH_ROUNDS" in w for w in report.warnings)


def test_refuses_files_without_raw_rounds(tmp_path):
    b, c = _pair(tmp_path)
    for p in (b, c):
        obj = json.loads(p.read_text())
        for bench in obj["benchmarks"]:
            del bench["stats"]["data"]
        p.write_text(json.dumps(obj))
    report = compare(load_result(b), load_result(c))
    assert report.exit_code == 2 and any("--benchmark-save-data" in e for e in report.errors)
    # --force never passes it
    assert compare(load_result(b), load_result(c), policy=GatePolicy(force=True)).exit_code == 2


def test_cli_exit_codes_and_outputs(tmp_path, capsys):
    b, c = _pair(tmp_path, cand_kw={"slowdown": {TAIL: 1.10}})
    assert main(["gate", str(b), str(c)]) == 1
    text = capsys.readouterr().out
    assert "FAIL: 1 regression" in text and TAIL in text
    assert main(["gate", str(b), str(c), "--markdown"]) == 1
    md = capsys.readouterr().out
    assert md.startswith("### polytrace gate: **FAIL**") and "#### Regressions (1)" in md
    assert "| benchmark" in md and "<details>" in md
    assert main(["gate", str(b), str(c), "--json", "--threshold", "15%"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0 and data["threshold"] == 0.15
    b2, c2 = _pair(tmp_path)
    assert main(["gate", str(b2), str(c2)]) == 0
    capsys.readouterr()


def test_cli_bad_input_is_one_line_error(tmp_path, capsys):
    assert main(["gate", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("polytrace: error:") and "nope.json" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["gate", str(bad), str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    b, c = _pair(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["gate", str(b), str(c), "--threshold", "lots"])
    assert exc.value.code == 2 and "--threshold" in capsys.readouterr().err


def test_markdown_shows_refusal(tmp_path):
    b, c = _pair(tmp_path, cand_kw={"gpu": "NVIDIA A100-SXM4-80GB"})
    md = format_markdown(compare(load_result(b), load_result(c)))
    assert "**REFUSED**" in md and "different GPUs" in md
