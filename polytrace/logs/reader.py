"""Readers for real RL training logs: verl console output and wandb CSV exports.

A verl console log has one line per step, ``step:N - key:value - key:value ...``, usually behind a
ray prefix (``(TaskRunner pid=123)``) and ANSI colour codes. Older verl names timings
``timing/<stage>``, newer ``timing_s/<stage>``; both are read into ``StepRecord.timings`` under the
bare stage name (``gen``, ``old_log_prob``, ``ref``, ``values``, ``update_actor``, ...).

The reader is the boundary for log lines: a line longer than ``MAX_LINE_CHARS`` is passed over
(and said so), step numbers are bounded, values that do not parse as numbers are dropped, and a
step logged twice with different values is an error (two runs, or a restart, in one file). Values
are kept as logged, NaN and infinities included: ``validate`` says which step it leaves out and why.
"""

from __future__ import annotations

import contextlib
import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PolytraceError
from . import companion as _companion
from . import launch
from .agent import agent_step
from .devices import scan_lines
from .generations import GeneratedShare, measure_generated_share
from .notebook import looks_like_notebook, read_notebook_lines

_ANSI = re.compile(r"\x1b?\[[0-9;]{0,16}m")
_STEP = re.compile(r"(?:^|[\s)\]])step:(\d{1,9})\s{1,8}-\s{1,8}")
# Ray's start-up warning when the node already runs another Ray cluster (``ray._private.services``):
# ``Found multiple active Ray instances: {'10.0.0.1:6379', '10.0.0.1:58733'}``. Bounded, so a long
# line cannot make it slow.
_OTHER_RAY = re.compile(r"Found multiple active Ray instances: \{([^}]{0,2000})\}")
_TIMING_PREFIXES = ("timing_s/", "timing/")
# Seconds that are not part of the training step proper: accounted separately.
EXTRA_STAGES = ("testing", "save_checkpoint")
# verl's step lines are 2-20 kB (a few hundred metrics); a line past this is a dump, not a step.
MAX_LINE_CHARS = 1_000_000
# The launch script and the printed configs come before the first step; lines kept for them.
MAX_HEAD_LINES = 200_000
# Lines after the first step line that may still hold the printed configs (ray workers print late).
_TAIL_CONFIG_LINES = 6000
# ...and at most this many characters of them (a script and a printed config are ~100 kB).
MAX_HEAD_CHARS = 50_000_000
# wandb's ``output.log`` keeps the first 4096 characters of a console line: a step line that long
# was cut, and the metrics past the cut (the timings come last) are lost.
WANDB_LINE_CHARS = 4096
# Keys longer than this are not metric names.
_MAX_KEY_CHARS = 200


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


# A value as newer verl prints it under numpy 2 or torch: ``np.float64(0.25)``, ``tensor(3.0)``.
_WRAPPED = re.compile(r"^(?:np\.|numpy\.)?(?:float|int|uint)(?:16|32|64)?\(([^()]{1,40})\)$|^tensor\(([^()]{1,40})\)$")
# A number with another process's output glued on after it (ray writes lines from several
# processes into one stream without waiting for a newline): ``0.173(raylet) [2026-...] ...``,
# ``24.5(WorkerDict pid=12) ...``. The number is kept, the rest is not verl's.
_GLUED = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\((?:raylet|pid=\d+|[\w:.\-]+ pid=\d+)")


def _number(val: str) -> float | None:
    """A metric value as verl logs it, else None (dropped)."""
    if len(val) <= 64:
        try:
            return float(val)
        except ValueError:
            pass
        m = _WRAPPED.match(val)
        if m:
            try:
                return float(m.group(1) or m.group(2))
            except ValueError:
                return None
    m = _GLUED.match(val)
    return float(m.group(1)) if m else None


def _parse_metrics(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in body.split(" - "):
        key, sep, val = part.rpartition(":")
        if sep and "(" in part and (" " in key.strip() or _number(val.strip()) is None):
            # another process's output glued to the last value can hold colons of its own
            key, sep, val = part.partition(":")
        if not sep:
            continue
        key = key.strip()
        val = val.strip()
        if not key or len(key) > _MAX_KEY_CHARS or " " in key:
            continue
        v = _number(val)
        if v is not None:
            out[key] = v
    return out


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


class _Steps:
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


def shared_node_notes(lines) -> list[str]:
    """Notes for ``(line number, text)`` pairs that show the run sharing its node with another
    job: Ray's warning that another Ray cluster was already active there. Stage times then carry
    that job's load, which nothing in the log measures: a stage that drifts while the lengths stay
    flat (the host-bound generation first: vLLM's scheduler and sampler compete for the CPUs) is
    read against it."""
    for number, text in lines:
        m = _OTHER_RAY.search(text)
        if m:
            count = len([a for a in m.group(1).split(",") if a.strip()])
            return [f"line {number}: Ray found {count} Ray clusters active on the node at start-up; "
                    "another job may have shared its CPUs or GPUs, and stage times that drift while the "
                    "lengths stay flat may be its load (nothing logged measures it)"]
    return []


def read_console_log(path, lines=None, notes=()) -> TrainingLog:
    """A verl console log; ``lines`` (text lines) stand for the file's content when the console
    text came out of another container (a notebook cell), and ``notes`` say where from."""
    path = Path(path)
    steps = _Steps(path)
    head: list[tuple[int, str]] = []  # (line number, text) before the first step, for the launch
    long_lines = 0
    first_step_line = 0
    after_first = 0
    head_chars = 0
    with (_open_text(path, "log", newline="\n") if lines is None  # line numbers as editors count them
          else contextlib.nullcontext(lines)) as fh:
        try:
            for number, raw in enumerate(fh, 1):
                if len(raw) > MAX_LINE_CHARS:
                    long_lines += 1
                    continue
                raw = raw.rstrip("\r\n")
                # progress bars redraw with bare carriage returns: each piece is a line of output
                for piece in raw.split("\r") if "\r" in raw else (raw,):
                    line = strip_line(piece) if "[" in piece else piece
                    if "step:" in line:
                        m = _STEP.search(line)
                        if m:
                            metrics = _parse_metrics(line[m.end():])
                            if metrics:
                                steps.add(int(m.group(1)), metrics, number)
                                if len(raw) == WANDB_LINE_CHARS:
                                    steps.cut.add(int(m.group(1)))
                                first_step_line = first_step_line or number
                                continue
                    if head_chars + len(line) > MAX_HEAD_CHARS:
                        continue
                    if not first_step_line:
                        if len(head) < MAX_HEAD_LINES:
                            head.append((number, line))
                            head_chars += len(line)
                    elif after_first < _TAIL_CONFIG_LINES:
                        head.append((number, line))  # workers print the model config after the trainer starts
                        head_chars += len(line)
                        after_first += 1
        except OSError as exc:
            raise PolytraceError(f"{path}: cannot read log ({exc.strerror or exc})") from None
    notes = list(notes)
    if long_lines:
        notes.append(f"passed over {long_lines} line(s) longer than {MAX_LINE_CHARS:,} characters "
                     "(not verl output)")
    notes.extend(shared_node_notes(head))
    script_lines = [(n, t) for n, t in head if not first_step_line or n < first_step_line]
    found = launch.read_launch(script_lines)
    texts = [t for _, t in head]
    printed = launch.printed_config(texts, head=len(texts))
    flat_printed = launch.flatten(printed) if printed else {}
    candidates = list(found.model_paths)  # the printed config's paths are in ``printed``
    return steps.finish(path, "verl-console",
                        command=found.commands[-1][1] if found.commands else "",
                        overrides=found.overrides, override_lines=found.lines,
                        printed=flat_printed, model_candidates=candidates,
                        hf_config=launch.printed_model_config(texts, head=len(texts)),
                        entry=found.entry, variables=found.variables, notes=notes, devices=scan_lines(head))


_STEP_COLUMNS = ("training/global_step", "_step", "Step", "step", "trainer/global_step")


def read_wandb_csv(path) -> TrainingLog:
    path = Path(path)
    steps = _Steps(path)
    csv.field_size_limit(MAX_LINE_CHARS)
    with _open_text(path, "CSV") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
            names = []
            runs: dict[str, str] = {}  # metric -> the run whose column it came from
            for h in header:
                h = h.strip()
                if h.endswith("__MIN") or h.endswith("__MAX"):
                    names.append(None)
                    continue
                # wandb's panel export names columns "<run> - <metric>"
                run, _, metric = h.rpartition(" - ") if " - " in h else ("", "", h)
                if metric in runs and runs[metric] != run:
                    raise PolytraceError(f"{path}:1: columns of two runs ({runs[metric]!r} and {run!r}) for "
                                         f"{metric}: the export mixes two runs; export one run per file")
                runs[metric] = run
                names.append(metric)
            step_col = next((names.index(c) for c in _STEP_COLUMNS if c in names), None)
            if step_col is None:
                raise PolytraceError(f"{path}: no step column (one of {', '.join(_STEP_COLUMNS)})")
            for row in reader:
                if len(row) <= step_col or not row[step_col].strip():
                    continue
                try:
                    step_value = float(row[step_col])
                except ValueError:
                    continue
                if not math.isfinite(step_value) or not 0 <= step_value < 1e9 or step_value != int(step_value):
                    raise PolytraceError(f"{path}:{reader.line_num}: step {row[step_col]!r} is not a step number "
                                         "(a whole number below 10^9)")
                metrics = {}
                for name, cell in zip(names, row):
                    if name is None or not cell.strip() or len(cell) > 64:
                        continue
                    try:
                        metrics[name] = float(cell)
                    except ValueError:
                        continue
                steps.add(int(step_value), metrics, reader.line_num, what="row ending on line")
        except StopIteration:
            raise PolytraceError(f"{path}: empty CSV") from None
        except csv.Error as exc:
            raise PolytraceError(f"{path}:{reader.line_num}: not a readable CSV row ({exc})") from None
        except OSError as exc:
            raise PolytraceError(f"{path}: cannot read CSV ({exc.strerror or exc})") from None
    return steps.finish(path, "wandb-csv")


def read_log(path, configs=()) -> TrainingLog:
    """A verl console log, a wandb CSV export or a Jupyter notebook (the cell that printed the
    steps), by content; a wandb run folder (``output.log``
    beside ``config.yaml`` and ``wandb-metadata.json``) with its companion files. ``configs``:
    more companion files (``--config``)."""
    path = Path(path)
    if path.is_dir():
        log_path, found = _companion.run_folder(path)
        log = read_log(log_path, [*found, *configs])
        log.notes.append(f"read {log_path} with its companion files "
                         f"{', '.join(str(p) for p in found) or '(none found)'}")
        return log
    log = _read_file(path)
    beside = _companion.siblings(path)
    given = {Path(c).resolve() for c in configs}
    beside = [p for p in beside if p.resolve() not in given]
    if beside or configs:
        _companion.attach(log, [_companion.read_companion(c) for c in [*beside, *configs]])
    if beside:
        log.notes.append(f"read the companion file(s) named after the log: {', '.join(p.name for p in beside)}")
    if any((a := agent_step(s.metrics)) is not None and a.multiturn for s in log.steps):
        # only a multi-turn run prices the split; single-turn runs log these tables too (MBs of JSON)
        log.generated = measure_generated_share(path.parent, log.notes)
    return log


def _read_file(path: Path) -> TrainingLog:
    if not path.exists():
        raise PolytraceError(f"{path}: no such log file")
    if not path.is_file():
        raise PolytraceError(f"{path}: not a regular file (a pipe or a device); save the log to a file first")
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read log ({exc.strerror or exc})") from None
    if looks_like_notebook(path, head):
        lines, note = read_notebook_lines(path)
        return read_console_log(path, lines=lines, notes=[note])
    first = head.splitlines()[0] if head else ""
    if path.suffix.lower() == ".csv" or (first.count(",") >= 2 and "step" in first.lower()
                                         and "step:" not in first):
        return read_wandb_csv(path)
    return read_console_log(path)
