"""What one tuning worker does, serial or on a Ray node: build a profile's tuning buckets on its
device, time the built-in default of a bucket, time a candidate config (rejected when its output
differs from the default's), and the rule that picks a bucket's winner from those times.

Shared by ``session.py`` (the session, serial) and ``ray_search.py`` (the same trials spread over a Ray
cluster), so that on the same measurements both choose the same config.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .tunables import Tunable, TuneContext, TuneShape, _microbatches

# The model each built-in profile's trace came from (shared/README.md); it fixes hidden size, heads
# and vocabulary of the tuned shapes. Model B's architecture is not public: pass --model.
PROFILE_MODELS = {
    "dapo-math-32b": "qwen2.5-32b",
    "deepcoder-14b": "qwen2.5-14b",
    "video-vl-7b": "qwen2.5-vl-7b",
    "search-r1-7b": "qwen2.5-7b",
}
FALLBACK_MODEL = "qwen2.5-7b"

Timer = Callable[[Callable[[], object]], float]  # median seconds of a call


def candidate_configs(space: dict, seed: int = 0) -> list[dict]:
    """Every combination of the space, in a seeded random order."""
    keys = sorted(space)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(list(space[k]) for k in keys))]
    random.Random(seed).shuffle(combos)
    return combos


# The suites' L2 flush (suites/timing.py): a buffer of max(2 x L2, 256 MiB), 256 MiB being
# triton.testing.do_bench's own. The tuner reads it (a reduction) instead of writing it, so no dirty
# lines are left for the timed call to write back; the flush runs outside the events.
FLUSH_MIN_BYTES = 256 << 20


def flush_bytes(l2_bytes: int) -> int:
    """Size of the L2 flush buffer for a device with ``l2_bytes`` of L2 (50 MiB when unknown)."""
    return max(2 * int(l2_bytes or 50 << 20), FLUSH_MIN_BYTES)


def make_timer(on_gpu: bool) -> Timer:
    """median seconds of ``fn`` over a few calls: on a GPU, CUDA events around each call with the L2
    flushed (read) before it, as the suites time a round, so a config is not favoured by inputs
    left in L2 by the previous call (a warm 50 MB L2 holds a whole micro-batch of log-prob inputs);
    perf_counter on a CPU."""
    import torch

    state: dict = {}

    def flush() -> None:
        buf = state.get("buf")
        if buf is None:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            buf = state["buf"] = torch.ones(flush_bytes(getattr(props, "L2_cache_size", 0)), dtype=torch.int8,
                                            device="cuda")
        state["sink"] = buf.sum(dtype=torch.int32)  # reads every line of the buffer, writes one number

    def gpu_time(fn, reps: int = 20) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return float(np.median(times))

    def cpu_time(fn, reps: int = 1) -> float:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    return gpu_time if on_gpu else cpu_time


def max_abs_diff(a, b) -> float:
    import torch

    if isinstance(a, (tuple, list)):
        return max((max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    if not isinstance(a, torch.Tensor):
        return 0.0 if a == b else math.inf
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    diff = (a.float() - b.float()).abs()
    diff = torch.where(torch.isnan(a.float()) & torch.isnan(b.float()), torch.zeros_like(diff), diff)
    return float(torch.nan_to_num(diff, nan=math.inf).max())


@contextlib.contextmanager
def default_config_scope():
    """A context in which ``config=None`` means the built-in default even where a tuning file
    exists (``POLYTRACE_TUNING_DIR`` points at an empty folder), so 'default' is the same baseline
    in every session."""
    import tempfile

    try:
        from polytrace_kernels import _tuning
    except ImportError:
        yield
        return
    old = os.environ.get("POLYTRACE_TUNING_DIR")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["POLYTRACE_TUNING_DIR"] = empty
        _tuning.clear_cache()
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("POLYTRACE_TUNING_DIR", None)
            else:
                os.environ["POLYTRACE_TUNING_DIR"] = old
            _tuning.clear_cache()


@dataclass(frozen=True)
class TuneTarget:
    """The shapes a session tunes for: those ``profile``'s sampled steps (``seed``) give ``model``
    (None: the profile's own), the first ``max_buckets`` buckets of them (None: all)."""

    profile: str = "dapo-math-32b"
    model: str | None = None
    seed: int = 0
    max_buckets: int | None = None


@dataclass
class Workload:
    """A profile's tuning buckets as built on one device."""

    profile: str
    model: str
    on_gpu: bool
    device_name: str
    buckets: dict[str, list[TuneShape]]


def build_workload(tunable: Tunable, profile: str, model: str | None, seed: int, on_gpu: bool,
                   device_name: str) -> Workload:
    from ...run.models import get_model
    from ...workload.profiles import get_profile

    prof = get_profile(profile)
    model_name = model or PROFILE_MODELS.get(prof.name, FALLBACK_MODEL)
    ctx = TuneContext(prof, get_model(model_name), seed, on_gpu)
    ctx.seqlens = _microbatches(ctx)
    buckets: dict[str, list[TuneShape]] = {}
    for s in tunable.shapes(ctx):
        buckets.setdefault(s.bucket, []).append(s)
    return Workload(prof.name, model_name, on_gpu, device_name, buckets)


class BucketRunner:
    """One bucket's launches built on ``device``: the default's output and time, then candidates."""

    def __init__(self, tunable: Tunable, shapes: list[TuneShape], device, timer: Timer):
        self.atol = tunable.atol
        self.timer = timer
        self.device = device
        self.fit_checks = [s.fits for s in shapes if s.fits is not None]
        self.launches = [(s, s.build(device)) for s in shapes]
        weights = np.array([s.weight for s in shapes], dtype=np.float64)
        self.weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(shapes), 1 / len(shapes))
        self.refs = None

    @property
    def labels(self) -> list[str]:
        return [s.label for s, _ in self.launches]

    def _reference(self) -> list:
        if self.refs is None:
            with default_config_scope():  # built-in default, whatever tuning file exists
                self.refs = [launch(None) for _, launch in self.launches]
        return self.refs

    def default_time(self) -> float:
        self._reference()
        with default_config_scope():
            return float(sum(w * self.timer(lambda la=launch: la(None)) for w, (_, launch) in
                             zip(self.weights, self.launches)))

    def fits(self, cfg: dict) -> bool:
        """Whether every shape of the bucket can launch ``cfg`` on this device (shared memory)."""
        return all(fit(dict(cfg), self.device) for fit in self.fit_checks)

    def trial(self, cfg: dict) -> float:
        """The weighted time of ``cfg``, or inf when it cannot fit (nothing compiled), its output
        differs from the default's or the kernel or compiler rejects it."""
        if not self.fits(cfg):
            return math.inf
        refs = self._reference()
        try:
            outs = [launch(dict(cfg)) for _, launch in self.launches]
            if not all(max_abs_diff(o, r) <= self.atol for o, r in zip(outs, refs)):
                return math.inf
            return float(sum(w * self.timer(lambda la=launch: la(dict(cfg))) for w, (_, launch) in
                             zip(self.weights, self.launches)))
        except Exception:  # noqa: BLE001 - a config the kernel or the compiler rejects
            return math.inf


def choose_best(default_time: float, trials: list[tuple[dict, float]]) -> tuple[dict | None, float, int]:
    """(winner or None when the default stays best, its time, rejected count) from the trials in
    candidate order: the first config strictly faster than every earlier one and the default."""
    best, best_time, failed = None, default_time, 0
    for cfg, t in trials:
        if not math.isfinite(t):
            failed += 1
        elif t < best_time:
            best, best_time = cfg, t
    return best, best_time, failed


def bucket_entry(best: dict | None, best_time: float, default_time: float, tried: int, labels: list[str]) -> dict:
    entry = dict(best) if best is not None else {"default": True}
    entry.update({"time_s": best_time, "default_time_s": default_time, "tried": tried, "shapes": labels})
    return entry


# One bucket's measurements, for ``tune_buckets``: called with (bucket, deadline on the
# ``time.monotonic`` clock, progress bar), it gives (the default's time, the bucket's shape labels,
# [(config, time)] of the candidates tried, in candidate order), advancing the bar by one for the
# default and one per candidate, tried or skipped.
MeasureBucket = Callable[[str, float, object], tuple[float, list[str], list[tuple[dict, float]]]]


def tune_buckets(buckets: list[str], n_candidates: int, budget_s: float, name: str, progress: bool,
                 measure: MeasureBucket) -> tuple[dict[str, dict], int, int, float]:
    """The tuning loop of a session, serial or on a cluster: the buckets one after another, each
    given an equal share of ``budget_s`` (its deadline: no candidate starts past it), measured by
    ``measure`` and its winner picked by ``choose_best``. (entry per bucket, configs tried, rejected,
    elapsed seconds): the first fields of a ``Search``."""
    start = time.monotonic()
    results: dict[str, dict] = {}
    tried = failed = 0
    bar = progress_bar(len(buckets) * (n_candidates + 1), name, progress)
    try:
        for bi, bucket in enumerate(buckets):
            deadline = start + budget_s * (bi + 1) / len(buckets)
            default_time, labels, trials = measure(bucket, deadline, bar)
            best, best_time, rejected = choose_best(default_time, trials)
            tried, failed = tried + len(trials), failed + rejected
            results[bucket] = bucket_entry(best, best_time, default_time, len(trials), labels)
    finally:
        bar.close()
    return results, tried, failed, time.monotonic() - start


@dataclass
class Search:
    """What a search found, serial or on a cluster: the entry per bucket and where it ran."""

    results: dict[str, dict]
    tried: int
    failed: int
    elapsed_s: float
    profile: str
    model: str
    on_gpu: bool
    device_name: str
    space: dict
    torch_version: str | None
    triton_version: str | None
    workers: int = 1


def versions() -> tuple[str | None, str | None]:
    """(torch, triton) versions of this process."""
    import torch

    try:
        import triton

        return torch.__version__, triton.__version__
    except ImportError:
        return torch.__version__, None


def progress_bar(total: int, name: str, enabled: bool):
    """The session's one progress bar (a cluster's trials all advance it): a live bar on a terminal,
    a plain line every few seconds in a log (``polytrace.measure.progress``)."""
    from ..progress import Progress

    return Progress(total, f"tune {name}", enabled=enabled, unit="cfg")
