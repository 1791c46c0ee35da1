"""verl's console log as a log format: one line per step, ``step:N - key:value - key:value ...``,
usually behind a ray prefix (``(TaskRunner pid=123)``) and ANSI colour codes, after the launch
script and the printed configs. Older verl names timings ``timing/<stage>``, newer
``timing_s/<stage>``; both are read into ``StepRecord.timings`` under the bare stage name (``gen``,
``old_log_prob``, ``ref``, ``values``, ``update_actor``, ...).

The reader is the boundary for log lines: a line longer than ``MAX_LINE_CHARS`` is passed over
(and said so), step numbers are bounded, values that do not parse as numbers are dropped. Being
the text every trainer prints, it is the registry's last format: its ``sniff`` takes any file.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from ..errors import PolytraceError
from . import launch
from .devices import scan_lines
from .record import MAX_LINE_CHARS, WANDB_LINE_CHARS, Steps, TrainingLog, _open_text

NAME = "verl-console"

_STEP = re.compile(r"(?:^|[\s)\]])step:(\d{1,9})\s{1,8}-\s{1,8}")
# The launch script and the printed configs come before the first step; lines kept for them.
MAX_HEAD_LINES = 200_000
# Lines after the first step line that may still hold the printed configs (ray workers print late).
_TAIL_CONFIG_LINES = 6000
# ...and at most this many characters of them (a script and a printed config are ~100 kB).
MAX_HEAD_CHARS = 50_000_000
# Keys longer than this are not metric names.
_MAX_KEY_CHARS = 200


# Ray's and Python logging's first dated line ("2025-03-24 00:34:21,907\tINFO worker.py:1843 --
# Started a local Ray instance."): the date a run started, which dates the verl it ran
_DATED = re.compile(r"^(?:\(\w+ pid=\d+\) )?(20\d\d-[01]\d-[0-3]\d)[ T][0-2]\d:[0-5]\d:[0-5]\d")
_ANSI = re.compile(r"\x1b?\[[0-9;]{0,16}m")


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



# Ray's start-up warning when the node already runs another Ray cluster (``ray._private.services``):
# ``Found multiple active Ray instances: {'10.0.0.1:6379', '10.0.0.1:58733'}``. Bounded, so a long
# line cannot make it slow.
_OTHER_RAY = re.compile(r"Found multiple active Ray instances: \{([^}]{0,2000})\}")


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
    steps = Steps(path)
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
                        entry=found.entry, variables=found.variables, notes=notes, devices=scan_lines(head),
                        started=next((m.group(1) for _, t in head if (m := _DATED.match(t))), ""))



def sniff(path: Path, head: str) -> bool:
    """Any text: the fallback format, tried last."""
    return True


def read(path: Path) -> TrainingLog:
    return read_console_log(path)
