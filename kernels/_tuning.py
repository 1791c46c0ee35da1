"""Tuned launch configurations, written by ``polytrace tune`` and read by the kernels at launch.

Files live at ``<root>/<gpu-slug>/<kernel>.json`` where ``root`` is ``$POLYTRACE_TUNING_DIR`` or,
by default, ``results/tuning`` of this checkout. A file records the device name it was tuned on;
a file for another device is ignored, as is a missing or unreadable one: the kernel then uses its
built-in default. Format::

    {"kernel": "token_logprobs", "device_name": "NVIDIA H200", "gpu_slug": "h200",
     "configs": {"<bucket>": {"BLOCK_V": 4096, "num_warps": 8, "num_stages": 2,
                               "time_s": ..., "default_time_s": ...}}, ...}

A file also records ``family`` and ``kernel_hash`` (sha256 over ``kernels/<family>/*.py``, names and
bytes, first 16 hex digits: the same hash ``polytrace.provenance.kernel_source_hash`` computes).
Configs tuned for other kernel code are stale: block sizes that were fastest, or even valid, for
the old code need not be for the new. A file whose hash differs from the family's current source
(or that records none) is ignored, with a ``RuntimeWarning`` naming the kernel and the
``polytrace tune`` command that rewrites it.

Stdlib only (no polytrace import), and nothing is read until a kernel first asks; a family folder
vendored without this module falls back to its defaults.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings
from pathlib import Path

LAUNCH_KEYS = ("num_warps", "num_stages")


def tuning_root() -> Path:
    env = os.environ.get("POLYTRACE_TUNING_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "results" / "tuning"


def folder_source_hash(folder: Path) -> str:
    """sha256 (first 16 hex digits) over ``folder/*.py`` (names and bytes, sorted); "" when the
    folder does not exist. The one definition of a kernel source hash: results, tuned configs and
    ``polytrace ab`` record it (``polytrace.provenance``), the launchers compare it here."""
    if not folder.is_dir():
        return ""
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def family_source_hash(family: str) -> str:
    """``folder_source_hash`` of ``kernels/<family>/`` as it is now; "" for no such family."""
    if not family or "/" in family or "\\" in family or family.startswith("."):
        return ""
    return folder_source_hash(Path(__file__).resolve().parent / family)


def _stale(data: dict, kernel: str, path: Path) -> bool:
    """True (after a warning) when the file was tuned for other kernel source than today's."""
    family, recorded = data.get("family"), data.get("kernel_hash")
    current = family_source_hash(family) if isinstance(family, str) else ""
    if isinstance(recorded, str) and recorded and current and recorded == current:
        return False
    why = (f"tuned for kernel source {recorded}, the source is now {current}" if isinstance(recorded, str)
           and recorded and current else "it records no kernel hash to check against the source")
    warnings.warn(f"{path}: tuned configs for kernel {kernel!r} ignored ({why}); the kernel uses its default "
                  f"launch config. Rerun `polytrace tune {kernel} --profile PROFILE` on this GPU to tune it again.",
                  RuntimeWarning, stacklevel=4)
    return True


# A tuned value reaches a Triton launch unchecked by anything else: block sizes feed tl.arange (a
# power of two; packing tunes row blocks down to 4), warps are 1-32 and a power of two,
# pipelines past 8 stages do not fit shared memory on any GPU we know; every other launch knob
# (splits, chunk counts) is a count. 2**20 bounds them all (the largest tuned value is 16384).
_MAX_VALUE = 1 << 20


def _is_knob(key: str) -> bool:
    """A launch knob of a bucket's entry: the compiler's (``LAUNCH_KEYS``) or a kernel constexpr
    (upper case: ``BLOCK_V``, ``NSPLIT``); the rest (``time_s``, ``tried``, ...) is the record."""
    return key in LAUNCH_KEYS or key.isupper()


def _bad_value(key: str, value) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_VALUE:
        return f"an int in [0, {_MAX_VALUE}]"
    if "BLOCK" in key and (value < 1 or value & (value - 1)):
        return "a power of two"
    if key == "num_warps" and (not 1 <= value <= 32 or value & (value - 1)):
        return "a power of two in [1, 32]"
    if key == "num_stages" and not 1 <= value <= 8:
        return "in [1, 8]"
    return ""


def _launchable(configs: dict, kernel: str, path: Path) -> dict:
    """The buckets whose every launch knob a launch could take; each other one is dropped with a
    warning (once: ``_load`` is cached)."""
    kept = {}
    for bucket, entry in configs.items():
        if not isinstance(entry, dict):
            continue
        bad = next(((k, v, need) for k, v in entry.items() if _is_knob(k) and (need := _bad_value(k, v))), None)
        if bad is None:
            kept[bucket] = entry
            continue
        key, value, need = bad
        warnings.warn(f"{path}: tuned config {bucket!r} of kernel {kernel!r} ignored ({key} = {value!r}, must be "
                      f"{need}); the kernel uses its default launch config. Rerun `polytrace tune {kernel} "
                      "--profile PROFILE` on this GPU to tune it again.", RuntimeWarning, stacklevel=4)
    return kept


@functools.lru_cache(maxsize=64)
def _load(kernel: str, device_name: str, root: str) -> dict:
    base = Path(root)
    if not base.is_dir():
        return {}
    for path in sorted(base.glob(f"*/{kernel}.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            continue
        if data.get("kernel") == kernel and data.get("device_name") == device_name:
            if _stale(data, kernel, path):
                return {}
            configs = data.get("configs", {})
            return _launchable(configs, kernel, path) if isinstance(configs, dict) else {}
    return {}


def lookup(kernel: str, bucket: str, device_name: str, default: dict) -> dict:
    """The tuned config for ``bucket`` on this device, else ``default`` (a copy). A tuned config
    holding a value no launch could take is ignored with a ``RuntimeWarning`` naming the file."""
    configs = _load(kernel, device_name, str(tuning_root()))
    found = configs.get(bucket)
    if not isinstance(found, dict):
        return dict(default)
    merged = dict(default)
    merged.update({k: v for k, v in found.items() if k in default})
    return merged


def clear_cache() -> None:
    _load.cache_clear()
    family_source_hash.cache_clear()
