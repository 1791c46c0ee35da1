"""Group-held-out scoring of the priors (``polytrace/calibrate/folds.py``).

The folds must hold their logs out for real: every fit a fold makes is recorded and must not see
a log it scores (a planted "held-out log left in the fit" fails here). The baselines are checked
against a hand computation, the group keys against the model names, and the bound flags against
fits built to sit on each bound. The full corpus's evaluation (minutes of CPU) is ``slow``; CI
runs these on three small logs."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from _corpus import full_corpus, load

from polytrace.calibrate import folds as F
from polytrace.calibrate import priors as P
from polytrace.stepmodel.efficiency import load_priors

SMALL = ["verl_qwen2.5-0.5b_ppo_1gpu_p1024_r512.log", "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log",
         "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log"]


@functools.cache
def _small(folder: str):
    return load(folder, SMALL)  # corpus.load_corpus, its prices memoized (tests/_corpus.py)


def _recording_fit(calls):
    def fit(train):
        calls.append([c.name for c in train])
        return P.fit_priors(train)
    return fit


@pytest.mark.parametrize("grouping", ["log", "size", "family"])
def test_no_fold_fits_on_a_log_it_scores(validation_logs, grouping):
    corpus = _small(str(validation_logs))
    calls = []
    res = F.leave_group_out(corpus, grouping, fit=_recording_fit(calls))
    assert len(calls) == len(res["folds"]) >= 2
    for fitted, (g, fold) in zip(calls, sorted(res["folds"].items())):
        assert not set(fitted) & set(fold["held_out"]), (g, fitted)  # the held-out logs never in the fit
        assert sorted(fitted + fold["held_out"]) == sorted(c.name for c in corpus)  # the rest all in it
        assert fold["fitted_on"] == fitted
    assert sorted(res["per_log"]) == sorted(SMALL)  # every log scored, once


def test_a_fold_scores_with_the_fit_of_the_others(validation_logs):
    """The held-out log's score is the one priors fitted on the other logs give it."""
    corpus = _small(str(validation_logs))
    res = F.leave_group_out(corpus, "family")
    gemma = next(c for c in corpus if c.name.startswith("verl_gemma"))
    expected = P.score(P.fit_priors([c for c in corpus if c is not gemma]), gemma)
    assert res["per_log"][gemma.name]["step"] == expected["step"]
    assert res["per_log"][gemma.name]["group"] == "gemma-2"


def test_the_baselines_by_hand(validation_logs):
    """naive: the training logs' median mean step; roofline x scalar: the roofline times the
    exponent of the median log of (mean actual / mean roofline) over the training logs."""
    corpus = _small(str(validation_logs))
    held, train = corpus[2], corpus[:2]
    b = F._baseline_scores(train, [held])[held.name]
    means = [np.mean([r.actual["step"] for r in c.rows]) for c in train]
    roofs = [np.mean(P.predict_log(None, c)["step"]) for c in train]
    k = math.exp(np.median([math.log(m / r) for m, r in zip(means, roofs)]))
    a = np.array([r.actual["step"] for r in held.rows])
    assert b["scalar"] == pytest.approx(k, rel=1e-12)
    assert b["naive_ratio"] == pytest.approx(np.median(means) / a.mean(), rel=1e-12)
    pred = P.predict_log(None, held)["step"] * k
    assert b["scalar_median_error"] == pytest.approx(np.median(np.abs(pred / a - 1)), rel=1e-12)


@pytest.mark.parametrize("model,size,family", [("qwen2.5-0.5b", "0.5B", "qwen2.5"), ("qwen2-7b", "7B", "qwen2"),
                                               ("gemma-2-2b", "2B", "gemma-2"), ("qwen3-4b", "4B", "qwen3"),
                                               ("qwen2.5-32b", "32B", "qwen2.5")])
def test_group_keys(model, size, family):
    assert (F._size(model), F._family(model)) == (size, family)


def test_every_bound_is_flagged():
    kinds = {"a": {"slowdown": 0.6, "floor": 0.6, "logs": ["x"]},
             "b": {"slowdown": 0.01, "floor": 0.0, "logs": ["x"]},
             "c": {"slowdown": P.MAX_SLOWDOWN, "floor": 0.5, "logs": ["x"]},
             "d": {"slowdown": 0.61, "floor": 0.6, "logs": ["x"]},  # 1.7% above its floor: free
             "e": {"slowdown": 0.6, "floor": 0.6, "logs": [], "fallback": "none"}}
    flags = F._on_bounds({"kinds": kinds, "constants_s": {"gen": 0.0, "update": P.MAX_CONSTANT_S, "other": 0.2}})
    assert flags == ["a at its roofline floor (efficiency 1 on some step)", "b at the lower bound 0.01",
                     f"c at the upper bound {P.MAX_SLOWDOWN:g}", "constant gen at 0 s",
                     f"constant update at {P.MAX_CONSTANT_S:g} s"]


def test_a_fold_with_a_number_on_its_bound_is_flagged_by_name(validation_logs):
    """The fold trained on gemma alone fits one common slowdown (``priors.MIN_SERIES``); planted on
    its floor, that fold gains exactly that flag, the other fold's flags are unchanged, and the
    spread names the grouping and the fold."""
    def fit(train, plant):
        doc = P.fit_priors(train)
        if plant and "common_slowdown" in doc:
            doc["common_slowdown"]["slowdown"] = doc["common_slowdown"]["floor"]
        return doc

    corpus = _small(str(validation_logs))
    free = F.leave_group_out(corpus, "family", fit=lambda t: fit(t, False))
    planted = F.leave_group_out(corpus, "family", fit=lambda t: fit(t, True))
    flag = "common (one series) at its roofline floor (efficiency 1 on some step)"
    assert planted["folds"]["qwen2.5"]["on_bounds"] == free["folds"]["qwen2.5"]["on_bounds"] + [flag]
    assert flag not in free["folds"]["qwen2.5"]["on_bounds"]
    assert planted["folds"]["gemma-2"]["on_bounds"] == free["folds"]["gemma-2"]["on_bounds"]
    assert f"family=qwen2.5: {flag}" in F.spread({"family": planted})["on_bounds"]


def _as(c, **kw):
    import copy

    out = copy.copy(c)
    out.__dict__.update(kw)
    return out


def test_one_series_identifies_one_slowdown_not_one_per_kind(validation_logs):
    """Identify, or do not fit (``priors.MIN_SERIES``): the two 0.5B logs as one series fit one
    slowdown shared by every kind they exercise and no constant; as two series, each kind its own."""
    a, b, _gemma = _small(str(validation_logs))
    one = P.fit_priors([_as(a, series="s"), _as(b, series="s")])
    common = one["common_slowdown"]
    assert {"rollout.eager", "rollout_host.eager", "forward", "trainer_host"} <= set(common["kinds"])
    for k in common["kinds"]:
        assert one["kinds"][k]["slowdown"] == common["slowdown"] and "1 series" in one["kinds"][k]["fallback"]
    assert common["slowdown"] >= common["floor"] == max(one["kinds"][k]["floor"] for k in common["kinds"])
    assert one["constants_s"]["forward"] == one["constants_s"]["update"] == 0.0
    assert "not identified in this fit" in one["constants_fixed"]["update"]
    assert F._params(one) == {"slowdown common (one series)": common["slowdown"]}
    assert F.not_identified(one) == [f"{k}: 1 series of logs exercise it (< 2): one slowdown for every kind of this "
                                     "single series" for k in common["kinds"]] + ["constant forward: 0 s",
                                                                                   "constant update: 0 s"]
    # the one number is fitted: it puts one log's step above its truth and the other's below
    # (1.28x and 0.73x), their geometric mean within 10% (0.96x); at the base prices both are 0.24-0.43x
    r = sorted(P.score(one, c)["step"]["ratio"] for c in (a, b))
    assert r[0] < 1 < r[1] and abs(math.sqrt(r[0] * r[1]) - 1) <= 0.10, r
    two = P.fit_priors([a, b])
    assert "common_slowdown" not in two and "fallback" not in two["kinds"]["forward"]
    assert not any("fallback" in two["kinds"][k] for k in common["kinds"])
    fitted = {f"slowdown {k}" for k in common["kinds"]} | {"constant forward s", "constant update s"}
    assert set(F._params(two)) == fitted and F.not_identified(two) == []


def test_a_kind_one_series_exercises_rides_on_its_identified_sibling(validation_logs):
    """gemma priced with activation recompute is the only series with ``train.checkpointing``
    work: it takes ``train.no_checkpointing``'s slowdown (fitted on the two 0.5B logs), not its own."""
    a, b, gemma = _small(str(validation_logs))
    doc = P.fit_priors([a, b, _as(gemma, ckpt=True)])
    ck, no = doc["kinds"]["train.checkpointing"], doc["kinds"]["train.no_checkpointing"]
    assert ck["logs"] == [gemma.name] and "fallback" not in no
    assert ck["slowdown"] == no["slowdown"] and "train.no_checkpointing's slowdown" in ck["fallback"]
    assert "slowdown train.checkpointing" not in F._params(doc)


def test_the_corpus_reads_the_december_logs_and_says_what_it_leaves_out(validation_logs):
    names = F.corpus_names(validation_logs)
    assert sum(n.startswith("ladder/") for n in names) == 10
    assert "more/verl_qwen2-7b_gpg_megatron_8gpu.log" in names
    assert sum(n.endswith(".output.log") for n in names) == 2
    assert not set(names) & set(F.EXCLUDED) and len(names) == 9 + 10 + 3
    assert all(len(why) > 40 for why in F.EXCLUDED.values())


@pytest.mark.slow
def test_the_shipped_group_scores_are_the_corpus_evaluation(validation_logs):
    """Refitting every fold on the whole corpus gives the shipped file's group scores (minutes)."""
    from polytrace.stepmodel.efficiency import load_priors

    doc = F.evaluate(full_corpus(str(validation_logs)))
    shipped = load_priors()["groups"]
    for g, r in doc["groupings"].items():
        assert r["summary"] == pytest.approx(shipped["groupings"][g]["summary"], rel=1e-6), g


# ---- bounds per kernel family: no family past its peak in any fold ---------------------------


@pytest.mark.parametrize("grouping", ["log", "size", "family"])
def test_no_family_runs_past_its_peak_in_any_fold(validation_logs, grouping):
    res = F.leave_group_out(_small(str(validation_logs)), grouping)
    for g, fold in res["folds"].items():
        assert 0 < fold["peak_share"] <= 1.0 + 1e-9, (grouping, g, fold["peak_share"])


def test_a_kinds_floor_is_its_fastest_priced_family(validation_logs):
    """The rollout holds decode (priced at 0.75 of the HBM peak) beside its GEMMs (0.6 of the
    compute peak where compute-bound): its floor is 0.75, not a mixture of the two (which let a
    fold run decode at 1.18x the HBM peak)."""
    from polytrace.stepmodel.efficiency import DEFAULT, priced_share

    doc = P.fit_priors(_small(str(validation_logs)))
    r = doc["kinds"]["rollout.eager"]
    assert priced_share("decode") == DEFAULT.decode_hbm == 0.75
    assert r["floor"] == 0.75 and r["slowdown"] >= 0.75
    assert r["family_peak_share"]["decode"] == pytest.approx(0.75 / r["slowdown"], rel=1e-12)
    assert doc["kinds"]["optimizer"]["slowdown"] == 1.0 and "not fitted" in doc["kinds"]["optimizer"]["fixed"]


def test_the_shipped_fit_and_every_shipped_fold_keep_every_family_at_or_under_its_peak():
    from polytrace.stepmodel.efficiency import load_priors

    doc = load_priors()
    assert F.peak_share(doc) <= 1.0 + 1e-9
    shares = [f["peak_share"] for r in doc["groups"]["groupings"].values() for f in r["folds"].values()]
    assert len(shares) >= 30 and max(shares) <= 1.0 + 1e-9


def test_the_shipped_folds_name_what_they_could_not_identify():
    """The whole-corpus fit identifies every kind it fits; the fold that holds FSDP out (one
    Megatron log) names each kind it put on one slowdown and both per-call constants."""
    doc = load_priors()
    assert not any("not identified in this fit" in v.get("fallback", "") for v in doc["kinds"].values())
    fsdp = doc["groups"]["groupings"]["backend"]["folds"]["fsdp"]["not_identified"]
    assert {x.split(":")[0] for x in fsdp} >= {"rollout.eager", "rollout_host.eager", "forward", "trainer_host",
                                                "constant forward", "constant update"}
    assert doc["groups"]["groupings"]["backend"]["folds"]["megatron"]["not_identified"] == []


def test_unidentified_constants_are_fixed_and_say_so():
    from polytrace.stepmodel.efficiency import load_priors

    doc = load_priors()
    for k in ("gen", "other"):
        assert doc["constants_s"][k] == 0.0 and "not identified" in doc["constants_fixed"][k]
    bounds = doc["groups"]["spread"]["on_bounds"]
    assert not any("constant gen" in b or "constant other" in b for b in bounds)  # fixed, not flagged


def test_the_docs_headline_is_the_shipped_group_evaluation():
    from pathlib import Path

    from polytrace.stepmodel.efficiency import load_priors

    groups = load_priors()["groups"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "step-model.md").read_text()
    assert F.markdown_table(groups).strip() in docs
    assert F.spread_table(groups).strip() in docs


# ---- the goals per grouping (strict xfails carrying the shipped numbers where unmet) ------

_GROUPS = load_priors()["groups"]["groupings"]


def _group_goal_met(grouping: str) -> bool:
    s = _GROUPS[grouping]["summary"]
    return s["step_median_error"] <= 0.30 and s["logs_past_2x"] == 0 and s["gen_median_error"] <= 0.35


def _group_case(grouping: str):
    s = _GROUPS[grouping]["summary"]
    why = (f"one {grouping} held out: step median {100 * s['step_median_error']:.1f}% (goal 30%), worst "
           f"{s['worst_step_ratio']:.2f}x, {s['logs_past_2x']} log(s) past 2x, generation "
           f"{100 * s['gen_median_error']:.1f}% (goal 35%); docs/step-model.md says why")
    # the id is not the bare "gpu": conftest skips a test with that keyword on a machine without CUDA
    return pytest.param(grouping, id=f"one_{grouping}_held_out",
                        marks=[] if _group_goal_met(grouping) else [pytest.mark.xfail(strict=True, reason=why)])


@pytest.mark.parametrize("grouping", [_group_case(g) for g in ("size", "gpu", "backend")])
def test_group_held_out_goal(grouping):
    """Zero-shot with one model size / GPU type / trainer backend held out: step median error <= 30%,
    no log past 2x, generation <= 35% (issue 36's goals), on the shipped evaluation."""
    s = _GROUPS[grouping]["summary"]
    assert s["logs"] >= 20, s
    assert s["step_median_error"] <= 0.30 and s["logs_past_2x"] == 0, s
    assert s["gen_median_error"] <= 0.35, s
    assert all(0.5 <= v["step"]["ratio"] <= 2.0 for v in _GROUPS[grouping]["per_log"].values())
