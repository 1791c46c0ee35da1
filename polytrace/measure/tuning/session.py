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

With ``--ray`` the same trials, one per (bucket, config), run on every GPU of a Ray cluster
(``ray_search.py``): each worker builds the buckets on its own GPU, and the winner per bucket is
picked from the trials in candidate order by the rule the serial session uses
(``measure.choose_best``), so on the same measurements both write the same configs.

Registry: ``TUNABLES`` (in ``tunables.py``, with the shape builders) lists each tunable kernel
explicitly, with an adapter that knows its family's launcher. A family provides ``TUNING_SPACE``,
``tuning_bucket(...)`` and a launcher taking ``config=``; see each adapter for the exact calls.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...errors import PolytraceError
from ..bench.cluster import ClusterSpec
from .measure import (
    BucketRunner,
    Search,
    Timer,
    TuneTarget,
    build_workload,
    make_timer,
    tune_buckets,
    versions,
)
from .measure import candidate_configs as candidate_configs
from .tunables import Tunable as Tunable
from .tunables import TuneShape as TuneShape
from .tunables import get_tunable
from .tunables import tunable_names as tunable_names

REPO_ROOT = Path(__file__).resolve().parents[3]  # polytrace/measure/tuning/session.py -> the checkout


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
                f"{self.tried} configs timed, {self.failed} rejected, {d['elapsed_s']:.1f} s"
                + (f" on {d['workers']} workers" if d.get("workers", 1) > 1 else ""))
        table = tabulate(rows, headers=["bucket", "best config", "time", "default", "speedup", "tried"],
                         disable_numparse=True)
        return f"{head}\n{table}\nwrote {self.path}"


def run_session(kernel: str | Tunable, *, target: TuneTarget | None = None, budget_s: float = 120.0,
                root: str | Path | None = None, progress: bool = True, cluster: ClusterSpec | None = None,
                timer: Timer | None = None) -> Session:
    """Tune ``kernel`` for the shapes of ``target`` within ``budget_s`` seconds; write and return
    the session (see the module docstring). With ``cluster.address`` (``local``, ``auto`` or an
    address) the trials (bucket, config) run on every GPU of the cluster (``ray_search``); the winner
    per bucket is chosen from the same trials by the same rule. ``timer`` replaces the device timer
    (tests). None: the default target (dapo-math-32b) and no cluster."""
    target, cluster = target or TuneTarget(), cluster or ClusterSpec()
    tunable = kernel if isinstance(kernel, Tunable) else get_tunable(kernel)
    if not budget_s or budget_s <= 0:
        raise PolytraceError(f"--budget-s: must be > 0, got {budget_s}")
    if target.max_buckets is not None and target.max_buckets < 1:
        raise PolytraceError(f"--max-buckets: must be >= 1, got {target.max_buckets}")
    if cluster.address:
        from .ray_search import search_on_ray

        search = search_on_ray(tunable, target, budget_s, progress, cluster, timer)
    else:
        if cluster.workers not in (None, 1):
            raise PolytraceError("--workers: only with --ray (a serial session has one worker)")
        search = _search_here(tunable, target, budget_s, progress, timer)
    data = _write(tunable, search, root, budget_s, target.seed)
    return Session(data["__path__"], {k: v for k, v in data.items() if k != "__path__"}, search.tried, search.failed)


def _search_here(tunable: Tunable, target: TuneTarget, budget_s: float, progress: bool,
                 timer: Timer | None) -> Search:
    profile, model, seed, max_buckets = target.profile, target.model, target.seed, target.max_buckets
    import torch

    on_gpu = bool(torch.cuda.is_available())
    from polytrace_kernels._interpreter import interpreting  # the reading every kernel family uses

    if not on_gpu and not interpreting():
        raise PolytraceError(f"no CUDA GPU: to run the tuning code path in the Triton interpreter (a smoke "
                             f"test; its timings are not performance), run: polytrace tune {tunable.name} --profile "
                             f"{profile} --allow-cpu")
    device = torch.device("cuda" if on_gpu else "cpu")
    work = build_workload(tunable, profile, model, seed, on_gpu,
                          torch.cuda.get_device_name(device) if on_gpu else "cpu")
    space = tunable.space()
    names = list(work.buckets)[: max_buckets or None]
    candidates = candidate_configs(space, seed)
    timer = timer or make_timer(on_gpu)

    def measure_bucket(bucket: str, deadline: float, bar) -> tuple[float, list[str], list[tuple[dict, float]]]:
        # the runner (a bucket's inputs; an LM head: GBs) is freed when this returns, before the
        # next bucket's inputs are built
        runner = BucketRunner(tunable, work.buckets[bucket], device, timer)
        default_time = runner.default_time()
        bar.update(1)
        trials: list[tuple[dict, float]] = []
        fitting = [c for c in candidates if runner.fits(c)]  # the rest cannot fit: never compiled
        bar.update(len(candidates) - len(fitting))
        for cfg in fitting:
            if time.monotonic() > deadline and trials:
                bar.update(len(fitting) - len(trials))
                break
            trials.append((cfg, runner.trial(cfg)))
            bar.update(1)
        return default_time, runner.labels, trials

    found = tune_buckets(names, len(candidates), budget_s, tunable.name, progress, measure_bucket)
    return Search(*found, work.profile, work.model, on_gpu, work.device_name, space, *versions())


def default_root(on_gpu: bool) -> Path:
    if on_gpu:
        try:
            from polytrace_kernels._tuning import tuning_root

            return tuning_root()
        except ImportError:
            return REPO_ROOT / "results" / "tuning"
    return Path("out") / "tuning"


def _write(tunable: Tunable, search: Search, root, budget_s: float, seed: int) -> dict:
    from ...atomic_write import atomic_write_text
    from ...provenance import git_commit, kernel_source_hash
    from ...run.hardware import slug_for

    on_gpu, device_name = search.on_gpu, search.device_name
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
    for bucket, entry in search.results.items():
        if entry.pop("default", False):
            entry = {**_default_marker(), **entry}
        configs[bucket] = entry
    data = {
        "kernel": tunable.name, "family": tunable.family, "device_name": device_name, "gpu_slug": slug,
        "measured_on": "cuda" if on_gpu else "cpu-interpreter", "profile": search.profile, "seed": seed,
        "model": search.model, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(REPO_ROOT, mark_dirty=False),
        "kernel_hash": kernel_source_hash(tunable.family), "torch_version": search.torch_version,
        "triton_version": search.triton_version, "budget_s": budget_s, "elapsed_s": round(search.elapsed_s, 3),
        "workers": search.workers, "space": search.space, "session_buckets": sorted(search.results),
        "configs": configs,
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
