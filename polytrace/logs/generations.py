"""The share of a multi-turn run's response tokens the model generated, measured from the
trajectories its wandb run folder keeps.

verl logs validation generations as wandb tables (``trainer.log_val_generations``):
``files/media/table/val/generations_<step>_<hash>.table.json``, columns ``step``, then
``input_k``, ``output_k``, ``score_k`` per sample, each table holding every validation so far. In
an agent loop's output a tool turn is the text verl appended after a tool call:
``user\\n<tool_response>\\n...\\n</tool_response>`` then ``assistant\\n`` (Qwen's hermes format, its
special tokens stripped by the decode); the rest the model wrote. The share is counted in
characters: the same tokenizer cuts both parts, and a sandbox's output (digits, code text, a
traceback) runs about as many characters a token as the model's own reasoning and code. The
trajectories are validation ones (another prompt set than training's, the same policy and tools),
the nearest the run's own logs come to its training trajectories: verl does not log the split of
those.

A table that is not readable JSON of that shape is passed over with a note; none readable, no
measurement (the caller keeps its prior).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# a table past this is no validation dump (verl's hold a few MB for 20 validations of 32 samples)
MAX_TABLE_BYTES = 64_000_000
TABLE_GLOB = "generations_*.table.json"
# where a run folder keeps them, and where they sit beside ``files/output.log`` when given the log
TABLE_DIRS = ("files/media/table", "media/table")
OPEN, CLOSE = "<tool_response>", "</tool_response>"
BEFORE, AFTER = "user\n", "assistant\n"  # the roles around a tool turn once the special tokens are stripped
_STEP = re.compile(r"generations_(\d+)_")


@dataclass(frozen=True)
class GeneratedShare:
    share: float  # generated characters over response characters
    source: str  # the table it was measured on
    trajectories: int
    tool_turns: int


def table_files(folder) -> list[Path]:
    """A run folder's generation tables, latest validation first (verl's tables accumulate)."""
    folder = Path(folder)
    found: list[Path] = []
    for sub in TABLE_DIRS:
        base = folder / sub
        if base.is_dir():
            found += [p for p in base.rglob(TABLE_GLOB) if p.is_file()]

    def step(p: Path) -> int:
        m = _STEP.search(p.name)
        return int(m.group(1)) if m else -1

    return sorted(set(found), key=lambda p: (step(p), p.name), reverse=True)


def tool_turn_chars(text: str) -> tuple[int, int]:
    """(characters of the tool turns in ``text``, their number): each ``<tool_response>`` to its
    ``</tool_response>``, with the ``user`` role before it and the ``assistant`` one after where
    they are. One pass: an opening tag without its closing one ends the count."""
    chars = count = 0
    at = 0
    while True:
        start = text.find(OPEN, at)
        if start < 0:
            break
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            break
        end += len(CLOSE)
        if text.startswith(BEFORE, start - len(BEFORE)) and start >= len(BEFORE):
            start -= len(BEFORE)
        if text.startswith("\n", end):
            end += 1
        if text.startswith(AFTER, end):
            end += len(AFTER)
        chars += end - start
        count += 1
        at = end
    return chars, count


def _measure_table(doc) -> tuple[int, int, int, int] | None:
    """(response characters, tool-turn characters, trajectories, tool turns) of a table, or None
    when it is not one."""
    if not isinstance(doc, dict):
        return None
    columns, data = doc.get("columns"), doc.get("data")
    if not isinstance(columns, list) or not isinstance(data, list):
        return None
    outputs = [i for i, c in enumerate(columns) if isinstance(c, str) and c.startswith("output_")]
    if not outputs:
        return None
    total = tool = n = turns = 0
    for row in data:
        if not isinstance(row, list):
            continue
        for i in outputs:
            text = row[i] if i < len(row) else None
            if not isinstance(text, str):
                continue
            n += 1
            total += len(text)
            chars, count = tool_turn_chars(text)
            tool += chars
            turns += count
    return (total, tool, n, turns) if n and total else None


def measure_generated_share(folder, notes: list[str]) -> GeneratedShare | None:
    """The generated share of the latest readable generation table under ``folder`` (a wandb run
    folder, or the ``files/`` folder of its ``output.log``); the tables passed over (unreadable,
    too large, not of verl's shape) are named in one note."""
    skipped: list[str] = []
    found = None
    for path in table_files(folder):
        try:
            size = path.stat().st_size
            if size > MAX_TABLE_BYTES:
                skipped.append(f"{path.name} ({size:,} bytes, past {MAX_TABLE_BYTES:,})")
                continue
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            skipped.append(f"{path.name} (not readable JSON: {type(exc).__name__})")
            continue
        counts = _measure_table(doc)
        if counts is None:
            skipped.append(f"{path.name} (no output_k columns of text)")
            continue
        total, tool, n, turns = counts
        found = GeneratedShare(1.0 - tool / total, str(path), n, turns)
        break
    if skipped:
        shown = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        notes.append(f"generation tables passed over in {Path(folder) / 'media' / 'table'}: {shown}")
    return found


__all__ = ["GeneratedShare", "measure_generated_share", "table_files"]
