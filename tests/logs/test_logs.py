"""verl console logs, wandb CSV exports and launch-command parsing."""

from __future__ import annotations

import pytest

from polytrace.errors import PolytraceError
from polytrace.logs import parse_overrides, read_log
from polytrace.logs.launch import printed_config

ESC = "\x1b"


def _line(step, body, prefix="(TaskRunner pid=1)"):
    return f"{ESC}[36m{prefix}{ESC}[0m step:{step} - {body}\n"


def test_console_log_both_timing_styles(tmp_path):
    text = (
        "+ python3 -m verl.trainer.main_ppo data.train_batch_size=8 'trainer.logger=[console,wandb]' "
        "actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=2 data.train_batch_size=16\n"
        + _line(0, "val-core/x/reward/mean@1:0.2")  # validation-only line: not a training step
        + _line(1, "timing_s/gen:10.5 - response_length/mean:100.0 - critic/lr(1e-4):0.100 - timing_s/step:20.0")
        + _line(2, "timing/gen:11.0 - timing/testing:30.0 - response_length/mean:110.0")
    )
    path = tmp_path / "run.log"
    path.write_text(text)
    log = read_log(path)
    assert [s.step for s in log.steps] == [1, 2]
    assert log.steps[0].timings == {"gen": 10.5, "step": 20.0}
    assert log.steps[0].metrics["critic/lr(1e-4)"] == pytest.approx(0.1)
    assert log.steps[1].timings["testing"] == 30.0
    assert log.overrides["data.train_batch_size"] == 16  # later override wins
    assert log.overrides["trainer.logger"] == ["console", "wandb"]


def test_overrides_grouped_in_one_argument():
    line = ('bash run.sh "trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.tensor_model_parallel_size=1 '
            "trainer.logger=['console'] data.max_response_length=256\"")
    ov = dict(parse_overrides(line))
    assert ov["trainer.n_gpus_per_node"] == 1
    assert ov["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 1
    assert ov["data.max_response_length"] == 256
    assert ov["trainer.logger"] == ["console"]


def test_printed_config_with_interleaved_and_missing_lines():
    pre = "(main_task pid=5) "
    lines = [
        pre + "{'actor_rollout_ref': {'rollout': {'n': 4,",
        pre + "                                   'tensor_model_parallel_size': 2}},",
        pre + " 'data': {'max_prompt_length': 512,",
        "(WorkerDict pid=9) something else",
        pre + "          'max_response_length': 256,(WorkerDict pid=9) interleaved output",
        pre + "          'train_batch_size': 64},",
        # the line opening 'trainer' was lost, so the dict no longer parses as a whole
        pre + "             'n_gpus_per_node': 2},",
        pre + " 'zeta': {'total_epochs': 15}}",
    ]
    cfg = printed_config(lines)
    assert cfg["actor_rollout_ref"]["rollout"] == {"n": 4, "tensor_model_parallel_size": 2}
    assert cfg["data"] == {"max_prompt_length": 512, "max_response_length": 256, "train_batch_size": 64}
    assert "n_gpus_per_node" not in str(cfg)  # its parent is unknown: dropped, not misplaced
    assert cfg["zeta"]["total_epochs"] == 15


def test_wandb_csv(tmp_path):
    path = tmp_path / "export.csv"
    path.write_text("Step,run - timing_s/gen,run - timing_s/gen__MIN,run - response_length/mean\n"
                    "1,12.5,12.0,300\n2,13.0,12.9,310\n3,,,\n")
    log = read_log(path)
    assert log.format == "wandb-csv"
    assert [s.timings["gen"] for s in log.steps] == [12.5, 13.0]
    assert log.steps[1].metrics["response_length/mean"] == 310


def test_no_step_lines_is_a_one_line_error(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("nothing here\nstep: not a step\n")
    with pytest.raises(PolytraceError, match="no training step lines"):
        read_log(path)
    with pytest.raises(PolytraceError, match="no such log file"):
        read_log(tmp_path / "missing.log")


EXPECTED = {
    # file: (train_batch_size, n, max prompt, max response, GPUs, rollout TP, steps)
    "verl_qwen2.5-0.5b_ppo_1gpu_p1024_r512.log": (256, None, 1024, 512, 1, 1, 435),
    "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log": (256, None, 512, 256, 1, 1, 435),
    "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log": (512, None, 1024, 512, 2, 2, 106),
    "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log": (1024, 5, 1024, 1024, 8, 2, 210),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_logs_configuration(validation_logs, name):
    log = read_log(validation_logs / name)
    c = log.config
    bs, n, mp, mr, gpus, tp, steps = EXPECTED[name]
    assert c["data.train_batch_size"] == bs
    assert c.get("actor_rollout_ref.rollout.n", 1) == (n or 1)
    assert c["data.max_prompt_length"] == mp and c["data.max_response_length"] == mr
    assert c["trainer.n_gpus_per_node"] == gpus
    assert c["actor_rollout_ref.rollout.tensor_model_parallel_size"] == tp
    assert len(log.steps) == steps
    assert all("gen" in s.timings and "response_length/mean" in s.metrics for s in log.steps)
