"""Sampling throughput of the workload model: goal >= 1M sequences per second on one core.

Not a GPU benchmark: ``Profile.sample`` is numpy on the host, so these numbers are host-CPU
measurements wherever they run (``extra_info.measured_on`` says "host-cpu").
"""

from __future__ import annotations

import pytest

from polytrace.profiles import BUILTIN, get_profile
from suites import harness

SEQUENCES = 1_000_000


@pytest.mark.parametrize("name", BUILTIN)
def test_sample_throughput(benchmark, name):
    profile = get_profile(name)
    prompts = SEQUENCES // profile.config.n
    profile.sample(step=0, seed=0, prompts=8)  # build the lookup tables outside the timing
    case = harness.Case(family="workload", kernel="profile.sample", provider="polytrace", mode="sample",
                        shape={"profile": name, "sequences": prompts * profile.config.n}, profile=name, seed=0,
                        provider_kind="ours",
                        step=1)
    benchmark.pedantic(lambda: profile.sample(step=1, seed=0, prompts=prompts), rounds=3, iterations=1,
                       warmup_rounds=1)
    harness.record(benchmark, case)
    median = benchmark.stats.stats.median
    benchmark.extra_info["measured_on"] = "host-cpu"
    benchmark.extra_info["sequences_per_s"] = prompts * profile.config.n / median
    benchmark.extra_info["goal_sequences_per_s"] = 1e6
