"""``estimate --calibration cal.json`` prices the calibrated run unless told otherwise: its model,
GPU, GPU count, batch, n, TP and lengths are the defaults, each flag that differs is listed, and
a stage constant the calibration copied from another stage says so (no reference stage is added
to a run that had none)."""

from __future__ import annotations

import json

import pytest

from polytrace.cli import main
from polytrace.stepmodel.result import EstimateResult

# a GRPO run without a reference pass: 1024 prompts x 5, rollout TP 2, 8 GPUs
LOG = "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"


@pytest.fixture(scope="module")
def cal(validation_logs, tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "sub" / "cal.json"  # a missing folder is created
    assert main(["calibrate", str(validation_logs / LOG), "-o", str(out)]) == 0
    return out


def _estimate(capsys, *argv):
    code = main(["estimate", *argv, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


def test_the_calibrated_run_is_the_default(cal, capsys):
    doc = json.loads(cal.read_text())
    run = doc["config"]
    assert (run["prompts_per_step"], run["n"], run["rollout_tp"], run["use_ref"]) == (1024, 5, 2, False)
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--step", "0")
    assert code == 0, err
    c = res["config"]
    for key in ("model", "gpu", "n_gpus", "prompts_per_step", "n", "rollout_tp", "max_prompt_len", "max_response_len",
                "algorithm", "use_ref"):
        assert c[key] == run[key], key
    assert res["calibration"]["differs_from_run"] == [] and "differs" not in err
    assert all(r["stages_s"]["ref"] == 0 for r in res["rows"])  # the run had no reference pass
    assert res["calibration"]["copied_constants"] == []  # nothing copied is used by this estimate


def test_flags_override_and_each_difference_is_listed(cal, capsys):
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--gpus", "16", "--prompts", "512", "--step", "0")
    assert code == 0, err
    assert res["config"]["n_gpus"] == 16 and res["config"]["prompts_per_step"] == 512
    assert res["config"]["n"] == 5 and res["config"]["rollout_tp"] == 2  # the rest still the run's
    assert res["calibration"]["differs_from_run"] == ["--gpus 16 (the calibrated run: 8)",
                                                       "--prompts 512 (the calibrated run: 1024)"]
    assert "note: differs from the calibrated run: --gpus 16 (the calibrated run: 8)" in err
    # a flag given at the run's own value is no difference
    code, res, _ = _estimate(capsys, "--calibration", str(cal), "--gpus", "8", "--step", "0")
    assert res["calibration"]["differs_from_run"] == []


def test_a_constant_copied_from_another_stage_says_so(cal, capsys):
    doc = json.loads(cal.read_text())
    assert doc["source"]["derived"]["update_critic_overhead_s"] == "copied from update_actor_overhead_s"
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--algo", "ppo", "--step", "0")
    assert code == 0, err
    copied = res["calibration"]["copied_constants"]
    assert any(line.startswith("update_critic:") and "copied from update_actor_overhead_s" in line for line in copied)
    assert any(line.startswith("values:") for line in copied)
    assert "note: update_critic: its fixed" in err


def test_without_calibration_model_gpu_and_gpus_are_required(capsys):
    assert main(["estimate", "--model", "qwen2.5-7b"]) == 2
    err = capsys.readouterr().err
    assert "required: --gpu, --gpus" in err and err.count("\n") == 1


def test_a_hand_edited_run_field_is_one_line(cal, tmp_path, capsys):
    doc = json.loads(cal.read_text())
    doc["config"]["n_gpus"] = "eight"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["estimate", "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("polytrace: error: --calibration") and "config.n_gpus is 'eight'" in err
    assert err.count("\n") == 1


def test_longer_sequences_than_the_runs_budget_take_the_default_budget(cal, tmp_path, capsys):
    doc = json.loads(cal.read_text())
    doc["config"]["micro_batch_tokens"] = 12000  # a run with a stated budget (verl's ppo_max_token_len_per_gpu)
    stated = tmp_path / "stated.json"
    stated.write_text(json.dumps(doc))
    code, res, err = _estimate(capsys, "--calibration", str(stated), "--step", "0")
    assert code == 0 and res["config"]["micro_batch_tokens"] == 12000, err  # the run's own budget
    longer = 16384
    code, res, err = _estimate(capsys, "--calibration", str(stated), "--max-response-len", str(longer), "--step", "0")
    assert code == 0, err
    assert res["config"]["micro_batch_tokens"] >= doc["config"]["max_prompt_len"] + longer
    assert any(d.startswith("--micro-batch-tokens auto (the calibrated run's 12000")
               for d in res["calibration"]["differs_from_run"])


def test_a_hand_edited_stated_profile_is_a_one_line_error(cal, tmp_path, capsys):
    doc = json.loads(cal.read_text())
    doc["source"]["profile"] = "dapo-math-32b@mean=abc"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    code, _, err = _estimate(capsys, "--calibration", str(bad), "--step", "0")
    assert code == 2 and str(bad) in err and "source.profile" in err and len(err.strip().splitlines()) == 1


def test_a_range_past_2x_is_guarded_toward_the_priors(cal, capsys):
    """4 prompts instead of the run's 1024: generation's range is past 2x (the window could not
    split its constant), so the estimate carries "guarded" (calibrate/ranges.guard against the
    zero-shot estimate of the same configuration) and says its step; the calibrated step stands."""
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--prompts", "4", "--step", "0")
    assert code == 0, err
    g = res["guarded"]
    lo, hi = res["range"]["stages_s"]["gen"]
    assert hi / lo > 2.0 and 0 < g["weights"]["gen"] < 1.0
    cal_gen, moved = res["summary"]["mean_stages_s"]["gen"], g["stages_s"]["gen"]
    assert lo <= moved < cal_gen  # the priors' generation is shorter: moved down, inside the range
    assert g["step_s"] == pytest.approx(res["summary"]["mean_step_s"] + moved - cal_gen, rel=1e-12)
    assert g["notes"] and g["notes"][0] in res["warnings"] and f"warning: {g['notes'][0]}" in err
    typed = EstimateResult.from_json(res)  # the range and the guarded step are typed fields
    assert typed.to_json() == res and typed.guarded.step_s == g["step_s"] and typed.range.step_s == tuple(
        res["range"]["step_s"]) and typed.calibration["differs_from_run"] == ["--prompts 4 (the calibrated run: 1024)"]
    assert main(["estimate", "--calibration", str(cal), "--prompts", "4", "--step", "0"]) == 0
    out = capsys.readouterr().out
    assert (f"calibrated step: {res['summary']['mean_step_s']:.1f} s, range" in out
            and f"; toward the priors where the range is past 2x: {g['step_s']:.1f} s" in out), out
    # within 2x (the run itself) nothing is guarded
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--step", "0")
    assert code == 0, err
    assert not (res.get("guarded") or {}).get("notes") and "toward the priors" not in err


def test_a_model_of_another_family_is_the_refusal_alone(cal, capsys):
    """--model differs from the calibrated run's and is of another family: the one-line error
    naming the file and both models, without a "differs" note before it (nothing was estimated)."""
    code, res, err = _estimate(capsys, "--calibration", str(cal), "--model", "llama-3.1-8b", "--step", "0")
    assert code == 2 and res is None
    assert err.startswith("polytrace: error: ") and err.count("\n") == 1, err
    assert str(cal) in err and "qwen2-7b" in err and "llama-3.1-8b" in err and "note:" not in err
