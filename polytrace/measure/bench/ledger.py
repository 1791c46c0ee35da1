"""The run folder's ledger: shard records under ``<out>/shards/``, which cases they finished, and
the plan for the cases still to run.

A shard record is the shard's pytest-benchmark JSON (only the benchmarks of cases that passed) plus
a ``polytrace_shard`` object: id, node, status, exit code, and every case with its outcome. It is
written atomically the moment the shard returns, so whatever stops the run (Ctrl-C, a lost node, a
closed laptop lid on the driver) every finished shard stays readable, and a rerun into the same
folder runs only the cases no record has finished (resume works per case, not per shard, so a
shard cut short by Ctrl-C keeps the cases it measured).
"""

from __future__ import annotations

import heapq
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...atomic_write import atomic_write_text
from ...errors import PolytraceError
from .worker import BUDGET_ENV, node_label

SHARDS = "shards"
RECORD_FORMAT = 1
# outcomes after which a case is finished: a rerun would measure nothing new
DONE_OUTCOMES = {"passed", "skipped", "xfailed", "xpassed"}
# cases per shard, at most: a lost worker costs at most this many cases' time again, and a rerun
# after Ctrl-C finds finished shards to skip. 64 GPU cases are minutes; the per-shard start-up
# (interpreter, imports, CUDA context, Triton cache) is seconds.
MAX_SHARD_CASES = 64
_RECORD_NAME = re.compile(r"^s(\d+)-(\d+)\.json$")


@dataclass(frozen=True)
class Case:
    nodeid: str
    index: int  # position in the collection: merged files keep the serial run's order

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]


@dataclass
class Shard:
    id: str  # s<run>-<n>
    cases: list[Case]
    target: str = "any"  # "any" GPU, or the node resource naming the GPU model it must run on

    @property
    def files(self) -> list[str]:
        return sorted({c.file for c in self.cases})


def make_shards(cases: list[Case], slots: int, run: int, max_cases: int = MAX_SHARD_CASES, *, first: int = 0,
                target: str = "any", seconds: dict[str, float] | None = None) -> list[Shard]:
    """Cut ``cases`` into a multiple of ``slots`` shards of at most ``max_cases`` cases.

    Without ``seconds`` the cases are dealt round robin: a suite's cases come grouped by kernel and
    provider, and dealing spreads the slow ones (ours in the interpreter, the long shapes on a GPU)
    over every shard. With ``seconds`` ({node id: seconds} a previous run measured, or the suites'
    relative cost hints), longest first onto the least-loaded shard that has room (LPT); a case it
    does not know counts as the median.
    Each shard runs its cases in collection order."""
    if not cases:
        return []
    slots = max(1, slots)
    n = slots * math.ceil(len(cases) / (slots * max(1, max_cases)))
    n = min(n, len(cases))
    shards = [Shard(f"s{run}-{first + i}", [], target) for i in range(n)]
    if not seconds:
        for i, case in enumerate(cases):
            shards[i % n].cases.append(case)
        return shards
    known = sorted(seconds.values())
    median = known[len(known) // 2] if known else 1.0
    cost = {c.nodeid: float(seconds.get(c.nodeid, median)) for c in cases}
    cap = math.ceil(len(cases) / n)
    heap = [(0.0, i) for i in range(n)]
    for case in sorted(cases, key=lambda c: (-cost[c.nodeid], c.index)):
        load, i = heapq.heappop(heap)
        shards[i].cases.append(case)
        if len(shards[i].cases) < cap:
            heapq.heappush(heap, (load + cost[case.nodeid], i))
    for shard in shards:
        shard.cases.sort(key=lambda c: c.index)
    return shards


def recorded_seconds(folder: Path) -> dict[str, float]:
    """{node id: seconds} the shard records of a run folder measured (``--balance-from``)."""
    folder = Path(folder)
    records = run_records(folder, f"--balance-from {folder}")
    found: dict[str, float] = {}
    for r in records:
        for c in r["polytrace_shard"]["cases"]:
            if c.get("complete", True) and c.get("seconds"):
                found[c["nodeid"]] = max(found.get(c["nodeid"], 0.0), float(c["seconds"]))
    return found


def is_done(entry: dict) -> bool:
    """A case this record finished: measured (or skipped for a lasting reason). A case the session's
    time budget skipped was never measured, so a rerun runs it."""
    if entry.get("outcome") not in DONE_OUTCOMES or not entry.get("complete", True):
        return False
    return not (entry["outcome"] == "skipped" and BUDGET_ENV in str(entry.get("reason", "")))


def shards_dir(out: Path) -> Path:
    return Path(out) / SHARDS


def run_records(folder: Path, where: str, hint: str = "") -> list[dict]:
    """``load_records`` of a run folder that must hold some; errors start with ``where``."""
    if not folder.is_dir():
        raise PolytraceError(f"{where}: run folder not found")
    records = load_records(folder)
    if not records:
        raise PolytraceError(f"{where}: no shard records in {folder / SHARDS}{hint}")
    return records


def load_records(out: Path) -> list[dict]:
    """Every shard record in ``out/shards``, oldest run first."""
    folder = shards_dir(out)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("s*-*.json"):
        m = _RECORD_NAME.match(path.name)
        if not m:
            continue
        try:
            obj = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PolytraceError(f"{path}: not a readable shard record ({exc}); move it away to rerun its cases")\
                from None
        meta = obj.get("polytrace_shard") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("cases"), list) \
                or not isinstance(obj.get("benchmarks"), list):
            raise PolytraceError(f"{path}: not a polytrace shard record (no polytrace_shard.cases / benchmarks)")
        _check_record(obj, meta, path)
        meta["path"] = str(path)
        found.append((int(m.group(1)), int(m.group(2)), obj))
    return [obj for _, _, obj in sorted(found, key=lambda t: (t[0], t[1]))]


def _check_record(obj: dict, meta: dict, path: Path) -> None:
    """A record is ours, but a folder outlives the run that wrote it (a hand edit, a cut copy):
    its benchmarks are checked as any result file, its ledger's fields typed, before a merge or a
    resume reads them."""
    from ..results.schema import parse_result

    parse_result(obj, str(path))
    if not isinstance(meta.get("id"), str) or not isinstance(meta.get("node_label", ""), str) \
            or not isinstance(meta.get("target", "any"), str):
        raise PolytraceError(f"{path}: polytrace_shard.id, node_label and target must be strings; move it away "
                             "to rerun its cases")
    for i, case in enumerate(meta["cases"]):
        ok = isinstance(case, dict) and isinstance(case.get("nodeid"), str) \
            and isinstance(case.get("index"), int) and not isinstance(case.get("index"), bool) \
            and isinstance(case.get("outcome", ""), str) and isinstance(case.get("complete", True), bool)
        seconds = case.get("seconds", 0.0) if isinstance(case, dict) else None
        if not ok or isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not math.isfinite(seconds) or seconds < 0:
            raise PolytraceError(f"{path}: polytrace_shard.cases[{i}] is not a case record (nodeid, index, outcome, "
                                 "seconds); move it away to rerun its cases")


def next_run(records: list[dict]) -> int:
    runs = [int(_RECORD_NAME.match(Path(r["polytrace_shard"]["path"]).name).group(1)) for r in records]
    return max(runs, default=0) + 1


def done_nodeids(records: list[dict], target: str = "any") -> set[str]:
    """Cases finished for ``target`` (a run per GPU model finishes each case once per model)."""
    return {c["nodeid"] for r in records if r["polytrace_shard"].get("target", "any") == target
            for c in r["polytrace_shard"]["cases"] if is_done(c)}


def check_same_code(records: list[dict], commit: str, out: Path) -> None:
    """Refuse to resume into a folder measured from other code: one merged file would mix them."""
    for r in records:
        theirs = ((r.get("machine_info") or {}).get("polytrace") or {}).get("commit")
        if theirs and commit != "unknown" and theirs != commit:
            raise PolytraceError(f"{out}: holds shards of commit {theirs} ({r['polytrace_shard']['path']}), this "
                                 f"checkout is {commit}; write to a new -o folder (or move {out} away)")


def _status(result: dict, cases: list[dict]) -> tuple[str, str]:
    """(status, one-line message) of a shard's result."""
    if result.get("lost"):
        return "lost", result["lost"]
    if result.get("not_started"):
        return "not-started", "the run's time budget was spent before this shard started"
    bad = [c for c in cases if c["outcome"] in ("failed", "error")]
    pending = [c for c in cases if not is_done(c) and c["outcome"] not in ("failed", "error")]
    if bad:
        first = bad[0]
        return "failed", (f"{len(bad)} of {len(cases)} cases failed, first {first['nodeid']}: "
                          f"{first.get('reason') or first['outcome']}")
    if result.get("interrupted"):
        return "interrupted", f"interrupted; {len(cases) - len(pending)} of {len(cases)} cases finished"
    # no JSON is an error unless the shard held no benchmark (None: a plugin that does not say)
    no_json = result.get("benchmark_json") is None and result.get("benchmark_cases", None) != []
    if result.get("rc") not in (0, 5) or no_json:
        return "error", f"pytest exit code {result.get('rc')}: {last_error(result.get('log_tail', ''))}"
    if pending:
        missing = [c for c in pending if c["outcome"] == "missing"]
        if missing:
            return "failed", (f"{len(missing)} cases are no longer collected (the suites changed since the "
                              f"collection), first {missing[0]['nodeid']}")
        return "incomplete", f"{len(pending)} of {len(cases)} cases not finished (time budget)"
    return "done", ""


def last_error(log: str) -> str:
    """One line from a pytest log: the file it could not collect and the exception (the last line
    of the first block pytest marks with 'E'), else the log's last line."""
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    where = next((m.group(1) for ln in lines if (m := re.search(r"ERROR collecting (\S+)", ln))), "")
    block: list[str] = []
    for ln in lines:
        if ln.startswith("E "):
            block.append(ln[1:].strip())
        elif block:
            break
    message = block[-1] if block else (lines[-1].strip() if lines else "no output")
    return " ".join(f"{where + ': ' if where else ''}{message}".split())[:300]


def make_record(shard: Shard, result: dict) -> dict:
    """The record of one shard's result (also of a shard that never returned: ``result['lost']``)."""
    outcomes = result.get("cases") or {}
    missing = set(result.get("missing") or [])
    cases = []
    for c in shard.cases:
        entry = outcomes.get(c.nodeid)
        if entry is None:
            entry = {"outcome": "missing" if c.nodeid in missing else "not-run", "reason": "", "seconds": 0.0,
                     "complete": False}
        cases.append({"nodeid": c.nodeid, "index": c.index, **entry})
    passed = {c["nodeid"] for c in cases if c["outcome"] == "passed" and c.get("complete", True)}
    raw = result.get("benchmark_json")
    base = dict(raw) if isinstance(raw, dict) else {
        "machine_info": {}, "commit_info": {}, "benchmarks": [],
        "datetime": datetime.fromtimestamp(result.get("started") or 0, timezone.utc).isoformat(), "version": None}
    base["benchmarks"] = [b for b in base.get("benchmarks") or [] if b.get("fullname") in passed]
    status, message = _status(result, cases)
    node = result.get("node") or {}
    base["polytrace_shard"] = {
        "format": RECORD_FORMAT, "id": shard.id, "target": shard.target, "status": status, "message": message,
        "node": node, "node_label": node_label(node) if node else "?", "rc": result.get("rc"),
        "started": result.get("started"), "seconds": result.get("seconds", 0.0),
        "cpu_s": result.get("cpu_s", 0.0), "cases": cases,
        "log_tail": result.get("log_tail", "") if status != "done" else "",
    }
    return base


def write_record(out: Path, record: dict) -> Path:
    folder = shards_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['polytrace_shard']['id']}.json"
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    record["polytrace_shard"]["path"] = str(path)
    return path
