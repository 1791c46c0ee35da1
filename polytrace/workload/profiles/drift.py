"""Length drift across training steps.

Mean response length moves a lot during RL training (in the Qwen2-7B GPG log shipped with the
validation data it grows from about 200 to about 670 tokens over 210 steps). A ``DriftCurve``
gives the scale applied to sampled response lengths at a step: piecewise linear between knots,
flat beyond the last knot. The default is no drift (scale 1 at every step).

Presets live in ``data/drift_presets.json``, each with the log it was read from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ...errors import PolytraceError, unknown_name


@dataclass(frozen=True)
class DriftCurve:
    steps: tuple[float, ...]
    scale: tuple[float, ...]
    name: str = "custom"
    source: str = ""

    def __post_init__(self):
        if len(self.steps) != len(self.scale) or not self.steps:
            raise PolytraceError("drift curve needs as many scales as steps, at least one")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
            raise PolytraceError("drift curve steps must be strictly increasing")
        if not all(np.isfinite(self.steps)) or not all(np.isfinite(self.scale)):
            raise PolytraceError("drift curve steps and scales must be finite")
        if any(s <= 0 for s in self.scale):
            raise PolytraceError("drift curve scales must be positive")

    def at(self, step) -> float:
        return float(np.interp(step, self.steps, self.scale))

    def to_json(self) -> dict:
        return {"name": self.name, "steps": list(self.steps), "scale": list(self.scale), "source": self.source}

    @classmethod
    def from_json(cls, obj) -> DriftCurve | None:
        if obj is None or obj == "none":
            return None
        if isinstance(obj, str):
            return get_drift(obj)
        try:
            return cls(tuple(float(s) for s in obj["steps"]), tuple(float(s) for s in obj["scale"]),
                       obj.get("name", "custom"), obj.get("source", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise PolytraceError(f"malformed drift curve: {exc!r}") from None



def drift_presets() -> dict[str, DriftCurve]:
    text = resources.files(__package__).joinpath("data/drift_presets.json").read_text()
    return {k: DriftCurve.from_json(dict(v, name=k)) for k, v in json.loads(text)["presets"].items()}


def get_drift(name: str) -> DriftCurve | None:
    if name in ("none", "", None):
        return None
    presets = drift_presets()
    if name not in presets:
        raise PolytraceError(f"--drift: {unknown_name('drift preset', name, list(presets) + ['none'])}")
    return presets[name]


def drift_from_series(steps, values, name: str, source: str, knots: int = 24, baseline_steps: int = 10) -> DriftCurve:
    """A preset from a logged ``response_length/mean`` series: scale relative to the mean of the
    first ``baseline_steps`` steps, smoothed to ``knots`` evenly spaced knots (median of each
    window, so single noisy steps do not become knots)."""
    steps = np.asarray(steps, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(steps)
    steps, values = steps[order], values[order]
    base = values[:baseline_steps].mean()
    edges = np.linspace(steps[0], steps[-1], knots + 1)
    ks, ss = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (steps >= lo) & (steps <= hi)
        if m.any():
            ks.append(float(np.median(steps[m])))
            ss.append(float(np.median(values[m]) / base))
    ks[0] = float(steps[0])
    return DriftCurve(tuple(round(k, 2) for k in ks), tuple(round(s, 4) for s in ss), name, source)
