"""``polytrace bench``: collect the suites' cases, run what no earlier shard finished, record each
shard the moment it returns, merge (see the package docstring)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...atomic_write import first_missing, remove_if_empty
from ...errors import PolytraceError
from . import ledger
from .cluster import ClusterSpec
from .merge import MergedFile, merge_dir
from .worker import node_label

REPO_ROOT = Path(__file__).resolve().parents[3]
# driver variables every worker needs (a remote node does not inherit this shell's environment):
# POLYTRACE_ATTENTION_BATCHES, POLYTRACE_BENCH_ROUNDS, POLYTRACE_SHARED, ...
FORWARD_PREFIX = "POLYTRACE_"
# tells a shard's pytest which target it runs for ("any", or e.g. "accelerator_type:H100")
TARGET_ENV = "POLYTRACE_BENCH_TARGET"


@dataclass
class BenchReport:
    out: Path
    executor: str
    slots: int
    collected: int = 0
    finished_before: int = 0  # cases earlier runs into this folder finished (skipped now)
    records: list[dict] = field(default_factory=list)  # shard records written by this run
    merged: list[MergedFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line per shard that failed or was lost
    interrupted: bool = False
    start_s: float = 0.0  # starting or joining Ray
    collect_s: float = 0.0
    collect_cpu_s: float = 0.0  # CPU seconds of the collection's pytest
    run_s: float = 0.0
    merge_s: float = 0.0

    @property
    def pending(self) -> int:
        """Cases still to run (a rerun picks them up)."""
        done = sum(1 for r in self.records for c in r["polytrace_shard"]["cases"] if ledger.is_done(c))
        return max(0, self.collected - self.finished_before - done)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.problems or self.pending else 0

    @property
    def seconds_without_start(self) -> float:
        """Collection, shards and merge: the run's time less Ray's one-time start."""
        return self.collect_s + self.run_s + self.merge_s

    def summary(self) -> str:
        lines = [f"{self.collected} cases collected, {self.finished_before} finished by earlier runs, "
                 f"{len(self.records)} shards run ({self.executor}, {self.slots} worker(s)); "
                 f"{self.pending} cases pending"]
        lines.append(f"time: start {self.start_s:.1f} s, collect {self.collect_s:.1f} s, shards {self.run_s:.1f} s, "
                     f"merge {self.merge_s:.1f} s")
        lines += [m.line() for m in self.merged]
        if self.interrupted and not self.records and not self.finished_before:
            lines.append("interrupted before any shard finished: nothing was written")
        elif self.interrupted:
            lines.append(f"interrupted: every finished shard is in {self.out / ledger.SHARDS}; rerun the same "
                         f"command to resume, or `polytrace bench --merge {self.out}` to merge what is there")
        elif self.pending:
            lines.append(f"{self.pending} cases not finished: rerun the same command to run only those")
        return "\n".join(lines)


def suite_files(suites: list[str] | None, suites_dir: Path) -> list[Path]:
    """``suites/test_<name>.py`` of each name (every suite when None), checked to exist."""
    if not suites_dir.is_dir():
        raise PolytraceError(f"--suites-dir {suites_dir}: folder not found")
    found = {p.stem[len("test_"):]: p for p in sorted(suites_dir.glob("test_*.py"))}
    if not found:
        raise PolytraceError(f"--suites-dir {suites_dir}: holds no test_<suite>.py files")
    if not suites:
        return list(found.values())
    unknown = [s for s in suites if s not in found]
    if unknown:
        raise PolytraceError(f"--suite: no suite {unknown[0]!r} ({suites_dir / f'test_{unknown[0]}.py'} not found); "
                             f"suites: {', '.join(found)}")
    return [found[s] for s in dict.fromkeys(suites)]


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path.resolve())


def shard_rootdir(suites_dir: Path, root: Path = REPO_ROOT) -> str:
    """pytest's ``--rootdir`` for every shard, so node ids do not depend on where the checkout or the
    working directory lies: ``.`` (the checkout root, on each worker) for suites inside the checkout
    (ids ``suites/test_x.py::...``), else the suites folder itself (ids ``test_x.py::...``). Left to
    pytest, the rootdir is the common ancestor of the working directory and the suite files: a clone
    under /tmp with suites under /tmp/pytest-of-... gave ids prefixed by the path between them."""
    return "." if suites_dir.resolve().is_relative_to(root) else str(suites_dir.resolve())


def _forwarded_env(commit: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIX)}
    env["POLYTRACE_COMMIT"] = commit
    return env


def run_bench(out: str | Path, **kw) -> BenchReport:
    """Run the suites' cases in shards (serially here, or over Ray with ``ray`` = ``local``,
    ``auto`` or an address), write each shard's record to ``out/shards`` as it finishes, skip
    cases earlier runs into ``out`` finished, and merge into ``out/<gpu-slug>/<suite>.json``. A run
    that fails before writing anything leaves no folder behind."""
    created = first_missing(out)
    try:
        report = _run_bench(out, **kw)
    except BaseException:
        remove_if_empty(created)
        raise
    if report.interrupted:  # Ctrl-C before a shard finished: no empty folder either
        remove_if_empty(created)
    return report


@dataclass(frozen=True)
class BenchCases:
    """Which cases a bench run times: the suites named (None: all) in ``suites_dir`` (None: the
    checkout's ``suites/``), a ``-k`` expression, and extra arguments for each shard's pytest."""

    suites: list[str] | None = None
    k: str | None = None
    suites_dir: str | Path | None = None
    pytest_args: list[str] | None = None


@dataclass(frozen=True)
class ShardPlan:
    """How the cases are cut: at most ``max_cases`` per shard, one pass per GPU type with
    ``each_gpu_type``, and shards balanced on an earlier run's measured times (``balance_from``)."""

    max_cases: int = ledger.MAX_SHARD_CASES
    each_gpu_type: bool = False
    balance_from: str | Path | None = None


def _run_bench(out: str | Path, *, cases: BenchCases = BenchCases(), cluster: ClusterSpec | None = None,
               shards: ShardPlan = ShardPlan(), budget_s: float | None = None,
               on_event: Callable[[str], None] | None = None) -> BenchReport:
    cluster = cluster or ClusterSpec()  # None: serially, in this process
    suites, k, suites_dir, pytest_args = cases.suites, cases.k, cases.suites_dir, cases.pytest_args
    ray, max_retries, ship_code = cluster.address, cluster.max_retries, cluster.ship_code
    max_shard_cases, each_gpu_type, balance_from = shards.max_cases, shards.each_gpu_type, shards.balance_from
    from ...provenance import git_commit

    say = on_event or (lambda _msg: None)
    out = Path(out)
    if budget_s is not None and budget_s <= 0:
        raise PolytraceError(f"--budget-s: must be > 0, got {budget_s}")
    if max_retries < 0:
        raise PolytraceError(f"--max-retries: must be >= 0, got {max_retries}")
    if max_shard_cases < 1:
        raise PolytraceError(f"--shard-size: must be >= 1, got {max_shard_cases}")
    if ship_code and not ray:
        raise PolytraceError("--ship-code: only with --ray (a serial run uses this checkout)")
    suites_dir = Path(suites_dir) if suites_dir else REPO_ROOT / "suites"
    files = suite_files(suites, suites_dir)
    if out.exists() and not out.is_dir():
        raise PolytraceError(f"-o {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolytraceError(f"-o {out}: cannot create folder: {exc.strerror or exc}") from None
    records = ledger.load_records(out)
    commit = git_commit(REPO_ROOT)
    ledger.check_same_code(records, commit, out)
    deadline = time.time() + budget_s if budget_s else None
    seconds = ledger.recorded_seconds(Path(balance_from)) if balance_from else None

    executor = _executor(cluster)
    report = BenchReport(out, executor.label, executor.slots, start_s=executor.start_s)
    if ray:
        say(executor.cluster.describe())
    base = {"repo": None if ship_code else str(REPO_ROOT), "files": [_relative(f, REPO_ROOT) for f in files],
            "rootdir": shard_rootdir(suites_dir),
            "env": _forwarded_env(commit), "pytest_args": list(pytest_args or [])}
    try:
        t0 = time.monotonic()
        shards: list[ledger.Shard] = []
        run_no = ledger.next_run(records)
        plan = executor.targets(each_gpu_type)
        for target, resources, slots in plan:
            env = {**base["env"], TARGET_ENV: target}
            nodeids, hints = _collect(executor, {**base, "env": env, "k": k, "resources": resources},
                                      base["files"], k, report)
            done = ledger.done_nodeids(records, target)
            todo = [ledger.Case(n, i) for i, n in enumerate(nodeids) if n not in done]
            report.collected += len(nodeids)
            report.finished_before += len(nodeids) - len(todo)
            # measured times of an earlier run (--balance-from), else the suites' own cost hints
            new = ledger.make_shards(todo, slots, run_no, max_shard_cases, first=len(shards), target=target,
                                     seconds=seconds or hints or None)
            shards += new
            say(f"{'' if target == 'any' else target + ': '}{len(nodeids)} cases, {len(nodeids) - len(todo)} "
                f"finished earlier: {len(todo)} to run in {len(new)} shard(s) on {slots} worker(s)")
        report.collect_s = time.monotonic() - t0
        resources_of = {target: resources for target, resources, _ in plan}
        by_id = {s.id: s for s in shards}
        specs = [{**base, "env": {**base["env"], TARGET_ENV: s.target}, "id": s.id, "target": s.target,
                  "resources": resources_of.get(s.target, {}), "nodeids": [c.nodeid for c in s.cases],
                  "deadline": deadline} for s in shards]
        t0 = time.monotonic()
        try:
            for result in executor.run(specs):
                _record(out, by_id[result["id"]], result, report, say)
        except KeyboardInterrupt:
            report.interrupted = True
            for result in executor.drain():
                _record(out, by_id[result["id"]], result, report, say)
        report.run_s = time.monotonic() - t0
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        executor.close()
    if not report.interrupted and (report.records or records):
        t0 = time.monotonic()
        report.merged = merge_dir(out)
        report.merge_s = time.monotonic() - t0
    return report


def _collect(executor, spec: dict, files: list[str], k: str | None, report: BenchReport
             ) -> tuple[list[str], dict[str, float]]:
    """The node ids the worker collected and the cost hints the suites gave them."""
    collected = executor.collect(spec)
    report.collect_cpu_s += collected.get("cpu_s", 0.0)
    nodeids = collected["nodeids"]
    if collected.get("interrupted"):
        raise KeyboardInterrupt
    if nodeids is None:
        raise PolytraceError(f"collecting {', '.join(files)} on {node_label(collected['node'])} failed (pytest exit "
                             f"code {collected['rc']}): {ledger.last_error(collected['log_tail'])}")
    if not nodeids:
        raise PolytraceError(f"no cases collected from {', '.join(files)}" + (f" with -k {k!r}" if k else ""))
    return nodeids, collected.get("costs") or {}


def _executor(spec: ClusterSpec):
    from .executors import RayExecutor, SerialExecutor

    if not spec.address:
        if spec.workers not in (None, 1):
            raise PolytraceError("--workers: only with --ray (a serial run has one worker)")
        return SerialExecutor()
    from .cluster import connect

    cluster = connect(spec.address, workers=spec.workers, allow_cpu=spec.allow_cpu,
                      ship_code=str(REPO_ROOT) if spec.ship_code else None)
    return RayExecutor(cluster, max_retries=spec.max_retries)


def _record(out: Path, shard: ledger.Shard, result: dict, report: BenchReport, say) -> None:
    record = ledger.make_record(shard, result)
    path = ledger.write_record(out, record)
    report.records.append(record)
    meta = record["polytrace_shard"]
    counts: dict[str, int] = {}
    for c in meta["cases"]:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    say(f"shard {meta['id']} on {meta['node_label']}: {meta['status']} ({tally}) in {meta['seconds']:.1f} s -> {path}")
    if meta["status"] in ("failed", "error", "lost"):
        report.problems.append(f"shard {meta['id']} on {meta['node_label']}: {meta['message']}")
