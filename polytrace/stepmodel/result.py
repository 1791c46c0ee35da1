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


@dataclass(frozen=True)
class StageTime:
    """One stage's mean seconds over the sampled steps and its share of the mean step."""

    name: str
    mean_s: float
    share: float


@dataclass(frozen=True)
class FamilyCost:
    """One kernel family's mean seconds per step, its share, where they come from (``price``)
    and the sources (result files, providers, ``roofline``) joined."""

    name: str
    s: float
    share: float
    price: Price
    sources: dict  # stage -> the source text of the family's parts there


@dataclass(frozen=True)
class StepRange:
    """A calibrated step's range: what the calibration window could not identify
    (``calibrate/ranges.estimate_range``): the step's ends, each stage's, and the stages whose
    constant and per-token cost the window could not split."""

    step_s: tuple
    stages_s: dict
    unidentified: tuple

    @classmethod
    def from_json(cls, doc: dict) -> StepRange:
        return cls(tuple(doc["step_s"]), dict(doc["stages_s"]), tuple(doc["unidentified"]))

    def to_json(self) -> dict:
        return {"step_s": list(self.step_s), "stages_s": self.stages_s, "unidentified": list(self.unidentified)}


@dataclass(frozen=True)
class Guarded:
    """A calibrated estimate moved toward the priors where its range is past 2x
    (``calibrate/ranges.guard``): the guarded step and stages, the weight left on the calibration
    per stage, and a note per moved stage. The calibrated step itself stands."""

    step_s: float
    stages_s: dict
    weights: dict
    notes: tuple

    @classmethod
    def from_json(cls, doc: dict) -> Guarded:
        return cls(float(doc["step_s"]), dict(doc["stages_s"]), dict(doc["weights"]), tuple(doc["notes"]))

    def to_json(self) -> dict:
        return {"step_s": self.step_s, "stages_s": self.stages_s, "weights": self.weights, "notes": list(self.notes)}


@dataclass(frozen=True)
class StepRow:
    """One sampled step as the estimate's table shows it (``rows[i]`` of the document)."""

    step: int
    stages_s: dict
    step_s: float
    tokens_per_s_per_gpu: float
    rollout_tail_share: float
    rollout_engine_wait_share: float
    trainer_rank_wait_share: float
    notes: tuple


# The parts read back into their types (the document holds their ``to_json()``)
_TYPED = {"range": StepRange, "guarded": Guarded}


@dataclass
class EstimateResult:
    """``estimate`` / ``estimate --mode`` as one type: the run (``config``, ``model``, ``gpu``),
    the sampled steps (``rows``), their ``summary`` (stages, kernel families with their
    ``Price``, idle figures, the mode block), ``memory``, ``warnings``; then what an estimate
    carries where it applies (None: absent): the measured timings used (``providers``,
    ``timings_used``), a separated mode's ``memory_sides``, stated ``lengths``, a
    ``calibration`` with its step ``range`` and the ``guarded`` step (``Guarded``), the
    ``framework``: in the order the document wrote them before the type.
    ``extra``: keys a later version adds, kept through a round trip. The typed views the CLI
    renders: ``stages``, ``families``, ``steps``, ``mean_step_s``, ``mode``."""

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
    providers: dict | None = None
    memory_sides: dict | None = None
    timings_used: list | None = None
    lengths: dict | None = None
    calibration: dict | None = None
    range: StepRange | None = None
    guarded: Guarded | None = None
    framework: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict) -> EstimateResult:
        """The result a ``to_json()`` document (or an older one without ``schema_version``) holds."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
        kw = {k: doc[k] for k in names if k in doc}
        for k, typ in _TYPED.items():
            if kw.get(k) is not None:
                kw[k] = typ.from_json(kw[k])
        return cls(**kw, extra={k: v for k, v in doc.items() if k not in names and k != "schema_version"})

    @property
    def mode(self) -> str:
        return self.mode_block.get("mode", "sync")

    @property
    def mode_block(self) -> dict:
        """The execution mode's block (``summary.mode``): split, weight sync, busy shares, idle
        GPU-seconds by cause; empty before ``estimate_mode`` adds it."""
        return self.summary.get("mode") or {}

    def setting(self, name: str, default=None):
        """A setting of the run as priced (``config``, ``RunConfig``'s names), ``default`` where absent."""
        return self.config.get(name, default)

    @property
    def mean_step_s(self) -> float:
        return float(self.summary["mean_step_s"])

    @property
    def stages(self) -> tuple[StageTime, ...]:
        """The stages some sampled step spends time in, in ``STAGES`` order."""
        share = self.summary.get("stage_share", {})
        return tuple(StageTime(s, float(v), float(share.get(s, 0.0)))
                     for s, v in self.summary["mean_stages_s"].items()
                     if any(r["stages_s"].get(s, 0.0) > 0 for r in self.rows))

    @property
    def families(self) -> dict[str, FamilyCost]:
        """Kernel family -> its cost (sync mode; the separated modes break no step into families)."""
        return {f: FamilyCost(f, float(v["s"]), float(v["share"]), Price(v["status"]), dict(v["sources"]))
                for f, v in self.summary.get("families", {}).items()}

    @property
    def steps(self) -> tuple[StepRow, ...]:
        idle = ("rollout_tail_share", "rollout_engine_wait_share", "trainer_rank_wait_share")
        return tuple(StepRow(int(r["step"]), dict(r["stages_s"]), float(r["step_s"]), float(r["tokens_per_s_per_gpu"]),
                             *(float(r.get("idle", {}).get(k, 0.0)) for k in idle), tuple(r.get("notes", ())))
                     for r in self.rows)

    @property
    def notes(self) -> tuple[str, ...]:
        """The sampled steps' notes, each once (multi-turn pricing)."""
        return tuple(dict.fromkeys(n for r in self.rows for n in r.get("notes", ())))

    def to_json(self) -> dict:
        """The ``--json`` document: ``schema_version`` and every field set (``extra``'s keys last)."""
        out = {"schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            elif value is not None:
                out[f.name] = value.to_json() if hasattr(value, "to_json") else value
        return out


@dataclass
class ModeComparison:
    """``estimate --compare-modes``: one row per execution mode (``rows``: mode, split, step and
    its speedup over sync, generation and training seconds, weight sync, busy shares) and each
    mode's ``EstimateResult`` (``results``, sync first). ``to_json()`` is the ``--json``
    document, which keeps each mode's ``config`` and ``summary``: read back (``from_json``), a
    mode's other fields are empty."""

    rows: list
    results: dict

    @classmethod
    def from_json(cls, doc: dict) -> ModeComparison:
        empty = dict(profile="", model={}, gpu={}, seed=0, source="", rows=[], memory={})
        return cls(list(doc["modes"]), {k: EstimateResult(config=v["config"], summary=v["summary"], **empty)
                                         for k, v in doc["results"].items()})

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "modes": self.rows,
                "results": {k: {"config": v.config, "summary": v.summary} for k, v in self.results.items()}}
