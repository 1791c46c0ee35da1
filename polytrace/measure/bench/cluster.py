"""Connecting to Ray for ``polytrace bench --ray`` and ``polytrace tune --ray``: which cluster, how
many workers, and what each worker holds (one GPU, or one CPU for the interpreter path).

``--ray local`` starts a Ray instance on this machine (and stops it at the end); ``--ray auto``
joins the cluster this machine belongs to (``RAY_ADDRESS``, or a ``ray start`` here); any other
value is the head's address (``HOST:PORT`` of ``ray start --head``; a Ray Client address
``ray://HOST:10001`` is passed on to Ray as well, untested here).
Ray is optional (``pip install 'polytrace[cluster]'``); it is imported only here, on first use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field

from ...errors import PolytraceError

INSTALL_HINT = "pip install 'polytrace[cluster]' (or pip install ray)"
# Node resources naming a node's GPU model, most specific first: `ray start --resources
# '{"polytrace_gpu:h100-sxm": 1}'` (our slugs tell H100 SXM from PCIe, A100 40 from 80 GB), else
# the label Ray sets itself on NVIDIA nodes (accelerator_type:H100, A100, ...).
GPU_TYPE_PREFIXES = ("polytrace_gpu:", "accelerator_type:")
# Left out of the checkout shipped with --ship-code: results and run folders can be large and are
# never needed to run the suites.
SHIP_EXCLUDES = [".git", "results", "out", "polytrace-report", "*.egg-info", "__pycache__", ".benchmarks", ".shim"]
# An address that does not answer makes ray.init retry for minutes; a plain TCP connect first
# turns that into one line within this many seconds.
CONNECT_TIMEOUT_S = 5.0
# A worker that cannot start (a bad interpreter path, a crash at import) is retried by the raylet
# for minutes (373 s measured in a folder named "new user"); its cause is in raylet.err within the
# first try (~2 s), so the first wait polls that file (and the workers' own *.err logs) every POLL_S
# and stops at the first error line. Where Ray leaves no such line (a remote node's logs, a Ray
# Client, another Ray's file names), a no-op probe task of the same job tells a worker that cannot
# start from one that is slow to answer: no probe answer within START_LIMIT_S (the raylet's own
# worker_register_timeout_seconds is 60) is one line naming what is known (resources, logs).
# A worker that starts but has not answered after STARTUP_LIMIT_S (building a profile's buckets
# takes ~10 s on a loaded 2-core machine) is reported as not started.
POLL_S = 2.0
START_LIMIT_S = 60.0
STARTUP_LIMIT_S = 600.0


def import_ray():
    try:
        import ray
    except ImportError:
        raise PolytraceError(f"--ray: Ray is not installed; {INSTALL_HINT}") from None
    return ray


def one_line_error(exc: BaseException) -> str:
    """The last line of what a worker raised (a RayTaskError wraps it with the remote traceback)."""
    cause = getattr(exc, "cause", None) or exc
    lines = [ln for ln in str(cause).strip().splitlines() if ln.strip() and not ln.startswith((" ", "Traceback"))]
    return " ".join((lines[-1] if lines else type(cause).__name__).split())[:300]


def _logs_dir(ray) -> str | None:
    """This process's Ray session log folder (a private attribute, read defensively: None if absent)."""
    try:
        from ray._private import worker as ray_worker

        return ray_worker._global_node.get_logs_dir_path()
    except Exception:  # noqa: BLE001 - another Ray version, a Ray Client connection
        return None


_RAY_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ ([A-Z]) \d+ \d+\] (?:\(\w+\) )?(?:\S+:\d+: )?")
_PY_QUIET = re.compile(r"\s(?:WARNING|INFO|DEBUG)\s")  # Python logging lines Ray's own code writes there
_NOISE = ("*** SIGTERM", "PC: @", "@ 0x", "[state-dump]", "- ", "The raylet fate shares")
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.M)  # faulthandler's first line on a fatal signal
_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]+) received")  # abseil's failure signal handler in Ray's core
_RAY_MARKER = re.compile(r"^:\w+:")  # :job_id:01000000, :task_name:run: what a worker's *.err starts with


def startup_cause(text: str) -> str | None:
    """The most telling error line of what raylet.err gained: the last line that is not Ray's own
    log line (a shell's or interpreter's message, e.g. ``bash: line 1: /tmp/new: No such file or
    directory``), else the last Ray error line (level E or F) without its prefix; None if the new
    text holds only warnings. A worker process that died of a signal (Python's fault handler wrote
    "Fatal Python error", whose last line lists extension modules, no cause) is said as that."""
    fatal = _FATAL.search(text)
    if fatal:
        sig = _SIGNAL.search(text)
        return (f"a worker process crashed: Fatal Python error: {fatal.group(1).strip()[:120]}"
                + (f" ({sig.group(1)})" if sig else ""))
    own, ray_errors = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(_NOISE) or _PY_QUIET.search(line) or _RAY_MARKER.match(line):
            continue
        m = _RAY_PREFIX.match(line)
        if m is None:
            own.append(line)
        elif m.group(1) in "EF":
            ray_errors.append(line[m.end():])
    picked = own[-1] if own else ray_errors[-1] if ray_errors else None
    return " ".join(picked.split())[:300] if picked else None


def _log_cause(logs: str | None, raylet_offset: int, since: float | None) -> tuple[str | None, str | None]:
    """(the cause, the file) of a start-up failure in this session's logs: raylet.err past what it
    held at connect, else a worker's own ``worker-*.err`` written since ``since`` (None: not read;
    a crash before the worker registered lands there when the interpreter started)."""
    if not logs or not os.path.isdir(logs):
        return None, None
    err = os.path.join(logs, "raylet.err")
    files = [(err, raylet_offset)] if os.path.isfile(err) else []
    with contextlib.suppress(OSError):
        files += [] if since is None else [(e.path, 0) for e in sorted(os.scandir(logs), key=lambda e: e.name)
                  if e.name.startswith("worker-") and e.name.endswith(".err") and e.stat().st_mtime >= since]
    for path, offset in files:
        with contextlib.suppress(OSError), open(path, "rb") as f:
            f.seek(offset)
            cause = startup_cause(f.read().decode("utf-8", "replace"))
            if cause:
                return cause, path
    return None, None


def _resource_shortfall(cluster: Cluster) -> str | None:
    """What a worker asks for that no free resource of the cluster holds (another job holding them
    leaves the workers pending forever, with no error anywhere)."""
    try:
        free = cluster.ray.available_resources()
    except Exception:  # noqa: BLE001 - a lost connection: said by the caller's own line
        return None
    for name, need in (("GPU", cluster.num_gpus), ("CPU", cluster.num_cpus)):
        if need and free.get(name, 0) < need:
            return f"each worker needs {need:g} {name} and the cluster has {free.get(name, 0):g} free"
    return None


def await_start(cluster: Cluster, refs: list, what: str, limit_s: float | None = None,
                start_limit_s: float | None = None, poll_s: float | None = None) -> None:
    """Wait for the first answers of freshly started workers; raise one line naming the cause as
    soon as this session's logs show a worker failing to start, when no worker of the job can start
    (a probe task) within ``start_limit_s``, or when nothing answered after ``limit_s``."""
    ray = cluster.ray
    logs = _logs_dir(ray)
    limit_s = STARTUP_LIMIT_S if limit_s is None else limit_s
    start_limit_s = START_LIMIT_S if start_limit_s is None else start_limit_s
    poll_s = POLL_S if poll_s is None else poll_s
    t0 = time.monotonic()
    since = time.time() - 1.0  # a worker log written from now on (1 s: file times' granularity)

    def noop() -> int:  # defined here: shipped by value, a worker without polytrace runs it too
        return 0

    # the probe asks for nothing: it starts a worker even while the real work waits for resources;
    # an error it raises still proves a worker started
    probe = [ray.remote(noop).options(num_cpus=0, num_gpus=0).remote()]
    pending = list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=poll_s)
        if not pending:
            return
        if probe:
            _, probe = ray.wait(probe, num_returns=1, timeout=0)
        # the workers' own stderr only while none has started: a running suite's warnings are no cause
        cause, path = _log_cause(logs, cluster.raylet_err_offset, since if probe else None)
        if cause:
            raise PolytraceError(f"{what}: the Ray workers could not start: {cause} (from {path})")
        waited = time.monotonic() - t0
        if probe and waited > start_limit_s:
            why = "Ray wrote no error " + (f"in {logs}" if logs else "on this machine (a remote node or Ray "
                                                                     "Client: see the workers' node's raylet.err)")
            short = _resource_shortfall(cluster)
            why += f"; {short}" if short else ""
            raise PolytraceError(f"{what}: no Ray worker started within {start_limit_s:.0f} s: {why}")
        if waited > limit_s:
            raise PolytraceError(f"{what}: the Ray workers started but none answered within {limit_s:.0f} s, and "
                                 f"Ray's logs name no cause" + (f" ({logs})" if logs else ""))


@dataclass
class Cluster:
    """A connected Ray cluster and the per-worker resources of this run."""

    ray: object
    address: str
    num_gpus: float  # per worker: 1 (a GPU run) or 0 (the CPU-interpreter path)
    num_cpus: float
    slots: int  # workers that run at once
    nodes: list[dict] = field(default_factory=list)  # alive: {"ip", "hostname", "gpus", "cpus", "resources"}
    started_here: bool = False
    start_s: float = 0.0  # seconds spent starting or joining Ray (excluded from the speed-up)
    raylet_err_offset: int = 0  # raylet.err's size when we connected: what came before is not ours

    @property
    def on_cpu(self) -> bool:
        return self.num_gpus == 0

    def describe(self) -> str:
        kind = "GPU" if not self.on_cpu else "CPU (interpreter)"
        return (f"Ray {self.address}: {len(self.nodes)} node(s), {self.slots} {kind} worker(s)"
                f"{', started here' if self.started_here else ''} in {self.start_s:.1f} s")

    def gpu_types(self) -> dict[str, int]:
        """{node resource naming a GPU model: workers of that model, at most ``slots``} (see
        GPU_TYPE_PREFIXES); a worker is a GPU, or a CPU on a cluster without GPUs."""
        for prefix in GPU_TYPE_PREFIXES:
            types: dict[str, float] = {}
            for n in self.nodes:
                for key in n["resources"]:
                    if key.startswith(prefix):
                        types[key] = types.get(key, 0) + (n["cpus"] if self.on_cpu else n["gpus"])
            if types:
                return {key: max(1, min(int(n), self.slots)) for key, n in sorted(types.items())}
        return {}

    def shutdown(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()


def _check_reachable(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT must accept a TCP connection within CONNECT_TIMEOUT_S."""
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise PolytraceError(f"--ray {address}: expected auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise PolytraceError(f"--ray {address}: cannot reach the Ray head at {host}:{port} "
                             f"({exc.strerror or exc}); is `ray start --head` running there?") from None


def _nodes(ray) -> list[dict]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive", n.get("alive", True)):
            continue
        res = n.get("Resources") or {}
        out.append({"ip": n.get("NodeManagerAddress", "?"), "hostname": n.get("NodeManagerHostname", "?"),
                    "gpus": float(res.get("GPU", 0)), "cpus": float(res.get("CPU", 0)), "resources": dict(res)})
    return out


@dataclass(frozen=True)
class ClusterSpec:
    """Where ``bench`` and ``tune`` run their work: ``address`` (``local``, ``auto`` or a Ray
    address; None: serially in this process), at most ``workers`` workers, ``allow_cpu`` (no GPU:
    the Triton interpreter), a lost worker's task retried ``max_retries`` times, and ``ship_code``
    (``bench`` only: this checkout uploaded to every worker)."""

    address: str | None = None
    workers: int | None = None
    allow_cpu: bool = False
    max_retries: int = 3
    ship_code: bool = False


def ship_env(ray, ship_code: str, *, local: bool) -> dict:
    """Ray's job-level runtime_env of ``--ship-code``. Ray starts every worker of a job with a
    runtime_env through ``bash -c`` with the interpreter's path unquoted (ray/_private/runtime_env/
    context.py): a venv in "new user" splits at the space and no worker starts. Ray's
    ``py_executable`` is a shell word, so it takes the path quoted: set for ``--ray local`` (its
    workers run this interpreter; another node's Ray runs its own, whose path only it knows). The
    shipped folder itself is zipped by Python, not a shell: a space there needs nothing."""
    env = {"working_dir": ship_code, "excludes": SHIP_EXCLUDES}
    quoted = shlex.quote(sys.executable)
    if local and quoted != sys.executable:
        known = getattr(getattr(getattr(ray, "runtime_env", None), "RuntimeEnv", None), "known_fields", ())
        if "py_executable" not in known:
            raise PolytraceError(f"--ship-code: this Ray ({getattr(ray, '__version__', '?')}) starts its workers "
                                 f"through a shell that splits the interpreter's path {sys.executable!r} at its "
                                 "space; use a Ray whose runtime_env has py_executable, or a venv whose path has "
                                 "no space")
        env["py_executable"] = quoted
    return env


def connect(mode: str, *, workers: int | None = None, allow_cpu: bool = False, ship_code: str | None = None) -> Cluster:
    """Join or start Ray and decide the workers: one per GPU on a GPU cluster; with
    ``allow_cpu`` and no GPU anywhere, one per CPU (or ``workers``), with the GPU requirement
    dropped so the suites run in the Triton interpreter. A Ray already initialised in this process
    (a notebook, the tests' shared instance) is used as it is and left running. ``ship_code``: a
    checkout uploaded to every worker as its working directory (Ray's job-level ``working_dir``)."""
    ray = import_ray()
    if workers is not None and workers < 1:
        raise PolytraceError(f"--workers: must be >= 1, got {workers}")
    t0 = time.monotonic()
    started = False
    if ray.is_initialized():
        if ship_code:
            raise PolytraceError("--ship-code: Ray is already initialised in this process, so the code to ship "
                                 "cannot be set; run from a fresh process")
        address = "(this process's Ray)"
    else:
        opts = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                "configure_logging": True}
        if ship_code:
            opts["runtime_env"] = ship_env(ray, str(ship_code), local=mode == "local")
        if mode == "local":
            address = "local"
            ray.init(num_cpus=workers or os.cpu_count() or 1, **opts)
            started = True
        elif mode == "auto":
            address = os.environ.get("RAY_ADDRESS") or "auto"
            if address != "auto":
                _check_reachable(address)
            try:
                ray.init(address="auto", **opts)
            except ConnectionError:
                raise PolytraceError("--ray auto: no running Ray cluster found (RAY_ADDRESS is unset and no "
                                     "`ray start` on this machine); start one with `ray start --head`, pass its "
                                     "address, or use --ray local") from None
        else:
            address = mode
            _check_reachable(mode)
            try:
                ray.init(address=mode, **opts)
            except (ConnectionError, RuntimeError) as exc:
                raise PolytraceError(f"--ray {mode}: cannot join the cluster: {' '.join(str(exc).split())[:300]}") \
                    from None
    start_s = time.monotonic() - t0
    nodes = _nodes(ray)
    gpus = sum(n["gpus"] for n in nodes)
    cpus = sum(n["cpus"] for n in nodes)
    cluster = Cluster(ray, address, 1.0, 1.0, 0, nodes, started, start_s)
    logs = _logs_dir(ray)
    with contextlib.suppress(OSError, TypeError):
        cluster.raylet_err_offset = os.path.getsize(os.path.join(logs, "raylet.err"))
    if gpus >= 1:
        cluster.slots = int(gpus) if workers is None else min(int(gpus), workers)
    elif allow_cpu:
        cluster.num_gpus = 0.0
        cluster.slots = max(1, int(cpus) if workers is None else min(int(cpus), workers))
    else:
        cluster.shutdown()
        names = ", ".join(f"{n['hostname']} ({n['ip']})" for n in nodes) or "none alive"
        raise PolytraceError(f"--ray {mode}: the cluster has no GPUs (nodes: {names}); a GPU run needs "
                             "num_gpus=1 per worker; pass --allow-cpu to run the CPU-interpreter path")
    return cluster
