"""The step model's scalars as one type, priors and calibrations alike (issue 35 item 2).

A step is priced at the roofline of ``efficiency.py`` and then scaled: a slowdown per kind of work
(and per family priced apart) and constant seconds per stage. Those scalars come from one of two
places, and ``Scalars`` says which, with the numbers: the shared priors (``CITED``: fitted once on
a corpus of logs by ``scripts/fit_priors.py``, cited from ``polytrace/data/priors.json``, and
resolved per run because they depend on its engine and recompute settings), or a calibration
(``FITTED``: one log's window, or stated stage times, in a calibration file). ``None`` where a
``Scalars`` is asked for means the base roofline, unscaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PolytraceError
from .efficiency import PRIORS, PRIORS_PATH, prior_scalars

CITED = "cited"  # the shared priors: fitted on a corpus elsewhere, cited here
FITTED = "fitted"  # a calibration: fitted on this run's own window


@dataclass(frozen=True)
class Scalars:
    """Scalars with their provenance: ``provenance`` (``CITED`` or ``FITTED``), ``source`` (the
    priors file, or the calibration file / what the fit read), ``window`` (what the fit saw, where
    known: ``"first 10 steps"``) and ``values`` (name -> number, the names
    ``compose.estimate.calibrated_kernels`` reads; empty for the priors, which ``for_run``
    resolves under a run's settings)."""

    provenance: str
    source: str
    window: str | None = None
    values: dict = field(default_factory=dict)

    @classmethod
    def priors(cls) -> Scalars:
        return cls(CITED, str(PRIORS_PATH), "the priors' corpus of logs (priors.json 'provenance')")

    @classmethod
    def fitted(cls, values: dict, source: str, window: str | None = None) -> Scalars:
        return cls(FITTED, str(source), window, dict(values))

    @property
    def is_priors(self) -> bool:
        return self.provenance == CITED

    def for_run(self, eager: bool, gradient_checkpointing: bool, gpu=None) -> dict:
        """The numbers that price a run with these engine (``eager``) and recompute settings; the
        priors on ``gpu`` (a device off the corpus: ``devices.scale_priors``)."""
        if self.is_priors:
            return prior_scalars(eager=eager, gradient_checkpointing=gradient_checkpointing, gpu=gpu)
        return dict(self.values)


def as_scalars(calibration) -> Scalars | None:
    """A ``Scalars`` from what a caller gives: one itself, None (the base roofline) or the name
    ``efficiency.PRIORS`` (``Scalars.priors()``). A plain mapping of numbers is refused: it does not
    say where they come from, which every estimate prints (``Scalars.fitted(values, source)``)."""
    if calibration is None or isinstance(calibration, Scalars):
        return calibration
    if isinstance(calibration, str):
        if calibration == PRIORS:
            return Scalars.priors()
        raise PolytraceError(f"calibration {calibration!r}: give the priors ({PRIORS!r}) or a Scalars")
    if isinstance(calibration, dict):
        raise PolytraceError("calibration given as a dict of scalars: give a Scalars, which names where they come "
                             "from (Scalars.fitted(values, source), or Scalars.priors())")
    raise PolytraceError(f"calibration of type {type(calibration).__name__}: give the priors or a Scalars")
