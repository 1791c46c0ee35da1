"""The test tree from a fresh clone under a path with a space and a non-ASCII letter, run with an
interpreter that lives there too (as a user's venv in "~/new user/" would), and Ray workers started
from such an interpreter: Ray runs a worker with a runtime_env through ``bash -c`` with that path
unquoted, which split it at the space (issue 38). The clone holds the committed tree (HEAD), not
uncommitted edits. Skipped outside a git checkout."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import REPO_ROOT, shared_root

pytestmark = pytest.mark.slow

# A subset that reads, writes and launches under the clone's path: pytest's collection there, the
# README's report example (package data and plots), the workload commands in this process and the
# console entry point in a child. Ray workers from a spaced interpreter are the ship-code test
# below (a real Ray); tune --ray giving Ray no runtime_env, so its workers start without a shell,
# is tests/measure/test_ray_startup.py's (a fake Ray). Running tests/measure/test_bench_ray.py's
# tune test here as well started a third Ray instance and two torch-importing workers for it.
SUBSET = ["tests/measure/test_report.py::test_report_default_writes_markdown_and_plots",
          "tests/cli/test_cli_workload.py"]


def _clone(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    home = tmp_path / "new user" / "dépôt"
    home.mkdir(parents=True)
    repo = home / "polytrace"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(repo)], check=True)
    venv = home / "venv"
    # the interpreter of this run, under the spaced path, with this run's packages; the clone's
    # polytrace and kernels (installed as polytrace_kernels) come first on its path
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "polytrace").symlink_to(repo / "polytrace")
    (Path(purelib) / "polytrace_kernels").symlink_to(repo / "kernels")
    return repo, python


def test_the_tests_pass_from_a_clone_under_a_path_with_a_space(tmp_path):
    repo, python = _clone(tmp_path)
    found = subprocess.run([str(python), "-c", "import os, polytrace, polytrace_kernels; "
                            "print(os.path.realpath(polytrace.__file__)); "
                            "print(os.path.realpath(polytrace_kernels.__file__))"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split("\n")
    assert found[0].startswith(str(repo)) and found[1].startswith(str(repo)), found
    env = {k: v for k, v in os.environ.items() if k != "POLYTRACE_SHARED"}
    root, _ = shared_root()
    if root is not None:
        env["POLYTRACE_SHARED"] = str(root)
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUBSET],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail and " error" not in tail, tail


# The driver run by the ship-code test: connect as `bench --ray local --ship-code` does, shipping a
# folder under a spaced path, and run one task that imports a module of that folder.
SHIP_DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
from polytrace.measure.bench.cluster import await_start, connect
cluster = connect("local", workers=1, allow_cpu=True, ship_code=sys.argv[2])
try:
    def shipped():
        import shipped_here
        return shipped_here.ANSWER
    ref = cluster.ray.remote(shipped).options(num_cpus=1, num_gpus=0).remote()
    await_start(cluster, [ref], "ship-code test", start_limit_s=60, limit_s=120)
    print("answer", cluster.ray.get(ref))
finally:
    cluster.shutdown()
"""


def test_ship_code_runs_on_ray_workers_from_a_venv_and_folder_with_a_space(tmp_path):
    """--ship-code's runtime_env makes Ray start every worker through ``bash -c``: an interpreter
    under "new user" split at the space there and no worker started (a one-line error after ~20 s;
    ~32 s here for the run that passes, most of it starting Ray on a 2-core machine)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'polytrace[cluster]')")
    home = tmp_path / "new user" / "dépôt"
    code = home / "shipped code"
    code.mkdir(parents=True)
    (code / "shipped_here.py").write_text("ANSWER = 42\n")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}

    def drive():
        return subprocess.run([str(venv / "bin" / "python"), "-c", SHIP_DRIVER, str(REPO_ROOT), str(code)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    run = drive()
    if run.returncode != 0 and (crash := _ray_worker_crash(run.stdout + run.stderr)):
        # Ray's own worker died of a signal inside its C++ core (seen once, 2026-12-06, the full
        # suite beside a second job: abseil "Mutex corrupt", SIGABRT; the test alone then passed
        # 3 of 3): not the spaced path, which fails every start. One more try; a second failure
        # fails the test.
        warnings.warn(f"Ray worker crashed ({crash}); the ship-code run was tried again", stacklevel=2)
        run = drive()
    assert run.returncode == 0 and "answer 42" in run.stdout.splitlines(), (run.stdout + run.stderr)[-2000:]


def _ray_worker_crash(output: str) -> str:
    """The crash polytrace's start error names ("... could not start: a worker process crashed:
    Fatal Python error: ... (SIGABRT)", ``bench.cluster.startup_cause``); "" for any other failure."""
    m = re.search(r"could not start: (a worker process crashed: [^(]*(?:\(SIG[A-Z]+\))?)", output)
    return m.group(1).strip() if m else ""
