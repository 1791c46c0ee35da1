"""The one typed record every log format reads into (``TrainingLog``: its steps' metrics and
timings, the configuration its launch lines, printed config and companion files state, the
accelerator evidence, and where each piece came from), and the step bookkeeping the formats share.

A step logged twice with different values is an error (two runs, or a restart, in one file).
Values are kept as logged, NaN and infinities included: ``validate`` says which step it leaves out
and why.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PolytraceError
from .generations import GeneratedShare

_TIMING_PREFIXES = ("timing_s/", "timing/")
# Seconds that are not part of the training step proper: accounted separately.
EXTRA_STAGES = ("testing", "save_checkpoint")
# verl's step lines are 2-20 kB (a few hundred metrics); a line past this is a dump, not a step.
MAX_LINE_CHARS = 1_000_000
# wandb's ``output.log`` keeps the first 4096 characters of a console line: a step line that long
# was cut, and the metrics past the cut (the timings come last) are lost.
WANDB_LINE_CHARS = 4096


@dataclass
class StepRecord:
    step: int
    metrics: dict[str, float]
    timings: dict[str, float]
    line: int = 0  # the first line of the log holding this step

    def get(self, key: str, default=None):
        return self.metrics.get(key, default)


@dataclass
class TrainingLog:
    path: str
    format: str  # "verl-console" or "wandb-csv"
    steps: list[StepRecord]
    command: str = ""  # the launch line the configuration was read from
    overrides: dict = field(default_factory=dict)  # hydra overrides on the launch lines
    override_lines: dict = field(default_factory=dict)  # key -> line of the winning override
    printed: dict = field(default_factory=dict)  # flattened config printed by verl at start-up
    model_candidates: list = field(default_factory=list)  # every actor model path the launch commands name, in order
    hf_config: dict | None = None  # the model config transformers printed, when the log has it
    entry: str = ""  # the trainer module or script the run was launched with
    variables: dict = field(default_factory=dict)  # shell variables of the launch script
    notes: list = field(default_factory=list)  # what the reader passed over, one line each
    devices: list = field(default_factory=list)  # accelerator evidence (``devices.Evidence``), log then companions
    companion: dict = field(default_factory=dict)  # settings read from companion files (``--config``)
    companion_sources: dict = field(default_factory=dict)  # key -> the companion file it was read from
    companion_files: list = field(default_factory=list)
    host_gpus: tuple | None = None  # (GPUs of the host, file) from wandb-metadata.json's gpu_count
    timer_map: dict = field(default_factory=dict)  # stage -> the timer it was read from, where not its own
    started: str = ""  # the run's first dated line (YYYY-MM-DD), when it prints one: which verl it ran
    # a multi-turn run's generated share of its response tokens, measured on the validation
    # trajectories its wandb run folder keeps (``generations.measure_generated_share``)
    generated: GeneratedShare | None = None

    @property
    def config(self) -> dict:
        """Flattened config: the printed one, filled in from the overrides, then the companion files."""
        merged = dict(self.companion)
        merged.update(self.overrides)
        merged.update(self.printed)
        return merged

    def source_of(self, key: str) -> str:
        """Where a config value was read: the printed config, a launch line or a companion file."""
        if key in self.printed:
            return "the printed config"
        if key in self.override_lines:
            return f"the launch command (line {self.override_lines[key]})"
        if key in self.companion_sources:
            return self.companion_sources[key]
        return "the log"

    @property
    def mode(self) -> str:
        """How rollout and training were scheduled: ``sync`` (colocated, verl's default),
        ``one-step-off`` or ``fully-async``, from the entry point, the config and the metrics."""
        entry = self.entry.lower()
        if "fully_async" in entry or any(k.startswith("async_training.") for k in self.config):
            return "fully-async"
        if "one_step_off" in entry:
            return "one-step-off"
        for s in self.steps[:5]:
            if any(k.startswith("fully_async/") for k in s.metrics):
                return "fully-async"
            if "wait_prev_gen" in s.timings:
                return "one-step-off"
        return "sync"

    @property
    def timing_style(self) -> str:
        for s in self.steps:
            for k in s.metrics:
                if k.startswith("timing_s/"):
                    return "timing_s/"
                if k.startswith("timing/"):
                    return "timing/"
        return ""

    def working_copy(self) -> TrainingLog:
        """The record as read, for one more reading of its configuration (``validate`` prices a log
        on each GPU hypothesis from one read): the parts a reading extends are copied (the timings a
        ``--stage`` map or a recipe's timer name adds to, the companion files ``--config`` attaches,
        the notes), the metrics are shared. Without it a second reading would find the aliases the
        first added and skip their note."""
        return dataclasses.replace(
            self, steps=[dataclasses.replace(s, timings=dict(s.timings)) for s in self.steps],
            notes=list(self.notes), devices=list(self.devices), companion=dict(self.companion),
            companion_sources=dict(self.companion_sources), companion_files=list(self.companion_files),
            timer_map=dict(self.timer_map))

    def stages(self) -> list[str]:
        """Stages with a timing on most steps, in the order they first appear."""
        counts: dict[str, int] = {}
        for s in self.steps:
            for k in s.timings:
                counts[k] = counts.get(k, 0) + 1
        half = max(1, len(self.steps) // 2)
        return [k for k, c in counts.items() if c >= half]


def _timings(metrics: dict[str, float]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        for p in _TIMING_PREFIXES:
            if k.startswith(p):
                out[k[len(p):]] = v
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-9 * max(abs(a), abs(b))


class Steps:
    """Step metrics merged over lines; a step's key seen again with another value is an error."""

    def __init__(self, path):
        self.path = path
        self.by_step: dict[int, dict] = {}
        self.first_line: dict[int, int] = {}
        self.key_line: dict[tuple[int, str], int] = {}
        self.untimed: list[int] = []  # steps logged without a timing (validation-only or cut lines)
        self.cut: set[int] = set()  # steps whose line ends at wandb's console capture limit

    def add(self, step: int, metrics: dict, line: int, what: str = "line") -> None:
        have = self.by_step.setdefault(step, {})
        self.first_line.setdefault(step, line)
        for k, v in metrics.items():
            if k in have and not _same(have[k], v):
                first = self.key_line.get((step, k), self.first_line[step])
                raise PolytraceError(
                    f"{self.path}:{line}: step {step} is logged again with {k}={v:g} ({what} {first} had "
                    f"{have[k]:g}): conflicting duplicate steps, so the log mixes two runs (or a restart); "
                    f"keep one run's lines")
            if k not in have:
                have[k] = v
                self.key_line[(step, k)] = line

    def finish(self, path, fmt, **kw) -> TrainingLog:
        steps = []
        for n in sorted(self.by_step):
            metrics = self.by_step[n]
            timings = _timings(metrics)
            if not timings:  # a validation-only line (e.g. step:0 before training)
                self.untimed.append(n)
                continue
            steps.append(StepRecord(step=n, metrics=metrics, timings=timings, line=self.first_line[n]))
        cut = [n for n in self.untimed if n in self.cut]
        if cut and "notes" in kw:
            kw["notes"].append(
                f"{len(cut)} step line(s) cut at {WANDB_LINE_CHARS} characters (wandb's console capture keeps no "
                f"more of a line) lost their timings and are left out: steps {_span(cut)}")
        if not steps:
            raise PolytraceError(f"{path}: no training step lines with timings (expected 'step:N - "
                                 "timing_s/gen:... - ...' lines, or wandb CSV columns like timing_s/gen)")
        return TrainingLog(path=str(path), format=fmt, steps=steps, **kw)


def _span(steps: list[int]) -> str:
    """Step numbers as a short list: the first few and how many more."""
    head = ", ".join(str(n) for n in steps[:8])
    return head + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")


def _open_text(path: Path, what: str, newline: str = ""):
    try:
        return path.open("r", encoding="utf-8", errors="replace", newline=newline)
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None

