"""A toy log format for tests/logs/test_logs_registry.py: JSON lines, a header object naming the run's
flattened configuration and launch line, then one object per step. It is what a new format
module looks like (docs/adding-a-log-format.md): ``NAME``, ``sniff``, ``read`` into the record."""

from __future__ import annotations

import json
from pathlib import Path

from polytrace.errors import PolytraceError
from polytrace.logs.record import Steps, TrainingLog

NAME = "toy-jsonl"
_MAGIC = '{"toy_log":'


def sniff(path: Path, head: str) -> bool:
    return head.startswith(_MAGIC)


def read(path: Path) -> TrainingLog:
    steps = Steps(path)
    header: dict = {}
    with path.open(encoding="utf-8") as fh:
        for number, text in enumerate(fh, 1):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise PolytraceError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            if number == 1:
                header = obj
            else:
                steps.add(int(obj["step"]), {k: float(v) for k, v in obj["metrics"].items()}, number)
    return steps.finish(path, NAME, command=header.get("command", ""), printed=dict(header.get("config", {})),
                        notes=[f"read as the toy format, version {header['toy_log']}"])


def write(path: Path, log: TrainingLog) -> Path:
    """A read log (``TrainingLog``) written out in this format: its configuration and steps."""
    lines = [json.dumps({"toy_log": 1, "command": log.command,
                         "config": {k: v for k, v in log.config.items() if isinstance(v, (int, float, str, bool))}})]
    lines += [json.dumps({"step": s.step, "metrics": s.metrics}) for s in log.steps]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
