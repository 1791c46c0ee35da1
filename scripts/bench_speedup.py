"""Measure `polytrace bench` serially against `--ray local` with N workers, in one process on one
machine, alternating, and print each pair's times and the ratio (Ray's one-time start excluded),
with a plain `pytest suites/test_<suite>.py ...` run beside them for reference. Also the ratio of
CPU seconds (the serial run's against the Ray run's longest path), which estimates the ratio on an
idle machine when other jobs share the cores: a loaded machine gives two processes a bigger share
of the CPUs than one, which flatters the wall-clock ratio.

    PYTHONPATH=. python scripts/bench_speedup.py [--suites attention logprob] [--workers 2] [--repeats 3]

On a machine without CUDA the suites run in the Triton interpreter (--allow-cpu), so this measures
the scale-out machinery on the CPU, not GPU performance. The load average before each pair is
printed: other processes on the machine make both runs slower and the ratio noisier.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from polytrace.measure.bench import run_bench  # noqa: E402
from polytrace.measure.bench.cluster import ClusterSpec  # noqa: E402
from polytrace.measure.bench.run import BenchCases, ShardPlan  # noqa: E402


def _ids(run: Path, suite: str) -> list[str]:
    from polytrace.measure.results import load_result

    return [b.id for b in load_result(next(run.glob(f"*/{suite}.json"))).benchmarks]


def _cpu_path(report) -> float:
    """CPU seconds on the Ray run's longest path: the collection, then the busiest worker."""
    per_worker: dict[int, float] = {}
    for r in report.records:
        pid = r["polytrace_shard"]["node"].get("pid", 0)
        per_worker[pid] = per_worker.get(pid, 0.0) + r["polytrace_shard"]["cpu_s"]
    return report.collect_cpu_s + max(per_worker.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["attention", "logprob"], help="suite names")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="serial/Ray pairs (default 3)")
    args = parser.parse_args()
    import ray

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-speedup-") as tmp:
        for i in range(args.repeats):
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            *[f"suites/test_{s}.py" for s in args.suites], f"--benchmark-json={tmp}/plain{i}.json"],
                           cwd=ROOT, check=True, capture_output=True)
            plain_s = time.monotonic() - t0
            cases, local = BenchCases(args.suites), ClusterSpec("local", args.workers, allow_cpu=True)
            serial = run_bench(Path(tmp) / f"serial{i}", cases=cases)
            clustered = run_bench(Path(tmp) / f"ray{i}", cases=cases, cluster=local)
            balanced = run_bench(Path(tmp) / f"balanced{i}", cases=cases, cluster=local,
                                 shards=ShardPlan(balance_from=Path(tmp) / f"serial{i}"))
            assert not ray.is_initialized()
            same = all(_ids(Path(tmp) / f"serial{i}", s) == _ids(Path(tmp) / f"ray{i}", s) for s in args.suites)
            serial_cpu = serial.collect_cpu_s + sum(r["polytrace_shard"]["cpu_s"] for r in serial.records)
            ray_cpu_path = _cpu_path(clustered)
            row = {"load_1min_before": round(load, 2), "plain_pytest_s": round(plain_s, 2),
                   "serial_s": round(serial.seconds_without_start, 2),
                   "ray_s_without_start": round(clustered.seconds_without_start, 2),
                   "ray_start_s": round(clustered.start_s, 2),
                   "ratio": round(serial.seconds_without_start / clustered.seconds_without_start, 2),
                   "shards": len(clustered.records), "same_ids": same,
                   # CPU seconds: the serial run's, and the Ray run's longest path (collection, then the
                   # busiest worker): their ratio estimates the speed-up on an idle machine
                   "serial_cpu_s": round(serial_cpu, 2), "ray_cpu_path_s": round(ray_cpu_path, 2),
                   "ratio_from_cpu_s": round(serial_cpu / ray_cpu_path, 2),
                   # shards balanced by the serial run's case times (--balance-from)
                   "balanced_s_without_start": round(balanced.seconds_without_start, 2),
                   "balanced_ratio": round(serial.seconds_without_start / balanced.seconds_without_start, 2),
                   "balanced_ratio_from_cpu_s": round(serial_cpu / _cpu_path(balanced), 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    ratios = sorted(r["ratio"] for r in rows)
    print(json.dumps({"median_ratio": ratios[len(ratios) // 2], "workers": args.workers, "suites": args.suites,
                      "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
