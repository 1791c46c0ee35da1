"""``polytrace bench --ray`` and ``polytrace tune --ray`` on a local Ray instance with 2 CPUs (the
GPU requirement relaxed with allow_cpu, suites in the Triton interpreter). One Ray instance serves
the whole module and is shut down at its end. Skipped, saying why, where Ray is not installed."""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'polytrace[cluster]')")

import torch  # noqa: E402
from _bench_fakes import merged_ids, plain_pytest_ids, run_counts, shard_records, write_suites  # noqa: E402

from polytrace.errors import PolytraceError  # noqa: E402
from polytrace.measure.bench import run_bench  # noqa: E402
from polytrace.measure.bench.cluster import ClusterSpec, connect  # noqa: E402
from polytrace.measure.bench.run import BenchCases, ShardPlan  # noqa: E402
from polytrace.measure.tuning import session as tune  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ["a0", "a1", "kill", "a3", "a4", "a5", "a6"]

LOCAL = ClusterSpec("local", allow_cpu=True)  # the tests' one Ray instance, workers in the interpreter


@pytest.fixture(scope="module")
def local_ray():
    # two GPU models as Ray labels them (accelerator_type:<model>) on the one node, for --each-gpu-type
    ray.init(num_cpus=2, resources={"accelerator_type:FAKEA": 1, "accelerator_type:FAKEB": 1},
             include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    # this module's functions (the toy kernel and timer below) travel to the workers by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def test_merged_ids_of_two_workers_are_the_serial_runs(local_ray, tmp_path):
    """The real attention and logprob suites in the interpreter, the cases that take milliseconds
    there: two shards on two workers give exactly the ids, and order, of one plain serial pytest
    run of the two suites (what a serial ``bench`` writes: tests/test_device_check.py's --via-bench
    run of the real suites and test_bench.py's serial run hold it; one plain process here, not a
    serial bench's collection and shard, each a Python importing torch)."""
    k = "sdpa-padded or torch-eager"
    ray_run = run_bench(tmp_path / "ray", cases=BenchCases(suites=["attention", "logprob"], k=k), cluster=LOCAL)
    assert ray_run.exit_code == 0, ray_run.problems
    assert len(ray_run.records) == 2 and ray_run.slots == 2
    env = {key: v for key, v in os.environ.items() if key != "PYTEST_ADDOPTS"}  # as the shards: their own options
    plain = plain_pytest_ids(ROOT / "suites", k, tmp_path, env, ["test_attention.py", "test_logprob.py"])
    assert sorted(plain) == ["attention", "logprob"]
    for suite in ("attention", "logprob"):
        assert plain[suite] and merged_ids(tmp_path / "ray" / "cpu" / f"{suite}.json") == plain[suite]
    assert {m.path.name for m in ray_run.merged} == {"attention.json", "logprob.json"}


def test_a_killed_worker_is_retried_and_nothing_is_lost(local_ray, tmp_path, monkeypatch):
    suites = write_suites(tmp_path / "suites", {"alpha": CASES})
    runlog = tmp_path / "runlog.txt"
    monkeypatch.setenv("POLYTRACE_FAKE_KILL", str(tmp_path / "kill.marker"))
    monkeypatch.setenv("POLYTRACE_FAKE_RUNLOG", str(runlog))
    report = run_bench(tmp_path / "run", cases=BenchCases(suites_dir=suites), cluster=LOCAL,
                       shards=ShardPlan(max_cases=2))
    assert (tmp_path / "kill.marker").exists()  # the worker was killed mid-shard
    assert report.exit_code == 0 and report.problems == [] and report.pending == 0
    assert merged_ids(tmp_path / "run" / "cpu" / "alpha.json") == [f"alpha/k/ours/fwd/{c}" for c in CASES]
    counts = run_counts(runlog)
    assert counts["test_alpha.py::test_case[kill]"] == 2  # killed, then the retry measured it
    assert sum(counts.values()) <= len(CASES) + 2  # only the killed shard (2 cases at most) ran twice
    assert all(r["polytrace_shard"]["status"] == "done" for r in shard_records(tmp_path / "run"))


def test_a_shard_lost_for_good_is_one_line_and_the_rest_is_kept(local_ray, tmp_path, monkeypatch):
    """No retries: the lost shard is reported (naming it), every other shard is merged, and a rerun
    runs only the lost shard's cases."""
    suites = write_suites(tmp_path / "suites", {"alpha": CASES})
    monkeypatch.setenv("POLYTRACE_FAKE_KILL", str(tmp_path / "kill.marker"))
    out = tmp_path / "run"
    report = run_bench(out, cases=BenchCases(suites_dir=suites),
                       cluster=ClusterSpec("local", allow_cpu=True, max_retries=0), shards=ShardPlan(max_cases=2))
    assert report.exit_code == 1 and len(report.problems) == 1
    lost = [r["polytrace_shard"] for r in shard_records(out) if r["polytrace_shard"]["status"] == "lost"]
    # the line names the shard and the node it was lost on (from where it started)
    assert len(lost) == 1 and report.problems[0].startswith(f"shard {lost[0]['id']} on {socket.gethostname()}")
    assert "max_retries=0" in report.problems[0]
    lost_cases = {c["nodeid"] for c in lost[0]["cases"]}
    kept = merged_ids(out / "cpu" / "alpha.json")
    assert "alpha/k/ours/fwd/kill" not in kept and len(kept) == len(CASES) - sum("[" in n for n in lost_cases)
    again = run_bench(out, cases=BenchCases(suites_dir=suites), cluster=LOCAL)
    assert again.exit_code == 0 and again.collected - again.finished_before == len(lost_cases)
    assert merged_ids(out / "cpu" / "alpha.json") == [f"alpha/k/ours/fwd/{c}" for c in CASES]


def test_each_gpu_model_runs_every_case_into_its_own_file(local_ray, tmp_path):
    suites = write_suites(tmp_path / "suites", {"alpha": ["a0", "a1", "a2"]})
    out = tmp_path / "run"
    report = run_bench(out, cases=BenchCases(suites_dir=suites), cluster=LOCAL, shards=ShardPlan(each_gpu_type=True))
    assert report.exit_code == 0 and report.collected == 2 * 4  # 3 benchmarks + 1 plain test, per model
    want = [f"alpha/k/ours/fwd/{c}" for c in ("a0", "a1", "a2")]
    assert merged_ids(out / "fakea" / "alpha.json") == want and merged_ids(out / "fakeb" / "alpha.json") == want
    targets = {r["polytrace_shard"]["target"] for r in shard_records(out)}
    assert targets == {"accelerator_type:FAKEA", "accelerator_type:FAKEB"}
    again = run_bench(out, cases=BenchCases(suites_dir=suites), cluster=LOCAL, shards=ShardPlan(each_gpu_type=True))
    assert again.finished_before == again.collected == 8 and again.records == []  # resumed per model
    with pytest.raises(PolytraceError, match="--each-gpu-type: only with --ray"):
        run_bench(out, cases=BenchCases(suites_dir=suites), shards=ShardPlan(each_gpu_type=True))


def test_a_gpu_run_on_a_cluster_without_gpus_is_refused_naming_the_nodes(local_ray):
    with pytest.raises(PolytraceError, match=r"the cluster has no GPUs \(nodes: .+\(.+\)\).*--allow-cpu"):
        connect("local", allow_cpu=False)
    assert local_ray.is_initialized()  # the refusal leaves a Ray it did not start running


# ---------------------------------------------------------------------------------------- tune

SPACE = {"X": [1, 2, 3, 4], "Y": [1, 2, 3]}


def _fake_seconds(config, shape: int) -> float:
    """Deterministic 'measurements' with ties: the winner depends on the candidate order."""
    if config is None:
        return 2.5 + shape
    return float((config["X"] + config["Y"]) % 3) + 1.0 + shape


def _toy_shapes(ctx):
    def build_for(shape):
        def build(device):
            def launch(config):
                wrong = config is not None and config["X"] == 2  # a fast config with a wrong output
                out = torch.full((4,), 2.0 if wrong else 1.0)
                out.fake_seconds = _fake_seconds(config, shape)
                return out
            return launch
        return build
    return [tune.TuneShape("b0", "s0", 0.75, build_for(0)), tune.TuneShape("b0", "s1", 0.25, build_for(1)),
            tune.TuneShape("b1", "s2", 1.0, build_for(5))]


def _fake_timer(fn) -> float:
    return fn().fake_seconds


def test_tune_on_ray_picks_the_serial_sessions_best_per_bucket(local_ray, tmp_path):
    toy = tune.Tunable("toy_kernel", "packing", "toy", "polytrace_kernels.packing.api", _toy_shapes,
                       fixed_space=SPACE)
    kw = {"target": tune.TuneTarget("deepcoder-14b"), "budget_s": 600, "progress": False, "timer": _fake_timer}
    serial = tune.run_session(toy, root=tmp_path / "serial", **kw)
    clustered = tune.run_session(toy, root=tmp_path / "ray", cluster=tune.ClusterSpec("local", allow_cpu=True), **kw)
    assert clustered.data["workers"] == 2 and serial.data["workers"] == 1
    assert clustered.data["configs"] == serial.data["configs"]
    assert (clustered.tried, clustered.failed) == (serial.tried, serial.failed) == (24, 6)
    # and both are the right answer: the first config in the seeded order with the lowest time
    order = tune.candidate_configs(SPACE, 0)
    valid = [c for c in order if c["X"] != 2]
    for bucket, weights in (("b0", ((0.75, 0), (0.25, 1))), ("b1", ((1.0, 5),))):
        seconds = [sum(w * _fake_seconds(c, s) for w, s in weights) for c in valid]
        want = valid[seconds.index(min(seconds))]
        entry = serial.data["configs"][bucket]
        assert {k: entry[k] for k in SPACE} == want
        assert math.isclose(entry["time_s"], min(seconds))
