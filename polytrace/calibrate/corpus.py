"""The corpus of public step logs the priors are fitted on: each log read, configured and priced as
``polytrace validate`` does, on the GPU its publisher states (``polytrace/data/corpus_gpus.json``)
or the one the steps allow, and kept as ``Corpus``: its rows, timed stages, engine settings and
what it ran on, with its priced seconds per kind of work (``Corpus.matrices``) computed once.

Each log is priced on its GPU: the log's own evidence, else the GPU its publishing repository
states (``polytrace/data/corpus_gpus.json``, with the source), else an assumed A100 that is kept
only if no step beats its peak roofline; a rejected hypothesis climbs ``INFER_LADDER`` to the
slowest GPU the steps allow, and the log's provenance says which and why.

``calibrate/priors.py`` fits the shared priors on these; ``calibrate/folds.py`` groups them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import PolytraceError
from ..provenance import file_sha256
from ..run.spec import default
from ..stepmodel.efficiency import prior_kind, roofline_share
from .fit import StepData
from .gpuinfer import ASSUMED_NOTE, INFER_LADDER, INFERRED_NOTE, NOT_STATED
from .gpuinfer import roofline_margin as gpu_roofline_margin

# Steps of a log the fit reads: up to this many, evenly spaced (``Corpus.sample``).
ROWS_PER_LOG = 40


# The GPU of each corpus log whose publisher states it (the log itself does not): data with sources.
CORPUS_GPUS_PATH = Path(__file__).resolve().parents[1] / "data" / "corpus_gpus.json"


@dataclass(frozen=True)
class LogFacts:
    """What a corpus log ran on, as the priors file records it and the folds group the logs by."""

    gpu: str = ""  # the preset priced
    gpu_source: str = ""  # where that GPU comes from (the publisher, the log, an inference)
    model: str = ""  # the actor's preset (``folds``)
    strategy: str | None = None  # its trainer backend; unset: the RunSpec's default
    series: str = ""  # logs of one publisher's recipe and cluster share one weight (``source_weight``)


class Corpus:
    """One log of the corpus: its rows (priced), stages and engine settings."""

    def __init__(self, name: str, rows: list[StepData], stages: list[str], eager: bool, ckpt: bool, sha256: str,
                 overlapped: tuple = (), facts: LogFacts = LogFacts()):
        self.name, self.rows, self.stages, self.eager, self.ckpt, self.sha256 = name, rows, stages, eager, ckpt, sha256
        self.overlapped = tuple(overlapped)  # stages off the step's critical path (async generation)
        self.gpu, self.gpu_source = facts.gpu, facts.gpu_source  # the preset priced; where it comes from
        self.model = facts.model  # the actor's preset (``folds``)
        self.strategy = facts.strategy or default("strategy")  # its trainer backend; unset: the RunSpec's default
        self.series = facts.series  # logs of one publisher's recipe and cluster share one weight (``source_weight``)
        self._kept_memo: dict = {}  # ``_kept``: what every fold's fit asks of this log again

    def kind(self, group: str, family: str) -> str:
        return prior_kind(group, family, self.eager, self.ckpt)

    def sample(self, k: int = ROWS_PER_LOG) -> list[StepData]:
        if len(self.rows) <= k:
            return self.rows
        idx = np.unique(np.linspace(0, len(self.rows) - 1, k).round().astype(int))
        return [self.rows[i] for i in idx]

    def matrices(self, kinds: list[str], rows: list[StepData]):
        """Per stage: rows x kinds modelled seconds, and its peak-roofline bound; actual seconds per
        stage and step; modelled seconds outside the stages; per stage, seconds taken as logged (a
        multi-turn step's tool wait: the tools' time, which no prior scales)."""
        y = {k: np.array([r.actual[k] for r in rows]) for k in self.stages + ["step"]}
        other = np.array([r.other_s for r in rows])
        # the priced seconds per kind are the same in every fold that fits on this log (a group-held-out
        # evaluation fits 38 times and prices each log's roofline in each: 1,782 calls, ~45% of
        # folds.evaluate's CPU); the arrays are read-only
        x, b, fixed = self._kept(("priced", tuple(kinds)), rows, lambda: self._priced(kinds, rows))
        return x, b, y, other, fixed

    def kind_families(self) -> dict[str, frozenset]:
        """Kind -> the kernel families with priced work of that kind on this log's sampled rows
        (kept, as ``matrices``' prices: every fold's fit asks again)."""
        rows = self.sample()

        def families():
            out: dict[str, set] = {}
            for r in rows:
                for fams in r.families.values():
                    for (g, f), v in fams.items():
                        if v > 0 and g != "tool":
                            out.setdefault(self.kind(g, f), set()).add(f)
            return {k: frozenset(v) for k, v in out.items()}

        return self._kept(("kind_families",), rows, families)

    def _kept(self, what: tuple, rows: list[StepData], compute):
        """``compute()`` once per ``what``, engine settings, stages and rows of this log; the rows are
        held with the entry, so an id in the key is never reused while it lives."""
        key = (*what, self.eager, self.ckpt, tuple(self.stages), tuple(map(id, rows)))
        if key not in self._kept_memo:
            self._kept_memo[key] = (tuple(rows), compute())
        return self._kept_memo[key][1]

    def _priced(self, kinds: list[str], rows: list[StepData]):
        ki = {k: i for i, k in enumerate(kinds)}
        x, b, fixed = {}, {}, {}
        for s in self.stages:
            x[s] = np.zeros((len(rows), len(kinds)))
            b[s] = np.zeros((len(rows), len(kinds)))
            fixed[s] = np.zeros(len(rows))
            for i, r in enumerate(rows):
                for (g, f), v in r.families.get(s, {}).items():
                    if g == "tool":
                        fixed[s][i] += v
                        continue
                    k = ki[self.kind(g, f)]
                    x[s][i, k] += v
                    b[s][i, k] += v * roofline_share(f)
        for a in (*x.values(), *b.values(), *fixed.values()):
            a.setflags(write=False)
        return x, b, fixed


def load_corpus_gpus(path=None) -> dict:
    """``{log name: {"gpu", "sha256", "source"}}`` from ``polytrace/data/corpus_gpus.json``: the GPU
    each corpus log ran on where its publishing repository states it and the log does not."""
    import json

    path = Path(path or CORPUS_GPUS_PATH)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PolytraceError(f"{path}: cannot read the corpus GPUs: {e}") from None
    if (not isinstance(doc, dict) or doc.get("format") != "polytrace.corpus_gpus"
            or not isinstance(doc.get("logs"), dict)):
        raise PolytraceError(f"{path}: not a polytrace corpus GPUs file (format polytrace.corpus_gpus)")
    for name, e in doc["logs"].items():
        if not (isinstance(e, dict) and all(isinstance(e.get(k), str) and e[k] for k in ("gpu", "sha256", "source"))):
            raise PolytraceError(f"{path}: {name}: needs gpu, sha256 and source")
    return doc["logs"]


def load_corpus(folder, names: list[str] | None = None, gpus: dict | None = None) -> list[Corpus]:
    """Every ``*.log`` in ``folder`` (or the named ones), read, configured and priced as
    ``validate`` does, on the GPU its publisher states (``gpus``, default ``load_corpus_gpus()``;
    as ``--gpu``), else as ``validate`` finds it with no flag, an assumed GPU that some step beats
    replaced by the slowest ``INFER_LADDER`` preset none does (``gpuinfer``, as validate does); a log that cannot
    be read, a stated GPU whose file hash no longer matches or that a step beats, is an error
    naming it."""
    from .logconfig import Overrides
    from .validate import _overlapped, _timed_stages, prepare

    stated = load_corpus_gpus() if gpus is None else gpus
    root = Path(folder)
    if not root.is_dir():
        raise PolytraceError(f"{root}: no such folder of logs")
    paths = [root / n for n in names] if names else sorted(root.glob("*.log"))
    if not paths:
        raise PolytraceError(f"{root}: no *.log files")
    out = []
    for path in paths:
        sha, entry = file_sha256(path), stated.get(path.name)
        if entry is not None and entry["sha256"] != sha:
            raise PolytraceError(f"{path}: sha256 {sha} is not the {entry['sha256']} whose GPU the corpus GPUs file "
                                 f"states ({entry['gpu']}); check the log's source and update {CORPUS_GPUS_PATH.name}")
        log, run, notes, rows, split = prepare(path, Overrides(gpu=entry["gpu"]) if entry else None)
        stages, rows = _timed_stages(rows, len(rows))
        assumed = not entry and any(n.startswith(ASSUMED_NOTE) for n in notes)
        inferred = next((n for n in notes if n.startswith(INFERRED_NOTE)), None) if not entry else None
        if entry:
            source = entry["source"]
        elif inferred:  # validate's own inference (``gpuinfer``): an assumed A100 the steps beat
            source = "stated by neither the log nor its publisher; " + inferred.removeprefix(NOT_STATED)
        elif assumed:
            source = f"stated by neither the log nor its publisher: assumed {run.gpu.slug}, as validate does"
        else:
            source = "the log's own evidence"
        c = Corpus(path.name, rows, stages, run.eager, run.gradient_checkpointing, sha, _overlapped(split),
                   LogFacts(gpu=run.gpu.slug, gpu_source=source, model=run.model.name, strategy=run.strategy,
                            series=series_of(path, root)))
        margin = roofline_margin(c)
        if margin < 1.0 and (assumed or inferred):
            raise PolytraceError(f"{path}: every GPU of {', '.join(INFER_LADDER)} is beaten by some step "
                                 f"({run.gpu.slug}: {margin:.2f}x its peak-roofline seconds); state the log's GPU "
                                 f"in {CORPUS_GPUS_PATH.name}")
        if margin < 1.0:
            raise PolytraceError(f"{path}: some step beats the peak roofline of {run.gpu.slug} ({source}): a stage "
                                 f"takes {margin:.2f}x its peak-roofline seconds; the GPU cannot be that one")
        out.append(c)
    return out


def series_of(path: Path, root: Path) -> str:
    """``ladder/`` logs by dataset (GSM8K, MATH: ``math__`` names), the OPD runs together, else
    "" (the log is its own series)."""
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    if rel.startswith("ladder/"):
        return "ladder/math" if path.name.startswith("math__") else "ladder/gsm8k"
    if "_opd-" in path.name:
        return "more/opd"
    return ""


def roofline_margin(c: Corpus) -> float:
    """The smallest, over ``c``'s steps and timed stages, of actual seconds over the stage's
    peak-roofline seconds on ``c``'s GPU (``gpuinfer.roofline_margin``, as validate tests an assumed
    GPU). Below 1 a step beats the peak roofline: the GPU hypothesis is rejected."""
    return gpu_roofline_margin(c.rows, c.stages)
