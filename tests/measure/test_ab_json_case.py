"""``ab --json``'s case record (``AbReport.to_dict``): ``id`` then ``suite`` first, the pair count and
each side's median of its own rounds last; a CAND twice as slow as BASE reads so in the JSON (a
swapped pair of medians would report the regression as a 2x speed-up)."""

from __future__ import annotations

from polytrace.measure.ab.report import AbReport, CaseResult


def test_each_sides_median_is_of_its_own_rounds():
    case = CaseResult(id="packing/pack/ours/fwd/x", suite="packing", family="packing", kernel="pack",
                      provider="ours", mode="fwd", shape_id="x", shape={}, profile="p", seed=0, step=0, weight=1.0)
    case.base_rounds, case.cand_rounds = [1.0e-3, 1.2e-3, 1.1e-3], [2.0e-3, 2.4e-3, 2.2e-3]
    rep = AbReport(base={}, cand={}, device={}, threshold=0.05, alpha=0.002, rounds=3, seed=0, suites=["packing"],
                   keyword=None, cases=[case])
    (out,) = rep.to_dict()["cases"]
    assert list(out)[:2] == ["id", "suite"] and list(out)[-3:] == ["pairs", "base_median_s", "cand_median_s"]
    assert (out["pairs"], out["base_median_s"], out["cand_median_s"]) == (3, 1.1e-3, 2.2e-3)


def test_an_inconclusive_weighted_mean_alone_makes_the_run_inconclusive():
    """The module docstring: exit 3 when a case *or an aggregate* is inconclusive. Every case
    unchanged, the members' weighted mean undecided (interval 0.97-1.08 across the 5% threshold)."""
    from polytrace.measure.results.gate import Aggregate

    case = CaseResult(id="packing/pack/ours/fwd/x", suite="packing", family="packing", kernel="pack",
                      provider="ours", mode="fwd", shape_id="x", shape={}, profile="p", seed=0, step=0, weight=1.0)
    case.status = "unchanged"
    agg = Aggregate(family="packing", kernel="pack", mode="fwd", provider="ours", provider_kind="ours", n=2,
                    speedup=1.02, ci_low=0.97, ci_high=1.08, status="inconclusive", gated=True)
    rep = AbReport(base={}, cand={}, device={}, threshold=0.05, alpha=0.002, rounds=3, seed=0, suites=["packing"],
                   keyword=None, cases=[case], aggregates=[agg])
    assert rep.exit_code == 3 and rep.verdict.startswith("INCONCLUSIVE"), rep.verdict
    agg.status = "unchanged"
    assert rep.exit_code == 0 and rep.verdict == "PASS"
