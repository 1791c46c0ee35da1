"""Reading a training log: the file's format asked of the registry (``formats``), then the
companion files named after it or given (``--config``), and a multi-turn run's generated share.
A wandb run folder (``output.log`` beside ``config.yaml`` and ``wandb-metadata.json``) is read as
its log with its companion files.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PolytraceError
from . import companion as _companion
from . import formats
from .agent import agent_step
from .console import read_console_log
from .generations import measure_generated_share
from .record import EXTRA_STAGES, StepRecord, TrainingLog
from .wandbcsv import read_wandb_csv

__all__ = ["EXTRA_STAGES", "StepRecord", "TrainingLog", "read_console_log", "read_log", "read_wandb_csv"]


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
            head = fh.read(formats.HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read log ({exc.strerror or exc})") from None
    return formats.find(path, head).read(path)
