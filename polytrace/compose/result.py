"""Typed pieces of an estimate: where a price comes from (``Price``), and the result of
``polytrace estimate`` as one type (``EstimateResult``) whose ``to_json()`` is the ``--json``
document, versioned (``SCHEMA_VERSION``; docs/json-schema.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum

# 1: the first versioned document (estimate's keys as of the RunSpec; kernel_prices per row)
SCHEMA_VERSION = 1


class Price(str, Enum):
    """Where a kernel family's seconds come from. A part is priced ``ROOFLINE`` (the model's own
    price: the roofline at the assumed efficiencies, or a per-item host price from published
    figures) or ``MEASURED`` (a result file's timing); a family over several parts or stages is
    ``PARTLY_MEASURED`` when they mix, ``EXTRAPOLATED`` when a timing was asked far outside its
    measured sizes. ``TRACE``, ``CALIBRATION`` and ``PRIORS``: no kernel (tool latency, a
    calibration's or the priors' fixed seconds). The values are the strings ``--json`` shows."""

    ROOFLINE = "roofline"
    MEASURED = "measured"
    PARTLY_MEASURED = "partly measured"
    EXTRAPOLATED = "extrapolated"
    TRACE = "trace"
    CALIBRATION = "calibration"
    PRIORS = "priors"


def price_of(source: str) -> Price:
    """A part's price when only its source string says it: the roofline's own name, else a
    result file's."""
    return Price.ROOFLINE if source.split(" (")[0].strip() == Price.ROOFLINE.value else Price.MEASURED


def combined(prices, sources=()) -> Price:
    """One family's price over its parts (``prices``) and their source texts (for extrapolation:
    ``pricing.EXTRAPOLATION_LIMIT`` writes it into the source)."""
    prices = [Price(p) for p in prices]
    if all(p is Price.ROOFLINE for p in prices):
        return Price.ROOFLINE
    if any(p is Price.ROOFLINE for p in prices):
        return Price.PARTLY_MEASURED
    return Price.EXTRAPOLATED if any("(extrapolated x" in s for s in sources) else Price.MEASURED


@dataclass
class EstimateResult:
    """``estimate`` / ``estimate --mode`` as one type: the run (``config``, ``model``, ``gpu``),
    the sampled steps (``rows``), their ``summary`` (stages, kernel families with their
    ``Price``, idle figures, the mode block), ``memory``, ``warnings`` and what else the estimate
    carried (``extra``: lengths, calibration, range, providers, ...)."""

    profile: str
    config: dict
    model: dict
    gpu: dict
    seed: int
    source: str
    rows: list
    summary: dict
    memory: dict
    warnings: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, res: dict) -> EstimateResult:
        names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
        return cls(**{k: res[k] for k in names if k in res},
                   extra={k: v for k, v in res.items() if k not in names})

    @property
    def mode(self) -> str:
        return (self.summary.get("mode") or {}).get("mode", "sync")

    def to_json(self) -> dict:
        """The ``--json`` document: ``schema_version`` and every field (``extra``'s keys at the top)."""
        out = {"schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                out.update(self.extra)
            else:
                out[f.name] = getattr(self, f.name)
        return out
