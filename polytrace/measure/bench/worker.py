"""What runs on a worker: the collection of the suites' cases and one shard, each in a fresh
``python -m pytest`` (with ``--benchmark-json``) started from a checkout of the repository.

Standard library only, so Ray can ship these functions by value to a node where polytrace is not
installed (the checkout is what the pytest child imports). A fresh interpreter per shard, not
``pytest.main`` in the worker: the suites keep session state in modules (``suites/harness.py``
refuses an id it has recorded before), so a second session in one interpreter would fail, and a
worker reused by Ray would carry one shard's imports into the next.

The pytest child dies with its parent (``PR_SET_PDEATHSIG`` on Linux): a worker that is lost does
not leave a shard running on, holding a GPU, while the shard is retried elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_ENV = "POLYTRACE_BENCH_BUDGET_S"  # read by suites/conftest.py
PLUGIN = "polytrace.measure.bench.pytest_plugin"
# Options of every pytest the workers start. Hypothesis's pytest plugin is blocked: the suites do
# not use it, and importing it took 0.8 of 1.5 CPU seconds of a shard's start-up on the CI machine
# (pytest -X importtime), paid again by every shard.
PYTEST_BASE = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", PLUGIN]
LOG_TAIL_CHARS = 4000
# After Ctrl-C, how long the pytest child gets to finish the case in flight and write its JSON on
# its own (it saw the same SIGINT) before it is sent one of its own: a second SIGINT during
# pytest-benchmark's final write would lose the file. A GPU case ends within seconds.
SIGINT_GRACE_S = 10.0
WRITE_GRACE_S = 30.0

# Run as `python -c LAUNCH PARENT_PID ARGV...`: ask the kernel to SIGKILL this process when its
# parent dies, then exec pytest (the setting survives exec). Not preexec_fn: that is unsafe in a
# process with threads, and Ray workers have them.
LAUNCH = (
    "import os, sys\n"
    "try:\n"
    "    import ctypes, signal\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(70)  # the parent died before the request took effect\n"
    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n"
)


class ShardSetupError(RuntimeError):
    """The node cannot run a shard at all (no checkout at the path, ...): not worth a retry."""


def node_info() -> dict:
    info = {"hostname": socket.gethostname(), "ip": "", "pid": os.getpid()}
    ray = sys.modules.get("ray")  # imported in a Ray worker; never imported here for a serial run
    if ray is not None:
        try:
            info["ip"] = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - an older or newer Ray without it: the host name is enough
            pass
    return info


def node_label(node: dict) -> str:
    ip = node.get("ip")
    return f"{node.get('hostname', '?')} ({ip})" if ip and ip != node.get("hostname") else node.get("hostname", "?")


class StartLog:
    """Where each shard started: a Ray actor the shards report to first thing, so the line about a
    shard whose worker was lost can name the node it was lost on (Ray's error does not)."""

    def __init__(self):
        self.nodes: dict[str, dict] = {}

    def started(self, shard_id: str, node: dict) -> None:
        self.nodes[shard_id] = node

    def node_of(self, shard_id: str) -> dict | None:
        return self.nodes.get(shard_id)


def _report_start(spec: dict) -> None:
    log = spec.get("start_log")
    if log is not None:
        try:
            log.started.remote(spec["id"], node_info())
        except Exception:  # noqa: BLE001 - the log is a courtesy; the shard runs regardless
            pass


def _repo(spec: dict) -> Path:
    repo = Path(spec["repo"]) if spec.get("repo") else Path.cwd()
    if not (repo / "polytrace").is_dir():
        raise ShardSetupError(f"node {node_label(node_info())}: no polytrace checkout at {repo} (start the Ray "
                              "workers where the repository lies at the same path, or pass --ship-code)")
    return repo


def _rootdir(repo: Path, spec: dict) -> str:
    """``--rootdir`` of the child: the spec's (relative to the checkout, or absolute), else the
    checkout root, so node ids never depend on the working directory or where the clone lies."""
    return f"--rootdir={repo / (spec.get('rootdir') or '.')}"


def _env(repo: Path, spec: dict, shim: Path) -> dict:
    """The checkout first on the path, with ``polytrace_kernels`` pointing at its ``kernels/`` (what
    ``pip install -e .`` would give), so the node's installed copy, if any, never runs instead."""
    (shim / "polytrace_kernels").symlink_to(repo / "kernels", target_is_directory=True)
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    env["PYTHONPATH"] = os.pathsep.join([str(repo), str(shim)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                     else []))
    env.pop("PYTEST_ADDOPTS", None)  # the coordinator chooses the options
    return env


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - LOG_TAIL_CHARS))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cpu_seconds_of_children() -> float:
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    except (ImportError, OSError):  # not on this platform
        return 0.0


def _pytest(repo: Path, args: list[str], env: dict, log: Path) -> tuple[int, bool, float]:
    """Run pytest to the end; on Ctrl-C let it write what it measured. (exit code, interrupted,
    CPU seconds the child used: a worker runs one child at a time, so the difference of its
    children's usage is this child's)."""
    cmd = [sys.executable, "-c", LAUNCH, str(os.getpid()), "-m", "pytest", *args]
    cpu0 = _cpu_seconds_of_children()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return proc.wait(), False, _cpu_seconds_of_children() - cpu0
        except KeyboardInterrupt:
            pass
        try:
            proc.wait(SIGINT_GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(WRITE_GRACE_S)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                proc.wait()
        return proc.returncode, True, _cpu_seconds_of_children() - cpu0


def collect(spec: dict) -> dict:
    """The node ids of ``spec['files']`` (with ``spec['k']``), in collection order, as pytest on
    this node sees them (the suites choose their shapes from the device they find)."""
    repo = _repo(spec)
    with tempfile.TemporaryDirectory(prefix="polytrace-collect-") as tmp:
        tmp = Path(tmp)
        (tmp / "shim").mkdir()
        env = _env(repo, spec, tmp / "shim")
        out = tmp / "collected.json"
        args = ["--collect-only", "-q", *PYTEST_BASE, _rootdir(repo, spec), f"--polytrace-collect={out}"]
        if spec.get("k"):
            args += ["-k", spec["k"]]
        rc, interrupted, cpu_s = _pytest(repo, args + list(spec["files"]), env, tmp / "log.txt")
        collected = _load(out)
        if isinstance(collected, list):  # a plugin of an older checkout: node ids only
            collected = {"nodeids": collected, "costs": {}}
        ok = rc in (0, 5) and isinstance(collected, dict)
        return {"nodeids": collected.get("nodeids") if ok else None, "costs": collected.get("costs", {}) if ok else {},
                "rc": rc, "interrupted": interrupted, "log_tail": _tail(tmp / "log.txt"), "node": node_info(),
                "cpu_s": round(cpu_s, 3)}


def run_shard(spec: dict) -> dict:
    """Run one shard's cases; returns pytest-benchmark's JSON, every case's outcome and the node.

    ``spec``: ``id``, ``repo`` (None: the working directory), ``files`` (suite files), ``nodeids``,
    ``env`` (extra variables), ``deadline`` (epoch seconds or None: the run's time budget; the
    suites skip what would start after it, and a shard that starts after it runs nothing)."""
    started = time.time()
    _report_start(spec)
    repo = _repo(spec)
    result = {"id": spec["id"], "node": node_info(), "started": started, "rc": None, "interrupted": False,
              "not_started": False, "benchmark_json": None, "cases": {}, "missing": [], "log_tail": "",
              "seconds": 0.0, "cpu_s": 0.0}
    with tempfile.TemporaryDirectory(prefix="polytrace-shard-") as tmp:
        tmp = Path(tmp)
        (tmp / "shim").mkdir()
        env = _env(repo, spec, tmp / "shim")
        deadline = spec.get("deadline")
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                result["not_started"] = True
                return result
            env[BUDGET_ENV] = f"{left:.0f}"
        select, outcomes, bench = tmp / "select.json", tmp / "outcomes.json", tmp / "bench.json"
        select.write_text(json.dumps(list(spec["nodeids"])))
        args = ["-q", *PYTEST_BASE, _rootdir(repo, spec), f"--polytrace-select={select}",
                f"--polytrace-outcomes={outcomes}", f"--benchmark-json={bench}", "--benchmark-save-data",
                *spec.get("pytest_args", []), *spec["files"]]
        rc, interrupted, cpu_s = _pytest(repo, args, env, tmp / "log.txt")
        recorded = _load(outcomes) or {}
        result.update(rc=rc, interrupted=interrupted, benchmark_json=_load(bench), cpu_s=round(cpu_s, 3),
                      cases=recorded.get("cases") or {}, missing=recorded.get("missing") or [],
                      benchmark_cases=recorded.get("benchmark_cases"),
                      log_tail=_tail(tmp / "log.txt"), seconds=round(time.time() - started, 3))
    return result
