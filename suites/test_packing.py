"""Packing suite: planner speed and balance on sampled batches, pack/unpack bandwidth.

The cases are declared in ``suites/packing_cases.py``; the tests below are generated from that
registry (``suites/registry.py``).
"""

from __future__ import annotations

from . import registry

CASES = registry.suite_cases("packing")
test_balance_ranks = registry.make_test([c for c in CASES if c.meta.kernel == "balance_partitions"],
                                        "test_balance_ranks")
test_plan_microbatches = registry.make_test([c for c in CASES if c.meta.kernel == "plan_microbatches"],
                                            "test_plan_microbatches")
test_pack_unpack = registry.make_test([c for c in CASES if c.meta.kernel in ("pack", "unpack")], "test_pack_unpack")
