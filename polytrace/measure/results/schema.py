"""Reading the suites' result files (pytest-benchmark JSON written with ``--benchmark-save-data``).

A result file is pytest-benchmark's own format, so its tools (``pytest-benchmark compare``) keep
working. What polytrace adds lives in two places, written by ``suites/``:

- ``machine_info.polytrace`` (``suites/conftest.py``): ``gpu_name``, ``gpu_slug``, ``measured_on``
  ("cuda" or "cpu-interpreter"), ``driver_version``, ``torch_version``, ``triton_version``,
  ``cuda_version``, ``commit``, ``kernel_hashes`` ({family: hash}), ``suite_hash``.
- ``benchmarks[].extra_info`` (``suites/harness.py``): ``family``, ``kernel``, ``provider``,
  ``provider_kind``, ``mode``, ``shape``, ``shape_id``, ``profile``, ``seed``, ``step``, ``weight``,
  ``flops``, ``bytes_moved``, ``roofline``, ``kernel_hash``, ``measured_on``, ``median_s``,
  ``tflops``, ``gbps``, ``pct_peak_bf16``, ``pct_peak_hbm``, ``peak_mem_bytes``; the output
  ``check`` (``ok``, ``verdict``, ``rule``, ``outputs``, ``coverage`` per output, ``after_timing``:
  the last timed launch's output checked again); ``sm_clock`` (min, median, max MHz during the
  rounds), ``session_max_mhz`` and ``throttled``; ``roofline_floor_s``, ``floor_flops``,
  ``floor_bytes``, ``predicted_s``, ``vs_predicted`` and ``prediction_flag``.

A GPU median below the case's roofline floor (``floor``), a check without coverage or that failed,
a zero or negative median and contradictory clock records are refused, naming the benchmark.

``benchmarks[].stats.data`` holds the raw per-round times in seconds (present only with
``--benchmark-save-data``; the gate needs them).

Every file passes the checks of ``validation`` on the way in (types, ranges, sizes, nesting); a
file that fails them is refused whole, with one line naming the file, the benchmark and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import PolytraceError
from .stats import median_of
from .validation import (
    MAX_AMOUNT,
    MAX_BENCHMARKS,
    MAX_DEPTH,
    MAX_PCT,
    MAX_ROUND_S,
    MAX_SEED,
    MAX_SOURCES,
    MAX_STEP,
    MAX_WEIGHT,
    MEASURED_ON,
    MIN_ROUND_S,
    PROVIDER_KINDS,
    ROOFLINES,
    Fields,
    check_problem,
    clock_problem,
    describe,
    nesting_depth,
    read_json,
    rounds_problem,
)

CPU_MEASURED_ON = "cpu-interpreter"


@dataclass(kw_only=True)
class BenchCase:
    """What a benchmark case is and what it measures, as the suites describe it (``extra_info``):
    shared by a result file's record (``BenchResult``) and ``polytrace ab``'s (``ab.report.CaseResult``)."""

    id: str  # stable: family/kernel/provider/mode/shape_id, or the pytest name when extra_info lacks them
    family: str
    kernel: str
    provider: str
    mode: str
    shape_id: str
    shape: dict
    profile: str
    seed: int | None
    step: int | None
    weight: float | None  # the case's raw workload weight (token share)
    flops: float = 0.0
    bytes_moved: float = 0.0
    roofline: str = "hbm"


@dataclass(kw_only=True)
class BenchResult(BenchCase):
    """One benchmark of a result file."""

    name: str
    fullname: str
    provider_kind: str  # "ours", "baseline", "peer", or "" when the suite did not say
    kernel_hash: str
    measured_on: str
    rounds: np.ndarray  # raw per-round times in seconds; empty when the file was saved without them
    median_s: float | None
    extra: dict = field(default_factory=dict)

    @property
    def suite(self) -> str:
        """``logprob`` for ``suites/test_logprob.py::...``."""
        return suite_of(self.fullname) or self.family

    @property
    def group(self) -> tuple[str, str]:
        """(family, provider): the unit over which weights are normalised."""
        return (self.family or self.suite, self.provider or "?")

    @property
    def tflops(self) -> float | None:
        return self.flops / self.median_s / 1e12 if self.flops and self.median_s else None

    @property
    def gbps(self) -> float | None:
        return self.bytes_moved / self.median_s / 1e9 if self.bytes_moved and self.median_s else None

    @property
    def pct_peak(self) -> float | None:
        """% of the ceiling named by ``roofline``, as the harness computed it on the device (None on
        CPU, where there is no GPU ceiling)."""
        key = "pct_peak_bf16" if self.roofline == "bf16" else "pct_peak_hbm"
        value = self.extra.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def definition(self) -> tuple:
        """What the benchmark measures, apart from the code: two results with the same id but a
        different definition time different workloads and must not be compared."""
        return (self.profile, self.seed, self.step)


@dataclass
class ResultFile:
    path: str
    machine: dict  # machine_info.polytrace (empty when the file did not come from our suites)
    machine_info: dict
    datetime: str
    benchmarks: list[BenchResult]
    sources: list[str] = field(default_factory=list)  # files merged into this one

    @property
    def gpu_name(self) -> str:
        name = self.machine.get("gpu_name")
        if name:
            return str(name)
        names = {b.extra.get("device_name") for b in self.benchmarks if b.extra.get("device_name")}
        return names.pop() if len(names) == 1 else "unknown"

    @property
    def gpu_slug(self) -> str:
        slug = self.machine.get("gpu_slug")
        if slug:
            return str(slug)
        if self.measured_on == CPU_MEASURED_ON:
            return "cpu"
        from ...run.hardware import slug_for

        return slug_for(self.gpu_name)

    @property
    def measured_on(self) -> str:
        where = self.machine.get("measured_on")
        if where:
            return str(where)
        found = {b.measured_on for b in self.benchmarks if b.measured_on}
        return found.pop() if len(found) == 1 else ("mixed" if found else "unknown")

    @property
    def commit(self) -> str:
        return str(self.machine.get("commit") or "unknown")

    @property
    def throttled(self) -> bool:
        """The run's environment record (``suites/environment.py``) found the GPU throttled or
        shared: its timings are suspect, and gate, store and set-baseline refuse it unforced."""
        return self.machine.get("throttled") is True

    def throttle_reasons(self) -> list[str]:
        reasons = self.machine.get("throttle_reasons")
        return [str(r) for r in reasons] if isinstance(reasons, list) else []

    @property
    def suites(self) -> list[str]:
        return sorted({b.suite for b in self.benchmarks if b.suite})

    @property
    def suite(self) -> str:
        names = self.suites
        return names[0] if len(names) == 1 else ("all" if names else "none")

    @property
    def date(self) -> str:
        """YYYY-MM-DD of the run (from pytest-benchmark's ``datetime``)."""
        m = re.match(r"(\d{4}-\d{2}-\d{2})", self.datetime or "")
        return m.group(1) if m else "unknown-date"

    def kernel_hashes(self) -> dict[str, str]:
        hashes = dict(self.machine.get("kernel_hashes") or {})
        for b in self.benchmarks:
            if b.family and b.kernel_hash:
                hashes.setdefault(b.family, b.kernel_hash)
        return hashes

    def by_id(self) -> dict[str, BenchResult]:
        return {b.id: b for b in self.benchmarks}


def natural_key(text: str) -> tuple:
    """Sort 'tokens=4096' before 'tokens=16384'."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text or ""))


def suite_of(fullname: str) -> str:
    m = re.search(r"test_([A-Za-z0-9_]+)\.py", fullname or "")
    return m.group(1) if m else ""


def benchmark_id(extra: dict, name: str) -> str:
    """family/kernel/provider/mode/shape_id when the harness recorded them, else the pytest name."""
    parts = [extra.get(k) for k in ("family", "kernel", "provider", "mode", "shape_id")]
    if all(isinstance(p, str) and p for p in parts[:4]) and isinstance(parts[4], str):
        return "/".join(parts)
    return name


def parse_benchmark(raw, where: str, index: int = 0) -> BenchResult:
    """One ``benchmarks[]`` entry, every field the results code uses typed and range-checked."""
    if not isinstance(raw, dict):
        raise PolytraceError(f"{where}: benchmarks[{index}] must be an object, got {describe(raw)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise PolytraceError(f"{where}: benchmarks[{index}] has no 'name' (a non-empty string), got {describe(name)}")
    top = Fields(raw, f"{where}: benchmark {describe(name)}")
    fullname = top.text("fullname")
    extra = top.obj_or_empty("extra_info")
    stats = top.obj_or_empty("stats")
    info = Fields(extra, top.where, "extra_info.")
    st = Fields(stats, top.where, "stats.")
    data = stats.get("data")
    if data is None:
        data = []
    if not isinstance(data, list):
        raise PolytraceError(f"{top.where}: 'stats.data' must be a list of seconds, got {describe(data)}")
    problem = rounds_problem(data)
    if problem:
        raise PolytraceError(f"{top.where}: 'stats.data': {problem}")
    rounds = np.asarray(data, dtype=np.float64)
    median = st.number("median", MIN_ROUND_S, MAX_ROUND_S)
    if rounds.size:
        median = median_of(rounds)
    shape = info.obj_or_empty("shape")
    for key in ("pct_peak_bf16", "pct_peak_hbm"):
        info.number(key, 0.0, MAX_PCT)
    # a recorded median of zero or below is no time at all (the rounds were checked above)
    info.number("median_s", 0.0, MAX_ROUND_S, low_open=True)
    for key in ("floor_flops", "floor_bytes"):
        info.number(key, 0.0, MAX_AMOUNT)
    for problem in (check_problem(extra["check"]) if "check" in extra else None, clock_problem(extra)):
        if problem:
            raise PolytraceError(f"{top.where}: {problem}")
    return BenchResult(
        id=benchmark_id(extra, name),
        name=name,
        fullname=fullname or name,
        family=info.text("family"),
        kernel=info.text("kernel"),
        provider=info.text("provider"),
        provider_kind=info.text("provider_kind", PROVIDER_KINDS),
        mode=info.text("mode"),
        shape_id=info.text("shape_id"),
        shape=shape,
        profile=info.text("profile"),
        seed=info.integer("seed", 0, MAX_SEED),
        step=info.integer("step", 0, MAX_STEP),
        weight=info.number("weight", 0.0, MAX_WEIGHT),
        flops=info.number("flops", 0.0, MAX_AMOUNT) or 0.0,
        bytes_moved=info.number("bytes_moved", 0.0, MAX_AMOUNT) or 0.0,
        roofline=info.text("roofline", ROOFLINES) or "hbm",
        kernel_hash=info.text("kernel_hash"),
        measured_on=info.text("measured_on", MEASURED_ON),
        rounds=rounds,
        median_s=median,
        extra=extra,
    )


# machine_info.polytrace: string fields, and the numbers the suites record
_MACHINE_TEXT = ("gpu_name", "gpu_slug", "commit", "suite_hash", "torch_version", "triton_version",
                 "cuda_version", "driver_version", "triton_interpret")


def parse_machine(machine_info: dict, where: str) -> dict:
    f = Fields(machine_info, where, "machine_info.")
    machine = f.obj_or_empty("polytrace")
    m = Fields(machine, where, "machine_info.polytrace.")
    for key in _MACHINE_TEXT:
        m.text(key)
    m.text("measured_on", MEASURED_ON)
    m.string_map("kernel_hashes")
    m.integer("sm_count", 0, 2**31)
    m.integer("total_memory_bytes", 0, 2**63)
    m.number("budget_s", 0.0, 1e9)
    return dict(machine)


def parse_result(obj, path: str = "<memory>") -> ResultFile:
    """A parsed pytest-benchmark JSON object, validated (see ``validation``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("benchmarks"), list):
        raise PolytraceError(f"{path}: not a pytest-benchmark result (no 'benchmarks' list)")
    if nesting_depth(obj) > MAX_DEPTH:  # objects built in memory skip read_json's check
        raise PolytraceError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep")
    if len(obj["benchmarks"]) > MAX_BENCHMARKS:
        raise PolytraceError(f"{path}: {len(obj['benchmarks']):,} benchmarks (at most {MAX_BENCHMARKS:,})")
    top = Fields(obj, path)
    machine_info = top.obj_or_empty("machine_info")
    machine = parse_machine(machine_info, path)
    benches = [parse_benchmark(b, path, i) for i, b in enumerate(obj["benchmarks"])]
    seen: dict[str, int] = {}
    for b in benches:  # a duplicated id would silently shadow a benchmark in the gate
        seen[b.id] = seen.get(b.id, 0) + 1
    dups = [k for k, v in seen.items() if v > 1]
    if dups:
        raise PolytraceError(f"{path}: benchmark id {dups[0]!r} occurs {seen[dups[0]]} times")
    result = ResultFile(path=str(path), machine=machine, machine_info=dict(machine_info),
                        datetime=top.text("datetime"), benchmarks=benches,
                        sources=top.string_list("polytrace_sources", MAX_SOURCES) or [str(path)])
    refuse_impossible(result)
    return result


def refuse_impossible(result: ResultFile) -> None:
    """Refuse, naming the benchmark, a GPU timing below its roofline floor (``floor``) and a
    benchmark marked throttled in a run whose record says it was not."""
    from ...run.hardware import detect
    from .floor import below_floor_message, floor_s

    gpu = detect(result.gpu_name) if result.measured_on == "cuda" else None
    for b in result.benchmarks:
        if b.extra.get("throttled") is True and result.machine.get("throttled") is False:
            raise PolytraceError(f"{result.path}: benchmark {b.id}: marked throttled, but the run's environment "
                                 "record says it was not (machine_info.polytrace.throttled false): contradictory "
                                 "clock records")
        if gpu is None or not b.median_s:
            continue
        bound, basis = floor_s(gpu, flops=b.flops, bytes_moved=b.bytes_moved, roofline=b.roofline,
                               l2=b.extra.get("l2") if isinstance(b.extra.get("l2"), str) else None,
                               floor_flops=b.extra.get("floor_flops"), floor_bytes=b.extra.get("floor_bytes"))
        if bound and b.median_s < bound:
            raise PolytraceError(f"{result.path}: benchmark " + below_floor_message(b.id, b.median_s, bound, basis)
                                 + f" on {gpu.name}")


def load_result(path: str | Path) -> ResultFile:
    """One result file, or every ``*.json`` in a folder merged into one (they must come from the
    same machine; see ``merge``)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.json") if f.is_file())
        if not files:
            raise PolytraceError(f"{p}: folder holds no *.json result files")
        return merge([load_result(f) for f in files], name=str(p))
    return parse_result(read_json(p), str(p))


def merge(results: list[ResultFile], name: str = "<merged>") -> ResultFile:
    """Several suites' files of one run into one (e.g. a baseline covering every suite). Refuses
    files from different GPUs or places of measurement."""
    if not results:
        raise PolytraceError(f"{name}: nothing to merge")
    first = results[0]
    for r in results[1:]:
        if r.gpu_name != first.gpu_name or r.measured_on != first.measured_on:
            raise PolytraceError(
                f"{name}: cannot merge {r.path} ({r.gpu_name}, {r.measured_on}) with {first.path} "
                f"({first.gpu_name}, {first.measured_on})")
    benches: list[BenchResult] = []
    seen: set[str] = set()
    for r in results:
        for b in r.benchmarks:
            if b.id in seen:
                raise PolytraceError(f"{name}: benchmark {b.id!r} occurs in more than one file ({r.path})")
            seen.add(b.id)
            benches.append(b)
    machine = dict(first.machine)
    hashes: dict[str, str] = {}
    for r in results:
        hashes.update(r.kernel_hashes())
    machine["kernel_hashes"] = hashes
    if any(r.throttled for r in results):
        machine["throttled"] = True
        machine["throttle_reasons"] = [f"{Path(r.path).name}: {why}" for r in results if r.throttled
                                       for why in (r.throttle_reasons() or ["marked throttled"])]
    commits = sorted({r.commit for r in results})
    machine["commit"] = commits[0] if len(commits) == 1 else "+".join(commits)
    sources = [s for r in results for s in r.sources]
    return ResultFile(path=name, machine=machine, machine_info=dict(first.machine_info),
                      datetime=min((r.datetime for r in results if r.datetime), default=""),
                      benchmarks=benches, sources=sources)


def merged_json(paths: list[str | Path]) -> dict:
    """The raw pytest-benchmark JSON of several files of one run, benchmarks concatenated (used to
    write a baseline that spans every suite)."""
    objs, results = [], []
    for p in paths:
        r = load_result(p)
        results.append(r)
        objs.append(read_json(p) if Path(p).is_file() else None)
    merged = merge(results)  # validates machine and unique ids
    if any(o is None for o in objs):
        raise PolytraceError("pass result files, not folders, to merge raw JSON")
    out = dict(objs[0])
    out["benchmarks"] = [b for o in objs for b in o["benchmarks"]]
    mi = dict(out.get("machine_info") or {})
    mi["polytrace"] = merged.machine
    out["machine_info"] = mi
    out["datetime"] = merged.datetime
    out["polytrace_sources"] = [str(p) for p in paths]
    return out
