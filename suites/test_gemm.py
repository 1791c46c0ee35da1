"""Dense GEMMs of the built-in profiles' models through torch (cuBLAS): the baseline the
composition layer prices linear layers with.

The cases are declared in ``suites/gemm_cases.py``; the test is generated from that registry.
"""

from __future__ import annotations

from . import registry

test_linear = registry.make_test(registry.suite_cases("gemm"), "test_linear")
