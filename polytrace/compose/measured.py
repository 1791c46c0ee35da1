"""Measured kernel rates from the suites' pytest-benchmark files (``results/<gpu-slug>/*.json``).

``suites/harness.py`` writes, per benchmark, ``extra_info`` with the family, kernel, mode,
provider, FLOPs, bytes moved, the median time and where it was measured. Only GPU measurements
(``measured_on == "cuda"``) of our own providers are used; a CPU-interpreter timing is never a
rate. Rates are interpolated over the problem size (FLOPs, log-log), clamped at the ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class MeasuredRates:
    gpu_slug: str
    # (family, kernel, mode) -> sorted list of (flops, bytes, median_s)
    points: dict[tuple[str, str, str], list[tuple[float, float, float]]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, gpu_slug: str, root: str | Path = "results", providers: tuple[str, ...] | None = None
             ) -> MeasuredRates:
        out = cls(gpu_slug)
        folder = Path(root) / gpu_slug
        if not folder.is_dir():
            return out
        for path in sorted(folder.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            benches = data.get("benchmarks", []) if isinstance(data, dict) else []
            used = False
            for b in benches:
                info = b.get("extra_info") or {}
                if info.get("measured_on") != "cuda":
                    continue
                if providers is not None and info.get("provider") not in providers:
                    continue
                median = info.get("median_s") or (b.get("stats") or {}).get("median")
                flops = info.get("flops") or 0.0
                if not median or median <= 0:
                    continue
                key = (str(info.get("family", "")), str(info.get("kernel", "")), str(info.get("mode", "")))
                out.points.setdefault(key, []).append((float(flops), float(info.get("bytes_moved") or 0.0),
                                                       float(median)))
                used = True
            if used:
                out.files.append(str(path))
        for key in out.points:
            out.points[key].sort()
        return out

    def __bool__(self) -> bool:
        return bool(self.points)

    def _match(self, family: str, kernel: str | None, mode: str | None):
        pts = []
        for (f, k, m), rows in self.points.items():
            if f == family and (kernel is None or k == kernel) and (mode is None or m == mode):
                pts += rows
        return sorted(pts)

    def flop_rate(self, family: str, flops: float, kernel: str | None = None, mode: str | None = None
                  ) -> float | None:
        """Achieved FLOP/s at a problem of ``flops`` FLOPs, interpolated; None when unmeasured."""
        pts = [(f, t) for f, _, t in self._match(family, kernel, mode) if f > 0]
        if not pts:
            return None
        xs = np.log([f for f, _ in pts])
        rates = np.log([f / t for f, t in pts])
        return float(np.exp(np.interp(np.log(max(flops, 1.0)), xs, rates)))

    def time_for(self, family: str, flops: float, kernel: str | None = None, mode: str | None = None
                 ) -> float | None:
        rate = self.flop_rate(family, flops, kernel, mode)
        return None if rate is None else flops / rate
