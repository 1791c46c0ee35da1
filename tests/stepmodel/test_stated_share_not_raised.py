"""A multi-turn run's generated share, when measured from its tables or stated
(``RunConfig.generated_share``), is priced as given; only the Search-R1 prior (16.2%) is raised to
what the logged tool calls leave (``generated_share_floor``: 0.1 calls of <= 293 tokens in
2,000-token responses leave >= 98.5% generated). A stated 20% share raised to that floor would
decode 4.9x the tokens."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from polytrace.calibrate.multiturn import price_multiturn
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel.rollout import ONE_GPU_ENGINE, generated_share_floor, multiturn_rollout

P, R = np.full(16, 300), np.full(16, 2000)
STATS = {"tool_call_counts/mean": 0.1, "num_turns/mean": 4.0}


def _priced(share):
    run = SimpleNamespace(generated_share=share, engine_model=get_model("qwen2.5-0.5b"), gpu=get_gpu("h100-sxm"),
                          n_gpus=1, rollout_settings=ONE_GPU_ENGINE, max_tool_response_chars=256)
    row = SimpleNamespace(stats=dict(STATS), x={"gen": {"rollout": 1.0}})
    assert price_multiturn(run, row, P, R)
    return row.x["gen"]["rollout"]


def _direct(share):
    roll, prefill = multiturn_rollout(get_model("qwen2.5-0.5b"), get_gpu("h100-sxm"), P, R, generated_share=share,
                                      n_gpus=1, engine=ONE_GPU_ENGINE)
    return roll.time_s + prefill


def test_a_stated_share_is_priced_as_given_and_the_prior_is_raised_to_the_floor():
    floor = generated_share_floor(0.1, 2000.0)
    assert floor == pytest.approx(1.0 - 0.1 * 293 / 2000.0, rel=1e-12)
    assert _priced(0.2) == pytest.approx(_direct(0.2), rel=1e-12)
    assert _priced(None) == pytest.approx(_direct(floor), rel=1e-12)
    assert _priced(None) > 2.0 * _priced(0.2)
