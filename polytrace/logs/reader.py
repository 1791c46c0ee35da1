"""Readers for real RL training logs: verl console output and wandb CSV exports.

A verl console log has one line per step, ``step:N - key:value - key:value ...``, usually behind a
ray prefix (``(TaskRunner pid=123)``) and ANSI colour codes. Older verl names timings
``timing/<stage>``, newer ``timing_s/<stage>``; both are read into ``StepRecord.timings`` under the
bare stage name (``gen``, ``old_log_prob``, ``ref``, ``values``, ``update_actor``, ...).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PolytraceError
from . import launch

_ANSI = re.compile(r"(?:\x1b)?\[[0-9;]*m")
_STEP = re.compile(r"(?:^|[\s)\]])step:(\d+)\s+-\s+(.*)$")
_TIMING_PREFIXES = ("timing_s/", "timing/")
# Seconds that are not part of the training step proper: accounted separately.
EXTRA_STAGES = ("testing", "save_checkpoint")


@dataclass
class StepRecord:
    step: int
    metrics: dict[str, float]
    timings: dict[str, float]

    def get(self, key: str, default=None):
        return self.metrics.get(key, default)


@dataclass
class TrainingLog:
    path: str
    format: str  # "verl-console" or "wandb-csv"
    steps: list[StepRecord]
    command: str = ""  # the launch line the configuration was read from
    overrides: dict = field(default_factory=dict)  # hydra overrides on the launch lines
    printed: dict = field(default_factory=dict)  # flattened config printed by verl at start-up
    model_candidates: list = field(default_factory=list)  # every model path the launch lines name
    hf_config: dict | None = None  # the model config transformers printed, when the log has it

    @property
    def config(self) -> dict:
        """Flattened config: the printed one, filled in from the overrides."""
        merged = dict(self.overrides)
        merged.update(self.printed)
        return merged

    @property
    def timing_style(self) -> str:
        for s in self.steps:
            for k in s.metrics:
                if k.startswith("timing_s/"):
                    return "timing_s/"
                if k.startswith("timing/"):
                    return "timing/"
        return ""

    def stages(self) -> list[str]:
        """Stages with a timing on most steps, in the order they first appear."""
        counts: dict[str, int] = {}
        for s in self.steps:
            for k in s.timings:
                counts[k] = counts.get(k, 0) + 1
        half = max(1, len(self.steps) // 2)
        return [k for k, c in counts.items() if c >= half]


def strip_line(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r\n")


def _parse_metrics(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in body.split(" - "):
        part = part.strip()
        if ":" not in part:
            continue
        key, _, val = part.rpartition(":")
        key = key.strip()
        try:
            out[key] = float(val.strip())
        except ValueError:
            continue
    return out


def _timings(metrics: dict[str, float]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        for p in _TIMING_PREFIXES:
            if k.startswith(p):
                out[k[len(p):]] = v
    return out


def _finish(path, fmt, by_step: dict[int, dict], **kw) -> TrainingLog:
    steps = []
    for n in sorted(by_step):
        metrics = by_step[n]
        timings = _timings(metrics)
        if not timings:  # a validation-only line (e.g. step:0 before training)
            continue
        steps.append(StepRecord(step=n, metrics=metrics, timings=timings))
    if not steps:
        raise PolytraceError(f"{path}: no training step lines with timings (expected 'step:N - "
                             "timing_s/gen:... - ...' lines, or wandb CSV columns like timing_s/gen)")
    return TrainingLog(path=str(path), format=fmt, steps=steps, **kw)


def read_console_log(path) -> TrainingLog:
    path = Path(path)
    try:
        raw = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read log ({exc.strerror or exc})") from None
    lines = [strip_line(x) for x in raw.splitlines()]
    by_step: dict[int, dict] = {}
    for line in lines:
        m = _STEP.search(line)
        if not m:
            continue
        metrics = _parse_metrics(m.group(2))
        if metrics:
            by_step.setdefault(int(m.group(1)), {}).update(metrics)
    launch_lines = launch.launch_lines(lines)
    printed = launch.printed_config(lines)
    candidates = []
    for key in ("actor_rollout_ref.model.path", "critic.model.path"):
        candidates += [v for v in launch.all_override_values(lines, key) if isinstance(v, str)]
    flat_printed = launch.flatten(printed) if printed else {}
    for key in ("actor_rollout_ref.model.path", "critic.model.path", "reward_model.model.input_tokenizer"):
        v = flat_printed.get(key)
        if isinstance(v, str):
            candidates.append(v)
    return _finish(path, "verl-console", by_step,
                   command=launch_lines[-1] if launch_lines else "",
                   overrides=launch.overrides_from_lines(lines),
                   printed=flat_printed, model_candidates=candidates,
                   hf_config=launch.printed_model_config(lines))


_STEP_COLUMNS = ("training/global_step", "_step", "Step", "step", "trainer/global_step")


def read_wandb_csv(path) -> TrainingLog:
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read CSV ({exc.strerror or exc})") from None
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise PolytraceError(f"{path}: empty CSV") from None
        names = []
        for h in header:
            h = h.strip()
            if h.endswith("__MIN") or h.endswith("__MAX"):
                names.append(None)
                continue
            # wandb's panel export names columns "<run> - <metric>"
            names.append(h.split(" - ", 1)[1] if " - " in h else h)
        step_col = next((names.index(c) for c in _STEP_COLUMNS if c in names), None)
        if step_col is None:
            raise PolytraceError(f"{path}: no step column (one of {', '.join(_STEP_COLUMNS)})")
        by_step: dict[int, dict] = {}
        for row in reader:
            if len(row) <= step_col or not row[step_col].strip():
                continue
            try:
                step = int(float(row[step_col]))
            except ValueError:
                continue
            metrics = {}
            for name, cell in zip(names, row):
                if name is None or not cell.strip():
                    continue
                try:
                    v = float(cell)
                except ValueError:
                    continue
                if math.isfinite(v):
                    metrics[name] = v
            by_step.setdefault(step, {}).update(metrics)
    return _finish(path, "wandb-csv", by_step)


def read_log(path) -> TrainingLog:
    """A verl console log or a wandb CSV export, by content."""
    path = Path(path)
    if path.is_dir():
        raise PolytraceError(f"{path}: is a folder; expected a verl console log or a wandb CSV file")
    if not path.is_file():
        raise PolytraceError(f"{path}: no such log file")
    with path.open("rb") as fh:
        head = fh.read(4096).decode("utf-8", errors="replace")
    first = head.splitlines()[0] if head else ""
    if path.suffix.lower() == ".csv" or (first.count(",") >= 2 and "step" in first.lower()
                                         and "step:" not in first):
        return read_wandb_csv(path)
    return read_console_log(path)
