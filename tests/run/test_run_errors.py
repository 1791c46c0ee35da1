"""Bad run settings are one line naming the setting and where it came from, exit 2 (issue 35 step
5): a setting the command or mode does not use, a setting given twice with two values, and a
calibration file whose field is invalid (named by the file and its key)."""

from __future__ import annotations

import json

import pytest

from polytrace.cli import main
from polytrace.run.spec import RunSpec, SpecError
from polytrace.stepmodel import estimate

RUN = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--prompts", "16"]


def _error(capsys, argv) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:  # a usage error found while parsing (argparse)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("polytrace: error: "), err
    return err


@pytest.mark.parametrize("extra,says", [
    (["--train-tp", "2"], "--train-tp 2 is Megatron's tensor parallelism: add --strategy megatron"),
    (["--train-pp", "2"], "--train-pp 2 is Megatron's pipeline parallelism: add --strategy megatron"),
    (["--compare-modes", "--mode", "sync"], "--compare-modes prices sync, one-step-off and fully-async side by "
                                            "side: drop --mode sync"),
    (["--amdahl", "3"], "--amdahl sets the speedup of the Amdahl table --kernels prints: add --kernels"),
])
def test_a_flag_the_command_does_not_use(capsys, extra, says):
    assert says in _error(capsys, RUN + extra)


def test_megatron_takes_its_layout(capsys):
    assert main(RUN + ["--strategy", "megatron", "--train-tp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["train_tp"] == 2


def test_the_library_refuses_it_too():
    with pytest.raises(SpecError, match="--train-tp 4 is Megatron's tensor parallelism"):
        estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8, prompts=16, train_tp=4)
    with pytest.raises(SpecError, match="^rollout_tp must be a positive integer, got 0$"):
        RunSpec.build({"rollout_tp": 0}, origin=lambda name: name)
    with pytest.raises(SpecError, match="not a run setting: tensor_parallel"):
        RunSpec.build({"tensor_parallel": 2})


@pytest.mark.parametrize("argv,says", [
    (["--n", "4", "--n", "8"], "--n is given twice, as 4 and 8: keep one"),
    (["--strategy", "fsdp", "--strategy", "megatron"], "--strategy is given twice, as fsdp and megatron"),
    (["--mem-fraction", "0.6", "--set", "actor_rollout_ref.rollout.gpu_memory_utilization=0.7"],
     "--set actor_rollout_ref.rollout.gpu_memory_utilization=0.7: contradicts --mem-fraction 0.6"),
])
def test_a_setting_given_twice_with_two_values(capsys, argv, says):
    assert says in _error(capsys, RUN + argv)


def test_the_same_value_twice_is_no_contradiction(capsys):
    assert main(RUN + ["--n", "4", "--n", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["n"] == 4


@pytest.fixture(scope="module")
def calibration(tmp_path_factory, validation_logs):
    path = tmp_path_factory.mktemp("cal") / "cal.json"
    assert main(["calibrate", str(validation_logs / "verl_qwen2-7b_ppo_8gpu_b1024x5.log"), "-o", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.parametrize("key,value,says", [
    ("strategy", "deepspeed", "config.strategy is 'deepspeed' (the setting --strategy must be one of fsdp, megatron)"),
    ("use_ref", "yes", "config.use_ref is 'yes' (the setting --no-ref must be true or false)"),
    ("mem_fraction", 1.5, "config.mem_fraction is 1.5 (the setting --mem-fraction must be in [0.05, 0.99])"),
    ("train_tp", 0, "config.train_tp is 0 (the setting --train-tp must be a positive integer)"),
])
def test_a_calibration_field_that_is_invalid_names_the_file_and_key(capsys, tmp_path, calibration, key, value, says):
    doc = dict(calibration, config={**calibration["config"], key: value})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = _error(capsys, ["estimate", "--calibration", str(bad)])
    assert f"--calibration {bad}: {says}" in err


def test_a_set_setting_is_named_by_its_key_not_a_flag_never_passed(capsys):
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    err = _error(capsys, RUN + ["--set", f"{key}=3"])
    assert f"--set {key} 3 does not divide --gpus 8" in err and "--rollout-tp" not in err
    assert "--rollout-tp 3 does not divide --gpus 8" in _error(capsys, RUN + ["--rollout-tp", "3"])
