"""Test configuration.

- On a machine without CUDA, Triton kernels run in the interpreter: ``TRITON_INTERPRET=1`` is set
  here, before any test module imports triton.
- ``@pytest.mark.gpu`` tests are skipped without CUDA.
- Shared data (PolyTrace traces, real verl logs): the folder holding ``polytrace-data/`` and
  ``validation-logs/``, given by ``POLYTRACE_SHARED``, or else ``../shared`` beside the checkout when it
  exists (so the README's test command needs no variable). Set but missing files: the tests that need
  them fail. Neither set nor present (or ``../shared`` without that part): they are skipped, saying so.
- pytest-xdist (``-n 2 --dist loadgroup``, the README's test command): every test is in the group
  of its file (``xdist_group_of``), so a file runs on one worker.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One CPU thread per test process (torch's intra-op pool, OpenMP, OpenBLAS), set before anything
# imports torch or numpy, and inherited by the CLIs the tests start. The tests' tensors are small
# (interpreter shapes, fp64 truths of a few thousand elements): a second thread only spins on the
# 2-core machine, all the more under `-n 2` where two workers already hold both cores. Measured
# there on tests/kernels/test_logprob.py alone: 37.3-40.0 CPU-s with 2 threads, 30.4-31.7 with 1.
# A variable already set wins (a developer's machine with cores to spare).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _hypothesis_profile() -> None:
    """Property tests draw the same examples on every run (``derandomize``): a CI verdict must not
    depend on a lucky draw. ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples on each run,
    for a fuzzing session at a developer's desk."""
    try:
        from hypothesis import settings
    except ImportError:  # the dev extra is not installed: the property tests skip themselves
        return
    settings.register_profile("ci", derandomize=True, print_blob=True)
    settings.register_profile("explore", derandomize=False, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profile()
HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    # In the interpreter, language builtins patched once per kernel launch, not again on every call
    # of a nested @triton.jit helper (tests/_interpreter_patch_once.py: the same kernels' results,
    # without a walk of triton.language per call)
    from polytrace_kernels._interpreter import interpreting

    if interpreting():
        from _interpreter_patch_once import install

        install()


SHARED_ENV = "POLYTRACE_SHARED"


# Test files that read the same cached corpus (``tests/_corpus.py``, 22 CPU-seconds a read) or price
# the same logs the same way through the memo of ``validate.prepare`` (``tests/_prepared.py``: the
# ladder's ten logs and the four unstated small logs are corpus logs, priced with no overrides on a
# window of 10; the same-run test validates every corpus log as the corpus read prices it; the
# golden file validates the nine top-level logs with no flags, four of them as the corpus read):
# one pytest-xdist group, so ``-n 2 --dist loadgroup`` prices each once, not once per worker or per
# file (the golden file beside the five: 82.8 -> 78.0 CPU-s in one process).
XDIST_GROUPS = {f"tests/calibrate/{name}.py": "corpus"
                for name in ("test_folds", "test_priors", "test_ladder_calibration", "test_validate",
                             "test_same_run_corpus")} | {"tests/test_golden.py": "corpus",
                                                         "tests/cli/test_cli_validate.py": "corpus"}


def xdist_group_of(nodeid: str) -> str:
    """The pytest-xdist group of a test: its file's entry of ``XDIST_GROUPS``, else its file.
    Under ``--dist loadgroup`` a file then runs on one worker, as ``--dist loadfile`` would, so its
    module- and ``functools.cache``-scoped work (a local Ray instance, compiled kernels, a golden
    recompute) is done once and a module's fixed paths are never shared by two processes."""
    path = nodeid.split("::", 1)[0]
    return XDIST_GROUPS.get(path, path)


# What pytest-xdist puts in a worker's environment. A pytest a test starts in a subprocess (the
# suites' JSON in tests/suites/test_suites_to_estimate.py, scripts/device_check.sh) inherits it, and
# pytest-benchmark there reads PYTEST_XDIST_WORKER as "under xdist" and disables every benchmark:
# its JSON then holds none.
XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(scope="session", autouse=True)
def _no_xdist_env_in_subprocesses():
    """Removes ``XDIST_ENV`` from this worker's environment for the session (and puts it back):
    xdist itself tells its workers by ``config.workerinput``, not by these variables."""
    saved = {k: os.environ.pop(k) for k in XDIST_ENV if k in os.environ}
    yield
    os.environ.update(saved)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_of(item.nodeid)))
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_root(environ=os.environ, repo_root: Path = REPO_ROOT) -> tuple[Path | None, bool]:
    """(folder, explicitly set): ``$POLYTRACE_SHARED`` when set, else ``../shared`` when it holds
    ``polytrace-data/`` or ``validation-logs/``, else None."""
    root = environ.get(SHARED_ENV)
    if root:
        return Path(root), True
    beside = repo_root.parent / "shared"
    if any((beside / sub).is_dir() for sub in ("polytrace-data", "validation-logs")):
        return beside, False
    return None, False


def _shared_subdir(name: str) -> Path:
    root, explicit = shared_root()
    if root is None:
        pytest.skip(f"{SHARED_ENV} is not set and {REPO_ROOT.parent / 'shared'} does not exist; set it to "
                    f"the folder holding {name}/ to run this test")
    path = Path(root) / name
    if not path.is_dir() or not any(path.iterdir()):
        if not explicit:
            pytest.skip(f"{root} (found beside the checkout) has no {name}/; set {SHARED_ENV} to run this test")
        pytest.fail(f"shared data folder {root} (from {SHARED_ENV}) has no {name}/: {path} is missing or empty")
    return path


@pytest.fixture(scope="session")
def polytrace_data() -> Path:
    """``$POLYTRACE_SHARED/polytrace-data``: the public PolyTrace traces."""
    return _shared_subdir("polytrace-data")


@pytest.fixture(scope="session")
def validation_logs() -> Path:
    """``$POLYTRACE_SHARED/validation-logs``: real verl training logs."""
    return _shared_subdir("validation-logs")


@pytest.fixture(scope="module")
def each_log_priced_once():
    """Every ``validate.prepare`` of the module answered from the session's memo
    (``tests/_prepared.py``): a log read and priced the same way twice (validate and
    ``--zero-shot``, a run and its calibration, the corpus read) is priced once. The memo returns
    unpickled copies, so nothing a test changes reaches another; nothing here patches the model.
    A module asks for it with ``pytestmark = pytest.mark.usefixtures("each_log_priced_once")``."""
    from _prepared import patch_prepare

    with pytest.MonkeyPatch.context() as mp:
        patch_prepare(mp)
        yield
