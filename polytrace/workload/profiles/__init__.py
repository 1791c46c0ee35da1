"""Workload profiles: built-in ones fitted from PolyTrace, and fitted ones from user traces.

``get_profile(name)`` takes a built-in name (``list_profiles()``) or the path of a profile JSON
written by ``polytrace fit``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

from ...errors import PolytraceError, unknown_name
from .drift import DriftCurve, drift_presets, get_drift
from .fit import FitResult, StatedBatch, fit_file, fit_profile
from .profile import BatchConfig, Profile

BUILTIN = ("dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b", "model-b-math", "model-b-tooluse")
DEFAULT_PROFILE = "dapo-math-32b"


def list_profiles() -> list[str]:
    return list(BUILTIN)


@functools.cache
def _builtin(name: str) -> Profile:
    text = resources.files(__package__).joinpath(f"data/{name}.json").read_text()
    return Profile.from_json(json.loads(text), where=f"built-in profile {name}")


def get_profile(name_or_path, drift: str | DriftCurve | None = None) -> Profile:
    """A built-in profile by name or a fitted profile from a JSON file; ``drift`` (a preset name
    or a curve) replaces the profile's drift curve."""
    if isinstance(name_or_path, Profile):
        profile = name_or_path
    elif str(name_or_path) in BUILTIN:
        profile = _builtin(str(name_or_path))
    else:
        path = Path(str(name_or_path))
        if path.suffix == ".json" or path.exists():
            if not path.is_file():
                raise PolytraceError(f"{path}: no such profile file")
            profile = Profile.load(path)
        else:
            raise unknown_name("profile", str(name_or_path), BUILTIN)
    if drift is not None:
        profile = profile.with_drift(get_drift(drift) if isinstance(drift, str) else drift)
    return profile


__all__ = ["BUILTIN", "DEFAULT_PROFILE", "BatchConfig", "DriftCurve", "FitResult", "Profile", "StatedBatch",
           "drift_presets",
           "fit_file", "fit_profile",
           "get_drift", "get_profile", "list_profiles"]
