"""Bad input found by the round-5 trial (issue 38): each class failed before, as a traceback, an error
naming a flag the user never typed or none at all, or a silent run on nonsense. In-process through
``main`` (no subprocess): one line ``polytrace: error: ...`` naming the argument, file or key, exit 2."""

from __future__ import annotations

import json

import pytest
from _results_synth import make_result

from polytrace.cli import main

E8 = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8"]


def run(capsys, argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors exit 2 from inside parse_args
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, argv, *needles):
    code, out, err = run(capsys, argv)
    assert code == 2, (code, out[-300:], err)
    assert err.startswith("polytrace: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return out, err


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "intermediate_size": 11008, "vocab_size": 32000}


# zero layers or heads were ZeroDivisionError tracebacks; -4096 was blamed on --lora-rank 0; 'big'
# said "invalid literal for int()" without the field
@pytest.mark.parametrize("field,value,needle", [
    ("num_hidden_layers", 0, "missing or bad field num_hidden_layers = 0: not a positive integer"),
    ("num_attention_heads", 0, "missing or bad field num_attention_heads = 0: not a positive integer"),
    ("hidden_size", -4096, "missing or bad field hidden_size = -4096: not a positive integer"),
    ("hidden_size", "big", "missing or bad field hidden_size = 'big': not a positive integer"),
    ("hidden_size", None, "missing or bad field hidden_size: absent"),
    ("vocab_size", 3.5, "missing or bad field vocab_size = 3.5: not a positive integer"),
    ("num_key_value_heads", -8, "missing or bad field num_key_value_heads = -8: not a whole number >= 0"),
    ("num_experts", True, "missing or bad field num_experts = True: not a whole number >= 0"),
])
def test_a_model_config_field_out_of_range_is_named(tmp_path, capsys, field, value, needle):
    cfg = dict(LLAMA, **{field: value})
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    one_line_error(capsys, ["estimate", "--model", tmp_path / "m", "--gpu", "h100", "--gpus", "8"],
                   f"model config {tmp_path / 'm' / 'config.json'}: {needle}")


def test_a_valid_model_config_still_prices(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(dict(LLAMA, num_key_value_heads=0, head_dim=None)))
    code, out, err = run(capsys, ["estimate", "--model", tmp_path / "config.json", "--gpu", "h100", "--gpus", "8"])
    assert code == 0 and "Traceback" not in err and "step" in out


@pytest.mark.parametrize("argv,needle", [
    (E8 + ["--gpu", ""], "estimate: --gpu '': empty; give a preset (polytrace presets gpus)"),
    (E8 + ["--profile", ""], "estimate: --profile '': empty"),  # was the default profile, silently
    (E8 + ["--rollout-tp", " "], "--rollout-tp ' ': empty"),
    (["report", "--step", "0", "-o", ""], "report: -o/--out '': empty; give a path"),  # was the current folder
    (["validate", ""], "validate: log '': empty; give a log file"),
    (["fit", "t.jsonl", "--name", "", "-o", "p.json"], "fit: --name '': empty"),
    (["describe", " "], "describe: PROFILE|TRACE ' ': empty"),
])
def test_an_empty_value_is_refused_naming_the_argument(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    one_line_error(capsys, argv, needle)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_an_empty_description_is_a_value(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"step": s, "input": 10 + g, "output": [5, 9, 40 + g], "n_sampling": 3}) + "\n"
                             for s in range(2) for g in range(8)))
    code, _, err = run(capsys, ["fit", trace, "--description", "", "-o", tmp_path / "p.json"])
    assert code == 0, err


@pytest.mark.parametrize("argv,needle", [
    (E8 + ["--seed", "-1"], "estimate: argument --seed: expected a non-negative integer, got '-1'"),
    (["report", "--seed", "-3", "--json"], "report: argument --seed: expected a non-negative integer"),
    (["pack-compare", "dapo-math-32b", "--seed", "-1"], "pack-compare: argument --seed: expected a non-negative"),
    (["tune", "pack", "--profile", "dapo-math-32b", "--seed", "-2"], "tune: argument --seed: expected a non-negative"),
    (["tune", "pack", "--profile", "dapo-math-32b", "--max-buckets", "0"], "tune: argument --max-buckets: expected a "
                                                                           "positive integer"),
    (["pack-compare", "dapo-math-32b", "--micro-batch-tokens", "0"], "argument --micro-batch-tokens: expected a "
                                                                     "positive integer"),
    (E8 + ["--steps", "0,,1"], "argument --steps: steps must look like"),  # was steps 0 and 1, silently
    (E8 + ["--steps", "3,"], "argument --steps: steps must look like"),
    (E8 + ["--train-batch", "100000"], "--train-batch 100000 (12500 prompts of --n 8) does not divide the batch of "
                                       "96 prompts (verl requires it); pass a divisor of 768 responses"),
    (["describe", "dapo-math-32b", "--drift", "-1"], "--drift: unknown drift preset '-1'"),
])
def test_a_value_is_refused_naming_its_flag(capsys, argv, needle):
    one_line_error(capsys, argv, needle)


def _calibration(tmp_path, name="cal.json", **changes) -> str:
    doc = {"format": "polytrace.calibration", "version": 1, "scalars": {"rollout_slowdown": 1.2, "gen_overhead_s": 1.0},
           "model": {"name": "qwen2.5-7b", "family": "qwen2"}, "gpu": "h100-sxm",
           "config": {"model": "qwen2.5-7b", "n_gpus": 8, "rollout_tp": 2}}
    for key, value in changes.items():
        where, _, field = key.partition("__")
        (doc[where] if field else doc)[field or where] = value
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_calibration_fixture_prices(tmp_path, capsys):
    code, out, err = run(capsys, ["estimate", "--calibration", _calibration(tmp_path)])
    assert code == 0 and "rollout TP 2" in out, err


@pytest.mark.parametrize("changes,needle", [
    # flags the user never typed: the file and its keys (was "--rollout-tp 3 does not divide --gpus 8")
    ({"config__rollout_tp": 3}, "(config.rollout_tp = 3, config.n_gpus = 8): --rollout-tp 3 does not divide --gpus 8"),
    ({"config__n_gpus": 3}, "(config.rollout_tp = 2, config.n_gpus = 3): --rollout-tp 2 does not divide --gpus 3"),
    # a scalar no estimate reads (a typo priced nothing, silently)
    ({"scalars__rollout_slowdwn": 1.1}, "scalar name 'rollout_slowdwn' is not <kind>_slowdown"),
    ({"scalars__rollout_decode_slowdown": 1.1}, "scalar rollout_decode_slowdown is none of the"),
    ({"scalars__warp_slowdown": 2.0}, "scalar warp_slowdown is none of the"),
    # two models in one file (was priced as config.model, printed as model.name)
    ({"model__name": "nope-1b"}, "model.name 'nope-1b' and config.model 'qwen2.5-7b' differ"),
])
def test_a_calibration_file_error_names_the_file_and_key(tmp_path, capsys, changes, needle):
    path = _calibration(tmp_path, **changes)
    one_line_error(capsys, ["estimate", "--calibration", path], f"--calibration {path}", needle)


def test_a_flag_typed_over_a_calibration_is_named_as_typed(tmp_path, capsys):
    path = _calibration(tmp_path, config__rollout_tp=3)
    _, err = one_line_error(capsys, ["estimate", "--calibration", path, "--gpus", "8", "--rollout-tp", "3"],
                            "--rollout-tp 3 does not divide --gpus 8")
    assert "--calibration" not in err and "config." not in err


def _results(tmp_path, name, **kw):
    doc = make_result(seed=kw.pop("seed", 1))
    for key, value in kw.items():
        doc[key] = value
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_impact_of_files_sharing_no_benchmark_is_refused(tmp_path, capsys):
    empty, base = _results(tmp_path, "empty.json", benchmarks=[]), _results(tmp_path, "base.json")
    # was a table of +0.00% changes, exit 0
    one_line_error(capsys, ["impact", empty, base], f"BASELINE {empty} and CANDIDATE {base}: no benchmark occurs "
                                                    "in both: nothing to compare")


def test_gate_error_is_said_on_stderr_with_the_report_kept(tmp_path, capsys):
    empty, base = _results(tmp_path, "empty.json", benchmarks=[]), _results(tmp_path, "base.json")
    code, out, err = run(capsys, ["gate", empty, base])
    # was exit 2 with nothing on stderr and the reason on line 6 of the report
    assert code == 2 and err == f"polytrace: error: gate {empty} vs {base}: no benchmark id occurs in both files: " \
                                "nothing to compare\n"
    assert "REFUSED" in out


def test_validate_config_that_is_no_json_object_names_the_flag(tmp_path, capsys, validation_logs):
    cfg = tmp_path / "list.json"
    cfg.write_text("[1, 2]")
    log = validation_logs / "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log"
    one_line_error(capsys, ["validate", log, "--config", cfg], f"--config {cfg}: expected a JSON object")


@pytest.mark.parametrize("flags,needle", [
    (["--profile", "nope"], "calibrate: --profile applies to --stage-times"),  # was ignored: exit 0
    (["--rollout-engine", "vllm-v0", "--async-scheduling"], "calibrate: --rollout-engine applies to --stage-times"),
    (["--async-scheduling"], "calibrate: --async-scheduling applies to --stage-times"),
])
def test_calibrating_a_log_refuses_the_flags_it_would_ignore(tmp_path, capsys, validation_logs, flags, needle):
    log = validation_logs / "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log"
    one_line_error(capsys, ["calibrate", log, "-o", tmp_path / "cal.json", *flags], needle)
    assert not (tmp_path / "cal.json").exists()


def test_validate_refuses_a_model_the_log_contradicts(capsys, validation_logs):
    """A 70B priced on a 0.5B run's timings printed -4000% accuracy at exit 0."""
    log = validation_logs / "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log"
    one_line_error(capsys, ["validate", log, "--model", "llama-3.1-70b"],
                   f"--model llama-3.1-70b: {log} states qwen2.5-0.5b (actor_rollout_ref.model.path",
                   "143x its parameters")
