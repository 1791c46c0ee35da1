"""The gate review's holes (issue 12), each a case that passed before and must not now.

Rounds here are deterministic: ``spread`` times the normal quantiles of (i + 0.5) / n, so every
member of a synthetic file has the same p-value and an exact median, and no test depends on a
lucky seed. With 30 rounds, a spread of 0.15 and an 8% shift the U test gives p = 0.059 (not
significant at 0.002, nor at 0.05); a spread of 0.12 gives p = 0.019 (significant at 0.05 only).
"""

from __future__ import annotations

import numpy as np
import pytest
from _results_synth import cli_main, make_result, write
from scipy.stats import norm

from polytrace.measure.results import GatePolicy, Rule, compare, format_markdown, format_text, parse_result
from polytrace.measure.results.gate import min_p_value

N_ROUNDS = 30
TOKEN_SHAPES = [f"tokens={1024 * (i + 1)}" for i in range(8)]


def rounds(median: float, factor: float = 1.0, spread: float = 0.15, n: int = N_ROUNDS, rotate: int = 0):
    z = norm.ppf((np.arange(n) + 0.5) / n)
    return np.roll(median * factor * np.exp(spread * z), rotate)  # order does not matter to the gate


def entry(shape_id: str, r: np.ndarray, *, family="logprob", kernel="token_logprobs", mode="fwd",
          provider="triton", kind="ours", weight=None, shape=None) -> dict:
    return {"name": f"test_{kernel}[{provider}-{mode}-{shape_id}]",
            "fullname": f"suites/test_{family}.py::test_{kernel}[{provider}-{mode}-{shape_id}]",
            "extra_info": {"family": family, "kernel": kernel, "provider": provider, "provider_kind": kind,
                           "mode": mode, "shape": shape or {}, "shape_id": shape_id, "profile": "dapo-math-32b",
                           "seed": 0, "step": 0, "weight": weight, "measured_on": "cuda",
                           "device_name": "NVIDIA H200"},
            "stats": {"median": float(np.median(r)), "rounds": int(r.size), "data": [float(x) for x in r]}}


def result_file(benchmarks: list[dict], commit: str = "abc") -> dict:
    obj = make_result(shapes=[], commit=commit)  # the machine block the suites write, no benchmarks
    obj["benchmarks"] = benchmarks
    return obj


def token_members(factor=1.0, spread=0.15, mode="fwd", provider="triton", kind="ours", n=N_ROUNDS):
    return [entry(s, rounds(1e-3 * (i + 1), factor, spread, n, rotate=i), mode=mode, provider=provider, kind=kind,
                  weight=1 / len(TOKEN_SHAPES)) for i, s in enumerate(TOKEN_SHAPES)]


def gate(base: list[dict], cand: list[dict], **kw):
    return compare(parse_result(result_file(base), "base.json"), parse_result(result_file(cand), "cand.json"), **kw)


def test_aggregate_only_regression_fails_the_gate():
    # every shape 8% slower, none significant alone (each inconclusive): only the weighted mean can catch it
    report = gate(token_members(), token_members(1.08))
    comps = [c for c in report.comparisons if c.provider == "triton"]
    assert all(c.status == "inconclusive" and 0.05 < c.p_value < 0.07 for c in comps)
    assert not report.gated_regressions
    agg = report.aggregates[0]
    assert (agg.family, agg.kernel, agg.mode, agg.provider) == ("logprob", "token_logprobs", "fwd", "triton")
    assert agg.status == "regression" and agg.speedup == pytest.approx(1 / 1.08, rel=1e-6) and agg.ci_high < 1
    assert report.exit_code == 1 and report.verdict == "FAIL: 1 weighted-mean regression"


def test_session_level_shift_fails_and_points_at_the_controls():
    # the whole candidate session is 8% slower, ours and the torch control alike
    base = token_members() + token_members(provider="torch", kind="baseline")
    cand = token_members(1.08) + token_members(1.08, provider="torch", kind="baseline")
    report = gate(base, cand)
    assert not report.gated_regressions and report.exit_code == 1
    assert [(a.provider, a.gated, a.status) for a in report.aggregates] == [
        ("torch", False, "regression"), ("triton", True, "regression")]  # the control warns, ours fails
    assert any("control provider logprob/token_logprobs/fwd/torch" in w and "+8.0%" in w for w in report.warnings)
    assert any("logprob/token_logprobs/fwd/triton is +8.0% slower and its controls moved alike (torch +8.0%)" in w
               and "session-level shift" in w for w in report.warnings)
    # ours alone slower: no such hint
    alone = gate(base, token_members(1.08) + token_members(provider="torch", kind="baseline"))
    assert alone.exit_code == 1 and not any("session-level" in w for w in alone.warnings)


def test_alpha_is_the_one_passed(tmp_path, capsys):
    # one shape, 8% slower, p = 0.019: significant at alpha 0.05, not at the default 0.002
    base = [entry(TOKEN_SHAPES[0], rounds(1e-3, spread=0.12), weight=1.0)]
    cand = [entry(TOKEN_SHAPES[0], rounds(1e-3, 1.08, spread=0.12), weight=1.0)]
    default = gate(base, cand)
    assert default.alpha == 0.002 and default.exit_code == 3  # not significant, not bounded within 5%
    assert default.comparisons[0].status == "inconclusive" and 0.015 < default.comparisons[0].p_value < 0.025
    loose = gate(base, cand, rule=Rule(alpha=0.05))
    assert loose.alpha == 0.05 and loose.exit_code == 1 and loose.comparisons[0].status == "regression"
    # the aggregate's interval is at 1 - alpha too: narrower at 0.05 than at 0.002
    assert loose.aggregates[0].ci_high < default.aggregates[0].ci_high
    b = write(tmp_path / "b.json", result_file(base))
    c = write(tmp_path / "c.json", result_file(cand))
    assert cli_main(["gate", str(b), str(c)]) == 3
    assert cli_main(["gate", str(b), str(c), "--alpha", "0.05"]) == 1
    assert "p < 0.05 " in capsys.readouterr().out


def test_one_member_with_few_rounds_does_not_disable_the_aggregate():
    extra = "tokens=99999"  # a ninth shape, unchanged, timed only 3 times
    base = token_members() + [entry(extra, rounds(5e-3, n=3), weight=0.05)]
    cand = token_members(1.08) + [entry(extra, rounds(5e-3, n=3), weight=0.05)]
    report = gate(base, cand)
    agg = report.aggregates[0]
    assert (agg.n, agg.n_tested) == (9, 8) and agg.status == "regression" and report.exit_code == 1
    assert any("1 member(s)" in n and "left out" in n for n in report.notes)
    assert "8 of 9" in format_text(report)


def test_aggregates_do_not_mix_modes():
    # forward 8% slower, backward 8% faster: one (family, provider) mean would call it even
    base = token_members(mode="fwd") + token_members(mode="bwd")
    cand = token_members(1.08, mode="fwd") + token_members(1 / 1.08, mode="bwd")
    report = gate(base, cand)
    by_mode = {a.mode: a.status for a in report.aggregates}
    assert by_mode == {"fwd": "regression", "bwd": "improvement"} and report.exit_code == 1


PLAN_SEQS = {"dapo-math-32b": 768, "deepcoder-14b": 128, "model-b-math": 8192}


def plan_members(factor=1.0, n=N_ROUNDS, spread=0.02):
    # the planner's Case leaves weight at its default 1.0; its shape says how many sequences it plans
    return [entry(f"profile={p},sequences={s},ranks=8", rounds(1e-3 * (i + 1), factor, spread, n), family="packing",
                  kernel="balance_partitions", mode="plan", provider="ours", weight=1.0,
                  shape={"profile": p, "sequences": s, "ranks": 8}) for i, (p, s) in enumerate(PLAN_SEQS.items())]


def pack_members(factor=1.0):
    return [entry(s, rounds(1e-4 * (i + 1), factor, 0.02), family="packing", kernel="pack", provider="ours",
                  weight=w) for i, (s, w) in enumerate(zip(TOKEN_SHAPES[:3], (0.6, 0.3, 0.1)))]


def test_planner_weights_are_sequence_shares_and_never_swamp_token_shares():
    report = gate(plan_members() + pack_members(), plan_members() + pack_members())
    plan = {c.shape_id.split(",")[1]: c.weight for c in report.comparisons if c.mode == "plan"}
    total = sum(PLAN_SEQS.values())
    assert plan == {f"sequences={s}": pytest.approx(s / total) for s in PLAN_SEQS.values()}
    pack = [c.weight for c in report.comparisons if c.kernel == "pack"]
    assert pack == pytest.approx([0.6, 0.3, 0.1])
    bases = {a.kernel: a.weight_basis for a in report.aggregates}
    assert bases == {"balance_partitions": "sequences", "pack": "tokens"}


def test_underpowered_planner_slowdown_is_inconclusive_not_a_pass(capsys, tmp_path):
    # the review's case: planner timed 3 times, made 30% slower, beside well-timed pack kernels
    assert min_p_value(3, 3) == pytest.approx(0.1)
    base = plan_members(n=3) + pack_members()
    cand = plan_members(1.3, n=3) + pack_members()
    report = gate(base, cand)
    assert {c.status for c in report.comparisons if c.mode == "plan"} == {"inconclusive"}
    assert report.exit_code == 3 and report.verdict.startswith("INCONCLUSIVE: 3 benchmarks undecided; rerun "
                                                               "with at least ")
    assert "POLYTRACE_BENCH_ROUNDS=N" in report.verdict and "--benchmark-min-rounds=N" in report.verdict
    assert all(c.rounds_to_decide >= 7 for c in report.comparisons if c.mode == "plan")
    # --force overrides machine refusals, not this
    assert gate(base, cand, policy=GatePolicy(force=True)).exit_code == 3
    assert "#### Inconclusive" in format_markdown(report)
    assert format_markdown(report).startswith("### polytrace gate: **INCONCLUSIVE** (3 benchmarks undecided")
    # a regression found beside an undecided benchmark is a failure (1)
    both = gate(base, plan_members(1.3, n=3) + pack_members(1.3))
    assert both.exit_code == 1 and both.verdict == "FAIL: 3 regressions, 1 weighted-mean regression"
    assert format_markdown(both).startswith("### polytrace gate: **FAIL** (3 regressions, 1 weighted-mean "
                                            "regression)\n")
    # an underpowered improvement cannot be bounded either
    assert gate(base, plan_members(1 / 1.3, n=3) + pack_members()).exit_code == 3
    b, c = write(tmp_path / "b.json", result_file(base)), write(tmp_path / "c.json", result_file(cand))
    assert cli_main(["gate", str(b), str(c)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("polytrace gate: INCONCLUSIVE") and "cannot reach p < 0.002" in out


def test_only_controls_in_common_is_an_error():
    members = token_members(provider="torch", kind="baseline", spread=0.02)
    report = gate(members, members)
    assert report.exit_code == 2 and "only controls" in report.errors[0]
    assert gate(members, members, policy=GatePolicy(gate_all=True)).exit_code == 0


def test_impact_lines_sit_under_the_verdict():
    report = gate(token_members(), token_members(1.08))
    report.impact.append("step time on dapo-math-32b: +3.1%")
    text = format_text(report).splitlines()
    assert text[0].startswith("polytrace gate: FAIL") and text[1] == "step time on dapo-math-32b: +3.1%"
    md = format_markdown(report).splitlines()
    assert md[0].startswith("### polytrace gate: **FAIL**") and md[2] == "**step time on dapo-math-32b: +3.1%**"
    assert report.to_dict()["impact"] == ["step time on dapo-math-32b: +3.1%"]


@pytest.mark.parametrize("text,expected", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("1", 1.0)])
def test_threshold_takes_percent_or_fraction(tmp_path, capsys, text, expected):
    b = write(tmp_path / "b.json", result_file(token_members(spread=0.02)))
    assert cli_main(["gate", str(b), str(b), "--json", "--threshold", text]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["threshold"] == pytest.approx(expected)


@pytest.mark.parametrize("text,needle", [("5", "did you mean 5%?"), ("1.5", "did you mean 1.5%?"),
                                         ("0", "positive"), ("-5%", "positive"), ("nan", "finite"),
                                         ("lots", "like 5% or a fraction like 0.05")])
def test_threshold_refuses_ambiguous_or_bad_values(tmp_path, capsys, text, needle):
    b = write(tmp_path / "b.json", result_file(token_members()))
    with pytest.raises(SystemExit) as exc:
        cli_main(["gate", str(b), str(b), f"--threshold={text}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--threshold" in err and needle in err and err.count("\n") == 1
