"""``polytrace validate`` says where the model is below the naive predictor (a goal met there is
not reported as a plain "met"), and ``--fail-on-goals`` turns a missed goal into exit 1 for CI."""

from __future__ import annotations

import json

import pytest

from polytrace.calibrate.validate import ValidationResult, below_naive
from polytrace.cli import main

# a steady PPO log whose goals are met; and one where goals are missed
BELOW = "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log"
MISSED = "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"


# the six ``validate`` runs price two corpus logs with no flags, as the corpus read does: in the
# corpus's xdist group, each once a session (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("each_log_priced_once")


@pytest.fixture
def step_below_naive(monkeypatch):
    """validate's real result on BELOW with the naive predictor's step accuracy set 0.3 points above
    the model's (which log sits there moves with the model: the rendering is what is tested)."""
    import polytrace.calibrate.validate as V

    real = V.validate

    def fake(*args, **kwargs):
        res = real(*args, **kwargs)
        step = res.accuracy["step"]
        step["naive_accuracy"] = step["accuracy"] + 0.3
        return res

    monkeypatch.setattr(V, "validate", fake)


def test_below_naive_is_exactly_the_stages_the_mean_beats():
    acc = {"gen": {"accuracy": 91.0, "naive_accuracy": 90.0}, "step": {"accuracy": 96.8, "naive_accuracy": 97.1},
           "ref": {"accuracy": 80.0, "naive_accuracy": None}, "tie": {"accuracy": 95.0, "naive_accuracy": 95.0}}
    assert below_naive(acc) == {"step": {"accuracy": 96.8, "naive_accuracy": 97.1}}


def test_a_goal_met_below_the_naive_predictor_says_so(capsys, validation_logs, step_below_naive):
    assert main(["validate", str(validation_logs / BELOW), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    step = data["accuracy"]["step"]
    assert data["goals"]["step_accuracy_ge_95"] and step["accuracy"] < step["naive_accuracy"]
    assert data["below_naive"]["step"] == {"accuracy": step["accuracy"], "naive_accuracy": step["naive_accuracy"]}
    assert set(data["below_naive"]) == {k for k, a in data["accuracy"].items()
                                        if a["naive_accuracy"] is not None and a["accuracy"] < a["naive_accuracy"]}
    typed = ValidationResult.from_json(data)  # the --json document is the type's, key for key and in order
    assert typed.to_json() == data and list(typed.to_json()) == list(data) and typed.below_naive == data["below_naive"]
    assert main(["validate", str(validation_logs / BELOW)]) == 0
    out = capsys.readouterr().out
    goals = next(ln for ln in out.splitlines() if ln.startswith("goals: "))
    assert "step_accuracy_ge_95 met but below the naive predictor" in goals
    below = next(ln for ln in out.splitlines() if ln.startswith("below the naive predictor"))
    assert f"step ({step['accuracy']:.2f}% vs {step['naive_accuracy']:.2f}%)" in below
    # every goal met: --fail-on-goals keeps exit 0
    assert main(["validate", str(validation_logs / BELOW), "--fail-on-goals"]) == 0


def test_fail_on_goals_exits_1_on_a_missed_goal(capsys, validation_logs):
    assert main(["validate", str(validation_logs / MISSED)]) == 0  # reported, not failed, by default
    out = capsys.readouterr().out
    assert "step_accuracy_ge_95 NOT met" in out
    assert main(["validate", str(validation_logs / MISSED), "--fail-on-goals"]) == 1
    assert "exit 1 (--fail-on-goals): step_accuracy_ge_95" in capsys.readouterr().out
    assert main(["validate", str(validation_logs / MISSED), "--fail-on-goals", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["goals"]["step_accuracy_ge_95"] is False
