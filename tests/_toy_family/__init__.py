"""A toy kernel family for tests/stepmodel/test_families.py, laid out as a ``kernels/<family>/`` folder is:
``spec.py`` (bytes moved, pure Python), ``api.py`` (the op: ``double``, y = 2x in fp32, a tiny
Triton kernel), ``reference.py`` (fp64) and ``cases.py`` (its suite's cases, as
``suites/<family>_cases.py`` holds them). The op is imported on first use: the spec needs no torch."""

from __future__ import annotations

from polytrace_kernels._lazy import lazy_exports  # a family under kernels/ imports ``.._lazy``

_LAZY = {"double": "api", "double_reference": "reference"}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
