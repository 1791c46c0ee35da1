"""``polytrace ab`` below the git layer: the paired statistics, the per-case and aggregate rules,
the exit codes, the renderings, and one case timed through the suites' timing on a fake device
(drift that cancels in pairs, the per-pair order, both outputs checked, one plan for both)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from polytrace.errors import PolytraceError
from polytrace.measure.ab import format_markdown, format_text, measure, paired
from polytrace.measure.ab.loader import LoadedRevision
from polytrace.measure.ab.report import AbReport, CaseResult, aggregate, judge
from polytrace.measure.ab.runner import check_rounds

# ----------------------------------------------------------------------------- paired statistics


def test_pairs_needed_is_where_the_exact_test_can_first_reach_alpha():
    assert paired.pairs_needed(0.002) == 10 and paired.pairs_needed(0.05) == 6
    assert paired.min_p_value(9) >= 0.002 > paired.min_p_value(10)
    # the exact test agrees: 10 pairs all slower reach 2 / 2**10, 9 pairs cannot go below 0.0039
    assert paired.signed_rank_p(np.full(10, 0.1) + np.arange(10) * 1e-3) == pytest.approx(2 / 2 ** 10)
    assert paired.signed_rank_p(np.full(9, 0.1) + np.arange(9) * 1e-3) == pytest.approx(2 / 2 ** 9)
    assert paired.signed_rank_p(np.zeros(12)) == 1.0


def test_too_few_rounds_are_refused_naming_the_minimum():
    with pytest.raises(PolytraceError, match=r"--rounds 9: .* cannot reach p < 0.002 .*use at least 10"):
        check_rounds(9, 0.002, cuda=True)
    assert check_rounds(10, 0.002, cuda=True) == 10
    assert check_rounds(None, 0.002, cuda=True) == 30 and check_rounds(None, 0.002, cuda=False) == 10
    assert check_rounds(None, 0.05, cuda=False) == 6


def case_with(ratios, base_s: float = 1e-3, *, kernel="token_logprobs", mode="fwd", weight=0.125, shape=None,
              i: int = 0) -> CaseResult:
    base = np.full(len(ratios), base_s) * (1 + 0.01 * np.arange(len(ratios)))  # some drift between pairs
    cand = base * np.exp(np.asarray(ratios, dtype=float))
    c = CaseResult(id=f"logprob/{kernel}/ours/{mode}/T={1024 * (i + 1)}", suite="logprob", family="logprob",
                   kernel=kernel, provider="ours", mode=mode, shape_id=f"T={1024 * (i + 1)}",
                   shape=shape or {"T": 1024 * (i + 1)}, profile="dapo-math-32b", seed=0, step=0, weight=weight)
    c.base_rounds, c.cand_rounds, c.outputs = base.tolist(), cand.tolist(), "identical"
    return c


def report_of(cases, threshold=0.05, alpha=0.002) -> AbReport:
    rev = {"spec": "x", "commit": "0" * 40, "short": "0" * 12, "kernel_hashes": {"logprob": "a"}}
    r = AbReport(base=rev, cand=dict(rev), device={"gpu_name": "NVIDIA H200", "gpu_slug": "h200",
                                                   "measured_on": "cuda", "torch_version": "t",
                                                   "triton_version": "t"},
                 threshold=threshold, alpha=alpha, rounds=10, seed=0, suites=["logprob"], keyword=None)
    for c in cases:
        if c.base_rounds:
            judge(c, threshold, alpha)
        r.cases.append(c)
    aggregate(r)
    return r


def test_a_consistent_slowdown_beyond_the_threshold_regresses_and_a_small_one_does_not():
    slow = report_of([case_with(np.full(10, math.log(1.10)) + np.linspace(-0.01, 0.01, 10))])
    (c,) = slow.cases
    assert c.status == "regression" and c.change == pytest.approx(0.10, abs=0.002) and c.p_value < 0.002
    assert slow.exit_code == 1 and slow.verdict.startswith("FAIL: 1 regression")
    small = report_of([case_with(np.full(10, math.log(1.03)) + np.linspace(-0.01, 0.01, 10))])
    assert small.cases[0].status == "unchanged" and small.cases[0].p_value < 0.002 and small.exit_code == 0
    assert report_of([case_with(np.full(10, math.log(1.03)) + np.linspace(-0.01, 0.01, 10))],
                     threshold=0.02).exit_code == 1  # the threshold is the one passed
    fast = report_of([case_with(np.full(10, math.log(1 / 1.2)) + np.linspace(-0.01, 0.01, 10))])
    assert fast.cases[0].status == "improvement" and fast.exit_code == 0


def test_a_slowdown_the_signed_rank_test_does_not_confirm_is_inconclusive_not_hidden():
    """16 pairs 2x slower but one whose BASE round was preempted (the largest |log ratio|, other
    sign): p = 0.005 >= 0.002, so the case is not a regression, nor unchanged: inconclusive, with
    the pairs that would decide it, and ab warns."""
    from polytrace.measure.ab.runner import _finish

    ratios = np.full(16, math.log(2.0)) + np.linspace(-0.01, 0.01, 16)
    ratios[0] = -math.log(5.0)
    r = report_of([case_with(ratios), case_with(np.linspace(-0.01, 0.01, 16), i=1)])
    noisy, quiet = r.cases
    assert noisy.status == "inconclusive" and 0.002 <= noisy.p_value < 0.01 and noisy.change > 0.9
    assert "beyond the threshold but p = 0.00" in noisy.note and f"~{noisy.pairs_to_decide} pairs would decide" \
        in noisy.note and noisy.pairs_to_decide >= 10
    assert quiet.status == "unchanged" and quiet.note == "" and quiet.pairs_to_decide is None
    assert -0.05 < quiet.ci_low < 0 < quiet.ci_high < 0.05
    _finish(r, seed=0, cuda=True)
    (warning,) = [w for w in r.warnings if "inconclusive" in w]
    assert warning.startswith("1 case inconclusive at alpha=0.002, threshold 5.0%") and noisy.id in warning
    assert quiet.id not in warning and "warning: 1 case inconclusive" in format_text(r)
    assert r.exit_code == 1 and "weighted-mean regression" in r.verdict  # the mean is decided


def test_a_slowdown_the_test_cannot_reach_is_inconclusive_not_a_pass():
    """Pairs timed exactly alike carry no sign; when too few pairs differ for p < alpha while the
    median is slower beyond the threshold, the case cannot pass quietly."""
    c = case_with(np.zeros(10))
    c.cand_rounds = [b * (1.3 if i < 6 else 1.0) for i, b in enumerate(c.base_rounds)]  # 6 slower, 4 alike
    r = report_of([c])
    assert c.status == "inconclusive" and "only 6 of 10 pairs differ" in c.note and r.exit_code == 3
    assert r.verdict == f"INCONCLUSIVE: 1 case and 1 weighted mean undecided; about {c.pairs_to_decide} pairs would " \
                        f"decide (--rounds {c.pairs_to_decide}, or --until-decided)"
    assert format_markdown(r).startswith("### polytrace ab: **INCONCLUSIVE** (1 case and 1 weighted mean undecided")
    assert "#### Inconclusive (more pairs would decide) (1)" in format_markdown(r)


def test_alpha_is_the_one_passed():
    # 7 of 10 pairs 10% slower, 3 slightly faster (the three smallest ranks): p = 0.027
    ratios = np.array([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -0.001, -0.002, -0.003]) + np.arange(10) * 1e-4
    assert 0.002 < paired.signed_rank_p(ratios) < 0.05
    assert report_of([case_with(ratios)], alpha=0.002).cases[0].status == "inconclusive"
    assert report_of([case_with(ratios)], alpha=0.05).cases[0].status == "regression"


def test_drift_shared_by_the_pair_cancels():
    """A clock that slows 40% over the run hits both members of each pair: an A/A run stays
    unchanged and a 6% slowdown reads as 6%, not as the drift."""
    drift = np.linspace(1.0, 1.4, 12)
    aa = case_with(np.zeros(12))
    aa.base_rounds = (1e-3 * drift).tolist()
    aa.cand_rounds = (1e-3 * drift * (1 + 0.002 * np.sin(np.arange(12)))).tolist()
    ab = case_with(np.zeros(12), i=1)
    ab.base_rounds = (1e-3 * drift).tolist()
    ab.cand_rounds = (1.06e-3 * drift * (1 + 0.002 * np.cos(np.arange(12)))).tolist()
    report_of([aa, ab])
    assert aa.status == "unchanged" and abs(aa.change) < 0.003
    assert ab.status == "regression" and ab.change == pytest.approx(0.06, abs=0.003)


def test_aggregate_only_regression_fails():
    """Every shape 8% slower in most pairs, no shape significant alone (p = 0.027 each): the
    weighted mean over the shapes, with its bootstrap interval, is a regression, exit 1."""
    ratios = np.array([0.077] * 7 + [-0.01, -0.02, -0.03]) + np.arange(10) * 1e-4
    cases = [case_with(np.roll(ratios, i), i=i) for i in range(8)]
    r = report_of(cases)
    assert all(c.status == "inconclusive" and 0.002 < c.p_value < 0.05 for c in r.cases)
    (agg,) = r.aggregates
    assert agg.status == "regression" and agg.ci_high < 1 and agg.speedup == pytest.approx(math.exp(-0.0775), rel=2e-3)
    assert r.exit_code == 1 and "1 weighted-mean regression" in r.verdict and not r.of("regression")
    assert sum(c.share for c in r.cases) == pytest.approx(1.0)


def test_weights_mean_tokens_and_sequences_for_the_planner():
    heavy = case_with(np.full(10, math.log(1.3)) + np.linspace(-0.01, 0.01, 10), weight=0.9, i=0)
    light = case_with(np.full(10, math.log(0.8)) + np.linspace(-0.01, 0.01, 10), weight=0.1, i=1)
    r = report_of([heavy, light])
    assert r.aggregates[0].weight_basis == "tokens" and heavy.share == pytest.approx(0.9)
    plan = [case_with(np.zeros(10) + np.linspace(-0.01, 0.01, 10), kernel="plan_microbatches", mode="plan",
                      weight=1.0, shape={"sequences": n}, i=i) for i, n in enumerate((768, 2304))]
    r = report_of(plan)
    assert r.aggregates[0].weight_basis == "sequences" and plan[1].share == pytest.approx(0.75)


def test_weights_missing_fall_back_as_the_gates_do():
    """ab shares the gate's weighting: no weight at all gives an unweighted mean, a member without
    one counts 0; both are noted."""
    none = [case_with(np.zeros(10) + np.linspace(-0.01, 0.01, 10), weight=None, i=i) for i in range(4)]
    r = report_of(none)
    assert r.aggregates[0].weight_basis == "uniform" and [c.share for c in none] == [0.25] * 4
    assert any("no tokens weights recorded" in n for n in r.notes)
    some = [case_with(np.zeros(10) + np.linspace(-0.01, 0.01, 10), weight=w, i=i) for i, w in enumerate((0.3, None))]
    r = report_of(some)
    assert r.aggregates[0].weight_basis == "tokens" and [c.share for c in some] == [1.0, 0.0]
    assert any("1 of 2 member(s) carry no weight" in n for n in r.notes)


def test_changed_outputs_fail_and_errors_never_pass():
    changed = case_with(np.zeros(10))
    changed.base_rounds, changed.cand_rounds = [], []
    changed.status, changed.outputs = "outputs-changed", "changed"
    r = report_of([changed, case_with(np.linspace(-0.01, 0.01, 10), i=1)])
    assert r.exit_code == 1 and r.verdict == "FAIL: 1 case with changed outputs"
    err = case_with(np.zeros(10), i=2)
    err.base_rounds, err.cand_rounds, err.status, err.note = [], [], "error", "CAND bind: boom"
    r = report_of([err, case_with(np.linspace(-0.01, 0.01, 10), i=1)])
    assert r.exit_code == 2 and r.verdict == "ERROR (1 error)"
    slow = case_with(np.full(10, 0.5) + np.linspace(-0.01, 0.01, 10), i=3)
    assert report_of([err, slow]).exit_code == 1  # a regression found all the same: 1, errors listed


def test_renderings_say_what_was_found_and_json_is_strict():
    changed = case_with(np.zeros(10), i=4)
    changed.base_rounds, changed.cand_rounds = [], []
    changed.status, changed.outputs, changed.output_diff = "outputs-changed", "changed", math.inf
    changed.note = "CAND's output fails BASE's check: packed: max |err| 1 > bound 0 [exact copy]"
    slow = case_with(np.full(10, math.log(1.5)) + np.linspace(-0.01, 0.01, 10))
    r = report_of([slow, changed])
    r.impact.append("step time on dapo-math-32b / qwen2.5-32b / 32 x H200: +1.2%")
    md = format_markdown(r)
    verdict = "1 regression, 1 weighted-mean regression, 1 case with changed outputs"
    assert md.startswith(f"### polytrace ab: **FAIL** ({verdict})")
    assert md.splitlines()[2] == "**step time on dapo-math-32b / qwen2.5-32b / 32 x H200: +1.2%**"
    assert "#### Outputs changed" in md and "#### Regressions (1)" in md and "Wilcoxon signed-rank" in md
    assert md.index("#### Outputs changed") < md.index("#### Regressions")
    text = format_text(r)
    assert text.splitlines()[:2] == [f"polytrace ab: FAIL: {verdict}",
                                     "step time on dapo-math-32b / qwen2.5-32b / 32 x H200: +1.2%"]
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["exit_code"] == 1 and d["cases"][1]["output_diff"] is None and d["cases"][0]["pairs"] == 10


# ``ab --json``'s keys, in the order scripts and CI readers have seen since the format was made:
# frozen here so that a change of the records behind it (CaseResult's fields) cannot reorder them
AB_JSON_KEYS = ["base", "cand", "device", "threshold", "alpha", "rounds", "seed", "suites", "keyword", "cases",
                "aggregates", "only_base", "only_cand", "errors", "warnings", "notes", "impact", "step_time",
                "sequential", "exit_code", "verdict"]
AB_JSON_CASE_KEYS = ["id", "suite", "family", "kernel", "provider", "mode", "shape_id", "shape", "profile", "seed",
                     "step", "weight", "flops", "bytes_moved", "roofline", "status", "note", "base_rounds",
                     "cand_rounds", "first", "timing", "outputs", "output_diff", "base_check", "cand_check",
                     "p_value", "change", "share", "ci_low", "ci_high", "pairs_to_decide", "pairs_to_detect",
                     "looks", "pairs", "base_median_s", "cand_median_s"]


def test_json_keys_keep_their_order():
    d = report_of([case_with(np.full(10, 0.3)), case_with(np.zeros(10), i=1)]).to_dict()
    assert list(d) == AB_JSON_KEYS
    assert [list(c) for c in d["cases"]] == [AB_JSON_CASE_KEYS] * 2


def test_output_difference_walks_the_outputs():
    import torch

    from polytrace_kernels.packing import plan_microbatches

    a = torch.tensor([1.0, float("nan"), 3.0])
    assert measure.output_difference(a, a.clone()) == 0.0
    assert measure.output_difference((a, 2), (a + torch.tensor([0, 0, 0.5]), 2)) == pytest.approx(0.5)
    assert measure.output_difference(a, a[:2]) == math.inf and measure.output_difference([a], [a, a]) == math.inf
    lens = np.array([5, 9, 3, 7, 2, 8])
    p, q = plan_microbatches(lens, 2, 16), plan_microbatches(lens, 2, 16)
    assert measure.output_difference(p, q) == 0.0
    assert measure.output_difference(p, plan_microbatches(lens, 3, 16)) == math.inf
    assert measure.output_difference({"x": np.arange(3)}, {"x": np.arange(3) * 2}) == 2.0


# ------------------------------------------------------------------ one case on a fake device


@dataclass
class Inputs:
    x: object


def _toy(name, work_s, device, *, wrong=False, raises=None, graph_ok=True, tuple_out=False, drift=None):
    """A case of ours whose launch advances the fake device by ``work_s`` (times the session's
    drift, which grows with every launch of either revision)."""
    import torch

    from polytrace_kernels.tolerance import check_fp32
    from suites import registry
    from suites.harness import Case, Provider

    def make_inputs(dev, seed):
        return Inputs(torch.arange(6, dtype=torch.float32))

    def bind(inp, kernels):
        if raises:
            raise RuntimeError(raises)

        def fn():
            factor = drift() if drift else 1.0
            device.now += work_s * factor
            y = inp.x * 2 + (1e-3 if wrong else 0.0)
            return (y, y) if tuple_out else y
        return registry.Bound(fn, graph_ok=graph_ok)

    meta = Case("packing", "toy", "ours", "fwd", {"n": 6}, bytes_moved=48.0, weight=1.0, provider_kind="ours",
                extra={"check_subset": "all"})
    return registry.BenchCase("packing", meta, Provider("ours", kind="ours"), make_inputs, bind,
                              lambda inp: (inp.x * 2).double(), lambda out, want, inp: [check_fp32("y", out, want)])


@pytest.fixture
def fake_device(monkeypatch):
    # the suites' fake device lives beside their tests (tests/suites/), on the path only when pytest
    # collected that folder first: this file run alone must find it too
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "suites"))
    from test_suites_timing import FakeDevice

    from suites import timing

    dev = FakeDevice()
    monkeypatch.setattr(timing, "_BACKEND", [dev])
    return dev


def _revisions():
    import suites
    from suites import registry

    return (LoadedRevision("BASE", object(), suites, registry), LoadedRevision("CAND", object(), suites, registry))


def _run(base_case, cand_case, rounds=12, seed=0) -> CaseResult:
    base, cand = _revisions()
    c = CaseResult(id=cand_case.id, suite="packing", family="packing", kernel="toy", provider="ours", mode="fwd",
                   shape_id="n=6", shape={"n": 6}, profile="", seed=None, step=None, weight=1.0)
    measure.run_pair(c, measure.Side(base_case, base), measure.Side(cand_case, cand), measure.Pairing(rounds, seed))
    if c.base_rounds:
        judge(c, 0.05, 0.002)
    return c


def test_rounds_are_interleaved_in_pairs_whose_order_is_drawn_and_drift_cancels(fake_device):
    launches = []

    def drift():  # the session slows 0.5% per launch: 30% over the run
        launches.append(1)
        return 1.0 + 0.005 * len(launches)

    base = _toy("b", 300e-6, fake_device, drift=drift)
    c = _run(base, _toy("c", 330e-6, fake_device, drift=drift), rounds=24)
    assert len(c.base_rounds) == len(c.cand_rounds) == 24 and len(c.first) == 24 and set(c.first) == {"B", "C"}
    assert c.status == "regression" and c.change == pytest.approx(0.10, abs=0.01) and c.outputs == "identical"
    assert c.timing["timing"] == "events" and c.timing["l2"] == "flushed"
    # the drift is in the rounds (unpaired medians are off), and out of the pair ratios: 0.5% of
    # the 300 us launch a launch over the 48 timed launches (the warm-up's rounds came before them)
    assert c.base_rounds[-1] - c.base_rounds[0] > 0.2 * 300e-6
    again = _run(_toy("b", 300e-6, fake_device), _toy("c", 330e-6, fake_device), rounds=24)
    other = _run(_toy("b", 300e-6, fake_device), _toy("c", 330e-6, fake_device), rounds=24, seed=1)
    assert again.first == c.first and other.first != c.first  # seeded per pair
    aa = _run(_toy("b", 300e-6, fake_device, drift=drift), _toy("c", 300e-6, fake_device, drift=drift), rounds=24)
    assert aa.status == "unchanged" and abs(aa.change) < 0.01


def test_both_revisions_get_one_timing_plan(fake_device):
    both = _run(_toy("b", 20e-6, fake_device), _toy("c", 20e-6, fake_device), rounds=10)
    assert both.timing["timing"].startswith("cuda-graph x")
    # BASE's provider synchronises with the host (no graph): CAND is timed with events too
    mixed = _run(_toy("b", 20e-6, fake_device, graph_ok=False), _toy("c", 20e-6, fake_device), rounds=10)
    assert mixed.timing["timing"] == "events" and mixed.timing["launches_per_round_base"] == 1


def test_outputs_are_checked_by_bases_rules_and_a_change_is_flagged_not_timed(fake_device):
    changed = _run(_toy("b", 300e-6, fake_device), _toy("c", 300e-6, fake_device, wrong=True))
    assert changed.status == "outputs-changed" and changed.outputs == "changed" and not changed.cand_rounds
    assert "CAND's output fails BASE's check: y: max |err| 0.001 > bound" in changed.note
    assert changed.output_diff == pytest.approx(1e-3, rel=1e-3)
    shape = _run(_toy("b", 300e-6, fake_device), _toy("c", 300e-6, fake_device, tuple_out=True))
    assert shape.status == "outputs-changed" and "CAND output check (BASE's compare)" in shape.note
    fixed = _run(_toy("b", 300e-6, fake_device, wrong=True), _toy("c", 300e-6, fake_device))
    assert fixed.status == "base-wrong" and not fixed.base_rounds
    both = _run(_toy("b", 300e-6, fake_device, wrong=True), _toy("c", 300e-6, fake_device, wrong=True))
    assert both.status == "error" and "both revisions' outputs fail" in both.note
    broken = _run(_toy("b", 300e-6, fake_device), _toy("c", 300e-6, fake_device, raises="no such kernel arg"))
    assert broken.status == "error" and broken.note == "CAND bind: RuntimeError: no such kernel arg"
