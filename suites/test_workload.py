"""Sampling throughput of the workload model: goal >= 1M sequences per second on one core.

The cases are declared in ``suites/workload_cases.py``; the test is generated from that registry.
"""

from __future__ import annotations

from . import registry

test_sample_throughput = registry.make_test(registry.suite_cases("workload"), "test_sample_throughput")
