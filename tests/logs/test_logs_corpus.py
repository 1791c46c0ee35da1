"""Every log the project reads, read with no flag: its model, GPU count and batch are read right.

Expected values are written from each log's own launch command (shown beside each row), not from
the code's output. The shared logs come from the ``validation_logs`` fixture (``tests/conftest.py``:
``$POLYTRACE_SHARED/validation-logs``, else ``../shared/validation-logs`` beside the checkout;
skipped when neither exists, failing when the variable is set but the folder is missing). None of
them names its accelerator: each reads as an assumed A100 with a note, never silently."""

from __future__ import annotations

import pytest

from polytrace.calibrate.logconfig import config_from_log
from polytrace.logs import read_log

# file -> (model preset, GPUs, prompts per step, responses per prompt), from the launch command
SHARED = {
    # bash examples/ppo_trainer/run_gemma.sh ... trainer.n_gpus_per_node=2 data.train_batch_size=512;
    # the actor is an SFT checkpoint of google/gemma-2-2b-it (the script's own path)
    "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log": ("gemma-2-2b", 2, 512, 1),
    # actor_rollout_ref.model.path=.../models--Qwen--Qwen2-7B-Instruct/... rollout.n=5, 1024 prompts, 8 GPUs
    "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log": ("qwen2-7b", 8, 1024, 5),
    # qwen2_7b_gsm8k_8gpu_recommended.sh: Qwen/Qwen2-7B-Instruct, train_batch_size 1024, rollout.n 5
    "verl_qwen2-7b_ppo_8gpu_b1024x5.log": ("qwen2-7b", 8, 1024, 5),
    # qwen2_7b_gsm8k_8gpu_min.sh: Qwen/Qwen2-7B-Instruct, train_batch_size 512, n 1
    "verl_qwen2-7b_ppo_8gpu_b512x1.log": ("qwen2-7b", 8, 512, 1),
    # run_demo_qwen2.5b_grpo_8gpu.sh: Qwen/Qwen2.5-0.5B-Instruct, 256 prompts x 2 (the printed critic
    # section names deepseek-llm-7b-chat: GRPO runs no critic)
    "verl_qwen2.5-0.5b_grpo_8gpu_n2_dynbsz.log": ("qwen2.5-0.5b", 8, 256, 2),
    # "trainer.n_gpus_per_node=1 ... actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct data.train_batch_size=256"
    "verl_qwen2.5-0.5b_ppo_1gpu_p1024_r512.log": ("qwen2.5-0.5b", 1, 256, 1),
    "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log": ("qwen2.5-0.5b", 1, 256, 1),
    # run_demo_qwen2.5b_ppo_8gpu.sh: Qwen/Qwen2.5-0.5B-Instruct, train_batch_size 2048
    "verl_qwen2.5-0.5b_ppo_8gpu_b2048.log": ("qwen2.5-0.5b", 8, 2048, 1),
    # ray job: Qwen/Qwen2.5-7B-Instruct, trainer.nnodes=2 x n_gpus_per_node=8, train_batch_size 256
    "verl_qwen2.5-7b_ppo_16gpu_resumed.log": ("qwen2.5-7b", 16, 256, 1),
}


def test_the_corpus_is_complete(validation_logs):
    """A log added to the shared folder gets its row here (its expected values read by a person)."""
    assert sorted(p.name for p in validation_logs.glob("*.log")) == sorted(SHARED)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_each_shared_log_reads_its_identity_with_no_flag(validation_logs, name):
    model, gpus, prompts, n = SHARED[name]
    run, notes = config_from_log(read_log(validation_logs / name))
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == (model, gpus, prompts, n)
    assert run.gpu.slug == "a100-80g"
    assert any(x.startswith("GPU not stated in the log: assumed a100-80g") for x in notes)
    assert any(x.startswith(f"model: {model} from") for x in notes)  # where the model was read
