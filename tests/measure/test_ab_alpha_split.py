"""``ab --until-decided`` judges every case at alpha / K (K planned looks), the last judgement
included: judged at alpha, K looks give K chances at a false alarm. The pairs below (24 pairs,
+14% median, three pairs of the opposite sign) give p = 0.00109: a regression at alpha 0.002, not
at the 0.001 per look of a 2-look plan."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from _ab_repo import make_repo

from polytrace.measure.ab import report as ab_report
from polytrace.measure.ab import runner, sequential
from polytrace.measure.ab.report import CaseResult, judge

PAIRS = 24
ALPHA = 0.002
RATIOS = 0.08 + 0.005 * np.arange(PAIRS)
RATIOS[[0, 15, 23]] *= -1  # signed-rank p = 0.00109


def _fill(case: CaseResult) -> None:
    base = 1e-3 * np.exp(0.01 * np.arange(PAIRS))
    case.base_rounds, case.cand_rounds = base.tolist(), (base * np.exp(RATIOS)).tolist()


def _case() -> CaseResult:
    return CaseResult(id="packing/pack/ours/fwd/x", suite="packing", family="packing", kernel="pack",
                      provider="ours", mode="fwd", shape_id="x", shape={}, profile="p", seed=0, step=0, weight=1.0)


def test_the_pairs_lie_between_alpha_per_look_and_alpha():
    plan = sequential.plan_looks(ALPHA, PAIRS)
    assert plan.looks == [12, 24] and plan.alpha_per_look == pytest.approx(ALPHA / 2)
    case = _case()
    _fill(case)
    judge(case, 0.05, ALPHA)
    assert case.status == "regression" and plan.alpha_per_look < case.p_value < ALPHA
    judge(case, 0.05, plan.alpha_per_look)
    assert case.status == "inconclusive"


def test_a_sequential_report_judges_at_alpha_per_look():
    plan = sequential.plan_looks(ALPHA, PAIRS)
    rep = ab_report.AbReport(base={}, cand={}, device={}, threshold=0.05, alpha=ALPHA, rounds=PAIRS, seed=0,
                             suites=["packing"], keyword=None, sequential=plan.to_dict())
    assert rep.judged_alpha == pytest.approx(ALPHA / 2)


def test_run_ab_until_decided_keeps_the_split_to_the_last_judgement(tmp_path, monkeypatch):
    """run_ab end to end on a throwaway repository, the timing replaced by the pairs above: the
    case ends inconclusive (judged at 0.001); judged at alpha it would be a regression."""
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def fake_run_pair(result, base, cand, pairing):
        _fill(result)
        while pairing.more is not None and pairing.more(result) is not None:
            pass

    monkeypatch.setattr(runner.measure, "run_pair", fake_run_pair)
    rep = runner.run_ab("base", "base", cases=runner.CaseSource(str(repo), ["packing"], "pack and not unpack and r1m0"),
                        rule=runner.Rule(0.05, ALPHA), force=True, pairs=runner.PairPlan(until_decided=True,
                                                                                          max_pairs=PAIRS))
    assert len(rep.cases) == 1 and rep.judged_alpha == pytest.approx(ALPHA / 2)
    case = rep.cases[0]
    assert case.status == "inconclusive" and ALPHA / 2 < case.p_value < ALPHA, (case.status, case.p_value)
