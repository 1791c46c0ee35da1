"""Inputs that were accepted silently or answered unclearly (issue 38), one test each: a companion
file that is no companion, a GPU the log beats, bench on a CPU, more GPUs than sequences, a folder
of other files given as a trace, the gate's refusal, and the fitted profile's name."""

from __future__ import annotations

import json

import pytest
from _verl_logs import Run, write_log

from polytrace.calibrate.gpuinfer import CONTRADICTED_NOTE
from polytrace.cli import main

SMALL = dict(steps=14, prompts=32, n=4, max_response=256, max_prompt=256, micro_per_gpu=4, mini_batch=16)


def _one_line_error(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("polytrace: error:"), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def log(tmp_path) -> str:
    return write_log(tmp_path / "run.log", Run(**SMALL))


def test_validate_refuses_a_profile_json_as_config(tmp_path, capsys, log):
    profile = tmp_path / "mine.json"
    profile.write_text(json.dumps({"format": "polytrace.profile", "version": 1, "name": "mine"}))
    code = main(["validate", log, "--gpu", "h100", "--config", str(profile)])
    _one_line_error(capsys, code, f"--config {profile}", "polytrace.profile", "not a companion file")


def test_validate_refuses_another_runs_log_as_config(tmp_path, capsys, log):
    other = write_log(tmp_path / "other.log", Run(**SMALL))
    code = main(["validate", log, "--gpu", "h100", "--config", other])
    _one_line_error(capsys, code, f"--config {other}", "is a training log", "step lines")
    code = main(["validate", log, "--gpu", "h100", "--config", log])
    _one_line_error(capsys, code, "is the LOG itself")


def test_validate_refuses_a_config_that_states_no_run_setting(tmp_path, capsys, log):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"lr": 1e-6, "notes": "x"}))
    code = main(["validate", log, "--gpu", "h100", "--config", str(cfg)])
    _one_line_error(capsys, code, f"--config {cfg}", "states no setting of a training run", "lr")


def test_validate_on_a_gpu_the_log_beats_says_so_and_prints_no_impossible_constant(validation_logs, capsys):
    """The issue's case: H100 logs read as A100: the fit holds stages at the peak roofline and
    drives their constants to ~1e-29 s."""
    log = validation_logs / "verl_qwen2-7b_ppo_8gpu_b1024x5.log"
    assert main(["validate", str(log), "--gpu", "a100-80g"]) == 0
    out = capsys.readouterr().out
    # said once: gpuinfer's note (no warning repeating it)
    said = [ln for ln in out.splitlines() if "a100-80g" in ln and "peak roofline" in ln]
    assert len(said) == 1 and said[0].startswith(f"note: {CONTRADICTED_NOTE}a100-80g (--gpu)"), said
    assert "some step beats its peak roofline" in said[0] and "warning: --gpu" not in out
    constants = next(ln for ln in out.splitlines() if ln.startswith("calibrated on"))
    assert "e-2" not in constants and "e-1" not in constants, constants
    assert main(["validate", str(log)]) == 0  # inferred, not forced: no such warning
    assert "warning: --gpu" not in capsys.readouterr().out


def test_bench_on_a_cpu_needs_allow_cpu(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: bench runs")
    out = tmp_path / "b"
    code = main(["bench", "-o", str(out), "--suite", "packing", "-q"])
    _one_line_error(capsys, code, "no CUDA GPU here", "--allow-cpu")
    assert not out.exists()


def test_pack_compare_refuses_more_gpus_than_sequences(capsys):
    code = main(["pack-compare", "deepcoder-14b", "--gpus", "65536", "--steps", "0"])
    _one_line_error(capsys, code, "--gpus 65536", "128 sequences", "use --gpus 128 or fewer")
    assert main(["pack-compare", "deepcoder-14b", "--gpus", "128", "--steps", "0", "--no-peers", "--json"]) == 0


def test_describe_a_folder_of_other_files_names_the_folder_and_the_file(tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "profile.json").write_text(json.dumps({"format": "polytrace.profile", "name": "x"}))
    code = main(["describe", str(folder)])
    _one_line_error(capsys, code, f"{folder}: a folder is read as one trace", "profile.json",
                    "give a profile or trace file itself")


def test_gate_refusal_is_its_reason_first_on_stderr(tmp_path, capsys):
    from _results_synth import make_result, write

    base = write(tmp_path / "base.json", make_result(seed=1, measured_on="cpu-interpreter", gpu="cpu"))
    cand = write(tmp_path / "cand.json", make_result(seed=2, measured_on="cpu-interpreter", gpu="cpu"))
    code = main(["gate", str(base), str(cand)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("polytrace: error: gate refused: CPU-interpreter")
    assert main(["gate", str(base), str(cand), "--verbose"]) == 2
    captured = capsys.readouterr()
    assert "REFUSED" in captured.out and captured.err.startswith("polytrace: error: gate refused:")
    assert main(["gate", str(base), str(cand), "--json"]) == 2  # machine output stays whole for CI
    assert json.loads(capsys.readouterr().out)["refusals"]


def test_fit_names_the_profile_after_the_trace(tmp_path, capsys):
    trace = tmp_path / "run7"
    trace.mkdir()
    lines = [json.dumps({"step": 0, "input": 100 + g, "output": [50 + g, 60 + 3 * g, 400, 70], "n_sampling": 4})
             for g in range(12)]
    (trace / "packed_lengths_step_0.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out" / "mine.json"
    assert main(["fit", str(trace), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["name"] == "run7" and "profile 'run7'" in capsys.readouterr().out
    assert main(["fit", str(trace), "-o", str(out), "--name", "chosen"]) == 0
    assert json.loads(out.read_text())["name"] == "chosen"
