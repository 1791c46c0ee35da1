"""The update's MFU in the spellings verl printed over its versions (``calibrate/mfu.py``), on
small synthetic logs written here: ``mfu/actor`` (early 2025, e.g. the MI300X runs of verl's
baseline page) reads as ``perf/mfu/actor`` does, and a log priced without it says nothing."""

from __future__ import annotations

import pytest

from polytrace.calibrate.logconfig import config_from_log
from polytrace.calibrate.mfu import read_mfu, verl_flops
from polytrace.logs import read_log

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
PROMPT, RESPONSE, UPDATE = 100.0, 300.0, 20.0  # mean lengths (tokens), update seconds


def _write(path, key: str, mfu: float, tokens: float, steps: int):
    lines = [LAUNCH]
    for k in range(1, steps + 1):
        lines.append(f"step:{k} - {key}:{mfu:.6f} - response_length/mean:{RESPONSE} - prompt_length/mean:{PROMPT} - "
                     f"timing_s/gen:30.0 - timing_s/old_log_prob:5.0 - timing_s/update_actor:{UPDATE} - "
                     f"timing_s/step:60.0 - perf/total_num_tokens:{tokens:.0f}")
    path.write_text("\n".join(lines) + "\n")


def _log(tmp_path, key: str, peak_tflops: float, steps: int = 6):
    """A log whose MFU (under ``key``) is what verl prints on a device of ``peak_tflops``."""
    path = tmp_path / "run.log"
    seqs, length = 64 * 5, PROMPT + RESPONSE
    tokens = seqs * length
    _write(path, key, 0.1, tokens, steps)  # read once for the model's shape
    run, _ = config_from_log(read_log(path))
    flops = verl_flops(run.model, tokens, seqs * length * length)
    _write(path, key, flops / (UPDATE * 8 * peak_tflops * 1e12), tokens, steps)
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
