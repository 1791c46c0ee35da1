"""Real training logs: verl console output and wandb CSV exports, and the run configuration stated
by their launch command."""

from .launch import flatten, parse_overrides, parse_value
from .reader import EXTRA_STAGES, StepRecord, TrainingLog, read_console_log, read_log, read_wandb_csv

__all__ = [
    "EXTRA_STAGES",
    "StepRecord",
    "TrainingLog",
    "flatten",
    "parse_overrides",
    "parse_value",
    "read_console_log",
    "read_log",
    "read_wandb_csv",
]
