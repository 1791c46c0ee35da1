"""Merging a run folder's shard records into one pytest-benchmark file per suite and GPU model:
``<out>/<gpu-slug>/<suite>.json``, the schema and benchmark ids of a serial
``pytest suites/test_<suite>.py --benchmark-json`` run, in its order, so ``polytrace results
store``, ``show`` and ``gate`` read it like any other result file (``gate BASELINE <out>/<slug>``
gates every suite of the run at once).

Shards measured on different GPU models never share a file: the slug comes from each shard's own
``machine_info.polytrace``. The file's ``machine_info`` is that of its first shard; every node's
own ``machine_info`` is kept under ``polytrace_bench.nodes`` (with the benchmarks it measured).
Shards of one file must come from the same code and device; anything else is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...atomic_write import atomic_write_text
from ...errors import PolytraceError
from ..results.schema import benchmark_id, suite_of
from .ledger import run_records

# machine_info.polytrace fields that must agree between the shards of one merged file: another
# value means other code or another device, which the gate must never see as one run.
MUST_AGREE = ("gpu_name", "measured_on", "commit", "suite_hash", "kernel_hashes")


@dataclass
class MergedFile:
    path: Path
    gpu_slug: str
    suite: str
    n_benchmarks: int
    nodes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"wrote {self.path}: {self.n_benchmarks} benchmarks ({self.suite} on {self.gpu_slug}, " \
               f"nodes {', '.join(self.nodes)})"


def _slug(record: dict) -> str:
    info = (record.get("machine_info") or {}).get("polytrace") or {}
    return str(info.get("gpu_slug") or "unknown")


def _suite(fullname: str) -> str:
    return suite_of(fullname) or Path(fullname.split("::", 1)[0]).stem


def merge_dir(out: str | Path) -> list[MergedFile]:
    """Write ``<out>/<slug>/<suite>.json`` from every shard record in ``<out>/shards``; returns
    what was written. A case measured by more than one record keeps the latest."""
    out = Path(out)
    records = run_records(out, str(out), " (nothing was run into this folder)")
    groups: dict[tuple[str, str], dict] = {}  # (slug, suite) -> {nodeid: (index, bench, record)}
    for r in records:
        index = {c["nodeid"]: c["index"] for c in r["polytrace_shard"]["cases"]}
        for b in r["benchmarks"]:
            name = str(b.get("fullname") or b.get("name"))
            groups.setdefault((_slug(r), _suite(name)), {})[name] = (index.get(name, 1 << 30), b, r)
    written = []
    for (slug, suite), entries in sorted(groups.items()):
        ordered = sorted(entries.items(), key=lambda kv: (kv[1][0], kv[0]))
        contributing = []
        for _, (_, _, r) in ordered:
            if all(r is not c for c in contributing):
                contributing.append(r)
        contributing.sort(key=lambda r: r["polytrace_shard"]["path"])
        _check_agree(contributing, slug, suite)
        path = out / slug / f"{suite}.json"
        obj = _merged(contributing, [b for _, (_, b, _) in ordered])
        _check_unique(obj, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(obj, indent=1) + "\n")
        written.append(MergedFile(path, slug, suite, len(obj["benchmarks"]),
                                  [n["node"] for n in obj["polytrace_bench"]["nodes"]]))
    return written


def _check_agree(records: list[dict], slug: str, suite: str) -> None:
    first = records[0]
    ref = (first.get("machine_info") or {}).get("polytrace") or {}
    for r in records[1:]:
        info = (r.get("machine_info") or {}).get("polytrace") or {}
        for key in MUST_AGREE:
            if info.get(key) != ref.get(key):
                raise PolytraceError(
                    f"{r['polytrace_shard']['path']}: {key} {info.get(key)!r} differs from "
                    f"{first['polytrace_shard']['path']} ({ref.get(key)!r}); {suite} on {slug} would mix two runs "
                    "(move the stale shards away, or rerun into a new folder)")


def _check_unique(obj: dict, path: Path) -> None:
    seen: set[str] = set()
    for b in obj["benchmarks"]:
        bid = benchmark_id(b.get("extra_info") or {}, str(b.get("name")))
        if bid in seen:
            raise PolytraceError(f"{path}: benchmark id {bid!r} measured by two different cases")
        seen.add(bid)


def _merged(records: list[dict], benchmarks: list[dict]) -> dict:
    first = records[0]
    nodes: dict[str, dict] = {}
    mine = {id(b) for b in benchmarks}
    for r in records:
        meta = r["polytrace_shard"]
        label = meta.get("node_label") or "?"
        node = nodes.setdefault(label, {"node": label, "machine_info": r.get("machine_info") or {}, "shards": [],
                                        "benchmarks": 0})
        node["shards"].append(meta["id"])
        node["benchmarks"] += sum(1 for b in r["benchmarks"] if id(b) in mine)
    return {
        "machine_info": first.get("machine_info") or {},
        "commit_info": first.get("commit_info") or {},
        "benchmarks": benchmarks,
        "datetime": min((str(r.get("datetime")) for r in records if r.get("datetime")), default=""),
        "version": first.get("version"),
        "polytrace_sources": [r["polytrace_shard"]["path"] for r in records],
        "polytrace_bench": {"shards": [r["polytrace_shard"]["id"] for r in records], "nodes": list(nodes.values())},
    }
