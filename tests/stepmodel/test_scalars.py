"""The priors and a calibration are one type (``compose.scalars.Scalars``: numbers with their
provenance), not a dict or the string "priors" (issue 35 item 2)."""

from __future__ import annotations

import itertools

import pytest

from polytrace.calibrate.files import scalars_of
from polytrace.errors import PolytraceError
from polytrace.stepmodel import estimate, mode_estimate
from polytrace.stepmodel.efficiency import PRIORS, PRIORS_PATH, prior_scalars
from polytrace.stepmodel.scalars import CITED, FITTED, Scalars, as_scalars

ARGS = ("dapo-math-32b", "qwen2.5-7b", "h100", 8)
SMALL = dict(steps=[0], prompts=16, results_root="/nonexistent")


@pytest.mark.parametrize("eager,recompute", list(itertools.product((False, True), repeat=2)))
def test_the_priors_resolve_under_the_runs_settings(eager, recompute):
    priors = Scalars.priors()
    assert priors.is_priors and priors.provenance == CITED and priors.source == str(PRIORS_PATH)
    assert priors.for_run(eager, recompute) == prior_scalars(eager=eager, gradient_checkpointing=recompute)


def test_a_calibration_keeps_its_numbers_and_says_where_they_come_from():
    values = {"rollout_slowdown": 2.0, "gen_overhead_s": 1.5}
    cal = Scalars.fitted(values, "cal.json", "log, 10 calibration steps")
    values["rollout_slowdown"] = 9.0  # the caller's dict changing later moves nothing
    assert cal.provenance == FITTED and not cal.is_priors and cal.window == "log, 10 calibration steps"
    assert cal.for_run(True, False) == cal.for_run(False, True) == {"rollout_slowdown": 2.0, "gen_overhead_s": 1.5}


def test_what_callers_give_reads_as_one_type():
    assert as_scalars(None) is None
    assert as_scalars(PRIORS) == Scalars.priors()
    cal = Scalars.fitted({"rollout_slowdown": 2.0}, "cal.json")
    assert as_scalars(cal) is cal
    for bad in ("prior", 3):
        with pytest.raises(PolytraceError, match="calibration"):
            as_scalars(bad)
    # numbers without a source: every estimate prints where its scalars come from
    with pytest.raises(PolytraceError, match=r"^calibration given as a dict of scalars: give a Scalars"):
        as_scalars({"rollout_slowdown": 2.0})


def test_the_type_prices_as_the_old_forms_did():
    by_type = estimate(*ARGS, calibration=Scalars.priors(), **SMALL)
    by_name = estimate(*ARGS, calibration=PRIORS, **SMALL)
    assert by_type.to_json() == by_name.to_json() and "shared priors applied" in by_type.source
    values = {"rollout_slowdown": 2.0, "gen_overhead_s": 1.5}
    fitted = estimate(*ARGS, calibration=Scalars.fitted(values, "cal.json"), **SMALL)
    with pytest.raises(PolytraceError, match="dict of scalars"):
        estimate(*ARGS, calibration=dict(values), **SMALL)
    bare = estimate(*ARGS, **SMALL)
    # the slowdown and the constant reach generation: 2x its roofline work plus 1.5 s
    assert fitted.summary["mean_stages_s"]["gen"] == pytest.approx(2 * bare.summary["mean_stages_s"]["gen"] + 1.5,
                                                                   rel=1e-12)
    off = dict(mode="one-step-off", rollout_gpus=4, **SMALL)
    assert (mode_estimate(*ARGS, calibration=Scalars.priors(), **off).to_json()
            == mode_estimate(*ARGS, calibration=PRIORS, **off).to_json())


def test_a_calibration_file_reads_as_fitted_scalars():
    doc = {"path": "runs/cal.json", "scalars": {"rollout_slowdown": 1.25},
           "source": {"kind": "log", "calibration_steps": [1, 2, 3]}}
    cal = scalars_of(doc)
    assert cal == Scalars(FITTED, "runs/cal.json", "log, 3 calibration steps", {"rollout_slowdown": 1.25})
    assert scalars_of({"path": "s.json", "scalars": {}, "source": {"kind": "stage-times"}}).window == "stage-times"
