"""Real training logs: verl console output, wandb CSV exports and notebooks (formats registered in
``formats``), read into one record (``TrainingLog``), and the run configuration stated by their
launch command (shell scripts with variables, continuations and fences included)."""

from .launch import flatten, parse_overrides, parse_value
from .reader import EXTRA_STAGES, StepRecord, TrainingLog, read_console_log, read_log, read_wandb_csv
from .script import Unresolved

__all__ = [
    "EXTRA_STAGES",
    "StepRecord",
    "TrainingLog",
    "Unresolved",
    "flatten",
    "parse_overrides",
    "parse_value",
    "read_console_log",
    "read_log",
    "read_wandb_csv",
]
