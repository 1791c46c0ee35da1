"""Measured kernel timings from the suites' result files, as monotone time-versus-size curves.

A result file (pytest-benchmark JSON, ``results/README.md``) holds, per benchmark, the family,
kernel, mode and provider, the problem's FLOPs and bytes moved, which ceiling bounds it
(``roofline``: ``bf16`` compute-bound, ``hbm`` bandwidth-bound) and the median device time. Only
GPU measurements are rates: a ``cpu-interpreter`` timing is a smoke test of the code path.

A ``Curve`` is the timings of one (family, kernel, mode, provider) over problem size: FLOPs for a
compute-bound kernel, bytes for a bandwidth-bound one (the benchmarks' ``roofline`` says which),
the sequence count for the micro-batch planner (a host algorithm: neither). Between measured sizes
the time is interpolated linearly in log-log; the fitted times never decrease with size (equal
sizes are averaged, then pooled where a larger problem measured faster); past either end the rate
(size per second) of the nearest measured size is kept, so the time stays proportional to size.

``KernelTimings`` holds the benchmarks of one GPU: found under ``results/<gpu-slug>/`` (each
benchmark's latest run; the folder keeps history), or given as files or folders, which must come
from the GPU asked for.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import PolytraceError

CUDA = "cuda"
AXES = ("flops", "bytes", "sequences")
# A median outside these is no time of one kernel launch, whatever the file says: below a GPU clock
# cycle (~1 ns at 1-2 GHz), or above an hour for one benchmark round. Such a file is refused.
MIN_MEDIAN_S, MAX_MEDIAN_S = 1e-9, 3600.0


@dataclass(frozen=True)
class Point:
    """One measured benchmark, reduced to what pricing needs."""

    id: str
    family: str
    kernel: str
    mode: str
    provider: str
    shape: dict
    flops: float
    bytes: float
    median_s: float
    roofline: str
    file: str
    datetime: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.family, self.kernel, self.mode, self.provider)

    def size(self, axis: str) -> float:
        if axis == "flops":
            return self.flops
        if axis == "bytes":
            return self.bytes
        value = self.shape.get("sequences")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def axis_of(points: list[Point]) -> str:
    """The size a curve is interpolated over: FLOPs when most of its benchmarks are compute-bound
    (``roofline == "bf16"``), bytes when bandwidth-bound, the sequence count when the benchmarks
    record neither (the planner)."""
    bf16 = sum(1 for p in points if p.roofline == "bf16")
    axis = "flops" if 2 * bf16 > len(points) else "bytes"
    if not any(p.size(axis) > 0 for p in points):
        axis = "sequences"
    return axis


def _pool_adjacent_violators(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` in weighted least squares."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([np.full(n, m) for m, _, n in blocks])


@dataclass(frozen=True)
class Curve:
    key: tuple[str, str, str, str]  # (family, kernel, mode, provider)
    axis: str
    sizes: np.ndarray  # increasing
    times: np.ndarray  # non-decreasing seconds at ``sizes``
    files: tuple[str, ...]

    @classmethod
    def fit(cls, points: list[Point], axis: str | None = None) -> Curve | None:
        axis = axis or axis_of(points)
        usable = [p for p in points if p.size(axis) > 0 and p.median_s > 0]
        if not usable:
            return None
        xs = np.array([p.size(axis) for p in usable], dtype=np.float64)
        ts = np.log([p.median_s for p in usable])
        uniq, inverse = np.unique(xs, return_inverse=True)
        counts = np.bincount(inverse).astype(np.float64)
        mean_log_t = np.bincount(inverse, weights=ts) / counts  # repeats of one size: geometric mean
        fitted = _pool_adjacent_violators(mean_log_t, counts)
        files = tuple(sorted({p.file for p in usable}))
        return cls(usable[0].key, axis, uniq, np.exp(fitted), files)

    def __post_init__(self):
        lx = np.log(self.sizes)
        object.__setattr__(self, "_lx", lx)
        object.__setattr__(self, "_log_rate", lx - np.log(self.times))
        object.__setattr__(self, "_lx_list", lx.tolist())
        object.__setattr__(self, "_lr_list", self._log_rate.tolist())

    def seconds(self, size):
        """Seconds at ``size`` (a number or an array on this curve's axis); 0 at size 0."""
        if isinstance(size, (int, float, np.number)):  # the trainer asks one size at a time: keep it cheap
            return self._scalar(float(size))
        s = np.asarray(size, dtype=np.float64)
        out = np.zeros_like(s)
        pos = s > 0
        if np.any(pos):
            log_s = np.log(s[pos])
            # np.interp holds the end values: the rate is clamped past the measured sizes
            out[pos] = np.exp(log_s - np.interp(log_s, self._lx, self._log_rate))
        return out

    def _scalar(self, x: float) -> float:
        if x <= 0:
            return 0.0
        log_x, lx, lr = math.log(x), self._lx_list, self._lr_list
        i = bisect.bisect_right(lx, log_x)
        if i == 0:
            log_rate = lr[0]
        elif i == len(lx):
            log_rate = lr[-1]
        else:
            w = (log_x - lx[i - 1]) / (lx[i] - lx[i - 1])
            log_rate = lr[i - 1] + w * (lr[i] - lr[i - 1])
        return math.exp(log_x - log_rate)

    def covers_from(self) -> float:
        """The smallest measured size."""
        return float(self.sizes[0])


@dataclass
class KernelTimings:
    """The GPU benchmarks of one device, by (family, kernel, mode, provider)."""

    gpu_slug: str
    points: list[Point] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    origin: str = ""  # where they came from, for messages: "results/h200", "--results x.json", "BASELINE a.json"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.points)

    @classmethod
    def empty(cls, gpu_slug: str) -> KernelTimings:
        return cls(gpu_slug)

    @classmethod
    def discover(cls, gpu_slug: str, root: str | Path) -> KernelTimings:
        """Every GPU benchmark under ``root/<gpu_slug>/`` (the store's layout), each benchmark id at
        its latest run. A file there that cannot be read is an error naming it (the store only
        writes readable files; silently skipping one would change estimates unnoticed)."""
        from ..measure.results.schema import load_result

        folder = Path(root) / gpu_slug
        if not folder.is_dir():
            return cls(gpu_slug, origin=str(folder))
        results = [load_result(p) for p in sorted(folder.glob("*.json")) if p.is_file()]
        out = cls(gpu_slug, origin=str(folder))
        for r in results:
            if r.measured_on != CUDA:
                continue  # the store refuses CPU timings; a stray one is never a rate
            out._add(r)
        out._keep_latest()
        return out

    @classmethod
    def from_paths(cls, paths, gpu_slug: str | None, flag: str) -> KernelTimings:
        """Result files or folders named on the command line (``flag`` names the argument in
        errors). All must come from one GPU, ``gpu_slug`` when given; CPU-interpreter files are
        refused."""
        from ..measure.results.schema import load_result

        if isinstance(paths, (str, Path)):
            paths = [paths]
        results = []
        for path in paths:
            p = Path(path)
            # a folder's files one by one, so every timing names the file it came from
            files = sorted(f for f in p.glob("*.json") if f.is_file()) if p.is_dir() else [p]
            if p.is_dir() and not files:
                raise PolytraceError(f"{flag} {p}: folder holds no *.json result files")
            results += [load_result(f) for f in files]
        return cls.from_results(results, gpu_slug, flag)

    @classmethod
    def from_results(cls, results, gpu_slug: str | None, flag: str) -> KernelTimings:
        slugs = set()
        for r in results:
            if r.measured_on != CUDA:
                raise PolytraceError(f"{flag} {r.path}: timings measured on {r.measured_on}, not a GPU: "
                                     f"CPU-interpreter runs check the code path, they are not kernel rates")
            slugs.add(r.gpu_slug)
            if gpu_slug is not None and r.gpu_slug != gpu_slug:
                raise PolytraceError(f"{flag} {r.path}: measured on {r.gpu_name} ({r.gpu_slug}), not --gpu {gpu_slug}; "
                                     f"pass --gpu {r.gpu_slug} or results of a {gpu_slug}")
        if len(slugs) > 1:
            raise PolytraceError(f"{flag}: files of different GPUs ({', '.join(sorted(slugs))}); "
                                 f"pass one GPU's results")
        slug = gpu_slug or (slugs.pop() if slugs else "unknown")
        out = cls(slug, origin=f"{flag} " + ", ".join(r.path for r in results))
        for r in results:
            out._add(r)
        out._keep_latest()
        return out

    def _add(self, result) -> None:
        """The GPU benchmarks of one result file (a benchmark measured elsewhere is passed over)."""
        used = False
        for b in result.benchmarks:
            if b.measured_on and b.measured_on != CUDA:
                continue
            median = b.median_s
            if not median or not np.isfinite(median) or median <= 0 or not b.family or not b.kernel:
                continue
            if not MIN_MEDIAN_S <= median <= MAX_MEDIAN_S:
                raise PolytraceError(f"{result.path}: benchmark {b.id!r}: median {median:g} s is not the time of "
                                     f"one kernel launch (expected 1 ns to 1 h); the file is broken")
            self.points.append(Point(b.id, b.family, b.kernel, b.mode, b.provider, dict(b.shape), float(b.flops),
                                     float(b.bytes_moved), float(median), b.roofline, str(result.path),
                                     result.datetime))
            used = True
        if used and str(result.path) not in self.files:
            self.files.append(str(result.path))

    def _keep_latest(self) -> None:
        latest: dict[str, Point] = {}
        for p in self.points:
            if p.id not in latest or (p.datetime, p.file) >= (latest[p.id].datetime, latest[p.id].file):
                latest[p.id] = p
        self.points = list(latest.values())
        self._cache.clear()

    # ------------------------------------------------------------------------------- lookups
    def select(self, family: str, kernel: str, mode: str, provider: str, **match) -> list[Point]:
        index = self._cache.get("index")
        if index is None:
            index = {}
            for p in self.points:
                index.setdefault(p.key, []).append(p)
            self._cache["index"] = index
        return [p for p in index.get((family, kernel, mode, provider), ())
                if all(p.shape.get(k) == v for k, v in match.items())]

    def curve(self, family: str, kernel: str, mode: str, provider: str, **match) -> Curve | None:
        """The curve of one kernel, mode and provider, over the benchmarks whose shape has every
        ``match`` key at that value (e.g. ``model=..., layer=...`` for the GEMM family)."""
        key = (family, kernel, mode, provider, tuple(sorted(match.items())))
        if key not in self._cache:
            self._cache[key] = Curve.fit(self.select(family, kernel, mode, provider, **match))
        return self._cache[key]

    def providers(self, family: str, kernels: tuple[str, ...]) -> list[str]:
        return sorted({p.provider for p in self.points if p.family == family and p.kernel in kernels})

    def shape_values(self, family: str, kernel: str, key: str) -> list[str]:
        return sorted({str(p.shape.get(key)) for p in self.points
                       if p.family == family and p.kernel == kernel and key in p.shape})

    def by_id(self) -> dict[str, Point]:
        return {p.id: p for p in self.points}


def paired(baseline: KernelTimings, candidate: KernelTimings) -> tuple[KernelTimings, KernelTimings]:
    """The two sides of an impact comparison, priced alike wherever they can be compared.

    Per (family, kernel, mode, provider): present in both, each side keeps only the benchmarks
    both measured (a shape cut by one run's time budget must not move the curve); present in one,
    both sides use that one's timings (no change is attributed to a kernel measured once)."""
    keys_b = {p.key for p in baseline.points}
    keys_c = {p.key for p in candidate.points}
    ids_b = {p.id for p in baseline.points}
    ids_c = {p.id for p in candidate.points}
    common = ids_b & ids_c
    out_b: list[Point] = []
    out_c: list[Point] = []
    for key in keys_b | keys_c:
        pb = [p for p in baseline.points if p.key == key]
        pc = [p for p in candidate.points if p.key == key]
        if pb and pc:
            both_b = [p for p in pb if p.id in common]
            both_c = [p for p in pc if p.id in common]
            if both_b and both_c:
                pb, pc = both_b, both_c
        elif pb:
            pc = pb
        else:
            pb = pc
        out_b += pb
        out_c += pc
    return (KernelTimings(baseline.gpu_slug, out_b, list(baseline.files), baseline.origin),
            KernelTimings(candidate.gpu_slug, out_c, list(candidate.files), candidate.origin))


def load_timings(gpu_slug: str, results=None, results_root=None) -> tuple[KernelTimings, bool]:
    """The measured kernel timings an estimate uses, and whether they were given explicitly:
    ``results`` None: every GPU benchmark under ``results_root/<gpu_slug>/`` (default
    ``$POLYTRACE_RESULTS_DIR`` or ``./results``); a ``KernelTimings``; or files / folders (the
    ``--results`` flag), which must come from ``gpu_slug``."""
    if isinstance(results, KernelTimings):
        if results and results.gpu_slug != gpu_slug:
            raise PolytraceError(f"{results.origin}: measured on {results.gpu_slug}, not --gpu {gpu_slug}")
        return results, True
    if results:
        return KernelTimings.from_paths(results, gpu_slug, "--results"), True
    if results_root is None:
        from ..measure.results.store import default_root

        results_root = default_root()
    return KernelTimings.discover(gpu_slug, results_root), False


__all__ = ["AXES", "Curve", "KernelTimings", "Point", "axis_of", "load_timings", "paired"]
