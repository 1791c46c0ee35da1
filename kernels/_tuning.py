"""Tuned launch configurations, written by ``polytrace tune`` and read by the kernels at launch.

Files live at ``<root>/<gpu-slug>/<kernel>.json`` where ``root`` is ``$POLYTRACE_TUNING_DIR`` or,
by default, ``results/tuning`` of this checkout. A file records the device name it was tuned on;
a file for another device is ignored, as is a missing or unreadable one: the kernel then uses its
built-in default. Format::

    {"kernel": "token_logprobs", "device_name": "NVIDIA H200", "gpu_slug": "h200",
     "configs": {"<bucket>": {"BLOCK_V": 4096, "num_warps": 8, "num_stages": 2,
                               "time_s": ..., "default_time_s": ...}}, ...}

Stdlib only (no polytrace import), and nothing is read until a kernel first asks; a family folder
vendored without this module falls back to its defaults.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

LAUNCH_KEYS = ("num_warps", "num_stages")


def tuning_root() -> Path:
    env = os.environ.get("POLYTRACE_TUNING_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "results" / "tuning"


@functools.lru_cache(maxsize=64)
def _load(kernel: str, device_name: str, root: str) -> dict:
    base = Path(root)
    if not base.is_dir():
        return {}
    for path in sorted(base.glob(f"*/{kernel}.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("kernel") == kernel and data.get("device_name") == device_name:
            configs = data.get("configs", {})
            return configs if isinstance(configs, dict) else {}
    return {}


def lookup(kernel: str, bucket: str, device_name: str, default: dict) -> dict:
    """The tuned config for ``bucket`` on this device, else ``default`` (a copy)."""
    configs = _load(kernel, device_name, str(tuning_root()))
    found = configs.get(bucket)
    if not isinstance(found, dict):
        return dict(default)
    merged = dict(default)
    merged.update({k: v for k, v in found.items() if k in default})
    return merged


def clear_cache() -> None:
    _load.cache_clear()
