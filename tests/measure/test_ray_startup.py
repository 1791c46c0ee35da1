"""A Ray worker that cannot start is one line naming its cause, read from this session's
raylet.err (``polytrace.measure.bench.cluster.startup_cause``). The text below is what Ray 2.60 wrote when
every worker's interpreter lay in a folder named "new user" (the runtime_env path runs it through
``bash -c`` unquoted); no Ray is needed to read it. Where Ray leaves no raylet.err line, a fake Ray
whose workers never start gives one line at the start limit (``await_start``'s parameters: no real
60 s wait)."""

from __future__ import annotations

import time

import pytest

from polytrace.errors import PolytraceError
from polytrace.measure.bench import cluster as cluster_mod
from polytrace.measure.bench.cluster import Cluster, await_start, startup_cause

RAYLET_ERR = """\
bash: line 1: /tmp/new: No such file or directory
bash: line 1: /tmp/new: No such file or directory
[2026-12-06 07:36:26,403 E 7261 7261] (raylet) worker_pool.cc:660: Some workers of the worker process(7416) \
have not registered within the timeout. The process is dead, probably it crashed during start.
*** SIGTERM received at time=1796542669 on cpu 1 ***
PC: @     0x7fca120a3f16  (unknown)  (unknown)
2026-12-06 07:35:20,620\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled
"""


def test_the_shells_message_is_the_cause_not_rays_symptom():
    assert startup_cause(RAYLET_ERR) == "bash: line 1: /tmp/new: No such file or directory"


def test_a_ray_error_line_without_a_shell_message_is_named_without_its_prefix():
    text = "\n".join(RAYLET_ERR.splitlines()[2:])
    assert startup_cause(text) == ("Some workers of the worker process(7416) have not registered within the "
                                   "timeout. The process is dead, probably it crashed during start.")


# A worker's own worker-*.err when Ray's core aborted it (Ray 2.60 on this project's CPU machine,
# 2026-12-06, the full suite beside a second job): faulthandler's trailer, the last line, lists
# extension modules and was reported as the cause.
WORKER_CRASH_ERR = """\
[mutex.cc : 1957] RAW: Check (v & (kMuWait | kMuWrWait)) != kMuWrWait failed: Lock: Mutex corrupt: waiting writer
*** SIGABRT received at time=1796592405 on cpu 1 ***
PC: @     0x7f18cdaa8eec  (unknown)  (unknown)
    @     0x7f18cda5a050       7504  (unknown)
[2026-12-06 21:26:45,364 E 24563 24600] logging.cc:474: *** SIGABRT received at time=1796592405 on cpu 1 ***
Fatal Python error: Aborted


Extension modules: msgpack._cmsgpack, google._upb._message, psutil._psutil_linux, yaml._yaml, ray._raylet (total: 11)
"""


def test_a_worker_killed_by_a_signal_is_named_as_a_crash_not_by_its_module_list():
    assert startup_cause(WORKER_CRASH_ERR) == "a worker process crashed: Fatal Python error: Aborted (SIGABRT)"
    # faulthandler without abseil's line: the Python error alone
    assert startup_cause("Fatal Python error: Segmentation fault\n\nExtension modules: x (total: 1)\n") == (
        "a worker process crashed: Fatal Python error: Segmentation fault")


def test_warnings_and_info_lines_are_no_cause():
    info = "[2026-12-06 07:36:26,403 I 7261 7261] (raylet) main.cc:12: Raylet started."
    assert startup_cause(RAYLET_ERR.splitlines()[-1] + "\n" + info + "\n") is None
    assert startup_cause("") is None


# ----- no raylet.err: a fake Ray whose workers never start (the limits are parameters) -----

class _Ref:
    def __init__(self, ready: bool):
        self.ready = ready


class _FakeRay:
    """Tasks that answer (``probe_starts``: the no-op probe) or never do; ``free``: the cluster's
    free resources."""

    def __init__(self, probe_starts: bool = False, free: dict | None = None):
        self.probe_starts, self.free, self.probes = probe_starts, free or {"CPU": 2.0}, 0

    def remote(self, fn):
        fake = self

        class _Remote:
            def options(self, **kw):
                assert kw == {"num_cpus": 0, "num_gpus": 0}  # the probe waits for no resource
                return self

            def remote(self, *args):
                fake.probes += 1
                return _Ref(fake.probe_starts)

        return _Remote()

    def wait(self, refs, num_returns=1, timeout=None):
        time.sleep(min(timeout or 0, 0.005))
        done = [r for r in refs if r.ready][:num_returns]
        return done, [r for r in refs if r not in done]

    def available_resources(self):
        return dict(self.free)


def _cluster(ray, num_gpus=0.0) -> Cluster:
    return Cluster(ray, "local", num_gpus, 1.0, 2)


def _wait(cluster, logs, monkeypatch, **limits) -> tuple[str, float]:
    monkeypatch.setattr(cluster_mod, "_logs_dir", lambda ray: logs)
    t0 = time.monotonic()
    with pytest.raises(PolytraceError) as err:
        await_start(cluster, [_Ref(False)], "tune --ray", poll_s=0.005, **limits)
    return str(err.value), time.monotonic() - t0


def test_no_worker_starting_and_no_raylet_err_is_one_line_at_the_start_limit(tmp_path, monkeypatch):
    ray = _FakeRay()
    msg, took = _wait(_cluster(ray), str(tmp_path), monkeypatch, start_limit_s=0.2, limit_s=100.0)
    assert msg == f"tune --ray: no Ray worker started within 0 s: Ray wrote no error in {tmp_path}"
    assert "\n" not in msg and ray.probes == 1
    assert 0.2 <= took < 5.0  # the start limit, not the 100 s answer limit


def test_no_logs_on_this_machine_and_no_free_gpu_are_named(monkeypatch):
    msg, _ = _wait(_cluster(_FakeRay(free={"CPU": 8.0, "GPU": 0.0}), num_gpus=1.0), None, monkeypatch,
                   start_limit_s=0.05)
    assert msg.startswith("tune --ray: no Ray worker started within 0 s: Ray wrote no error on this machine")
    assert msg.endswith("; each worker needs 1 GPU and the cluster has 0 free")


def test_a_crash_in_a_workers_own_err_log_is_the_cause(tmp_path, monkeypatch):
    (tmp_path / "worker-abc-01000000-4242.err").write_text(
        ":job_id:01000000\n:task_name:noop\n")  # Ray's markers of a healthy worker: no cause
    (tmp_path / "worker-abd-01000000-4243.err").write_text(
        ":job_id:01000000\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
        "ModuleNotFoundError: No module named 'ray'\n")
    msg, took = _wait(_cluster(_FakeRay()), str(tmp_path), monkeypatch, start_limit_s=100.0)
    assert msg == ("tune --ray: the Ray workers could not start: ModuleNotFoundError: No module named 'ray' "
                   f"(from {tmp_path / 'worker-abd-01000000-4243.err'})")
    assert took < 5.0


def test_a_started_worker_is_waited_for_until_the_answer_limit(tmp_path, monkeypatch):
    # the probe answered: a worker can start; its stderr is no start-up cause, and the slow first
    # answer (building buckets) is waited for past the start limit
    (tmp_path / "worker-abc-01000000-4242.err").write_text("UserWarning: a suite's own warning\n")
    msg, took = _wait(_cluster(_FakeRay(probe_starts=True)), str(tmp_path), monkeypatch, start_limit_s=0.01,
                      limit_s=0.3)
    assert msg == f"tune --ray: the Ray workers started but none answered within 0 s, and Ray's logs name no " \
                  f"cause ({tmp_path})"
    assert took >= 0.3


def test_an_answer_returns_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_mod, "_logs_dir", lambda ray: str(tmp_path))
    await_start(_cluster(_FakeRay()), [_Ref(True)], "tune --ray", start_limit_s=0.0, limit_s=0.0, poll_s=0.005)


# ----- --ship-code from an interpreter under a path with a space (no Ray needed) -----

class _RayWithPyExecutable:
    __version__ = "2.60.0"

    class runtime_env:  # noqa: N801 - Ray's module name
        class RuntimeEnv:
            known_fields = {"working_dir", "excludes", "py_executable"}


def test_ship_code_quotes_a_spaced_interpreter_for_the_workers_shell(monkeypatch):
    monkeypatch.setattr(cluster_mod.sys, "executable", "/home/u/new user/venv/bin/python")
    env = cluster_mod.ship_env(_RayWithPyExecutable, "/home/u/new user/polytrace", local=True)
    assert env == {"working_dir": "/home/u/new user/polytrace", "excludes": cluster_mod.SHIP_EXCLUDES,
                   "py_executable": "'/home/u/new user/venv/bin/python'"}
    # another node's Ray runs its own interpreter: nothing of this machine's is imposed on it
    assert "py_executable" not in cluster_mod.ship_env(_RayWithPyExecutable, "/x", local=False)


def test_ship_code_leaves_a_plain_interpreter_path_to_ray(monkeypatch):
    monkeypatch.setattr(cluster_mod.sys, "executable", "/home/u/venv/bin/python")
    assert cluster_mod.ship_env(_RayWithPyExecutable, "/home/u/new user/polytrace", local=True) == \
        {"working_dir": "/home/u/new user/polytrace", "excludes": cluster_mod.SHIP_EXCLUDES}


def test_a_ray_without_py_executable_is_one_line_not_minutes_of_retries(monkeypatch):
    class OldRay:
        __version__ = "2.9.0"

    monkeypatch.setattr(cluster_mod.sys, "executable", "/home/u/new user/venv/bin/python")
    with pytest.raises(PolytraceError, match=r"^--ship-code: this Ray \(2\.9\.0\) starts its workers through a "
                       r"shell that splits the interpreter's path '/home/u/new user/venv/bin/python' at its space"):
        cluster_mod.ship_env(OldRay, "/x", local=True)


# ----- tune --ray's workers start without a runtime_env (no Ray needed) -----

class _Started(Exception):
    """Raised by the fake Ray once the actors are created: what they were given is all we check."""


class _RayRecordingTheStart:
    """Records ``ray.init``'s keywords and each tuning actor's options and arguments."""

    def __init__(self):
        self.init_kw, self.options, self.actor_args, self.shut = None, [], [], False

    def is_initialized(self):
        return self.init_kw is not None

    def init(self, **kw):
        self.init_kw = kw

    def shutdown(self):
        self.shut = True

    def nodes(self):
        return [{"Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerHostname": "here",
                 "Resources": {"CPU": 2.0}}]

    def remote(self, cls):
        fake = self

        class _Actor:
            def options(self, **kw):
                fake.options.append(kw)
                return self

            def remote(self, *args):
                fake.actor_args.append(args)
                raise _Started

        return _Actor()


def test_tune_on_ray_passes_the_interpreter_switch_as_an_argument_not_a_runtime_env(monkeypatch):
    """Ray starts a worker with any runtime_env (job or actor) through ``bash -c`` with the
    interpreter's path unquoted: from a venv in "new user" every tuning worker died at start and Ray
    retried for 373 s. ``tune --ray local --allow-cpu`` must give Ray no runtime_env at all; the Triton
    interpreter switch travels as the actor's last argument (the real-Ray run from a spaced venv is
    tests/test_clone_with_space.py's ship-code test, the other way Ray starts a worker)."""
    from polytrace.measure.tuning import ray_search
    from polytrace.measure.tuning import session as tune

    fake = _RayRecordingTheStart()
    monkeypatch.setattr(cluster_mod, "import_ray", lambda: fake)
    monkeypatch.setattr(cluster_mod, "_logs_dir", lambda ray: None)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(_Started):
        ray_search.search_on_ray(tune.get_tunable("pack"), tune.TuneTarget("deepcoder-14b"), 1.0, False,
                                 tune.ClusterSpec("local", allow_cpu=True))
    assert fake.init_kw is not None and "runtime_env" not in fake.init_kw, fake.init_kw
    assert fake.options and all("runtime_env" not in o for o in fake.options), fake.options
    assert fake.options[0]["num_gpus"] == 0 and fake.actor_args[0][-1] == "1"  # interpret="1", by argument
    assert fake.shut  # the Ray it started is stopped on the way out
