"""The update's MFU as verl printed it over its versions (``calibrate/mfu.py``), on small synthetic
logs written here: ``mfu/actor`` (early 2025, e.g. the MI300X runs of verl's baseline page) reads
as ``perf/mfu/actor`` does; a reading of H20's 148 TFLOP/s class keeps the H200 that verl before
2025-06-06 scored against it, and the roofline test chooses between them."""

from __future__ import annotations

import pytest

from polytrace.calibrate.gpuinfer import INFERRED_NOTE
from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.mfu import check_gpu, read_mfu, verl_flops, zero_mfu_rules_out
from polytrace.calibrate.validate import prepare
from polytrace.logs import read_log
from polytrace.run.hardware import get_gpu

LAUNCH = """### grpo_trainer/run_deepseek7b_llm.sh
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=64 \\
    data.max_prompt_length=512 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.model.path=deepseek-ai/deepseek-llm-7b-chat \\
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \\
    actor_rollout_ref.rollout.n=5 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \\
    trainer.n_gpus_per_node=8 \\
    trainer.nnodes=1
"""
PROMPT, RESPONSE, UPDATE = 100.0, 300.0, 40.0  # mean lengths (tokens), update seconds


RAY = "2025-03-24 00:34:21,907\tINFO worker.py:1843 -- Started a local Ray instance."


def _write(path, key: str, mfu: float, tokens: float, steps: int, old_log_prob: float = 5.0):
    lines = [LAUNCH, RAY]
    for k in range(1, steps + 1):
        lines.append(f"step:{k} - {key}:{mfu:.6f} - response_length/mean:{RESPONSE} - prompt_length/mean:{PROMPT} - "
                     f"timing_s/gen:30.0 - timing_s/old_log_prob:{old_log_prob} - timing_s/update_actor:{UPDATE} - "
                     f"timing_s/step:60.0 - perf/total_num_tokens:{tokens:.0f}")
    path.write_text("\n".join(lines) + "\n")


def _log(tmp_path, key: str, peak_tflops: float, steps: int = 6, old_log_prob: float = 5.0):
    """A log whose MFU (under ``key``) is what verl prints on a device of ``peak_tflops``."""
    path = tmp_path / "run.log"
    seqs, length = 64 * 5, PROMPT + RESPONSE
    tokens = seqs * length
    _write(path, key, 0.1, tokens, steps)  # read once for the model's shape
    run, _ = config_from_log(read_log(path))
    flops = verl_flops(run.model, tokens, seqs * length * length)
    _write(path, key, flops / (UPDATE * 8 * peak_tflops * 1e12), tokens, steps, old_log_prob)
    log = read_log(path)
    return log, config_from_log(log)[0]


@pytest.mark.parametrize("key", ["perf/mfu/actor", "mfu/actor"])
def test_both_spellings_read_back_the_peak(tmp_path, key):
    log, run = _log(tmp_path, key, 1307.0)
    r = read_mfu(log, run)
    assert r is not None and r.steps == 6
    # MFU printed to 6 decimals: the peak comes back to 1e-4 of itself (a planted scale is far off)
    assert r.peak_tflops == pytest.approx(1307.0, rel=1e-4)
    assert (r.verl_class, r.choice) == (1307.0, "mi300x")


def test_an_unknown_mfu_key_reads_nothing(tmp_path):
    log, run = _log(tmp_path, "perf/mfu/critic", 1307.0)
    assert read_mfu(log, run) is None


def test_the_h20_class_keeps_the_h200_older_verl_scored_against_it(tmp_path):
    log, run = _log(tmp_path, "perf/mfu/actor", 148.0)
    r = read_mfu(log, run)
    assert r.verl_class == 148.0 and r.candidates == ("h20", "h200") and r.choice == "h20"
    assert r.started == "2025-03-24"
    assert "h200 too: verl before 2025-06-06" in r.say() and "(the run started 2025-03-24)" in r.say()
    # --gpu h200 agrees with the reading: no contradiction note; a class it is not in still gets one
    assert check_gpu(r, get_gpu("h200")) is None
    assert "h100-sxm" in check_gpu(r, get_gpu("h100-sxm"))
    # the A100 class has no such alias
    log, run = _log(tmp_path, "perf/mfu/actor", 312.0)
    assert "h200" not in read_mfu(log, run).candidates


def _prepared_gpu(tmp_path, old_log_prob):
    log, run = _log(tmp_path, "perf/mfu/actor", 148.0, steps=12, old_log_prob=old_log_prob)
    _log_, run, notes, _rows, _split = prepare(tmp_path / "run.log", Overrides(), window=4)
    return run.gpu.slug, next(n for n in notes if n.startswith(INFERRED_NOTE))


def test_the_roofline_test_chooses_between_h20_and_h200(tmp_path):
    """The forward pass of 320 x 400 tokens through 7B (2 N tokens = 1.8 PFLOP, 0.22 PFLOP a GPU)
    takes 1.5 s at H20's 148 TFLOP/s peak and 0.22 s at H200's 989 (the roofline test adds the
    memory-bound parts): at 15 s the H20 stands, at 0.5 s only the H200 can have run it."""
    slug, note = _prepared_gpu(tmp_path, 15.0)
    assert slug == "h20" and "h200 too" in note
    slug, note = _prepared_gpu(tmp_path, 0.5)
    assert slug == "h200" and "rejected: h20 (" in note


def _zero_mfu_log(tmp_path, key="perf/mfu/actor"):
    path = tmp_path / "run.log"
    _write(path, key, 0.0, 64 * 5 * (PROMPT + RESPONSE), 12, 15.0)
    return path


def test_an_mfu_of_zero_rules_out_the_devices_verl_always_knew(tmp_path):
    """verl prints MFU 0 only where its table has no peak for the device (B200 before 2025-08-14):
    7B's update at 40 s on 8 GPUs does ~17 TFLOP/s a GPU by verl's count, MFU ~0.054 on an A100's
    312 and ~0.017 on an H100's 989, both printable; the assumed A100 gives way to the B200."""
    log = read_log(_zero_mfu_log(tmp_path))
    run = config_from_log(log)[0]
    out = zero_mfu_rules_out(log, run, ("a100-80g", "h100-sxm", "h200", "b200"))
    assert sorted(out) == ["a100-80g", "h100-sxm", "h200"]
    seqs, length = 64 * 5, PROMPT + RESPONSE
    rate = verl_flops(run.model, seqs * length, seqs * length * length) / (UPDATE * 8) / 1e12
    assert f"would read {rate / 312:.3f}" in out["a100-80g"] and f"would read {rate / 989:.3f}" in out["h100-sxm"]
    _log, run, notes, _rows, _split = prepare(tmp_path / "run.log", Overrides(), window=4)
    note = next(n for n in notes if n.startswith(INFERRED_NOTE))
    assert run.gpu.slug == "b200" and "a100-80g (the log's MFU is 0.000 on all 12 steps" in note


def test_a_given_gpu_an_mfu_of_zero_contradicts_gets_a_note(tmp_path):
    _zero_mfu_log(tmp_path)
    _log, run, notes, _rows, _split = prepare(tmp_path / "run.log", Overrides(gpu="h100-sxm"), window=4)
    assert run.gpu.slug == "h100-sxm"
    assert any(n.startswith("GPU check: the log's MFU is 0.000") and "check --gpu" in n for n in notes)


def test_without_mfu_keys_the_assumed_gpu_stands(tmp_path):
    _zero_mfu_log(tmp_path, key="perf/mfu/critic")  # a key read as no MFU at all
    _log, run, notes, _rows, _split = prepare(tmp_path / "run.log", Overrides(), window=4)
    assert run.gpu.slug == "a100-80g"
    assert any(n.startswith("GPU not stated in the log: assumed a100-80g") for n in notes)
