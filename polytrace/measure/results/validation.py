"""The boundary for result files: bounded JSON reading and typed, range-checked fields.

Everything that reads a result file goes through here, so the code past it (store, gate, plots,
history) can trust what it gets: strings are strings, counts are integers in range, timings are
finite and positive, and nothing allocates or recurses in proportion to a value in the file. A
violation is one ``PolytraceError`` line naming the file, the benchmark and the field.

Bounds (each far above what the suites write, far below what hurts):

- file size 256 MiB (a full GPU run of every suite is about 2 MB);
- nesting depth 32 (the suites' files nest 6 deep); a JSON nested 100,000 deep is refused, never a
  ``RecursionError``;
- 100,000 benchmarks per file, 1,000,000 rounds per benchmark;
- round times within [1 ns, 10^6 s]: below any timer's resolution or above 11 days is a corrupted
  file, not a measurement, and the bounds keep every ratio the gate forms finite (10^15 at most).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ...errors import PolytraceError

MAX_RESULT_BYTES = 256 * 2**20
MAX_DEPTH = 32
MAX_BENCHMARKS = 100_000
MAX_ROUNDS = 1_000_000
MAX_SOURCES = 10_000
MIN_ROUND_S = 1e-9
MAX_ROUND_S = 1e6
MAX_SEED = 2**64  # numpy's SeedSequence takes any non-negative int; 64 bits is what anyone passes
MAX_STEP = 2**31
MAX_AMOUNT = 1e30  # FLOPs or bytes of one benchmark: 10^30 is 10^9 s at an exaFLOP/s
MAX_WEIGHT = 1e15
MAX_PCT = 1e6

MEASURED_ON = ("cuda", "cpu-interpreter")
PROVIDER_KINDS = ("ours", "baseline", "peer", "")
ROOFLINES = ("hbm", "bf16")


def describe(value) -> str:
    """A short rendering of a bad value for an error message (containers by size, not content)."""
    if isinstance(value, dict):
        return f"an object of {len(value)} key(s)"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_json(path: str | Path, what: str = "result file"):
    """Parse a JSON file with the size and depth bounds above; one-line errors naming the file."""
    p = Path(path)
    try:
        if not p.is_file():  # a FIFO or device named *.json would block or never end
            raise PolytraceError(f"{p}: {what} not found" if not p.exists() else f"{p}: not a regular file")
        size = p.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise PolytraceError(f"{p}: {size:,} bytes is too large for a {what} (at most {MAX_RESULT_BYTES:,})")
        text = p.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolytraceError(f"{p}: cannot read: {exc}") from None
    return parse_json_text(text, str(p))


def parse_json_text(text: str, where: str):
    try:
        obj = json.loads(text)
    except RecursionError:  # the C scanner stops at the interpreter's recursion limit, stack intact
        raise PolytraceError(f"{where}: JSON nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise PolytraceError(f"{where}: not valid JSON: {exc}") from None
    depth = nesting_depth(obj)
    if depth > MAX_DEPTH:
        raise PolytraceError(f"{where}: JSON nested {depth} levels deep (at most {MAX_DEPTH})")
    return obj


def nesting_depth(obj) -> int:
    """Depth of lists and objects (a scalar is 0), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


class Fields:
    """Typed getters over one JSON object; errors read ``<where>: '<prefix><key>' must be ...``."""

    def __init__(self, obj, where: str, prefix: str = ""):
        self.obj, self.where, self.prefix = obj, where, prefix

    def _error(self, key: str, want: str, value) -> PolytraceError:
        return PolytraceError(f"{self.where}: '{self.prefix}{key}' must be {want}, got {describe(value)}")

    def text(self, key: str, choices: tuple[str, ...] | None = None) -> str:
        """A string ("" when absent or null)."""
        value = self.obj.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self._error(key, "a string", value)
        if choices is not None and value not in choices:
            raise self._error(key, "one of " + ", ".join(repr(c) for c in choices), value)
        return value

    def obj_or_empty(self, key: str) -> dict:
        value = self.obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._error(key, "an object", value)
        return value

    def number(self, key: str, low: float, high: float, *, low_open: bool = False) -> float | None:
        """A finite number in [low, high] ((low, high] with ``low_open``), or None when absent/null."""
        value = self.obj.get(key)
        if value is None:
            return None
        want = f"a number in {'(' if low_open else '['}{low:g}, {high:g}]"
        out = as_number(value)
        if out is None or out > high or out < low or (low_open and out == low):
            raise self._error(key, want, value)
        return out

    def integer(self, key: str, low: int, high: int) -> int | None:
        """An integer in [low, high), or None when absent/null."""
        value = self.obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
            raise self._error(key, f"an integer in [{low:,}, {high:,})", value)
        return value

    def string_map(self, key: str) -> dict[str, str]:
        value = self.obj_or_empty(key)
        for k, v in value.items():
            if not isinstance(v, str):
                raise self._error(f"{key}.{k}", "a string", v)
        return dict(value)

    def string_list(self, key: str, limit: int) -> list[str]:
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > limit or not all(isinstance(v, str) for v in value):
            raise self._error(key, f"a list of at most {limit:,} strings", value)
        return list(value)


def as_number(value) -> float | None:
    """``value`` as a finite float, or None when it is not a JSON number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:  # an integer literal beyond 1.8e308
        return None
    return out if math.isfinite(out) else None


def rounds_problem(values) -> str | None:
    """Why a list of round times is unusable (None when every one is a finite time within bounds)."""
    if len(values) > MAX_ROUNDS:
        return f"{len(values):,} rounds (at most {MAX_ROUNDS:,})"
    for i, v in enumerate(values):
        x = as_number(v)
        if x is None or not MIN_ROUND_S <= x <= MAX_ROUND_S:
            return (f"round {i} is {describe(v)}; rounds must be finite times in "
                    f"[{MIN_ROUND_S:g}, {MAX_ROUND_S:g}] seconds")
    return None


CHECK_VERDICTS = ("pass", "16-bit-only", "fail")
MAX_CLOCK_MHZ = 10_000.0
CLOCK_FLOOR = 0.90  # polytrace.measure.envrecord's: a clock more than 10% below the session's max is throttled


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def check_problem(check) -> str | None:
    """Why a benchmark's ``extra_info.check`` is unusable (None when fine): not an object, no
    ``coverage`` (every output says how much of it was compared with its truth), a coverage entry
    that is not ``checked`` of ``of`` units with 1 <= checked <= of, or a failed check on a timed
    benchmark (the suites never time a wrong output: the file contradicts itself)."""
    if not isinstance(check, dict):
        return f"'check' must be an object, got {describe(check)}"
    coverage = check.get("coverage")
    if not isinstance(coverage, dict) or not coverage:
        return "'check' has no 'coverage' (how much of each output was compared with its fp64 truth)"
    for name, entry in coverage.items():
        if not isinstance(entry, dict):
            return f"'check.coverage.{name}' must be an object, got {describe(entry)}"
        checked, of = _count(entry.get("checked")), _count(entry.get("of"))
        if checked is None or of is None or not 1 <= checked <= of:
            return (f"'check.coverage.{name}' must check 1..of units (whole numbers), got checked "
                    f"{describe(entry.get('checked'))} of {describe(entry.get('of'))}")
    verdict = check.get("verdict")
    if verdict is not None and verdict not in CHECK_VERDICTS:
        return f"'check.verdict' must be one of {', '.join(CHECK_VERDICTS)}, got {describe(verdict)}"
    ok = check.get("ok")
    if ok is not None and not isinstance(ok, bool):
        return f"'check.ok' must be true or false, got {describe(ok)}"
    if verdict == "fail" or (ok is False and verdict not in ("16-bit-only",)):
        return "'check' failed, yet the benchmark was timed (a wrong output is never timed)"
    if verdict == "pass" and ok is False:
        return "'check' says verdict 'pass' and ok false"
    after = check.get("after_timing")
    if after is not None:
        if not isinstance(after, dict):
            return f"'check.after_timing' must be an object, got {describe(after)}"
        if after.get("ok") is False or after.get("verdict") == "fail":
            return "'check.after_timing' failed: the output of the last timed launch was wrong"
    return None


def clock_problem(extra: dict) -> str | None:
    """Why a benchmark's SM clock record contradicts itself (None when fine or absent):
    ``sm_clock`` min <= median <= max, all positive and below 10 GHz; ``throttled`` a boolean that
    agrees with the clock (min below 90% of ``session_max_mhz`` is throttled, above is not)."""
    clock = extra.get("sm_clock")
    throttled = extra.get("throttled")
    if throttled is not None and not isinstance(throttled, bool):
        return f"'throttled' must be true or false, got {describe(throttled)}"
    if clock is None:
        return None
    if not isinstance(clock, dict):
        return f"'sm_clock' must be an object, got {describe(clock)}"
    values = {}
    for key in ("min_mhz", "median_mhz", "max_mhz"):
        v = as_number(clock.get(key))
        if v is None or not 0 < v <= MAX_CLOCK_MHZ:
            return f"'sm_clock.{key}' must be a clock in (0, {MAX_CLOCK_MHZ:g}] MHz, got {describe(clock.get(key))}"
        values[key] = v
    if not values["min_mhz"] <= values["median_mhz"] <= values["max_mhz"]:
        return (f"'sm_clock' contradicts itself: min {values['min_mhz']:g}, median {values['median_mhz']:g}, "
                f"max {values['max_mhz']:g} MHz")
    top = extra.get("session_max_mhz")
    if top is not None:
        t = as_number(top)
        if t is None or not 0 < t <= MAX_CLOCK_MHZ or t < values["max_mhz"]:
            return (f"'session_max_mhz' {describe(top)} must be a clock at or above the benchmark's own max "
                    f"{values['max_mhz']:g} MHz")
        below = values["min_mhz"] < CLOCK_FLOOR * t
        if throttled is not None and throttled != below:
            return (f"'throttled' is {str(throttled).lower()} but the SM clock fell to {values['min_mhz']:g} MHz "
                    f"against a session max of {t:g} MHz ({'below' if below else 'within'} 10%)")
    return None
