"""The update's MFU as verl printed it over its versions (``calibrate/mfu.py``), on small synthetic
logs written here: ``mfu/actor`` (early 2025, e.g. the MI300X runs of verl's baseline page) reads
as ``perf/mfu/actor`` does; a reading of H20's 148 TFLOP/s class keeps the H200 that verl before
2025-06-06 scored against it, and the roofline test chooses between them."""

from __future__ import annotations

import pytest

from polytrace.calibrate.gpuinfer import INFERRED_NOTE
from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.mfu import check_gpu, read_mfu, verl_flops
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
