"""Helpers shared by the subcommands: JSON output (atomic writes live in ``polytrace.atomic_write``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def json_text(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=_default)


def print_json(obj) -> None:
    sys.stdout.write(json_text(obj) + "\n")


def _default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
