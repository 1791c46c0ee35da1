"""The pytest plugin a shard runs with (``-p polytrace.measure.bench.pytest_plugin``): selects the shard's
cases by exact node id, and writes each case's outcome (and, with ``--collect-only``, the collected
node ids) to JSON files the coordinator reads.

Node ids are passed in a file, not on the command line: a parametrised id holds ``/``, ``[`` and
spaces, and a shard of a few hundred cases would make a long argv. Standard library and pytest only
(it runs inside the shard's pytest, on any node).
"""

from __future__ import annotations

import json
import os
import tempfile

# worst outcome wins when setup, call and teardown report differently
_RANK = {"passed": 0, "xfailed": 1, "xpassed": 1, "skipped": 2, "failed": 3, "error": 4}


def pytest_addoption(parser):
    group = parser.getgroup("polytrace-bench", "polytrace bench shards")
    group.addoption("--polytrace-select", default=None, metavar="FILE",
                    help="JSON list of node ids: run exactly these (in collection order), deselect the rest")
    group.addoption("--polytrace-outcomes", default=None, metavar="FILE",
                    help="write {node id: outcome, reason, seconds} of every case run here at the end")
    group.addoption("--polytrace-collect", default=None, metavar="FILE",
                    help="write the collected node ids (JSON list, collection order) here")


def write_json(path: str, obj) -> None:
    """Through a temporary file and a rename: the coordinator never reads half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".polytrace-", suffix=".tmp", dir=folder)
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def reason_of(report) -> str:
    """One line: a skip's reason, or the exception line pytest marks with 'E'."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        text = getattr(report, "longreprtext", "") or str(longrepr or "")
        marked = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
        text = marked[0] if marked else (text.strip().splitlines() or [""])[-1]
    return " ".join(text.split())[:300]


class _Recorder:
    def __init__(self, config):
        self.config = config
        self.outcomes: dict[str, dict] = {}
        self.missing: list[str] = []
        # cases that use pytest-benchmark's fixture: a shard without any writes no --benchmark-json,
        # which is then no error (the suites' plain checks can fill a shard of their own)
        self.benchmark_cases: list[str] = []

    def pytest_collection_modifyitems(self, session, config, items):
        path = config.getoption("polytrace_select")
        if not path:
            return
        with open(path) as fh:
            wanted = json.load(fh)
        wanted_set = set(wanted)
        keep = [item for item in items if item.nodeid in wanted_set]
        dropped = [item for item in items if item.nodeid not in wanted_set]
        found = {item.nodeid for item in keep}
        self.missing = [n for n in wanted if n not in found]  # the code changed since the collection
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        self.benchmark_cases = [item.nodeid for item in keep if "benchmark" in getattr(item, "fixturenames", ())]

    def pytest_collection_finish(self, session):
        path = self.config.getoption("polytrace_collect")
        if path:
            # a case may carry a cost hint (``polytrace_cost`` marker) for dealing shards before any ran
            costs = {}
            for item in session.items:
                mark = item.get_closest_marker("polytrace_cost")
                if mark and mark.args and isinstance(mark.args[0], (int, float)) and mark.args[0] >= 0:
                    costs[item.nodeid] = float(mark.args[0])
            write_json(path, {"nodeids": [item.nodeid for item in session.items], "costs": costs})

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            else:
                outcome = report.outcome
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = "passed"
        entry = self.outcomes.setdefault(report.nodeid, {"outcome": "passed", "reason": "", "seconds": 0.0,
                                                         "complete": False})
        # a case interrupted mid-call has only its setup report: it was not measured
        entry["complete"] = entry["complete"] or report.when == "call" or outcome != "passed"
        entry["seconds"] = round(entry["seconds"] + float(getattr(report, "duration", 0.0) or 0.0), 6)
        if _RANK[outcome] > _RANK[entry["outcome"]]:
            entry["outcome"] = outcome
            entry["reason"] = reason_of(report)

    def pytest_sessionfinish(self, session, exitstatus):
        path = self.config.getoption("polytrace_outcomes")
        if path:
            write_json(path, {"cases": self.outcomes, "missing": self.missing,
                              "benchmark_cases": self.benchmark_cases, "exitstatus": int(exitstatus)})


def pytest_configure(config):
    config.pluginmanager.register(_Recorder(config), "polytrace-bench-recorder")
