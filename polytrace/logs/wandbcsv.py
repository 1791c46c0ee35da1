"""wandb's CSV export as a log format: one row per step, one column per metric (a panel export
names them ``<run> - <metric>``), the step in one of ``_STEP_COLUMNS``. It states no configuration:
the run's settings come from companion files (``--config``) or ``--set``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..errors import PolytraceError
from .record import MAX_LINE_CHARS, Steps, TrainingLog, _open_text

NAME = "wandb-csv"


def sniff(path: Path, head: str) -> bool:
    """A ``.csv`` name, or a first line of at least three comma-separated names one of which says step."""
    first = head.splitlines()[0] if head else ""
    return path.suffix.lower() == ".csv" or (first.count(",") >= 2 and "step" in first.lower()
                                             and "step:" not in first)


def read(path: Path) -> TrainingLog:
    return read_wandb_csv(path)


_STEP_COLUMNS = ("training/global_step", "_step", "Step", "step", "trainer/global_step")


def read_wandb_csv(path) -> TrainingLog:
    path = Path(path)
    steps = Steps(path)
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

