"""Test configuration.

- On a machine without CUDA, Triton kernels run in the interpreter: ``TRITON_INTERPRET=1`` is set
  here, before any test module imports triton.
- ``@pytest.mark.gpu`` tests are skipped without CUDA.
- Shared data (PolyTrace traces, real verl logs) is found through ``POLYTRACE_SHARED`` (the folder
  holding ``polytrace-data/`` and ``validation-logs/``; ``.ci/run`` sets it to ``../shared``).
  Unset: tests that need it are skipped, saying so. Set but missing files: they fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

SHARED_ENV = "POLYTRACE_SHARED"


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _shared_subdir(name: str) -> Path:
    root = os.environ.get(SHARED_ENV)
    if not root:
        pytest.skip(f"{SHARED_ENV} is not set; set it to the folder holding {name}/ to run this test")
    path = Path(root) / name
    if not path.is_dir() or not any(path.iterdir()):
        pytest.fail(f"{SHARED_ENV}={root} is set but {path} is missing or empty")
    return path


@pytest.fixture(scope="session")
def polytrace_data() -> Path:
    """``$POLYTRACE_SHARED/polytrace-data``: the public PolyTrace traces."""
    return _shared_subdir("polytrace-data")


@pytest.fixture(scope="session")
def validation_logs() -> Path:
    """``$POLYTRACE_SHARED/validation-logs``: real verl training logs."""
    return _shared_subdir("validation-logs")
