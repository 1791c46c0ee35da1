"""What a log's step metrics determine where its configuration is silent
(``calibrate/logmetrics.py``), on hand-written steps: the GPU count is
``perf/total_num_tokens / (perf/throughput x perf/time_per_step)`` (throughput per GPU), a whole
number only where the steps agree on one within 3%; a median 8.5 is no GPU count."""

from __future__ import annotations

import pytest

from polytrace.calibrate.logmetrics import infer_gpus, infer_n
from polytrace.logs import StepRecord, TrainingLog


def _log(per_step):
    return TrainingLog("run.log", "verl-console", [StepRecord(i + 1, m, {}) for i, m in enumerate(per_step)])


def _steps(gpus, n=6):
    # 819,200 tokens a step at 1,600 tokens/s per GPU: 512 GPU-seconds, 64 s on 8 GPUs
    return [{"perf/total_num_tokens": 819200.0, "perf/throughput": 1600.0, "perf/time_per_step": 512.0 / gpus}
            for _ in range(n)]


@pytest.mark.parametrize("gpus", [8, 16, 64])
def test_gpus_from_tokens_over_throughput_times_step_time(gpus):
    got = infer_gpus(_log(_steps(gpus)))
    assert got is not None and got[0] == gpus and "perf/throughput" in got[1]


def test_steps_that_land_between_two_counts_give_none():
    assert infer_gpus(_log(_steps(8.5))) is None  # 8.5 is 6% from 8 and from 9
    assert infer_gpus(_log(_steps(8.2))) == (8, "perf/total_num_tokens / (perf/throughput x step time)")  # 2.4%


def test_responses_per_prompt_from_total_tokens():
    # 128 prompts x n x (300 + 500) tokens = 409,600: n = 4; 460,800 would be n = 4.5: none
    m = {"prompt_length/mean": 300.0, "response_length/mean": 500.0}
    assert infer_n(_log([{**m, "perf/total_num_tokens": 409600.0}] * 5), 128) == 4
    assert infer_n(_log([{**m, "perf/total_num_tokens": 460800.0}] * 5), 128) is None


def test_the_response_cap_is_read_only_on_steps_that_clipped():
    """A step whose responses were clipped (``clip_ratio`` > 0) shows the cap as its maximum; a
    step that clipped nothing shows only its longest response, whatever it was."""
    from polytrace.calibrate.logmetrics import infer_cap

    free = [{"response_length/clip_ratio": 0.0, "response_length/max": 900.0}] * 3
    cut = [{"response_length/clip_ratio": 0.05, "response_length/max": 1024.0}] * 2
    assert infer_cap(_log(free + cut), "response") == 1024
    assert infer_cap(_log(free), "response") is None
