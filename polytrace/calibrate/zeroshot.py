"""``polytrace validate LOG --zero-shot``: the shared priors scored on a log without fitting
anything to it.

Every usable step of the log is priced from its configuration and length statistics (as
``validate`` does) and predicted with the priors (``polytrace/data/priors.json``) alone: per stage
and for the step, the mean predicted and actual seconds, their ratio, the median |pred/actual - 1|
and the accuracy (100% - MAPE), beside the base roofline's (the model before the priors: the naive
zero-shot predictor).
"""

from __future__ import annotations

import dataclasses
import os

from ..provenance import file_sha256
from ..stepmodel.devices import scale_priors
from ..stepmodel.efficiency import load_priors
from .corpus import Corpus
from .logconfig import Overrides
from .priors import score


@dataclasses.dataclass(frozen=True)
class PriorsUsed:
    """The priors file scored: its ``commit`` and ``date`` and how many ``logs`` it was fitted on."""

    commit: str | None
    date: str | None
    logs: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ZeroShotResult:
    """``polytrace validate --zero-shot``: the ``log`` read (its ``format``, execution ``mode``,
    usable ``steps``, timed ``stages``), the run's ``config``, ``notes``, per stage and for the
    step the ``accuracy`` entry (``priors.score``: predicted and actual seconds, ratio, accuracy,
    the base roofline's beside them), and the ``priors`` scored (commit, date, logs fitted on).
    ``to_json()`` is the ``--json`` document, these keys in this order."""

    log: str
    format: str
    mode: str
    steps: int
    stages: list
    config: dict
    notes: list
    accuracy: dict
    priors: PriorsUsed

    @classmethod
    def from_json(cls, doc: dict) -> ZeroShotResult:
        kw = {f.name: doc[f.name] for f in dataclasses.fields(cls)}
        return cls(**{**kw, "priors": PriorsUsed(**doc["priors"])})

    def to_json(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "priors": self.priors.to_json()}


def zero_shot(path, overrides: Overrides | None = None, priors_path: str | None = None) -> ZeroShotResult:
    from .validate import _overlapped, _timed_stages, prepare

    log, run, notes, rows, split = prepare(path, overrides)
    stages, rows = _timed_stages(rows, len(rows))
    doc = scale_priors(load_priors(priors_path), run.gpu)  # a device off the corpus: published fractions
    # the file read (a wandb run folder's files/output.log), not the folder given
    corpus = Corpus(str(path), rows, stages, run.eager, run.gradient_checkpointing, file_sha256(log.path),
                    _overlapped(split))
    per_stage = score(doc, corpus)
    prov = doc.get("provenance", {})
    fitted_on = [entry["name"] for entry in prov.get("logs", [])]
    if os.path.basename(str(path)) in fitted_on:
        notes = notes + [f"{os.path.basename(str(path))} is one of the logs the priors were fitted on: this score is "
                         "in-sample (the leave-one-log-out score is in the priors file and docs/step-model.md)"]
    if split.mode != "sync":
        notes = notes + [f"{split.mode} run: the step is priced as the trainer's stages plus the priors' time outside "
                         "them; generation overlaps"]
    return ZeroShotResult(log=str(path), format=log.format, mode=split.mode, steps=len(rows), stages=stages,
                          config=run.to_dict(), notes=notes, accuracy=per_stage,
                          priors=PriorsUsed(prov.get("commit"), prov.get("date"), len(fitted_on)))
