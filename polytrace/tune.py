"""Tuning sessions: search a kernel's launch configs over shape buckets drawn from a workload profile.

``polytrace tune KERNEL --profile P --budget-s S`` samples a step of the profile, cuts it into the
micro-batches a trainer would run, maps each to the kernel's tuning bucket (``tuning_bucket`` next
to the launcher), and for each bucket times the built-in default and then candidates from the
family's ``TUNING_SPACE`` (in a seeded random order, so a short budget still samples the whole
space) until the bucket's share of the budget is spent. A candidate counts only when its output
matches the default's. The best config per bucket is written to
``<root>/<gpu-slug>/<kernel>.json`` in the format ``kernels/_tuning.py`` reads at launch; buckets
already in the file and not tuned this time are kept.

On a machine without CUDA the search runs in the Triton interpreter at tiny shapes, so CI covers
the code path; such a file is labelled ``measured_on: cpu-interpreter`` and goes to ``out/tuning``
by default, never next to the GPU files (kernels only read files whose device name matches).

Registry: ``TUNABLES`` (in ``tunables.py``, with the shape builders) lists each tunable kernel
explicitly, with an adapter that knows its family's launcher. A family provides ``TUNING_SPACE``,
``tuning_bucket(...)`` and a launcher taking ``config=``; see each adapter for the exact calls.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .errors import PolytraceError
from .tunables import CPU_MAX_SEQS as CPU_MAX_SEQS
from .tunables import CPU_MAX_TOKENS as CPU_MAX_TOKENS
from .tunables import GPU_MAX_TOKENS as GPU_MAX_TOKENS
from .tunables import SHAPES_PER_BUCKET as SHAPES_PER_BUCKET
from .tunables import TUNABLES as TUNABLES
from .tunables import Tunable, TuneContext, TuneShape, _microbatches, get_tunable
from .tunables import tunable_names as tunable_names

REPO_ROOT = Path(__file__).resolve().parents[1]

# The model each built-in profile's trace came from (shared/README.md); it fixes hidden size, heads
# and vocabulary of the tuned shapes. Model B's architecture is not public: pass --model.
PROFILE_MODELS = {
    "dapo-math-32b": "qwen2.5-32b",
    "deepcoder-14b": "qwen2.5-14b",
    "video-vl-7b": "qwen2.5-vl-7b",
    "search-r1-7b": "qwen2.5-7b",
}
FALLBACK_MODEL = "qwen2.5-7b"


# ------------------------------------------------------------------------------------------------
# the search


def candidate_configs(space: dict, seed: int = 0) -> list[dict]:
    """Every combination of the space, in a seeded random order."""
    keys = sorted(space)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(list(space[k]) for k in keys))]
    random.Random(seed).shuffle(combos)
    return combos


def _timer(on_gpu: bool):
    """median seconds of ``fn`` over a few calls (CUDA events on a GPU, perf_counter on CPU)."""
    import torch

    def gpu_time(fn, reps: int = 20) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
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


def _max_abs_diff(a, b) -> float:
    import torch

    if isinstance(a, (tuple, list)):
        return max((_max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    if not isinstance(a, torch.Tensor):
        return 0.0 if a == b else math.inf
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    diff = (a.float() - b.float()).abs()
    diff = torch.where(torch.isnan(a.float()) & torch.isnan(b.float()), torch.zeros_like(diff), diff)
    return float(torch.nan_to_num(diff, nan=math.inf).max())


@dataclass
class Session:
    path: Path
    data: dict
    tried: int
    failed: int

    def summary(self) -> str:
        from tabulate import tabulate

        d = self.data
        rows = []
        for bucket, c in sorted(d["configs"].items()):
            if bucket not in d.get("session_buckets", []):
                continue
            cfg = ", ".join(f"{k}={c[k]}" for k in sorted(c) if k in d["space"]) or "(built-in default)"
            rows.append([bucket, cfg, f"{c['time_s'] * 1e3:.3f} ms", f"{c['default_time_s'] * 1e3:.3f} ms",
                         f"{c['default_time_s'] / c['time_s']:.2f}x", c["tried"]])
        where = ("CPU interpreter: code-path check, timings are not performance" if d["measured_on"] != "cuda"
                 else f"{d['device_name']} (measured)")
        head = (f"tuned {d['kernel']} on {where}: profile {d['profile']} (seed {d['seed']}, model {d['model']}), "
                f"{self.tried} configs timed, {self.failed} rejected, {d['elapsed_s']:.1f} s")
        table = tabulate(rows, headers=["bucket", "best config", "time", "default", "speedup", "tried"],
                         disable_numparse=True)
        return f"{head}\n{table}\nwrote {self.path}"


def run_session(kernel: str | Tunable, *, profile: str = "dapo-math-32b", budget_s: float = 120.0, seed: int = 0,
                root: str | Path | None = None, model: str | None = None, max_buckets: int | None = None,
                progress: bool = True) -> Session:
    """Tune ``kernel`` for the shapes of ``profile`` within ``budget_s`` seconds; write and return
    the session (see the module docstring)."""
    from .models import get_model
    from .profiles import get_profile

    tunable = kernel if isinstance(kernel, Tunable) else get_tunable(kernel)
    if not budget_s or budget_s <= 0:
        raise PolytraceError(f"--budget-s: must be > 0, got {budget_s}")
    if max_buckets is not None and max_buckets < 1:
        raise PolytraceError(f"--max-buckets: must be >= 1, got {max_buckets}")
    import torch

    on_gpu = bool(torch.cuda.is_available())
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        raise PolytraceError(f"no CUDA GPU: to run the tuning code path in the Triton interpreter (a smoke "
                             f"test; its timings are not performance), run: TRITON_INTERPRET=1 polytrace tune "
                             f"{tunable.name} --profile {profile}")
    prof = get_profile(profile)
    model_name = model or PROFILE_MODELS.get(prof.name, FALLBACK_MODEL)
    spec = get_model(model_name)
    device = torch.device("cuda" if on_gpu else "cpu")
    device_name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    ctx = TuneContext(prof, spec, seed, on_gpu)
    ctx.seqlens = _microbatches(ctx)
    space = tunable.space()
    shapes = tunable.shapes(ctx)
    buckets: dict[str, list[TuneShape]] = {}
    for s in shapes:
        buckets.setdefault(s.bucket, []).append(s)
    names = list(buckets)[: max_buckets or None]
    candidates = candidate_configs(space, seed)
    timer = _timer(on_gpu)
    measure = _default_config_scope()

    start = time.monotonic()
    results: dict[str, dict] = {}
    tried = failed = 0
    bar = _progress(len(names) * (len(candidates) + 1), tunable.name, progress)
    try:
        for bi, bucket in enumerate(names):
            deadline = start + budget_s * (bi + 1) / len(names)
            launches = [(s, s.build(device)) for s in buckets[bucket]]
            weights = np.array([s.weight for s, _ in launches], dtype=np.float64)
            weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(launches), 1 / len(launches))
            with measure():
                refs = [launch(None) for _, launch in launches]  # built-in default, no tuning file
                default_time = sum(w * timer(lambda la=launch: la(None)) for w, (_, launch) in zip(weights, launches))
            bar.update(1)
            best, best_time, n_tried = None, default_time, 0
            for cfg in candidates:
                if time.monotonic() > deadline and n_tried > 0:
                    bar.update(len(candidates) - n_tried)
                    break
                n_tried += 1
                tried += 1
                try:
                    outs = [launch(dict(cfg)) for _, launch in launches]
                    ok = all(_max_abs_diff(o, r) <= tunable.atol for o, r in zip(outs, refs))
                    t = sum(w * timer(lambda la=launch, c=cfg: la(dict(c))) for w, (_, launch) in
                            zip(weights, launches)) if ok else math.inf
                except Exception:  # noqa: BLE001 - a config the kernel or the compiler rejects
                    ok, t = False, math.inf
                if not ok:
                    failed += 1
                elif t < best_time:
                    best, best_time = cfg, t
                bar.update(1)
            entry = dict(best) if best is not None else {"default": True}
            entry.update({"time_s": best_time, "default_time_s": default_time, "tried": n_tried,
                          "shapes": [s.label for s, _ in launches]})
            results[bucket] = entry
    finally:
        bar.close()
    elapsed = time.monotonic() - start
    data = _write(tunable, results, root, on_gpu, device_name, prof.name, seed, model_name, space, budget_s, elapsed)
    return Session(data["__path__"], {k: v for k, v in data.items() if k != "__path__"}, tried, failed)


def _default_config_scope():
    """A context in which ``config=None`` means the built-in default even where a tuning file
    exists (``POLYTRACE_TUNING_DIR`` points at an empty folder), so 'default' is the same baseline
    in every session."""
    import contextlib
    import tempfile

    @contextlib.contextmanager
    def scope():
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

    return scope


def _progress(total: int, name: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"tune {name}", unit="cfg", disable=not enabled, leave=False)


def default_root(on_gpu: bool) -> Path:
    if on_gpu:
        try:
            from polytrace_kernels._tuning import tuning_root

            return tuning_root()
        except ImportError:
            return REPO_ROOT / "results" / "tuning"
    return Path("out") / "tuning"


def _write(tunable: Tunable, results: dict, root, on_gpu: bool, device_name: str, profile: str, seed: int,
           model: str, space: dict, budget_s: float, elapsed: float) -> dict:
    import torch

    from .atomic_write import atomic_write_text
    from .hardware import slug_for
    from .provenance import git_commit, kernel_source_hash

    slug = slug_for(device_name) if on_gpu else "cpu"
    base = Path(root) if root is not None else default_root(on_gpu)
    path = base / slug / f"{tunable.name}.json"
    configs: dict = {}
    if path.is_file():  # keep buckets tuned earlier on this device
        try:
            old = json.loads(path.read_text())
            if old.get("device_name") == device_name and isinstance(old.get("configs"), dict):
                configs.update(old["configs"])
        except (OSError, ValueError):
            pass
    for bucket, entry in results.items():
        if entry.pop("default", False):
            entry = {**_default_marker(), **entry}
        configs[bucket] = entry
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    data = {
        "kernel": tunable.name, "family": tunable.family, "device_name": device_name, "gpu_slug": slug,
        "measured_on": "cuda" if on_gpu else "cpu-interpreter", "profile": profile, "seed": seed, "model": model,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(REPO_ROOT, mark_dirty=False),
        "kernel_hash": kernel_source_hash(tunable.family), "torch_version": torch.__version__,
        "triton_version": triton_version, "budget_s": budget_s, "elapsed_s": round(elapsed, 3),
        "space": space, "session_buckets": sorted(results), "configs": configs,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolytraceError(f"--out {base}: cannot create folder: {exc}") from None
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=False) + "\n")
    try:
        from polytrace_kernels import _tuning

        _tuning.clear_cache()
    except ImportError:
        pass
    data["__path__"] = path
    return data


def _default_marker() -> dict:
    """A bucket where no candidate beat the default stores no launch keys: lookup then returns the
    launcher's own default (merged over nothing)."""
    return {"default_won": True}
